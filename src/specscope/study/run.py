"""Run a study stage by stage; every stage writes files and is skipped when they exist.

1. trace — teacher-forced traces of every proposer (``traces/<workload>.jsonl``, per request);
2. measure — no-SD and SD throughput with the reference engine
   (``measured/<workload>__<method>.json`` and ``….steps.jsonl``, per cell);
3. fit — the linear cost model fitted to all measured steps (``costmodel.json``);
4. fidelity — simulated vs measured speedup (``fidelity.csv``);
5. replay — the traces against other cost models (``replay_<name>.csv``);
6. report — ``index.html`` with every figure, the fidelity table and the measured time split.

Interrupt it at any point and rerun the same command: finished work is kept.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable

from specscope.analysis.measured import MeasuredCell, read_bench_results
from specscope.fileio import atomic_write_text, write_rows
from specscope.study.config import StudyConfig
from specscope.study.fidelity import with_simulated

log = logging.getLogger(__name__)


def _stem(path: Path) -> str:
    return path.name.removesuffix(".jsonl")


def first_requests(workload: Path, count: int, folder: Path) -> Path:
    """A copy of ``workload`` holding its first ``count`` requests (blank lines skipped)."""
    lines = [line for line in workload.read_text(encoding="utf-8").splitlines() if line.strip()][:count]
    out = folder / workload.name
    text = "".join(line + "\n" for line in lines)
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        atomic_write_text(out, text)
    return out


def trace_stage(config: StudyConfig, say: Callable[[str], None]) -> list[Path]:
    from specscope.engine.loading import load_tokenizer
    from specscope.tracing.run import ProposerSpec, trace_workload
    from specscope.workloads.jsonl import read_workload

    specs = [ProposerSpec("ngram")] + [ProposerSpec(name, path) for name, path in config.drafters.items()]
    tokenizer = load_tokenizer(config.model_dir)
    paths = []
    for workload in config.workloads:
        out = config.trace_dir / f"{_stem(workload)}.jsonl"
        written = trace_workload(config.model_dir, specs, read_workload(workload, tokenizer), out,
                                 k_max=config.k_max, max_tokens=config.max_tokens, dataset=_stem(workload))
        say(f"trace   {_stem(workload)}: {written} requests traced" + ("" if written else " (already done)"))
        paths.append(out)
    return paths


def measure_stage(config: StudyConfig, say: Callable[[str], None]) -> dict[tuple[str, str], list[MeasuredCell]]:
    from specscope.backends import BenchConfig
    from specscope.backends.reference import run_bench

    results = {}
    config.measure_dir.mkdir(parents=True, exist_ok=True)
    for workload in config.workloads:
        for method in config.methods:
            out = config.measure_dir / f"{_stem(workload)}__{method}.json"
            if not out.exists():
                bench = BenchConfig(model_dir=config.model_dir, workload=workload, method=method,
                                    draft_dir=config.drafters.get(method), k=config.k,
                                    batch_sizes=config.batch_sizes, max_tokens=config.max_tokens)
                result = run_bench(bench)
                atomic_write_text(out.with_suffix(".steps.jsonl"), "".join(r.to_json() + "\n" for r in result.records))
                atomic_write_text(out, json.dumps([r.flat() for r in result.rows], indent=1) + "\n")
                done = ", ".join(f"B={r.batch_size}: {r.speedup:.2f}x" for r in result.rows)
                say(f"measure {_stem(workload)} {method}: {done}")
            results[(_stem(workload), method)] = [replace(cell, dataset=_stem(workload))
                                                  for cell in read_bench_results([out])]
    return results


def steps_files(config: StudyConfig) -> list[Path]:
    return sorted(config.measure_dir.glob("*.steps.jsonl"))


def fit_stage(config: StudyConfig, say: Callable[[str], None]):
    from specscope.analysis.timesplit import read_steps
    from specscope.costmodel.fit import fit_linear

    model, quality = fit_linear(read_steps(steps_files(config)), name="fitted-" + config.model_dir.name)
    atomic_write_text(config.cost_model_path, json.dumps(model.describe(), indent=1) + "\n")
    say(f"fit     {quality.summary()}")
    return model


def fidelity_stage(config: StudyConfig, traces: list[Path], measured: dict[tuple[str, str], list[MeasuredCell]],
                   cost, say: Callable[[str], None]) -> list[MeasuredCell]:
    from specscope.trace import load_traces

    rows: list[MeasuredCell] = []
    for trace in traces:
        records, _ = load_traces([trace])
        for method in config.methods:
            rows += with_simulated(records, measured[(_stem(trace), method)], cost, config.k)
    write_rows(config.out_dir / "fidelity.csv", [r.flat() for r in rows])
    worst = max(abs(r.error_pct) for r in rows)
    say(f"fidelity simulated vs measured speedup: largest error {worst:.1f} % over {len(rows)} cells")
    return rows


def replay_stage(config: StudyConfig, traces: list[Path], say) -> dict[str, list]:
    from specscope.costmodel.registry import resolve_cost_model
    from specscope.sim.grid import SimConfig, simulate
    from specscope.trace import load_traces

    replays = {}
    records, _ = load_traces(traces, lengths="own")
    for spec in config.replay_cost_models:
        cost = resolve_cost_model(spec)
        accs = [m for m in config.methods if _can_price(cost, m)]
        rows = simulate(records, accs, ["fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle"], cost,
                        SimConfig(mode="mixed", batch_sizes=(1, 8, 32, 128)))
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
        write_rows(config.out_dir / f"replay_{name}.csv", [r.flat() for r in rows])
        replays[spec] = rows
        best = max(rows, key=lambda r: r.speedup if r.policy != "oracle" else 0)
        say(f"replay  {spec}: best non-oracle {best.acc} {best.policy} at B={best.batch_size}: {best.speedup:.2f}x")
    return replays


def _can_price(cost, method: str) -> bool:
    from specscope.errors import SpecscopeError

    try:
        cost.drafting_for(method)
        return True
    except SpecscopeError:
        return False
