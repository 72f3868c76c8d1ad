"""Bad `--tree` inputs of `specscope bench`: refused in one line before any model is loaded."""

from __future__ import annotations

import json

import pytest
from harness import Case, check

WORKLOAD = {"w.jsonl": json.dumps({"id": "a", "prompt_token_ids": [4, 5, 6, 4, 5, 6]}) + "\n"}
REF = ["bench", "--model", "m", "--workload", "w.jsonl", "--method", "eagle", "--draft", "d"]

CASES = [
    Case("tree-and-k", [*REF, "--k", "3", "--tree", "2x1x1"], r"argument --tree: not allowed with argument --k", WORKLOAD),
    Case("tree-zero-width", [*REF, "--tree", "2x0x1"], r"--tree.*expected an integer >= 1, got 0", WORKLOAD),
    Case("tree-not-a-shape", [*REF, "--tree", "wide"], r"--tree.*expected a tree as branching per depth", WORKLOAD),
    Case("tree-missing-parent", [*REF, "--tree", "[(0,), (1, 0)]"], r"--tree.*path \[1, 0\] has no parent \[1\]",
         WORKLOAD),
    Case("tree-on-openai", ["bench", "--backend", "openai", "--url", "http://127.0.0.1:9", "--workload", "w.jsonl",
                            "--tree", "2x1"], r"--tree: only with --backend reference", WORKLOAD),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)
