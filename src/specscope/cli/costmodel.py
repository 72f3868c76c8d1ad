"""`specscope costmodel show NAME`: what a cost model predicts, and its constants;
`specscope costmodel fit`: fit one to step records, or to a sweep of any server (``--from-sweep``)."""

from __future__ import annotations

import argparse
import functools
import json
import sys

from pathlib import Path

import numpy as np

from specscope.cli._common import print_table, refuse_overwriting, to_stdout
from specscope.costmodel.linear import FittedSweep, LinearCostModel
from specscope.errors import SpecscopeError
from specscope.fileio import check_json_output, check_kept_table, check_user_output, json_text

VALIDATION_TABLES = ("calibration.csv", "coefficients.csv")  # what --validate writes into the sweep folder
POOR_FIT = 0.2  # a fit whose median step error is above this share is reported as poor
POOR_DRAFTING = 0.1  # ... a drafting fit whose median error is above this share of its steps' time (a whole
# step's price moves with it: 10 % of a step moves a speedup by as much)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("costmodel", help="show cost models, or fit one to measured steps")
    verbs = parser.add_subparsers(dest="costmodel_verb", metavar="ACTION", required=True)
    show = verbs.add_parser("show", help="constants and example forward times of a cost model")
    show.add_argument("name", help="preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    show.add_argument("--format", choices=("table", "json"), default="table",
                      help="table (default): its constants as JSON, then the target's forward time by tokens and "
                           "cached tokens; json: the constants alone (a file every --cost-model reads)")
    show.set_defaults(run=run_show)
    fit = verbs.add_parser("fit", help="fit the linear cost model to measured step records, or to a sweep")
    fit.add_argument("records", nargs="*", metavar="RECORDS", help="step records (JSON Lines) of engine runs")
    fit.add_argument("--from-sweep", type=Path, metavar="SWEEP_DIR",
                     help="fit to the chunk timelines of a `specscope sweep` output instead (any server)")
    fit.add_argument("--traces", nargs="+", default=(), metavar="TRACE",
                     help="traces of the sweep's workloads (dataset = workload file stem), for --validate")
    fit.add_argument("--engine", metavar="NAME",
                     help="with --from-sweep: the engine whose cells to fit (needed when the sweep measured several)")
    fit.add_argument("--whole-steps", action="store_true",
                     help="with RECORDS: fit the model a sweep's fit fits, to each record's whole step (what a "
                          "chunk gap spans), instead of the forward and drafting phase by phase: the records' "
                          "side of a calibration's comparison")
    fit.add_argument("--validate", action="store_true",
                     help="with --from-sweep: predict every SD cell from a fit without it; writes "
                          "SWEEP_DIR/calibration.csv, and each coefficient's spread over those fits to "
                          "SWEEP_DIR/coefficients.csv")
    fit.add_argument("-o", "--output", required=True, type=functools.partial(check_json_output, replaceable=False),
                     help="write the fitted model (JSON) here (- for standard output)")
    fit.add_argument("--name", default=None, help="name of the fitted model (default: the output's stem, "
                                                  "'fitted' for standard output or a device)")
    fit.set_defaults(run=run_fit)


def run_show(args: argparse.Namespace) -> int:
    from specscope.costmodel.registry import cost_label, resolve_cost_model

    cost = resolve_cost_model(args.name)
    description = cost.describe()
    if args.format == "json":
        sys.stdout.write(json_text(description))
        return 0
    print(json.dumps(description, indent=1))
    batched = [1, 8, 32, 128, 512, 1024]
    kvs = [0, 8_000, 64_000, 200_000]
    decode = np.array(batched)  # one new token per sequence
    rows = [[f"kv={kv}", *[_milliseconds(t) for t in cost.forward_time(decode, np.full(len(batched), kv), decode)]]
            for kv in kvs]
    print_table(f"target forward time (ms) of {cost_label(args.name, cost)}, decoding one token per sequence",
                ["cached tokens", *[f"{b} tok" for b in batched]], rows)
    return 0


def _milliseconds(seconds: float) -> str:
    """``seconds`` in ms, two decimals, or three significant digits below 0.1 ms (a tiny model's
    forward is not 0.00)."""
    return f"{1e3 * seconds:.2f}" if seconds >= 1e-4 else f"{1e3 * seconds:.3g}"


