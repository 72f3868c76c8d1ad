"""Two engines compared repeat by repeat: the median ratio, its order-statistic interval and the
verdict, by hand; the chains a study or bench ran beside a policy paired with it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specscope.analysis.measured import BesidePair, MeasuredCell, beside_pairs, best_beside, read_bench_results, verdict_counts
from specscope.analysis.paired import Paired, coverage, median_interval
from specscope.errors import SpecscopeError


def test_an_interval_holds_the_median_as_the_binomial_says():
    """[r_(j), r_(n+1-j)] misses the median when j - 1 or fewer ratios fall below it, or above it:
    n = 5, j = 1: 1 - 2/32; n = 7, j = 2: 1 - 2 * 8/128; n = 9, j = 2: 1 - 2 * 10/512."""
    assert coverage(5, 1) == pytest.approx(0.9375)
    assert coverage(7, 2) == pytest.approx(0.875) and coverage(7, 1) == pytest.approx(1 - 2 / 128)
    assert coverage(9, 2) == pytest.approx(1 - 20 / 512)
    assert median_interval([1.3, 0.9, 1.1, 1.0, 1.2]) == pytest.approx((0.9, 1.3, 0.9375))
    assert median_interval([7, 1, 6, 2, 5, 3, 4]) == pytest.approx((1, 7, 1 - 2 / 128))  # j = 2 holds only 87.5 %
    assert median_interval([9, 1, 8, 2, 7, 3, 6, 4, 5]) == pytest.approx((2, 8, 1 - 20 / 512))
    assert median_interval([1.0, 1.1, 1.2, 1.3]) is None  # 4 repeats: 87.5 % at most
    assert median_interval([1.0, 1.1, 1.2, 1.3], level=0.8) == pytest.approx((1.0, 1.3, 0.875))


@pytest.mark.parametrize("a, b, median, verdict", [
    ([1.1, 1.2, 1.3, 1.05, 1.15], [1.0] * 5, 1.15, "faster"),  # every repeat above 1
    ([0.9, 0.95, 0.8, 0.99, 0.85], [1.0] * 5, 0.9, "slower"),
    ([1.1, 0.95, 1.0, 1.02, 0.99], [1.0] * 5, 1.0, "no difference resolved"),  # the least below 1, the greatest above
    ([1.1, 1.2, 1.3], [1.0] * 3, 1.2, "too few repeats"),  # all above, but 3 of 3 happen one time in 4 by chance
    ([1.0, 1.2, 1.3, 1.05, 1.15], [1.0] * 5, 1.15, "no difference resolved"),  # an interval from exactly 1 holds it
])
def test_the_verdict_is_where_the_interval_lies_against_one(a, b, median, verdict):
    paired = Paired.of(a, b)
    assert paired.median == pytest.approx(median) and paired.verdict == verdict
    assert verdict in paired.describe()


def test_speedups_over_one_baseline_per_repeat_pair_as_tokens_per_second_do():
    """A repeat's speedups share its no-SD run: 3.0 / 2.0 over a baseline of 100 tokens/s is 300 / 200."""
    assert Paired.of([3.0, 1.5], [2.0, 1.5]).ratios == pytest.approx((1.5, 1.0))
    with pytest.raises(ValueError, match="one speed of each engine per repeat"):
        Paired.of([1.0, 2.0], [1.0])
    said = Paired.of([1.1, 1.2, 1.3, 1.05, 1.15], [1.0] * 5).describe()
    assert said == "1.150 median of 5 paired repeats, 93.8 % interval 1.050 … 1.300: faster"


def _row(method: str, speedups: list[float], **fields) -> dict:
    return {"method": method, "k": 3, "batch_size": 1, "speedup": sorted(speedups)[len(speedups) // 2],
            "speedup_repeats": speedups, "workload": "code", **fields}


def test_a_chain_beside_a_policy_pairs_with_it_repeat_by_repeat(tmp_path):
    """A bench file's learned row and the chains beside it read back as pairs; a chain run alone,
    or beside another policy, pairs with none; a row without repeats pairs without a verdict."""
    label = "learned:p.json (ngram+mtp)"
    path = tmp_path / "code.json"
    path.write_text(json.dumps([
        _row("learned", [1.5, 1.6, 1.4, 1.55, 1.45], policy=label),
        _row("ngram", [1.0, 1.0, 1.0, 1.0, 1.0], beside=label),
        _row("mtp", [1.5, 1.7, 1.3, 1.5, 1.4], beside=label),
        _row("eagle", [1.0] * 5),
        _row("draft", [1.0] * 5, beside="learned:q.json (ngram+draft)"),
    ]))
    cells = read_bench_results([path])
    assert cells[0].speedup_repeats == (1.5, 1.6, 1.4, 1.55, 1.45) and "speedup_repeats" not in cells[0].flat()
    pairs = beside_pairs(cells)
    assert [(p.chain.method, p.paired.verdict) for p in pairs] == [("ngram", "faster"),
                                                                    ("mtp", "no difference resolved")]
    flat = pairs[1].flat()
    # ratios 1.5/1.5, 1.6/1.7, 1.4/1.3, 1.55/1.5, 1.45/1.4 = 1, 0.941, 1.077, 1.033, 1.036
    assert flat["learned_over_chain"] == pytest.approx(1.55 / 1.5) and (flat["low"], flat["high"]) == pytest.approx(
        (1.6 / 1.7, 1.4 / 1.3))
    assert flat["chain"] == "mtp k=3" and flat["repeats"] == 5 and flat["simulated_learned_over_chain"] is None
    assert [p.chain.method for p in best_beside(pairs)] == ["mtp"]  # the chain it is least faster than
    assert verdict_counts(pairs) == "1 faster, 1 no difference resolved"  # most first, ties as they come
    assert verdict_counts(best_beside(pairs)) == "1 no difference resolved"
    short = BesidePair(cells[0], replace(cells[2], speedup_repeats=(1.5, 1.7, 1.3)))  # a row of other repeats
    assert short.paired is None and short.flat()["verdict"] == "repeats differ (5 and 3)"
    with pytest.raises(SpecscopeError, match="two learned cells of code at B=1 are both learned:p.json"):
        beside_pairs(cells + [replace(cells[0], k=5)])  # another policy of that file name, deeper
    unsaid = [MeasuredCell("code", "learned", 3, 1, 1.5, policy=label), MeasuredCell("code", "ngram", 3, 1, 1.0,
                                                                                      beside=label)]
    assert beside_pairs(unsaid)[0].paired is None
    assert best_beside(beside_pairs(unsaid)) == [] and verdict_counts(beside_pairs(unsaid)) == ""
    assert beside_pairs(unsaid)[0].flat()["verdict"] == "no repeats listed"


@pytest.mark.parametrize("value, message", [
    ([], r"field 'speedup_repeats': expected a non-empty list of numbers"),
    ("1.5", r"field 'speedup_repeats': expected a non-empty list of numbers"),
    ([1.5, "1.2"], r"field 'speedup_repeats\[1\]': expected a number"),
    ([1.5, 0.0], r"field 'speedup_repeats\[1\]': expected a number > 0"),
])
def test_a_broken_list_of_repeats_is_one_line_error(tmp_path, value, message):
    path = tmp_path / "x.json"
    path.write_text(json.dumps([_row("ngram", [1.0], speedup_repeats=value)]))
    with pytest.raises(SpecscopeError, match=r"x\.json: item 0: " + message):
        read_bench_results([path])
