"""Which code produced a result: :func:`code_version`, written into what specscope fits and
reports (a cost model's and a policy's file, the report's page) and printed by ``--version``."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from specscope import __version__

PACKAGE = Path(__file__).resolve().parent


@functools.cache
def code_version() -> str:
    """``specscope VERSION``, and where the package runs from a git checkout of specscope
    (``src/specscope`` under the work tree's top) its commit: ``(git 45a8262)``, ``(git 45a8262,
    modified)`` where tracked files differ from it. An installed copy (site-packages) or a
    package inside another project's work tree has no commit of its own to name."""
    label = f"specscope {__version__}"
    try:
        top = _git("rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() / "src" / "specscope" != PACKAGE:
            return label
        commit = _git("rev-parse", "--short", "HEAD")
        changed = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return label
    if commit is None:
        return label
    return f"{label} (git {commit}{', modified' if changed else ''})"


def _git(*args: str) -> str | None:
    """What ``git -C PACKAGE ARGS`` prints (stripped), None where it fails."""
    done = subprocess.run(["git", "-C", str(PACKAGE), *args], capture_output=True, text=True, timeout=10)
    return done.stdout.strip() if done.returncode == 0 else None
