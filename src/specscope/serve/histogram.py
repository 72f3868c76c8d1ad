"""A Prometheus histogram kept by hand: observations counted per upper bound, their sum and count.

The engine loop observes; the exporter reads a copy at every scrape
(:class:`~specscope.serve.exporter.EngineCollector`), as vLLM's ``vllm:iteration_tokens_total``
and ``vllm:inter_token_latency_seconds`` are exported (their bounds below, as vLLM registers them).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

ITERATION_TOKENS_BOUNDS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
INTER_TOKEN_LATENCY_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                              10.0, 20.0, 40.0, 80.0)  # seconds


@dataclass
class Histogram:
    """Observations of one quantity: ``counts[i]`` of them ≤ ``bounds[i]`` and above the bound
    before (the last count: above every bound), their ``total`` and how many (``count``)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' buckets: (``le``, observations ≤ it), ``+Inf`` last."""
        running, out = 0, []
        for bound, count in zip([*(str(float(b)) for b in self.bounds), "+Inf"], self.counts):  # le="8.0", as vLLM's
            running += count
            out.append((bound, running))
        return out

    def copy(self) -> "Histogram":
        return Histogram(self.bounds, list(self.counts), self.total, self.count)
