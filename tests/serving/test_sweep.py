"""`specscope sweep`: configuration checks, failures recorded per cell, resume after SIGKILL."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serving_helpers import refused_url, write_workload

from specscope.backends.openai.sweep import failed_record, read_cells, run_sweep
from specscope.backends.openai.sweep_config import load_sweep_config, plan_cells
from specscope.errors import SpecscopeError

pytestmark = pytest.mark.slow  # real servers, sweeps killed and resumed

GRID = """
output = "out"
workloads = ["a.jsonl", "b.jsonl"]
methods = ["none", "ngram", "eagle3"]
k = [1, 3]
batch_sizes = [1, 2]
max_tokens = 8

[[engines]]
name = "vllm"
launch = "vllm"
model = "meta-llama/Llama-3.1-8B-Instruct"
drafts = { eagle3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" }
"""


def enough_for_segments(tmp_path: Path) -> None:
    """Workloads a.jsonl and b.jsonl of 20 requests each: enough for ten segments (interleaving's
    default) of two (the grid's largest batch size), where :func:`write_config`'s own have three."""
    for name in ("a.jsonl", "b.jsonl"):
        write_workload(tmp_path / name, 20, seed=len(name) + ord(name[0]))


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    for name in ("a.jsonl", "b.jsonl"):
        if not (tmp_path / name).exists():
            write_workload(tmp_path / name, 3, seed=len(name) + ord(name[0]))
    return path


def url_engine(name: str, url: str) -> str:
    return f'\n[[engines]]\nname = "{name}"\nurl = "{url}"\nmethod = "ngram"\nk = 3\n'


def test_plan_and_stable_cell_ids(tmp_path):
    config = load_sweep_config(write_config(tmp_path, GRID))
    cells = plan_cells(config)
    # none: 2 batch sizes x 2 workloads; ngram and eagle3: 2 k x 2 batch sizes x 2 workloads each
    assert len(cells) == 4 + 8 + 8
    ids = [c.cell_id(config) for c in cells]
    assert len(set(ids)) == len(ids)
    assert ids == [c.cell_id(load_sweep_config(config.path)) for c in plan_cells(config)]
    assert {(c.method, c.k) for c in cells if c.method == "none"} == {("none", 0)}
    changed = load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", "max_tokens = 9")))
    changed_ids = {c.cell_id(changed) for c in plan_cells(changed)}
    assert not set(ids) & changed_ids
    (tmp_path / "a.jsonl").write_text(
        '{"id": 1, "prompt_token_ids": [4]}\n'
    )  # new content: new ids for a.jsonl
    edited_ids = {c.cell_id(changed) for c in plan_cells(changed)}
    assert len(edited_ids & changed_ids) == 10


def test_a_model_directory_is_read_beside_the_file_and_counts_by_its_checkpoint(tmp_path, monkeypatch):
    """The same file run from two folders, each holding its own `mt/`, resumed the second with the
    first's results (the id held the path as typed, resolved against the working folder)."""
    (tmp_path / "conf").mkdir()
    mine = tmp_path / "conf" / "mt"
    mine.mkdir()
    (mine / "config.json").write_text('{"hidden_size": 8}')
    (mine / "model.safetensors").write_bytes(b"x" * 10)
    text = GRID.replace('model = "meta-llama/Llama-3.1-8B-Instruct"', 'model = "mt"').replace('launch = "vllm"',
                                                                                         'launch = "specscope"')
    text = text.replace('methods = ["none", "ngram", "eagle3"]', 'methods = ["none", "ngram"]').replace(
        'drafts = { eagle3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" }\n', "")
    path = write_config(tmp_path / "conf", text)
    monkeypatch.chdir(tmp_path)  # elsewhere: the model is still the file's neighbour
    config = load_sweep_config(path)
    assert config.engines[0].model == str(mine.resolve())
    ids = {c.cell_id(config) for c in plan_cells(config)}
    (mine / "model.safetensors").write_bytes(b"x" * 11)  # another checkpoint in its place
    assert not ids & {c.cell_id(config) for c in plan_cells(load_sweep_config(path))}
    before = {c.cell_id(config) for c in plan_cells(config)}
    (mine / "model.safetensors").write_bytes(b"y" * 11)  # the same size, other weights: while a cell ran
    assert not before & {c.cell_id(config) for c in plan_cells(config)}  # the same config object sees it


def test_paired_baselines_run_right_before_their_sd_cell(tmp_path):
    shared = load_sweep_config(write_config(tmp_path, GRID))
    paired = load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "paired"')))
    cells = plan_cells(paired)
    sd = [c for c in cells if c.method != "none"]
    assert len(cells) == 2 * len(sd) == 32  # one none cell per SD cell, no shared ones
    for before, after in zip(cells[::2], cells[1::2]):  # every SD cell right after its own none cell
        assert before.method == "none" and after.method != "none"
        assert (before.baseline_for, before.batch_size, before.workload) == (after.server, after.batch_size, after.workload)
    assert cells[1].server == "ngram k=1" and cells[0].labels()["baseline_for"] == "ngram k=1"
    assert [c.workload for c in cells[:4]] == ["a.jsonl", "a.jsonl", "b.jsonl", "b.jsonl"]
    ids = [c.cell_id(paired) for c in cells]
    assert len(set(ids)) == len(ids)
    shared_ids = {c.cell_id(shared) for c in plan_cells(shared)}
    assert {c.cell_id(paired) for c in sd} <= shared_ids  # an SD cell's id does not depend on its baseline
    ran = []

    def runner(config, groups):  # records every cell failed, as a server that never started would
        for group in groups:
            for cell in group:
                ran.append(cell)
                yield failed_record(config, cell, "not run: a test")

    assert run_sweep(shared, run_groups=runner).ran == 20
    ran.clear()  # a shared sweep's SD cells are no pair to none cells measured now: measured again with them
    assert run_sweep(paired, run_groups=runner).ran == 32 and {c.cell_id(paired) for c in ran} == set(ids)
    pair = {c.cell_id(paired) for c in cells[2:4]}
    for name in pair:  # an interrupted pair: both of it again, nothing else
        (paired.output / "cells" / f"{name}.json").unlink()
    ran.clear()
    assert run_sweep(paired, run_groups=runner).ran == 2 and {c.cell_id(paired) for c in ran} == pair
    with pytest.raises(SpecscopeError, match="baselines.*'shared', 'paired', 'interleaved'"):
        load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "each"')))


def test_a_pair_whose_halves_were_not_measured_back_to_back_is_measured_again(tmp_path):
    """A review: a paired sweep interrupted after a pair's none cell, a shared sweep recording the
    SD cell, and the paired sweep resumed took the two as a pair (speedup published as paired). A
    pair's halves are one when no other record began between them, the none cell first."""
    from specscope.backends.openai.sweep import pending_cells

    paired = load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "paired"')))
    cells = plan_cells(paired)
    ids = [c.cell_id(paired) for c in cells]
    starts = {cid: float(i) for i, cid in enumerate(ids)}  # every pair back to back, in the plan's order
    recorded = {cid: {"started_at": t, "key": cells[ids.index(cid)].key(paired), "status": "ok"} for cid, t in starts.items()}
    assert pending_cells(paired, cells, recorded, False) == []
    moved = {**recorded, ids[3]: {**recorded[ids[3]], "started_at": 100.0}}  # pair 2's SD cell measured later
    assert [c.cell_id(paired) for c in pending_cells(paired, cells, moved, False)] == ids[2:4]
    swapped = {**recorded, ids[1]: {**recorded[ids[1]], "started_at": -1.0}}  # pair 1's SD cell before its none
    assert [c.cell_id(paired) for c in pending_cells(paired, cells, swapped, False)] == ids[:2]
    # between pair 1's halves: the record of a cell no longer planned (its workload since edited), of the same
    # server, is no other server's (a review: its pair was measured again); a shared none cell's is
    stale = {**cells[0].key(paired), "workload_sha256": "edited"}
    for baseline_for, pending in ((cells[0].baseline_for, []), (None, ids[:2])):
        between = {**recorded, "old": {"started_at": 0.5, "key": {**stale, "baseline_for": baseline_for}, "status": "ok"}}
        if baseline_for is None:
            del between["old"]["key"]["baseline_for"]
        assert [c.cell_id(paired) for c in pending_cells(paired, cells, between, False)] == pending


def test_a_paired_none_cell_is_its_own_baseline_in_the_results(tmp_path):
    """With paired baselines each none row is measured beside one SD server: its speedup is 1 and
    its baseline itself, as a shared none row's (they were empty: looked up under 'none')."""
    from specscope.backends.openai.sweep import results, write_record

    config = load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "paired"')))
    for i, cell in enumerate(plan_cells(config)[:4]):
        record = failed_record(config, cell, "")
        write_record(config, {**record, "status": "ok", "reason": None, "result": {"output_tokens": 100, "duration_s": 100 / (100.0 + 10 * i), "throughput": 100.0 + 10 * i}})
    rows = {(r["workload"], r["method"]): r for r in results(config)}  # n-gram k = 1 on a and b, each with its none
    for workload, none, sd in (("a.jsonl", 100.0, 110.0), ("b.jsonl", 120.0, 130.0)):
        assert rows[workload, "none"]["baseline_for"] == "ngram k=1" and rows[workload, "none"]["speedup"] == 1.0
        assert rows[workload, "none"]["baseline_throughput"] == none
        assert rows[workload, "ngram"]["speedup"] == pytest.approx(sd / none)


def test_interleaved_baselines_are_new_cells_and_segments_are_checked(tmp_path):
    def config(extra: str):
        return load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", "max_tokens = 8\n" + extra)))

    enough_for_segments(tmp_path)

    paired, interleaved = config('baselines = "paired"'), config('baselines = "interleaved"\nsegments = 4')
    assert interleaved.segments == 4 and config('baselines = "interleaved"').segments == 10
    assert [(c.method, c.baseline_for) for c in plan_cells(interleaved)] == [
        (c.method, c.baseline_for) for c in plan_cells(paired)]  # the same pairs, in the same order
    ids = {c.cell_id(interleaved) for c in plan_cells(interleaved)}
    assert len(ids) == 32 and not ids & {c.cell_id(paired) for c in plan_cells(paired)}  # measured apart: new ids
    assert ids.isdisjoint({c.cell_id(config('baselines = "interleaved"\nsegments = 5')) for c in plan_cells(interleaved)})
    with pytest.raises(SpecscopeError, match="field 'segments'.*only with baselines = 'interleaved'"):
        config('baselines = "paired"\nsegments = 4')
    with pytest.raises(SpecscopeError, match="field 'segments'"):
        config('baselines = "interleaved"\nsegments = 1')
    with pytest.raises(SpecscopeError, match=r"field 'segments': expected at most num_requests \(3\), got 4"):
        config('baselines = "interleaved"\nsegments = 4\nnum_requests = 3')
    write_workload(tmp_path / "b.jsonl", 3, seed=1)  # without num_requests: the workload's own requests
    with pytest.raises(SpecscopeError, match=r"field 'segments': expected at most the requests of b\.jsonl \(3\), got 4"):
        config('baselines = "interleaved"\nsegments = 4')


def test_fewer_requests_than_segments_are_refused_before_any_request():
    """Interleaving cuts the requests into segments: two requests cannot make three (the servers,
    here unreachable, are never asked)."""
    from specscope.backends.openai.client import ClientConfig
    from specscope.backends.openai.measure import MeasureError, measure_interleaved
    from specscope.workloads.jsonl import Prompt

    prompts = [Prompt("a", text="x"), Prompt("b", text="y")]
    with pytest.raises(MeasureError, match="2 requests cannot be cut into 3 segments"):
        measure_interleaved([ClientConfig(refused_url())] * 2, prompts, [1, 1], 3)


def test_an_interleaved_sd_cell_without_its_none_cell_is_failed_not_measured_alone(tmp_path):
    from specscope.backends.openai.sweep import run_group

    enough_for_segments(tmp_path)

    config = load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "interleaved"')))
    cells = plan_cells(config)  # an SD cell right after its none cell
    for lone in ([cells[1]], [cells[0]], [cells[1], cells[0]]):  # no pair in the right order: none measured
        records = list(run_group(config, lone))
        assert [r["cell_id"] for r in records] == [c.cell_id(config) for c in lone]
        assert all(r["status"] == "failed" and "its partners were measured apart" in r["reason"] for r in records)


def test_interleaved_all_groups_every_cell_of_a_workload(tmp_path):
    """``interleaved-all``: per workload, at each batch size one shared ``none`` cell first, then
    every SD cell; the group is one unit of servers, one per method and k for every batch size
    (resources once per server), with new ids that name the servers' batch size."""
    from specscope.backends.openai.sweep import _complete, _server_key, _units, group_servers

    enough_for_segments(tmp_path)

    def config(extra: str):
        return load_sweep_config(write_config(tmp_path, GRID.replace("max_tokens = 8", "max_tokens = 8\n" + extra)))

    shared, every = config(""), config('baselines = "interleaved-all"\nsegments = 4')
    cells = plan_cells(every)
    assert len(cells) == 4 * (1 + 4)  # (2 batch sizes x 2 workloads) x (none + 2 methods x 2 k)
    groups: dict = {}
    for cell in cells:
        groups.setdefault(_server_key(every, cell), []).append(cell)
    assert len(groups) == 2
    for group in groups.values():
        assert [(c.batch_size, c.method, c.k) for c in group] == [
            (b, m, k) for b in (1, 2) for m, k in [("none", 0), ("ngram", 1), ("ngram", 3), ("eagle3", 1), ("eagle3", 3)]]
        assert len({c.workload for c in group}) == 1 and group[0].baseline_for is None
        assert group_servers(every, group) == 5 and _units(every, group) == [tuple(group)]
        assert not _complete(group[1:]) and not _complete(group[:5] + group[6:]) and not _complete(group[:1] + group[5:])
        assert _units(every, group[1:]) == [(c,) for c in group[1:]]  # without its none cell: each alone (failed)
    assert [group_servers(shared, [c]) for c in plan_cells(shared)[:1]] == [1]
    twice = config('baselines = "interleaved-all"\nsegments = 4\nreplicas = 2')  # two processes a server
    assert group_servers(twice, [c for c in plan_cells(twice) if c.workload == "a.jsonl"]) == 10
    ids = {c.cell_id(every) for c in cells}
    assert len(ids) == 20 and not ids & {c.cell_id(shared) for c in plan_cells(shared)}  # measured apart: new ids
    assert not ids & {c.cell_id(config('baselines = "interleaved"\nsegments = 4')) for c in cells}
    assert all(c.key(every)["server_batch_size"] == 2 for c in cells)
    with pytest.raises(SpecscopeError, match=r"field 'segments': expected at most num_requests \(3\), got 4"):
        config('baselines = "interleaved-all"\nsegments = 4\nnum_requests = 3')
    # a none cell comes with the SD cells it is measured beside, as with pairs: none here
    alone = GRID.replace('"none", "ngram", "eagle3"', '"none"').replace("k = [1, 3]\n", "")
    with pytest.raises(SpecscopeError, match="plans no cell"):
        load_sweep_config(write_config(tmp_path, alone.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "interleaved-all"')))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda t: t.replace('workloads = ["a.jsonl", "b.jsonl"]', ""), "workloads"),
        (lambda t: t.replace("k = [1, 3]", "k = [0]"), r"field 'k\[0\]'"),
        (lambda t: t.replace('"none", "ngram", "eagle3"', '"none", "medusa"'), "methods"),
        (lambda t: t.replace("drafts = { eagle3", "drafts_ = { eagle3"), "unknown field"),
        (
            lambda t: t.replace('drafts = { eagle3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" }', ""),
            "eagle3 need",
        ),
        (
            lambda t: t.replace('launch = "vllm"', 'launch = "vllm"\nurl = "http://127.0.0.1:1"'),
            "exactly one",
        ),
        (lambda t: t.replace("max_tokens = 8", "max_tokens = true"), "max_tokens"),
        (lambda t: t + "\nbogus = 1\n", "unknown field"),
        (lambda t: t.replace("[[engines]]", "[[engine]]"), "unknown field"),
        (lambda t: t + "[[", "invalid TOML"),
        (lambda t: t.replace("max_tokens = 8", "max_tokens = 8\nreplicas = 2"), r"field 'replicas': only with baselines"),
        (lambda t: t.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "interleaved-all"\nsegments = 2\nreplicas = 3'),
         r"field 'replicas': expected at most segments \(2\), got 3"),
        (lambda t: t.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "interleaved"\nreplicas = 0'), "replicas"),
    ],
)
def test_config_errors_name_the_field(tmp_path, edit, match):
    with pytest.raises(SpecscopeError, match=match):
        load_sweep_config(write_config(tmp_path, edit(GRID)))


def test_failures_are_recorded_and_the_sweep_goes_on(tmp_path, fake_server):
    text = 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1, 2]\nidle_timeout_s = 0.5\n'
    text += url_engine("refused", refused_url()) + url_engine("http500", fake_server("http500").url)
    text += url_engine("malformed", fake_server("malformed").url) + url_engine(
        "hang", fake_server("hang").url
    )
    text += url_engine("good", fake_server("ok").url)
    text += '\n[[engines]]\nname = "nomodel"\nlaunch = "specscope"\nmodel = "does-not-exist"\n'
    text = text.replace(
        "batch_sizes = [1, 2]", 'batch_sizes = [1, 2]\nmethods = ["none"]\nlaunch_timeout_s = 60'
    )
    config = load_sweep_config(write_config(tmp_path, text))
    start = time.monotonic()
    outcome = run_sweep(config)
    assert time.monotonic() - start < 60
    assert (outcome.total, outcome.ran, outcome.failed) == (12, 12, 10)
    reasons = {
        (r["key"]["engine"]["name"], r["key"]["batch_size"]): (r["status"], r["reason"])
        for r in read_cells(config.output).values()
    }
    assert reasons[("good", 2)] == ("ok", None)
    assert "connection refused" in reasons[("refused", 1)][1]
    assert "HTTP 500" in reasons[("http500", 2)][1]
    assert "malformed stream" in reasons[("malformed", 1)][1]
    assert "timeout" in reasons[("hang", 1)][1]
    assert reasons[("nomodel", 1)][1].startswith("launch failed: server exited with status 2")
    assert "does-not-exist" in reasons[("nomodel", 1)][1]
    rows = json.loads((config.output / "results.json").read_text())
    good = [r for r in rows if r["engine"] == "good"]
    assert [r["num_drafts"] for r in good] == [9, 9]  # the fake counts 3 drafts per request, 3 requests
    again = run_sweep(config)
    assert (again.ran, again.skipped) == (0, 12)
    retried = run_sweep(config, retry_failed=True)
    assert retried.ran == 10


def test_sigkill_then_resume_loses_and_repeats_nothing(tmp_path, fake_server):
    fake = fake_server("ok", delay_s=0.03)
    text = (
        'output = "out"\nworkloads = ["a.jsonl", "b.jsonl"]\nbatch_sizes = [1, 2, 3, 4]\nnum_requests = 4\n'
        + url_engine("fake", fake.url)
    )
    config_path = write_config(tmp_path, text)
    cells_dir = tmp_path / "out" / "cells"
    command = [sys.executable, "-m", "specscope", "sweep", str(config_path), "--format", "json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(cells_dir.glob("*.json"))) < 2:
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    fake.wait_idle()  # responses already on their way are finished (or failed) before counting
    done_before = {p.name: p.read_bytes() for p in cells_dir.glob("*.json")}
    completions_before = fake.completions
    assert 2 <= len(done_before) < 8, "the sweep should be interrupted part-way"
    second = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    after = {p.name: p.read_bytes() for p in cells_dir.glob("*.json")}
    assert len(after) == 8
    assert all(after[name] == data for name, data in done_before.items())  # finished cells untouched
    # each cell sends 1 + B warm-ups (B: its batch size) + 4 requests; the second run ran exactly the
    # cells not yet recorded
    rerun = [json.loads(data)["key"]["batch_size"] for name, data in after.items() if name not in done_before]
    assert fake.completions - completions_before == sum(5 + b for b in rerun)
    assert all(json.loads(data)["status"] == "ok" for data in after.values())
    assert len(json.loads(second.stdout)) == 8


def test_launched_specscope_servers(tmp_path, tiny_model):
    text = (
        f'output = "out"\nworkloads = ["a.jsonl"]\nmethods = ["none", "ngram"]\nk = [2]\nbatch_sizes = [2]\n'
        f"max_tokens = 16\nignore_eos = true\nlaunch_timeout_s = 120\n"
        f'\n[[engines]]\nname = "ref"\nlaunch = "specscope"\nmodel = "{tiny_model}"\nargs = ["--threads", "1"]\n'
    )
    config = load_sweep_config(write_config(tmp_path, text))
    outcome = run_sweep(config)
    rows = json.loads((config.output / "results.json").read_text())
    assert outcome.failed == 0, rows
    ngram = next(r for r in rows if r["method"] == "ngram")
    assert ngram["k"] == 2 and ngram["speedup"] == pytest.approx(
        ngram["throughput"] / ngram["baseline_throughput"]
    )
    assert ngram["num_draft_tokens"] > 0 and ngram["acceptance_rate"] is not None
    with open(config.output / "winners.csv") as handle:
        (won,) = list(csv.DictReader(handle))
    assert won["method"] == ("ngram" if ngram["speedup"] > 1 else "none")  # the report's rule: above 1× its baseline
    from specscope.analysis.measured import read_bench_results

    [cell] = read_bench_results([config.output / "measured.json"])
    assert (cell.dataset, cell.method, cell.k, cell.batch_size) == ("a", "ngram", 2, 2)
    assert cell.measured_speedup == pytest.approx(ngram["speedup"])
    assert sorted(p.name for p in (config.output / "logs").iterdir()) == [
        "ref-ngram-k2-b2.log",
        "ref-none-k0-b2.log",
    ]


def test_url_engines_are_checked_and_learning_methods_marked(tmp_path, ngram_server, capsys):
    """A url engine's label is checked before its cells run; one whose method learns across
    requests (vLLM's suffix) is marked, since it cannot be restarted between cells."""
    from specscope.cli import main

    text = 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1, 2]\nmax_tokens = 8\n'
    text += url_engine("wrong-k", ngram_server.url).replace("k = 3", "k = 5")
    text += url_engine("suffix", ngram_server.url).replace('method = "ngram"', 'method = "suffix"')
    config = load_sweep_config(write_config(tmp_path, text))
    assert main(["sweep", str(config.path)]) == 1
    assert "note: 2 cells have learns_across_requests" in capsys.readouterr().out
    rows = {(r["engine"], r["batch_size"]): r for r in json.loads((config.output / "results.json").read_text())}
    assert rows[("wrong-k", 1)]["status"] == "failed"
    assert rows[("wrong-k", 1)]["reason"].startswith(f"server check: --k 5: the server at {ngram_server.url} shows k=3")
    for batch_size in (1, 2):
        row = rows[("suffix", batch_size)]
        assert row["status"] == "ok" and row["learns_across_requests"] is True
        assert row["verified"].startswith("verified: SD on, k=3")


def test_launched_methods_that_learn_get_a_server_per_cell(tmp_path):
    from specscope.backends.openai.sweep import _server_key

    text = GRID.replace('launch = "vllm"', 'launch = "sglang"')
    config = load_sweep_config(write_config(tmp_path, text))
    keys = {}
    for cell in plan_cells(config):
        keys.setdefault(cell.method, set()).add(_server_key(config, cell))
    assert len(keys["ngram"]) == 2 * 2 * 2  # k x batch sizes x workloads: one server per cell
    assert len(keys["eagle3"]) == 2 * 2  # k x batch sizes: shared by the workloads
    enough_for_segments(tmp_path)
    config = load_sweep_config(write_config(tmp_path, text.replace("max_tokens = 8", 'max_tokens = 8\nbaselines = "interleaved"')))
    groups = {}
    for cell in plan_cells(config):
        groups.setdefault(_server_key(config, cell), []).append(cell)
    sizes = sorted((g[1].method, len(g)) for g in groups.values())  # an interleaved pair's two servers: one group
    assert sizes == [("eagle3", 4)] * 4 + [("ngram", 2)] * 8
    assert all([c.method for c in g][::2] == ["none"] * (len(g) // 2) for g in groups.values())


def test_a_second_sweep_into_the_same_folder_is_refused(tmp_path, fake_server):
    """Two sweeps into one folder both ran every cell, each measured beside the other's load:
    the folder's lock refuses the second while the first holds it, and frees it at the end."""
    import fcntl

    text = 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1]\n'
    config = load_sweep_config(write_config(tmp_path, text + url_engine("good", fake_server("ok").url)))
    (config.output / "cells").mkdir(parents=True)
    with open(config.output / "cells" / ".lock", "a") as held:  # the first sweep, still running
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SpecscopeError, match="another sweep is running into this folder"):
            run_sweep(config)
    assert run_sweep(config).ran == 1  # the lock is gone with the first sweep


def test_config_json_describes_the_tables_beside_it_when_a_run_stops_early(tmp_path, fake_server):
    """config.json was rewritten as a run began, its tables only when a group finished: a run of
    another configuration stopped before that left a config.json that disagreed with them."""
    url = fake_server("ok").url
    first = load_sweep_config(write_config(tmp_path, 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1]\n'
                                                     'max_tokens = 6\n' + url_engine("good", url)))
    run_sweep(first)
    before = {name: (first.output / name).read_bytes() for name in ("config.json", "results.json")}
    second = load_sweep_config(write_config(tmp_path, 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1]\n'
                                                      'max_tokens = 12\n' + url_engine("good", url)))

    def stopped(config, groups):
        raise KeyboardInterrupt
        yield  # a generator, as run_groups is

    with pytest.raises(KeyboardInterrupt):
        run_sweep(second, run_groups=stopped)
    assert {name: (first.output / name).read_bytes() for name in before} == before
    assert json.loads(before["config.json"])["max_tokens"] == 6


