"""Position profile: mean acc_len along the output, with requests grouped by output length.

Requests are put in output-length groups whose edges are the data's quartiles rounded to
"nice" numbers (1, 2, 2.5 or 5 × 10^n), so the groups follow the data (e.g. <100, 100–200, …
for short answers; <500, 500–1k, … for chat). Within a group, two profiles:

- by position: output positions cut into ``POSITION_BINS`` logarithmically spaced bins (edges
  ``round(geomspace(1, longest output, POSITION_BINS))``, deduplicated, plus a first bin [0, 1));
  a bin's value is the mean acc_len over every position of every request of the group in it;
- by fraction of the output: position i of a request of length G has fraction i / G, cut into
  ``FRACTION_BINS`` equal bins — this shows a drop near the end whatever the length.

Each row also counts the positions and the requests that contributed, so thin tails are visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specscope.analysis.acceptance import by_dataset, proposer_names
from specscope.trace.schema import TraceRecord

POSITION_BINS = 30
FRACTION_BINS = 20
GROUPS = 4


def nice(value: float) -> float:
    """The nearest number of the form {1, 2, 2.5, 5} × 10^n (by ratio); ``value`` > 0."""
    exponent = math.floor(math.log10(value))
    candidates = [m * 10.0 ** e for e in (exponent, exponent + 1) for m in (1, 2, 2.5, 5)]
    return min(candidates, key=lambda c: abs(math.log(c / value)))


def length_edges(output_lens: Sequence[int], groups: int = GROUPS) -> list[int]:
    """Inner group edges: the quantiles at 1/groups … (groups−1)/groups, rounded to nice
    numbers, deduplicated, and kept only where they split the data (min < edge <= max)."""
    lens = np.asarray(output_lens, dtype=float)
    edges: list[int] = []
    for q in np.quantile(lens, [i / groups for i in range(1, groups)]):
        edge = int(nice(max(q, 1.0)))
        if lens.min() < edge <= lens.max() and edge not in edges:
            edges.append(edge)
    return sorted(edges)


def _short(n: int) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


def group_label(lo: int, hi: int | None) -> str:
    """``"<1k"``, ``"1k–4k"``, ``"≥13k"`` (output tokens)."""
    if lo == 0:
        return f"<{_short(hi)}" if hi is not None else "all"
    return f"≥{_short(lo)}" if hi is None else f"{_short(lo)}–{_short(hi)}"


@dataclass
class ProfileRow:
    """Mean acc_len over one bin; ``axis`` is "position" (x in tokens) or "fraction" (x in [0, 1])."""

    dataset: str
    proposer: str
    group: str
    group_requests: int
    axis: str
    x_lo: float
    x_hi: float
    mean_acc_len: float
    positions: int
    requests: int

    def flat(self) -> dict:
        return asdict(self)


def _binned(dataset: str, proposer: str, group: str, members: Sequence[TraceRecord], axis: str
            ) -> list[ProfileRow]:
    arrays = [r.proposers[proposer].acc_len for r in members]
    values = np.concatenate(arrays).astype(float)  # [positions]
    owner = np.repeat(np.arange(len(arrays)), [len(a) for a in arrays])  # [positions]
    index = np.concatenate([np.arange(len(a)) for a in arrays])  # [positions]
    if axis == "position":
        longest = max(len(a) for a in arrays)
        cuts = np.unique(np.round(np.geomspace(1, longest, POSITION_BINS)).astype(np.int64))
        cuts = np.concatenate([[0], cuts[cuts < longest], [longest]])  # [bins + 1]
        bins = np.searchsorted(cuts, index, side="right") - 1
        edges = lambda b: (float(cuts[b]), float(cuts[b + 1]))
    else:
        lengths = np.concatenate([np.full(len(a), len(a)) for a in arrays])
        bins = np.minimum((index / lengths * FRACTION_BINS).astype(int), FRACTION_BINS - 1)
        edges = lambda b: (b / FRACTION_BINS, (b + 1) / FRACTION_BINS)
    n_bins = int(bins.max()) + 1
    sums = np.bincount(bins, values, minlength=n_bins)
    counts = np.bincount(bins, minlength=n_bins)
    # Requests per bin: distinct (bin, request) pairs.
    pairs = np.unique(bins.astype(np.int64) * len(arrays) + owner)
    requests = np.bincount(pairs // len(arrays), minlength=n_bins)
    return [
        ProfileRow(dataset, proposer, group, len(members), axis, *edges(b),
                   float(sums[b] / counts[b]), int(counts[b]), int(requests[b]))
        for b in range(n_bins) if counts[b]
    ]


def position_profiles(records: Sequence[TraceRecord], groups: int = GROUPS) -> list[ProfileRow]:
    """Rows for every dataset × proposer × length group × axis × bin."""
    rows: list[ProfileRow] = []
    for dataset, members in by_dataset(records).items():
        edges = length_edges([r.output_len for r in members], groups)
        bounds = list(zip([0, *edges], [*edges, None]))
        for proposer in proposer_names(members):
            having = [r for r in members if proposer in r.proposers]
            for lo, hi in bounds:
                group = [r for r in having if lo <= r.output_len and (hi is None or r.output_len < hi)]
                if not group:
                    continue
                label = group_label(lo, hi)
                for axis in ("position", "fraction"):
                    rows.extend(_binned(dataset, proposer, label, group, axis))
    return rows
