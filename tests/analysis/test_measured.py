"""Bench rows written by the CLI read back as measured cells; error_pct is defined once."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from specscope.analysis.measured import MeasuredCell, read_bench_results, simulated_for, winners
from specscope.backends import BenchRow
from specscope.errors import SpecscopeError


def row(batch_size: int, throughput: float, baseline: float | None, **details) -> BenchRow:
    return BenchRow("ngram", 3, batch_size, throughput, baseline, 0.5, 2.0, details)


def test_bench_row_speedup_and_flat_fields():
    r = row(4, 150.0, 100.0, greedy_match=True)
    assert r.speedup == pytest.approx(1.5)
    assert r.flat() == {"method": "ngram", "k": 3, "batch_size": 4, "throughput": 150.0,
                        "baseline_throughput": 100.0, "acceptance_rate": 0.5, "mean_acceptance_length": 2.0,
                        "speedup": pytest.approx(1.5), "greedy_match": True}
    assert row(4, 150.0, None).speedup is None and row(4, 150.0, 0.0).speedup is None


def test_written_rows_read_back_as_cells(tmp_path):
    path = tmp_path / "code.json"
    path.write_text(json.dumps([row(1, 120.0, 100.0).flat(), {**row(8, 90.0, 100.0).flat(), "workload": "chat"}]))
    cells = read_bench_results([path])
    assert [(c.dataset, c.method, c.k, c.batch_size) for c in cells] == [("code", "ngram", 3, 1), ("chat", "ngram", 3, 8)]
    assert [c.measured_speedup for c in cells] == pytest.approx([1.2, 0.9])
    assert all(c.simulated_speedup is None and c.error_pct is None for c in cells)


def test_a_workload_names_its_dataset_as_traces_do(tmp_path):
    """A bench row's workload is its file's stem already, dots and all (the paper's
    ``llama3.1-8b_gsm8k``; ``gsm8k.v1`` beside ``gsm8k.v2``); a sweep's keeps the path
    configured, whose stem names the dataset."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{**row(1, 1.2, 1.0).flat(), "workload": name}
                                for name in ("llama3.1-8b_gsm8k", "gsm8k.v1", "gsm8k.v2", "/data/code.jsonl")]))
    assert [c.dataset for c in read_bench_results([path])] == ["llama3.1-8b_gsm8k", "gsm8k.v1", "gsm8k.v2", "code"]
    assert simulated_for(read_bench_results([path])[0], [SimpleNamespace(
        dataset="llama3.1-8b_gsm8k", batch_size=1, acc="ngram", policy="fixed:3", speedup=1.25)]) == 1.25


def test_error_pct_is_relative_to_the_measured_speedup():
    cell = MeasuredCell("code", "ngram", 3, 1, measured_speedup=1.25, simulated_speedup=1.5)
    assert cell.error_pct == pytest.approx(20.0)
    assert cell.flat()["error_pct"] == pytest.approx(20.0)


@pytest.mark.parametrize("content, message", [
    ("[]", r"x\.json: expected a non-empty JSON list of bench results"),
    ("{bad", r"x\.json:1: invalid JSON"),
    ("[" * 100_000 + "]" * 100_000, r"x\.json: invalid JSON \(nested too deeply\)"),
    (json.dumps([row(1, 1.0, None).flat()]), r"x\.json: item 0: field 'speedup': expected a number, got None"),
    (json.dumps([{**row(1, 1.0, 1.0).flat(), "batch_size": 0}]), r"x\.json: item 0: field 'batch_size': expected an integer >= 1"),
    (json.dumps([row(1, 1.0, 1.0).flat(), 5]), r"x\.json: item 1: expected a JSON object, got int"),
])
def test_bad_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(SpecscopeError, match=message):
        read_bench_results([path])


def test_winners_pick_the_fastest_cell_per_dataset_and_batch_size():
    cells = [MeasuredCell("code", m, 3, 1, s) for m, s in (("ngram", 1.2), ("eagle", 1.6), ("draft", 0.9))]
    assert [c.method for c in winners(cells)] == ["eagle"]


def test_where_no_sd_cell_beats_no_sd_the_winner_is_no_sd():
    """Every SD cell below 1× (or at it): the report's winners table named the best of them
    (n-gram at 0.95×) where the what-if table, over the same cells, named no SD."""
    cells = [MeasuredCell("code", "eagle", 3, 32, 0.82), MeasuredCell("code", "ngram", 3, 32, 0.95),
             MeasuredCell("code", "ngram", 1, 8, 1.0), MeasuredCell("code", "ngram", 1, 1, 1.01)]
    assert [(c.batch_size, c.method, c.measured_speedup) for c in winners(cells)] == [
        (1, "ngram", 1.01), (8, "none", 1.0), (32, "none", 1.0)]
