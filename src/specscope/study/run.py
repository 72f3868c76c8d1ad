"""Run a study stage by stage. The trace, measure and policy stages write files and skip the
work they find finished (saying so); the fit, fidelity, replay and report are computed again from
those files on every run (seconds).

1. trace — teacher-forced traces of every proposer, with ``tree_rank`` deep enough for the
   study's trees (``traces/<workload>.jsonl``, per request);
2. measure — no-SD and SD throughput with the reference engine, chains of ``k`` for every
   method and each tree with the tree drafter (``measured/<workload>__<method>.json``,
   ``…__<method>-tree-<shape>.json`` and ``….steps.jsonl``, per cell), and on the first workload
   each model drafter's chain of a second k (``…__<method>-k<K>.json``), so that the fit tells a
   drafter's cost per pass from its fixed cost;
3. fit — the linear cost model fitted to all measured steps, whole (``costmodel.json``, :func:`fit_stage`);
4. policy — a learned policy over n-gram and the model drafter measured fastest (over every
   workload and batch size: the one an engine would keep beside n-gram) fitted to the traces under that
   cost model at the study's batch sizes, proposing at most the measured k (its drafting cost
   was measured there and no further; ``policy.json``), and measured with the reference
   engine switching per step, in lockstep with a chain of ``k`` of each method it chooses between
   (``learned/<workload>.json`` and ``….steps.jsonl``: kept apart from the steps the cost model
   is fitted to; the chains beside it make the comparison with the best fixed policy one of runs
   side by side, where the chains of the measure stage ran minutes apart); then the policy's own
   work per step is fitted from those step records and added to ``costmodel.json`` as the drafting entry ``learned``
   (:func:`policy_work_stage`), as the chains' drafting is fitted from theirs; where the policy,
   fitted again with that price, chooses otherwise (its admission gates weigh what keeping the
   switch open costs), it is written again and measured again (:func:`policy_refit_stage`);
5. fidelity — simulated vs measured speedup, chain, tree and learned cells, and the chains
   measured beside the policy (``fidelity.csv``);
6. replay — the traces against other cost models (``replay_<name>.csv``), the trees against
   the chain of their depth with each one's crossover batch size (``replay_<name>_trees.csv``);
7. report — ``index.html`` with every figure, the fidelity table, the measured time split and
   the learned policy's section.

Interrupt it at any point and rerun the same command: finished work is kept.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

from specscope import written as ledger
from specscope.analysis.measured import MeasuredCell, beside_pairs, best_beside, read_bench_results, verdict_counts
from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text, check_user_output, write_rows
from specscope.reading import read_json
from specscope.study.config import BEFORE_KEPT, StudyConfig
from specscope.study.fidelity import with_simulated
from specscope.trees import TreeShape

if TYPE_CHECKING:
    from specscope.backends import BenchResult

log = logging.getLogger(__name__)
FIDELITY_TOLERANCE_PCT = 10.0  # a cell is "within" when |simulated − measured| ≤ this % of measured
LEARNED_REPEATS = 5  # the learned runs' repeats, each paired with the chains beside it (the fewest that give an interval
# of the paired median at 90 %: :mod:`specscope.analysis.paired`): runs of
# 16 requests last 0.3–3 s, and the policy and a chain running the same computation measured 0.84–1.26× apart
REPLAY_POLICIES = ("fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle")
REPLAY_BATCH_SIZES = (1, 8, 32, 128)
TREE_REPLAY_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)  # finer: where a tree stops paying


def workload_stem(path: Path) -> str:
    """The dataset a workload file names in the study's files and lines: its name less ``.jsonl``."""
    return path.name.removesuffix(".jsonl")


def first_requests(workload: Path, count: int, folder: Path) -> Path:
    """A copy of ``workload`` up to its ``count``-th request: lines split at newlines only, as the
    JSON Lines reader splits them (U+2028 inside a prompt is text), blank ones kept, so that an
    error in the copy names the line it has in ``workload``."""
    lines = workload.read_text(encoding="utf-8").split("\n")
    requests = [i for i, line in enumerate(lines) if line.strip()][:count]
    out = folder / workload.name
    text = "".join(line + "\n" for line in lines[:requests[-1] + 1]) if requests else ""
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        atomic_write_text(out, text)
    return out


