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
    assert ("note: --reference not given: ngram is set against eagle3, the model proposer whose oracle emits the most "
            "tokens per step, of those the cost model prices that every record holds (tokens per oracle step: "
            "eagle3 3.67; mtp left aside: the cost model prices no drafting of it)") in capsys.readouterr().out
    assert {row["reference"] for row in csv.DictReader((tmp_path / "o.csv").open())} == {"eagle3"}


def _gen(rid: str, dataset: str, means: dict[str, int], rng, lacking: tuple[str, ...] = ()):
    """A record whose proposers of ``means`` emit about that many tokens a step (n-gram: 1 or 2)."""
    from specscope.trace.schema import ProposerTrace, TraceRecord

    return TraceRecord(rid, rng.integers(0, 50, 10), rng.integers(0, 50, 40), {
        name: ProposerTrace(np.clip(rng.integers(mean - 1, mean + 2, 40), 1, 6).astype(np.int32))
        for name, mean in means.items() if name not in lacking}, k_max=5, dataset=dataset)


def test_overlap_sets_each_dataset_against_its_own_priced_reference(tmp_path, capsys):
    """Probes: MTP accepting most (which the default cost model prices no drafting of) was taken as
    the reference and the run died ('no drafting model for proposer mtp'); two datasets whose best
    model proposers differ were both set against the first's, where report set each against its own."""
    rng = np.random.default_rng(1)
    write_traces(tmp_path / "m.jsonl", [_gen(f"r{i}", "d", {"ngram": 1, "eagle": 3, "mtp": 5}, rng) for i in range(4)])
    assert main(["overlap", str(tmp_path / "m.jsonl"), "--batch-sizes", "1", "-o", str(tmp_path / "m.csv")]) == 0
    assert "mtp left aside: the cost model prices no drafting of it" in capsys.readouterr().out
    assert {row["reference"] for row in csv.DictReader((tmp_path / "m.csv").open())} == {"eagle"}
    write_traces(tmp_path / "a.jsonl", [_gen(f"r{i}", "A", {"ngram": 1, "eagle": 4, "eagle3": 2}, rng) for i in range(4)])
    write_traces(tmp_path / "b.jsonl", [_gen(f"r{i}", "B", {"ngram": 1, "eagle": 2, "eagle3": 4}, rng) for i in range(4)])
    assert main(["overlap", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--batch-sizes", "1",
                 "-o", str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    assert "note: --reference not given: dataset 'A': ngram is set against eagle," in out
    assert "note: --reference not given: dataset 'B': ngram is set against eagle3," in out
    assert {(row["dataset"], row["reference"]) for row in csv.DictReader((tmp_path / "o.csv").open())} == \
        {("A", "eagle"), ("B", "eagle3")}
    # a model proposer some records lack is no default: the one every record holds is
    write_traces(tmp_path / "l.jsonl", [_gen(f"r{i}", "d", {"ngram": 1, "eagle": 2, "eagle3": 4}, rng,
                                             ("eagle3",) if i == 0 else ()) for i in range(4)])
    assert main(["overlap", str(tmp_path / "l.jsonl"), "--batch-sizes", "1", "-o", str(tmp_path / "l.csv")]) == 0
    assert "eagle3 left aside: not every record holds it" in capsys.readouterr().out
    assert {row["reference"] for row in csv.DictReader((tmp_path / "l.csv").open())} == {"eagle"}


def test_overlaps_default_reference_is_explained_as_the_lookups_and_never_unpriced(tmp_path, capsys):
    """Probes: --lookup foo was 'set against eagle3, the two proposers whose oracles emit the most
    tokens per step (... foo nan)' (the pair eagle3+mtp's reason, not foo's); --lookup eagle3 took MTP
    and died on its price."""
    rng = np.random.default_rng(2)
    write_traces(tmp_path / "t.jsonl", [_gen(f"r{i}", "d", {"ngram": 1, "mtp": 2, "eagle3": 4}, rng) for i in range(3)])
    assert main(["overlap", str(tmp_path / "t.jsonl"), "--lookup", "foo", "--batch-sizes", "1"]) == 2
    err = capsys.readouterr().err
    assert "--lookup foo: no record holds it (the traces hold eagle3, mtp, ngram)" in err and "nan" not in err
    assert main(["overlap", str(tmp_path / "t.jsonl"), "--lookup", "eagle3", "--batch-sizes", "1"]) == 2
    assert ("overlap: no model proposer to set eagle3 against (--reference names one): dataset 'd': ngram: a lookup; "
            "mtp left aside: the cost model prices no drafting of it") in capsys.readouterr().err
