"""Bad inputs of ``--ray``: refused in one line before anything runs or is written, Ray or not."""

from __future__ import annotations

import sys

import pytest
from harness import Case, check
from test_sweep_inputs import config

SWEEP_RAY = ["sweep", "s.toml", "--ray", "127.0.0.1:1"]
CASES = [
    Case("resources-negative", SWEEP_RAY, r"s\.toml: field 'engines\[0\]\.resources\.H100': expected a number >= 0",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\nresources = { H100 = -1 }\n')),
    Case("resources-not-a-table", SWEEP_RAY, r"engines\[0\]\.resources: expected a table of Ray resources",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\nresources = 1\n')),
    Case("tensor-parallel-not-a-number", SWEEP_RAY,
         r"s\.toml: field 'engines\[0\]\.args': expected a positive tensor-parallel size, got 'two'",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\n'
                       'args = ["--tensor-parallel-size", "two"]\n')),
    Case("tensor-parallel-missing-value", SWEEP_RAY,
         r"field 'engines\[0\]\.args': expected a positive tensor-parallel size, got ''",
         config(engine='\n[[engines]]\nname = "v"\nlaunch = "sglang"\nmodel = "m"\nargs = ["--tp"]\n')),
    Case("ray-address-empty", ["sweep", "s.toml", "--ray", " "], r"--ray: expected local, auto or a cluster address",
         config()),
    Case("ray-workers-without-ray", ["trace", "--model", "m", "--proposers", "ngram", "--workload", "w.jsonl",
                                     "-o", "t.jsonl", "--ray-workers", "2"], r"--ray-workers: needs --ray", config()),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("verb", [["sweep", "s.toml"], ["trace", "--model", "m", "--proposers", "ngram",
                                                         "--workload", "w.jsonl", "-o", "t.jsonl"]])
def test_without_ray_says_how_to_install_it(verb, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    check(Case("no-ray", [*verb, "--ray", "local"], r"^specscope: error: --ray: Ray is not installed; install it with: "
               r"pip install 'specscope\[ray\]'$", config()), tmp_path, monkeypatch)
