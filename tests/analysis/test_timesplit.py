"""Time split: the measured step-record reader and both splits."""

from __future__ import annotations

import json

import pytest

from specscope.analysis.timesplit import (
    PHASES,
    measured_split,
    predicted_split,
    read_steps,
)
from specscope.costmodel.linear import H100_LLAMA31_8B
from specscope.errors import SpecscopeError
from specscope.sim.grid import SimConfig, simulate


def step(**overrides) -> dict:
    base = {"step": 0, "method": "eagle", "k": 3, "batch_size": 2, "tokens_verified": 8,
            "tokens_emitted": [2, 4], "draft_s": 0.002, "verify_s": 0.010, "sample_s": 0.001,
            "overhead_s": 0.002, "kv_tokens": 100, "prefill_tokens": 0, "prefill_s": 0.0}
    if "batch_size" in overrides and isinstance(overrides["batch_size"], int):  # its rows' counts to match
        base["tokens_emitted"] = [1] * overrides["batch_size"]
        base["tokens_verified"] = 4 * overrides["batch_size"]  # k = 3: four tokens a row
    if overrides.get("method") == "none":  # no SD: k 0, one token a row verified, nothing drafted
        base.update(k=0, draft_s=0.0, tokens_verified=len(base["tokens_emitted"]),
                    tokens_emitted=[1] * len(base["tokens_emitted"]))
    base.update(overrides)
    return base


def write(path, steps: list[dict | str]) -> str:
    path.write_text("\n".join(s if isinstance(s, str) else json.dumps(s) for s in steps) + "\n")
    return str(path)


def test_measured_split_sums_per_method_k_and_batch(tmp_path):
    path = write(tmp_path / "steps.jsonl", [
        step(step=0, prefill_tokens=40, prefill_s=0.02, tokens_emitted=[1, 1], tokens_verified=4),  # one row prefilled
        step(step=1),
        "",
        step(step=0, method="ngram", k=5, draft_s=0.0001),
        step(step=0, method="learned", draft_s=0.003, policy_s=0.0005),
        step(step=1, method="learned", draft_s=0.003, policy_s=0.0007),
    ])
    steps = read_steps([path])
    assert len(steps) == 5
    eagle, ngram, learned = measured_split(steps)
    assert (eagle["policy_s"], learned["policy_s"]) == (0.0, pytest.approx(0.0012))  # a part of drafting
    assert learned["drafting_s"] == pytest.approx(0.006)
    assert (eagle["method"], eagle["k"], eagle["batch_size"], eagle["runs"], eagle["steps"]) == ("eagle", 3, 2, 1, 2)
    assert eagle["tokens_emitted"] == 8
    assert eagle["prefill_s"] == pytest.approx(0.02)
    assert eagle["drafting_s"] == pytest.approx(0.004)
    assert eagle["verification_s"] == pytest.approx(0.020)
    assert eagle["overhead_s"] == pytest.approx(0.006)  # sampling + overhead
    assert eagle["sampling_s"] == pytest.approx(0.002)
    total = 0.02 + 0.004 + 0.020 + 0.006
    assert eagle["verification_share"] == pytest.approx(0.020 / total)
    assert eagle["tokens_per_s"] == pytest.approx(8 / total)
    assert sum(eagle[f"{p}_share"] for p in PHASES) == pytest.approx(1.0)
    assert ngram["drafting_s"] == pytest.approx(0.0001)


def test_runs_are_labelled_by_their_peak_batch(tmp_path):
    """batch_size counts the running requests of a step; runs restart their step numbers; the runs
    of two files (two engines, two machines) are rows of their own, each naming its file."""
    first = write(tmp_path / "a.steps.jsonl", [
        step(step=0, method="none", batch_size=8), step(step=1, method="none", batch_size=8),
        step(step=2, method="none", batch_size=3),
        step(step=0, batch_size=8), step(step=1, batch_size=7), step(step=2, batch_size=2),
        step(step=0, batch_size=16), step(step=1, batch_size=16),
    ])
    second = write(tmp_path / "b.steps.jsonl", [step(step=5, batch_size=6), step(step=6, batch_size=8)])
    rows = measured_split(read_steps([first, second]))
    assert [(r["steps_file"], r["method"], r["k"], r["batch_size"], r["runs"], r["steps"]) for r in rows] == [
        (first, "none", 0, 8, 1, 3), (first, "eagle", 3, 8, 1, 3), (first, "eagle", 3, 16, 1, 2),
        (second, "eagle", 3, 8, 1, 2)]