def run_fit(args: argparse.Namespace) -> int:
    from specscope.analysis.timesplit import read_steps
    from specscope.cli._common import atomic_write_text
    from specscope.costmodel.fit import fit_linear

    if (args.from_sweep is None) == (not args.records):
        raise SpecscopeError("costmodel fit: give step RECORDS or --from-sweep SWEEP_DIR (one of the two)")
    if args.from_sweep is None and (args.validate or args.traces or args.engine):
        raise SpecscopeError("--validate, --traces and --engine go with --from-sweep")
    if args.traces and not args.validate:
        raise SpecscopeError("--traces: only read by --validate (the fit itself reads the sweep alone)")
    if args.from_sweep is not None and args.whole_steps:
        raise SpecscopeError("--whole-steps goes with step RECORDS (a sweep's fit is of whole steps already)")
    if args.validate and not args.traces:
        raise SpecscopeError("--validate: needs --traces of the sweep's workloads")
    output = Path(args.output)
    device = to_stdout(output) or (output.exists() and not output.is_file())  # /dev/null names no model
    name = args.name if args.name is not None else "fitted" if device else output.stem  # --name '' refused below
    if not name.strip():  # checked before the fit, whose model would be refused for it
        raise SpecscopeError(f"--name {args.name!r}: expected non-empty text" if args.name is not None else
                             f"-o {output}: the model takes its name from the file's, which is blank: give --name")
    written = [args.from_sweep / n for n in ("calibration.csv", "coefficients.csv")] if args.validate else []
    for path in written:  # what --validate writes into the sweep's folder, checked before any work
        check_kept_table(path)
        if not to_stdout(output) and output.resolve() == path.resolve():
            raise SpecscopeError(f"-o {output}: --validate writes its table there; write the model elsewhere")
    if args.from_sweep is not None:
        _refuse_inside_sweep(output, args.from_sweep)  # the sweep's own files, named as such, before
    check_user_output(output)  # any other file specscope did not write
    refuse_overwriting(output, [*args.records, *args.traces, *written])
    if args.from_sweep is not None:
        return _fit_sweep(args, output, name)
    if args.whole_steps:
        from specscope.costmodel.calibrate import fit_whole_steps

        model, quality = fit_whole_steps(read_steps(args.records), name)
        if quality.warning():
            print(f"specscope: warning: {quality.warning()}", file=sys.stderr)
    else:
        model, quality = fit_linear(read_steps(args.records), name=name)
        _warn_poor_fit("the forward fit", quality.median_rel_error, quality.worst_drafting)
    summary = quality.summary()
    text = _usable(model)
    atomic_write_text(output, text + "\n")
    note_unseparated(model)
    if to_stdout(output):
        print(summary, file=sys.stderr)
        return 0
    print(summary)
    print(_wrote(output))
    return 0


def _warn_poor_fit(fit: str, median_rel_error: float, worst_drafting: tuple[str, float] | None = None) -> None:
    """A warning on stderr where ``fit`` misses its median step by more than :data:`POOR_FIT`, or
    its worst drafting (method, median error as a share of its steps' time) by more than
    :data:`POOR_DRAFTING`: what it predicts may mislead."""
    poor = [f"{fit} misses its median step by {100 * median_rel_error:.0f} % (above {100 * POOR_FIT:.0f} %)"] \
        if median_rel_error > POOR_FIT else []
    if worst_drafting is not None and worst_drafting[1] > POOR_DRAFTING:
        poor.append(f"{worst_drafting[0]}'s drafting fit misses by {100 * worst_drafting[1]:.0f} % of its median step "
                    f"(above {100 * POOR_DRAFTING:.0f} %)")
    if poor:
        print(f"specscope: warning: {' and '.join(poor)}: the steps vary beyond what its terms explain (other load on "
              "the machine?), and what it predicts may mislead; measure again on a quiet machine", file=sys.stderr)


def _usable(model) -> str:
    """``model`` as the JSON file it is written to, once the reader accepts it (a fit whose
    measurements leave a forward free would write a file every later command refuses)."""
    from specscope.costmodel.linear import linear_from_json

    text = json.dumps(model.describe(), indent=1)
    try:
        linear_from_json(json.loads(text), model.name)
    except SpecscopeError as error:
        raise SpecscopeError(f"costmodel fit: the measurements give a model no simulation can use ({error}); measure "
                             "steps of more sizes (batch sizes, proposal lengths) so that its terms can be told apart"
                             ) from None
    return text


def _wrote(output: Path) -> str:
    """What a fit says it wrote (a device such as /dev/null has nothing to show)."""
    return f"wrote {output}" + (f" (`specscope costmodel show {output}` prints it)" if output.is_file() else "")


def _refuse_inside_sweep(output: Path, sweep: Path) -> None:
    """Refuse an ``output`` named as a file the sweep writes (its results, configuration,
    placements: there or not yet) or one in its cells/ or logs/ folder: the fit reads them, and a
    later fit or resume would read the model."""
    from specscope.backends.openai.sweep import SWEEP_FILES, SWEEP_FOLDERS

    if to_stdout(output) or (output.exists() and not output.is_file()):
        return
    where = output.resolve()
    for folder in SWEEP_FOLDERS:
        if where.is_relative_to((sweep / folder).resolve()):
            raise SpecscopeError(f"-o {output}: inside the sweep's {folder}/ folder, which the sweep writes and the fit "
                                 "reads; write the model elsewhere")
    for name in SWEEP_FILES:
        if where == (sweep / name).resolve():
            raise SpecscopeError(f"-o {output}: the sweep's own {name}, which the sweep writes and reads; write the "
                                 "model elsewhere")


