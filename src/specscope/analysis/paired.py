"""Two engines compared repeat by repeat: the median ratio, its interval, and a verdict.

In each repeat of a lockstep (:mod:`specscope.backends.reference`) two engines run the same
requests at the same moment, so what drifts between repeats cancels in the ratio of their speeds
r_i = a_i / b_i (tokens per second, or speedups over the repeat's one no-SD run). Over n repeats
the median of r_1 … r_n says how much faster a is. Its interval makes no assumption on how the
machine's noise is distributed, only that the repeats are independent (the sign test's): with the
ratios sorted r_(1) ≤ … ≤ r_(n), [r_(j), r_(n+1−j)] holds the true median with probability
1 − 2·P(B ≤ j − 1), B ~ Binomial(n, ½). :func:`median_interval` takes the narrowest of these
that holds it with probability :data:`LEVEL` or more: for 5 repeats the least and the greatest
ratio (93.75 %), for 7 again those (98.4 %: [r_(2), r_(6)] holds it 87.5 %), for 9 [r_(2), r_(8)]
(96.1 %). Fewer than 5 repeats give no interval at 90 % (4: 87.5 %).

The verdict: ``faster`` where the interval lies above 1, ``slower`` where below, ``no difference
resolved`` where it holds 1 (the two differ by less than the repeats can tell: one computation run
twice reads so), ``too few repeats`` without an interval. An interval misses the true median with
the probability left (5 repeats: 6.25 %), so of many pairs that run alike, about that share read
``faster`` or ``slower`` by chance.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.90  # the least probability an interval holds the true median with
FASTER, SLOWER, UNRESOLVED, TOO_FEW = "faster", "slower", "no difference resolved", "too few repeats"


def coverage(n: int, j: int) -> float:
    """The probability that [r_(j), r_(n+1−j)] of ``n`` independent ratios holds their median:
    1 − 2·P(B ≤ j − 1), B ~ Binomial(n, ½)."""
    return 1.0 - 2 * sum(math.comb(n, i) for i in range(j)) / (1 << n)


def median_interval(ratios: Sequence[float], level: float = LEVEL) -> tuple[float, float, float] | None:
    """(low, high, its coverage) of the median of ``ratios`` (module docstring); None where even the
    least and the greatest hold it with a probability below ``level``."""
    n, ordered = len(ratios), sorted(ratios)
    held = [j for j in range(1, (n + 1) // 2 + 1) if coverage(n, j) >= level]
    if not held:
        return None
    j = max(held)
    return ordered[j - 1], ordered[n - j], coverage(n, j)


@dataclass(frozen=True)
class Paired:
    """Engine a over engine b, one ratio per repeat (``ratios``)."""

    ratios: tuple[float, ...]

    @staticmethod
    def of(a: Sequence[float], b: Sequence[float]) -> Paired:
        """From each repeat's speed of a and of b [repeats] (speedups over one no-SD run per repeat
        divide to the same ratio as tokens per second)."""
        if len(a) != len(b) or not a:
            raise ValueError(f"expected one speed of each engine per repeat, got {len(a)} and {len(b)}")
        return Paired(tuple(x / y for x, y in zip(a, b)))

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def interval(self) -> tuple[float, float, float] | None:
        """(low, high, coverage): :func:`median_interval`."""
        return median_interval(self.ratios)

    @property
    def bounds(self) -> tuple[float | None, float | None, float | None]:
        """(low, high, coverage) of :attr:`interval`; (None, None, None) without one."""
        return self.interval or (None, None, None)

    @property
    def verdict(self) -> str:
        interval = self.interval
        if interval is None:
            return TOO_FEW
        low, high, _ = interval
        return FASTER if low > 1.0 else SLOWER if high < 1.0 else UNRESOLVED

    def describe(self) -> str:
        """``1.016 median of 5 paired repeats, 93.8 % interval 0.996 … 1.042: no difference resolved``."""
        said = f"{self.median:.3f} median of {len(self.ratios)} paired repeats"
        interval = self.interval
        if interval is None:
            return f"{said} ({min(self.ratios):.3f} … {max(self.ratios):.3f}): {TOO_FEW} for a {LEVEL:.0%} interval"
        low, high, held = interval
        return f"{said}, {100 * held:.1f} % interval {low:.3f} … {high:.3f}: {self.verdict}"
