"""A progress bar (rich, on stderr) that appears only once work has taken ``delay`` seconds; where
stderr is no terminal (a log, a batch job), a plain line every :data:`LOG_EVERY` seconds instead."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


LOG_EVERY = 60.0  # seconds between the plain progress lines written to a log


class LazyProgress:
    """``with LazyProgress("simulating", total) as bar: ... bar.advance()``.

    Quiet for short work; after ``delay`` seconds a bar with a time estimate is drawn on stderr
    (only when stderr is a terminal, unless ``force``); otherwise, once work has taken
    :data:`LOG_EVERY` seconds, a line "description: done of total, elapsed" every LOG_EVERY seconds
    (a run under nohup or in CI shows it is alive).
    """

    def __init__(self, description: str, total: int, delay: float = 2.0, force: bool = False):
        self.description, self.total, self.delay = description, total, delay
        self.enabled = force or sys.stderr.isatty()
        self.done = 0
        self._start = 0.0
        self._progress: Progress | None = None
        self._task = None
        self._logged = 0.0  # when the last plain line was written (seconds since the start)

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
        elif not self.enabled:
            elapsed = time.monotonic() - self._start
            if elapsed - self._logged >= LOG_EVERY:
                self._logged = elapsed
                print(f"{self.description}: {self.done} of {self.total} done, {elapsed:.0f} s", file=sys.stderr,
                      flush=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