def workloads_stage(config: StudyConfig) -> list[Path]:
    """The workloads the study runs — each cut to its first ``config.requests`` requests (a copy in
    the study's folder) — each read as the engine reads it, before any work: a bad request is
    named by the user's file and line, not the copy's."""
    from specscope.engine.config import ModelConfig
    from specscope.engine.loading import load_tokenizer
    from specscope.workloads.jsonl import read_workload

    tokenizer, vocab = load_tokenizer(config.model_dir), ModelConfig.from_dir(config.model_dir).vocab_size
    used = []
    for workload in config.workloads:
        if config.requests is not None and (config.workloads_dir / workload.name).resolve() == workload.resolve():
            raise SpecscopeError(f"--workload {workload}: in the study's workloads/ folder, where it keeps each "
                                 f"workload's first {config.requests} requests: its copy would replace it; "
                                 "keep the workload elsewhere")
        copy = workload if config.requests is None else first_requests(workload, config.requests, config.workloads_dir)
        try:
            read_workload(copy, tokenizer, vocab)
        except SpecscopeError as error:
            raise SpecscopeError(str(error).replace(str(copy), str(workload))) from None
        used.append(copy)
    return used


def trace_stage(config: StudyConfig, say: Callable[[str], None]) -> list[Path]:
    from specscope.engine.config import ModelConfig
    from specscope.engine.loading import load_tokenizer
    from specscope.tracing.run import ProposerSpec, trace_workload
    from specscope.workloads.jsonl import read_workload

    specs = [ProposerSpec(name) for name in config.lookups] + [ProposerSpec(name, path)
                                                                 for name, path in config.drafters.items()]
    trees = config.trees if config.tree_drafter else ()
    tokenizer = load_tokenizer(config.model_dir)
    paths = []
    for workload in config.workloads:
        out = config.trace_dir / f"{workload_stem(workload)}.jsonl"
        requests = read_workload(workload, tokenizer, ModelConfig.from_dir(config.model_dir).vocab_size)
        written = trace_workload(config.model_dir, specs, requests, out,
                                 k_max=config.k_max, max_tokens=config.max_tokens, dataset=workload_stem(workload),
                                 dtype=config.dtype, device=config.device, trees=trees,
                                 draft_probs=config.draft_probs)
        say(f"trace   {workload_stem(workload)}: {written} requests traced" + ("" if written else " (already done)"))
        paths.append(out)
    return paths


class MeasuredRun(NamedTuple):
    """One run the engine measures: a workload's chain of ``k`` (a tree's depth) with ``method``,
    a ``tree`` or, with ``confidence`` p, each row stopped at its drafter's first draft below p."""

    workload: Path
    method: str
    tree: TreeShape | None
    k: int
    confidence: float | None = None


def measured_runs(config: StudyConfig) -> list[MeasuredRun]:
    """What the engine measures, workload by workload: each method with a chain of ``k``, then the
    tree drafter with each tree (k: its depth); on the first workload, after those, each model
    drafter with a chain of the second k (:attr:`StudyConfig.second_k_drafters`) and with its chain
    of ``k`` stopped at ``confidence_p`` (:attr:`StudyConfig.confidence_drafters`)."""
    trees = config.trees if config.tree_drafter else ()
    runs: list[MeasuredRun] = []
    for index, workload in enumerate(config.workloads):
        runs += [MeasuredRun(workload, m, None, config.k) for m in config.methods]
        runs += [MeasuredRun(workload, config.tree_drafter, tree, tree.depth) for tree in trees]
        if index == 0:
            runs += [MeasuredRun(workload, m, None, config.measured_second_k) for m in config.second_k_drafters]
            runs += [MeasuredRun(workload, m, None, config.k, config.confidence_p) for m in config.confidence_drafters]
    return runs


