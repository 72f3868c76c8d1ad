"""Which files specscope wrote where a user named them (``-o``), so that it replaces only those.

Each folder that received such a file keeps ``.specscope-outputs``: a JSON object of file name →
SHA-256 of the content specscope last wrote there (while it writes one, a list of the old and the
new). A file may be replaced when it is listed with
its current content (specscope wrote it, and no one changed it since); anything else there —
a user's spreadsheet, a model's ``config.json``, a table edited by hand, an output of a
specscope older than this record — is the user's, and is refused by
:func:`specscope.fileio.check_user_output`. A symbolic link is listed as the file it points to.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

LEDGER = ".specscope-outputs"
_CLAIMED: set[Path] = set()  # user-named outputs checked by this process: their writes are recorded


def claim(path: Path) -> None:
    """Mark ``path`` (checked, about to be written) so that :func:`record` lists its writes."""
    _CLAIMED.add(Path(os.path.realpath(path)))


def listed(path: Path, sha256: str | None) -> bool:
    """Whether ``path``'s folder lists it with content ``sha256`` (its current content's)."""
    real = Path(os.path.realpath(path))
    entry = _read(real.parent / LEDGER).get(real.name)
    return sha256 is not None and (entry == sha256 or isinstance(entry, list) and sha256 in entry)


def known(path: Path) -> bool:
    """Whether ``path``'s folder lists it at all (whatever the content it lists)."""
    real = Path(os.path.realpath(path))
    return real.name in _read(real.parent / LEDGER)


def expect(path: Path, text: str) -> None:
    """Before ``text`` replaces what is at ``path`` (:func:`claim`-ed): list it beside what is
    listed there now, so that an interruption between the file's rename and :func:`record`
    leaves either content specscope's own (a rerun had refused the new one as a user's)."""
    digest = _digest(text)
    _update(path, lambda entry: [*([] if entry is None else [entry] if isinstance(entry, str) else entry), digest])


def record(path: Path, text: str) -> None:
    """List ``text`` as what specscope wrote at ``path``, where ``path`` was :func:`claim`-ed.
    A ledger that cannot be written leaves the file unlisted: a later run refuses to replace it
    and says so, which loses nothing."""
    digest = _digest(text)
    _update(path, lambda entry: digest)


def record_file(path: Path, sha256: str) -> None:
    """List the file at ``path``, of content ``sha256`` (its SHA-256 now), as what specscope wrote
    there: a file specscope builds otherwise than whole (a trace, appended to and resumed) may then
    be replaced by a later run's ``-o``, as any output of specscope's."""
    claim(path)
    _update(path, lambda entry: sha256)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _update(path: Path, change: Callable[[str | list[str] | None], str | list[str]]) -> None:
    """Set ``path``'s entry in its folder's ledger to ``change(entry)``, where ``path`` was
    :func:`claim`-ed. The ledger is written whole to a temporary file renamed over it (an
    interruption leaves the old one, where truncating it in place had left it empty: every file
    it listed then refused), under an exclusive lock on the ledger, taken again where another
    run replaced the ledger while this one waited (two runs writing into one folder keep both
    entries)."""
    real = Path(os.path.realpath(path))
    if real not in _CLAIMED:
        return
    ledger = real.parent / LEDGER
    try:
        while True:
            with open(ledger, "a+", encoding="utf-8") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                if os.fstat(handle.fileno()).st_ino != os.stat(ledger).st_ino:
                    continue  # replaced while this run waited: lock the current one
                handle.seek(0)
                entries = _parse(handle.read())
                entries[real.name] = change(entries.get(real.name))
                fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f"{LEDGER}.", suffix=".tmp")
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as out:
                        out.write(json.dumps(entries, indent=1, sort_keys=True) + "\n")
                    os.chmod(tmp, 0o644)
                    os.replace(tmp, ledger)
                finally:
                    Path(tmp).unlink(missing_ok=True)
                return
    except OSError:
        pass


def _read(ledger: Path) -> dict[str, str | list[str]]:
    """The ledger's entries (:func:`_update` replaces it whole: a reader sees the old or the new)."""
    try:
        return _parse(ledger.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


def _parse(text: str) -> dict[str, str | list[str]]:
    """A ledger's entries, each a SHA-256 or, while a write is under way, the list of those either
    content may have; one damaged by hand lists nothing (its files are then refused, not lost)."""
    try:
        entries = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items()
            if isinstance(v, str) or isinstance(v, list) and all(isinstance(d, str) for d in v)}
