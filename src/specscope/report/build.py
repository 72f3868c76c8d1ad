"""Write the report: ``analyse`` the traces, then ``render`` every table, figure and index.html.

What goes in it is listed in :mod:`specscope.report.catalogue`; this module only writes. The
output folder is made after every input has been read, so a refused input leaves nothing behind;
every file the report writes is checked first (none may be a folder or one of the inputs). A
report written into a folder that holds an earlier one removes the files the earlier one wrote and
this one does not (a figure no longer drawn), read from its manifest, ``.specscope-report`` (each
file's name and the SHA-256 of what it wrote); files it did not write stay, and a file it wrote
but someone changed since is neither replaced nor removed: the report is refused. A folder
holding a study (``study.json``) is the study's: only ``specscope study`` writes its report.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specscope.analysis.measured import BesidePair, MeasuredCell, beside_pairs, best_beside, verdict_counts, winners
from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text, check_output_file, write_rows
from specscope.fingerprint import file_sha256, provenance
from specscope.progress import LazyProgress
from specscope.report.analyse import PHASES, ReportData, analyse
from specscope.report.catalogue import FIGURES, TABLES
from specscope.report.config import ReportConfig
from specscope.report.html import FigureEntry, Page, render
from specscope.report.style import figure_style, glyphs_for, save
from specscope.report.whatif import WhatIfRow, whatif_summary
from specscope.trace.schema import by_dataset
from specscope.tracing.settings import traced_with

log = logging.getLogger(__name__)
INDEX = "index.html"
MANIFEST = ".specscope-report"  # the files the last report wrote into its folder: name, tab, SHA-256, a line each
STUDY = "study.json"  # a study's folder holds it (specscope.study.config)


@dataclass
class ReportResult:
    index: Path
    figures: list[Path]
    tables: list[Path]
    notes: list[str]


def build_report(traces: Sequence[str | Path], out_dir: str | Path, config: ReportConfig | None = None,
                 study: bool = False) -> ReportResult:
    """Write ``out_dir``/index.html, one PNG per figure and one CSV per table (``config``:
    :class:`ReportConfig` defaults when None; ``study``: the study writes its own folder's report)."""
    config = config if config is not None else ReportConfig()
    check_outputs(Path(out_dir), [*traces, *config.steps, *([config.policy] if config.policy else []),
                                  *([config.cost_model] if Path(config.cost_model).is_file() else [])], study)
    with LazyProgress("report: reading traces", len(PHASES) + len(FIGURES) + 1) as bar:
        data = analyse(traces, config, lambda phase: bar.advance(description=f"report: {phase}"))
        return render_report(data, Path(out_dir), lambda what: bar.advance(description=f"report: {what}"))


def check_outputs(out: Path, inputs: Sequence[str | Path], study: bool = False) -> None:
    """Before any work: every file the report may write into ``out`` (index.html, the tables, the
    figures) can be written, is not a file of the user's (a report's folder lists its own in
    :data:`MANIFEST`, with what it wrote: a listed file changed since is the user's now) and is not
    one of its ``inputs``; and ``out`` holds no study unless ``study`` (the study's own report)."""
    if not study and (out / STUDY).is_file():
        raise SpecscopeError(f"-o {out}: holds a study ({STUDY}), whose report `specscope study -o {out}` writes; "
                             "write this report to another folder")
    names = [INDEX, MANIFEST, *(spec.filename for spec in TABLES),
             *(f"fig{n}_{spec.slug}.png" for n in range(1, len(FIGURES) + 1) for spec in FIGURES)]
    written = [out / name for name in names]
    manifest, ours = out / MANIFEST, _listed(out)
    elsewhere = "" if study else " or write the report to another folder"  # a study's report is its folder's
    for given in map(Path, inputs):
        if given.is_file() and any(p.is_file() and p.samefile(given) for p in written):
            raise SpecscopeError(f"-o {out}: the report writes {given.name} there, an input of this run; "
                                 f"move it away{elsewhere}")
    for path in written:
        check_output_file(path)
        exists = path.is_file() or path.is_symlink()  # a dangling link too: writing would create its target
        if exists and path != manifest and path.name not in ours:
            raise SpecscopeError(f"-o {out}: holds {path.name}, which no report wrote there (its {MANIFEST} does not "
                                 f"list it): writing the report would replace it; move it away{elsewhere}")
    for name, digest in ours.items():
        path = out / name
        if digest is not None and "/" not in name and path.is_file() and file_sha256(path) != digest:
            raise SpecscopeError(f"-o {out}: {name} was changed since the report wrote it: writing the report would "
                                 f"replace or remove it; move it away{elsewhere}")


def _listed(out: Path) -> dict[str, str | None]:
    """The names the :data:`MANIFEST` of ``out`` lists, each with the SHA-256 of what the report
    wrote there (None: not yet written, or a manifest of names only); none without one."""
    manifest = out / MANIFEST
    if not manifest.is_file():
        return {}
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecscopeError(f"{manifest}: cannot read the report's record of what it wrote here ({error}); "
                             "remove it, or write the report elsewhere") from None
    listed = (line.partition("\t") for line in text.splitlines() if line)
    return {name: digest or None for name, _, digest in listed}


def _list(out: Path, listed: dict[str, str | None]) -> None:
    """Write ``listed`` (name → SHA-256 or None) as the :data:`MANIFEST` of ``out``."""
    atomic_write_text(out / MANIFEST, "".join(f"{name}\t{listed[name] or ''}\n" for name in sorted(listed)))


def _clear_previous(out: Path, writing: set[str]) -> None:
    """Remove what the previous report in ``out`` wrote (its :data:`MANIFEST` lists it) and this
    one does not: a figure or table it no longer draws would sit there as if it were current."""
    for name in _listed(out):
        if name and name not in writing and "/" not in name and (out / name).is_file():
            (out / name).unlink()


def render_report(data: ReportData, out: Path, advance: Callable[[str], None] = lambda what: None) -> ReportResult:
    """Write ``data`` into ``out``: the tables of ``TABLES``, the figures of ``FIGURES`` that can
    be drawn (numbered in page order; the others are named in the notes), and index.html, last
    (the previous report's is removed first). Each file is listed in :data:`MANIFEST` before it is
    written, so that an interrupted report's files are still its own when it is run again, and with
    its SHA-256 once written, so that one the user changed after an interruption is theirs."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecscopeError(f"{out}: cannot create the output directory ({error.strerror})") from None
    claimed = _listed(out)
    if INDEX in claimed and (out / INDEX).is_file():  # the last report's page goes first: interrupted, this run
        (out / INDEX).unlink()  # leaves no page beside tables it does not show (index.html is written last)

    def claim(name: str) -> Path:
        if name not in claimed or claimed[name] is not None:  # listed, and no digest while it is rewritten
            claimed[name] = None
            _list(out, claimed)
        return out / name

    def wrote(path: Path) -> Path:
        claimed[path.name] = file_sha256(path)
        _list(out, claimed)
        return path

    tables = []
    for spec in TABLES:
        rows = spec.rows(data)
        if rows is not None:
            write_rows(claim(spec.filename), rows)
            tables.append(wrote(out / spec.filename))
    glyphs = glyphs_for([*by_dataset(data.records), *data.names])  # the names the figures write
    notes, skipped = [*data.notes, *glyphs.notes()], []
    figures: list[FigureEntry] = []
    for spec in FIGURES:
        missing = spec.missing(data)
        if missing is not None:
            skipped.append((spec.slug.replace('_', ' '), missing))
            advance(spec.slug)
            continue
        number = len(figures) + 1
        filename = f"fig{number}_{spec.slug}.png"
        with figure_style(glyphs):
            path = wrote(save(spec.draw(data), claim(filename)))
        figures.append(FigureEntry(number, spec.title(data), spec.sentence(data), path.read_bytes(), filename))
        advance(spec.slug)
    index = claim(INDEX)
    beside = [name for name in data.config.beside if (out / name).is_file()]  # a study's own tables there
    atomic_write_text(index, render(_page(data, figures, tables + [out / name for name in beside], notes, skipped)))
    writing = {INDEX, *(p.name for p in tables), *(f.filename for f in figures)}
    _clear_previous(out, writing)
    _list(out, {name: file_sha256(out / name) for name in writing})
    advance("done")
    log.info("wrote %s with %d figures and %d tables", index, len(figures), len(tables))
    lengths = [f"{r.summary()} in the per-position analysis (the simulation replays each proposer's whole array, "
               "oracle-combined the positions its proposers' arrays share)"
               for r in data.load_reports if r.mismatched_records]  # as every verb that reads traces says, and where
    return ReportResult(index, [out / f.filename for f in figures], tables,
                        lengths + notes + [f"figure '{name}' not drawn: {why}" for name, why in skipped])


def _page(data: ReportData, figures: list[FigureEntry], tables: list[Path], notes: list[str],
          skipped: list[tuple[str, str]]) -> Page:
    config = data.config
    stats_header = ["dataset", "proposer", "requests", "positions", "mean", "median", "std", "p5", "p95",
                    "pooled mean", "mean prompt", "mean output read"]
    stats_rows = [[s.dataset, s.proposer, s.requests, s.positions, s.request_mean, s.request_median,
                   s.request_std, s.request_p5, s.request_p95, s.position_mean, s.mean_prompt_len,
                   s.mean_output_read] for s in data.singles]
    pair_rows = [[p.dataset, f"{p.a} vs {p.b}", p.positions, p.a_beats_b, p.b_beats_a, p.ties] for p in data.pairs]
    simulated = {row.batch_size for row in data.rows}
    return Page(
        traces=[provenance(t) for t in data.traces], cost_model=data.cost_label, mode=config.sim.mode,
        batch_sizes=[b for b in config.sim.batch_sizes if b in simulated], seed=config.sim.seed,
        left_out=[b for b in config.sim.batch_sizes if b not in simulated], answer=data.answer, figures=figures,
        tables=[
            ("Acceptance length per request (mean acc_len of each request, then statistics)",
             stats_header, stats_rows),
            *([("Head to head: share of positions where one proposer emits more",
                ["dataset", "pair", "positions", "first wins", "second wins", "ties"], pair_rows)] if pair_rows else []),
            ("Requests with the lowest and highest mean acc_len",
             ["dataset", "proposer", "lowest id", "lowest", "highest id", "highest"], _extremes(data.means)),
            *_measured_tables(data.measured),
            *_policy_table(data.policy_table),
            *_whatif_table(data.whatif),
        ],
        load_summaries=[r.summary() for r in data.load_reports] + _other_inputs(data), notes=notes,
        skipped=[f"{name} ({why})" for name, why in skipped],
        csv_files=[p.name for p in tables], edges=data.edges,
        trees=data.tree_answer,
    )


def _other_inputs(data: ReportData) -> list[str]:
    """The inputs beside the traces, one line each: what traced each trace (where its settings are
    kept beside it), the cost model (and the engine and sweep it was fitted to), the step records,
    the measured cells, the policy."""
    config = data.config
    lines = [f"{trace}: {said}" for trace in data.traces if (said := traced_with(trace)) is not None]
    fitted = ([f"engine {data.cost.engine!r}"] if getattr(data.cost, "engine", "") else []) + \
        ([f"sweep {data.cost.sweep.describe()}"] if getattr(data.cost, "sweep", None) else [])  # a sweep's model
    lines.append(f"cost model: {data.cost_label}" + (f", {provenance(config.cost_model)}"
                                                      if Path(config.cost_model).is_file() else "")
                 + (f", fitted to {' of '.join(fitted)}" if fitted else ""))
    if config.steps:
        lines.append(f"step records: {', '.join(map(provenance, config.steps))}")
    if data.measured:
        lines.append(f"measured cells: {len(data.measured)} ({config.measured_by}"
                     + (f": {', '.join(map(provenance, config.measured_files))}" if config.measured_files else "") + ")")
    if config.policy:
        lines.append(f"learned policy: {provenance(config.policy)}")
    return lines


def _measured_tables(cells: Sequence[MeasuredCell]) -> list[tuple[str, list[str], list[list[object]]]]:
    if not cells:
        return []
    return [
        ("Measured: the method and k that won, per workload and batch size",
         ["workload", "batch size", "method", "k", "measured speedup"],
         [[c.dataset, c.batch_size, c.label, _k(c), c.measured_speedup] for c in winners(cells)]),
        ("Measured against simulated speedup (error = simulated − measured, in % of measured; – not simulated)",
         ["workload", "method", "k", "batch size", "measured", "simulated", "error %"],
         [[c.dataset, c.label, _k(c), c.batch_size, c.measured_speedup,
           "–" if c.simulated_speedup is None else c.simulated_speedup,
           "–" if c.error_pct is None else f"{c.error_pct:+.1f}"] for c in cells]),
        *_beside_table(beside_pairs(cells)),
    ]


def _beside_table(pairs: Sequence[BesidePair]) -> list[tuple[str, list[str], list[list[object]]]]:
    """The learned policy against each chain run beside it, paired repeat by repeat
    (:mod:`specscope.analysis.paired`); none where no chain ran beside a policy."""
    if not pairs:
        return []
    flat, best = [p.flat() for p in pairs], best_beside(pairs)
    said = f"; against the best of them (the least ratio), {verdict_counts(best)} of {len(best)} cells" if best else ""
    held = sorted({f["confidence"] for f in flat if f["confidence"] is not None})
    chance = f", so that up to {100 * (1 - held[0]):.1f} % of cells read faster or slower by chance where the two " \
             "run alike" if held else ""
    return [(f"The learned policy against the chains run beside it (the same requests in one lockstep), its speed "
             f"over theirs paired repeat by repeat: the median, and the interval that holds the true median with "
             f"the probability shown for independent repeats, whatever the noise's distribution (5 repeats: the "
             f"least and the greatest ratio, 93.8 %){chance}{said}",
             ["workload", "batch size", "chain", "learned's speedup", "chain's speedup", "learned / chain", "interval",
              "verdict",
              "simulated learned / chain"],
             [[f["dataset"], f["batch_size"], f["chain"], f["learned_speedup"], f["chain_speedup"],
               "–" if f["learned_over_chain"] is None else f["learned_over_chain"],
               "–" if f["low"] is None else f"{f['low']:.3f} … {f['high']:.3f} ({100 * f['confidence']:.1f} %)",
               f["verdict"] if f["learned_over_chain"] is not None else f"– ({f['verdict']})",
               "–" if f["simulated_learned_over_chain"] is None else f["simulated_learned_over_chain"]]
              for f in flat])]


def _k(cell: MeasuredCell) -> object:
    """A measured cell's k column: its chain's k (≤ k where the drafter's confidence stopped it
    sooner); "tree" for a tree, which its label names (a sweep records a tree's node count as k, a
    bench its depth)."""
    return "tree" if cell.tree is not None else cell.k if cell.confidence is None else f"≤{cell.k}"


def _engine(row: WhatIfRow) -> str:
    """The what-if table's measured engine: its name, ``(unsaid)`` where the cells name none, and
    the fitted one beside it where that is another; blank where nothing was measured."""
    if row.measured_best is None:
        return ""
    name = row.measured_engine or "(unsaid)"
    return name if row.fitted_engine in (None, row.measured_engine) else f"{name} (fitted: {row.fitted_engine})"


def _agree(row: WhatIfRow) -> str:
    """The what-if table's verdict: yes, no, not checked (the measured winner was not simulated), or blank."""
    if row.agree is None:
        return "not checked: its winner was not simulated" if row.measured_best is not None else ""
    return "yes" if row.agree else "no"


def _policy_table(lines: Sequence[dict]) -> list[tuple[str, list[str], list[list[object]]]]:
    """The learned policy judged (``policy.csv``), as the page shows it."""
    if not lines:
        return []
    from specscope.sim.evaluate import ceiling_of, no_gap_reason

    methods = lines[0]["methods"].split("+")
    switch = len(methods) == 2  # oracle-switch chooses between two proposers; one's ceiling is its oracle
    ceiling = "oracle-switch (the ceiling for a causal policy)" if switch else (
        f"the ceiling (oracle {methods[0]})" if len(methods) == 1 else "no ceiling (more than two proposers)")

    def gap(line: dict) -> str:
        value = line.get("gap_closed")
        return no_gap_reason(line) if value is None or math.isnan(value) else f"{100 * value:.0f} %"

    known = any("lookup_known" in line for line in lines)  # a lookup and a model drafter: the yardstick
    return [("The learned policy judged (speedups; replayed on the positions its output and all its proposers' "
             "acc_len share, within its deepest k, so they may differ from the tables above, which replay each "
             "proposer's whole array at any k): best fixed k chosen in hindsight, adaptive, each oracle, "
             f"{ceiling}, and the share of the gap to it closed"
             + ("; lookup known: the lookup's next step known exactly and the drafter at one fixed k, both chosen "
                "in hindsight, or the lookup's oracle alone (the drafter never run) — what knowing the lookup is "
                "worth (a yardstick, not a ceiling: a policy that moves the drafter's k can pass it), and the "
                "learned policy's share of its gain; what oracle-switch gains beyond it needs the drafter's "
                "acceptance at each step" if known else ""),
             ["dataset", "batch size", "best fixed", "its speedup", "adaptive", "adaptive's proposer",
              *(f"oracle {m}" for m in methods),
              *(["oracle-switch"] if switch else []), "learned", "gap closed",
              *(["lookup known", "its rule", "of its gain"] if known else [])],
             [[line["dataset"], line["batch_size"], line["best_fixed"], line["best_fixed_speedup"],
               line.get("adaptive", ""), line.get("adaptive_acc", ""), *(line[f"oracle_{m}"] for m in methods),
               *([ceiling_of(line)] if switch else []), line["learned"], gap(line),
               *([line.get("lookup_known", ""), line.get("lookup_known_rule", ""), _known_gap(line)] if known else [])]
              for line in lines])]


def _known_gap(line: dict) -> str:
    """The learned policy's share of the lookup-known yardstick's gain, or why there is none (the
    yardstick is never below the best fixed policy: within 1 % of it)."""
    value = line.get("gap_closed_known")
    if value is None:
        return ""
    return "no gap" if math.isnan(value) else f"{100 * value:.0f} %"


def _whatif_table(rows: Sequence[WhatIfRow]) -> list[tuple[str, list[str], list[list[object]]]]:
    if not rows:
        return []
    summary = whatif_summary(rows)
    return [(f"What if: the calibrated model's best configuration an engine runs (a fixed k or a static tree: the "
             f"answer above may name adaptive) per batch size, and the measured check{': ' + summary if summary else ''}",
             ["workload", "batch size", "batch size in fit", "predicted best", "its k or tree in fit", "predicted",
              "steady-state best", "measured engine", "measured best", "measured", "predicted best of the measured",
              "its measured speedup", "lost % (trusting the prediction)", "agree"],
             [[r.dataset, r.batch_size, "yes" if r.in_fit else "no", r.predicted_best,
               "" if r.best_in_fit is None else ("yes" if r.best_in_fit else "no"), r.predicted_speedup,
               "" if r.steady_best is None else f"{r.steady_best} ({r.steady_speedup:.2f})",
               _engine(r), r.measured_best or "", "" if r.measured_speedup is None else r.measured_speedup,
               r.predicted_among_measured or "", "" if r.pick_measured_speedup is None else r.pick_measured_speedup,
               "" if r.lost_pct is None else f"{r.lost_pct:.1f}", _agree(r)]
              for r in rows])]


def _extremes(means: list[dict]) -> list[list[object]]:
    """Per dataset and proposer the request of the lowest and of the highest mean acc_len, each
    named with how many others tie it (`109 (and 16 more)`)."""
    keys = list(dict.fromkeys((m["dataset"], m["proposer"]) for m in means))
    rows = []
    for dataset, proposer in keys:
        mine = [m for m in means if m["dataset"] == dataset and m["proposer"] == proposer]
        row: list[object] = [dataset, proposer]
        for pick in (min, max):
            end = pick(mine, key=lambda m: m["mean_acc_len"])
            ties = sum(m["mean_acc_len"] == end["mean_acc_len"] for m in mine) - 1
            row += [str(end["id"]) + (f" (and {ties} more)" if ties else ""), end["mean_acc_len"]]
        rows.append(row)
    return rows
