"""Acceptance statistics per dataset × proposer, and head-to-head shares for proposer pairs.

Definitions (``acc_len`` as in :mod:`specscope.trace.schema`):

- ``requests``: records of the dataset that carry the proposer; ``positions``: Σ of their
  ``len(acc_len)``.
- per-request statistics (``request_*``): each request contributes one number, the mean of
  its ``acc_len`` array; over those numbers: ``mean``, ``median``, ``std`` (population, ddof=0),
  ``p5`` and ``p95`` (numpy's linear-interpolation percentiles).
- pooled statistics (``position_*``): the same five, over every position of every request
  (long requests weigh more).
- ``mean_prompt_len`` / ``mean_output_read``: mean ``len(prompt_token_ids)`` /
  ``len(output_token_ids)`` over the dataset's records that hold the proposer, as read (records
  read with ``--lengths common`` are cut to the positions every array covers: the output read, not
  the output generated).
- for a pair (a, b): over the positions both arrays cover (the common prefix of each request),
  ``a_beats_b`` = share of positions with acc_len_a > acc_len_b, ``b_beats_a`` the reverse,
  ``ties`` = the rest; the three sum to 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations

import numpy as np

from specscope.sim.plan import traced_k_max
from specscope.trace.schema import TraceRecord, by_dataset  # noqa: F401  (by_dataset: re-exported)


def proposer_names(records: Iterable[TraceRecord]) -> list[str]:
    """Every proposer name in ``records``, in order of first appearance."""
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record.proposers))
    return list(names)


def k_max_of(records: Sequence[TraceRecord], proposer: str) -> int:
    """The declared ``k_max`` (largest over records), else the largest observed acc_len − 1."""
    declared = [r.k_max for r in records if r.k_max is not None]
    if declared:
        return max(declared)
    return max(int(r.proposers[proposer].acc_len.max()) for r in records if proposer in r.proposers) - 1


def k_max_each(records: Sequence[TraceRecord], proposer: str) -> list[int]:
    """Each record's ``k_max`` (of those holding ``proposer``): its declared one, else the depth
    the records that declare none were traced to (:func:`~specscope.sim.plan.traced_k_max`). A
    draft accepted at a record's own k_max was not rejected, whatever another record's k_max."""
    holding = [r for r in records if proposer in r.proposers]
    undeclared = [r for r in holding if r.k_max is None]
    fallback = traced_k_max(undeclared, [proposer]) if undeclared else None
    return [fallback if r.k_max is None else r.k_max for r in holding]


def _five(values: np.ndarray) -> dict[str, float]:
    p5, median, p95 = np.percentile(values, [5, 50, 95])
    return {"mean": float(values.mean()), "median": float(median), "std": float(values.std()),
            "p5": float(p5), "p95": float(p95)}


@dataclass
class ProposerStats:
    """One dataset × proposer row (see the module docstring for the definitions)."""

    dataset: str
    proposer: str
    requests: int
    positions: int
    request_mean: float
    request_median: float
    request_std: float
    request_p5: float
    request_p95: float
    position_mean: float
    position_median: float
    position_std: float
    position_p5: float
    position_p95: float
    mean_prompt_len: float
    mean_output_read: float

    def flat(self) -> dict:
        return asdict(self)


@dataclass
class PairStats:
    """How often proposer ``a`` emits more than ``b`` at the same position, and the reverse."""

    dataset: str
    a: str
    b: str
    positions: int
    a_beats_b: float | None  # shares of the common positions; None without any
    b_beats_a: float | None
    ties: float | None

    def flat(self) -> dict:
        return asdict(self)


def proposer_stats(dataset: str, records: Sequence[TraceRecord], proposer: str) -> ProposerStats:
    """Statistics of one proposer over the records of one dataset that hold it (the mean prompt
    and output lengths too: of the requests its row counts)."""
    records = [r for r in records if proposer in r.proposers]
    arrays = [r.proposers[proposer].acc_len for r in records]
    per_request = np.array([a.mean() for a in arrays], dtype=float)  # [requests]
    pooled = np.concatenate(arrays).astype(float)  # [positions]
    req, pos = _five(per_request), _five(pooled)
    return ProposerStats(
        dataset=dataset, proposer=proposer, requests=len(arrays), positions=int(pooled.size),
        **{f"request_{k}": v for k, v in req.items()},
        **{f"position_{k}": v for k, v in pos.items()},
        mean_prompt_len=float(np.mean([r.prompt_len for r in records])),
        mean_output_read=float(np.mean([r.output_len for r in records])),
    )


def pair_stats(dataset: str, records: Sequence[TraceRecord], a: str, b: str) -> PairStats:
    """Head-to-head shares of ``a`` and ``b`` over their common positions."""
    wins = losses = total = 0
    for record in records:
        if a not in record.proposers or b not in record.proposers:
            continue
        first, second = record.acc_len(a), record.acc_len(b)
        n = min(len(first), len(second))
        wins += int(np.count_nonzero(first[:n] > second[:n]))
        losses += int(np.count_nonzero(first[:n] < second[:n]))
        total += n
    share = (lambda x: x / total) if total else (lambda x: None)  # no common position: no share
    return PairStats(dataset, a, b, total, share(wins), share(losses), share(total - wins - losses))


def acceptance_stats(records: Sequence[TraceRecord]) -> tuple[list[ProposerStats], list[PairStats]]:
    """Per dataset: one :class:`ProposerStats` per proposer and one :class:`PairStats` per pair."""
    singles: list[ProposerStats] = []
    pairs: list[PairStats] = []
    for dataset, members in by_dataset(records).items():
        names = proposer_names(members)
        singles.extend(proposer_stats(dataset, members, name) for name in names)
        pairs.extend(pair_stats(dataset, members, a, b) for a, b in combinations(names, 2))
    return singles, pairs


def request_means(records: Sequence[TraceRecord]) -> list[dict]:
    """One row per request × proposer: the mean of its acc_len (the per-request statistic)."""
    return [
        {"dataset": r.dataset or "trace", "id": r.id, "proposer": name, "output_len": r.output_len,
         "mean_acc_len": float(trace.acc_len.mean())}
        for r in records for name, trace in r.proposers.items()
    ]
