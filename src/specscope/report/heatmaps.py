"""Figures 2 and 3: acc_len per request × output position, and the difference of two proposers.

Rows are requests sorted by output length (longest at the top); columns are output positions up
to a cap (the 95th percentile of output length, so a few very long requests do not squeeze the
rest), averaged over blocks of positions when there are more than ``MAX_COLUMNS``. Positions a
request does not reach are grey.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.colors import PowerNorm, TwoSlopeNorm

from specscope.analysis.acceptance import by_dataset, k_max_of
from specscope.report.style import DIVERGING, MISSING, SEQUENTIAL, panel_grid, plt, short
from specscope.trace.schema import TraceRecord

MAX_COLUMNS = 700
CAP_PERCENTILE = 95


def position_cap(records: Sequence[TraceRecord]) -> int:
    """Positions shown: the 95th percentile of output length, at least 1."""
    return max(1, math.ceil(np.percentile([r.output_len for r in records], CAP_PERCENTILE)))


def acc_matrix(arrays: Sequence[np.ndarray], cap: int) -> np.ndarray:
    """[requests, columns] float: arrays placed row by row (NaN past each end), cut at ``cap``
    positions and block-averaged to at most ``MAX_COLUMNS`` columns (NaN ignored)."""
    block = max(1, math.ceil(cap / MAX_COLUMNS))
    width = math.ceil(cap / block) * block
    grid = np.full((len(arrays), width), np.nan)
    for i, values in enumerate(arrays):
        n = min(len(values), cap)
        grid[i, :n] = values[:n]
    blocks = grid.reshape(len(arrays), -1, block)
    counts = np.sum(~np.isnan(blocks), axis=2)
    sums = np.nansum(blocks, axis=2)
    return np.divide(sums, counts, out=np.full(counts.shape, np.nan), where=counts > 0)


def _sorted(records: Sequence[TraceRecord]) -> list[TraceRecord]:
    return sorted(records, key=lambda r: r.output_len)


def _draw(ax, grid: np.ndarray, cap: int, title: str, **style):
    """``grid`` [requests, columns] spread over positions 0..cap; past-the-end cells stay grey."""
    image = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest",
                      extent=(0, cap, 0, grid.shape[0]), **style)
    ax.set_facecolor(MISSING)
    ax.set_title(title)
    ax.set_xlabel("output position (tokens)")
    ax.set_ylabel("requests, shortest → longest output")
    ax.set_yticks([])
    ax.grid(False)
    return image


def acceptance_heatmap(records: Sequence[TraceRecord], proposers: Sequence[str]) -> plt.Figure:
    """Figure 2: a panel per dataset × proposer, two a row; colour = acc_len (power-scaled
    so both the common 1–4 range and the long bursts up to k_max + 1 stay visible)."""
    groups = by_dataset(records)
    panels = [(dataset, proposer) for dataset, members in groups.items() for proposer in proposers
              if any(proposer in r.proposers for r in members)]
    fig, axes = panel_grid(len(panels), 2, 6.2, 4.0)  # two a row: many datasets × proposers stay legible
    top = max(k_max_of(groups[dataset], p) for dataset, p in panels) + 1
    top = max(top, 2)  # traces whose every acc_len is 1: a scale of no width drew 1 mid-scale
    norm = PowerNorm(gamma=0.5, vmin=1, vmax=top)
    image = None
    for ax, (dataset, proposer) in zip(axes, panels):
        ordered = _sorted(groups[dataset])
        having = [r for r in ordered if proposer in r.proposers]
        grid = acc_matrix([r.acc_len(proposer) for r in having], position_cap(ordered))
        title = f"{short(dataset)} · {proposer} ({len(having)} requests)"
        image = _draw(ax, grid, position_cap(ordered), title, cmap=SEQUENTIAL, norm=norm)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, label="acc_len (tokens emitted per step)", fraction=0.03)
        bar.set_ticks([t for t in (1, 2, 3, 5, 8, 12, 16, 21) if t <= top])
    return fig


def difference_heatmap(records: Sequence[TraceRecord], pairs: Mapping[str, tuple[str, str]],
                       limit: float = 10.0) -> plt.Figure:
    """Figure 3: acc_len of ``a`` − acc_len of ``b`` over their common positions, a panel per
    dataset of ``pairs`` (dataset → its (a, b): the pair its oracle-combined replays) whose records
    hold both (the others get none); diverging colours centred on 0, clipped at ±``limit``."""
    groups = {dataset: members for dataset, members in by_dataset(records).items()
              if dataset in pairs and any(set(pairs[dataset]) <= set(r.proposers) for r in members)}
    fig, axes = panel_grid(len(groups), 2, 6.2, 4.2)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit)
    image = None
    for ax, (dataset, members) in zip(axes, groups.items()):
        a, b = pairs[dataset]
        ordered = [r for r in _sorted(members) if a in r.proposers and b in r.proposers]
        cap = position_cap(ordered)
        diffs = []
        for r in ordered:
            first, second = r.acc_len(a), r.acc_len(b)
            n = min(len(first), len(second))
            diffs.append(first[:n].astype(float) - second[:n])
        grid = acc_matrix(diffs, cap)
        image = _draw(ax, grid, cap, f"{short(dataset)} · {a} − {b}", cmap=DIVERGING, norm=norm)
    if image is not None:
        shown = {pairs[dataset] for dataset in groups}
        a, b = next(iter(shown)) if len(shown) == 1 else ("first", "second")
        fig.colorbar(image, ax=axes, label=f"acc_len({a}) − acc_len({b})", fraction=0.03, extend="both")
    return fig
