"""Argument helpers shared by several verbs (parsing comma lists, writing tables)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from specscope.errors import SpecscopeError


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


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, so readers never see half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_rows(path: Path, rows: Iterable[Mapping[str, object]]) -> None:
    """Write rows as CSV (``.csv``) or a JSON list (``.json``), chosen by the suffix."""
    rows = list(rows)
    path = Path(path)
    if path.suffix == ".json":
        atomic_write_text(path, json.dumps(rows, indent=1, default=float) + "\n")
        return
    if path.suffix not in (".csv", ""):
        raise SpecscopeError(f"{path}: expected a .csv or .json output file")
    fields: list[str] = []
    for row in rows:
        fields.extend(key for key in row if key not in fields)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())


def print_table(title: str, columns: list[str], rows: Iterable[Iterable[object]]) -> None:
    """Print a readable table to stdout (rich; plain text when not a terminal)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(escape(column), justify="left" if i == 0 else "right")
    texts = [[cell if isinstance(cell, str) else f"{cell:.3f}" if isinstance(cell, float) else str(cell)
              for cell in row] for row in rows]
    for row in texts:
        table.add_row(*[escape(cell) for cell in row])
    widths = [max([len(c)] + [len(row[i]) for row in texts]) for i, c in enumerate(columns)]
    Console(width=max(80, sum(widths) + 3 * len(widths) + 1)).print(table)


def add_trace_options(parser: argparse.ArgumentParser) -> None:
    """The trace-file arguments shared by verbs that read traces."""
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (JSON Lines)")
    parser.add_argument(
        "--lengths", choices=("own", "common"), default="own",
        help="when a proposer's acc_len differs in length from the output: keep each array "
             "whole, as the paper's simulator did (own), or cut the record to the common prefix "
             "(common); either way the mismatches are reported",
    )
