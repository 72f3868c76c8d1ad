"""A progress bar (rich, on stderr) that appears only once work has taken ``delay`` seconds."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class LazyProgress:
    """``with LazyProgress("simulating", total) as bar: ... bar.advance()``.

    Quiet for short work; after ``delay`` seconds a bar with a time estimate is drawn on stderr
    (only when stderr is a terminal, unless ``force``).
    """

    def __init__(self, description: str, total: int, delay: float = 2.0, force: bool = False):
        self.description, self.total, self.delay = description, total, delay
        self.enabled = force or sys.stderr.isatty()
        self.done = 0
        self._start = 0.0
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> "LazyProgress":
        self._start = time.monotonic()
        return self

    def advance(self, steps: int = 1, description: str | None = None) -> None:
        self.done += steps
        if description:
            self.description = description
        if self._progress is None and self.enabled and time.monotonic() - self._start >= self.delay:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeRemainingColumn(), console=Console(stderr=True), transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total)
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, description=self.description)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
