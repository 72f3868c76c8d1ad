"""Wall-clock time per phase of a step (drafting, verification, sampling, prefill).

On CUDA, kernels run asynchronously, so :class:`PhaseClock` calls ``torch.cuda.synchronize()``
at every phase boundary: otherwise a phase's time would land in whichever later phase first
waits for the GPU. Synchronising has a cost: it drains the launch queue, so the CPU can no
longer prepare the next phase's kernels while the GPU runs the current one (about 10-50 µs
per boundary plus the lost overlap, a few boundaries per step). Measured step times are
therefore slightly longer than an unsynchronised engine's; the time split is what it buys.
On CPU every operation is synchronous and nothing is added.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

PHASES = ("prefill", "draft", "verify", "sample")


class PhaseClock:
    """Accumulates seconds per phase name until :meth:`reset`."""

    def __init__(self, device: torch.device | str) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def reset(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def now(self) -> float:
        """A synchronised timestamp (seconds)."""
        self.sync()
        return time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.seconds[name] += self.now() - start
