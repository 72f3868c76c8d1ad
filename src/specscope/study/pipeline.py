"""The study's stages in order (see :mod:`specscope.study.run`), then the report."""

from __future__ import annotations

from typing import Callable

from specscope.study.config import StudyConfig
from specscope.study.run import (
    fidelity_stage,
    first_requests,
    fit_stage,
    measure_stage,
    policy_stage,
    policy_work_stage,
    replay_stage,
    steps_files,
    trace_stage,
)


def run_study(config: StudyConfig, say: Callable[[str], None]) -> None:
    """Run every stage; ``say`` receives one line per finished piece of work."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    if config.requests is not None:
        config.workloads = [first_requests(w, config.requests, config.out_dir / "workloads") for w in config.workloads]
    traces = trace_stage(config, say)
    measured = measure_stage(config, say)
    cost = fit_stage(config, say)
    learned = policy_stage(config, traces, measured, cost, say)
    cost = policy_work_stage(config, cost, say)
    fidelity = fidelity_stage(config, traces, measured + learned, cost, say)
    replay_stage(config, traces, say)
    from specscope.study.report import study_report

    index = study_report(config, traces, fidelity, steps_files(config))
    say(f"report  {index}")