def run_label(config: StudyConfig, run: MeasuredRun) -> str:
    """How a measured run's files are named after its workload: ``ngram``, ``mtp-k1`` (a chain of
    the second k), ``mtp-p0.5`` (the chain of k stopped at its confidence), ``eagle-tree-2x1x1``."""
    if run.tree is not None:
        return f"{run.method}-tree-{run.tree.name}"
    if run.confidence is not None:
        return f"{run.method}-p{run.confidence:g}"
    return run.method if run.k == config.k else f"{run.method}-k{run.k}"


def measure_stage(config: StudyConfig, say: Callable[[str], None]) -> list[MeasuredCell]:
    from specscope.backends import BenchConfig
    from specscope.backends.reference import run_bench

    cells = []
    config.measure_dir.mkdir(parents=True, exist_ok=True)
    for run in measured_runs(config):
        workload, label = run.workload, run_label(config, run)
        out = config.measure_dir / f"{workload_stem(workload)}__{label}.json"
        kept = out.exists()
        if not kept:
            bench = BenchConfig(model_dir=config.model_dir, workload=workload, method=run.method,
                                draft_dir=config.drafters.get(run.method), k=run.k, batch_sizes=config.batch_sizes,
                                max_tokens=config.max_tokens, tree=run.tree, confidence=run.confidence,
                                dtype=config.dtype, device=config.device)
            write_measured(out, run_bench(bench), workload, ran_on(config))
        mine = [replace(cell, dataset=workload_stem(workload)) for cell in read_bench_results([out])]
        done = ", ".join(f"B={c.batch_size}: {c.measured_speedup:.2f}x" for c in mine)
        say(f"measure {workload_stem(workload)} {label}: {done}" + (" (measured before)" if kept else ""))
        cells += mine
    return cells


def write_measured(out: Path, result: BenchResult, workload: Path, labels: dict) -> None:
    """A measured run's step records (``OUT.steps.jsonl``), then its rows (``OUT``, last: a resumed
    study reruns a run whose rows are missing), each row naming its workload for `report --measured`,
    the number of step records written beside it (``step_records``: a resume checks it, see
    :func:`checked_steps`) and ``labels`` (where it ran: :func:`ran_on`; a learned run's policy file hash)."""
    atomic_write_text(out.with_suffix(".steps.jsonl"), "".join(r.to_json() + "\n" for r in result.records))
    rows = [{**r.flat(), "workload": workload_stem(workload), "step_records": len(result.records), **labels}
            for r in result.rows]
    atomic_write_text(out, json.dumps(rows, indent=1) + "\n")


def checked_steps(folder: Path) -> list[Path]:
    """The step-record files of ``folder``'s measured runs, each checked against the count its
    run's rows recorded (a file cut short, a file deleted, or one whose rows are gone, would change
    the fit and the fidelity table unsaid). Runs written before the count was kept are checked for
    their file alone (every run wrote one)."""
    for rows_file in sorted(folder.glob("*.json")):
        steps = rows_file.with_suffix(".steps.jsonl")
        if not steps.is_file():
            recorded = "/".join(map(str, _recorded(rows_file) - {None}))
            raise SpecscopeError(f"{steps}: missing, the step records of the run in {rows_file.name}"
                                 + (f" (it recorded {recorded})" if recorded else "")
                                 + f"; delete {rows_file.name} to measure that run again")
    files = sorted(folder.glob("*.steps.jsonl"))
    for steps in files:
        rows_file = steps.with_name(steps.name.removesuffix(".steps.jsonl") + ".json")
        if not rows_file.is_file():
            raise SpecscopeError(f"{steps}: step records of a run whose rows ({rows_file.name}) are missing; "
                                 "delete it to measure that run again")
        expected = _recorded(rows_file)
        with open(steps, "rb") as handle:
            held = sum(1 for line in handle if line.strip())
        if expected != {None} and expected != {held}:
            raise SpecscopeError(f"{steps}: holds {held} step record{'s' * (held != 1)}, its run recorded "
                                 f"{'/'.join(map(str, expected))} ({rows_file.name}); delete both to measure that run "
                                 "again")
    return files


