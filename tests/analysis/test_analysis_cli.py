"""`specscope stats` and `specscope overlap` on small trace files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from specscope.cli import main
from specscope.trace.load import load_traces, write_traces


@pytest.fixture
def traces(tmp_path, record):
    rng = np.random.default_rng(3)
    records = []
    for i in range(8):
        prompt = rng.integers(0, 100, 30).tolist()
        output = prompt[:30] if i % 2 else rng.integers(100, 200, 30).tolist()
        records.append(record(f"q{i}", "qa", prompt, output=output, k_max=10,
                                   ngram=[6 if i % 2 else 1] * 30, eagle=[3] * 30))
    path = tmp_path / "qa.jsonl"
    write_traces(path, records)
    return path


def test_stats_prints_and_writes(traces, tmp_path, capsys):
    out, pairs = tmp_path / "stats.json", tmp_path / "pairs.csv"
    assert main(["stats", str(traces), "-o", str(out), "--pairs-output", str(pairs)]) == 0
    text = capsys.readouterr().out
    assert "ngram" in text and "eagle" in text and "head to head" in text
    rows = json.loads(out.read_text())
    ngram = next(r for r in rows if r["proposer"] == "ngram")
    assert (ngram["requests"], ngram["positions"]) == (8, 240)
    assert ngram["request_mean"] == pytest.approx(3.5)
    with pairs.open() as handle:
        (pair,) = list(csv.DictReader(handle))
    assert float(pair["a_beats_b"]) == pytest.approx(0.5)
    for row in (ngram, pair):  # what produced them: the traces, how their lengths were read, the code
        assert row["lengths"] == "common" and str(traces.resolve()) in row["traces"] and row["made_by"]


def test_overlap_prints_and_writes(traces, tmp_path, capsys):
    out, bleu = tmp_path / "overlap.csv", tmp_path / "bleu.csv"
    assert main(["overlap", str(traces), "--batch-sizes", "1,16", "--mode", "paper", "-o", str(out),
                 "--bleu-output", str(bleu)]) == 0
    text = capsys.readouterr().out
    assert "BLEU-4" in text and "B=16" in text
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5 * 2 * 2
    top = [r for r in rows if r["bin"] == "0.8–1.0"]
    assert {r["requests"] for r in top} == {"4"} and all(float(r["relative_speedup"]) > 0 for r in top)
    assert {(r["seed"], r["guess_no_match"], r["lengths"]) for r in rows} == {("42", "True", "own")}
    assert all(str(traces.resolve()) in r["traces"] and r["made_by"] for r in rows)
    with bleu.open() as handle:
        scored = list(csv.DictReader(handle))
    assert len(scored) == 8
    outputs = {r.id: r.output_len for r in load_traces([traces])[0]}  # each row names the tokens it scored
    assert {r["id"]: int(r["output_tokens"]) for r in scored} == outputs and all(r["made_by"] for r in scored)
    assert main(["overlap", str(traces), "--batch-sizes", "1", "--mode", "paper", "--bleu-output", "-"]) == 0
    assert "wrote" not in capsys.readouterr().err  # the rows are on standard output: "wrote 8 rows to -" said nothing


def test_errors_are_one_line(traces, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(traces.read_text().splitlines()[0] + "\n{oops\n")
    assert main(["stats", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specscope: error:") and "bad.jsonl:2" in err and "\n" not in err
    assert main(["overlap", str(traces), "--reference", "draft"]) == 2
    assert "--reference draft: no record holds both traces" in capsys.readouterr().err


def test_overlap_sets_the_lookup_against_the_model_proposer_accepting_most(tmp_path, capsys):
    """Probe: --reference defaulted to eagle, refusing traces of EAGLE-3 and MTP."""
    from specscope.trace.schema import ProposerTrace, TraceRecord

    acc = {"ngram": [1] * 12, "mtp": [2] * 12, "eagle3": [4] * 12}
    write_traces(tmp_path / "t.jsonl", [
        TraceRecord(f"r{i}", np.arange(10), np.arange(12),
                    {name: ProposerTrace(np.array(a, dtype=np.int32)) for name, a in acc.items()}, k_max=5)
        for i in range(2)])
    assert main(["overlap", str(tmp_path / "t.jsonl"), "--batch-sizes", "1", "--lookup-policies", "fixed:1",
                 "--reference-policy", "fixed:1", "-o", str(tmp_path / "o.csv")]) == 0
    assert ("note: --reference not given: ngram is set against eagle3, the lookup and the model proposer whose oracles "
            "emit the most tokens per step") in capsys.readouterr().out
    assert {row["reference"] for row in csv.DictReader((tmp_path / "o.csv").open())} == {"eagle3"}
