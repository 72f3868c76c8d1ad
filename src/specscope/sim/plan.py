"""Walk traces under a policy into SD steps (what each step proposes and emits).

Indexing follows the paper's simulator: after prefill one output token exists, so a request
starts at position ``pos = 1``; the step at ``pos`` reads ``acc_len[pos − 1]`` (the entry of its
last input token), proposes ``k`` tokens and emits ``min(acc_len[pos − 1], k + 1, G − pos)``
(no token past the output's end, which a trace's acc_len may reach beyond); the walk stops once
``pos >= G``. A request of G output tokens without SD takes G − 1 steps of one token.

A plan depends on the trace and the policy only, never on the batch: batching changes what a
step costs, not what it emits (greedy decoding). So a plan is computed once and priced for
every batch size and cost model.

n-gram "no match": with ``draft_len`` in the trace, a step proposes ``min(k, draft_len)``.
Without it, the paper's guess (shared/paper/README.md, step 7) may be applied: where
``acc_len = 1`` the step proposes nothing with probability ``1 − match_prob`` (an oracle
proposes acc_len − 1 = 0 there in any case). A policy that learns from its steps (adaptive) draws
this as it walks, so that a step which proposed nothing teaches it nothing (drawn after the walk,
it had counted such a step as a rejection and shrunk k).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specscope.sim.policies import Policy
from specscope.trace.schema import TraceRecord, by_dataset
from specscope.validate import K_MAX_LIMIT


READS_NONE, READS_FIRST, READS_EVERY = 0, 1, 2  # a step's drafter reads no draft's probability, the first's (a
# policy's feature), every pass's (to stop rows at a confidence: ``confidence:p``, a policy's rule)


@dataclass
class Plan:
    """The steps of every request under one policy (flat arrays over all S steps)."""

    offsets: np.ndarray  # [R + 1] request r owns steps offsets[r]:offsets[r+1]
    pos: np.ndarray  # [S] output tokens generated before the step (>= 1)
    proposed: np.ndarray  # [S] draft tokens proposed (0: no drafting, verify 1 token)
    emitted: np.ndarray  # [S] tokens the step emits (accepted drafts + 1, not past the output's end)
    accepted: np.ndarray  # [S] drafts verification accepted: min(acc_len − 1, proposed) (past the output's end too)
    prompt_len: np.ndarray  # [R]
    output_len: np.ndarray  # [R] G: output tokens, the prefill's first one included
    draft_widths: tuple[int, ...] = ()  # a tree's drafter pass widths per sequence; () = chains
    method: np.ndarray | None = None  # [S] a switching plan's proposer per step (index into methods; -1: none)
    methods: tuple[str, ...] = ()  # the proposers a switching plan chose between (sim.switching)
    committed: np.ndarray | None = None  # [R] a causal plan's request committed at admission to this method's
    # chain (index into methods; -1: decided per step; None: every request, as an oracle's plan)
    reads_confidence: np.ndarray | None = None  # [S] which drafts' probabilities the step's drafter reads
    # (:data:`READS_NONE`, :data:`READS_FIRST`, :data:`READS_EVERY`); None: none anywhere
    offered: np.ndarray | None = None  # [S] a causal plan's n-gram search found drafts to offer at the step,
    # whichever proposer ran (None: not walked by a causal policy)

    @property
    def steps_per_request(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def request_of_step(self) -> np.ndarray:
        """[S] the request index of every step."""
        return np.repeat(np.arange(len(self.prompt_len)), self.steps_per_request)

    @property
    def verify_tokens(self) -> np.ndarray:
        """[S] tokens the target verifies in each step: the last token plus the drafts."""
        return self.proposed + 1


def visit(emit: list[int]) -> list[int]:
    """Positions visited by ``pos ← pos + emit[pos − 1]`` from 1 while ``pos < len(emit)``."""
    visited = []
    pos, end = 1, len(emit)
    while pos < end:
        visited.append(pos)
        pos += emit[pos - 1]
    return visited


def walk_request(acc_len: np.ndarray, policy: Policy, k_max: int,
                 draft_len: np.ndarray | None = None, match_prob: float | None = None,
                 rng: np.random.Generator | None = None,
                 draft_prob: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One request's steps: (pos, proposed, emitted, accepted), each [steps] (:class:`Plan`);
    ``draft_prob`` [G, m]: the drafter's probability of each draft, for a policy that reads it."""
    if policy.by_position is not None or policy.by_confidence is not None:
        wanted = policy.by_position(acc_len) if policy.by_position is not None else \
            np.minimum(policy.by_confidence(draft_prob)[:len(acc_len)], k_max)  # [G]: no deeper than traced
        if draft_len is not None:
            wanted = np.minimum(wanted, draft_len)
        emit = np.minimum(acc_len, wanted + 1)
        pos = np.asarray(visit(emit.tolist()), dtype=np.int64)
        proposed = wanted[pos - 1].astype(np.int64)
    else:
        acc, offered = acc_len.tolist(), None if draft_len is None else draft_len.tolist()
        state = policy.new_state(k_max)
        steps: list[tuple[int, int]] = []
        guess = draft_len is None and match_prob is not None
        p = 1
        while p < len(acc):
            k = state.propose(acc[p - 1])
            if offered is not None:
                k = min(k, offered[p - 1])
            elif guess and rng.random() >= match_prob and acc[p - 1] == 1:  # no match: the state sees no proposal
                k = 0
            steps.append((p, k))
            e = min(acc[p - 1], k + 1)
            state.observe(k, e)
            p += e
        pos = np.asarray([s[0] for s in steps], dtype=np.int64)
        proposed = np.asarray([s[1] for s in steps], dtype=np.int64)
    acc_at = acc_len[pos - 1]
    if policy.by_position is not None and draft_len is None and match_prob is not None:  # an oracle: 0 there anyway
        unmatched = (acc_at == 1) & (rng.random(pos.shape[0]) >= match_prob)
        proposed = np.where(unmatched, 0, proposed)
    emitted = np.minimum(np.minimum(acc_at, proposed + 1), len(acc_len) - pos).astype(np.int64)  # not past the output
    return pos, proposed, emitted, accepted_drafts(acc_at, proposed)


