"""Argument helpers shared by several verbs (parsing comma lists, writing tables)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Iterable, Sequence, TextIO

from specscope import validate
from specscope.errors import SpecscopeError

from specscope.trace.load import LENGTHS
from specscope.fileio import (  # noqa: F401  (atomic_write_text, write_rows: re-exported for the verbs)
    atomic_write_text,
    check_output_dir,
    check_output_file,
    check_table_output,
    check_user_output,
    is_stdout,
    write_rows,
)

DTYPE_NAMES = ("float32", "bfloat16", "float16")  # --dtype: engine.loading.DTYPES' names, without importing torch


def int_list(text: str, high: int | None = None) -> list[int]:
    """Parse ``"1,8,16"`` into ``[1, 8, 16]``: distinct positive integers, at most ``high``
    (argparse type; a repeated batch size or k would be run twice and recorded once)."""
    try:
        values = [validate.integer(part, low=1, high=high) for part in validate.split_list(text)]
    except validate.Invalid as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers: {error}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct values, got {text!r}")
    return values


def batch_size_list(text: str) -> list[int]:
    """``--batch-sizes``: :func:`int_list`, each at most :data:`~specscope.validate.MAX_BATCH_SIZE`."""
    return int_list(text, high=validate.MAX_BATCH_SIZE)


def str_list(text: str) -> list[str]:
    """Parse ``"fixed:1,oracle"`` into ``["fixed:1", "oracle"]`` (argparse type; a tree's list of
    paths, ``tree:[(0,), (1,)]``, is one item)."""
    try:
        values = validate.split_list(text)
    except validate.Invalid as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    repeated = validate.first_repeat(values)
    if repeated is not None:  # run twice, it would be recorded twice and shown once
        raise argparse.ArgumentTypeError(f"expected distinct values, got {repeated!r} twice in {text!r}")
    return values


def add_table_output(parser: argparse.ArgumentParser, what: str, *flags: str) -> None:
    """An ``-o``-style option for a table: ``.csv``, ``.json`` or ``-`` (standard output, in
    place of the printed table), checked before any work starts."""
    parser.add_argument(*(flags or ("-o", "--output")), type=check_table_output, metavar="FILE",
                        help=f"write {what} to a .csv or .json file (- for standard output)")


def to_stdout(path: object) -> bool:
    """Whether an output option asks for standard output (``-``, or a path to it:
    :func:`~specscope.fileio.is_stdout`)."""
    return is_stdout(path)


def human_stream(*outputs: object) -> TextIO:
    """Where a verb prints its tables and notes: standard output, unless one of ``outputs`` is
    ``-`` (the data goes there, so the words go to standard error). Two ``-`` are refused."""
    if sum(to_stdout(path) for path in outputs) > 1:
        raise SpecscopeError("only one output may be - (standard output)")
    return sys.stderr if any(to_stdout(path) for path in outputs) else sys.stdout


def format_cell(value: object) -> str:
    """A table cell: text as it is, ``-`` for a missing value, floats with 3 decimals below
    1000 (none above)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def print_table(title: str, columns: list[str], rows: Iterable[Iterable[object]], file: TextIO | None = None) -> None:
    """Print a readable table to ``file`` (default stdout; rich, plain text when not a terminal)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(escape(column), justify="left" if i == 0 else "right")
    texts = [[format_cell(cell) for cell in row] for row in rows]
    for row in texts:
        table.add_row(*[escape(cell) for cell in row])
    widths = [max([len(c)] + [len(row[i]) for row in texts]) for i, c in enumerate(columns)]
    Console(file=file, width=max(80, sum(widths) + 3 * len(widths) + 1)).print(table)


def add_trace_options(parser: argparse.ArgumentParser, lengths: str = "own", choice: bool = True) -> None:
    """The trace-file arguments shared by verbs that read traces; ``lengths`` is the verb's
    default ("own" for simulation, as the paper did; "common" for per-position analysis), and
    the only way it reads them unless ``choice`` (a ``--lengths`` option)."""
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (JSON Lines)")
    if not choice:
        parser.set_defaults(lengths=lengths)
        return
    parser.add_argument(
        "--lengths", choices=LENGTHS, default=lengths,
        help="when a proposer's acc_len differs in length from the output: keep each array "
             "whole, as the paper's simulator did (own), or cut the record to the common prefix "
             f"(common); either way the mismatches are reported (default: {lengths})",
    )


def read_trace_args(args: argparse.Namespace, walked: Sequence[str] = ()) -> list:
    """The records of ``args.traces`` read with ``args.lengths``; every length repair is
    reported on stderr (one line per file). ``walked``: the proposers a walk of several replays
    together, over the positions the output and their acc_len arrays cover — what the note says."""
    from specscope.trace import load_traces

    refuse_clashes(output_options(args), [*args.traces, *side_inputs(args)])
    records, reports = load_traces(args.traces, lengths=args.lengths)
    if walked:  # every walked proposer traced before a note says what their walk replays
        from specscope.sim.fit import require_methods

        require_methods(records, walked)
    note_mismatches(reports, walked=walked)
    return records


def trace_provenance(args: argparse.Namespace) -> dict[str, object]:
    """What a table made from ``args.traces`` says produced it: how their lengths were read, the
    traces (absolute path and SHA-256 start) and this code's version."""
    from specscope.fingerprint import provenance
    from specscope.version import code_version

    return {"lengths": args.lengths, "traces": "; ".join(map(provenance, args.traces)), "made_by": code_version()}


