"""The bundled offline workloads: one small JSON Lines file per synthetic task.

``specscope/data/workloads/{task}.jsonl`` holds :data:`BUNDLED_SIZE` requests of each task of
:mod:`specscope.workloads.tasks` (``code``, ``math``, ``summary``, ``chat``), drawn with seed
:data:`BUNDLED_SEED`. Each line is ``{"id", "prompt", "reference", "answer"}``: ``prompt`` is the
user's message without any chat template, ``reference`` the correct answer and ``answer`` the
part of it that exact-match accuracy compares (see :func:`specscope.workloads.tasks.extract_answer`).
The files are exactly what :func:`bundled_records` generates (a test checks it), and the bundled
models never train on these prompts.
"""

from __future__ import annotations

import json
import random
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specscope.errors import SpecscopeError
from specscope.workloads.tasks import TASKS, generate

if TYPE_CHECKING:
    from specscope.workloads.datasets import Prompt

BUNDLED_SEED = 42
BUNDLED_SIZE = 100


def bundled_records(task: str, n: int = BUNDLED_SIZE, seed: int = BUNDLED_SEED) -> list[dict]:
    """The records of the bundled workload ``task`` (regenerated, not read from disk)."""
    if task not in TASKS:
        raise SpecscopeError(f"unknown bundled workload {task!r} (known: {', '.join(TASKS)})")
    return [{"id": f"{task}-{i:03d}", "prompt": ex.prompt, "reference": ex.reference, "answer": ex.answer}
            for i, ex in enumerate(generate(task, n, seed))]


def bundled_path(task: str) -> Path:
    """The shipped file of the bundled workload ``task``."""
    if task not in TASKS:
        raise SpecscopeError(f"unknown bundled workload {task!r} (known: {', '.join(TASKS)})")
    return Path(str(resources.files("specscope") / "data" / "workloads" / f"{task}.jsonl"))


def read_bundled(task: str) -> list[dict]:
    """The shipped records of ``task`` (``id``, ``prompt``, ``reference``, ``answer``)."""
    path = bundled_path(task)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SpecscopeError(f"{path}: bundled workload missing ({error}); reinstall specscope") from None
    return [json.loads(line) for line in lines if line.strip()]


def bundled_prompts(task: str, n: int = BUNDLED_SIZE, seed: int = BUNDLED_SEED) -> list[Prompt]:
    """``n`` shipped requests of ``task`` (all when ``n`` is larger), sampled with ``seed``, as
    prompts for :func:`specscope.workloads.datasets.to_rows`."""
    from specscope.workloads.datasets import Prompt

    records = read_bundled(task)
    chosen = random.Random(seed).sample(records, min(n, len(records)))
    return [Prompt(r["id"], r["prompt"], r["reference"]) for r in chosen]


def held_out_prompts() -> set[str]:
    """Every bundled prompt: the bundled models' training data leaves these out."""
    return {record["prompt"] for task in TASKS for record in bundled_records(task)}
