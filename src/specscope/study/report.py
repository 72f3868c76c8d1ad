"""The study's report: the issue-2 report over the study's traces, with its fitted cost model,
the measured steps (time split), measured vs simulated speedups (the measured figure), and the
study's trees against the chains of their depth (the tree figure and its crossover). Every
proposal it simulates stops at the depth the study measured its proposer to (its chains' k; the
tree drafter's trees' depth): the fitted cost model is not extrapolated to chains it never ran
(the study's traces reach k_max, which the replay tables price under other engines' cost
models)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

from specscope.analysis.measured import MeasuredCell
from specscope.report.config import ReportConfig
from specscope.sim.grid import SimConfig
from specscope.study.config import StudyConfig
from specscope.study.run import replay_files, workload_stem


def study_report(config: StudyConfig, traces: Sequence[Path], fidelity: Sequence[MeasuredCell],
                 steps: Sequence[Path]) -> Path:
    from specscope.report.build import build_report

    trees = config.trees if config.tree_drafter else ()  # measured only with a drafter that drafts trees
    deepest = max([config.k, *(tree.depth for tree in trees)])  # the drafting its cost model measured
    also = ([f"of k = {config.measured_second_k} for {', '.join(config.second_k_drafters)}"] if config.second_k_drafters
            else []) + ([f"stopped at the confidence {config.confidence_p:g} for {', '.join(config.confidence_drafters)}"]
                        if config.confidence_drafters else [])
    first = f" (and {' and '.join(also)} on {workload_stem(config.workloads[0])})" if also and config.workloads else ""
    measured = f"chains of k = {config.k}{first}" + (f" and trees {max(t.depth for t in trees)} deep" if trees else "")
    why = (f"the study measured their chains of at most k = {config.k} (its trees: {config.tree_drafter}'s), and its "
           f"fitted cost model prices no deeper drafting of them: every policy of theirs here, adaptive and the oracle "
           f"too, proposes at most {config.k} (measure longer chains with study --k)")  # one note names them all
    shallower = tuple((name, config.k, why) for name in config.methods
                      if name != config.tree_drafter) if deepest > config.k else ()
    report = dataclasses.replace(
        ReportConfig(), cost_model=str(config.cost_model_path),
        sim=SimConfig(mode="mixed", batch_sizes=tuple(config.batch_sizes)),
        ks=tuple(range(1, config.k_max + 1)), steps=tuple(str(s) for s in steps), measured=tuple(fidelity),
        measured_by="measured by this study: its measured/ and learned/ runs",
        trees=tuple(tree.name for tree in trees), tree_drafters=(config.tree_drafter,) if trees else None,
        policy=str(config.policy_path) if config.policy_path.exists() else None,
        beside=("fidelity.csv", *sorted(replay_files(config))), proposer_depths=shallower,
    ).held_to(deepest, f"the study measured {measured}, and its fitted cost "
                       f"model prices no deeper proposal: every policy here, adaptive and the oracles too, proposes "
                       f"at most {deepest}" + (f" ({config.tree_drafter}'s; the others' {config.k})" if shallower else "")
                       + f" (measure longer chains with study --k; the replay_*.csv tables go to k = {config.k_max} "
                       "under other engines' cost models)")
    return build_report([str(t) for t in traces], config.out_dir, report, study=True).index
