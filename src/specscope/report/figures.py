"""The report's line, box, bar and bound figures (the two heatmaps live in ``heatmaps``).

Every function takes analysis results and returns a matplotlib Figure; ``style.save`` writes it.
Call them inside ``style.figure_style()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from specscope.analysis.bound_points import BoundPoint
from specscope.analysis.overlap import OverlapRow
from specscope.analysis.position import ProfileRow
from specscope.analysis.timesplit import NO_SD, PHASES
from specscope.report.style import (
    CYCLE,
    DIVERGING,
    MISSING,
    PHASE_COLOURS,
    batch_axis,
    colour_for,
    dataset_colours,
    proposer_colours,
    panel_grid,
    plain_log_axis,
    plt,
    short,
)
from specscope.sim.grid import COMBINED, SimRow
from specscope.theory.bound import expected_speedup
from specscope.validate import K_MAX_LIMIT

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _unique(values) -> list:
    return list(dict.fromkeys(values))


def speedup_figure(rows: Sequence[SimRow], policies: Sequence[str]) -> plt.Figure:
    """Figure 1: speedup vs batch size, a panel per dataset, a line per proposer × policy
    (colour = proposer, marker = policy, oracles dashed, the combined oracle black dash-dot)."""
    rows = [r for r in rows if r.policy in policies or r.acc == COMBINED]
    datasets = _unique(r.dataset for r in rows)
    colours = proposer_colours([a for a in _unique(r.acc for r in rows) if a != COMBINED])
    markers = {p: MARKERS[i % len(MARKERS)] for i, p in enumerate(p for p in policies if p != "oracle")}
    fig, axes = panel_grid(len(datasets), 2, 6.0, 4.2, sharey=True)
    handles: dict[str, object] = {}
    owner: dict[str, str] = {}  # each legend entry's proposer (its column)
    for ax, dataset in zip(axes, datasets):
        mine = [r for r in rows if r.dataset == dataset]
        for acc, policy in _unique((r.acc, r.policy) for r in mine):
            cell = sorted((r for r in mine if r.acc == acc and r.policy == policy), key=lambda r: r.batch_size)
            x, y = [r.batch_size for r in cell], [r.speedup for r in cell]
            if acc == COMBINED:
                style = {"color": "black", "linestyle": "-.", "linewidth": 2.0, "marker": "x", "markersize": 6}
                label = f"{policy} (optimistic)"
            elif policy == "oracle":
                style = {"color": colours[acc], "linestyle": "--", "linewidth": 2.0, "marker": "D", "markersize": 4,
                         "markerfacecolor": "none"}  # a marker: one batch size draws a point, not nothing
                label = f"{acc} oracle"
            else:
                style = {"color": colours[acc], "linestyle": "-", "linewidth": 1.4, "marker": markers.get(policy, "o"),
                             "markersize": 5}
                label = f"{acc} {policy}"
            handles[label] = ax.plot(x, y, label=label, **style)[0]
            owner[label] = acc
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
        batch_axis(ax, sorted({r.batch_size for r in mine}))
        ax.set_title(short(dataset))
        ax.set_ylabel("speedup over no SD")
    # Column-major legend: one column per proposer (the combined oracle last), each padded with blank
    # entries to the longest, so that a proposer drawn at fewer policies does not spill into the next's column
    groups = {acc: [label for label in handles if owner[label] == acc] for acc in _unique(owner.values())}
    groups = dict(sorted(groups.items(), key=lambda item: item[0] == COMBINED))
    per_column = max(map(len, groups.values()), default=1)
    entries = [entry for labels in groups.values() for entry in [(handles[label], label) for label in labels]
               + [(plt.Line2D([], [], alpha=0), " ")] * (per_column - len(labels))]
    if entries:
        fig.legend(*zip(*entries), loc="outside lower center", ncol=len(groups), frameon=False)
    return fig


PROFILE_MIN_REQUESTS = 5  # a position bin reached by fewer requests of its group is not drawn


def profile_figure(rows: Sequence[ProfileRow], min_requests: int = PROFILE_MIN_REQUESTS) -> plt.Figure:
    """Figure 4: mean acc_len along the output per length group; two panels per dataset ×
    proposer (by position, log axis; by fraction of the output), four a row. Bins that fewer than
    ``min_requests`` requests reach are not drawn (they stay in the CSV) — in a group of fewer, the
    bins that all of them reach are."""
    panels = _unique((r.dataset, r.proposer) for r in rows)
    fig, axes = panel_grid(2 * len(panels), 4, 4.2, 3.4)  # two proposers a row: many stay legible
    for i, (dataset, proposer) in enumerate(panels):
        groups = _unique(r.group for r in rows if r.dataset == dataset)
        colours = {g: CYCLE[j % len(CYCLE)] for j, g in enumerate(groups)}
        for a, axis in enumerate(("position", "fraction")):
            ax = axes[2 * i + a]
            for group in groups:
                key = (dataset, proposer, group, axis)
                cell = [r for r in rows if (r.dataset, r.proposer, r.group, r.axis) == key]
                if not cell:
                    continue
                requests = cell[0].group_requests
                cell = [r for r in cell if r.requests >= min(min_requests, requests)]
                ax.plot([(r.x_lo + r.x_hi) / 2 for r in cell], [r.mean_acc_len for r in cell],
                        color=colours[group], linewidth=1.5, label=f"{group} ({requests} req.)",
                        marker="o" if len(cell) == 1 else None, markersize=4)  # one bin: a point, not nothing
            if axis == "position":
                ax.set_xscale("log")
                plain_log_axis(ax.xaxis)
                ax.set_xlabel("output position (tokens, log scale)")
            else:
                ax.set_xlabel("fraction of the output")
            ax.set_ylabel("mean acc_len")
            ax.set_title(f"{short(dataset)} · {proposer} · by {axis}")
            if a == 0 and ax.lines:
                ax.legend(title="output length", loc="best")
    return fig


def request_box_figure(means: Sequence[dict]) -> plt.Figure:
    """Figure 5: box plots of the per-request mean acc_len, per dataset (groups) × proposer
    (colours); whiskers at the 5th/95th percentiles, means as white diamonds."""
    datasets = _unique(m["dataset"] for m in means)
    proposers = _unique(m["proposer"] for m in means)
    colours = proposer_colours(proposers)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(datasets) * len(proposers) ** 0.5 + 2), 4.2),
                           layout="constrained")
    width = 0.8 / len(proposers)
    for j, proposer in enumerate(proposers):
        data = [[m["mean_acc_len"] for m in means if m["dataset"] == d and m["proposer"] == proposer] for d in datasets]
        present = [k for k, d in enumerate(data) if d]
        positions = [k + (j - (len(proposers) - 1) / 2) * width for k in present]
        box = ax.boxplot([data[k] for k in present], positions=positions, widths=width * 0.85, whis=(5, 95),
                         patch_artist=True, showmeans=True, showfliers=True,
                         meanprops={"marker": "D", "markerfacecolor": "white", "markeredgecolor": "black"},
                         flierprops={"marker": ".", "markersize": 3, "alpha": 0.5},
                         medianprops={"color": "black"})
        for patch in box["boxes"]:
            patch.set_facecolor(colours[proposer])
            patch.set_alpha(0.8)
        if box["boxes"]:
            box["boxes"][0].set_label(proposer)
    ax.set_xticks(range(len(datasets)))
    ax.set_xticklabels([short(d) for d in datasets])
    ax.set_ylabel("per-request mean acc_len")
    ax.legend(title="proposer", loc="upper right")
    return fig


def overlap_figure(rows: Sequence[OverlapRow], lookup: str, reference_policy: str) -> plt.Figure:
    """Figure 6: BLEU-4 bin × batch size heatmap of the lookup proposer's relative speedup over
    its dataset's reference (each row names it), one panel per dataset × lookup policy, cells
    annotated in percent."""
    panels = _unique((r.dataset, r.policy) for r in rows)
    fig, axes = panel_grid(len(panels), 2, 6.0, 3.8)
    values = np.array([r.relative_speedup for r in rows], dtype=float)
    limit = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
    limit = max(limit, 0.05)
    image = None
    for ax, (dataset, policy) in zip(axes, panels):
        cell = [r for r in rows if r.dataset == dataset and r.policy == policy]
        bins = _unique(r.bin for r in cell)
        sizes = sorted({r.batch_size for r in cell})
        grid = np.full((len(bins), len(sizes)), np.nan)
        counts = {}
        for r in cell:
            grid[bins.index(r.bin), sizes.index(r.batch_size)] = r.relative_speedup
            counts[r.bin] = r.requests
        image = ax.imshow(grid, cmap=DIVERGING, vmin=-limit, vmax=limit, aspect="auto", origin="lower")
        for (b, s), value in np.ndenumerate(grid):
            text = "n=0" if counts[bins[b]] == 0 else f"{value:+.0%}"
            ax.text(s, b, text, ha="center", va="center", fontsize=8,
                    color="white" if np.isfinite(value) and abs(value) > 0.5 * limit else "black")
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([str(s) for s in sizes])
        ax.set_yticks(range(len(bins)))
        ax.set_yticklabels([f"{b} (n={counts[b]})" for b in bins])
        ax.set_xlabel("batch size")
        ax.set_ylabel("BLEU-4 prompt vs output")
        ax.set_title(f"{short(dataset)} · {lookup} {policy} vs {cell[0].reference} {reference_policy}")
        ax.set_facecolor(MISSING)
        ax.grid(False)
    if image is not None:
        references = _unique(r.reference for r in rows)
        over = references[0] if len(references) == 1 else "each panel's reference"
        fig.colorbar(image, ax=axes, label=f"relative speedup of {lookup} over {over}", format="{x:+.0%}")
    return fig


MAX_MEASURED_BARS = 24  # more measured rows (a study's: a file per workload × method) are pooled over their files


def timesplit_figure(predicted: Sequence[dict], policy: str, measured: Sequence[dict] = ()) -> plt.Figure:
    """Figure 7: share of time per phase, stacked bars per proposer × batch size (a panel per
    dataset, policy ``policy``), plus a panel of measured runs when given (each bar naming its
    step-records file where there are several; beyond :data:`MAX_MEASURED_BARS` bars, a bar per
    method × k × batch size pooling the files' seconds, the panel naming how many files —
    timesplit.csv keeps each file's row)."""
    rows = [r for r in predicted if r["policy"] == policy]
    files = len({r["steps_file"] for r in measured})
    several = files > 1
    title = "measured (engine step records)"
    if several and len(measured) > MAX_MEASURED_BARS:
        measured, several = _pooled(measured), False
        title = f"measured (engine step records, {files} files pooled)"
    panels = [(d, [r for r in rows if r["dataset"] == d]) for d in _unique(r["dataset"] for r in rows)]
    if measured:
        panels.append((title, list(measured)))
    fig, axes = panel_grid(len(panels), 2, 6.2, 4.0, sharey=True)
    for ax, (title, cell) in zip(axes, panels):
        labels = [("no SD" if r["method"] == NO_SD else r["method"]) + (f" k={r['k']}" if r.get("k") else "")
                  + f"\nB={r['batch_size']}" + (f"\n{Path(r['steps_file']).name}" if several and "steps_file" in r else "")
                  for r in cell]
        bottom = np.zeros(len(cell))
        for phase in PHASES:
            share = np.array([r[f"{phase}_share"] for r in cell])
            ax.bar(range(len(cell)), share, bottom=bottom, color=PHASE_COLOURS[phase], label=phase, width=0.8)
            bottom += share
        ax.set_xticks(range(len(cell)))
        ax.set_xticklabels(labels, fontsize=7, rotation=90 if len(cell) > 8 else 0)
        ax.set_ylim(0, 1)
        ax.set_ylabel("share of time")
        ax.set_title(title if title.startswith("measured") else f"{short(title)} · {policy} (predicted)")
        ax.grid(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(PHASES), frameon=False)
    return fig


def _pooled(measured: Sequence[dict]) -> list[dict]:
    """Measured time-split rows pooled over their files: one per method × k × batch size, in order
    of first appearance, its shares of the summed seconds."""
    pools: dict[tuple, dict] = {}
    for r in measured:
        pool = pools.setdefault((r["method"], r["k"], r["batch_size"]), {"method": r["method"], "k": r["k"],
                                "batch_size": r["batch_size"], **{f"{p}_s": 0.0 for p in PHASES}})
        for phase in PHASES:
            pool[f"{phase}_s"] += r[f"{phase}_s"]
    for pool in pools.values():
        total = sum(pool[f"{p}_s"] for p in PHASES) or 1.0
        pool.update({f"{p}_share": pool[f"{p}_s"] / total for p in PHASES})
    return list(pools.values())


def bound_figure(points: Sequence[BoundPoint], alphas: Sequence[float] = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9),
                 k_max: int = 12) -> plt.Figure:
    """Figure 8: closed-form E[speedup] vs k for a grid of α at each proposer's c(k) (thin grey
    lines, labelled; c at each k, as its drafting costs there), with each dataset's fitted α
    drawn in colour to the k its traces recorded and its optimum there starred; k runs to
    ``k_max`` or further when an optimum lies beyond it."""
    traced = [p.k_max for p in points if p.k_max < K_MAX_LIMIT]  # (every first draft rejected: no depth to draw)
    k_max = max([k_max, *[p.best_k for p in points], min(max(traced, default=0), 32)])  # curves to their k_max
    proposers = _unique(p.proposer for p in points)
    datasets = _unique(p.dataset for p in points)
    colours = dataset_colours(datasets)  # the panels are proposers: their lines, datasets, in no proposer's colour
    fig, axes = panel_grid(len(proposers), 2, 6.0, 4.2)
    ks = np.arange(0, k_max + 1)
    for ax, proposer in zip(axes, proposers):
        mine = [p for p in points if p.proposer == proposer]
        c = float(np.mean([p.c for p in mine]))
        reach = min(k_max, *(len(p.c_by_k) for p in mine))  # every point's c is priced to here
        grid = ks[: reach + 1]
        curve = np.concatenate([[0.0], np.mean([p.c_by_k[:reach] for p in mine], axis=0)])  # [reach + 1]
        for alpha in alphas:
            y = expected_speedup(alpha, grid, curve)
            ax.plot(grid, y, color="grey", linewidth=0.9, alpha=0.8)
            ax.annotate(f"α={alpha:g}", (grid[-1], y[-1]), fontsize=7, color="dimgrey",
                        xytext=(3, 0), textcoords="offset points", va="center")
        for p in mine:
            traced = ks[ks <= p.k_max]  # the star is the best of these: the curve stops where the traces do
            y = expected_speedup(p.alpha, traced, np.concatenate([[0.0], p.c_by_k])[: len(traced)])
            ax.plot(traced, y, color=colours[p.dataset], linewidth=2.2,
                    label=f"{short(p.dataset)}: α={p.alpha:.2f}, c={p.c:.3f} at k={p.c_k}")
            ax.plot([p.best_k], [p.best_speedup], marker="*", markersize=14, color=colours[p.dataset],
                    markeredgecolor="black")
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("k (draft tokens per step)")
        ax.set_ylabel("E[speedup] (closed form)")
        ax.set_title(f"{proposer} · c≈{c:.3f} at k={mine[0].c_k}, batch {mine[0].batch_size} (curves: c at each k)")
        ax.set_xlim(0, k_max + 1.5)
        ax.legend(loc="upper left", fontsize=8)
    return fig