def test_a_sweep_refused_by_the_lock_leaves_the_folder_to_the_one_holding_it(tmp_path, fake_server, monkeypatch):
    """Two sweeps started at once into a new folder both saw it missing; the one the lock refused
    removed it — the other's cells/ and lock — as a refused run removes what it made. A run
    refused the lock removes nothing."""
    import fcntl

    import specscope.backends.openai.sweep as sweep_module

    text = 'output = "new/out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1]\n'
    config = load_sweep_config(write_config(tmp_path, text + url_engine("good", fake_server("ok").url)))
    monkeypatch.setattr(sweep_module, "_first_missing", lambda path: tmp_path / "new")  # as both saw it
    (config.output / "cells").mkdir(parents=True)
    with open(config.output / "cells" / ".lock", "a") as held:  # the other sweep made it, and runs
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SpecscopeError, match="another sweep is running into this folder"):
            run_sweep(config)
        assert (config.output / "cells" / ".lock").is_file()


def test_winners_follow_the_reports_rule_not_raw_throughput():
    """With paired baselines raw throughputs are measured at other times: the winner was the
    fastest row (a none cell at 100 tok/s) where n-gram ran 1.25× its own baseline."""
    from specscope.backends.openai.sweep import _winner

    row = {"engine": "e", "workload": "a.jsonl", "batch_size": 1, "status": "ok", "tree": None}
    rows = [{**row, "method": "none", "k": 0, "throughput": 100.0, "speedup": None},
            {**row, "method": "ngram", "k": 1, "throughput": 90.0, "speedup": 1.25},
            {**row, "method": "eagle", "k": 3, "throughput": 95.0, "speedup": 1.1}]
    assert _winner(rows)["method"] == "ngram"
    rows[1]["speedup"], rows[2]["speedup"] = 0.9, 1.0
    assert _winner(rows)["method"] == "none"


