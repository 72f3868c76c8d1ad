"""Fixtures: tiny random checkpoints (Llama, Qwen3, a draft) in session tmp dirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_checkpoints import llama_config, qwen3_config, write_checkpoint


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("llama")
    write_checkpoint(directory, llama_config())
    return directory


@pytest.fixture(scope="session")
def qwen3_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("qwen3")
    write_checkpoint(directory, qwen3_config())
    return directory


@pytest.fixture(scope="session")
def draft_dir(tmp_path_factory) -> Path:
    """The Llama target with noisy weights: same vocabulary, agrees only part of the time."""
    directory = tmp_path_factory.mktemp("draft")
    write_checkpoint(directory, llama_config(), seed=0, noise=0.01)
    return directory