def accepted_drafts(acc_at: np.ndarray, proposed: np.ndarray) -> np.ndarray:
    """[S] drafts each step's verification accepted: min(acc_len − 1, proposed) — those past the
    output's end too, which its last step proposed and the trace says the target accepts, as the
    reference engine counts drafts accepted past ``max_tokens`` (its ``num_accepted_tokens``,
    :mod:`specscope.engine.records`): the output's end cuts what a step emits, not what it accepted. So
    an oracle, proposing exactly acc_len − 1, wastes no draft (α = 1), and ``emitted − 1``, which
    a last step cut short undercounts, is not α's numerator."""
    return np.minimum(np.asarray(acc_at) - 1, proposed).astype(np.int64)


def make_plan(acc_lens: Sequence[np.ndarray], prompt_lens: Sequence[int], policy: Policy,
              k_max: int, draft_lens: Sequence[np.ndarray | None] | None = None,
              match_prob: float | None = None, seed: int = 0,
              draft_probs: Sequence[np.ndarray | None] | None = None) -> Plan:
    """Walk every request (``acc_lens[r]`` is request r's [G] acc_len) under ``policy``; for a
    tree policy ``acc_lens`` are the tree's (from ``tree_rank``) and every step drafts the tree;
    ``draft_probs[r]``: request r's drafter probabilities, for a policy that reads them."""
    rng = np.random.default_rng(seed)
    parts = [
        walk_request(acc, policy, k_max, None if draft_lens is None else draft_lens[r], match_prob, rng,
                     None if draft_probs is None else draft_probs[r])
        for r, acc in enumerate(acc_lens)
    ]
    plan = concat_steps(parts, prompt_lens, [len(acc) for acc in acc_lens])
    if policy.tree is not None:
        plan.draft_widths = policy.tree.draft_pass_widths
    if policy.by_confidence is not None:  # every step's passes read their drafts' probabilities
        plan.reads_confidence = np.full(len(plan.pos), READS_EVERY, dtype=np.int64)
    return plan


