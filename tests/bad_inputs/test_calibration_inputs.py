"""Bad inputs of `specscope costmodel fit` against a sweep (``--from-sweep``, ``--validate``,
``--engine``) and against step records (``--whole-steps``): a record, a trace or an output the
calibration cannot use is refused in one line naming the file and field, before anything is
written (an earlier model at ``-o`` stays as it was)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from harness import Case, check, run_cli, written_by_specscope

from specscope.backends.openai.sweep_config import key_id
from specscope.written import LEDGER

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # the simulated engine's timelines
from calibration_helpers import simulated_cell  # noqa: E402

CELLS = [simulated_cell(m, k, b) for m, k in (("none", 0), ("ngram", 1), ("ngram", 2)) for b in (1, 2)]


def record(cell, engine: str = "ref") -> dict:
    """A sweep's record of ``cell`` (as `specscope sweep` writes it, the fields the fit reads; its
    id the key's, as the sweep makes it)."""
    key = {"engine": {"name": engine}, "method": cell.method, "k": cell.k, "batch_size": cell.batch_size,
           "workload": "w.jsonl"}
    tokens = sum(r["output_tokens"] for r in cell.timeline)
    span = max(r["sent_ms"] + r["chunk_ms"][-1] for r in cell.timeline) - min(r["sent_ms"] for r in cell.timeline)
    return {"cell_id": key_id(key), "key": key, "status": "ok", "reason": None, "started_at": 0.0,
            "finished_at": 1.0, "result": {"output_tokens": tokens, "duration_s": span / 1000,
                                           "throughput": tokens / (span / 1000), "num_draft_tokens": cell.num_draft_tokens},
            "timeline": json.loads(json.dumps(cell.timeline))}  # a copy: a case changes its own alone


HELD = record(CELLS[4])["cell_id"]  # the record the cases alter: an SD cell at batch 1 (n-gram, k = 2)


def trace(k_max: int = 4, leave_out: str | None = None) -> str:
    """Traces of the simulated requests (dataset ``w``: the workload's stem), n-gram rejecting all."""
    lines = []
    for request in CELLS[0].timeline:
        if request["id"] == leave_out:
            continue
        output = request["output_tokens"]
        lines.append(json.dumps({"schema": "specscope.trace/1", "id": request["id"], "dataset": "w", "k_max": k_max,
                                 "prompt_token_ids": [1] * request["prompt_tokens"], "output_token_ids": [5] * output,
                                 "proposers": {"ngram": {"acc_len": [1] * output}}}) + "\n")
    return "".join(lines)


def sweep(change=None, results: bool = True, extra: dict | None = None) -> dict[str, str]:
    """A sweep folder ``S`` of the six cells (``change(record)`` applied to :data:`HELD`'s), its
    ``results.json`` (unless ``results`` is false), traces ``t.jsonl`` and an earlier model ``m.json``
    (listed as specscope's: a run may replace it, a refused one leaves it as it was)."""
    earlier = '{"earlier": "model"}\n'
    files = {"t.jsonl": trace(), "m.json": earlier, **(extra or {}),
             LEDGER: json.dumps({"m.json": hashlib.sha256(earlier.encode()).hexdigest()})}
    ids = []
    for cell in CELLS:
        data = record(cell)
        if data["cell_id"] == HELD and change is not None:
            change(data)
            if isinstance(data.get("key"), dict):  # a key changed as a sweep would have made it: its id follows
                data["cell_id"] = key_id(data["key"])
        ids.append(data["cell_id"])
        files[f"S/cells/{data['cell_id']}.json"] = json.dumps(data)
    if results:
        files["S/results.json"] = json.dumps([{"cell_id": cell_id} for cell_id in ids])
    return files


def edited(change) -> dict[str, str]:
    """:func:`sweep` with ``change(record)`` applied to :data:`HELD`'s record in place: its id kept,
    as a hand edit would leave it."""
    files = sweep()
    data = json.loads(files[f"S/cells/{HELD}.json"])
    change(data)
    files[f"S/cells/{HELD}.json"] = json.dumps(data)
    return files


