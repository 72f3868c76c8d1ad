"""Sweeps and tracing on a real two-node Ray cluster (see conftest.py): placement by custom
resources, a sharded trace byte-identical to a one-process trace, and a worker killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import WORKLOADS, ZOO, actor_pids, engine, write_sweep

from specscope.backends.openai.sweep import read_cells, run_sweep
from specscope.backends.openai.sweep_config import load_sweep_config, plan_cells
from specscope.distributed.sweep import SweepProgress, group_resources, ray_group_runner
from specscope.errors import SpecscopeError

pytestmark = pytest.mark.slow  # a Ray cluster and specscope servers


def placements(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "ray-placement.jsonl").read_text().splitlines()]


def test_sweep_cli_places_cells_by_resources_and_resumes_after_driver_sigkill(ray_cluster, tmp_path):
    config = load_sweep_config(write_sweep(tmp_path, engine("a", {"nodeA": 1}) + engine("b", {"nodeB": 1})))
    cells = plan_cells(config)
    assert len(cells) == 8  # 2 engines x (none, ngram k=2) x 2 workloads
    command = [sys.executable, "-m", "specscope", "sweep", str(config.path), "--ray", ray_cluster.address,
               "--format", "json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cells_dir, deadline = config.output / "cells", time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None and len(list(cells_dir.glob("*.json"))) < 2:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    done_before = {p.name: p.read_bytes() for p in cells_dir.glob("*.json")}
    assert 2 <= len(done_before) < 8, "the driver should be killed part-way"
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert second.returncode == 0, second.stderr
    after = {p.name: p.read_bytes() for p in cells_dir.glob("*.json")}
    assert len(after) == 8 and all(after[name] == data for name, data in done_before.items())
    engine_of = {c.cell_id(config): c.engine.name for c in cells}
    ran_on = {p["cell_id"]: p["node_id"] for p in placements(config.output)}  # the last run of each cell
    assert sorted(ran_on) == sorted(engine_of)
    for cell_id, name in engine_of.items():
        assert ran_on[cell_id] == ray_cluster.nodes[{"a": "nodeA", "b": "nodeB"}[name]]
    rows = json.loads(second.stdout)
    assert sorted(r["cell_id"] for r in rows) == sorted(engine_of)
    assert all(r["status"] == "ok" and r["throughput"] > 0 for r in rows), [r["reason"] for r in rows]
    assert all(r["speedup"] is not None for r in rows if r["method"] == "ngram")
    assert all(r["servers_sharing_node"] == 0 for r in rows)  # one engine a node, its groups one at a time


def test_a_killed_worker_reruns_its_cell_and_every_cell_appears_once(ray_cluster, tmp_path):
    config = load_sweep_config(write_sweep(tmp_path, engine("ref")))  # 4 cells, 2 groups (servers)
    cells = {c.cell_id(config) for c in plan_cells(config)}
    outcome: list = []
    driver = threading.Thread(target=lambda: outcome.append(
        run_sweep(config, run_groups=ray_group_runner(ray_cluster.address))))
    driver.start()
    cells_dir, killed = config.output / "cells", None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline:  # after a first cell, during another
        running = actor_pids(ray_cluster.sids, "ray::GroupActor.run")
        if cells_dir.is_dir() and any(cells_dir.iterdir()) and running:
            killed = running[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    driver.join(180)
    assert killed is not None and not driver.is_alive() and outcome
    assert outcome[0].failed == 0, [r.get("reason") for r in outcome[0].rows]
    recorded = read_cells(config.output)
    assert set(recorded) == cells and all(r["status"] == "ok" for r in recorded.values())
    rows = json.loads((config.output / "results.json").read_text())
    assert sorted(r["cell_id"] for r in rows) == sorted(cells)
    runs = placements(config.output)
    assert sorted(p["cell_id"] for p in runs) == sorted(cells)  # each cell's result arrived once
    # an actor per group; the killed one is restarted when its group had a cell left (the kill may
    # land just after its last cell, and then there is nothing to rerun)
    assert len({p["pid"] for p in runs}) >= 2


def test_a_cell_is_placed_before_its_record_is_handed_over(ray_cluster, tmp_path):
    """ray-placement.jsonl holds a cell's line before the caller writes its record: a driver killed
    in between leaves a run without a record, placed again by the rerun (whose line, later, is the
    cell's last). Written after the record (stop 55), a driver killed in between left a recorded
    cell with no line at all, which the rerun never placed: the resume test above failed so."""
    config = load_sweep_config(write_sweep(tmp_path, engine("ref")))
    groups = [[cell] for cell in plan_cells(config)[:1]]
    config.output.mkdir(parents=True, exist_ok=True)
    run = ray_group_runner(ray_cluster.address)(config, groups)
    record = next(run)  # handed over, not yet written by the caller
    assert record["status"] == "ok", record.get("reason")
    assert [p["cell_id"] for p in placements(config.output)] == [record["cell_id"]]
    assert next(run, None) is None


def test_sharded_trace_is_byte_identical_and_resumes(ray_cluster, tmp_path):
    from specscope.distributed.trace import ray_batch_mapper
    from specscope.engine.loading import load_tokenizer
    from specscope.tracing.run import ProposerSpec, trace_workload
    from specscope.workloads.jsonl import read_workload

    requests = read_workload(WORKLOADS / "math.jsonl", load_tokenizer(ZOO / "target"))[:6]
    specs = [ProposerSpec("ngram"), ProposerSpec("draft", ZOO / "draft")]
    settings = {"k_max": 4, "max_tokens": 12, "batch_size": 2, "dataset": "math"}
    one = tmp_path / "one.jsonl"
    assert trace_workload(ZOO / "target", specs, requests, one, **settings) == 6
    sharded = tmp_path / "sharded.jsonl"
    mapper = ray_batch_mapper(ray_cluster.address, workers=2)
    assert trace_workload(ZOO / "target", specs, requests, sharded, map_batches=mapper, **settings) == 6
    assert sharded.read_bytes() == one.read_bytes()
    first_batch = b"".join(one.read_bytes().splitlines(keepends=True)[:2])
    sharded.write_bytes(first_batch + b'{"id": "half-writ')  # killed after one batch, mid-line
    assert trace_workload(ZOO / "target", specs, requests, sharded, map_batches=mapper, **settings) == 4
    assert sharded.read_bytes() == one.read_bytes()
    with pytest.raises(SpecscopeError, match="traced with other settings: k_max"):
        trace_workload(ZOO / "target", specs, requests, sharded, map_batches=mapper, **{**settings, "k_max": 5})


def test_a_replica_that_refuses_its_job_fails_the_trace_once_in_one_line(ray_cluster, tmp_path):
    """A drafter of another tokenizer, refused on the worker: the trace stops with the refusal's
    one line (Ray restarted the failed replica three times and printed its traceback each time)."""
    import json
    import shutil

    from specscope.distributed.trace import ray_batch_mapper
    from specscope.engine.loading import load_tokenizer
    from specscope.tracing.run import ProposerSpec, trace_workload
    from specscope.workloads.jsonl import read_workload

    draft = tmp_path / "draft"
    shutil.copytree(ZOO / "draft", draft)
    tokenizer = json.loads((draft / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    (a, i), (b, j) = list(vocab.items())[10:12]
    vocab[a], vocab[b] = j, i  # two tokens swap ids
    (draft / "tokenizer.json").write_text(json.dumps(tokenizer))
    requests = read_workload(WORKLOADS / "math.jsonl", load_tokenizer(ZOO / "target"))[:2]
    with pytest.raises(SpecscopeError, match=r"^--ray: a trace replica refused: .*draft/tokenizer\.json: 2 tokens "
                                             r"differ in id or meaning"):
        trace_workload(ZOO / "target", [ProposerSpec("draft", draft)], requests, tmp_path / "t.jsonl", k_max=2,
                       max_tokens=4, batch_size=2, map_batches=ray_batch_mapper(ray_cluster.address, workers=1))


def test_group_resources_from_tensor_parallel_size_and_config(tmp_path):
    def spec(launch: str, args: list[str], resources: dict | None = None):
        text = (f'output = "out"\nworkloads = ["{WORKLOADS / "chat.jsonl"}"]\n[[engines]]\nname = "e"\n'
                f'launch = "{launch}"\nmodel = "m"\nargs = {json.dumps(args)}\n')
        if resources:
            text += "resources = { " + ", ".join(f'{k} = {v}' for k, v in resources.items()) + " }\n"
        (tmp_path / "s.toml").write_text(text)
        return load_sweep_config(tmp_path / "s.toml").engines[0]

    assert group_resources(spec("vllm", [])) == {"num_gpus": 1, "num_cpus": 1, "resources": {}}
    assert group_resources(spec("vllm", ["--tensor-parallel-size", "4"], {"H100": 1}))["num_gpus"] == 4
    assert group_resources(spec("vllm", ["-tp=2"], {"H100": 1}))["resources"] == {"H100": 1}
    assert group_resources(spec("sglang", ["--tp", "8"]))["num_gpus"] == 8
    assert group_resources(spec("specscope", ["--threads", "1"])) == {"num_gpus": 0, "num_cpus": 1, "resources": {}}
    assert group_resources(spec("vllm", ["--tp", "2"], {"GPU": 3, "CPU": 4})) == {
        "num_gpus": 3, "num_cpus": 4, "resources": {}}
    assert group_resources(spec("vllm", ["--tp", "2"], {"H100": 1}), servers=2) == {  # an interleaved pair
        "num_gpus": 4, "num_cpus": 2, "resources": {"H100": 2}}
    with pytest.raises(SpecscopeError, match="tensor-parallel size, got 'two'"):
        group_resources(spec("vllm", ["--tensor-parallel-size", "two"]))


def test_progress_counts_done_failed_and_running_per_node():
    with SweepProgress(total=4) as progress:
        progress.update(0, "10.0.0.1/aaaaaa")
        progress.update(1, "10.0.0.2/bbbbbb")
        progress.update(2, "10.0.0.1/aaaaaa")
        assert progress.bar.description == "sweep: 0 failed, 3 running on 10.0.0.1/aaaaaa ×2, 10.0.0.2/bbbbbb ×1"
        progress.update(0, None, {"status": "failed"}, group_done=True)
        progress.update(1, "10.0.0.3/cccccc", {"status": "ok"})  # restarted elsewhere
        assert progress.bar.description == "sweep: 1 failed, 2 running on 10.0.0.1/aaaaaa ×1, 10.0.0.3/cccccc ×1"
        assert progress.bar.done == 2


def test_each_cell_says_how_many_other_servers_shared_its_node():
    """Groups on one node share its cores: a cell counts the servers of the other groups up on
    its node while it ran (from its group's placement or previous cell to its end; group 1 runs
    three servers at once); a group gone before the cell began, or on another node, does not
    count, nor does a group whose last cell failed once it is down, nor a group's old node once
    Ray restarted it elsewhere."""
    from specscope.distributed.sweep import NodeShare

    share = NodeShare([1, 3, 1, 1])
    share.up(0, "n1", 0.0)
    share.up(1, "n1", 1.0)
    share.up(2, "n2", 1.0)
    assert share.cell_ended(1, "n1", 2.0) == 1  # group 0 up all along
    share.down(1, 2.0)
    assert share.cell_ended(2, "n2", 3.0) == 0  # alone on its node
    assert share.cell_ended(0, "n1", 4.0) == 3  # group 1's three servers were up until 2.0, this cell since 0.0
    assert share.cell_ended(0, "n1", 5.0) == 0  # this cell ran 4.0-5.0: group 1 was gone
    share.up(3, "n1", 5.5)
    share.down(3, 6.0)  # its only cell failed: no placement, no cell_ended
    assert share.cell_ended(0, "n1", 7.0) == 1  # up 5.5-6.0, within this cell's 5.0-7.0
    assert share.cell_ended(0, "n1", 8.0) == 0  # group 3 stays down
    share.up(2, "n1", 8.5)  # group 2 restarted on n1: gone from n2
    share.up(3, "n2", 9.0)
    assert share.cell_ended(3, "n2", 10.0) == 0  # group 2 left n2 at 8.5, before this cell's 9.0
    assert share.cell_ended(2, "n1", 10.0) == 1  # group 0, still up on n1


def test_a_workers_failure_is_told_by_what_it_raised():
    """Ray's header line (`ray::Tracer.trace() (pid=…)`, in colour) stood in for the error a
    worker raised; an actor that failed to start keeps only the text of its traceback."""
    from specscope.distributed.cluster import worker_failure
    from specscope.errors import SpecscopeError

    class TaskError(Exception):  # as Ray's RayTaskError: the worker's exception in .cause
        def __init__(self, cause: BaseException) -> None:
            super().__init__("\x1b[36mray::Tracer.trace()\x1b[39m (pid=7)")
            self.cause = cause

    assert worker_failure(TaskError(SpecscopeError("d: no config.json"))) == "d: no config.json"
    assert worker_failure(TaskError(RuntimeError("boom\nand more"))) == "RuntimeError: boom"
    died = ("The actor died because of an error raised in its creation task, \x1b[36mray::Tracer.__init__()\x1b[39m\n"
            '  File "run.py", line 3, in __init__\n    raise\nspecscope.errors.SpecscopeError: d: no config.json')
    assert worker_failure(Exception(died)) == "d: no config.json"
    assert worker_failure(Exception("The actor died unexpectedly before finishing this task.\n\tpid: 9")) == \
        "worker lost: The actor died unexpectedly before finishing this task."
