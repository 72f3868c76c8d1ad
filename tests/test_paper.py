"""Paper mode against the paper's Figures 10 and 12 (needs ../shared/paper)."""

from __future__ import annotations

import csv
import json

import pytest

from specscope.cli import main
from specscope.cli.paper import read_reference
from specscope.costmodel.linear import H100_LLAMA31_8B
from specscope.sim.grid import SimConfig, simulate
from specscope.trace import load_traces

POLICIES = ["fixed:1", "fixed:3", "fixed:5", "oracle", "oracle-combined:ngram+eagle"]


@pytest.fixture(scope="module")
def grid(paper):
    records, _ = load_traces(sorted(paper.glob("*.jsonl")), lengths="own")
    rows = simulate(records, ["ngram", "eagle", "combined"], POLICIES, H100_LLAMA31_8B,
                    SimConfig(mode="paper", combined=("ngram", "eagle")))
    return rows, read_reference(paper / "figures_gsm8k_sharegpt.csv")


def test_every_cell_matches_the_paper(grid):
    rows, reference = grid
    checked = 0
    for row in rows:
        dataset = "gsm8k" if "gsm8k" in row.dataset else "sharegpt"
        expected = reference[(row.acc, dataset, row.policy, row.batch_size)]
        deterministic = row.acc != "ngram" or row.policy == "oracle"
        tolerance = 0.02 if deterministic else 0.04
        assert abs(row.speedup - expected) <= tolerance, (row, expected)
        checked += 1
    assert checked == 2 * 9 * 6


def test_simulate_cli_contract(paper, tmp_path, capsys):
    out = tmp_path / "cells.csv"
    traces = [str(p) for p in sorted(paper.glob("*.jsonl"))]
    assert main(["simulate", *traces, "--acc", "combined", "--policies", "oracle-combined",
                 "--batch-sizes", "1,8,16,32,64,128", "--cost-model", "h100-llama3.1-8b",
                 "--mode", "paper", "-o", str(out)]) == 0
    assert "oracle-combined:ngram+eagle" in capsys.readouterr().out
    rows = list(csv.DictReader(out.open()))
    assert {"dataset", "acc", "policy", "batch_size", "speedup"} <= set(rows[0])
    assert {r["dataset"] for r in rows} == {"llama3.1-8b_gsm8k", "llama3.1-8b_sharegpt"}
    assert {r["acc"] for r in rows} == {"combined"} and len(rows) == 12
    assert main(["simulate", *traces, "--acc", "ngram,eagle", "--policies", "fixed:3,adaptive,oracle",
                 "--batch-sizes", "1,32", "--format", "json"]) == 0
    cells = json.loads(capsys.readouterr().out)
    assert len(cells) == 2 * 2 * 3 * 2 and all(c["mode"] == "mixed" for c in cells)
    assert all(c["time_verification_s"] > 0 for c in cells)


def test_paper_command(paper, capsys):
    assert main(["paper", "--traces-dir", str(paper)]) == 0
    out = capsys.readouterr().out
    worst = float(out.split("largest difference from the paper's figures: ")[1].split()[0])
    assert worst <= 0.02
