"""Argument helpers shared by several verbs (parsing comma lists, writing tables)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable

from specscope.trace.load import LENGTHS
from specscope.fileio import (  # noqa: F401  (atomic_write_text, write_rows: re-exported for the verbs)
    STDOUT,
    atomic_write_text,
    check_output_dir,
    check_output_file,
    check_table_output,
    write_rows,
)


def int_list(text: str) -> list[int]:
    """Parse ``"1,8,16"`` into ``[1, 8, 16]`` (argparse type)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def str_list(text: str) -> list[str]:
    """Parse ``"fixed:1,oracle"`` into ``["fixed:1", "oracle"]`` (argparse type)."""
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return values


def add_table_output(parser: argparse.ArgumentParser, what: str, *flags: str) -> None:
    """An ``-o``-style option for a table: ``.csv``, ``.json`` or ``-`` (standard output, in
    place of the printed table), checked before any work starts."""
    parser.add_argument(*(flags or ("-o", "--output")), type=check_table_output, metavar="FILE",
                        help=f"write {what} to a .csv or .json file (- for standard output)")


def to_stdout(path: object) -> bool:
    """Whether an output option asks for standard output (then the verb prints nothing else)."""
    return path is not None and str(path) == STDOUT


def format_cell(value: object) -> str:
    """A table cell: text as it is, ``-`` for a missing value, floats with 3 decimals below
    1000 (none above)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def print_table(title: str, columns: list[str], rows: Iterable[Iterable[object]]) -> None:
    """Print a readable table to stdout (rich; plain text when not a terminal)."""
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
    Console(width=max(80, sum(widths) + 3 * len(widths) + 1)).print(table)


def add_trace_options(parser: argparse.ArgumentParser, lengths: str = "own") -> None:
    """The trace-file arguments shared by verbs that read traces; ``lengths`` is the verb's
    default ("own" for simulation, as the paper did; "common" for per-position analysis)."""
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (JSON Lines)")
    parser.add_argument(
        "--lengths", choices=LENGTHS, default=lengths,
        help="when a proposer's acc_len differs in length from the output: keep each array "
             "whole, as the paper's simulator did (own), or cut the record to the common prefix "
             "(common); either way the mismatches are reported",
    )


def read_trace_args(args: argparse.Namespace) -> list:
    """The records of ``args.traces`` read with ``args.lengths``; every length repair is
    reported on stderr (one line per file)."""
    from specscope.trace import load_traces

    records, reports = load_traces(args.traces, lengths=args.lengths)
    for report in reports:
        if report.mismatched_records:
            print(f"note: {report.summary()}", file=sys.stderr)
    return records


def model_dir_arg(path: str | Path) -> Path:
    """``path`` as a Hugging Face model directory, or a one-line error."""
    from specscope.errors import SpecscopeError

    path = Path(path)
    if not (path / "config.json").is_file():
        raise SpecscopeError(f"{path}: no config.json (expected a Hugging Face model directory)")
    return path
