"""Cost-model calibration from sweep timelines: the derivation on a simulated engine, refusals,
and the whole loop (sweep -> trace -> fit --from-sweep --validate) against `specscope serve`."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest
from calibration_helpers import ADMIT, DRAFT, FORWARD, simulated_cell
from serving_helpers import write_workload

from specscope.costmodel.calibrate import CellRun, cell_gaps, fit_cells
from specscope.errors import SpecscopeError

def assert_recovered(model) -> None:
    assert model.admit_s == pytest.approx(ADMIT, rel=0.05)  # from the first chunks at batch 1
    for name, value in FORWARD.items():
        assert getattr(model, name) == pytest.approx(value, rel=0.05), name
    drafting = model.drafting_for("draft")
    for name, value in DRAFT.items():
        assert getattr(drafting, name) == pytest.approx(value, rel=0.05), name


def test_a_repeat_maps_to_its_prompt_and_a_workload_id_that_looks_like_one_to_itself(tmp_path):
    """A workload whose ids hold '#': ``x#1`` is its own prompt, not a repeat of ``x`` (the fit
    read ``x``'s trace for it, predicting 1.51× where the same sweep relabelled gave 1.39×); a
    cycle that would name a repeat like an existing id is refused, naming the file and line."""
    from specscope.backends.openai.prompts import read_prompts, select_prompts, workload_id

    path = tmp_path / "w.jsonl"
    path.write_text('{"id": "x", "prompt": "a"}\n{"id": "x#1", "prompt": "b"}\n{"id": "z", "prompt": "c"}\n')
    held = {"x", "x#1", "z"}
    assert [workload_id(i, held) for i in ("x#1", "z#1", "x#1#2", "z#b")] == ["x#1", "z", "x#1", "z#b"]
    prompts = read_prompts(path)
    assert [p.id for p in select_prompts(prompts, 3, path)] == ["x", "x#1", "z"]
    with pytest.raises(SpecscopeError, match=r"w\.jsonl:2: field 'id': 'x#1' is the name a sweep gives repeat 1 "
                                             r"of 'x' \(line 1\)"):
        select_prompts(prompts, 4, path)


def test_fit_recovers_the_engine_that_made_the_timelines():
    cells = [simulated_cell("none", 0, b) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b) for k in (2, 4) for b in (1, 2, 4)]
    assert_recovered(fit_cells(cells))


def test_a_sweep_at_one_batch_size_names_the_terms_it_cannot_separate():
    """Every cell at batch size 1: a cost per running sequence never varies apart from the fixed
    one, nor the drafter's per-row terms from its fixed and per-token ones. The fit is as exact
    as before; the model and coefficients.csv name the terms whose split is arbitrary (every
    held-out fit made the same arbitrary choice: a jackknife error of 0 for terms it could not
    measure, which read as pinned down)."""
    from specscope.backends.openai.calibration import coefficient_spread

    cells = [simulated_cell("none", 0, 1)] + [simulated_cell("draft", k, 1) for k in (1, 2, 4)]
    model = fit_cells(cells)
    assert {"c_fixed", "c_req", "draft.c_req", "draft.c_batched"} <= set(model.not_separated)
    assert "c_kv" not in model.not_separated  # the cache grows apart from everything else
    rows = {row["term"]: row for row in coefficient_spread(model, [model, model])}
    assert rows["c_req"]["separated"] is False and rows["c_kv"]["separated"] is True
    assert rows["c_req"]["jackknife_se"] is None and rows["c_req"]["relative_se_pct"] is None  # no spread to read
    assert rows["c_kv"]["jackknife_se"] == 0.0  # the same fit twice: a spread of 0, measured
    both = fit_cells(cells + [simulated_cell("none", 0, 4), simulated_cell("draft", 2, 4)])
    assert "c_req" not in both.not_separated  # a second batch size separates it


def test_a_forward_put_wholly_on_the_cache_is_refit_with_a_fixed_cost():
    """Steps at batch 1 over caches of 55-64 tokens that cost 0.05 ms a cached token, nothing else:
    the fit put the whole forward on c_kv, a model over an empty cache free, which the reader
    refuses (a sweep at batch size 1 could not be fitted at all). Over caches of about one length
    the two trade; the fixed cost carries it, and the cache term is named as not told apart."""
    from specscope.costmodel.calibrate import fit_steps
    from specscope.costmodel.steps import MeasuredStep

    steps = [MeasuredStep(i, "none", 1, 1, 1, [1], draft_s=0.0, verify_s=5e-5 * (55 + i % 10), sample_s=0.0,
                          overhead_s=0.0, kv_tokens=55 + i % 10, prefill_tokens=0, prefill_s=0.0, run=0) for i in range(40)]
    model, _ = fit_steps(steps)
    assert model.c_kv == 0.0 and "c_kv" in model.not_separated
    assert model.c_fixed + model.c_tok + model.c_req == pytest.approx(5e-5 * 59.5, rel=0.02)  # the mean step


def simulated_steps(method: str, k: int, batch: int, run: int, draft: dict[str, float] = DRAFT) -> list:
    """Step records of an engine whose steps cost exactly FORWARD (+ DRAFT), the time spread over
    the phases in any way (a whole-step fit reads their sum); every tenth step also prefills one or two
    prompts (in turn) of 30 + 7·(i mod 3) tokens each in a second forward (c_prompt_fixed +
    c_prompt a position + c_req a prompt: prompts of one count could not tell c_req from c_prompt_fixed)."""
    from specscope.costmodel.steps import MeasuredStep

    w = 1 if method == "none" else k + 1
    steps = []
    for i in range(40):
        kv = batch * (30 + i)
        seconds = (FORWARD["c_fixed"] + FORWARD["c_tok"] * batch * w + FORWARD["c_kv"] * kv + FORWARD["c_req"] * batch
                   + FORWARD["c_batch"] * (batch > 1))
        if method != "none":
            seconds += draft["c_fixed"] + draft["c_tok"] * w + draft["c_batched"] * batch * w
        prompts = 1 + (i // 10) % 2 if i % 10 == 9 else 0
        prefill = prompts * (30 + 7 * (i % 3))
        if prefill:
            seconds += (FORWARD["c_prompt_fixed"] + FORWARD["c_prompt"] * prefill + FORWARD["c_req"] * prompts
                        + FORWARD["c_batch"] * (prompts > 1))
        steps.append(MeasuredStep(i, method, k, batch + prompts, batch * w, [w] * batch, draft_s=0.25 * seconds,
                                  verify_s=0.7 * seconds, sample_s=0.0, overhead_s=0.05 * seconds, kv_tokens=kv,
                                  prefill_tokens=prefill, prefill_s=0.0, prefill_requests=prompts, run=run))
    return steps


def test_whole_step_fit_of_records_recovers_the_same_engine():
    """``costmodel fit RECORDS --whole-steps``: the sweep's model fitted to step records' whole
    steps recovers the engine that wrote them, however a step's time was split into phases."""
    from specscope.costmodel.calibrate import fit_steps

    steps = [s for run, (m, k, b) in enumerate([("none", 0, b) for b in (1, 2, 4)] +
                                               [("draft", k, b) for k in (2, 4) for b in (1, 2, 4)])
             for s in simulated_steps(m, k, b, run)]
    model, summary = fit_steps(steps)
    assert summary.startswith(f"whole-step fit over {len(steps)} steps (0 stalls")
    assert model.admit_s == 0.0
    for name, value in FORWARD.items():
        assert getattr(model, name) == pytest.approx(value, rel=0.05), name
    for name, value in DRAFT.items():
        assert getattr(model.drafting_for("draft"), name) == pytest.approx(value, rel=0.05), name


