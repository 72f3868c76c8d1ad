"""The default study: the bundled models (target, draft, EAGLE, MTP and EAGLE-3 heads) on the bundled
workloads (code editing, step-by-step arithmetic, extractive summaries, chat), on this CPU."""

from __future__ import annotations

from pathlib import Path

from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.study.config import BUNDLED_REQUESTS, StudyConfig
from specscope.workloads.bundled import TASKS, bundled_path
from specscope.zoo.shipped import ZOO_DRAFTERS, model_dir


def bundled_study(out_dir: Path) -> StudyConfig:
    """The bundled study, writing into ``out_dir``. Its traces are also replayed against the
    paper's H100 cost model for Llama-3.1-8B (these acceptance patterns at that model's costs)
    and an H100 roofline of the bundled target itself."""
    target = model_dir("target")
    return StudyConfig(
        model_dir=target,
        workloads=[bundled_path(task) for task in TASKS],
        out_dir=out_dir,
        drafters={name: model_dir(name) for name in ZOO_DRAFTERS},
        requests=BUNDLED_REQUESTS,
        replay_cost_models=(DEFAULT_COST_MODEL, f"roofline:h100:{target / 'config.json'}"),
    )
