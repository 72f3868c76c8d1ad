"""The measured (α, c) of each dataset × proposer, placed on the closed-form bound.

α is :func:`specscope.theory.bound.estimate_alpha` over the dataset's acc_len traces (each
record's declared k_max, else the largest observed acc_len − 1: :func:`k_max_each`); c is
:func:`specscope.theory.bound.estimate_c` from the cost model at ``batch_size`` requests each
proposing k tokens, with the dataset's typical context: mean prompt length + half the mean
output length — at every k (``c_by_k``: a drafting cost per step makes c fall with k), and at
``k`` for the table's ``c``. The optimum is :func:`specscope.theory.bound.optimal_k` over c(k)
up to that k_max.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specscope.analysis.acceptance import by_dataset, k_max_each, proposer_names
from specscope.costmodel.base import CostModel
from specscope.theory.bound import c_by_k, estimate_alpha, estimate_c, optimal_k
from specscope.trace.schema import TraceRecord


@dataclass
class BoundPoint:
    dataset: str
    proposer: str
    alpha: float
    c: float
    k_max: int
    batch_size: int
    context_len: float
    best_k: int
    best_speedup: float
    c_k: int = 3  # the k at which ``c`` is priced (the table's column)
    c_by_k: tuple[float, ...] = ()  # c at k = 1 … (at least CURVE_K of them): what each k of the curve pays

    def flat(self) -> dict:
        """The CSV row: every field but the curve's c per k."""
        row = asdict(self)
        del row["c_by_k"]
        return row


CURVE_K = 12  # c is priced at least to this k: the bound figure draws every curve that far
NO_ALPHA = "no position of its records had a draft to judge: one-token outputs, or nothing offered"


def traced_alpha(holding: Sequence[TraceRecord], proposer: str) -> tuple[float, int]:
    """α of ``proposer`` over ``holding`` (records that hold it, :func:`estimate_alpha`): each
    position capped at its record's k_max (:func:`k_max_each`) and at what the proposer offered
    there where the trace records it (draft_len); and the shallowest of those k_max, the deepest
    k that α speaks for."""
    depths = k_max_each(holding, proposer)
    alpha = estimate_alpha([r.acc_len(proposer) for r in holding], depths,
                           [r.proposers[proposer].draft_len for r in holding])
    return alpha, min(depths)


def unoffered_note(holding: Sequence[TraceRecord], proposer: str) -> str | None:
    """Where ``proposer``'s traces record what it offered (draft_len) and it offered nothing at
    some positions (a lookup that found no match), the share of them and what that does to the
    bound: α is over the positions it offered at, and the bound proposes k at every step, so it
    overstates such a proposer's speedup (a step offering nothing emits one token, which the
    simulator prices); None where it offered at every position or the traces do not say."""
    offers = [r.proposers[proposer].draft_len[:-1] for r in holding  # the last position has nothing left to draft
              if r.proposers[proposer].draft_len is not None and r.output_len > 1]
    positions = sum(len(o) for o in offers)
    if not positions:
        return None
    empty = sum(int((o == 0).sum()) for o in offers)
    if not empty:
        return None
    return (f"offered no draft at {empty} of {positions} positions ({100 * empty / positions:.0f} %): its α "
            "is over the positions it offered at, and the bound has every step propose k, so it overstates the "
            "speedup (a step offering nothing emits one token; simulate prices those steps)")


def bound_points(records: Sequence[TraceRecord], cost: CostModel, proposers: Sequence[str],
                 batch_size: int, k: int, notes: list[str] | None = None, depth: int | None = None) -> list[BoundPoint]:
    """One point per dataset × proposer (of ``proposers``) present in the records, but where its
    records hold no position with a draft to accept (no α: a line in ``notes``), from the records
    that hold it (where some lack it, a line in ``notes``); its best k at most
    the depth its records were traced to, and at most ``depth`` where a run holds every proposal
    within one (a study: the depth its engine ran)."""
    points = []
    for dataset, members in by_dataset(records).items():
        for proposer in proposer_names(members):
            if proposer not in proposers:
                continue
            holding = [r for r in members if proposer in r.proposers]  # α, c and the context: of the same requests
            if notes is not None and len(holding) < len(members):
                notes.append(f"bound: dataset {dataset!r}, {proposer}: α from the {len(holding)} of {len(members)} "
                             "records that hold it")
            context = float(np.mean([r.prompt_len + r.output_len / 2 for r in holding]))
            alpha, k_max = traced_alpha(holding, proposer)
            k_max = k_max if depth is None else min(k_max, depth)
            if np.isnan(alpha):
                if notes is not None:
                    notes.append(f"bound: dataset {dataset!r}, {proposer}: no α ({NO_ALPHA})")
                continue
            unoffered = unoffered_note(holding, proposer)
            if notes is not None and unoffered:
                notes.append(f"bound: dataset {dataset!r}, {proposer}: {unoffered}")
            curve = c_by_k(cost, proposer, max(k_max, CURVE_K), batch_size, context)
            best_k, best = optimal_k(alpha, curve, k_max)
            points.append(BoundPoint(dataset, proposer, alpha, estimate_c(cost, proposer, k, batch_size, context),
                                     k_max, batch_size, context, best_k, best, k, tuple(curve.tolist())))
    return points