def slowed(cell: CellRun, factor: float, pair: str | None) -> CellRun:
    """``cell`` as measured on a machine ``factor`` times slower, in ``pair``."""
    timeline = [{**r, "sent_ms": r["sent_ms"] * factor, "chunk_ms": [t * factor for t in r["chunk_ms"]]}
                for r in cell.timeline]
    return replace(cell, cell_id=f"{cell.cell_id}-{pair}", timeline=timeline, pair=pair)


def test_each_pair_is_fitted_at_the_speed_its_none_cell_shows():
    """Pairs (a none cell and the SD cell measured beside it) on a machine whose speed differs
    from pair to pair: the none cell tells each pair's speed, and the fit recovers the engine (at
    the median speed of each batch size's pairs); without the pairs it cannot."""
    cells = []
    for i, (k, b) in enumerate((k, b) for k in (2, 4) for b in (1, 2, 4)):
        factor = (0.85, 1.3, 0.9, 1.15, 0.7, 1.1)[i]  # 1 at the median of each batch size's pairs
        cells += [slowed(simulated_cell("none", 0, b), factor, f"p{i}"), slowed(simulated_cell("draft", k, b), factor, f"p{i}")]
    assert_recovered(fit_cells(cells))
    with pytest.raises(AssertionError):
        assert_recovered(fit_cells([replace(c, pair=None) for c in cells]))


def test_servers_that_batch_steps_per_chunk_are_refused():
    cell = simulated_cell("none", 0, 2)
    for request in cell.timeline:  # two steps per chunk
        request["chunk_ms"], request["chunk_tokens"] = request["chunk_ms"][::2], [2] * len(request["chunk_ms"][::2])
    with pytest.raises(SpecscopeError, match="several steps per chunk"):
        cell_gaps(cell)
    for request in cell.timeline:  # the same without token ids: the mean per chunk tells
        request["chunk_tokens"] = None
    with pytest.raises(SpecscopeError, match="several steps per chunk"):
        cell_gaps(cell)


def test_a_server_whose_batch_limit_is_below_the_sweeps_concurrency_is_refused():
    """Four requests in flight on an engine that runs two: the others wait for a slot through the
    whole of a request's steps; the cell is refused, naming the limit seen and the concurrency.
    The engine that runs all four is fitted (its requests wait through one step at most)."""
    cell = simulated_cell("ngram", 2, 4, limit=2)
    with pytest.raises(SpecscopeError, match=r"ran at most 2 of the 4 requests the sweep kept in flight at once.*"
                                             r"waited through \d+ steps.*at least 4"):
        cell_gaps(cell)
    assert len(cell_gaps(simulated_cell("ngram", 2, 4)).seconds)
    assert len(cell_gaps(simulated_cell("ngram", 2, 4, requests=3)).seconds)  # three in flight: all run at once


def segmented(method: str, segments: list[tuple[float, int]]) -> CellRun:
    """A cell measured in segments: each (seconds, tokens) one request sent at the segment's start."""
    timeline, start = [], 0.0
    for index, (seconds, tokens) in enumerate(segments):
        timeline.append({"id": f"r{index}", "sent_ms": start, "prompt_tokens": 10, "output_tokens": tokens,
                         "chunk_ms": [1e3 * seconds / 2, 1e3 * seconds], "chunk_tokens": [1, tokens - 1],
                         "segment": index})
        start += 1e3 * seconds + 500.0  # the other server's segment in between
    return CellRun(method, method, 2 if method != "none" else 0, None, 1, "w.jsonl", 1.0, None, timeline, {})


def test_a_measured_speedup_carries_the_spread_of_its_segments():
    """Segment speedups 1.2, 1.5, 1.8 (SD 60, 75, 90 tokens/s against 50 each): mean 1.5,
    standard deviation 0.3, standard error 0.3 / √3 = 0.1732, relative 11.55 %."""
    from specscope.backends.openai.calibration import measured_se_pct, segment_speedups

    sd = segmented("ngram", [(1.0, 60), (2.0, 150), (1.0, 90)])
    base = segmented("none", [(2.0, 100), (1.0, 50), (3.0, 150)])
    assert segment_speedups(sd, base) == pytest.approx([1.2, 1.5, 1.8])
    assert measured_se_pct(sd, base) == pytest.approx(100 * 0.3 / 3 ** 0.5 / 1.5)
    plain = replace(sd, timeline=[{**r, "segment": None} for r in sd.timeline])  # measured in one run
    assert segment_speedups(plain, base) == [] and measured_se_pct(plain, base) is None