def step(index: int, seconds: float = 0.004, **fields) -> str:
    """One step record of a no-SD engine at batch 1 (``seconds`` its verification)."""
    return json.dumps({"step": index, "method": "none", "k": 0, "batch_size": 1, "tokens_verified": 1,
                       "tokens_emitted": [1], "draft_s": 0.0, "verify_s": seconds, "sample_s": 0.0, "overhead_s": 0.0,
                       "kv_tokens": 30 + index, "prefill_tokens": 0, "prefill_s": 0.0, **fields}) + "\n"


FIT = ["costmodel", "fit", "--from-sweep", "S", "-o", "m.json"]
VALIDATE = [*FIT, "--traces", "t.jsonl", "--validate"]
CELL = r"S/cells/[0-9a-f]{16}\.json"  # the altered cell (its key changed: another id)
REQUEST = rf"{CELL}: timeline\[0\] \(request 'r0'\)"

CASES = [
    Case("chunk-time-nan", FIT, rf"{REQUEST}: field 'chunk_ms\[3\]': expected a finite number",
         sweep(lambda d: d["timeline"][0]["chunk_ms"].__setitem__(3, float("nan")))),
    Case("chunk-times-out-of-order", FIT, rf"{REQUEST}: field 'chunk_ms': expected times in the order",
         sweep(lambda d: d["timeline"][0]["chunk_ms"].reverse())),
    Case("chunk-tokens-short", FIT, rf"{REQUEST}: field 'chunk_tokens': expected one count per chunk",
         sweep(lambda d: d["timeline"][0].update(chunk_tokens=[1, 2]))),
    Case("output-tokens-missing", VALIDATE, rf"{REQUEST}: field 'output_tokens': expected an integer",
         sweep(lambda d: d["timeline"][0].update(output_tokens=None))),
    Case("tree-not-paths", FIT, rf"{CELL}: field 'key\.tree': expected a static tree's node paths",
         sweep(lambda d: d["key"].update(tree="2x2"))),
    Case("tree-empty-path", FIT, rf"{CELL}: field 'key\.tree': expected a static tree's node paths",
         sweep(lambda d: d["key"].update(tree=[[]]))),
    Case("tree-without-parents", FIT, rf"{CELL}: field 'key\.tree': expected a static tree's node paths",
         sweep(lambda d: d["key"].update(tree=[[0], [5, 5, 5]]))),
    Case("tree-not-static", FIT, rf"{CELL}: field 'key\.tree': .*the same branching at every node of a depth\), got paths",
         sweep(lambda d: d["key"].update(tree=[[0], [1], [0, 0]]))),
    Case("sent-time-text", FIT, rf"{REQUEST}: field 'sent_ms': expected a number",
         sweep(lambda d: d["timeline"][0].update(sent_ms="abc"))),
    Case("sent-time-minutes-off", FIT, rf"{CELL}: field 'timeline': its requests' times span 100(\.[0-9]+)? s from the "
         r"first send to the last chunk \(summed over its segments\), but its result measured [0-9.]+ s",
         sweep(lambda d: d["timeline"][0].update(sent_ms=d["timeline"][0]["sent_ms"] + 1e5))),
    Case("draft-tokens-negative", FIT, rf"{CELL}: field 'result\.num_draft_tokens': expected an integer >= 0",
         sweep(lambda d: d["result"].update(num_draft_tokens=-500))),
    Case("batch-size-zero", FIT, rf"{CELL}: field 'key\.batch_size': expected an integer >= 1",
         sweep(lambda d: d["key"].update(batch_size=0))),
    Case("method-missing", FIT, rf"{CELL}: field 'key\.method'", sweep(lambda d: d["key"].pop("method"))),
    Case("timeline-empty", FIT, rf"{CELL}: field 'timeline'", sweep(lambda d: d.update(timeline=[]))),
    Case("timeline-cut", FIT, rf"{CELL}: field 'timeline': \d+ requests of \d+ output tokens, but its result "
         r"measured \d+ output tokens: expected the run's whole timeline",  # a review: fitted unsaid
         sweep(lambda d: d.update(timeline=d["timeline"][:-1]))),
    Case("timeline-request-twice", FIT, rf"{CELL}: field 'timeline': request 'r0' twice",
         sweep(lambda d: d.update(timeline=[*d["timeline"], d["timeline"][0]]))),
    Case("result-missing", FIT, rf"{CELL}: field 'result'", sweep(lambda d: d.update(result=None))),
    Case("prompt-tokens-missing", FIT, rf"{REQUEST}: field 'prompt_tokens': expected the prompt's length",
         sweep(lambda d: d["timeline"][0].pop("prompt_tokens"))),
    Case("chunks-none", FIT, rf"{REQUEST}: field 'chunk_ms': expected a list of times, one per streamed chunk",
         sweep(lambda d: d["timeline"][0].update(chunk_ms=[], chunk_tokens=[]))),
    Case("key-edited", FIT, rf"S/cells/{HELD}\.json: field 'key': not the key the cell's id was made of",
         edited(lambda d: d["key"].update(batch_size=64))),
    *(Case(f"throughput-{name}", FIT, rf"S/cells/{HELD}\.json: field 'result': expected an ok cell's measured figures",
           edited(lambda d, v=value: d["result"].update(throughput=v)))
      for name, value in (("negative", -5), ("boolean", True), ("nan", float("nan")), ("beyond-its-duration", 1e308))),
    Case("record-copied", FIT, r"S/cells/0000000000000000\.json: field 'cell_id'",
         sweep(results=False, extra={"S/cells/0000000000000000.json": json.dumps(record(CELLS[2]))})),
    Case("no-gap-read-alone", FIT, rf"cells/{HELD}\.json .*: every chunk arrived with another",
         sweep(lambda d: d.update(timeline=[{**r, "chunk_ms": [1.0] * len(r["chunk_ms"])} for r in d["timeline"]]))),
    Case("engines-mixed", FIT, r"cells of engines other, ref.*--engine NAME",
         sweep(lambda d: d["key"].update(engine={"name": "other"}))),
    Case("engine-unknown", [*FIT, "--engine", "x"], r"no successful cell of engine 'x' \(have: ref\)", sweep()),
    Case("output-is-a-cell", [*FIT[:-1], f"S/cells/{HELD}.json"], r"inside the sweep's cells/ folder",
         written_by_specscope(sweep(), f"S/cells/{HELD}.json")),
    Case("output-new-in-cells", [*FIT[:-1], "S/cells/engine.json"], r"inside the sweep's cells/ folder", sweep()),
    Case("results-json-out-of-step", FIT, rf"S/results\.json: cell {HELD}: status 'failed', throughput None, where its "
         rf"record {HELD}\.json says 'ok', .*: the table is out of step with cells/",  # a review: fitted unsaid
         {**sweep(), "S/results.json": json.dumps([{"cell_id": record(c)["cell_id"], **(
             {"status": "failed", "throughput": None} if record(c)["cell_id"] == HELD else {})} for c in CELLS])}),
    Case("output-is-the-sweeps-results", [*FIT[:-1], "S/results.json"], r"-o S/results\.json: the sweep's own "
         r"results\.json, which the sweep writes and reads", written_by_specscope({**sweep(), "S/results.json": "[]"},
                                                                                "S/results.json")),
    Case("output-is-the-sweeps-absent-config", [*FIT[:-1], "S/config.json"], r"-o S/config\.json: the sweep's own "
         r"config\.json", sweep()),
    Case("output-is-the-table", [*VALIDATE[:-4], "S/calibration.csv", "--traces", "t.jsonl", "--validate"],
         r"S/calibration\.csv: expected a \.json output file", sweep()),
    Case("table-path-is-a-folder", VALIDATE, r"S/calibration\.csv: is a directory",
         sweep(extra={"S/calibration.csv/keep.txt": ""})),
    Case("traces-without-validate", [*FIT, "--traces", "t.jsonl"], r"--traces: only read by --validate", sweep()),
    Case("validate-request-not-traced", VALIDATE, r"--traces: dataset 'w' has no request 'r5'",
         {**sweep(), "t.jsonl": trace(leave_out="r5")}),
    Case("validate-trace-too-shallow", VALIDATE, r"policy 'fixed:2' proposes k = 2, above the trace's k_max = 1",
         {**sweep(), "t.jsonl": trace(k_max=1)}),
    Case("steps-decoded-without-verifying", ["costmodel", "fit", "s.jsonl", "--whole-steps", "-o", "m.json"],
         r"s\.jsonl:30: field 'tokens_verified': expected at least one per request it decoded \(1: batch_size less",
         {"s.jsonl": "".join(step(i) for i in range(1, 30)) + "".join(step(i, 0.0, tokens_verified=0) for i in range(0, 3))}),
    Case("steps-prefill-without-requests", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'prefill_requests': expected requests exactly where prefill_tokens > 0, got 1 with prefill_tokens 0",
         {"s.jsonl": step(1, batch_size=2, tokens_emitted=[1, 1], prefill_requests=1)}),
    Case("steps-verified-in-no-time", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:2: field 'verify_s': expected a time > 0 exactly where tokens_verified > 0, got 0",
         {"s.jsonl": step(1) + step(2, 0.0)}),
    Case("steps-prefill-in-no-time", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'prefill_s': expected a time > 0 exactly where prefill_tokens > 0",
         {"s.jsonl": step(1, batch_size=2, tokens_emitted=[1, 1], prefill_tokens=40, prefill_requests=1)}),
    Case("steps-all-prefilled-yet-verified", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'tokens_verified': expected 0: every running request was prefilled",
         {"s.jsonl": step(1, prefill_tokens=40, prefill_s=0.01)}),
    Case("steps-field-misspelt", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'tokens_propsed': unknown field \(expected one of ",
         {"s.jsonl": step(1, tokens_propsed=0)}),
    Case("steps-emitted-per-request", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'tokens_emitted': expected one count per running request \(batch_size 1\), got 2",
         {"s.jsonl": step(1, tokens_emitted=[1, 1])}),
    Case("steps-emitted-beyond-a-step", ["report", "t.jsonl", "--steps", "s.jsonl", "-o", "r"],  # read as 33× the tokens
         r"s\.jsonl:1: field 'tokens_emitted'.*each request emits 1 … k \+ 1 tokens in a step",
         {"s.jsonl": step(1, method="ngram", k=3, tokens_verified=4, tokens_emitted=[99])}),
    Case("steps-emitted-nothing", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'tokens_emitted'.*each request emits 1 … k \+ 1 tokens in a step",
         {"s.jsonl": step(1, tokens_emitted=[0])}),
    Case("steps-none-that-drafted", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],  # the fit dropped it, the report kept it
         r"s\.jsonl:1: field 'draft_s': expected 0 on a step without SD \(method none\), got 0.5",
         {"s.jsonl": step(1, draft_s=0.5)}),
    Case("steps-none-with-k", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'k': expected 0 on a step without SD \(method none\), got 3", {"s.jsonl": step(1, k=3)}),
    Case("steps-tree-without-sd", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:1: field 'tree': expected none on a step without SD", {"s.jsonl": step(1, tree="2x1")}),
    Case("steps-too-few", ["costmodel", "fit", "s.jsonl", "--whole-steps", "-o", "m.json"],
         r"costmodel fit --whole-steps: 3 observed steps for 10 coefficients .*give more step records", {"s.jsonl": "".join(step(i) for i in range(1, 4))}),
    Case("output-tokens-as-text", FIT, rf"{REQUEST}: field 'output_tokens': expected an integer, got text '44'",
         sweep(lambda d: (d["timeline"][0].update(output_tokens="44"), [r.pop("chunk_tokens", None)
                                                                         for r in d["timeline"]]))),
    Case("chunk-tokens-as-text", FIT, rf"{REQUEST}: field 'chunk_tokens\[0\]': expected an integer, got text '1'",
         sweep(lambda d: d["timeline"][0]["chunk_tokens"].__setitem__(0, "1"))),
    Case("prompt-tokens-as-text", VALIDATE, rf"{REQUEST}: field 'prompt_tokens': expected an integer, got text",
         sweep(lambda d: d["timeline"][0].update(prompt_tokens=str(d["timeline"][0]["prompt_tokens"])))),
    Case("segment-as-text", VALIDATE, rf"{REQUEST}: field 'segment': expected an integer, got text '0'",
         sweep(lambda d: d["timeline"][0].update(segment="0"))),
    Case("prompt-tokens-beyond-any-context", FIT, rf"{REQUEST}: field 'prompt_tokens': expected an integer <= 10000000",
         sweep(lambda d: d["timeline"][0].update(prompt_tokens=10**400))),
    Case("table-is-a-link-to-a-users-file", VALIDATE, r"S/calibration\.csv: exists, and specscope did not write it",
         sweep(extra={"mine.csv": "a,b\n1,2\n"}), setup=lambda folder: (folder / "S" / "calibration.csv").symlink_to(
             folder / "mine.csv")),
    Case("steps-kv-beyond-a-float", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:2: field 'kv_tokens': expected an integer <= 655360000000, got 1000000000000000000+…",
         {"s.jsonl": step(1) + step(2, kv_tokens=10**400) + step(3)}),
    Case("steps-prefill-beyond-batch", ["costmodel", "fit", "s.jsonl", "-o", "m.json"],
         r"s\.jsonl:2: field 'prefill_requests'",
         {"s.jsonl": step(1) + step(2, prefill_requests=50) + step(3)}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


def test_the_unaltered_sweep_fits_and_validates(tmp_path, monkeypatch):
    """The cases' folder itself is sound: each case fails on its one change alone."""
    for name, text in sweep().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(VALIDATE)
    assert outcome.status == 0, outcome.stderr
    assert json.loads((tmp_path / "m.json").read_text())["kind"] == "linear"
    assert len((tmp_path / "S" / "calibration.csv").read_text().splitlines()) == 1 + 4  # a row per SD cell


def test_cells_a_results_file_does_not_list_are_said_to_be_left_out(tmp_path, monkeypatch, caplog):
    """A sweep stopped before it listed every cell it measured: the fit says which cells it left
    out (they are in cells/, not in results.json), never silently."""
    files = sweep()
    files["S/results.json"] = json.dumps([{"cell_id": record(c)["cell_id"]} for c in CELLS if record(c)["cell_id"] != HELD])
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(FIT)
    assert outcome.status == 0, outcome.stderr
    assert "1 cells in cells/ but not listed in results.json (not fitted" in caplog.text
    assert HELD in caplog.text


def test_a_sweep_without_results_fits_every_record_and_says_so(tmp_path, monkeypatch, caplog):
    """No results.json (a sweep stopped before it listed its cells): every record in cells/ is
    fitted, and the fit says so rather than fitting them silently."""
    for name, text in sweep(results=False).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(FIT)
    assert outcome.status == 0, outcome.stderr
    assert f"no results.json (a sweep stopped before it listed its cells): fitting every record in cells/ ({len(CELLS)})" \
        in caplog.text


def test_a_model_written_to_a_device_is_named_fitted(tmp_path, monkeypatch):
    """``-o /dev/null`` names no model: its notes call it 'fitted', as on standard output, not 'null'."""
    for name, text in sweep().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    outcome = run_cli([*FIT[:-1], "/dev/null"])
    assert outcome.status == 0, outcome.stderr
    assert "note: fitted: the data cannot tell" in outcome.stderr and "null:" not in outcome.stderr


def test_failed_cells_of_another_engine_are_not_said_to_be_this_ones(tmp_path, monkeypatch, caplog):
    """``--engine ref`` on a sweep where only engine 'other' failed a cell: no warning of failed
    cells (it counted every engine's), while the fit without --engine says so."""
    files = sweep()
    failed = {**record(CELLS[0], engine="other"), "status": "failed", "reason": "no server"}
    files[f"S/cells/{failed['cell_id']}.json"] = json.dumps(failed)
    files["S/results.json"] = json.dumps([{"cell_id": record(c)["cell_id"]} for c in CELLS] + [{"cell_id": failed["cell_id"]}])
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    outcome = run_cli([*FIT, "--engine", "ref"])
    assert outcome.status == 0, outcome.stderr
    assert "failed (not fitted" not in caplog.text
    run_cli(FIT)  # every engine: the failed cell is named
    assert f"1 cells failed (not fitted; `sweep --retry-failed` reruns them): {failed['cell_id']}" in caplog.text
