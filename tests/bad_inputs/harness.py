"""A catalogue of bad inputs, each run through the real CLI as a user would type it.

Every :class:`Case` must end with exit status 2, exactly one line on stderr that names the
file:line or the field (``names``), no traceback, and no output left behind: the working
folder (and any path named in ``untouched``) is byte-for-byte what it was before the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specscope.cli import main


@dataclass(frozen=True)
class Case:
    """One bad input: ``files`` are written into an empty folder first (name -> text or
    bytes), then ``argv`` runs there; ``names`` is a regular expression the one error line
    must match (the file:line or the field it blames)."""

    id: str
    argv: list[str]
    names: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    untouched: tuple[str, ...] = ()  # paths outside the folder that must not change


def written_by_specscope(files: dict[str, str | bytes], *names: str) -> dict[str, str | bytes]:
    """``files`` with ``names`` listed in their folders' ledgers as files specscope wrote (an
    output that may replace them, where the check of interest is another)."""
    from specscope.written import LEDGER

    ledgers: dict[str, dict[str, str]] = {}
    for name in names:
        content = files[name]
        data = content.encode() if isinstance(content, str) else content
        folder, _, base = name.rpartition("/")
        ledgers.setdefault(folder, {})[base] = hashlib.sha256(data).hexdigest()
    return {**files, **{f"{folder}/{LEDGER}" if folder else LEDGER: json.dumps(entries)
                        for folder, entries in ledgers.items()}}


@dataclass(frozen=True)
class Outcome:
    status: int
    stdout: str
    stderr: str


def run_cli(argv: list[str]) -> Outcome:
    """``specscope ARGV`` in this process, with its exit status and both streams."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as stop:  # argparse's usage errors
            status = stop.code if isinstance(stop.code, int) else 1
    return Outcome(int(status), out.getvalue(), err.getvalue())


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) with a digest of its content."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        for path in sorted(folder.rglob("*"))
    }


def check(case: Case, folder: Path, monkeypatch) -> None:
    """Run ``case`` in ``folder`` and assert the contract of a refused input."""
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    if case.setup is not None:
        case.setup(folder)
    monkeypatch.chdir(folder)
    before = snapshot(folder)
    outside = {p: _digest(Path(p)) for p in case.untouched}
    outcome = run_cli(case.argv)
    lines = outcome.stderr.strip().splitlines()
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.status == 2, f"exit {outcome.status}; stderr: {outcome.stderr!r}"
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert re.search(case.names, lines[0]), f"{lines[0]!r} does not name {case.names!r}"
    assert snapshot(folder) == before, "the refused run left or changed files"
    assert {p: _digest(Path(p)) for p in case.untouched} == outside


def _digest(path: Path) -> tuple:
    """What must not change about a path outside the folder: its kind and, for files, bytes."""
    if not os.path.lexists(path):
        return ("absent",)
    mode = path.lstat().st_mode
    return (mode, hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None)