def _recorded(rows_file: Path) -> set[int | None]:
    """The step-record counts a measured run's rows recorded (``step_records``, one a row); {None}
    where none was (a run written before the count was kept, or no rows: their reader refuses them)."""
    rows = read_json(rows_file)
    return ({row.get("step_records") for row in rows if isinstance(row, dict)} if isinstance(rows, list)
            else set()) or {None}


def steps_files(config: StudyConfig) -> list[Path]:
    return checked_steps(config.measure_dir)


def ran_on(config: StudyConfig) -> dict[str, object]:
    """Where the study's engine ran, as `bench` labels its rows: device, dtype, CPU threads."""
    return {"device": config.device, "dtype": config.dtype, "threads": config.threads}


def engine_label(config: StudyConfig) -> str:
    """What the fitted cost model's name adds to say where the engine ran: nothing on the CPU in
    float32 (every study before these were settings), else ``-cuda-bfloat16`` and the like."""
    if {"device": config.device, "dtype": config.dtype} == BEFORE_KEPT:
        return ""
    return f"-{config.device.replace(':', '')}-{config.dtype}"


def fit_stage(config: StudyConfig, say: Callable[[str], None]):
    """The cost model fitted to the measured steps whole (``costmodel fit --whole-steps``): a
    decode step's drafting, verification, sampling and overhead together, each method's drafting
    terms taking what its steps cost beyond the forward. A verification right after a model
    drafter's passes runs on the caches they filled and costs more than a no-SD forward of as many
    tokens, which a phase-by-phase fit prices alike: in the study of 2026-12-04 (blocks of lockstep)
    the phase fit put the chains at B = 4 5 % high on average (56 of 60 within 10 %, worst 12.9 %),
    the whole-step fit 60 of 60 (worst 9.0 %). The engine's own work per step is then told apart
    (:func:`~specscope.costmodel.calibrate.overhead_apart`), so that the report's predicted time split shows it as the measured
    one does; a method's predicted drafting holds what its drafting costs the verification after it."""
    from specscope.analysis.timesplit import read_steps
    from specscope.costmodel.calibrate import fit_whole_steps, overhead_apart

    steps = read_steps(steps_files(config))  # a damaged file is refused as it is: the advice below is not for it
    try:
        model, quality = fit_whole_steps(steps, name=f"fitted-{config.model_dir.name}" + engine_label(config),
                                         label="study: fitting the cost model")
    except SpecscopeError as error:  # its one refusal: too few steps for the terms; say what measures more
        raise SpecscopeError(f"{error} (a study measures more steps with more --requests or a larger --max-tokens, "
                             "in a new -o folder)") from None
    model = overhead_apart(model, steps)
    _write_cost_model(config, model)
    say(f"fit     {quality.summary()}")
    if quality.warning():
        say(f"fit     warning: {quality.warning()}")
    return model


def _write_cost_model(config: StudyConfig, model) -> None:
    atomic_write_text(config.cost_model_path, json.dumps(model.describe(), indent=1) + "\n")