def test_a_sweeps_outputs_are_checked_before_its_first_cell_and_a_refused_start_leaves_nothing(tmp_path):
    config = load_sweep_config(write_config(tmp_path, GRID))
    ran = []

    def runner(config, groups):
        ran.append(groups)
        yield from ()

    (config.output / "cells").mkdir(parents=True)  # an empty cells/ beside a user's own table: not replaced
    (config.output / "results.csv").write_text("my notes, not a table\n")
    with pytest.raises(SpecscopeError, match="results.csv: exists and holds no table"):
        run_sweep(config, run_groups=runner)
    (config.output / "results.csv").unlink()
    (config.output / "winners.csv").mkdir()  # found after the first cell, once
    with pytest.raises(SpecscopeError, match="winners.csv: is a directory"):
        run_sweep(config, run_groups=runner)
    assert not ran and (config.output / "winners.csv").is_dir()

    def unreachable(config, groups):  # a cluster that cannot be reached: the folder the run made goes
        raise SpecscopeError("cannot connect")
        yield

    fresh = load_sweep_config(write_config(tmp_path, GRID.replace('output = "out"', 'output = "runs/2026/new"')))
    with pytest.raises(SpecscopeError, match="cannot connect"):
        run_sweep(fresh, run_groups=unreachable)
    assert not (tmp_path / "runs").exists()  # the parents it made go too


