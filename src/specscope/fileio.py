"""Files users keep: outputs checked before any work, atomic and durable writes, tables as CSV or
JSON, and a lock a run holds on what it writes."""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import numbers
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, TextIO

from specscope import written
from specscope.errors import SpecscopeError
from specscope.fingerprint import file_sha256
from specscope.reading import first_line


STDOUT = "-"  # ``-o -``: write the table to standard output
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs such a cell as a formula


def is_stdout(path: object) -> bool:
    """Whether writing ``path`` writes standard output: ``-``, or a path to the very file, pipe or
    terminal standard output already is (``/dev/stdout``, or the file it is redirected to). Such
    output is written in place — a rename over a redirected file would leave everything printed
    after it in the file it replaced — and a verb's words then go to standard error."""
    if path is None:
        return False
    if str(path) == STDOUT:
        return True
    try:
        here, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such path, or no real standard output (captured)
        return False
    return (here.st_dev, here.st_ino) == (out.st_dev, out.st_ino)


def check_output_file(path: str | Path) -> Path:
    """``path`` as a file the user asked us to write, checked before any work starts.

    ``-`` is standard output. A path that exists must be a regular file (replaced atomically)
    or a character device or FIFO such as ``/dev/null`` (written in place, never replaced); a
    directory is refused. The folder it goes into must exist or be creatable, and be writable.
    """
    path = Path(path)
    if is_stdout(path):
        return path
    if path.is_dir():
        raise SpecscopeError(f"{path}: is a directory (expected a file to write)")
    if path.exists() and not path.is_file():
        if not os.access(path, os.W_OK):
            raise SpecscopeError(f"{path}: not writable")
        return path
    folder = _existing_ancestor(path.parent)
    if not folder.is_dir():
        raise SpecscopeError(f"{folder}: is not a directory (cannot write {path})")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecscopeError(f"{folder}: not writable (cannot write {path})")
    if path.is_file() and not _writable(path):
        raise SpecscopeError(f"{path}: read-only; make it writable or write elsewhere")
    return path


def _writable(path: Path) -> bool:
    """A file its owner means to be written: a write bit set (root may write anywhere, but a file
    marked read-only is kept so), and the process allowed to."""
    return bool(path.stat().st_mode & 0o222) and os.access(path, os.W_OK)


def check_output_dir(path: str | Path) -> Path:
    """``path`` as a folder to write results into (made if missing), checked before work starts
    (an empty name — an unset shell variable — is no folder, not the current one)."""
    if not str(path).strip():
        raise SpecscopeError("-o: an empty name (expected an output directory; '.' for the current one)")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SpecscopeError(f"{path}: exists and is not a directory (expected an output directory)")
    folder = _existing_ancestor(path)
    if not folder.is_dir():
        raise SpecscopeError(f"{folder}: is not a directory (cannot make {path})")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecscopeError(f"{folder}: not writable (cannot write into {path})")
    return path


def refuse_foreign_folder(folder: Path, marker: str, what: str) -> None:
    """Refuse an output ``folder`` that holds files but not ``marker`` (what a run of ``what``
    leaves there, a file or a folder): a run would replace files it did not write."""
    if folder.is_dir() and any(folder.iterdir()) and not (folder / marker).exists():
        raise SpecscopeError(f"{folder}: not empty and holds no {marker} (no {what} here): its files would be "
                             f"replaced; write the {what} into an empty or new folder")


