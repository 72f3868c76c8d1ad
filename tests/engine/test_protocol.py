"""The proposer contract, exactly: a scripted proposer that knows the greedy continuation
offers ``a`` correct tokens then wrong ones; the engine must accept exactly ``a`` per step."""

from __future__ import annotations

import random

import torch
from tiny_checkpoints import VOCAB

from specscope.engine.loading import load_model
from specscope.engine.runner import Engine
from specscope.proposers import Proposal, ProposeInput, TargetPass


class ScriptedProposer:
    name = "scripted"

    def __init__(self, continuations: dict[tuple[int, ...], list[int]], k: int, num_layers: int) -> None:
        self.continuations, self.k = continuations, k
        self.hidden_layers = (0, num_layers)
        self.rng = random.Random(0)
        self.planned: list[int] = []  # correct drafts offered per row in the last proposal
        self.offered: list[int] = []
        self.passes: list[TargetPass] = []

    def observe(self, target_pass: TargetPass) -> None:
        self.passes.append(target_pass)
        batch, width = target_pass.tokens.shape
        assert [h.shape for h in target_pass.hidden] == [(batch, width, 64)] * 2
        if not target_pass.prefill:
            assert target_pass.num_committed == [a + 1 for a in self.planned]

    def propose(self, request: ProposeInput) -> Proposal:
        tokens = torch.zeros(len(request.slots), self.k, dtype=torch.long)
        self.planned, self.offered = [], []
        for row, history in enumerate(request.histories):
            assert int(request.positions[row]) == len(history) - 1
            assert int(request.last_tokens[row]) == history[-1]
            prompt = next(p for p in self.continuations if list(p) == history[: len(p)])
            future = self.continuations[prompt][len(history) - len(prompt) :]
            offered = min(self.rng.randint(0, self.k), len(future))  # beyond: argmax unknown
            correct = self.rng.randint(0, offered)
            draft = future[:correct] + [(t + 1) % VOCAB for t in future[correct:offered]]
            tokens[row, :offered] = torch.tensor(draft, dtype=torch.long)
            self.planned.append(correct)
            self.offered.append(offered)
        return Proposal(tokens, torch.tensor(self.offered))

    def release(self, slot: int) -> None:
        pass


def test_engine_accepts_exactly_the_agreeing_prefix(llama_dir):
    target = load_model(llama_dir)
    gen = torch.Generator().manual_seed(5)
    prompts = [tuple(torch.randint(2, VOCAB, (n,), generator=gen).tolist()) for n in (4, 9, 6, 13, 5)]
    plain = Engine(target, None, k=4, max_batch_size=5, max_seq_len=64)
    for i, prompt in enumerate(prompts):
        plain.add_request(str(i), list(prompt), 40, ignore_eos=True)
    reference = {str(i): [] for i in range(len(prompts))}
    while plain.num_running():
        for out in plain.step():
            reference[out.request_id] += out.new_token_ids
    continuations = {p: reference[str(i)] for i, p in enumerate(prompts)}
    proposer = ScriptedProposer(continuations, k=4, num_layers=target.config.num_layers)
    engine = Engine(target, proposer, k=4, max_batch_size=5, max_seq_len=64)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), list(prompt), 40, ignore_eos=True)
    outputs = {str(i): [] for i in range(len(prompts))}
    planned_total = offered_total = 0
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
        planned_total += sum(proposer.planned)
        offered_total += sum(proposer.offered)
    assert outputs == reference
    assert engine.stats.num_accepted_tokens == planned_total > 0
    assert engine.stats.num_draft_tokens == offered_total > planned_total
    assert proposer.passes[0].prefill and proposer.passes[0].num_committed == [len(p) for p in prompts]