def test_url_engines_sharing_a_name_are_one_engine_with_its_none_server_as_baseline(tmp_path, fake_server):
    """Servers already running, each started with one configuration (as vLLM fixes its speculative
    config at start): their SD cells got no speedup, the none server being another engine, and no
    fit could take both. Sharing a name they are one engine; a launched engine's name stays its own,
    and two url servers of one name serving the same method and k are refused."""
    base, sd = fake_server("ok", metrics="none").url, fake_server("ok").url  # 8 tokens a request, in 4 chunks
    head = 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1, 2]\nmax_tokens = 8\n'
    none = f'\n[[engines]]\nname = "ext"\nurl = "{base}"\nmethod = "none"\n'
    config = load_sweep_config(write_config(tmp_path, head + none + url_engine("ext", sd)))
    rows = run_sweep(config).rows
    assert {(r["method"], r["batch_size"], r["status"]) for r in rows} == {
        ("none", 1, "ok"), ("none", 2, "ok"), ("ngram", 1, "ok"), ("ngram", 2, "ok")}
    for r in rows:
        baseline = next(b for b in rows if b["method"] == "none" and b["batch_size"] == r["batch_size"])
        assert r["speedup"] == pytest.approx(r["throughput"] / baseline["throughput"])
    with pytest.raises(SpecscopeError, match=r"url engines named 'ext': two serve ngram k=3"):
        load_sweep_config(write_config(tmp_path, head + none + url_engine("ext", sd) + url_engine("ext", base)))
    launched = '\n[[engines]]\nname = "ext"\nlaunch = "specscope"\nmodel = "m"\n'
    with pytest.raises(SpecscopeError, match=r"engine name 'ext' given 2 times: a launched engine's name must be unique"):
        load_sweep_config(write_config(tmp_path, head + launched + url_engine("ext", sd)))