def _existing_ancestor(path: Path) -> Path:
    """The nearest of ``path`` and its parents that exists."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def open_appended(path: str | Path, what: str) -> TextIO:
    """``path`` opened for appending lines (a log that grows while a process runs: what is
    there is kept, never replaced), checked as :func:`check_output_file`; ``what`` names the
    option in the error."""
    path = Path(path)
    if str(path) == STDOUT:  # a log appended to: /dev/stdout (a device, a pipe, a file) is appended to as any file
        raise SpecscopeError(f"{what}: expected a file path, not '-'")
    try:
        check_output_file(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("a", encoding="utf-8")
    except SpecscopeError as error:
        raise SpecscopeError(f"{what}: {error}") from None
    except OSError as error:
        raise SpecscopeError(f"{what}: {path}: cannot open for appending ({error.strerror or error})") from None


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` durably, never replacing what is not a regular file.

    A regular file (or a new path) gets a temporary file, fsync, rename and fsync of the
    directory: readers never see half a file and a finished write survives a crash. ``-`` is
    standard output; a character device or FIFO (``/dev/null``, ``/dev/stdout``) is written in
    place, because renaming over it would replace the device for every other program; a symbolic
    link keeps pointing where it did, at the new file.
    """
    path = check_output_file(path)
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    written.expect(path, text)  # listed beside the old content first: an interruption leaves either one ours
    try:
        _write_durably(path, text)
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot write ({error.strerror or error})") from None
    written.record(path, text)


def usual_mode() -> int:
    """The permissions a new file gets from ``open`` under the process's umask (0644 under 022):
    for files a library writes 0600 (``tempfile.mkstemp``, safetensors' ``save_file``)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_durably(path: Path, text: str) -> None:
    """:func:`atomic_write_text` to a path (not standard output)."""
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        return
    path = Path(os.path.realpath(path))  # a symbolic link stays: the file it points to is replaced
    if path.is_file() and not _writable(path):
        raise SpecscopeError(f"{path}: read-only; make it writable or write elsewhere")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    # a file replaced keeps its permissions; mkstemp makes 0600: a new file gets the usual ones
    os.fchmod(fd, stat.S_IMODE(path.stat().st_mode) if path.is_file() else usual_mode())
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


def csv_safe(value: object) -> object:
    """A cell as a spreadsheet may open it: text that begins like a formula (``=``, ``+``,
    ``-``, ``@``) gets a leading apostrophe, so it is shown and never run. Numbers are kept."""
    if isinstance(value, str) and value.startswith(CSV_FORMULA_START):
        return "'" + value
    return value


def json_text(value: object) -> str:
    """``value`` as strict JSON text (indented, a final newline): a number that is not finite
    (NaN: undefined; ±∞) is ``null``, as no JSON reader takes a bare ``NaN`` or ``Infinity``;
    numpy numbers as Python's."""
    def strict(v: object) -> object:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, numbers.Integral):  # numpy's integers too
            return int(v)
        if isinstance(v, numbers.Real):  # numpy's floats too
            return float(v) if math.isfinite(v) else None
        if isinstance(v, Mapping):
            return {key: strict(item) for key, item in v.items()}
        if isinstance(v, (list, tuple)):
            return [strict(item) for item in v]
        return v
    return json.dumps(strict(value), indent=1, default=float, allow_nan=False) + "\n"


def write_rows(path: str | Path, rows: Iterable[Mapping[str, object]]) -> None:
    """Write rows as CSV (``.csv``, ``-`` or a device) or a JSON list (``.json``), by the suffix;
    a value that is not a number (NaN: undefined) is an empty cell, ``null`` in JSON."""
    rows = [{key: None if isinstance(value, float) and math.isnan(value) else value for key, value in row.items()}
            for row in rows]
    path = _check_suffix(path, (".csv", ".json"), "a .csv or .json output file", check_kept_table)
    if path.suffix == ".json":
        atomic_write_text(path, json_text(rows))
        return
    fields: list[str] = []
    for row in rows:
        fields.extend(key for key in row if key not in fields)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: csv_safe(value) for key, value in row.items()} for row in rows)
    atomic_write_text(path, buffer.getvalue())


def check_table_output(path: str | Path) -> Path:
    """An ``-o`` for a table (see :func:`write_rows`), checked before the work starts."""
    return _check_suffix(path, (".csv", ".json"), "a .csv or .json output file")


def check_json_output(path: str | Path, replaceable: bool = True) -> Path:
    """An ``-o`` for a JSON document, checked before the work starts (``replaceable`` false: its
    suffix only, the caller checking later whether it may be replaced, with a reason of its own first)."""
    return _check_suffix(path, (".json",), "a .json output file", None if replaceable else Path)


