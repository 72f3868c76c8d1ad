"""Prefill and the speculative-decoding step, each one short function.

Invariant between steps, for every running sequence: the target's KV cache holds all of its
tokens except the newest one (``history[:-1]``), so the newest token sits at position
``len(history) - 1`` and is fed by the next step. Terms (accepted / recovered / bonus):
:mod:`specscope.engine.sampling`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specscope.engine.kv_cache import KVCache
from specscope.engine.model import Transformer
from specscope.engine.sampling import BatchSampling, verify_greedy, verify_sampled
from specscope.engine.timing import PhaseClock
from specscope.engine.proposer_api import (
    Proposal,
    ProposeInput,
    Proposer,
    TargetPass,
)


@dataclass
class StepResult:
    """Per row: ``emitted`` tokens (accepted drafts + the bonus/recovered token), ``draft_len``
    offered, ``accepted`` drafts; and ``tokens_verified`` = positions the target scored."""

    emitted: list[list[int]]
    draft_len: list[int]
    accepted: list[int]
    tokens_verified: int


@torch.no_grad()
def prefill(
    target: Transformer,
    cache: KVCache,
    proposer: Proposer | None,
    slots: list[int],
    prompts: list[list[int]],
    sampling: BatchSampling,
) -> list[int]:
    """Run the prompts (right-padded into one batch) and sample each sequence's first token."""
    device, width = target.device, max(len(p) for p in prompts)
    tokens = torch.tensor([p + [0] * (width - len(p)) for p in prompts], device=device)  # [batch, P]
    positions = torch.arange(width, device=device)[None, :].expand_as(tokens)
    layers = proposer.hidden_layers if proposer else ()
    hidden, aux = target(tokens, positions, cache, slots, kv_len=width, hidden_layers=layers)
    last = torch.tensor([len(p) - 1 for p in prompts], device=device)
    logits = target.logits(hidden[torch.arange(len(prompts), device=device), last])  # [batch, vocab]
    logits = sampling.constrain(logits)
    first = logits.argmax(-1) if sampling.all_greedy else sampling.sample(sampling.probs(logits))
    for slot, prompt in zip(slots, prompts):
        cache.lengths[slot] = len(prompt)
    if proposer is not None:
        proposer.observe(
            TargetPass(slots, tokens, [0] * len(slots), [len(p) for p in prompts], aux, prefill=True)
        )
    return first.tolist()


@torch.no_grad()
def sd_step(
    target: Transformer,
    cache: KVCache,
    proposer: Proposer | None,
    slots: list[int],
    histories: list[list[int]],
    k: int,
    sampling: BatchSampling,
    clock: PhaseClock,
    stop_below: float | None = None,
) -> StepResult:
    """One step for every row: propose ≤ k, verify all in one target forward, accept, emit.

    With ``proposer=None`` (or when no row offers a draft) it is a plain decode step: the
    target scores one position per row and samples one token. ``stop_below`` p: a model
    proposer ends each row at its first draft of probability below p (:class:`ProposeInput`).
    """
    device, batch = target.device, len(slots)
    positions = [len(h) - 1 for h in histories]  # position of each row's newest token
    last = torch.tensor([h[-1] for h in histories], device=device)  # [batch]
    start = torch.tensor(positions, device=device)  # [batch]
    if proposer is None:  # no SD: nothing drafted, and no drafting time recorded
        proposal = Proposal(torch.zeros(batch, 0, dtype=torch.long, device=device),
                            torch.zeros(batch, dtype=torch.long, device=device))
    else:
        with clock.phase("draft"):
            proposal = proposer.propose(ProposeInput(slots, last, start, histories, k, sampling, stop_below=stop_below))
    draft_len = proposal.draft_len.tolist()
    m = max(draft_len)  # verify only as many positions as the longest proposal needs
    drafts = proposal.tokens[:, :m]  # [batch, m]
    with clock.phase("verify"):
        tokens = torch.cat((last[:, None], drafts), dim=1)  # [batch, m+1]
        verify_positions = start[:, None] + torch.arange(m + 1, device=device)  # [batch, m+1]
        layers = proposer.hidden_layers if proposer else ()
        hidden, aux = target(
            tokens, verify_positions, cache, slots, kv_len=max(positions) + m + 1, hidden_layers=layers
        )
        logits = sampling.constrain(target.logits(hidden), drafts)  # [batch, m+1, vocab]
    with clock.phase("sample"):
        if sampling.all_greedy:
            accepted, next_token = verify_greedy(logits, drafts, proposal.draft_len)
        else:
            draft_probs = None if proposal.probs is None else proposal.probs[:, :m]
            accepted, next_token = verify_sampled(
                sampling.probs(logits), draft_probs, drafts, proposal.draft_len, sampling
            )
        accepted, next_token, draft_rows = accepted.tolist(), next_token.tolist(), drafts.tolist()
    emitted = [row[:a] + [t] for row, a, t in zip(draft_rows, accepted, next_token)]
    for slot, pos, a in zip(slots, positions, accepted):
        cache.lengths[slot] = pos + a + 1  # the newest token and the accepted drafts
    if proposer is not None:
        with clock.phase("draft"):
            proposer.observe(
                TargetPass(slots, tokens, positions, [a + 1 for a in accepted], aux, prefill=False)
            )
    return StepResult(emitted, draft_len, accepted, batch * (m + 1))
