"""Position profiles and the data-adapted output-length groups."""

from __future__ import annotations

import pytest

from specscope.analysis.position import (
    group_label,
    length_edges,
    nice,
    position_profiles,
)


def test_nice_rounds_to_1_2_2p5_5():
    assert [nice(v) for v in (0.9, 1.4, 1.6, 2.2, 3.7, 7.0, 880, 13000)] == [1, 1, 2, 2, 5, 5, 1000, 10000]


def test_length_edges_follow_the_data():
    short = [40 + i for i in range(200)]  # 40..239: quartiles 90, 140, 190
    assert length_edges(short) == [100, 200]
    chat = [300] * 10 + [700] * 10 + [3000] * 10 + [9000] * 10
    assert length_edges(chat) == [500, 2000, 5000]
    assert length_edges([5, 5, 5]) == []


def test_group_labels():
    assert group_label(0, 1000) == "<1k"
    assert group_label(1000, 4000) == "1k–4k"
    assert group_label(13000, None) == "≥13k"
    assert group_label(0, None) == "all"


def test_profile_values_by_position_and_fraction(record):
    records = [record("a", "d", [1], ngram=[1, 2, 3, 4]), record("b", "d", [1], ngram=[5, 5])]
    rows = position_profiles(records)
    assert {r.group for r in rows} == {"all"}
    by_position = [(r.x_lo, r.x_hi, r.mean_acc_len, r.positions, r.requests) for r in rows if r.axis == "position"]
    assert by_position == [(0, 1, 3.0, 2, 2), (1, 2, 3.5, 2, 2), (2, 3, 3.0, 1, 1), (3, 4, 4.0, 1, 1)]
    by_fraction = {r.x_lo: (r.mean_acc_len, r.requests) for r in rows if r.axis == "fraction"}
    # fractions: a at 0, .25, .5, .75; b at 0, .5
    assert by_fraction == {0.0: (3.0, 2), 0.25: (2.0, 1), 0.5: (4.0, 2), 0.75: (4.0, 1)}


def test_profile_groups_split_by_output_length(record):
    records = [record(str(i), "d", [1], ngram=[2] * n) for i, n in enumerate([10] * 5 + [30] * 5 + [100] * 5)]
    rows = [r for r in position_profiles(records) if r.axis == "fraction"]
    groups = {r.group: r.group_requests for r in rows}
    assert sum(groups.values()) == 15 and len(groups) >= 2
    assert all(r.mean_acc_len == pytest.approx(2.0) for r in rows)
