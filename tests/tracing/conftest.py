"""Tiny random checkpoints for tracing tests (shared with tests/engine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from tiny_checkpoints import llama_config, write_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def target_and_draft(tmp_path_factory) -> tuple[Path, Path]:
    target = tmp_path_factory.mktemp("target")
    write_checkpoint(target, llama_config())
    draft = tmp_path_factory.mktemp("draft")
    write_checkpoint(draft, llama_config(), seed=0, noise=0.01)
    return target, draft
