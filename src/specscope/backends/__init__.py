"""Backends that run a benchmark for ``specscope bench``.

:data:`BENCH_BACKENDS` names each backend's module, which exposes
``run_bench(config: BenchConfig) -> BenchResult``. Modules are imported only when picked, so
heavy libraries load only for the backend a user runs. (Other modules of this package, such
as the OpenAI-compatible server client, serve other verbs.)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specscope.errors import SpecscopeError

BATCHING = ("distinct", "replicate")


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark: no-SD and SD (``method``) on the same requests at each batch size.

    ``batching="distinct"``: up to B different requests decode together (continuous batching);
    ``"replicate"``: each request is run as B identical copies (the paper's batch size B).
    ``temperature == 0`` is greedy, and then SD output is checked against no-SD output.
    """

    model_dir: Path
    workload: Path
    method: str = "ngram"
    draft_dir: Path | None = None
    k: int = 3
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    max_tokens: int = 128
    batching: str = "distinct"
    dtype: str = "float32"
    device: str = "cpu"
    ignore_eos: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    repeats: int = 3  # each batch size runs no-SD and SD this many times (see the backend)


@dataclass
class BenchResult:
    """``rows``: one dict per batch size (see the backend for fields); ``records``: one JSON
    string per engine step, baseline steps (method ``none``) and SD steps together."""

    rows: list[dict[str, Any]]
    records: list[str] = field(default_factory=list)


BENCH_BACKENDS: dict[str, str] = {"reference": "specscope.backends.reference"}


def get_backend(name: str):
    """The module of bench backend ``name`` (it has ``run_bench``)."""
    if name not in BENCH_BACKENDS:
        raise SpecscopeError(
            f"--backend: expected one of {', '.join(sorted(BENCH_BACKENDS))}, got {name!r}"
        )
    return importlib.import_module(BENCH_BACKENDS[name])