def policy_stage(config: StudyConfig, traces: list[Path], measured: list[MeasuredCell], cost,
                 say: Callable[[str], None]) -> list[MeasuredCell]:
    """Fit the learned policy (once) and measure it on every workload (module docstring)."""
    from specscope.backends import BenchConfig
    from specscope.backends.reference import run_bench
    from specscope.methods import LEARNED
    from specscope.policy.learned import load_policy

    methods = config.policy_methods(measured)
    if methods is None:
        lacking = "no model drafter (--draft, --eagle, --eagle3, --mtp)" if not config.drafters else "no n-gram"
        say(f"policy  none learned: a policy chooses between n-gram and a model drafter, and this study runs {lacking}")
        return []
    if config.policy_path.exists() and (kept := load_policy(config.policy_path).methods) != tuple(methods):
        say(f"policy  policy.json chose between {'+'.join(kept)}; the measured chains now favour "
            f"{'+'.join(methods)}: fitting it again")  # a cell measured again can change the fastest drafter
        config.policy_path.unlink()
    if not config.policy_path.exists():
        document = fit_study_policy(config, traces, methods, cost)
        atomic_write_text(config.policy_path, json.dumps(document) + "\n")
        say(f"policy  fitted over {'+'.join(methods)} at B={','.join(map(str, config.batch_sizes))}: "
            f"{document['training']['steps']} steps of {document['training']['requests']} requests; "
            + gated(document))
    else:
        say(f"policy  {config.policy_path.name} kept (fitted before over {'+'.join(methods)})")
    policy = load_policy(config.policy_path)
    stamp = policy.sha256  # the cells name the policy they ran
    config.learned_dir.mkdir(parents=True, exist_ok=True)
    cells = []
    for workload in config.workloads:
        out = config.learned_dir / f"{workload_stem(workload)}.json"
        if out.exists() and any(row.get("policy_sha256") != stamp for row in _rows(out)):
            say(f"learned {workload_stem(workload)}: measured with another policy.json: measuring again")
            out.unlink()
        if not out.exists():
            bench = BenchConfig(model_dir=config.model_dir, workload=workload, method=LEARNED,
                                draft_dir=config.drafters[methods[1]], k=policy.depth, batch_sizes=config.batch_sizes,
                                max_tokens=config.max_tokens, policy=config.policy_path, dtype=config.dtype,
                                device=config.device, beside_k=config.k, repeats=LEARNED_REPEATS)
            write_measured(out, run_bench(bench), workload, {**ran_on(config), "policy_sha256": stamp,
                                                              "repeats": bench.repeats})
        mine = [replace(cell, dataset=workload_stem(workload)) for cell in read_bench_results([out])]
        learned = [c for c in mine if c.method == LEARNED]
        alone = [c for c in measured if c.dataset == workload_stem(workload) and c.tree is None and c.confidence is None]
        say(f"learned {workload_stem(workload)}: " + ", ".join(
            f"B={cell.batch_size}: {cell.measured_speedup:.2f}x ({_best_fixed(cell, mine, alone)})"
            for cell in learned))
        cells += mine  # the chains beside it too: measured like the study's own, checked against the simulator alike
    best = best_beside(beside_pairs(cells))
    if best:
        say(f"learned against the best chain beside it, paired repeat by repeat: {verdict_counts(best)} of "
            f"{len(best)} cells")
    return cells


def _best_fixed(cell: MeasuredCell, run: list[MeasuredCell], alone: list[MeasuredCell]) -> str:
    """The best chain at ``cell``'s batch size, in words: among those its run measured beside it (the
    same lockstep, paired repeat by repeat: the chain the policy is least faster than,
    :func:`~specscope.analysis.measured.best_beside`, with the policy's speed over it), and the
    fastest among the study's chains measured alone (whichever the run lacks: one measured before
    chains ran beside, or without repeats)."""
    from specscope.methods import LEARNED

    beside = best_beside([pair for pair in beside_pairs(run) if pair.learned is cell])
    here = [c for c in alone if c.method != LEARNED and c.batch_size == cell.batch_size]
    fastest = max(here, key=lambda c: c.measured_speedup, default=None)
    parts = [f"best fixed beside it {pair.chain.method} k={pair.chain.k}: {pair.chain.measured_speedup:.2f}x, "
             f"learned / it {pair.paired.describe()}" for pair in beside]
    if fastest is not None:
        parts.append(f"best fixed measured alone {fastest.method} k={fastest.k}: {fastest.measured_speedup:.2f}x")
    return "; ".join(parts) or "no fixed policy measured"


def fit_study_policy(config: StudyConfig, traces: list[Path], methods: list[str], cost) -> dict:
    """The study's policy file over ``methods``, fitted to its traces under ``cost`` at its batch
    sizes, proposing at most its k, its gates kept in sample (it runs on the workloads it was
    fitted on, as its per-step rule is fitted on them)."""
    from specscope.policy.gate import FITTED
    from specscope.sim.fit import fit_policy
    from specscope.trace import load_traces
    from specscope.tracing.settings import traced_checkpoints

    return fit_policy(load_traces(traces)[0], tuple(methods), cost, config.batch_sizes,
                      sources=[workload_stem(t) for t in traces], max_k=config.k,
                      checkpoints=[traced_checkpoints(t)[1] for t in traces], gate=FITTED)  # the models it learned


