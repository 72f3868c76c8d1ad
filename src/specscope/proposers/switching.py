"""A learned policy in the engine: per step and sequence, the proposer (or none) and k.

:class:`SwitchingProposer` holds the proposers a policy file (:mod:`specscope.policy.learned`)
chooses between. Before every step, for each running sequence decided per step, it builds the
:class:`~specscope.policy.observation.Observation` an engine knows — the tokens so far, n-gram
lookup's offer now, the prompt overlap, and its own past steps (what each emitted, censored;
how many of the emitted tokens n-gram's proposal matched; the model drafter's probability of
its first draft) — and asks the policy's decision at their count
(:meth:`~specscope.policy.learned.LearnedPolicy.decide_for`, the one the simulator asks: a
batch's rows decide together). Then each member proposes once for the rows that chose it or
that the gate committed to it (below), each row to its own k — a decided row that the policy's
rule stops at a confidence p to its first draft below p, a committed row to its chain's k —
the drafter's passes to the deepest among them, as the simulator prices it; a row that chose
none proposes nothing. (A step where every row drafts with one model drafter passes that drafter's
proposal through: nothing to merge; while every running sequence is committed to one chain, that
chain's member alone proposes for them and follows them, as the chain's own engine does.)

Every member observes every target pass of those rows, so a model drafter stays current: an EAGLE head's
pending hidden states accumulate over the steps it sat out and its next draft runs them in one
forward (it catches up, as :mod:`specscope.sim.switching` prices it); a draft model feeds the
tokens its cache lacks. The n-gram lookup runs for each of those rows every step: its offer
and its agreement with what the step emitted are features. Verification is the engine's, so the output
is what no-SD decoding gives under greedy decoding, whatever the policy picks.

A request the policy's admission gate (:mod:`specscope.policy.gate`, at the engine's slots)
commits from its prompt, at its prefill, to one method at one k runs as that plain chain until
its slot is released, as the simulator prices it: the lookup proposes min(k, its offer) (none
where that is 0), the model drafter k, with no confidence rule. No other member sees its rows —
a model drafter neither prefills its prompt (a prefill pass is cut to the longest prompt it
keeps) nor follows its steps — the lookup does not search it unless committed to it, and the
policy neither observes it nor decides for it: the decision is asked over the rows decided per
step, at their count, told the committed rows' chains this step (they wait for whatever drafting
the decided rows add to theirs, and the decision weighs that). Without a gate every row is decided per step.

The policy's own work — everything in :meth:`SwitchingProposer.propose` beyond the lookup and
the members' proposals and the committed rows' chains: observations, features, decision,
merging, in a step that decides some row — is timed apart
(:meth:`~SwitchingProposer.take_policy_seconds`, the step record's ``policy_s``), so that a cost
model can price it (:mod:`specscope.costmodel.fit`) where the lookup and drafting are priced
from their own runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
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
    whose offer the features read, in an engine of ``batch_size`` slots, whose admission gate
    (:meth:`~specscope.policy.learned.LearnedPolicy.gate_for`) commits requests (see the module
    docstring)."""

    name = LEARNED

    def __init__(self, policy: LearnedPolicy, members: list[Proposer], lookup: NgramProposer,
                 batch_size: int) -> None:
        readers = [m for m in members if m.hidden_layers]
        if len(readers) > 1:
            raise ValueError("a switching proposer passes the target's hidden states to one member only")
        self.policy, self.members, self.lookup = policy, members, lookup
        self.depth = policy.depth
        self.gate = policy.gate_for(batch_size)
        self.hidden_layers = readers[0].hidden_layers if readers else ()
        self._ngram = policy.methods.index("ngram") if "ngram" in policy.methods else NONE
        self._sequences: dict[int, _Sequence] = {}
        self._committed: dict[int, tuple[int, int] | None] = {}  # slot → its gate's (method, k); None: decided
        self._common: tuple[int, int] | None = None  # the chain of every sequence admitted, if one and the same
        self._policy_seconds = 0.0
        self._policy_rows = 0
        self._choices: dict[int, tuple[str, int]] = {}

    def take_policy_seconds(self) -> float:
        """Seconds of the policy's own work since the last call (module docstring)."""
        seconds, self._policy_seconds = self._policy_seconds, 0.0
        return seconds

    def serve_at(self, batch_size: int) -> None:
        """Commit requests admitted from now by ``batch_size``'s gate (an engine of more slots
        running at most that many requests at once, as a bench's run at that batch size)."""
        self.gate = self.policy.gate_for(batch_size)

    def take_policy_rows(self) -> int:
        """Rows the policy decided since the last call (the others committed by its gate)."""
        rows, self._policy_rows = self._policy_rows, 0
        return rows

    def take_choices(self) -> dict[int, tuple[str, int]]:
        """Slot → (method, k) each row took at its last proposal since the last call (``none``, 0:
        it drafted nothing); then forgotten."""
        choices, self._choices = self._choices, {}
        return choices

    def observe(self, target_pass: TargetPass) -> None:
        if target_pass.prefill:  # admission: each prompt's commitment (None: decided per step)
            prompts = None if self.gate is None else target_pass.tokens.tolist()
            for row, (slot, n) in enumerate(zip(target_pass.slots, target_pass.num_committed)):
                self._committed[slot] = None if prompts is None else self.gate.commit(prompts[row][:n])
            self._common = _one_chain(self._committed.values())
        if self._common is not None:  # every row committed to one chain: its member alone follows them
            self.members[self._common[0]].observe(target_pass)
            return
        chains = [self._committed.get(slot) for slot in target_pass.slots]  # each row's (method, k); None: decided
        for index, member in enumerate(self.members):  # a member follows its committed rows and the decided ones
            rows = [row for row, chain in enumerate(chains) if chain is None or chain[0] == index]
            if rows:
                member.observe(_pass_rows(target_pass, rows))

    def release(self, slot: int) -> None:
        self._sequences.pop(slot, None)
        self._committed.pop(slot, None)
        self._common = _one_chain(self._committed.values())
        for member in self.members:
            member.release(slot)

    def propose(self, request: ProposeInput) -> Proposal:  # the engine's step runs it without autograd
        if self._common is not None:  # every row committed to one chain: that chain's own proposal, nothing else
            return self._chain(request, *self._common)
        start = time.perf_counter()
        batch, device = len(request.slots), request.last_tokens.device
        commitments = [self._committed.get(slot) for slot in request.slots]
        decided = [c is None for c in commitments]  # rows the policy decides at this step
        searched = [row for row, c in enumerate(commitments) if c is None or c[0] == self._ngram]
        found: list[list[int]] = [[] for _ in range(batch)]  # n-gram's proposal per row ([]: not searched)
        for row, proposal in zip(searched, self.lookup.find([request.histories[r] for r in searched], self.depth)):
            found[row] = proposal
        method, k = [NONE] * batch, [0] * batch  # plain lists: per-row array operations cost more than they save
        stop: list[float | None] = [None] * batch  # p where a row drafts to its drafter's confidence
        for row, commitment in enumerate(commitments):  # a committed row: its chain
            if commitment is not None:
                method[row], k[row] = self._capped(*commitment, len(found[row]))
        members = time.perf_counter() - start  # the lookup's, the members' and committed rows' time: not the policy's
        deciding = [row for row in range(batch) if decided[row]]
        if deciding:
            choices = self.policy.decide_for(len(deciding))(
                [self._observe(request.slots[row], request.histories[row], len(found[row])) for row in deciding],
                committed=[(method[row], k[row]) for row in range(batch) if not decided[row]])
            stop_below = self.policy.confidence_for(batch)  # a model drafter taken drafts to its confidence's k
            for row, choice in zip(deciding, choices):
                method[row], k[row] = self._capped(*choice, len(found[row]))
                if stop_below is not None and method[row] not in (NONE, self._ngram):  # at most the depth: the
                    k[row], stop[row] = self.depth, stop_below  # drafter stops the row at its first draft below p
        if method[0] not in (NONE, self._ngram) and method.count(method[0]) == batch:
            begun = time.perf_counter()  # one model drafter for every row: its proposal as it is
            proposal = self.members[method[0]].propose(_subset(request, list(range(batch)), k, stop, bool(deciding)))
            members += time.perf_counter() - begun
            first_prob = proposal.confidence[:, 0].tolist() if deciding else [None] * batch
            tokens, probs, draft_len = proposal.tokens, proposal.probs, proposal.draft_len
            k = draft_len.tolist()
        else:
            tokens, k, probs, first_prob, seconds = self._merge(request, method, k, stop, decided, found)
            draft_len = torch.tensor(k, dtype=torch.long, device=device)
            members += seconds
        for row in deciding:
            state = self._sequences[request.slots[row]]
            state.step = (method[row], k[row], len(request.histories[row]), found[row])
            state.prob = first_prob[row]
        names = self.policy.methods
        for slot, m, d in zip(request.slots, method, k):
            self._choices[slot] = (NO_SD, 0) if m == NONE else (names[m], d)
        if deciding:
            self._policy_seconds += time.perf_counter() - start - members
            self._policy_rows += len(deciding)
        return Proposal(tokens, draft_len, probs)

    def _chain(self, request: ProposeInput, method: int, k: int) -> Proposal:
        """The proposal of a step whose every row is committed to ``method``'s chain of ``k``: that
        member's, as the plain chain's engine asks it (known at admission and release, not per step). On the
        bundled target, code at B = 4 with every request committed to n-gram k = 3, the switching
        engine's drafting took 3.3 ms a run of 585 steps beyond the chain's own engine (median of
        10 paired runs), where a scan of the rows every step and a ``no_grad`` wrapper took 12.7 ms."""
        k = min(k, self.depth)
        if (request.k != k or request.want_confidence or request.first_confidence or request.stop_below is not None
                or request.row_k is not None):
            request = replace(request, k=k, want_confidence=False, first_confidence=False, stop_below=None, row_k=None)
        proposal, name = self.members[method].propose(request), self.policy.methods[method]
        for slot, drafted in zip(request.slots, proposal.draft_len.tolist()):  # the lookup's: min(k, its offer)
            self._choices[slot] = (name, drafted) if drafted else (NO_SD, 0)
        return proposal

    def _capped(self, method: int, k: int, offer: int) -> tuple[int, int]:
        """(method, k) as a row proposes it: k at most the depth and, for the lookup, its ``offer``
        now; (none, 0) where that leaves nothing."""
        k = min(k, self.depth, offer) if method == self._ngram else min(k, self.depth)
        return (method, k) if k > 0 and method != NONE else (NONE, 0)

    def _merge(self, request: ProposeInput, method: list[int], k: list[int], stop: list[float | None],
               decided: list[bool], found: list[list[int]]
               ) -> tuple[torch.Tensor, list[int], torch.Tensor | None, list[float | None], float]:
        """Rows that chose different proposers (or none): each model drafter proposes once for its
        rows, each row to its own k (``stop``: p where a row decided per step drafts to its first
        draft below p, None where it drafts its k), its passes to the deepest among them, and the
        proposals are merged into tokens [batch, depth], each row's k (the drafter's own where it
        stopped a row sooner) and probs (None under greedy decoding), plus the first-draft
        probability of each row ``decided`` per step that a model drafter served, and the seconds
        the members took."""
        batch, device, seconds, k = len(request.slots), request.last_tokens.device, 0.0, list(k)
        drafted = [[0] * self.depth for _ in range(batch)]  # [batch][depth] draft tokens
        probs, probs_of = None, []
        first_prob: list[float | None] = [None] * batch
        groups: dict[int, list[int]] = {}  # member → its rows
        for row, m in enumerate(method):
            if m != NONE:
                groups.setdefault(m, []).append(row)
        for index, rows in groups.items():
            if index == self._ngram:
                for row in rows:
                    drafted[row][: len(found[row])] = found[row]
                continue
            subset = _subset(request, rows, k, stop, any(decided[row] for row in rows))
            begun = time.perf_counter()
            proposal = self.members[index].propose(subset)
            seconds += time.perf_counter() - begun
            confidence = proposal.confidence[:, 0].tolist() if subset.first_confidence else [None] * len(rows)
            for row, draft, value, length in zip(rows, proposal.tokens[:, : self.depth].tolist(), confidence,
                                                 proposal.draft_len.tolist()):
                drafted[row][: len(draft)] = draft
                first_prob[row], k[row] = value, length
            if proposal.probs is not None:
                probs_of.append((rows, proposal.probs))
        tokens = torch.tensor(drafted, dtype=torch.long, device=device)
        if probs_of:  # sampled rows: the members' distributions, point masses elsewhere
            vocab = probs_of[0][1].shape[-1]
            probs = torch.zeros(batch, self.depth, vocab, device=device).scatter_(-1, tokens[:, :, None], 1.0)
            for rows, member_probs in probs_of:
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


