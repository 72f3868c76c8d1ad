"""What if: a cost model calibrated to the user's own engine predicts what was not measured.

A model fitted with ``specscope costmodel fit --from-sweep`` names the sweep cells it was
fitted to (:class:`~specscope.costmodel.linear.FittedCell`). Everything else the report
simulates with it — every k, tree, adaptive, oracle and learned policy, every batch size — is a
prediction. Per dataset and simulated batch size, one :class:`WhatIfRow`:

- ``in_fit``: whether the fit saw any cell of this batch size (``False``: pure prediction);
- ``best_in_fit``: whether it saw the predicted best's own configuration (method and k, or
  tree) at any batch size (``False``: that drafting cost is extrapolated from other ks);
- ``predicted_best``: the configuration an engine runs — a fixed k or a static tree of any
  proposer — with the highest simulated speedup (no SD when nothing beats 1), over the whole run
  of the traces' requests, ramp-up and drain included (as a closed-loop sweep measures a cell);
  ``steady_best``: the same by the steady-state speedup (only iterations with every slot
  decoding: a loaded server's), None where no iteration had; the two differ where the requests
  fill the batch for part of the run only, which the summary says;
- where ``--measured`` cells exist at this dataset (a measured cell's workload file stem) and
  batch size and the report simulates them (:attr:`MeasuredCell.simulated_speedup`), the
  **measured check**: the measured winner among every measured cell there (no SD, speedup 1,
  always a candidate), and the predicted winner *among the configurations that were measured and
  simulated* (a check can only rank what it ran), with ``agree`` = the two name the same method,
  k and tree (``None``, not checked, where the measured winner is a configuration the report did
  not simulate, such as a k beyond its ``--ks``). ``measured_engine``: the engine the measured
  cells there name, beside ``fitted_engine``, the sweep's engine the model was fitted to
  (:func:`engine_note` says where they differ). ``measured_in_fit``:
  whether the winner's own cell was one the model was fitted to. ``pick_measured_speedup`` is
  what that predicted pick measured, and ``lost_pct`` = 100 · (winner's − pick's) / winner's
  measured speedup: what trusting the prediction would have cost (0 where they agree). A miss
  between two configurations that measured within a percent of each other is a tie the
  measurement cannot split; a large ``lost_pct`` is a wrong prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from specscope.analysis.measured import MeasuredCell, winner as measured_winner, workload_name
from specscope.costmodel.linear import FittedCell, FittedSweep
from specscope.methods import NO_SD
from specscope.report.style import batch_axis, proposer_colours, panel_grid, plt, short
from specscope.sim.grid import COMBINED, SimRow
from specscope.sim.policies import configured_policy

RUNNABLE = ("fixed:", "tree:")  # the policies an engine runs as configured: a chain of k, a static tree


@dataclass
class WhatIfRow:
    """One dataset × batch size (module docstring)."""

    dataset: str
    batch_size: int
    in_fit: bool
    predicted_best: str
    predicted_speedup: float
    best_in_fit: bool | None = None  # None: no SD is the best
    steady_best: str | None = None  # the winner in the steady state (None: no iteration had every slot decoding)
    steady_speedup: float | None = None
    fitted_engine: str | None = None  # the sweep's engine the model was fitted to (None: the model names none)
    measured_engine: str | None = None  # the engine the measured cells here name (None: none measured, or unsaid)
    measured_best: str | None = None
    measured_speedup: float | None = None
    measured_in_fit: bool | None = None
    predicted_among_measured: str | None = None
    predicted_among_measured_speedup: float | None = None
    pick_measured_speedup: float | None = None
    lost_pct: float | None = None
    agree: bool | None = None

    def flat(self) -> dict:
        return asdict(self)


def _config(cell: MeasuredCell) -> str:
    """A measured cell's configuration as the simulator names it: ``none``, ``METHOD fixed:K``,
    ``METHOD tree:SHAPE`` or ``METHOD confidence:p:K`` (`` beside learned`` after a chain run
    beside a policy: another measurement of that configuration, told apart)."""
    return NO_SD if cell.method == NO_SD else f"{cell.method} {cell.simulated_policy}" + (
        " beside learned" if cell.beside else "")


def fitted_to(cell: MeasuredCell, fitted: Sequence[FittedCell], engine: str) -> bool:
    """Whether ``cell`` is one the model was fitted to (workloads compared by the datasets they
    name, :func:`~specscope.analysis.measured.workload_name`: a sweep's cells keep the path typed,
    ``code8.jsonl``), by its ``engine`` where the cell and the model both name one."""
    if engine and cell.engine is not None and cell.engine != engine:
        return False
    return cell.confidence is None and any(  # a sweep's cells are chains and trees
        f.method == cell.method and f.batch_size == cell.batch_size and workload_name(f.workload) == cell.dataset
        and (f.tree or None) == (cell.tree or None) and (f.tree is not None or f.k == cell.k) for f in fitted)


def whatif_rows(rows: Sequence[SimRow], measured: Sequence[MeasuredCell], fitted: Sequence[FittedCell],
                engine: str = "") -> list[WhatIfRow]:
    """One row per simulated dataset × batch size (module docstring); empty when the model is
    not calibrated. ``engine``: the sweep's engine it was fitted to ("": the model names none)."""
    if not fitted:
        return []
    fitted_sizes = {f.batch_size for f in fitted}
    out = []
    for dataset, b in dict.fromkeys((r.dataset, r.batch_size) for r in rows):
        runnable = [r for r in rows if r.dataset == dataset and r.batch_size == b and r.acc != COMBINED
                    and r.policy.startswith(RUNNABLE)]
        best = max(runnable, key=lambda r: r.speedup, default=None)
        row = WhatIfRow(dataset, b, b in fitted_sizes, *((f"{best.acc} {best.policy}", best.speedup)
                                                          if best is not None and best.speedup > 1 else (NO_SD, 1.0)),
                        fitted_engine=engine or None)
        if row.predicted_best != NO_SD:
            row.best_in_fit = any(f.method == best.acc and configured_policy(f.k, f.tree) == best.policy
                                  for f in fitted)
        steady = [r for r in runnable if math.isfinite(r.steady_speedup)]
        if steady:
            top = max(steady, key=lambda r: r.steady_speedup)
            row.steady_best, row.steady_speedup = ((f"{top.acc} {top.policy}", top.steady_speedup)
                                                   if top.steady_speedup > 1 else (NO_SD, 1.0))
        here = [c for c in measured if c.dataset == dataset and c.batch_size == b]
        priced = [(c, c.simulated_speedup) for c in here if c.simulated_speedup is not None]
        row.measured_engine = ", ".join(dict.fromkeys(c.engine for c in here if c.engine is not None)) or None
        if priced:  # no SD is always a candidate: speedup 1, measured or not
            priced.append((MeasuredCell(dataset, NO_SD, 0, b, 1.0), 1.0))
            winner = measured_winner(here, dataset, b)  # over every measured cell
            pick, speedup = max(priced, key=lambda cp: cp[1])
            row.measured_best, row.measured_speedup = _config(winner), winner.measured_speedup
            row.measured_in_fit = winner.method != NO_SD and fitted_to(winner, fitted, engine)
            row.predicted_among_measured, row.predicted_among_measured_speedup = _config(pick), speedup
            checked = winner.method == NO_SD or any(c is winner for c, _ in priced)  # else not simulated: no rank
            row.agree = _config(pick) == _config(winner) if checked else None
            if checked:
                row.pick_measured_speedup = pick.measured_speedup
                row.lost_pct = 100.0 * (winner.measured_speedup - pick.measured_speedup) / winner.measured_speedup
        out.append(row)
    return out