def gated(document: dict) -> str:
    """Where a policy file has admission gates, in words."""
    sizes = [str(m["batch_size"]) for m in document["models"] if m.get("gate") is not None]
    return f"admission gates (kept in sample) at B={','.join(sizes)}" if sizes else "no admission gate"


def policy_refit_stage(config: StudyConfig, traces: list[Path], cost, say: Callable[[str], None]) -> bool:
    """Fit the policy again where ``policy.json`` was fitted without a price for its own work and
    ``cost`` now has one (:func:`policy_work_stage`, from its measured cells): its gates and its
    confidence rule weigh what keeping the switch open costs. Written (and True: measure it
    again) only where the fit's choices differ; else the file is kept, and ``policy_refit.json``
    records that it was checked for this price of its work (a resumed study fits it no more)."""
    from specscope.methods import LEARNED
    from specscope.policy.learned import stamp

    if not config.policy_path.exists() or LEARNED not in cost.drafting:
        return False
    document = read_json(config.policy_path)
    if LEARNED in document["cost_model"].get("drafting", {}):
        return False  # fitted with its work priced already
    work = cost.drafting_for(LEARNED)
    checked = config.policy_path.with_name("policy_refit.json")  # a refit that chose alike, for this work
    key = {"policy_sha256": stamp(config.policy_path.read_bytes()), "work": [work.c_fixed, work.c_req]}
    if checked.exists() and read_json(checked) == key:
        return False
    again = fit_study_policy(config, traces, document["methods"], cost)
    priced = f"{1e6 * work.c_fixed:.0f} µs + {1e6 * work.c_req:.0f} µs per request it decides"
    if again["models"] == document["models"]:
        atomic_write_text(checked, json.dumps(key) + "\n")
        say(f"policy  policy.json chooses alike with its own work priced ({priced}): kept")
        return False
    atomic_write_text(config.policy_path, json.dumps(again) + "\n")
    say(f"policy  fitted again with its own work priced ({priced}): {gated(again)}; measuring it again")
    return True


def _rows(path: Path) -> list[dict]:
    """A measured run's rows (``path``, as :func:`write_measured` wrote them), or a one-line error
    naming the file: one cut short or edited is not read as a run."""
    rows = read_json(path)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise SpecscopeError(f"{path}: expected a measured run's rows (a JSON list of objects); delete it to "
                             "measure that run again")
    return rows


def policy_work_stage(config: StudyConfig, cost, say: Callable[[str], None]):
    """``cost`` with the learned policy's own work per step (the drafting entry ``learned``,
    :func:`~specscope.costmodel.fit.with_policy_work`) fitted from the learned cells' step
    records, written back to ``costmodel.json``: every later simulation of the policy — the
    fidelity stage, the report's policy section, a ``simulate`` with that file — prices it, and
    fixed policies and oracles never read it. ``cost`` (the fit stage's, without that entry) as it
    is without learned cells."""
    from specscope.analysis.timesplit import read_steps
    from specscope.costmodel.fit import with_policy_work
    from specscope.methods import LEARNED

    learned = checked_steps(config.learned_dir)
    if not learned:
        return cost
    cost = with_policy_work(cost, read_steps(learned))
    _write_cost_model(config, cost)
    if LEARNED not in cost.drafting:  # no learned cell measured a step where the policy decided a row
        say("fit     the policy's own work per step: none measured (its admission gates committed every request to "
            "a chain)")
        return cost
    work = cost.drafting_for(LEARNED)
    say(f"fit     the policy's own work per step: {1e6 * work.c_fixed:.0f} µs + {1e6 * work.c_req:.0f} µs "
        "per request it decides")
    return cost


