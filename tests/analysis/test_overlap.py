"""BLEU-4 of prompt vs output (sacrebleu on token ids) and the per-bin relative speedups."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specscope.analysis.overlap import (
    OverlapConfig,
    bin_index,
    bleu_scores,
    overlap_speedups,
    request_bleu,
)
from specscope.costmodel.linear import H100_LLAMA31_8B
from specscope.errors import SpecscopeError
from specscope.sim.grid import SimConfig, simulate


def test_bleu_on_token_ids(record):
    ids = list(range(1, 41))
    records = [
        record("same", "d", ids, output=ids, ngram=[1] * 40),
        record("disjoint", "d", ids, output=list(range(500, 540)), ngram=[1] * 40),
        record("no prompt", "d", [], output=ids, ngram=[1] * 40),
        record("half", "d", ids, output=ids[:20] + list(range(500, 520)), ngram=[1] * 40),
    ]
    scores = bleu_scores(records)
    assert scores[0] == pytest.approx(1.0) and scores.max() <= 1.0  # sacrebleu's 100.00000000000004 % held to 1
    assert scores[1] == pytest.approx(0.0, abs=1e-6)
    assert scores[2] == 0.0
    assert 0.2 < scores[3] < 0.8
    # Token ids are words: 12 and 1 2 must not be confused.
    glued = bleu_scores([record("g", "d", [12, 34, 56, 78], output=[1, 2, 3, 4, 5, 6, 7, 8], ngram=[1] * 8)])
    assert glued[0] == pytest.approx(0.0, abs=1e-6)


def test_bins_are_half_open_with_the_top_edge_in_the_last_bin():
    assert bin_index(np.array([0.0, 0.19, 0.2, 0.5, 0.8, 0.999, 1.0])).tolist() == [0, 0, 1, 2, 4, 4, 4]


def _workload(record):
    """Copying requests (n-gram bursts) and fresh ones (n-gram finds little), EAGLE even."""
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        prompt = rng.integers(0, 1000, 60).tolist()
        copy = i % 2 == 0
        output = prompt[:50] if copy else rng.integers(1000, 2000, 50).tolist()
        ngram = [9 if copy else 1] * 50
        records.append(record(f"r{i}", "chat", prompt, output=output, k_max=10, ngram=ngram, eagle=[3] * 50))
    return records


def test_relative_speedup_per_bin_matches_the_simulator_on_that_bin(record):
    records = _workload(record)
    sim = SimConfig(mode="paper", batch_sizes=(1, 32), guess_no_match=False)
    rows = overlap_speedups(records, H100_LLAMA31_8B, sim)
    assert len(rows) == 5 * 2 * 2  # bins × batch sizes × lookup policies
    by_bin = {r.bin: r.requests for r in rows}
    assert by_bin["0.8–1.0"] == 6 and by_bin["0.0–0.2"] == 6 and by_bin["0.4–0.6"] == 0
    top = [r for r in rows if r.bin == "0.8–1.0"]
    low = [r for r in rows if r.bin == "0.0–0.2"]
    assert all(r.relative_speedup > 0 for r in top) and all(r.relative_speedup < 0 for r in low)
    assert all(np.isnan(r.relative_speedup) for r in rows if r.requests == 0)
    # The same numbers as simulating the bin's requests directly.
    copying = [r for i, r in enumerate(records) if i % 2 == 0]
    direct = simulate(copying, ["ngram", "eagle"], ["fixed:3", "fixed:5"], H100_LLAMA31_8B, sim)
    speed = {(d.acc, d.policy, d.batch_size): d.speedup for d in direct}
    for r in top:
        assert r.lookup_speedup == pytest.approx(speed[("ngram", r.policy, r.batch_size)])
        assert r.reference_speedup == pytest.approx(speed[("eagle", "fixed:3", r.batch_size)])
        assert r.relative_speedup == pytest.approx(r.lookup_speedup / r.reference_speedup - 1)
    # each row names what made both of its speedups (ngram fixed:3 and fixed:5 rows looked alike otherwise)
    assert {(r.lookup, r.reference, r.reference_policy) for r in rows} == {("ngram", "eagle", "fixed:3")}


def test_request_bleu_rows_and_missing_proposer(record):
    records = _workload(record)
    rows = request_bleu(records)
    assert [r.bin for r in rows[:2]] == ["0.8–1.0", "0.0–0.2"]
    with pytest.raises(SpecscopeError, match="proposer 'eagle' missing"):
        overlap_speedups([dataclasses.replace(records[0], proposers={"ngram": records[0].proposers["ngram"]})],
                         H100_LLAMA31_8B, SimConfig(batch_sizes=(1,)), OverlapConfig(reference="eagle"))


def test_a_bin_replays_at_its_datasets_depth_not_its_own():
    """Probe: without k_max, each BLEU bin inferred its own depth from its few requests: the bin
    whose n-gram never accepted more than one draft refused fixed:3, which the dataset (n-gram
    reaching 6 elsewhere) allows, and the error named the bin as a dataset."""
    from specscope.sim.grid import SimConfig
    from specscope.trace.schema import ProposerTrace, TraceRecord

    tokens = np.arange(100, 130)

    def record(rid: str, prompt: np.ndarray, ngram: list[int]) -> TraceRecord:
        acc = np.array(ngram + [1] * (30 - len(ngram)), dtype=np.int32)
        return TraceRecord(rid, prompt, tokens, {"ngram": ProposerTrace(acc),
                                                 "eagle": ProposerTrace(np.array([4] + [2] * 29, dtype=np.int32))},
                           dataset="d")

    copied, fresh = record("copied", tokens, [7, 1, 3]), record("fresh", np.arange(500, 540), [2, 1, 2])
    rows = overlap_speedups([copied, fresh], H100_LLAMA31_8B, SimConfig(batch_sizes=(1,)))
    assert {r.requests for r in rows if r.requests} == {1} and all(np.isfinite(r.lookup_speedup) for r in rows
                                                                  if r.requests)
