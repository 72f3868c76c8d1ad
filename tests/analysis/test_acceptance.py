"""Acceptance statistics, pinned by hand-computed values."""

from __future__ import annotations

import pytest

from specscope.analysis.acceptance import acceptance_stats, request_means


@pytest.fixture
def two(record):
    return [
        record("r1", "d", [1, 2, 3], ngram=[1, 3, 1, 5], eagle=[2, 2, 2, 2]),
        record("r2", "d", [1, 2, 3, 4, 5], ngram=[1, 1], eagle=[3, 1]),
    ]


def test_per_request_statistics(two):
    singles, _ = acceptance_stats(two)
    ngram = next(s for s in singles if s.proposer == "ngram")
    # per-request means: 2.5 and 1.0
    assert (ngram.requests, ngram.positions) == (2, 6)
    assert ngram.request_mean == pytest.approx(1.75)
    assert ngram.request_median == pytest.approx(1.75)
    assert ngram.request_std == pytest.approx(0.75)  # population std
    assert ngram.request_p5 == pytest.approx(1.0 + 0.05 * 1.5)
    assert ngram.request_p95 == pytest.approx(1.0 + 0.95 * 1.5)
    assert ngram.mean_prompt_len == pytest.approx(4.0)
    assert ngram.mean_output_read == pytest.approx(3.0)


def test_pooled_statistics(two):
    singles, _ = acceptance_stats(two)
    ngram = next(s for s in singles if s.proposer == "ngram")
    # pooled values 1,3,1,5,1,1 (sorted 1,1,1,1,3,5)
    assert ngram.position_mean == pytest.approx(2.0)
    assert ngram.position_median == pytest.approx(1.0)
    assert ngram.position_std == pytest.approx((14 / 6) ** 0.5)
    assert ngram.position_p5 == pytest.approx(1.0)
    assert ngram.position_p95 == pytest.approx(3.0 + 0.75 * 2.0)
    eagle = next(s for s in singles if s.proposer == "eagle")
    assert eagle.request_mean == pytest.approx(2.0) and eagle.request_std == pytest.approx(0.0)


def test_pair_shares(two):
    _, pairs = acceptance_stats(two)
    (pair,) = pairs
    assert (pair.a, pair.b, pair.positions) == ("ngram", "eagle", 6)
    # r1: 1<2, 3>2, 1<2, 5>2; r2: 1<3, 1=1
    assert pair.a_beats_b == pytest.approx(2 / 6)
    assert pair.b_beats_a == pytest.approx(3 / 6)
    assert pair.ties == pytest.approx(1 / 6)


def test_a_pair_without_common_positions_has_no_shares(record):
    """n-gram in one request, EAGLE in the other: no position to compare, so no share (not 0 %)."""
    _, (pair,) = acceptance_stats([record("a", "x", [1], ngram=[2, 1]), record("b", "x", [1], eagle=[1, 3])])
    assert (pair.positions, pair.a_beats_b, pair.b_beats_a, pair.ties) == (0, None, None, None)


def test_pairs_use_the_common_prefix_and_datasets_stay_apart(record):
    records = [
        record("a", "x", [1], output=[7, 7, 7], ngram=[4, 4, 4], eagle=[1, 9]),
        record("b", "y", [1], ngram=[2], eagle=[1]),
    ]
    singles, pairs = acceptance_stats(records)
    assert [(s.dataset, s.proposer, s.positions) for s in singles] == [
        ("x", "ngram", 3), ("x", "eagle", 2), ("y", "ngram", 1), ("y", "eagle", 1)]
    x = next(p for p in pairs if p.dataset == "x")
    assert (x.positions, x.a_beats_b, x.b_beats_a) == (2, 0.5, 0.5)


def test_three_proposers_give_every_pair(record):
    records = [record("a", "d", [1], ngram=[1, 2], eagle=[2, 2], draft=[3, 1])]
    _, pairs = acceptance_stats(records)
    assert [(p.a, p.b) for p in pairs] == [("ngram", "eagle"), ("ngram", "draft"), ("eagle", "draft")]


def test_request_means(two):
    rows = request_means(two)
    assert [(r["id"], r["proposer"], r["mean_acc_len"]) for r in rows] == [
        ("r1", "ngram", 2.5), ("r1", "eagle", 2.0), ("r2", "ngram", 1.0), ("r2", "eagle", 2.0)]


def test_a_proposers_row_counts_the_lengths_of_its_own_requests(record):
    """A record without n-gram is no request of n-gram's row: not in its mean prompt or output."""
    records = [record("r1", "d", [1, 2, 3], ngram=[1, 3, 1, 5], eagle=[2, 2, 2, 2]),
               record("r2", "d", [1], eagle=[3, 1])]
    ngram = next(s for s in acceptance_stats(records)[0] if s.proposer == "ngram")
    assert (ngram.requests, ngram.mean_prompt_len, ngram.mean_output_read) == (1, 3.0, 4.0)