def fidelity_stage(config: StudyConfig, traces: list[Path], measured: list[MeasuredCell],
                   cost, say: Callable[[str], None]) -> list[MeasuredCell]:
    from specscope.methods import LEARNED
    from specscope.trace import load_traces

    rows: list[MeasuredCell] = []
    policy = config.policy_path if config.policy_path.exists() else None
    for trace in traces:
        records, _ = load_traces([trace])
        rows += with_simulated(records, [c for c in measured if c.dataset == workload_stem(trace)], cost, policy)
    write_rows(config.out_dir / "fidelity.csv", [{**r.flat(), "cost_model": cost.name} for r in rows])
    groups = (("chain", [r for r in rows if r.tree is None and r.method != LEARNED and not r.beside]),
              ("chain beside learned", [r for r in rows if r.beside]),
              ("tree", [r for r in rows if r.tree]), ("learned", [r for r in rows if r.method == LEARNED]))
    for what, mine in groups:
        if mine:
            errors = sorted(abs(r.error_pct) for r in mine)
            within = sum(e <= FIDELITY_TOLERANCE_PCT for e in errors)
            say(f"fidelity {what} cells, simulated vs measured speedup: median error {statistics.median(errors):.1f} %, "
                f"largest {errors[-1]:.1f} %, {within}/{len(errors)} within {FIDELITY_TOLERANCE_PCT:.0f} %")
    return rows


REPLAYS = ".replays"  # the replay tables the study wrote into its folder, one name a line


def replay_stage(config: StudyConfig, traces: list[Path], say) -> dict[str, list]:
    from specscope.costmodel.registry import priced, resolve_cost_model
    from specscope.sim.grid import SimConfig, simulate
    from specscope.sim.policies import held_to
    from specscope.trace import load_traces

    check_replays(config)  # as run_study did before any work: this stage may run alone
    replays, earlier, written = {}, replay_files(config), []

    def wrote(name: str) -> None:  # listed as it is written: an interrupted run's tables are the study's too
        written.append(name)
        atomic_write_text(config.out_dir / REPLAYS, "".join(f"{n}\n" for n in sorted(earlier | set(written))))

    records, _ = load_traces(traces, lengths="own")
    replaying = list(config.replay_cost_models)  # the batch sizes said only where a replay runs
    sizes = _fillable("chain", REPLAY_BATCH_SIZES, records, say) if replaying else ()
    tree_sizes = _fillable("tree", TREE_REPLAY_BATCH_SIZES, records, say) if replaying and config.tree_drafter else ()
    for spec in replaying:
        cost = resolve_cost_model(spec)
        accs, left = priced(cost, config.methods)
        if left:  # its best is then the best of the others: said, not left for the reader to miss
            say(f"replay  {spec}: {', '.join(left)} left out: the cost model prices no drafting of "
                f"{'them' if len(left) > 1 else 'it'}")
        rows = simulate(records, accs, list(held_to(REPLAY_POLICIES, config.k_max)), cost,  # asks nothing untraced
                        SimConfig(mode="mixed", batch_sizes=sizes))
        name = _replay_name(spec)
        write_rows(config.out_dir / f"replay_{name}.csv", [{**r.flat(), "cost_model": spec} for r in rows])
        wrote(f"replay_{name}.csv")
        replays[spec] = rows
        best = max(rows, key=lambda r: r.speedup if r.policy != "oracle" else 0)
        say(f"replay  {spec}: best non-oracle over every workload: {best.dataset} {best.acc} {best.policy} at "
            f"B={best.batch_size}: {best.speedup:.2f}x")
        if config.tree_drafter and priced(cost, [config.tree_drafter])[0]:
            _replay_trees(config, records, cost, config.out_dir / f"replay_{name}_trees.csv", spec, say, tree_sizes)
            if (config.out_dir / f"replay_{name}_trees.csv").is_file():
                wrote(f"replay_{name}_trees.csv")
    for name in sorted(earlier - set(written)):  # an earlier run's --replay this one did not ask for (never a file
        (config.out_dir / name).unlink(missing_ok=True)  # of the user's: only what the study listed, unchanged since)
        say(f"replay  removed {name}: an earlier run's --replay, not asked for by this one")
    atomic_write_text(config.out_dir / REPLAYS, "".join(f"{n}\n" for n in sorted(written)))
    return replays


