"""Files users keep: atomic, durable writes, and tables as CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from specscope.errors import SpecscopeError


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably: a temporary file, fsync, rename, fsync of
    the directory. Readers never see half a file, and a finished write survives a crash."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself survive a crash
    finally:
        os.close(directory)


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


def read_json_object(path: str | Path, what: str = "a JSON object") -> dict:
    """The JSON object in ``path``, or a one-line error naming the file (and line) and what
    was expected."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise SpecscopeError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise SpecscopeError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    if not isinstance(data, dict):
        raise SpecscopeError(f"{path}: expected {what}")
    return data