def test_old_sweep_without_timelines_is_refused(tmp_path, capsys):
    from specscope.cli import main

    from specscope.backends.openai.sweep_config import key_id

    key = {"method": "none", "k": 0, "batch_size": 1, "workload": "a.jsonl"}
    record = {"cell_id": key_id(key), "key": key, "status": "ok", "reason": None, "started_at": 0, "finished_at": 1,
              "result": {"output_tokens": 1, "duration_s": 1.0, "throughput": 1.0}}
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / f"{key_id(key)}.json").write_text(json.dumps(record))
    assert main(["costmodel", "fit", "--from-sweep", str(tmp_path), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no per-request chunk timeline" in err[0]
    assert not (tmp_path / "m.json").exists()


@pytest.mark.slow
def test_calibrate_against_a_real_server(tmp_path, tiny_model, capsys):
    from specscope.backends.openai.sweep import read_cells, run_sweep
    from specscope.backends.openai.sweep_config import load_sweep_config
    from specscope.cli import main
    from specscope.costmodel.linear import linear_from_json

    write_workload(tmp_path / "a.jsonl", 6, seed=3)
    (tmp_path / "sweep.toml").write_text(
        'output = "out"\nworkloads = ["a.jsonl"]\nmethods = ["none", "ngram"]\nk = [1, 2]\nbatch_sizes = [1, 2]\n'
        'max_tokens = 12\nignore_eos = true\nlaunch_timeout_s = 120\nbaselines = "paired"\n'
        f'\n[[engines]]\nname = "ref"\nlaunch = "specscope"\nmodel = "{tiny_model}"\n'
        f'args = ["--threads", "1", "--step-records", "{tmp_path / "steps.jsonl"}"]\n')
    config = load_sweep_config(tmp_path / "sweep.toml")
    assert run_sweep(config).failed == 0
    records = read_cells(config.output)
    assert len(records) == 8  # 4 ngram cells, each with its own none cell run right before it
    rows = json.loads((config.output / "results.json").read_text())
    for row in (r for r in rows if r["method"] == "ngram"):
        [base] = [b for b in rows if b["baseline_for"] == f"ngram k={row['k']}" and b["batch_size"] == row["batch_size"]]
        assert row["baseline_throughput"] == pytest.approx(base["throughput"])
    for record in records.values():
        timeline = record["timeline"]
        assert len(timeline) == 6
        assert all(sum(r["chunk_tokens"]) == r["output_tokens"] == 12 for r in timeline)
        assert all(r["prompt_tokens"] > 0 and r["chunk_ms"] == sorted(r["chunk_ms"]) for r in timeline)
    trace = tmp_path / "a.trace.jsonl"
    assert main(["trace", "--model", str(tiny_model), "--proposers", "ngram", "--workload", str(tmp_path / "a.jsonl"),
                 "--max-tokens", "12", "--k-max", "4", "-o", str(trace)]) == 0
    model_path = tmp_path / "engine.json"
    capsys.readouterr()
    assert main(["costmodel", "fit", "--from-sweep", str(config.output), "--traces", str(trace), "--validate",
                 "-o", str(model_path)]) == 0
    out = capsys.readouterr().out
    model = linear_from_json(json.loads(model_path.read_text()), "engine.json")
    assert model.forward_time(np.array([1]), np.array([20]), np.array([1]))[0] > 0
    assert "ngram" in model.drafting
    with open(config.output / "calibration.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted((r["method"], r["k"], r["batch_size"]) for r in rows) == [
        ("ngram", k, b) for k in ("1", "2") for b in ("1", "2")]
    for row in rows:
        measured, predicted = float(row["measured_speedup"]), float(row["predicted_speedup"])
        assert predicted > 0 and float(row["error_pct"]) == pytest.approx(100 * (predicted - measured) / measured,
                                                                            abs=0.05)
        # the speedup's error is that of the SD cell's throughput over its none cell's, both from the same fit
        sd, base = (1 + float(row[c]) / 100 for c in ("throughput_error_pct", "baseline_error_pct"))
        assert 100 * (sd / base - 1) == pytest.approx(float(row["error_pct"]), abs=0.05)
    assert "median |error|" in out and "cross-check" in out
    assert "their throughput, predicted against measured: median" in out and "their none cells'" in out
    assert "┃ workload ┃" in out  # each cell's row names its workload (a sweep of two had twin rows)
    other = tmp_path / "other"  # the same trace, its settings naming another target: another model's acceptance
    other.mkdir()
    settings = json.loads(trace.with_name(trace.name + ".settings.json").read_text())
    (other / trace.name).write_bytes(trace.read_bytes())
    (other / (trace.name + ".settings.json")).write_text(json.dumps({**settings, "model_files": "f" * 64}))
    assert main(["costmodel", "fit", "--from-sweep", str(config.output), "--traces", str(other / trace.name),
                 "--validate", "-o", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--traces {other / trace.name}: traced with another target (fingerprint ffffffffffff)" \
        in err[0] and f"ran ({settings['model_files'][:12]})" in err[0]
    assert not (tmp_path / "other.json").exists()
    assert model.fitted_cells and {c.method for c in model.fitted_cells} == {"none", "ngram"}
    steps = tmp_path / "steps.jsonl"  # every server of the sweep appended its engine's steps
    assert main(["costmodel", "fit", str(steps), "-o", str(tmp_path / "inside.json")]) == 0
    assert {json.loads(line)["method"] for line in steps.read_text().splitlines()} == {"none", "ngram"}
    assert main(["costmodel", "fit", str(steps), "--whole-steps", "-o", str(tmp_path / "whole.json")]) == 0
    whole = linear_from_json(json.loads((tmp_path / "whole.json").read_text()), "whole.json")
    assert whole.c_fixed + whole.c_tok > 0 and set(whole.drafting) == {"ngram"} and whole.admit_s == 0
    with open(config.output / "coefficients.csv") as handle:  # each term's spread over the held-out fits
        spread = {row["term"]: row for row in csv.DictReader(handle)}
    assert float(spread["c_fixed"]["fitted"]) == pytest.approx(model.c_fixed)
    from specscope.fingerprint import file_sha256
    from specscope.version import code_version
    stamp = {"made_by": code_version(), "traces": f"{trace.name}@{file_sha256(trace)[:12]}"}  # what produced them
    assert all({k: r[k] for k in stamp} == stamp for r in [*rows, *spread.values()])
    assert all(float(row["jackknife_se"]) >= 0 if row["separated"] == "True" else row["jackknife_se"] == ""
               for row in spread.values()) and "ngram.c_batched" in spread
    capsys.readouterr()
    assert main(["costmodel", "fit", "--from-sweep", str(config.output), "--whole-steps", "-o",
                 str(tmp_path / "x.json")]) != 0
    assert "--whole-steps goes with step RECORDS" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_a_real_server_running_fewer_requests_than_the_sweep_keeps_in_flight_is_refused(tmp_path, tiny_model, capsys):
    """Two servers already running (a url engine) that decode one request at a time, swept at
    concurrency 2: the fit refuses the sweep in one line naming the cell, the limit it saw and the
    concurrency, and writes nothing."""
    from serving_helpers import start_server

    from specscope.backends.openai.sweep import run_sweep
    from specscope.backends.openai.sweep_config import load_sweep_config
    from specscope.cli import main

    write_workload(tmp_path / "a.jsonl", 4, seed=3)
    baseline = start_server(tiny_model, method="none", max_batch_size=1)
    sd = start_server(tiny_model, method="ngram", k=2, max_batch_size=1)
    try:
        (tmp_path / "sweep.toml").write_text(
            'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [2]\nmax_tokens = 12\nignore_eos = true\n'
            f'\n[[engines]]\nname = "ext"\nurl = "{baseline.url}"\nmethod = "none"\n'
            f'\n[[engines]]\nname = "ext"\nurl = "{sd.url}"\nmethod = "ngram"\nk = 2\n')
        config = load_sweep_config(tmp_path / "sweep.toml")
        assert run_sweep(config).failed == 0
    finally:
        sd.close()
        baseline.close()
    capsys.readouterr()
    assert main(["costmodel", "fit", "--from-sweep", str(config.output), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ran at most 1 of the 2 requests the sweep kept in flight at once" in err[0], err
    assert "cells/" in err[0] and "at least 2" in err[0] and not (tmp_path / "m.json").exists()


def test_coefficient_spread_is_the_jackknife_over_the_held_out_fits():
    """Three held-out fits with c_fixed 1, 2, 3: mean 2, Σ (θ − θ̄)² = 2, √(2/3 · 2) = 1.1547; a
    term every fit has at 0 has no spread and no relative one."""
    from specscope.backends.openai.calibration import coefficient_spread
    from specscope.costmodel.linear import LinearCostModel

    fits = [LinearCostModel("f", value, 1e-5, 0.0, 0.0) for value in (1.0, 2.0, 3.0)]
    rows = {row["term"]: row for row in coefficient_spread(LinearCostModel("m", 2.0, 1e-5, 0.0, 0.0), fits)}
    assert rows["c_fixed"]["jackknife_se"] == pytest.approx(np.sqrt(4 / 3))
    assert rows["c_fixed"]["relative_se_pct"] == pytest.approx(57.7)
    assert rows["c_tok"]["jackknife_se"] == 0.0 and rows["c_kv"]["relative_se_pct"] is None


def test_design_notes_advise_a_tree_and_prompts_alike_where_those_terms_are_weakly_pinned():
    """c_tok at ±30 % of its value (above 25 %) in a sweep of a model drafter's chains alone: the
    tree note; with a tree cell of that drafter, or n-gram's chains alone (no tree to sweep), none.
    c_kv at ±40 % (or any spread around 0): the note on prompt lengths; at ±20 %, none."""
    from specscope.backends.openai.calibration import design_notes

    def row(term, fitted, se):
        return {"term": term, "fitted": fitted, "jackknife_se": se, "separated": True}

    chains = [simulated_cell("none", 0, 1), simulated_cell("draft", 2, 1)]
    tree = simulated_cell("draft", 8, 1, tree="8")
    weak = [row("c_tok", 1e-4, 3e-5), row("c_kv", 1e-6, 4e-7)]
    notes = design_notes(weak, chains)
    assert len(notes) == 2 and "c_tok (a verified token) is pinned to ±30 %" in notes[0]
    assert 'trees = ["8"]' in notes[0] and "c_kv (a cached token) is pinned to ±40 %" in notes[1]
    assert design_notes(weak, chains + [tree]) == notes[1:]
    assert design_notes(weak, [simulated_cell("none", 0, 1), simulated_cell("ngram", 2, 1)]) == notes[1:]
    assert design_notes([row("c_tok", 1e-4, 2e-5), row("c_kv", 1e-6, 2e-7)], chains) == []
    assert "its whole value (fitted 0)" in design_notes([row("c_kv", 0.0, 1e-7)], chains)[0]
    assert design_notes([{**row("c_kv", 0.0, None), "separated": False}], chains) == []  # unseparated: noted apart


@pytest.mark.slow
def test_replicas_against_a_real_server(tmp_path, tiny_model):
    """``replicas = 2``: each server of an ``interleaved-all`` workload runs as two processes (a
    log each), every cell is measured whole over its segments, with new ids, and calibrates."""
    from specscope.backends.openai.sweep import read_cells, run_sweep
    from specscope.backends.openai.sweep_config import load_sweep_config, plan_cells

    config = interleaved_sweep(tmp_path, tiny_model, "interleaved-all", "[1]", "[1, 2]", "replicas = 2\n")
    assert run_sweep(config).failed == 0
    assert sorted(p.name for p in (config.output / "logs").iterdir()) == [
        f"ref-{m}-b2-r{r}.log" for m in ("ngram-k1", "none-k0") for r in (0, 1)]
    records = read_cells(config.output)
    assert len(records) == 4 and all(r["key"]["replicas"] == 2 for r in records.values())
    for record in records.values():
        assert [r["segment"] for r in record["timeline"]] == [0, 0, 1, 1, 2, 2]
        assert record["result"]["output_tokens"] == 72
    one = load_sweep_config(tmp_path / "sweep.toml")
    (tmp_path / "sweep.toml").write_text((tmp_path / "sweep.toml").read_text().replace("replicas = 2\n", ""))
    assert not {c.cell_id(load_sweep_config(tmp_path / "sweep.toml")) for c in plan_cells(one)} & set(records)
    rows = validated_rows(tmp_path, tiny_model, config.output)
    assert sorted(r["batch_size"] for r in rows) == ["1", "2"]


def interleaved_sweep(tmp_path, tiny_model, baselines: str, k: str, batch_sizes: str, extra: str = ""):
    """A 6-request sweep of ``specscope serve`` (none and n-gram) with ``baselines``, 3 segments
    (and ``extra`` lines)."""
    from specscope.backends.openai.sweep_config import load_sweep_config

    write_workload(tmp_path / "a.jsonl", 6, seed=5)
    (tmp_path / "sweep.toml").write_text(
        f'output = "out"\nworkloads = ["a.jsonl"]\nmethods = ["none", "ngram"]\nk = {k}\nbatch_sizes = {batch_sizes}\n'
        f'max_tokens = 12\nignore_eos = true\nlaunch_timeout_s = 120\nbaselines = "{baselines}"\nsegments = 3\n{extra}'
        f'\n[[engines]]\nname = "ref"\nlaunch = "specscope"\nmodel = "{tiny_model}"\nargs = ["--threads", "1"]\n')
    return load_sweep_config(tmp_path / "sweep.toml")


def pause(record: dict) -> float:
    """ms from the end of a cell's segment 0 to the first send of its segment 1 (its server's own clock)."""
    end = max(r["sent_ms"] + r["chunk_ms"][-1] for r in record["timeline"] if r["segment"] == 0)
    return min(r["sent_ms"] for r in record["timeline"] if r["segment"] == 1) - end


def validated_rows(tmp_path, tiny_model, output) -> list[dict]:
    """Trace the sweep's workload with n-gram, fit ``output`` with --validate: calibration.csv's rows."""
    from specscope.cli import main

    trace = tmp_path / "a.trace.jsonl"
    assert main(["trace", "--model", str(tiny_model), "--proposers", "ngram", "--workload", str(tmp_path / "a.jsonl"),
                 "--max-tokens", "12", "--k-max", "4", "-o", str(trace)]) == 0
    assert main(["costmodel", "fit", "--from-sweep", str(output), "--traces", str(trace), "--validate",
                 "-o", str(tmp_path / "engine.json")]) == 0
    with open(output / "calibration.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_interleaved_pairs_against_a_real_server(tmp_path, tiny_model, capsys):
    """Interleaved baselines: each pair's two servers take turns over segments (A B, B A, A B),
    every cell counts its own segments, a pair resumes as a pair, and the calibration replays
    each segment on its own."""
    from specscope.backends.openai.sweep import read_cells, run_sweep

    config = interleaved_sweep(tmp_path, tiny_model, "interleaved", "[1]", "[1, 2]")
    assert run_sweep(config).failed == 0
    records = read_cells(config.output)
    assert len(records) == 4
    for record in records.values():
        timeline = record["timeline"]
        assert [r["segment"] for r in timeline] == [0, 0, 1, 1, 2, 2]
        assert record["result"]["duration_s"] < record["finished_at"] - record["started_at"]  # its own segments only
        assert record["result"]["throughput"] == pytest.approx(72 / record["result"]["duration_s"])
    for b in (1, 2):  # the none server ran segment 0 first and 1 last: the SD server's two ran back to back
        base, sd = (next(r for r in records.values() if r["key"]["batch_size"] == b and r["key"]["method"] == m)
                    for m in ("none", "ngram"))
        assert pause(base) > pause(sd) + 5
    rerun = next(i for i, r in records.items() if r["key"]["method"] == "ngram" and r["key"]["batch_size"] == 2)
    (config.output / "cells" / f"{rerun}.json").unlink()
    outcome = run_sweep(config)
    assert (outcome.ran, outcome.failed) == (2, 0)  # the pair again, not its SD cell alone
    again = read_cells(config.output)
    moved = {i for i in records if i != rerun and again[i]["started_at"] != records[i]["started_at"]}
    assert len(moved) == 1 and again[moved.pop()]["key"]["baseline_for"] == "ngram k=1"  # its none cell
    from specscope.backends.openai.calibration import read_sweep

    runs = read_sweep(config.output)  # each none cell and its SD cell: one pair, whose speed the fit reads
    assert len({r.pair for r in runs}) == 2 and all(r.pair is not None for r in runs)
    rows = validated_rows(tmp_path, tiny_model, config.output)
    assert sorted(r["batch_size"] for r in rows) == ["1", "2"]
    assert all(float(r["measured_se_pct"]) > 0 for r in rows)  # three segments each: their spread
    assert "errors within two of their cell's" in capsys.readouterr().out


@pytest.mark.slow
def test_interleaved_all_against_a_real_server(tmp_path, tiny_model):
    """``interleaved-all``: a workload's cells (none and n-gram, each at batch sizes 1 and 2) take
    turns over segments (A B C D, D C B A, A B C D) on two servers, one per method serving both
    batch sizes; each cell counts its own segments, and its server's spec-decode counters around
    them only; deleting one cell's record reruns the whole workload; the calibration reads each
    batch size's none cell as its SD cell's baseline."""
    from specscope.backends.openai.calibration import read_sweep
    from specscope.backends.openai.sweep import read_cells, run_sweep

    config = interleaved_sweep(tmp_path, tiny_model, "interleaved-all", "[1]", "[1, 2]")
    assert run_sweep(config).failed == 0
    assert sorted(p.name for p in (config.output / "logs").iterdir()) == ["ref-ngram-k1-b2.log", "ref-none-k0-b2.log"]
    records = read_cells(config.output)
    turn = {(r["key"]["batch_size"], r["key"]["method"]): r for r in records.values()}
    assert sorted(turn) == [(1, "ngram"), (1, "none"), (2, "ngram"), (2, "none")]
    for record in records.values():
        assert [r["segment"] for r in record["timeline"]] == [0, 0, 1, 1, 2, 2]
        result = record["result"]
        if record["key"]["method"] == "ngram":  # a step's chunk: 1 token + those accepted, the cell's own only
            accepted = sum(sum(r["chunk_tokens"]) - len(r["chunk_tokens"]) for r in record["timeline"])
            assert result["num_accepted_tokens"] == accepted and result["num_drafts"] > 0
    # between its two segments the first cell waits for six runs of the others, the second for
    # four, the third for two, the last for none
    pauses = [pause(turn[cell]) for cell in [(1, "none"), (1, "ngram"), (2, "none"), (2, "ngram")]]
    assert pauses[0] > pauses[1] + 5 > pauses[2] + 10 > pauses[3] + 15
    rerun = next(i for i, r in records.items() if r["key"]["batch_size"] == 2 and r["key"]["method"] == "ngram")
    (config.output / "cells" / f"{rerun}.json").unlink()
    outcome = run_sweep(config)
    assert (outcome.ran, outcome.failed) == (4, 0)  # the whole workload again
    runs = read_sweep(config.output)
    assert {r.method for r in runs} == {"none", "ngram"} and all(r.pair is None for r in runs)
    rows = validated_rows(tmp_path, tiny_model, config.output)
    assert sorted(r["batch_size"] for r in rows) == ["1", "2"] and all(float(r["measured_se_pct"]) > 0 for r in rows)


def test_an_engine_that_pads_its_prefills_is_fitted_as_one():
    """``specscope serve`` prefills the prompts it admits together right-padded to the longest. A
    sweep of such an engine (its cells say so: launched as specscope) is fitted with those padded
    positions — the engine recovered, and a model that pads — where reading the same timelines as
    an engine that does not pad misses the engine."""
    cells = [simulated_cell("none", 0, b, pads=True) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b, pads=True) for k in (2, 4) for b in (1, 2, 4)]
    model = fit_cells(cells)
    assert_recovered(model)
    assert model.pads_verification
    unpadded = fit_cells([replace(c, pads=False) for c in cells])
    assert not unpadded.pads_verification
    with pytest.raises(AssertionError):
        assert_recovered(unpadded)


def test_a_gap_that_prefills_many_prompts_is_no_stall():
    """Seven requests that finish together are replaced together, and the eighth's gap spans their
    prefill: four times the gaps that prefill one prompt (22–37 ms against 96 ms), judged per
    prefilled position (against their median it read as a stall and was left out)."""
    lengths = [60] + [20] * 7 + [25, 30, 35, 40, 45, 50, 55] * 3
    gaps = cell_gaps(simulated_cell("none", 0, 8, lengths=lengths, prompt=200))
    assert (gaps.sequences - gaps.running).max() == 7  # the gap with the seven prefills is kept


def test_prompts_of_one_length_keep_the_prefill_price_the_fit_found():
    """Every prompt 30 tokens: a prefill's positions never vary apart from its prompts, so
    ``c_prompt`` is one of the terms the sweep cannot tell apart — and still the model file must
    price a prefill as the fit did (it had dropped the fitted price for c_tok's, 2–4× too dear)."""
    cells = [simulated_cell("none", 0, b, prompt_step=0) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b, prompt_step=0) for k in (2, 4) for b in (1, 2, 4)]
    model = fit_cells(cells)
    assert "c_prompt" in model.not_separated
    truth = FORWARD["c_prompt_fixed"] + FORWARD["c_prompt"] * 120 + FORWARD["c_req"] * 4 + FORWARD["c_batch"]
    assert float(model.prefill_forward_time(np.array([120.0]), np.array([4.0]))[0]) == pytest.approx(truth, rel=0.01)


def test_no_gap_of_an_exact_engine_is_a_stall_whatever_its_prompt(monkeypatch):
    """Prompts of 8 to 599 tokens on an engine without stalls: no gap that prefills a short
    prompt (judged per position it looked 10× dear) nor a first chunk of a long one (judged whole,
    3× the median) is left out."""
    from specscope.costmodel import calibrate

    cells = [simulated_cell("none", 0, b, requests=24, prompt=8, prompt_step=197) for b in (1, 4)]
    for cell in cells[0].timeline, cells[1].timeline:  # each request sent a moment after a slot freed
        for request in cell:
            request["sent_ms"] += 0.01
            request["chunk_ms"] = [t - 0.01 for t in request["chunk_ms"]]
    kept = [len(cell_gaps(c).seconds) for c in cells]
    monkeypatch.setattr(calibrate, "STALL", np.inf)
    assert kept == [len(cell_gaps(c).seconds) for c in cells]
    assert cell_gaps(cells[0]).idle.sum() > 12  # the first chunks of long prompts among them


def test_a_drafter_whose_passes_cost_more_than_its_start_is_recovered():
    """A drafter of k passes at 0.5 ms each and 0.3 ms besides: ``c_fixed + c_tok·(k + 1)`` with a
    c_fixed of −0.2 ms. The fits work per proposed token (terms ≥ 0) and recover it, from chunk
    timelines and from step records alike (a fit of the k + 1 form with terms ≥ 0 cannot)."""
    from specscope.costmodel.calibrate import fit_steps

    passes = dict(c_fixed=-2e-4, c_tok=5e-4, c_batched=1e-4)
    cells = [simulated_cell("none", 0, b) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b, draft=passes) for k in (1, 2, 4) for b in (1, 2, 4)]
    drafting = fit_cells(cells).drafting_for("draft")
    for name, value in passes.items():
        assert getattr(drafting, name) == pytest.approx(value, rel=0.05, abs=1e-6), name
    steps = [s for run, (k, b) in enumerate((k, b) for k in (0, 1, 2, 4) for b in (1, 2, 4))
             for s in simulated_steps("draft" if k else "none", k, b, run, passes)]
    drafting = fit_steps(steps)[0].drafting_for("draft")
    for name, value in passes.items():
        assert getattr(drafting, name) == pytest.approx(value, rel=0.05, abs=1e-6), name


TREE_DRAFT = dict(c_fixed=5e-4, c_tok=4e-4, c_batched=1e-4, c_tree=7e-4)


def test_tree_cells_are_fitted_as_their_drafter_reads_them():
    """A tree cell verifies ``nodes + 1`` tokens a row while its drafter makes ``depth`` passes over
    Σ pass widths a row (3x2x1x1: 22 verified; 4 passes over 16, plus one each) and pays ``c_tree``
    a step, as the simulator prices a tree. Fitted so, a sweep of chains and trees recovers every
    term, from chunk timelines and step records alike (priced as ``nodes`` drafted tokens a row, a
    tree's drafting came out nowhere near); and chains beside a tree no longer trade a verified
    token's cost against the drafter's per row and draft."""
    from specscope.backends.openai.calibration import terms
    from specscope.costmodel.calibrate import fit_steps
    from specscope.costmodel.steps import MeasuredStep

    cells = [simulated_cell("none", 0, b) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b, draft=TREE_DRAFT) for k in (1, 2) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", 0, b, draft=TREE_DRAFT, tree="3x2x1x1") for b in (1, 2, 4)]
    model = fit_cells(cells)
    for name, value in FORWARD.items():
        assert getattr(model, name) == pytest.approx(value, rel=0.05), name
    for name, value in TREE_DRAFT.items():
        assert getattr(model.drafting_for("draft"), name) == pytest.approx(value, rel=0.05), name
    assert not model.not_separated
    assert terms(model)["draft.c_tree"] == pytest.approx(7e-4, rel=0.05)
    chains = fit_cells([c for c in cells if c.tree is None])
    assert "draft.c_tree" not in terms(chains) and "draft.c_tree" not in chains.not_separated  # never had one

    steps = []
    for run, (k, b, tree) in enumerate([(0, b, None) for b in (1, 2, 4)] + [(k, b, None) for k in (1, 2) for b in (1, 2, 4)]
                                       + [(21, b, "3x2x1x1") for b in (1, 2, 4)]):
        w = k + 1
        passes, read = (5, 17) if tree else (w, w)  # depth + 1; Σ pass widths (1, 3, 6, 6) + 1
        for i in range(30):
            kv = b * (30 + i)
            seconds = (FORWARD["c_fixed"] + FORWARD["c_tok"] * b * w + FORWARD["c_kv"] * kv + FORWARD["c_req"] * b
                       + FORWARD["c_batch"] * (b > 1))
            if k:
                seconds += (TREE_DRAFT["c_fixed"] + TREE_DRAFT["c_tok"] * passes + TREE_DRAFT["c_batched"] * b * read
                            + TREE_DRAFT["c_tree"] * bool(tree))
            steps.append(MeasuredStep(i, "draft" if k else "none", k, b, b * w, [w] * b, draft_s=0.3 * seconds,
                                      verify_s=0.7 * seconds, sample_s=0.0, overhead_s=0.0, kv_tokens=kv,
                                      prefill_tokens=0, prefill_s=0.0, tree=tree, run=run))
    inside = fit_steps(steps)[0]
    for name in ("c_fixed", "c_tok", "c_kv", "c_batch"):
        assert getattr(inside, name) == pytest.approx(FORWARD[name], rel=0.05), name
    for name, value in TREE_DRAFT.items():
        assert getattr(inside.drafting_for("draft"), name) == pytest.approx(value, rel=0.05), name


def test_a_tree_the_fit_never_saw_is_named_and_its_jackknife_left_empty():
    """A model fitted to chains prices a tree from its chains' lines, a tree step's own cost taken
    as 0: simulate and report say so by name. The jackknife of c_tree over held-out fits of which
    one saw no tree (its one tree cell left out) is left empty, not a KeyError; --validate refuses a
    method's one tree cell up front (leaving it out leaves no tree step to fit)."""
    from specscope.backends.openai.calibration import coefficient_spread, validate

    chains = [simulated_cell("none", 0, b) for b in (1, 2)] + [simulated_cell("draft", k, b, draft=TREE_DRAFT)
                                                               for k in (1, 2) for b in (1, 2)]
    tree = [simulated_cell("draft", 0, b, draft=TREE_DRAFT, tree="3x2x1x1") for b in (1, 2)]
    alone = fit_cells(chains)
    assert alone.trees_from_chains(["draft", "draft"]) == (
        "cost model 'calibrated' fitted no tree cell of draft: their trees are priced from their chains alone, "
        "a tree step's own cost (c_tree) taken as 0")
    both = fit_cells(chains + tree)
    assert both.trees_from_chains(["draft"]) is None
    from specscope.costmodel.calibrate import fit_steps
    records = [s for run, (k, b) in enumerate((k, b) for k in (0, 2, 4) for b in (1, 2, 4))
               for s in simulated_steps("draft" if k else "none", k, b, run)]
    assert "prices no tree step of draft beyond its passes (c_tree 0" in fit_steps(records)[0].trees_from_chains(["draft"])
    rows = {row["term"]: row for row in coefficient_spread(both, [alone, both])}
    assert rows["draft.c_tree"]["jackknife_se"] is None and rows["draft.c_tok"]["jackknife_se"] is not None
    with pytest.raises(SpecscopeError, match=r"--validate: .* is the one tree cell of 'draft'; leaving it out leaves "
                                             r"no tree step to fit"):
        validate(chains + tree[:1], [])


def test_the_widest_row_an_engine_that_pads_verifies():
    """n rows that each propose on a share p of their steps, d drafts when they do: the widest
    row verifies 1 + d·(1 − (1 − p)^n) tokens in expectation; rows that always propose, w."""
    from specscope.costmodel.calibrate import _widest

    assert _widest(2.0, 0.5, np.array([1.0, 2.0, 8.0])).tolist() == pytest.approx([2.0, 2.5, 1 + 2 * (1 - 0.5 ** 8)])
    assert _widest(3.0, 1.0, np.array([1.0, 8.0])).tolist() == [3.0, 3.0]


def test_a_row_alone_is_a_multi_token_forward_only_on_the_steps_it_proposed():
    """An n-gram-like drafter proposes on every other step, at every k alike; a forward of more
    than one token costs 0.6 ms more. The cell's share of proposing steps is the same at each k,
    so it cannot tell that cost from the drafter's fixed one (which it pays on every step); each
    chunk's tokens can (a chunk of several tokens came from a step that proposed; here every
    proposal has a draft accepted), and the fit recovers both. Where some proposals have none
    accepted, the drafts counter says how many of the one-token chunks proposed."""
    from specscope.costmodel.calibrate import _proposed

    drafter = dict(c_fixed=2e-4, c_tok=3e-4, c_batched=0.0)
    cells = [simulated_cell("none", 0, b, multi=6e-4) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b, multi=6e-4) for k in (2, 4) for b in (1, 2, 4)]
    cells += [simulated_cell("ngram", k, 1, draft=drafter, proposing_every=2, multi=6e-4) for k in (1, 2, 4)]
    model = fit_cells(cells)
    assert model.c_multi == pytest.approx(6e-4, rel=0.05)
    assert model.drafting_for("draft").c_fixed == pytest.approx(DRAFT["c_fixed"], rel=0.05)
    fitted = model.drafting_for("ngram")  # written in the k + 1 form: its c_fixed is the start less one pass
    assert fitted.c_fixed + fitted.c_tok == pytest.approx(drafter["c_fixed"], rel=0.05)
    assert fitted.c_tok == pytest.approx(drafter["c_tok"], rel=0.05)
    # a chunk of one token of a cell whose 10 drafting steps gave 4 chunks of several tokens: 6 of its 16 one-token chunks
    cell = replace(cells[-1], num_drafts=10)
    assert _proposed(cell, np.array([1.0] * 16 + [2.0, 3.0, 5.0, 4.0]), 0.5, True).tolist() == [6 / 16] * 16 + [1.0] * 4
    assert _proposed(cell, np.ones(4), 0.5, False).tolist() == [0.5] * 4  # no token ids: the cell's share


def test_the_cross_check_counts_an_iteration_as_vllm_does():
    """A review: the cross-check set the fit's verified tokens per step (rejected drafts included)
    beside vLLM's iteration tokens, which count the tokens requests emitted plus the prompts
    prefilled. On an engine whose every step emits all k + 1 tokens of every row, the two agree
    (but for the last steps, cut at the output's end);
    on one whose n-gram row proposes only every third step (emitting 2, then 3, …), the emitted
    count is the lower, and on a cell without SD they differ only by the prefilled first tokens."""
    from specscope.costmodel.calibrate import cross_check

    full, sparse, plain = (simulated_cell("eagle", 3, 4), simulated_cell("ngram", 3, 4, proposing_every=3),
                           simulated_cell("none", 0, 4))
    rows = {row["method"]: row for row in cross_check([full, sparse, plain])}
    assert rows["eagle"]["emitted_per_step"] == pytest.approx(rows["eagle"]["verified_per_step"], rel=0.05)
    assert rows["ngram"]["emitted_per_step"] < 0.9 * rows["ngram"]["verified_per_step"]
    # a prefilled request's first token: counted by vLLM, verified by no one
    assert 0 <= rows["none"]["emitted_per_step"] - rows["none"]["verified_per_step"] < 0.5


def test_prompts_of_alike_lengths_price_no_square():
    """A review: the README's small sweep (prompts of 50–60 tokens) put a prefill's whole cost on
    its attention's query–key pairs in one fit of three (a one-token prompt free: the model was
    refused) and part of it in another (a long prompt priced by an extrapolated square). Over
    prompts within 2× of each other the pairs are not fitted (priced at 0, no split to name)."""
    from specscope.costmodel.fit import square_told

    assert not square_told(np.array([50.0, 0.0, 60.0]), np.array([2500.0, 0.0, 3600.0]))
    assert square_told(np.array([30.0, 60.0]), np.array([900.0, 3600.0]))
    cells = [simulated_cell("none", 0, b, prompt=50, prompt_step=3) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b, prompt=50, prompt_step=3) for k in (2, 4) for b in (1, 2, 4)]
    model = fit_cells(cells)
    assert model.c_prompt_kv == 0.0 and "c_prompt_kv" not in model.not_separated and model.prompt_price > 0


def late_read_cell() -> CellRun:
    """A segment at B = 8 as ``specscope serve`` ran one (prompts of 51–749 tokens): request a
    alone in the first step (its first chunk at 41.7 ms), the seven sent beside it prefilled
    together in the next (0.44 s), their first chunks read 0–6 ms late by a client busy with eight
    streams, then 6 ms decode steps; and a ninth request sent when the fastest finished."""
    prompts = [433, 498, 563, 628, 684, 749, 51, 120]
    firsts = [41.7, 484.4, 490.2, 490.2, 484.1, 488.7, 484.2, 488.1]
    sent = [0.0, 0.3, 0.7, 2.6, 4.0, 4.3, 4.6, 4.9]
    timeline = []
    for i, (prompt, first, when) in enumerate(zip(prompts, firsts, sent)):
        steps = [490.8 + 6.0 * s for s in range(12 if i else 13)]  # a's second chunk ends the big step
        timeline.append({"id": f"r{i}", "sent_ms": when, "prompt_tokens": prompt, "output_tokens": 1 + len(steps),
                         "chunk_ms": [t - when for t in [first, *steps]], "chunk_tokens": [1] * (1 + len(steps))})
    timeline.append({"id": "r8", "sent_ms": 557.0, "prompt_tokens": 176, "output_tokens": 3,  # after r1 … r7 ended
                     "chunk_ms": [t - 557.0 for t in (580.0, 586.0, 592.0)], "chunk_tokens": [1, 1, 1]})
    return CellRun("late", "none", 0, None, 8, "w.jsonl", 1.0, None, timeline, {}, pads=True)


def test_a_prompt_is_prefilled_in_one_step_of_each_running_request():
    """Each gap spans the prefills of the requests it held up, no more: the big step's gap holds
    the seven prompts sent beside request a (padded to the longest, 749), while a request's first
    gap of 6 ms claims none of the prompts prefilled beside it whose first chunks the client read
    late (before: four, 4 × 749 positions priced in 6 ms), nor does the big gap claim the request
    sent after it ended whose first chunk came within half of it (before: its prompt too)."""
    gaps = cell_gaps(late_read_cell())
    prefilled = gaps.sequences - gaps.running
    big = gaps.seconds > 0.1
    assert big.sum() == 1 and prefilled[big][0] == 7 and gaps.prefill[big][0] == 7 * 749
    assert prefilled[~big & (gaps.idle == 0)].max() == 0
    assert gaps.pairs[big][0] == 7 * 749 ** 2


def test_prompts_prefilled_together_and_read_late_are_no_later_gaps_prefill():
    """Eight requests sent at once to an idle engine, prefilled in one step and their first chunks
    read 0–6 ms late (a review: every request's first 6 ms gap claimed the four prompts read after
    its own first chunk, as it did for two replacements sent together when two requests ended in
    one step): no decode gap prefills anything."""
    firsts = [484.4, 490.2, 490.2, 484.1, 488.7, 484.2, 488.1, 486.0]
    timeline = [{"id": f"r{i}", "sent_ms": 0.0, "prompt_tokens": 400 + 40 * i, "output_tokens": 13,
                 "chunk_ms": [first, *(490.8 + 6.0 * s for s in range(12))], "chunk_tokens": [1] * 13}
                for i, first in enumerate(firsts)]
    gaps = cell_gaps(CellRun("together", "none", 0, None, 8, "w.jsonl", 1.0, None, timeline, {}, pads=True))
    decode = (gaps.seconds < 0.1) & (gaps.idle == 0)
    assert decode.sum() > 50 and (gaps.sequences - gaps.running)[decode].max() == 0


def stalled_step(cell: CellRun, request: int, extra_ms: float, chunk: int = 0) -> CellRun:
    """``cell`` with the step that gave ``request`` its chunk ``chunk`` (0: its first) taking
    ``extra_ms`` longer: every chunk read then or after, and every request sent after it began,
    that much later."""
    times = cell.timeline[request]
    at = times["sent_ms"] + times["chunk_ms"][chunk]
    began = times["sent_ms"] + (times["chunk_ms"][chunk - 1] if chunk else 0.0)
    timeline = []
    for r in cell.timeline:
        chunks = [r["sent_ms"] + t for t in r["chunk_ms"]]
        sent = r["sent_ms"] + (extra_ms if r["sent_ms"] > began else 0.0)
        chunks = [t + (extra_ms if t >= at - 1e-9 else 0.0) for t in chunks]
        timeline.append({**r, "sent_ms": sent, "chunk_ms": [t - sent for t in chunks]})
    return replace(cell, timeline=timeline)


def test_a_prefill_far_over_its_price_is_left_out_of_the_fit(monkeypatch):
    """A prefill of several prompts that took 3.4× its price (on ``specscope serve`` each server's
    first prefill of seven long prompts, once) passed the stall filter, which judges a gap against
    a line through gaps of its kind, and its squared error outweighed a thousand steps: the engine
    is recovered only once the gaps over 2× the first fit's price are left out and the model fitted
    again."""
    from specscope.costmodel import calibrate

    cells = [simulated_cell("none", 0, b) for b in (1, 2, 4)]
    cells += [simulated_cell("draft", k, b) for k in (2, 4) for b in (1, 2, 4)]
    base = cells[2].timeline
    together = [i for i, r in enumerate(base) if r["sent_ms"] > 0  # admitted beside others, while others ran
                and sum(q["sent_ms"] == r["sent_ms"] for q in base) > 1]
    step = cells[2].timeline[together[0]]
    seconds = step["chunk_ms"][0]  # its whole step: sent as it began
    cells[2] = stalled_step(cells[2], together[0], 2.4 * seconds)
    assert_recovered(fit_cells(cells))
    for i in (0, 3, 4, 5, 6, 7, 8):  # and 14 decode steps at 2.6× theirs, 1.1 % of the gaps (a review: a
        for request in (1, 2):  # cut-off at 1 % kept them all, the big one too, and fitted c_tok 0)
            times = cells[i].timeline[request]["chunk_ms"]
            cells[i] = stalled_step(cells[i], request, 1.6 * (times[4] - times[3]), chunk=4)
    assert_recovered(fit_cells(cells))
    monkeypatch.setattr(calibrate, "FITTED_STALL", np.inf)
    with pytest.raises(AssertionError):
        assert_recovered(fit_cells(cells))


def test_a_gap_whose_prefills_the_timing_cannot_tell_is_left_out():
    """Requests a and b prefilled together from idle (first chunks at 10.0 and 10.2 ms), then 3 ms
    steps; q's first chunk comes 3.1 ms after a's. Sent with them, q was either prefilled beside
    them and read late, or reached the engine just after their step began and was prefilled in
    the next, short one: timing cannot tell, so a's and b's first gaps are left out (a review: a
    gap that prefilled q had been priced as a plain decode gap). Sent at 9 ms, while their step
    ran, q was prefilled in their first gaps, and they say so."""
    def cell(q_sent: float) -> CellRun:
        rows = [("a", 0.0, [10.0, 13.0, 16.0]), ("b", 0.0, [10.2, 13.05, 16.05]), ("q", q_sent, [13.1, 16.1])]
        timeline = [{"id": name, "sent_ms": sent, "prompt_tokens": 50, "output_tokens": len(chunks),
                     "chunk_ms": [t - sent for t in chunks], "chunk_tokens": [1] * len(chunks)}
                    for name, sent, chunks in rows]
        return CellRun("q", "none", 0, None, 3, "w.jsonl", 1.0, None, timeline, {})

    unsure, told = cell_gaps(cell(0.0)), cell_gaps(cell(9.0))
    steps = told.idle == 0
    assert (told.sequences - told.running)[steps].tolist() == [1, 0, 1, 0, 0]  # a's and b's first gaps hold q's
    assert (unsure.idle == 0).sum() == 3 and (unsure.sequences - unsure.running)[unsure.idle == 0].max() == 0


def test_a_trace_of_another_drafter_is_refused_and_one_kept_without_settings_is_read(tmp_path):
    """The trace's settings fingerprint the drafter of the held-out cell's method: another checkpoint
    than the cell's engine ran is refused before any fit; a trace without settings (traced
    elsewhere), or a cell of a url engine (no fingerprints), is not compared."""
    from specscope.backends.openai.calibration import check_traces
    from specscope.tracing.settings import traced_checkpoints

    trace = tmp_path / "w.trace.jsonl"
    trace.write_text("")
    assert traced_checkpoints(trace) == (None, {})
    trace.with_name(trace.name + ".settings.json").write_text(json.dumps(
        {"workload": "0" * 64, "k_max": 4, "dataset": "w", "model_files": "a" * 64,
         "proposers": ["ngram", f"eagle={tmp_path / 'my head'} {'b' * 64}"]}))
    assert traced_checkpoints(trace) == ("w", {"model": "a" * 64, "eagle": "b" * 64})
    held = replace(simulated_cell("eagle", 2, 1), workload="w.jsonl", checkpoints={"model": "a" * 64, "draft": "c" * 64})
    with pytest.raises(SpecscopeError, match=r"--traces t: traced with another eagle drafter \(fingerprint bbbbbbbbbbbb\) "
                                             r"than cells/.* ran \(cccccccccccc\)"):
        check_traces([(held, held)], [], {"w": ("t", traced_checkpoints(trace)[1])})
    with pytest.raises(SpecscopeError, match=r"--traces: no records of dataset 'w'"):  # not compared: on to the requests
        check_traces([(replace(held, checkpoints={}), held)], [], {"w": ("t", traced_checkpoints(trace)[1])})