def check_replays(config: StudyConfig) -> None:
    """Before any work: each replay table this run may write, and each of an earlier run's that it
    removes, is the study's as it wrote it (its folder's record, :mod:`specscope.written`); one
    changed since, or never written there by specscope, is the user's: refused, as ``fidelity.csv``.
    A table the study's own list names (:data:`REPLAYS`) that the folder's record does not was
    written before replay tables were recorded (2026-12-05): the study's, as that list says."""
    names = [f"replay_{_replay_name(spec)}{part}.csv" for spec in config.replay_cost_models
             for part in ("", *(("_trees",) if config.tree_drafter else ()))]
    earlier = replay_files(config)
    for name in [*names, *sorted(earlier - set(names))]:  # what it writes, then what it removes
        path = config.out_dir / name
        if name in earlier and path.is_file() and not path.is_symlink() and not ledger.known(path):  # an older
            # study's table, its own as before (a link may lead to a user's file: checked as any output)
            ledger.claim(path)
            continue
        check_user_output(path, "it would be replaced; remove it first" if name in names else
                          "it would be removed (an earlier run's --replay, not asked for by this one); move it "
                          "away, or remove it first")  # (and lists what the run writes there)


def replay_files(config: StudyConfig) -> set[str]:
    """The replay tables the study wrote into its folder (its :data:`REPLAYS` list)."""
    listed = config.out_dir / REPLAYS
    return set(listed.read_text(encoding="utf-8").split()) if listed.is_file() else set()


def _replay_name(spec: str) -> str:
    """A replay's cost model as a file name's part (``replay_NAME.csv``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)


def _fillable(what: str, sizes: tuple[int, ...], records, say) -> tuple[int, ...]:
    """The batch sizes of ``sizes`` (the ``what`` replay's) every workload's requests can fill
    (mixed mode decodes B distinct requests), the others said once."""
    fewest = min(Counter(r.dataset for r in records).values())
    kept = tuple(b for b in sizes if b <= fewest) or sizes[:1]
    if len(kept) < len(sizes):
        say(f"replay  {what} replay at batch sizes {','.join(map(str, sizes))}: "
            f"{','.join(str(b) for b in sizes if b not in kept)} left out, a workload holds {fewest} requests "
            "(give more with --requests)")
    return kept


def _replay_trees(config: StudyConfig, records, cost, out: Path, spec: str, say, sizes: tuple[int, ...]) -> None:
    """The trees and the chains of their depth on ``cost`` at batch sizes ``sizes``; one line per
    workload: where each tree stops beating its chain (the crossover batch size)."""
    from specscope.report.trees import compare_trees, tree_depths
    from specscope.sim.grid import SimConfig

    drafter = config.tree_drafter
    depths = tree_depths(records, [drafter])
    _, trees, notes = compare_trees(records, depths, config.trees, {key: config.k_max for key in depths}, cost,
                                    SimConfig(mode="mixed", batch_sizes=sizes))
    for note in notes:
        say(f"replay  {spec}: {note}")
    write_rows(out, [{**t.flat(), "cost_model": spec} for t in trees])
    for dataset in dict.fromkeys(t.dataset for t in trees):
        parts = [f"{t.tree} ({t.nodes} nodes) vs chain {t.chain}: "
                 + ("below it at every batch size" if not t.beats_at
                    else f"above it at B={t.again} only" if t.beats_up_to is None
                    else f"crossover B={t.crossover}" + (f", above it again at B={t.again}" if t.again else "")
                    if t.crossover is not None
                    else f"beats it up to B={t.beats_up_to}, the largest simulated: no crossover there")
                 for t in trees if t.dataset == dataset]
        say(f"crossover {spec} {dataset} ({drafter}, whole-run speedup): " + "; ".join(parts))
