"""Bad uses of `specscope serve --tree` (and of its lengths), refused with one line before a port is bound."""

from __future__ import annotations

import pytest
from harness import Case, check

from specscope.zoo.shipped import model_dir

TARGET, DRAFT = str(model_dir("target")), str(model_dir("draft"))

CASES = [
    Case("serve-tree-zero-branching", ["serve", "--model", TARGET, "--tree", "2x0"], r"--tree"),
    Case("serve-tree-orphan-path", ["serve", "--model", TARGET, "--tree", "[(0, 1)]"], r"--tree: .*no parent"),
    Case("serve-tree-with-k", ["serve", "--model", TARGET, "--method", "draft", "--draft", DRAFT, "--k", "3",
                               "--tree", "2x2"], r"--k: not used with --tree"),
    Case("serve-tree-ngram", ["serve", "--model", TARGET, "--method", "ngram", "--tree", "2x2"],
         r"--tree: the 'ngram' method drafts chains only"),
    Case("serve-max-seq-len-past-the-positions", ["serve", "--model", TARGET, "--max-seq-len", "2000"],
         r"--max-seq-len 2000: exceeds the model's max_position_embeddings \(1024\)"),
    Case("serve-tree-without-sd", ["serve", "--model", TARGET, "--tree", "2x2"], r"--tree: tree 2x2 needs an SD method"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)