def note_mismatches(reports: Iterable, file: TextIO | None = None, walked: Sequence[str] = ()) -> None:
    """One note per trace file whose acc_len arrays and outputs differ in length (DESIGN: counted
    and reported, never silent), saying how they were handled (``walked``: see ``LoadReport.summary``)."""
    for report in reports:
        if report.mismatched_records:
            print(f"note: {report.summary(walked)}", file=file or sys.stderr)  # standard error as it is now


def refuse_overwriting(output: object, inputs: Iterable[str | Path], option: str = "-o") -> None:
    """Refuse an ``output`` file that is one of the ``inputs``: writing it would replace what the
    run reads (a device or standard output is never an input)."""
    if output is None or to_stdout(output) or not Path(output).is_file():
        return
    for path in inputs:
        if Path(path).is_file() and os.path.samefile(output, path):
            raise SpecscopeError(f"{option} {output}: is also an input ({path}); write the result elsewhere")


def checkpoint_files(*folders: object) -> list[Path]:
    """The files in each checkpoint folder given (``None`` skipped): what a run reads of them."""
    return [path for folder in folders if folder is not None and Path(folder).is_dir()
            for path in sorted(Path(folder).iterdir()) if path.is_file()]


def side_inputs(args: argparse.Namespace) -> list[str]:
    """The files ``args`` reads besides its traces: a ``--cost-model`` or ``--view`` cost-model
    file, and every ``learned:FILE`` policy among ``--policies`` (names of presets and rooflines
    are no files, and are left out)."""
    named = [getattr(args, "cost_model", None), *(getattr(args, "view", None) or [])]
    named += [p.split(":", 1)[1] for p in getattr(args, "policies", None) or [] if p.startswith("learned:")]
    return [path for path in named if isinstance(path, str) and Path(path).is_file()]


def output_options(args: argparse.Namespace) -> dict[str, object]:
    """The files ``args`` writes, by option: ``-o`` and every ``--…-output`` given."""
    return {("-o" if name == "output" else "--" + name.replace("_", "-")): value for name, value in vars(args).items()
            if (name == "output" or name.endswith("_output")) and value is not None}


def refuse_clashes(outputs: dict[str, object], inputs: Iterable[str | Path]) -> None:
    """Refuse an output (option → path; None: not given) that is one of the ``inputs``, or two
    outputs naming one file (the second would replace the first). Standard output and devices are
    never a clash."""
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        refuse_overwriting(path, inputs, option)
        if path is None or to_stdout(path) or (Path(path).exists() and not Path(path).is_file()):
            continue
        where = os.path.realpath(path)
        if where in seen:
            raise SpecscopeError(f"{option} {path}: also given to {seen[where]}; write each output to its own file")
        seen[where] = option


def model_dir_arg(path: str | Path) -> Path:
    """``path`` as a Hugging Face model directory, or a one-line error."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise SpecscopeError(f"{path}: no config.json (expected a Hugging Face model directory)")
    return path


def refuse_unused_draft(draft: object, method: str | None) -> None:
    """``--draft`` beside a reference-engine method that reads no checkpoint (none, n-gram) would
    be silently ignored: refused. An unknown method is left to its own error."""
    from specscope.methods import METHODS, NO_SD, names

    with_draft = tuple(m.name for m in METHODS if m.reference and m.needs_checkpoint)
    if draft is not None and method not in with_draft and (method or NO_SD) in (NO_SD, *names()):
        raise SpecscopeError(f"--draft: only used with a method that reads a checkpoint ({', '.join(with_draft)}), "
                             f"not {method or NO_SD}")
