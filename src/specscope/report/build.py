"""Build the whole report: analysis, simulation, the eight figures, CSV tables and index.html.

Traces are read twice: with ``lengths="common"`` for per-position analysis (every proposer's
array aligned with the output) and with ``lengths="own"`` for simulation (each proposer's
array whole, as the paper's simulator did). Skipped parts (a proposer the cost model cannot
price, no n-gram/EAGLE pair for the overlap) are named in the page's notes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specscope.analysis.acceptance import (
    acceptance_stats,
    by_dataset,
    proposer_names,
    request_means,
)
from specscope.analysis.bound_points import bound_points
from specscope.analysis.measured import MeasuredCell, winners
from specscope.analysis.overlap import bleu_scores, overlap_speedups, request_bleu
from specscope.analysis.position import position_profiles
from specscope.analysis.timesplit import measured_split, predicted_split, read_steps
from specscope.fileio import atomic_write_text, write_rows
from specscope.costmodel.registry import resolve_cost_model
from specscope.errors import SpecscopeError
from specscope.progress import LazyProgress
from specscope.report import figures as F
from specscope.report.answer import answer_rows
from specscope.report.config import ReportConfig
from specscope.report.heatmaps import acceptance_heatmap, difference_heatmap
from specscope.report.html import FigureEntry, Page, render
from specscope.report.style import figure_style, save
from specscope.sim.grid import COMBINED, simulate
from specscope.trace import load_traces

log = logging.getLogger(__name__)


@dataclass
class ReportResult:
    index: Path
    figures: list[Path]
    tables: list[Path]
    notes: list[str]


def _pair(names: Sequence[str]) -> tuple[str, str] | None:
    if "ngram" in names and "eagle" in names:
        return ("ngram", "eagle")
    return (names[0], names[1]) if len(names) >= 2 else None


TAIL_FACTOR = 8  # outputs this many times the median make the mixed-mode drain worth a note


def _tail_notes(records: Sequence, config: ReportConfig) -> list[str]:
    """Mixed mode counts the drain at the end of a run, when the few longest requests decode
    alone; say so where a dataset has outputs far longer than its median."""
    if config.sim.mode != "mixed" or max(config.sim.batch_sizes) == 1:
        return []
    notes = []
    for dataset, members in by_dataset(records).items():
        lengths = np.array([r.output_len for r in members])
        median = float(np.median(lengths))
        long = int(np.count_nonzero(lengths > TAIL_FACTOR * median))
        if long:
            notes.append(
                f"{dataset}: {long} request(s) have outputs over {TAIL_FACTOR}× the median ({median:.0f} tokens, "
                f"longest {lengths.max()}); in mixed mode they decode almost alone at the end of the run, so "
                "speedups at large batch sizes weigh them heavily — compare with --mode paper.")
    return notes


def _priceable(cost, names: Sequence[str], notes: list[str]) -> list[str]:
    kept = []
    for name in names:
        try:
            cost.drafting_for(name)
            kept.append(name)
        except SpecscopeError as error:
            notes.append(f"not simulated: {error}")
    return kept


def build_report(traces: Sequence[str | Path], out_dir: str | Path, config: ReportConfig | None = None
                 ) -> ReportResult:
    """Write ``out_dir``/index.html, one PNG per figure and one CSV per table (``config``:
    :class:`ReportConfig` defaults when None)."""
    config = config if config is not None else ReportConfig()
    out = Path(out_dir)
    cost = resolve_cost_model(config.cost_model)
    steps = read_steps(config.steps) if config.steps else []
    notes: list[str] = []
    tables: list[Path] = []
    figures: list[FigureEntry] = []

    def table(name: str, rows: list[dict]) -> None:
        path = out / name
        write_rows(path, rows)
        tables.append(path)

    with LazyProgress("report: reading traces", 14) as bar:
        records, reports = load_traces(traces, lengths="common")
        sim_records, _ = load_traces(traces, lengths="own")
        names = proposer_names(records)
        simulated = _priceable(cost, names, notes)
        if not simulated:
            raise SpecscopeError(f"cost model {cost.name!r} can price none of the proposers {names}")
        try:  # made only once every input has been read: a refused input leaves nothing behind
            out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SpecscopeError(f"{out}: cannot create the output directory ({error.strerror})") from None
        pair = _pair(names)
        notes.extend(_tail_notes(sim_records, config))
        bar.advance(description="report: acceptance statistics")

        singles, pairs = acceptance_stats(records)
        means = request_means(records)
        profile = position_profiles(records)
        table("stats.csv", [s.flat() for s in singles])
        table("pairs.csv", [p.flat() for p in pairs])
        table("request_means.csv", means)
        table("position_profile.csv", [r.flat() for r in profile])
        bar.advance(description="report: simulating")

        rows = simulate(sim_records, simulated, config.policies, cost, config.sim)
        sim_pair = pair if pair and all(p in simulated for p in pair) else None
        if sim_pair:
            rows += simulate(sim_records, [COMBINED], [f"oracle-combined:{sim_pair[0]}+{sim_pair[1]}"],
                             cost, config.sim)
        answer = answer_rows(rows)
        table("speedup.csv", [r.flat() for r in rows])
        table("answer.csv", [a.flat() for a in answer])
        bar.advance(description="report: prompt/output overlap")

        ov = config.overlap
        overlap = []
        scores = bleu_scores(sim_records)
        table("bleu.csv", [r.flat() for r in request_bleu(sim_records, scores, ov.edges)])
        if ov.lookup in simulated and ov.reference in simulated:
            overlap = overlap_speedups(sim_records, cost, config.sim, ov, scores)
            table("overlap.csv", [r.flat() for r in overlap])
        else:
            notes.append(f"figure 6 skipped: it compares proposers {ov.lookup!r} and {ov.reference!r}; "
                         f"the traces have {', '.join(names)}")
        bar.advance(description="report: time split and bound")

        predicted = predicted_split(rows)
        measured = measured_split(steps)
        table("timesplit.csv", predicted + measured)
        points = bound_points(records, cost, simulated, min(config.sim.batch_sizes), config.bound_k)
        table("bound.csv", [p.flat() for p in points])
        bar.advance(description="report: figures")

        def figure(number: int, title: str, sentence: str, filename: str, draw) -> None:
            bar.advance(0, description=f"report: figure {number}")
            with figure_style():
                path = save(draw(), out / filename)
            figures.append(FigureEntry(number, title, sentence, path.read_bytes(), filename))
            bar.advance()

        mode = config.sim.mode
        figure(1, f"Speedup vs batch size ({mode} mode)",
               "Look where each line crosses 1.0 (no SD), which k wins at small and at large batch, and how "
               "far each proposer's best solid line stays below its dashed oracle.",
               "fig1_speedup.png", lambda: F.speedup_figure(rows, config.figure_policies))
        figure(2, "Acceptance per request and output position",
               "Bright streaks are runs of long acceptance: look for long bright bursts (typical of n-gram "
               "copying from the prompt) against an even, fine-grained texture (a model drafter); positions "
               "beyond the 95th percentile of output length are not drawn.",
               "fig2_acceptance_heatmap.png", lambda: acceptance_heatmap(records, names))
        if pair:
            figure(3, f"Where {pair[0]} beats {pair[1]}",
                   f"One colour marks positions where {pair[0]} emits more than {pair[1]}, the other the reverse; "
                   "white is a tie — check whether either wins in bursts or everywhere.",
                   "fig3_difference_heatmap.png", lambda: difference_heatmap(records, *pair))
        else:
            notes.append("figure 3 skipped: the traces hold a single proposer")
        figure(4, "Acceptance along the output, by output length",
               "Check whether acc_len grows along a generation and drops in the last few percent of the "
               "output, and whether long outputs behave differently from short ones.",
               "fig4_position_profile.png", lambda: F.profile_figure(profile))
        figure(5, "Per-request mean acc_len",
               "The spread matters as much as the mean: wide boxes mean some requests gain a lot from SD "
               "and others nothing.",
               "fig5_request_boxplots.png", lambda: F.request_box_figure(means))
        if overlap:
            figure(6, f"{ov.lookup} vs {ov.reference} by prompt/output overlap",
                   f"Read across a row: {ov.lookup} wins (positive percentages) only where the output copies "
                   "the prompt (high BLEU-4), and its edge fades as the batch grows.",
                   "fig6_overlap.png", lambda: F.overlap_figure(overlap, ov.lookup, ov.reference, ov.reference_policy))
        figure(7, "Where step time goes",
               "Compare the drafting slice across proposers, and how the verification and prefill "
               "slices change with batch size.",
               "fig7_time_split.png", lambda: F.timesplit_figure(predicted, config.timesplit_policy, measured))
        figure(8, "Closed-form bound",
               "Each star is the best k the i.i.d. model predicts for the measured α and c; where the "
               "curve is flat, k matters little, where it falls, a long k costs more than it gains.",
               "fig8_bound.png", lambda: F.bound_figure(points))

        measured_cells = list(config.measured)
        if measured_cells:
            table("measured.csv", [c.flat() for c in measured_cells])
            figure(9, "Measured speedup, and the simulator's prediction for the same runs",
                   "Solid lines are what the engine measured, dashed what the simulator predicted from the "
                   "traces and the cost model: the gap between them is the simulator's error.",
                   "fig9_measured.png", lambda: F.measured_figure(measured_cells))
        stats_header = ["dataset", "proposer", "requests", "positions", "mean", "median", "std", "p5", "p95",
                        "pooled mean", "mean prompt", "mean output"]
        stats_rows = [[s.dataset, s.proposer, s.requests, s.positions, s.request_mean, s.request_median,
                       s.request_std, s.request_p5, s.request_p95, s.position_mean, s.mean_prompt_len,
                       s.mean_output_len] for s in singles]
        pair_rows = [[p.dataset, f"{p.a} vs {p.b}", p.positions, p.a_beats_b, p.b_beats_a, p.ties] for p in pairs]
        extremes = _extremes(means)
        page = Page(
            traces=[str(t) for t in traces], cost_model=cost.name, mode=mode,
            batch_sizes=config.sim.batch_sizes, answer=answer, figures=figures,
            tables=[
                ("Acceptance length per request (mean acc_len of each request, then statistics)",
                 stats_header, stats_rows),
                ("Head to head: share of positions where one proposer emits more",
                 ["dataset", "pair", "positions", "first wins", "second wins", "ties"], pair_rows),
                ("Requests with the lowest and highest mean acc_len",
                 ["dataset", "proposer", "lowest id", "lowest", "highest id", "highest"], extremes),
                *_measured_tables(measured_cells),
            ],
            load_summaries=[r.summary() for r in reports], notes=notes,
            csv_files=[p.name for p in tables], largest_k=max(config.ks) if config.ks else None,
        )
        index = out / "index.html"
        atomic_write_text(index, render(page))
        bar.advance(description="report: done")
    log.info("wrote %s with %d figures and %d tables", index, len(figures), len(tables))
    return ReportResult(index, [out / f.filename for f in figures], tables, notes)


def _measured_tables(cells: Sequence[MeasuredCell]) -> list[tuple[str, list[str], list[list[object]]]]:
    if not cells:
        return []
    return [
        ("Measured: the method and k that won, per workload and batch size",
         ["workload", "batch size", "method", "k", "measured speedup"],
         [[c.dataset, c.batch_size, c.method, c.k, c.measured_speedup] for c in winners(cells)]),
        ("Measured against simulated speedup (error = simulated − measured, in % of measured)",
         ["workload", "method", "k", "batch size", "measured", "simulated", "error %"],
         [[c.dataset, c.method, c.k, c.batch_size, c.measured_speedup,
           "" if c.simulated_speedup is None else c.simulated_speedup,
           "" if c.error_pct is None else f"{c.error_pct:+.1f}"] for c in cells]),
    ]


def _extremes(means: list[dict]) -> list[list[object]]:
    keys = list(dict.fromkeys((m["dataset"], m["proposer"]) for m in means))
    rows = []
    for dataset, proposer in keys:
        mine = [m for m in means if m["dataset"] == dataset and m["proposer"] == proposer]
        low = min(mine, key=lambda m: m["mean_acc_len"])
        high = max(mine, key=lambda m: m["mean_acc_len"])
        rows.append([dataset, proposer, low["id"], low["mean_acc_len"], high["id"], high["mean_acc_len"]])
    return rows