SIMULATED = "dashed, hollow: simulated"  # the measured figure's legend entry for the simulator's points


def measured_figure(cells: Sequence) -> plt.Figure:
    """Figure 9: measured speedup (solid, markers) and the simulator's prediction for the same
    runs (dashed, hollow markers: every point simulated, a lone one too; a gap where a run was
    not), per dataset panel, a line per configuration: colour = method, marker = k (or tree; a
    drafter stopped at its confidence, its own); the legend below the panels."""
    def config(cell) -> str:  # a chain run beside a policy is a line of its own (its label says so)
        if cell.confidence is not None:
            return f"{cell.label} k≤{cell.k}"
        beside = " beside learned" if cell.beside else ""
        return cell.label if cell.tree is not None else f"{cell.method}{beside} k={cell.k}"

    datasets = _unique(c.dataset for c in cells)
    colours = proposer_colours(_unique(c.method for c in cells))
    def shape(cell) -> tuple:
        return cell.tree or cell.k, cell.confidence

    shapes = {key: MARKERS[i % len(MARKERS)] for i, key in enumerate(_unique(shape(c) for c in cells))}
    fig, axes = panel_grid(len(datasets), 2, 6.0, 4.2, sharey=True)
    handles: dict[str, object] = {}
    for ax, dataset in zip(axes, datasets):
        mine = [c for c in cells if c.dataset == dataset]
        for name in _unique(config(c) for c in mine):
            line = sorted((c for c in mine if config(c) == name), key=lambda c: c.batch_size)
            x, colour = [c.batch_size for c in line], colours[line[0].method]
            marker = shapes[shape(line[0])]
            handles[name] = ax.plot(x, [c.measured_speedup for c in line], marker=marker, color=colour, label=name)[0]
            simulated = [np.nan if c.simulated_speedup is None else c.simulated_speedup for c in line]
            if not np.isnan(simulated).all():
                handles[SIMULATED] = ax.plot(x, simulated, linestyle="--", marker=marker, markerfacecolor="none",
                                             color=colour, label=SIMULATED)[0]
        ax.axhline(1.0, color="black", linewidth=0.8)
        batch_axis(ax, sorted({c.batch_size for c in mine}))
        ax.set_title(short(dataset))
        ax.set_ylabel("speedup over no SD")
    if SIMULATED in handles:  # last in the legend
        handles[SIMULATED] = handles.pop(SIMULATED)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(4, len(handles)),
               frameon=False)
    return fig


