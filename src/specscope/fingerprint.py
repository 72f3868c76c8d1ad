"""Fingerprints of files: what a result names its inputs by (a path alone tells nothing once
the file changes or the result is read elsewhere). A file's SHA-256 is of its whole content; a
checkpoint's, over :data:`SAMPLED_ABOVE` bytes, of its size and :data:`SAMPLES` chunks of it."""

from __future__ import annotations

import functools
import hashlib
import stat
from pathlib import Path


SAMPLED_ABOVE = 64 << 20  # a file larger than this is fingerprinted by samples of its content
SAMPLES = 256  # ... this many chunks of SAMPLE bytes, evenly spaced, and its size
SAMPLE = 64 << 10


def file_sha256(path: str | Path, sampled: bool = False) -> str | None:
    """SHA-256 of the content of ``path``, kept per size and modification time within a process
    (None if unreadable, or not a regular file: a pipe read once has nothing left to hash);
    ``sampled``: above :data:`SAMPLED_ABOVE` bytes, of its size and
    :data:`SAMPLES` evenly spaced chunks only — a checkpoint's fingerprint, where reading 140 GB
    of a 70B model's weights would take minutes, and weights trained again differ everywhere."""
    try:
        info = Path(path).stat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return _sha256(Path(path).absolute(), info.st_mtime_ns, info.st_size, sampled and info.st_size > SAMPLED_ABOVE)


@functools.lru_cache(maxsize=256)
def _sha256(path: Path, mtime_ns: int, size: int, sampled: bool) -> str | None:
    try:
        digest = hashlib.sha256(f"{size}\n".encode() if sampled else b"")
        with open(path, "rb") as handle:
            if sampled:
                for index in range(SAMPLES):
                    handle.seek(index * (size - SAMPLE) // (SAMPLES - 1))
                    digest.update(handle.read(SAMPLE))
            else:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None


def provenance(path: str | Path) -> str:
    """A file as a result names it: its absolute path and the start of its SHA-256 (a result is
    read elsewhere, and later: a relative path, or a file since changed, tells nothing)."""
    digest = file_sha256(path)
    return f"{Path(path).resolve()} " + (f"(SHA-256 {digest[:12]})" if digest else "(not a regular file: no SHA-256)")
