"""Fixtures for the serving tests (helpers live in serving_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from serving_helpers import FakeServer, start_server, write_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("prometheus_client")
    return write_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def ngram_server(tiny_model):
    running = start_server(tiny_model, method="ngram", k=3, max_batch_size=32)
    yield running
    running.close()


@pytest.fixture
def fake_server():
    """A factory: ``fake_server("http500")``; every fake is closed after the test."""
    made = []

    def make(mode: str = "ok", delay_s: float = 0.0, metrics: str = "vllm", refuse=None) -> FakeServer:
        made.append(FakeServer(mode, delay_s, metrics, refuse))
        return made[-1]

    yield make
    for fake in made:
        fake.close()