def passes_read(reads: np.ndarray, proposed: np.ndarray, deepest) -> np.ndarray:
    """The drafter's passes whose drafts' probabilities it reads, per load: ``reads`` [S] and
    ``proposed`` [S] of the steps that ran it (0 elsewhere), ``deepest`` their maximum per load
    (a batch's iteration; one step in paper mode). Where a row stops at a p every pass is read, to
    the deepest row's k (its passes serve every row); else one where a row asks for its first
    draft's; else none."""
    every = deepest(np.where(reads == READS_EVERY, 1.0, 0.0)) > 0
    return np.where(every, deepest(proposed.astype(float)), deepest(np.where(reads == READS_FIRST, 1.0, 0.0)))


def baseline_plan(output_lens: Sequence[int], prompt_lens: Sequence[int]) -> Plan:
    """No SD: request r takes G − 1 steps of one token, at positions 1 … G − 1."""
    parts = []
    for g in output_lens:
        pos = np.arange(1, g, dtype=np.int64)
        parts.append((pos, np.zeros_like(pos), np.ones_like(pos), np.zeros_like(pos)))
    return concat_steps(parts, prompt_lens, output_lens)


def concat_steps(parts, prompt_lens, output_lens) -> Plan:
    """One plan from per-request (pos, proposed, emitted, accepted) arrays."""
    counts = [len(p[0]) for p in parts]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    empty = np.zeros(0, dtype=np.int64)
    return Plan(
        offsets=offsets,
        pos=np.concatenate([p[0] for p in parts]) if parts else empty,
        proposed=np.concatenate([p[1] for p in parts]) if parts else empty,
        emitted=np.concatenate([p[2] for p in parts]) if parts else empty,
        accepted=np.concatenate([p[3] for p in parts]) if parts else empty,
        prompt_len=np.asarray(prompt_lens, dtype=np.int64),
        output_len=np.asarray(output_lens, dtype=np.int64),
    )


def traced_k_max(records: Sequence[TraceRecord], proposers: Sequence[str]) -> int:
    """The deepest k every record of ``proposers`` was traced at: the smallest declared k_max (a
    record traced to 2 says nothing of a third draft, whatever the others were traced to); for
    records that declare none, the longest acc_len seen among them − 1 — unless that is 1: a
    tracer proposes at least one draft, so acc_len = 1 everywhere means every first draft was
    rejected (or none offered), which any k replays alike (:data:`K_MAX_LIMIT` where nothing
    else bounds it)."""
    declared = [r.k_max for r in records if r.k_max is not None]
    undeclared = [r for r in records if r.k_max is None]
    longest = max((int(r.proposers[p].acc_len.max()) for r in undeclared for p in proposers), default=1)
    if longest > 1:
        declared.append(longest - 1)
    return min(declared, default=K_MAX_LIMIT)


def switch_k_max(records: Sequence[TraceRecord], proposers: Sequence[str]) -> int:
    """The deepest k a policy switching between ``proposers`` can replay: the shallowest of their
    own :func:`traced_k_max` — it proposes each at its own depth, and a trace that never saw one
    proposer accept more than j drafts cannot tell what its (j + 1)-th would have given, however
    far another proposer's acc_len reaches."""
    return min(traced_k_max(records, [p]) for p in proposers)


def dataset_depths(records: Sequence[TraceRecord], proposers: Sequence[str]) -> dict[str, int]:
    """Each dataset's :func:`switch_k_max` (a dataset judged within its own depth; a policy fitted
    over several replays on each of them only within the shallowest)."""
    return {name: switch_k_max(group, proposers) for name, group in by_dataset(records).items()}