def check_jsonl_output(path: str | Path) -> Path:
    """An ``-o`` for JSON Lines (a workload), checked before the work starts."""
    return _check_suffix(path, (".jsonl",), "a .jsonl output file")


def _check_suffix(path: str | Path, suffixes: tuple[str, ...], what: str,
                  check: Callable[[str | Path], Path] | None = None) -> Path:
    """``path`` checked by ``check`` (default :func:`check_user_output`), a new or regular file
    ending in one of ``suffixes`` (``-``, standard output, and a device such as ``/dev/null``
    need none)."""
    path = (check or check_user_output)(path)
    if path.suffix not in (*suffixes, "") and (path.is_file() or not path.exists()):
        raise SpecscopeError(f"{path}: expected {what} (or - for standard output)")
    return path


def check_user_output(path: str | Path, fate: str = "it would be replaced; write elsewhere, or remove it first") -> Path:
    """An output file the user names (``-o``), checked as :func:`check_output_file`; an existing
    regular file that holds something is replaced only where specscope wrote it there and no one
    changed it since (:mod:`specscope.written`) — never a user's notes, spreadsheet or config
    (``-`` and devices are written as ever); ``fate``: what would befall it, and what to do, in the
    refusal. What is written there is then listed."""
    path = check_output_file(path)
    if is_stdout(path) or path.exists() and not path.is_file():
        return path
    if Path(os.path.realpath(path)).name == written.LEDGER:  # the table would become the folder's ledger
        raise SpecscopeError(f"{path}: the name of the folder's record of what specscope wrote there; choose "
                             "another name")
    if path.stat().st_size if path.is_file() else 0:
        if not written.listed(path, file_sha256(path)):
            raise SpecscopeError(f"{path}: exists, and specscope did not write it there (or it was changed since): "
                                 f"{fate}")
    written.claim(path)
    return path


def check_kept_table(path: str | Path) -> Path:
    """A table inside a folder specscope keeps (a sweep's: its rules make the folder specscope's),
    checked as :func:`check_output_file`; an existing regular file that holds something is
    replaced only where it holds what specscope writes — a CSV table under a header of column
    names, or JSON (a document, or JSON Lines) whose objects' keys are names."""
    path = check_output_file(path)
    if path.is_file() and path.stat().st_size and not _machine_written(path):
        raise SpecscopeError(f"{path}: exists and holds no table or records specscope writes (its first line: "
                             f"{_first_text(path)[:60]!r}): it would be replaced; write elsewhere, or remove it first")
    return path


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")  # a column or key name as specscope writes them


def _machine_written(path: Path) -> bool:
    """Whether ``path`` (a non-empty regular file) holds a specscope table or records: its first
    line a CSV header of names, or a JSON value of objects keyed by names (the whole document for
    ``.json``, the first line else)."""
    text = _first_text(path)
    value = None
    if path.suffix == ".json":
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):  # JSON Lines under a .json name: its first line
            value = None
    if value is None:
        if path.suffix == ".csv" or "," in text and not text.startswith(("{", "[")):
            return all(NAME.fullmatch(cell.strip()) for cell in next(csv.reader([text])))
        try:
            value = json.loads(text)
        except ValueError:
            return False
    objects = value if isinstance(value, list) else [value]
    return all(isinstance(o, dict) and all(NAME.fullmatch(k) for k in o) for o in objects)  # [] too: no rows


def _first_text(path: Path) -> str:
    """The first non-blank line of ``path`` as text (undecodable bytes replaced)."""
    found = first_line(path)
    return "" if found is None else found[1].decode("utf-8", errors="replace").strip()


@contextlib.contextmanager
def exclusive(lock: Path, busy: str) -> Iterator[None]:
    """Hold an advisory lock on the file ``lock`` (made if missing, and kept: removing it would
    let a process that opened it meanwhile lock a file no one else sees; the system drops the
    lock when the process ends, however it ends); another process holding it is the error
    ``busy``. A link to ``lock`` is the same file, and the same lock."""
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpecscopeError(busy) from None
        yield
