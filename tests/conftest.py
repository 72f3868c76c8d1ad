"""Shared fixtures: the paper's public traces (skipped with a reason when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:  # the tests' models are tiny: one thread each avoids two cores fighting over them
    import torch

    torch.set_num_threads(1)
except ImportError:
    pass

REPO = Path(__file__).resolve().parents[1]


def paper_dir() -> Path | None:
    """``$SPECSCOPE_PAPER_DIR``, else ``../shared/paper`` beside the repository, if present."""
    candidates = [os.environ.get("SPECSCOPE_PAPER_DIR"), str(REPO.parent / "shared" / "paper")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "llama3.1-8b_gsm8k.jsonl").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def paper() -> Path:
    folder = paper_dir()
    if folder is None:
        pytest.skip("the paper's traces are absent: set SPECSCOPE_PAPER_DIR to shared/paper "
                    "(SpecDecode-Bench simulator repository, data/llama3.1-8B/)")
    return folder