def test_a_launched_specscope_engine_may_not_stop_its_drafter_early(tmp_path):
    """args = ["--confidence", "0.99"] was passed to a launched `specscope serve`: it drafted fewer
    than k per step (46 draft tokens in 29 drafts at k = 3) while its rows said k = 3."""
    engine = '\n[[engines]]\nname = "ref"\nlaunch = "specscope"\nmodel = "m"\ndrafts = { eagle = "h" }\n'
    head = 'output = "out"\nworkloads = ["a.jsonl"]\nmethods = ["none", "eagle"]\nk = [3]\n'
    for args in ('["--threads", "1", "--confidence", "0.99"]', '["--confidence=0.5"]', '["--conf", "0.5"]'):
        with pytest.raises(SpecscopeError, match=r"engines\[0\]\.args: --conf\S*: the sweep measures fixed-k chains"):
            load_sweep_config(write_config(tmp_path, head + engine + f"args = {args}\n"))
    assert load_sweep_config(write_config(tmp_path, head + engine + 'args = ["--threads", "1"]\n')).engines[0].args


@pytest.mark.parametrize("fields", [
    'methods = ["none", "eagle"]\n', "k = [5, 7]\n", "prompt_lookup_min = 2\n", 'mtp_method = "deepseek_mtp"\n',
    'baselines = "interleaved-all"\nsegments = 2\n', "prompt_lookup_min = 3\n",
])
def test_fields_of_launched_engines_are_refused_where_every_engine_is_a_url(tmp_path, fields):
    """methods, k, baselines, segments and prompt_lookup_* were ignored by a sweep of url engines
    alone (one row `ngram 3`, exit 0), and prompt_lookup_min still went into its cells' keys."""
    head = 'output = "out"\nworkloads = ["a.jsonl"]\n'
    given = ", ".join(line.split(" =")[0] for line in fields.splitlines())
    url = url_engine("ext", "http://127.0.0.1:1")
    with pytest.raises(SpecscopeError, match=rf"sweep\.toml: field\(s\) {given}: no launched engine to use them") \
            as refused:
        load_sweep_config(write_config(tmp_path, head + fields + url))
    # a lookup setting other than the default was in its cells' keys: left out, they are measured again
    assert ("are then measured again" in str(refused.value)) == ("prompt_lookup_min = 2" in fields)
    assert len(plan_cells(load_sweep_config(write_config(tmp_path, head + url)))) == 1
    launched = '\n[[engines]]\nname = "r"\nlaunch = "specscope"\nmodel = "m"\ndrafts = { eagle = "h" }\n'
    methods = "" if "methods" in fields else 'methods = ["none", "eagle"]\n'
    enough_for_segments(tmp_path)  # beside a launched engine they are its
    load_sweep_config(write_config(tmp_path, head + methods + fields + url + launched))