def engine_note(measured: Sequence[MeasuredCell], model: str, engine: str, sweep: FittedSweep | None) -> str | None:
    """One note where the ``measured`` cells checking cost model ``model`` are not of the sweep's
    ``engine`` it was fitted to (``sweep``: where it came from), or where either side names none
    (nothing checks it); None where every cell names that engine."""
    named = list(dict.fromkeys(c.engine for c in measured if c.engine is not None))
    if not engine:
        of = f" (engine {', '.join(map(repr, named))})" if named else ""
        return (f"cost model {model!r} names no engine it was fitted to (a file written before fits kept it, or by "
                f"hand): nothing checks that the measured cells{of} are of it")
    other = [name for name in named if name != engine]
    unsaid = sum(c.engine is None for c in measured)
    parts = ([f"{sum(c.engine in other for c in measured)} of {len(measured)} measured cells are of engine "
              f"{', '.join(map(repr, other))}"] if other else []) + \
        ([f"{unsaid} of {len(measured)} measured cells name no engine"] if unsaid else [])
    if not parts:
        return None
    fitted = f"cost model {model!r} was fitted to engine {engine!r}" + (f" (sweep {sweep.describe()})" if sweep else "")
    return "; ".join(parts) + f", and {fitted}: " + (
        "the what-if's measured check sets its predictions against another engine's cells (agree and lost % say how "
        "its prices carry over to that engine, not how well it predicts its own)" if other else
        "nothing checks that they are of it")