@pytest.mark.parametrize("line, message", [
    ("{not json", r"steps.jsonl:2: invalid JSON"),
    (json.dumps(step(verify_s=-1.0)), r"steps.jsonl:2: field 'verify_s': expected a number >= 0\.0, got -1\.0"),
    (json.dumps({k: v for k, v in step().items() if k != "k"}), r"steps.jsonl:2: field 'k': missing"),
    (json.dumps(step(tokens_emitted=[1, "2"])), r"steps.jsonl:2: field 'tokens_emitted'"),
    (json.dumps(step(tokens_emitted=[1, 9])), r"field 'tokens_emitted': expected integers in \[1, 4\], got 9 at "
                                              r"position 1 \(each request emits 1 … k \+ 1 tokens in a step\)$"),
    (json.dumps(step(batch_size=True)), r"steps.jsonl:2: field 'batch_size': expected an integer"),
    (json.dumps(step(method="")), r"steps.jsonl:2: field 'method': expected non-empty text"),
    (json.dumps(step(prefill_requests=-1)), r"steps.jsonl:2: field 'prefill_requests': expected an integer >= 0"),
    (json.dumps(step(prefill_tokens=40, prefill_requests=2, prefill_width=10)),
     r"steps.jsonl:2: field 'prefill_width': expected the longest of the prompts of prefill_tokens \(40\), got 10"),
    ("[1, 2]", r"steps.jsonl:2: expected a JSON object"),
    (json.dumps(step(choices=[["eagle", 3], ["ngram", 1]])), r"steps.jsonl:2: field 'choices': expected none on a "
                                                             r"step of method 'eagle'"),
    (json.dumps(step(method="learned", choices=[["eagle", 3]])), r"field 'choices': expected one per running request"),
    (json.dumps(step(method="learned", choices=[["eagle", 0], None])), r"field 'choices': expected per request null "
                                                                       r"or \[method, k\]"),
    (json.dumps(step(method="learned", choices=[["bogus", 2], None])), r"field 'choices': expected per request null"),
    (json.dumps(step(kv_longest=40)), r"steps.jsonl:2: field 'kv_longest': expected the longest cache of the 2 "
                                      r"requests it decoded, whose caches hold kv_tokens \(100\): 50 … 100, got 40"),
    (json.dumps(step(kv_longest=101)), r"field 'kv_longest': .* 50 … 100, got 101"),
])
def test_bad_step_lines_name_file_line_and_field(tmp_path, line, message):
    path = write(tmp_path / "steps.jsonl", [step(), line])
    with pytest.raises(SpecscopeError, match=message):
        read_steps([path])


def test_a_padded_read_of_the_cache_where_the_longest_is_recorded(tmp_path):
    """Two rows holding 100 cached tokens, the longer 70: an attention over a rectangle reads
    2 × 70 = 140; a record without the longest is read as its 100 cached tokens."""
    recorded, old = read_steps([write(tmp_path / "steps.jsonl", [step(kv_longest=70), step(step=1)])])
    assert (recorded.kv_read, old.kv_read) == (140, 100)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(SpecscopeError, match="no step records"):
        read_steps([empty])
    with pytest.raises(SpecscopeError, match="cannot read"):
        read_steps([tmp_path / "absent.jsonl"])
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecscopeError, match="not UTF-8"):
        read_steps([binary])


def test_a_step_file_given_twice_is_refused(tmp_path, monkeypatch):
    """`costmodel fit steps.jsonl ./steps.jsonl` fitted every step twice."""
    path = write(tmp_path / "steps.jsonl", [step()])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecscopeError, match=r"^steps\.jsonl: given twice \(as .*steps\.jsonl\)"):
        read_steps([path, "steps.jsonl"])


def test_a_step_record_repeated_on_the_next_line_is_refused(tmp_path):
    """A copied line started a run of its own: the fits' per-run drift and stall checks then saw
    runs of one or two steps, and the fitted coefficients moved (c_prompt 0.033 → 0.011 ms with 5 %
    of a server's lines doubled) without a word. The same step elsewhere (a new run) is read."""
    path = write(tmp_path / "steps.jsonl", [step(step=0), step(step=1), "", step(step=1), step(step=2)])
    with pytest.raises(SpecscopeError, match=r"steps\.jsonl:4: the same step record as the line before it \(step 1\)"):
        read_steps([path])
    again = write(tmp_path / "runs.jsonl", [step(step=0), step(step=1), step(step=0), step(step=1)])
    assert [s.run for s in read_steps([again])] == [0, 0, 1, 1]


def test_predicted_split_from_simulator_rows(record):
    records = [record(f"r{i}", "d", list(range(50)), k_max=10, eagle=[3] * 80, ngram=[1] * 80) for i in range(3)]
    rows = simulate(records, ["ngram", "eagle"], ["fixed:3"], H100_LLAMA31_8B, SimConfig(batch_sizes=(1, 3)))
    split = predicted_split(rows)
    assert len(split) == 4
    for row, cell in zip(rows, split):
        assert sum(cell[f"{p}_share"] for p in PHASES) == pytest.approx(1.0)
        assert cell["verification_s"] == pytest.approx(row.time_split["verification"])
    eagle = [c for c in split if c["method"] == "eagle"]
    ngram = [c for c in split if c["method"] == "ngram"]
    # EAGLE drafts with a model on every step; n-gram's lookup costs a small fraction.
    assert all(e["drafting_share"] > 5 * n["drafting_share"] for e, n in zip(eagle, ngram))