@pytest.mark.parametrize("url", ["http://[::1", "http://[localhost]:8000", "http://[::1:80"])
def test_a_malformed_bracketed_host_is_one_line(tmp_path, url):
    """url = "http://[::1" raised ValueError: Invalid IPv6 URL, a traceback."""
    with pytest.raises(SpecscopeError, match=r"engines\[0\]\.url: expected http://HOST:PORT \(a port 0\.\.65535\)"):
        load_sweep_config(write_config(tmp_path, 'output = "out"\nworkloads = ["a.jsonl"]\n' + url_engine("ext", url)))


def test_a_url_engines_model_drafter_that_drafts_short_of_its_k_fails_its_cells(tmp_path, fake_server):
    """A url server labelled eagle k = 3 whose steps proposed 2 drafts each (the fake's counters):
    no chain of 3; an n-gram server may propose fewer where its match offers fewer."""
    url = fake_server("ok").url
    text = 'output = "out"\nworkloads = ["a.jsonl"]\nbatch_sizes = [1]\nmax_tokens = 8\n'
    text += url_engine("short", url).replace('"ngram"', '"eagle"') + url_engine("lookup", url)
    rows = {r["engine"]: r for r in run_sweep(load_sweep_config(write_config(tmp_path, text))).rows}
    assert rows["lookup"]["status"] == "ok"
    assert rows["short"]["status"] == "failed"
    assert "--k 3: the server at" in rows["short"]["reason"] and "proposed 2.00 drafts per drafting step" \
        in rows["short"]["reason"]
