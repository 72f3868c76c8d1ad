"""A learned policy in the engine: per step and sequence, the proposer (or none) and k.

:class:`SwitchingProposer` holds the proposers a policy file (:mod:`specscope.policy.learned`)
chooses between. Before every step, for each running sequence, it builds the
:class:`~specscope.policy.observation.Observation` an engine knows — the tokens so far, n-gram
lookup's offer now, the prompt overlap, and its own past steps (what each emitted, censored;
how many of the emitted tokens n-gram's proposal matched; the model drafter's probability of
its first draft) — and asks the policy's decision at the running batch size
(:meth:`~specscope.policy.learned.LearnedPolicy.decide_for`, the one the simulator asks: a
batch's rows decide together). Then each member proposes for the rows that chose it, with the
deepest k among them, and every row's proposal is cut to its own k; a row that chose none
proposes nothing. (A step where every row drafts with one model drafter passes that drafter's
proposal through: nothing to merge.)

Every member observes every target pass, so a model drafter stays current: an EAGLE head's
pending hidden states accumulate over the steps it sat out and its next draft runs them in one
forward (it catches up, as :mod:`specscope.sim.switching` prices it); a draft model feeds the
tokens its cache lacks. The n-gram lookup runs for every row every step: its offer and its
agreement with what the step emitted are features. Verification is the engine's, so the output
is what no-SD decoding gives under greedy decoding, whatever the policy picks.

The policy's own work — everything in :meth:`SwitchingProposer.propose` beyond the lookup and
the members' proposals: observations, features, decision, merging — is timed apart
(:meth:`~SwitchingProposer.take_policy_seconds`, the step record's ``policy_s``), so that a cost
model can price it (:mod:`specscope.costmodel.fit`) where the lookup and drafting are priced
from their own runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from specscope.engine.proposer_api import Proposal, ProposeInput, Proposer, TargetPass, agreeing_prefix
from specscope.methods import LEARNED, NO_SD
from specscope.policy.learned import LearnedPolicy
from specscope.policy.observation import NONE, History, Observation, OverlapCounter, Outcome, TokensSoFar
from specscope.proposers.ngram import NgramProposer


@dataclass
class _Sequence:
    """What the proposer keeps for one running sequence between its steps."""

    prompt_len: int
    history: History
    overlap: OverlapCounter
    step: tuple[int, int, int, list[int]] | None = None  # last step: method, k, its pos, n-gram's proposal
    prob: float | None = None  # the drafter's first-draft probability at that step


class SwitchingProposer:
    """Runs ``policy`` over ``members`` (one proposer per policy method, in its order, at most
    one of them reading the target's hidden states), plus ``lookup``: the n-gram proposer
    whose offer the features read (see the module docstring)."""

    name = LEARNED

    def __init__(self, policy: LearnedPolicy, members: list[Proposer], lookup: NgramProposer) -> None:
        readers = [m for m in members if m.hidden_layers]
        if len(readers) > 1:
            raise ValueError("a switching proposer passes the target's hidden states to one member only")
        self.policy, self.members, self.lookup = policy, members, lookup
        self.depth = policy.depth
        self.hidden_layers = readers[0].hidden_layers if readers else ()
        self._ngram = policy.methods.index("ngram") if "ngram" in policy.methods else NONE
        self._sequences: dict[int, _Sequence] = {}
        self._policy_seconds = 0.0
        self._choices: dict[int, tuple[str, int]] = {}

    def take_policy_seconds(self) -> float:
        """Seconds of the policy's own work since the last call (module docstring)."""
        seconds, self._policy_seconds = self._policy_seconds, 0.0
        return seconds

    def take_choices(self) -> dict[int, tuple[str, int]]:
        """Slot → (method, k) each row took at its last proposal since the last call (``none``, 0:
        it drafted nothing); then forgotten."""
        choices, self._choices = self._choices, {}
        return choices

    def observe(self, target_pass: TargetPass) -> None:
        for member in self.members:
            member.observe(target_pass)

    def release(self, slot: int) -> None:
        self._sequences.pop(slot, None)
        for member in self.members:
            member.release(slot)

    @torch.no_grad()
    def propose(self, request: ProposeInput) -> Proposal:
        start = time.perf_counter()
        batch, device = len(request.slots), request.last_tokens.device
        found = self.lookup.find(request.histories, self.depth)
        members = time.perf_counter() - start  # the lookup's and the members' time: not the policy's
        offers = [len(row) for row in found]
        choices = self.policy.decide_for(batch)([self._observe(slot, history, offer) for slot, history, offer
                                                 in zip(request.slots, request.histories, offers)])
        stop_below = self.policy.confidence_for(batch)  # a model drafter taken drafts to its confidence's k
        method, k = [], []  # plain lists: per-row array operations cost more than they save
        for (m, d), offer in zip(choices, offers):
            d = min(d, self.depth, offer) if m == self._ngram else min(d, self.depth)
            if stop_below is not None and d > 0 and m != self._ngram:
                d = self.depth  # at most; the drafter stops each row at its first draft below p
            method.append(m if d > 0 else NONE)
            k.append(d)
        if method[0] not in (NONE, self._ngram) and method.count(method[0]) == batch:  # one model drafter, every row
            begun = time.perf_counter()
            proposal = self.members[method[0]].propose(replace(request, k=max(k), want_confidence=True,
                                                               stop_below=stop_below))
            members += time.perf_counter() - begun
            first_prob = proposal.confidence[:, 0].tolist()
            tokens, probs = proposal.tokens, proposal.probs
            if stop_below is not None:
                k = proposal.draft_len.tolist()
            draft_len = proposal.draft_len if min(k) == max(k) or stop_below is not None \
                else torch.tensor(k, dtype=torch.long, device=device)
        else:
            tokens, k, probs, first_prob, seconds = self._merge(request, method, k, found, stop_below)
            draft_len = torch.tensor(k, dtype=torch.long, device=device)
            members += seconds
        names = self.policy.methods
        for row, slot in enumerate(request.slots):
            state = self._sequences[slot]
            state.step = (method[row], k[row], len(request.histories[row]), found[row])
            state.prob = first_prob[row]
            self._choices[slot] = (NO_SD, 0) if method[row] == NONE else (names[method[row]], k[row])
        self._policy_seconds += time.perf_counter() - start - members
        return Proposal(tokens, draft_len, probs)

    def _merge(self, request: ProposeInput, method: list[int], k: list[int], found: list[list[int]],
               stop_below: float | None = None
               ) -> tuple[torch.Tensor, list[int], torch.Tensor | None, list[float | None], float]:
        """Rows that chose different proposers (or none): each member proposes for its rows, with
        the deepest k among them (a model drafter stopping each row at its first draft below
        ``stop_below``), and the proposals are merged into tokens [batch, depth], each row's k (the
        drafter's own where it stopped a row sooner) and probs (None under greedy decoding), plus
        each row's first-draft probability and the seconds the members took."""
        batch, device, seconds, k = len(request.slots), request.last_tokens.device, 0.0, list(k)
        drafted = [[0] * self.depth for _ in range(batch)]  # [batch][depth] draft tokens
        probs, probs_of = None, {}
        first_prob: list[float | None] = [None] * batch
        for index, member in enumerate(self.members):
            rows = [row for row in range(batch) if method[row] == index]
            if not rows:
                continue
            if index == self._ngram:
                for row in rows:
                    drafted[row][: len(found[row])] = found[row]
                continue
            subset = _subset(request, rows, max(k[row] for row in rows), confidence=True, stop_below=stop_below)
            begun = time.perf_counter()
            proposal = member.propose(subset)
            seconds += time.perf_counter() - begun
            for row, draft, value, length in zip(rows, proposal.tokens[:, : self.depth].tolist(),
                                                 proposal.confidence[:, 0].tolist(), proposal.draft_len.tolist()):
                drafted[row][: len(draft)] = draft
                first_prob[row] = value
                k[row] = min(k[row], length)
            if proposal.probs is not None:
                probs_of[index] = (rows, proposal.probs)
        tokens = torch.tensor(drafted, dtype=torch.long, device=device)
        if probs_of:  # sampled rows: the members' distributions, point masses elsewhere
            vocab = next(iter(probs_of.values()))[1].shape[-1]
            probs = torch.zeros(batch, self.depth, vocab, device=device).scatter_(-1, tokens[:, :, None], 1.0)
            for rows, member_probs in probs_of.values():
                probs[rows, : member_probs.shape[1]] = member_probs
        return tokens, k, probs, first_prob, seconds

    def _observe(self, slot: int, history: list[int], offer: int) -> Observation:
        """The observation of the sequence in ``slot`` before this step, after recording what its
        last step emitted."""
        state = self._sequences.get(slot)
        if state is None:  # its first step: the prompt plus the token its prefill emitted
            record = History(len(self.policy.methods), self.depth, self._ngram)
            state = self._sequences[slot] = _Sequence(len(history) - 1, record, OverlapCounter(history[:-1]))
        elif state.step is not None:
            method, k, before, ngram = state.step
            emitted = history[before:]
            if emitted:  # a step that ran emitted a token at least; one that failed (retried) never ran
                state.history.record(Outcome(method, k if method != NONE else 0, len(emitted), len(ngram),
                                             agreeing_prefix(ngram, emitted), state.prob if method != NONE else None))
            state.step = None  # recorded: a failed step retried row by row must not record it again
        return state.history.observation(len(history) - state.prompt_len, state.prompt_len,
                                         TokensSoFar(history, len(history)), offer, state.overlap.value(history))


def _subset(request: ProposeInput, rows: list[int], k: int, confidence: bool = False,
            stop_below: float | None = None) -> ProposeInput:
    """The rows ``rows`` of ``request``, proposing ``k`` (stopped at ``stop_below``, if given)."""
    if len(rows) == len(request.slots):  # every row: nothing to slice
        return replace(request, k=k, want_confidence=confidence, stop_below=stop_below)
    index = torch.as_tensor(rows, dtype=torch.long, device=request.last_tokens.device)
    return ProposeInput([request.slots[r] for r in rows], request.last_tokens[index], request.positions[index],
                        [request.histories[r] for r in rows], k, request.sampling.rows(rows),
                        want_confidence=confidence, stop_below=stop_below)