def tree_figure(rows: Sequence[SimRow], trees: Sequence) -> plt.Figure:
    """Tree vs chain: speedup vs batch size, a panel per dataset × proposer, a line per tree
    and one per chain ``fixed:D`` it is compared with (dashed, hollow squares: a lone batch size
    still draws a point); each tree's crossover (the first batch size where it no longer beats its
    chain) is marked with a cross; a tree that never beat it has no crossover to mark, and says
    "below its chain throughout" in the legend."""
    panels = _unique((t.dataset, t.proposer) for t in trees)
    fig, axes = panel_grid(len(panels), 2, 6.0, 4.2, sharey=True)
    for ax, (dataset, proposer) in zip(axes, panels):
        mine = [t for t in trees if (t.dataset, t.proposer) == (dataset, proposer)]
        nodes = {f"tree:{t.tree}": f"{t.nodes} nodes" + ("; below its chain throughout" if not t.beats_at
                                                          else "") for t in mine}
        policies = _unique([*nodes, *(t.chain for t in mine)])
        colours = colour_for(policies)
        for policy in policies:
            cell = sorted((r for r in rows if (r.dataset, r.acc, r.policy) == (dataset, proposer, policy)),
                          key=lambda r: r.batch_size)
            chained = policy.startswith("fixed:")
            label = f"chain {policy}" if chained else f"{policy} ({nodes[policy]})"
            ax.plot([r.batch_size for r in cell], [r.speedup for r in cell], color=colours[policy],
                    linestyle="--" if chained else "-", marker="s" if chained else "o", markersize=5, label=label,
                    markerfacecolor="none" if chained else colours[policy])  # a marker: one batch size draws a point
        marked = 0  # crossovers labelled so far: each label a line lower, in its tree's colour (two at one B met)
        for t in mine:
            if t.crossover is not None and t.beats_up_to is not None:
                at = next(r.speedup for r in rows if (r.dataset, r.acc, r.policy, r.batch_size)
                          == (dataset, proposer, f"tree:{t.tree}", t.crossover))
                colour = colours[f"tree:{t.tree}"]
                ax.plot([t.crossover], [at], marker="X", markersize=12 - 3 * marked, color=colour,
                        markeredgecolor="black", linestyle="none")
                ax.annotate(f"{t.tree}: crossover B={t.crossover}", (t.crossover, at), xytext=(6, 6 - 11 * marked),
                            textcoords="offset points", fontsize=8, color=colour)
                marked += 1
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
        batch_axis(ax, sorted({r.batch_size for r in rows if r.dataset == dataset}))
        ax.set_title(f"{short(dataset)} · {proposer}")
        ax.set_ylabel("speedup over no SD")
        ax.legend(loc="best", fontsize=8)
    return fig
