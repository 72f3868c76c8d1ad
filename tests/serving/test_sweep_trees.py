"""`specscope sweep` with ``trees``: tree cells beside the chain cells, their ids and rows."""

from __future__ import annotations

import json
from pathlib import Path

from serving_helpers import write_workload

from specscope.backends.openai.sweep import RECORD_FIELDS, results
from specscope.backends.openai.sweep_config import load_sweep_config, plan_cells
from specscope.cli import main

GRID = """
output = "out"
workloads = ["a.jsonl"]
methods = ["none", "eagle3"]
k = [1, 3]
trees = ["2x2x1", "3x1"]
batch_sizes = [1, 4]

[[engines]]
name = "vllm"
launch = "vllm"
model = "meta-llama/Llama-3.1-8B-Instruct"
drafts = { eagle3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" }
"""


def write_config(tmp_path: Path, text: str) -> Path:
    write_workload(tmp_path / "a.jsonl", 4)  # B = 4 needs 4 requests at once
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def test_tree_cells_beside_chain_cells(tmp_path):
    config = load_sweep_config(write_config(tmp_path, GRID))
    cells = plan_cells(config)
    # none: 2 batch sizes; eagle3: (2 k + 2 trees) x 2 batch sizes
    assert len(cells) == 2 + 8
    trees = {(c.tree.name, c.k, c.batch_size) for c in cells if c.tree is not None}
    assert trees == {("2x2x1", 10, 1), ("2x2x1", 10, 4), ("3x1", 6, 1), ("3x1", 6, 4)}  # k: the tree's nodes
    assert {c.k for c in cells if c.method == "eagle3" and c.tree is None} == {1, 3}
    ids = [c.cell_id(config) for c in cells]
    assert len(set(ids)) == len(ids)
    [tree_cell] = [c for c in cells if c.tree is not None and c.tree.name == "3x1" and c.batch_size == 4]
    assert tree_cell.labels() == {"engine": "vllm", "workload": "a.jsonl", "method": "eagle3", "k": 6,
                                  "tree": "3x1", "tree_nodes": 6, "tree_depth": 2, "batch_size": 4, "baseline_for": None}


def test_a_tree_cell_differs_from_a_chain_with_as_many_drafts(tmp_path):
    config = load_sweep_config(write_config(tmp_path, GRID.replace("k = [1, 3]", "k = [6]")))
    by_tree = {(c.tree.name if c.tree else None): c.cell_id(config) for c in plan_cells(config)
               if c.method == "eagle3" and c.batch_size == 1 and c.k == 6}
    assert set(by_tree) == {None, "3x1"} and by_tree[None] != by_tree["3x1"]


def test_chain_cell_ids_do_not_change_when_trees_are_added(tmp_path):
    without = load_sweep_config(write_config(tmp_path, GRID.replace('trees = ["2x2x1", "3x1"]\n', "")))
    with_trees = load_sweep_config(write_config(tmp_path, GRID))
    chains = [c.cell_id(with_trees) for c in plan_cells(with_trees) if c.tree is None]
    assert chains == [c.cell_id(without) for c in plan_cells(without)]


def test_trees_alone_run_no_chain_cells(tmp_path):
    config = load_sweep_config(write_config(tmp_path, GRID.replace("k = [1, 3]\n", "")))
    assert {(c.method, c.tree.name if c.tree else None) for c in plan_cells(config)} == {
        ("none", None), ("eagle3", "2x2x1"), ("eagle3", "3x1")}


def test_rows_and_dry_run_carry_the_tree(tmp_path, capsys):
    config = load_sweep_config(write_config(tmp_path, GRID))
    cell = next(c for c in plan_cells(config) if c.tree is not None)
    record = {"cell_id": cell.cell_id(config), "key": cell.key(config), "status": "failed",
              "reason": "launch failed: no GPU", "started_at": 0.0, "finished_at": 0.0, "result": None}
    assert set(record) == set(RECORD_FIELDS)
    (config.output / "cells").mkdir(parents=True)
    (config.output / "cells" / f"{record['cell_id']}.json").write_text(json.dumps(record))
    [row] = results(config)
    assert (row["tree"], row["tree_nodes"], row["tree_depth"], row["k"]) == ("2x2x1", 10, 3, 10)
    assert main(["sweep", str(config.path), "--dry-run", "--format", "json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert [(r["tree"], r["state"]) for r in dry if r["cell_id"] == record["cell_id"]] == [("2x2x1", "failed")]
    assert sum(r["tree"] is None for r in dry) == 2 + 4


def test_dry_run_says_which_recorded_cells_a_run_measures_again(tmp_path, capsys):
    """Paired baselines: a recorded SD cell whose ``none`` half is missing is measured again with
    it, and the dry run says so (it showed plain ``ok``); with --retry-failed a failed cell too,
    and its recorded half with it."""
    config = load_sweep_config(write_config(tmp_path, 'baselines = "paired"\n' + GRID.replace('trees = ["2x2x1", "3x1"]\n', "")))
    cells = plan_cells(config)
    sd = next(c for c in cells if c.method == "eagle3" and c.batch_size == 1 and c.k == 1)
    alone = next(c for c in cells if c.method == "eagle3" and c.batch_size == 4 and c.k == 3)
    pair = [c for c in cells if sd.server in (c.server, c.baseline_for) and c.batch_size == 1]
    [partner] = [c for c in cells if c.baseline_for == alone.server and c.batch_size == 4]
    (config.output / "cells").mkdir(parents=True)
    for cell, status in ((sd, "ok"), (alone, "failed"), (partner, "ok")):
        (config.output / "cells" / f"{cell.cell_id(config)}.json").write_text(json.dumps(
            {"cell_id": cell.cell_id(config), "key": cell.key(config), "status": status, "reason": None,
             "started_at": 0.0, "finished_at": 0.0, "result": {"output_tokens": 1, "duration_s": 1.0, "throughput": 1.0} if status == "ok" else None}))
    states = {}
    for extra in ([], ["--retry-failed"]):
        assert main(["sweep", str(config.path), "--dry-run", "--format", "json", *extra]) == 0
        states[bool(extra)] = {r["cell_id"]: r["state"] for r in json.loads(capsys.readouterr().out)}
    assert len(pair) == 2 and [states[False][c.cell_id(config)] for c in pair].count("ok, measured again") == 1
    assert [states[False][c.cell_id(config)] for c in (alone, partner)] == ["failed", "ok"]  # a whole pair
    assert [states[True][c.cell_id(config)] for c in (alone, partner)] == ["failed, measured again", "ok, measured again"]
