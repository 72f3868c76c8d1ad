"""Which files specscope wrote where a user named them (``-o``), so that it replaces only those.

Each folder that received such a file keeps ``.specscope-outputs``: a JSON object of file name →
SHA-256 of the content specscope last wrote there. A file may be replaced when it is listed with
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
from pathlib import Path

LEDGER = ".specscope-outputs"
_CLAIMED: set[Path] = set()  # user-named outputs checked by this process: their writes are recorded


def claim(path: Path) -> None:
    """Mark ``path`` (checked, about to be written) so that :func:`record` lists its writes."""
    _CLAIMED.add(Path(os.path.realpath(path)))


def listed(path: Path, sha256: str | None) -> bool:
    """Whether ``path``'s folder lists it with content ``sha256`` (its current content's)."""
    real = Path(os.path.realpath(path))
    return sha256 is not None and _read(real.parent / LEDGER).get(real.name) == sha256


def record(path: Path, text: str) -> None:
    """List ``text`` as what specscope wrote at ``path``, where ``path`` was :func:`claim`-ed.
    A ledger that cannot be written leaves the file unlisted: a later run refuses to replace it
    and says so, which loses nothing."""
    real = Path(os.path.realpath(path))
    if real not in _CLAIMED:
        return
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    try:
        with open(real.parent / LEDGER, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # two runs writing into one folder keep both entries
            handle.seek(0)
            entries = _parse(handle.read())
            entries[real.name] = digest
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


def _read(ledger: Path) -> dict[str, str]:
    """The ledger's entries, read under a shared lock (:func:`record` rewrites it in place under
    an exclusive one: read unlocked, a half-written ledger listed nothing)."""
    try:
        with open(ledger, encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            return _parse(handle.read())
    except (OSError, UnicodeDecodeError):
        return {}


def _parse(text: str) -> dict[str, str]:
    """A ledger's entries; one damaged by hand lists nothing (its files are then refused, not lost)."""
    try:
        entries = json.loads(text)
    except ValueError:
        return {}
    return {k: v for k, v in entries.items() if isinstance(v, str)} if isinstance(entries, dict) else {}