def traced_by(paths: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    """Dataset → (trace file, the checkpoints its kept settings fingerprint), for the traces whose
    settings name both (:func:`~specscope.tracing.settings.traced_checkpoints`)."""
    from specscope.tracing.settings import traced_checkpoints

    found = {}
    for path in paths:
        dataset, checkpoints = traced_checkpoints(Path(path))
        if dataset is not None and checkpoints:
            found.setdefault(dataset, (path, checkpoints))
    return found


def _fit_sweep(args: argparse.Namespace, output: Path, name: str) -> int:
    """``--from-sweep``: fit, print the histogram cross-check, and validate when asked."""
    from specscope.backends.openai.calibration import (COLUMNS, SPREAD_COLUMNS, coefficient_spread, design_notes,
                                                       read_sweep, validate)
    from specscope.cli._common import atomic_write_text
    from specscope.costmodel.calibrate import cross_check, fit_cells
    from specscope.fileio import write_rows
    from specscope.fingerprint import file_sha256
    from specscope.trace.load import load_traces
    from specscope.version import code_version

    if args.validate:  # the sweep folder's tables: replaced only where specscope wrote them (a link to a user's file is not)
        for table in VALIDATION_TABLES:
            check_user_output(args.from_sweep / table)
    cells = read_sweep(args.from_sweep, args.engine)
    sweep = FittedSweep(str(args.from_sweep.resolve()), file_sha256(args.from_sweep / "results.json"))
    model = fit_cells(cells, name, sweep)
    rows, fits = validate(cells, load_traces(args.traces)[0], traced_by(args.traces)) if args.validate \
        else ([], [])  # before any write
    text = _usable(model)
    atomic_write_text(output, text + "\n")
    note_unseparated(model)
    out = sys.stderr if to_stdout(output) else sys.stdout
    check = cross_check(cells)
    print_table("cross-check: the fit's reconstruction beside the server's histograms (- : not exported)",
                list(check[0]), [[_cell(v) for v in row.values()] for row in check], file=out)
    if args.validate:
        csv = args.from_sweep / VALIDATION_TABLES[0]
        made = {"made_by": code_version(),  # what produced the tables: this code, over these traces' contents
                "traces": " ".join(f"{Path(t).name}@{(file_sha256(t) or 'unreadable')[:12]}" for t in args.traces)}
        write_rows(csv, [{**row, **made} for row in rows])
        print_table("held-out cells", list(COLUMNS), [[_cell(row[c]) for c in COLUMNS] for row in rows], file=out)
        errors = np.abs([row["error_pct"] for row in rows])
        print(f"validation over {len(rows)} held-out SD cells: median |error| {np.median(errors):.1f} %, "
              f"worst {errors.max():.1f} %; wrote {csv}", file=out)
        for column, what in (("throughput_error_pct", "their throughput"), ("baseline_error_pct", "their none cells'")):
            signed = np.array([row[column] for row in rows])
            print(f"  {what}, predicted against measured: median {np.median(signed):+.1f} %, from {signed.min():+.1f} to "
                  f"{signed.max():+.1f} %", file=out)
        noise = [(abs(row["error_pct"]), row["measured_se_pct"]) for row in rows if row["measured_se_pct"] is not None]
        if noise:
            within = sum(error <= 2 * se for error, se in noise)
            print(f"the measurements' own uncertainty (measured_se_pct, from their segments): median "
                  f"{np.median([se for _, se in noise]):.1f} %; {within} of {len(noise)} errors within two of "
                  "their cell's", file=out)
        spread = coefficient_spread(model, fits)
        write_rows(args.from_sweep / VALIDATION_TABLES[1], [{**row, "engine": cells[0].engine, **made} for row in spread])
        print_table("coefficients and how firmly the sweep pins them down (jackknife over the held-out fits; "
                    f"wrote {args.from_sweep / VALIDATION_TABLES[1]})", list(SPREAD_COLUMNS),
                    [[_cell(row[c]) for c in SPREAD_COLUMNS] for row in spread
                     if row["fitted"] or row["jackknife_se"] or not row["separated"]],
                    file=out)
        for line in design_notes(spread, cells):
            print(f"note: {line}", file=sys.stderr)
    if not to_stdout(output):
        print(_wrote(output))
    return 0


def note_unseparated(model: LinearCostModel) -> None:
    """A note on stderr naming the terms the fit's data could not tell apart."""
    if model.not_separated:
        print(f"note: {model.name}: the data cannot tell {', '.join(model.not_separated)} apart (unmeasured, or "
              "varying only together: their joint cost is fitted, its split among them is arbitrary): measure other "
              "batch sizes, ks, context lengths or prefills to separate them, or price only loads like those "
              "measured", file=sys.stderr)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