def whatif_summary(rows: Sequence[WhatIfRow]) -> str | None:
    """How often the predicted winner matched the measured one, on batch sizes the fit never saw
    and on those it did, and the most a miss cost (``lost_pct``); and where the steady state's
    winner is another."""
    checked = [r for r in rows if r.agree is not None]
    apart = [r for r in rows if r.steady_best is not None and r.steady_best != r.predicted_best]
    steady = "" if not apart else (
        " At " + ", ".join(f"B={r.batch_size} ({r.dataset}: {r.steady_best} {r.steady_speedup:.2f}×)" for r in apart)
        + " the steady state (every slot decoding, as on a loaded server) has another winner than the whole run: the"
          " traces' requests fill those batch sizes for part of their run only.")
    if not checked:
        return steady.strip() or None
    parts, several = [], len({r.dataset for r in rows}) > 1  # several: a check per workload and batch size
    what = "workloads and batch sizes" if several else "batch sizes"
    for label, group in (("not in the fit", [r for r in checked if not r.in_fit]),
                         ("in the fit", [r for r in checked if r.in_fit])):
        if group:
            sizes = ", ".join(f"{r.dataset} B={r.batch_size}" if several else f"B={r.batch_size}" for r in group)
            parts.append(f"in {sum(r.agree for r in group)} of {len(group)} {what} {label} ({sizes})")
    sentence = "The predicted winner among the measured configurations is the measured one " + "; ".join(parts)
    misses = [r for r in checked if not r.agree]
    if misses:
        worst = max(misses, key=lambda r: r.lost_pct)
        least = min(r.lost_pct for r in misses)
        span = f"{worst.lost_pct:.1f} %" if len(misses) == 1 else f"{least:.1f}–{worst.lost_pct:.1f} %"
        digits = 2 if round(worst.pick_measured_speedup, 2) != round(worst.measured_speedup, 2) else 3  # told apart
        sentence += (f"; where not, the predicted pick measured {span} below the measured winner"
                     f" ({'' if len(misses) == 1 else 'worst: '}{worst.predicted_among_measured} "
                     f"{worst.pick_measured_speedup:.{digits}f}× against {worst.measured_best} "
                     f"{worst.measured_speedup:.{digits}f}× at B={worst.batch_size}, {worst.dataset})")
    return sentence + "." + steady


def whatif_figure(rows: Sequence[SimRow], measured: Sequence[MeasuredCell], fitted: Sequence[FittedCell],
                  engine: str = "") -> plt.Figure:
    """Per dataset: each proposer's best fixed:k by batch size as the calibrated model predicts
    it (line; each point labelled with its k), and every measured cell (circle, labelled with its
    k; filled: a cell of its ``engine`` the model was fitted to, hollow: one it never saw) with a dash at the
    speedup the model predicts for that same cell."""
    datasets = list(dict.fromkeys(r.dataset for r in rows))
    proposers = list(dict.fromkeys(r.acc for r in rows if r.acc != COMBINED))
    colours = proposer_colours(proposers)
    fig, axes = panel_grid(len(datasets), 2, 6.0, 4.2, sharey=True)
    for ax, dataset in zip(axes, datasets):
        for proposer in proposers:
            fixed = [r for r in rows if r.dataset == dataset and r.acc == proposer and r.policy.startswith("fixed:")]
            sizes = sorted({r.batch_size for r in fixed})
            best = [max((r for r in fixed if r.batch_size == b), key=lambda r: r.speedup) for b in sizes]
            colour = colours[proposer]
            ax.plot(sizes, [r.speedup for r in best], color=colour, label=f"{proposer} best k (predicted)",
                    marker="o" if len(sizes) == 1 else None, markersize=4)  # one batch size: a point, not nothing
            for r in best:
                ax.annotate(r.policy.removeprefix("fixed:"), (r.batch_size, r.speedup), fontsize=7,
                            textcoords="offset points", xytext=(0, 4), ha="center", color=colour)
            for cell in (c for c in measured if c.dataset == dataset and c.method == proposer):
                predicted = cell.simulated_speedup
                if predicted is None:
                    continue
                ax.plot([cell.batch_size], [cell.measured_speedup], marker="o", linestyle="none", color=colour,
                        markerfacecolor=colour if fitted_to(cell, fitted, engine) else "white")
                ax.plot([cell.batch_size], [predicted], marker="_", markersize=12, linestyle="none", color=colour)
                ax.annotate(cell.tree or str(cell.k), (cell.batch_size, cell.measured_speedup), fontsize=7,
                            textcoords="offset points", xytext=(6, -3), color=colour)
        ax.axhline(1.0, color="black", linewidth=0.8)
        batch_axis(ax, sorted({r.batch_size for r in rows}))
        ax.set_ylabel("speedup over no SD")
        ax.set_title(short(dataset))
        ax.legend(loc="best", title="circles: measured k (filled: in the fit); dashes: predicted")
    return fig