def _one_chain(chains: Iterable[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The chain every one of ``chains`` is, if one and the same (None: some row is decided per
    step, or they differ, or there are none)."""
    first = next(iter(chains), None)
    return first if first is not None and all(chain == first for chain in chains) else None


def _subset(request: ProposeInput, rows: list[int], k: list[int], stop: list[float | None],
            confidence: bool) -> ProposeInput:
    """The rows ``rows`` of ``request``, each proposing its own ``k`` [batch] (stopped at its own
    ``stop`` [batch] p, where not None), the drafter's passes to the deepest; ``confidence``: its
    first draft's probability asked for (the policy's feature; the passes after it read none
    unless a row stops at a p)."""
    depths, ps = [k[r] for r in rows], [stop[r] for r in rows]
    deepest = max(depths)
    row_k = None if min(depths) == deepest else depths
    stop_below = None if ps.count(None) == len(ps) else ps[0] if ps.count(ps[0]) == len(ps) else ps
    if len(rows) == len(request.slots):  # every row: nothing to slice
        return replace(request, k=deepest, first_confidence=confidence, stop_below=stop_below, row_k=row_k)
    index = torch.as_tensor(rows, dtype=torch.long, device=request.last_tokens.device)
    return ProposeInput([request.slots[r] for r in rows], request.last_tokens[index], request.positions[index],
                        [request.histories[r] for r in rows], deepest, request.sampling.rows(rows),
                        first_confidence=confidence, stop_below=stop_below, row_k=row_k)


def _pass_rows(target_pass: TargetPass, rows: list[int]) -> TargetPass:
    """The rows ``rows`` of ``target_pass``; a prefill pass cut to the longest prompt among them
    (the width a member's own prefill runs over)."""
    if len(rows) == len(target_pass.slots):  # every row: nothing to slice
        return target_pass
    width = max(target_pass.num_committed[r] for r in rows) if target_pass.prefill else target_pass.tokens.shape[1]
    index = torch.as_tensor(rows, dtype=torch.long, device=target_pass.tokens.device)
    return TargetPass([target_pass.slots[r] for r in rows], target_pass.tokens[index, :width],
                      [target_pass.start[r] for r in rows], [target_pass.num_committed[r] for r in rows],
                      [hidden[index, :width] for hidden in target_pass.hidden], target_pass.prefill)
