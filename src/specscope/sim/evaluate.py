"""Judge a learned policy against fixed policies and the ceilings, per dataset and batch size.

For one dataset × batch size (the speedups of :func:`specscope.sim.grid.simulate`):

- best fixed = the best ``fixed:k`` of any single proposer, k chosen in hindsight among every k
  its traces reach (:func:`judged_rows`);
- adaptive = the better proposer under ``adaptive`` (named in ``adaptive_acc``); oracle per proposer;
- oracle-switch (the causal ceiling, drafting charged; of a policy over one method, that method's
  oracle) and oracle-combined (the paper's);
- every policy replays the same tokens: each record cut to the positions its output and every
  method's acc_len cover (:func:`on_common_positions`; the switching walks read no further, and a
  fixed policy replaying a proposer's longer array had been judged on other tokens than the
  ceiling it was set against);
- gap closed = (learned − best fixed) / (oracle-switch − best fixed), undefined (NaN) where
  oracle-switch beats the best fixed policy by less than :data:`MIN_ROOM` of it: a ratio over
  a gap that small says nothing (over a gap of 0.0004× it read −1677), or lies below it; why
  is ``gap_closed_why`` (:func:`no_gap_reason`);
- lookup known (:func:`lookup_known`, a lookup and a model drafter): what exact knowledge of the
  lookup's next step is worth with none of the drafter's — the best in hindsight of the plans
  that propose exactly the lookup's acc_len − 1 wherever it is at least τ (≥ 2) and the
  drafter's fixed k elsewhere, over every k the drafter was traced to and τ = 2 … k + 1 (a
  higher τ would give the drafter steps the lookup's exact step beats: more tokens, no
  drafting), and k = 0 (nothing elsewhere, the drafter never run: the lookup's own oracle),
  priced as oracle-switch is, and never below the best fixed policy, which a policy that knows
  the lookup may run anyway (on an engine that pads, the lookup's exact proposals pad every row
  to the widest). Not a ceiling: a causal policy that moves the drafter's k per request can pass
  it. Its gap closed (``gap_closed_known``) is the learned policy's share of that yardstick's
  own gain over the best fixed policy; what oracle-switch gains beyond it needs the drafter's
  acceptance at each step;

:func:`leave_one_out` fits on every dataset but one and judges on the one held out, under each
cost model in turn (fitted for and judged by it), proposing at most the k the held-out dataset
was traced to. Beside it, the same fit over every dataset, the held-out one included, as deep
(``learned_seen``, ``gap_closed_seen``): what the policy loses by not
having seen the workload — the share of the gap that the workload's own statistics would close,
against the share that needs more than these features know. :func:`discrimination` measures
how well the policy's acceptance model tells an accepted first draft from a rejected one along
its own walk: what its features know of the next step.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from specscope.costmodel.base import CostModel
from specscope.errors import SpecscopeError
from specscope.policy.features import features
from specscope.methods import method as method_named
from specscope.policy.learned import LearnedPolicy
from specscope.sim.fit import FEW_STEPS, J_MAX, fit_policy, require_methods
from specscope.sim.grid import COMBINED, SimConfig, SimRow, sampled, simulate
from specscope.sim.mixed import predict_mixed
from specscope.sim.paper import predict_paper
from specscope.sim.plan import Plan, baseline_plan, dataset_depths, traced_k_max
from specscope.sim.switching import SwitchDrafting, causal_plan, lookup_known_plan, on_common_positions
from specscope.trace.schema import TraceRecord, by_dataset
from specscope.validate import K_MAX_LIMIT

MIN_ROOM = 0.01  # the gap closed is judged where oracle-switch beats the best fixed by this share of it


def judged_rows(records: Sequence[TraceRecord], methods: tuple[str, ...], learned: Sequence[str],
                cost: CostModel, config: SimConfig, steady: bool = False) -> list[SimRow]:
    """The rows a judgement reads (``learned``: ``learned:FILE`` names): every ``fixed:k`` of each
    method, k from 1 to the depth that method was traced to (:func:`~specscope.sim.plan.traced_k_max`:
    the best fixed k in hindsight is searched among all of them, each method at its own depth,
    whatever another method's traces reach); ``adaptive`` and ``oracle`` of each; with two methods
    oracle-switch and oracle-combined; and the learned policies. ``steady``: each row's speedup is
    its steady-state one (:mod:`specscope.sim.mixed`: a server under constant load, a closed run's
    fill and drain left out)."""
    pair = "+".join(methods)
    shared = ["adaptive", "oracle", *learned]
    if len(methods) == 2:  # one method's oracle, which charges its drafting, is its own oracle-switch
        shared += [f"oracle-switch:{pair}", f"oracle-combined:{pair}"]
    combined = replace(config, combined=methods if len(methods) == 2 else None)
    rows = simulate(records, [*methods, COMBINED] if len(methods) == 2 else list(methods), shared, cost, combined)
    for method in methods:
        ks = range(1, judged_depth(records, method) + 1)
        rows += simulate(records, [method], [f"fixed:{k}" for k in ks], cost, replace(config, combined=None))
    return [replace(row, speedup=row.steady_speedup) for row in rows] if steady else rows


def lookup_known(records: Sequence[TraceRecord], methods: tuple[str, ...], cost: CostModel, config: SimConfig,
                 cells: Sequence[tuple[str, int]], steady: bool = False) -> dict[tuple[str, int], tuple[float, str]]:
    """The lookup-known yardstick (module docstring) of each (dataset, batch size) of ``cells``:
    its speedup (``steady``: its steady-state one) and the rule that reached it (``ngram ≥ 3, else
    eagle fixed:4``, ``ngram ≥ 2, else none``); none where ``methods`` are not one lookup and one
    model drafter. Each plan is walked once and priced at every batch size of its dataset; ties go
    to the first rule, in the order k = 0, 1, …, then τ = 2, 3, …"""
    kinds = [method_named(m).kind == "lookup" for m in methods]
    if sorted(kinds) != [False, True]:
        return {}
    lookup, drafter = (methods[0], methods[1]) if kinds[0] else (methods[1], methods[0])
    predict = predict_paper if config.mode == "paper" else predict_mixed

    def throughput(plan: Plan, drafting: SwitchDrafting | None, b: int) -> float:
        prediction = predict(plan, cost, drafting, b)
        return prediction.steady_throughput if steady else prediction.throughput

    sizes: dict[str, list[int]] = {}
    for dataset, b in cells:
        sizes.setdefault(dataset, []).append(b)
    groups = by_dataset(records)
    known = {}
    for dataset, batch_sizes in sizes.items():
        members = on_common_positions(sampled(list(groups[dataset]), config), methods)  # the positions the rows replay
        no_sd = baseline_plan([r.output_len for r in members], [r.prompt_len for r in members])
        base = {b: throughput(no_sd, None, b) for b in batch_sizes}
        best = {b: (-np.inf, "") for b in batch_sizes}
        for k in range(judged_depth(members, drafter) + 1):
            for at_least in range(2, k + 2 if k else 3):
                plan = lookup_known_plan(members, methods, at_least, k)
                drafting = SwitchDrafting.of(cost, plan.methods)
                for b in batch_sizes:
                    speedup = throughput(plan, drafting, b) / base[b]
                    if speedup > best[b][0]:
                        rule = f"{drafter} fixed:{k}" if k else "none"
                        best[b] = (speedup, f"{lookup} ≥ {at_least}, else {rule}")
        known.update({(dataset, b): value for b, value in best.items()})
    return known


def judged_depth(records: Sequence[TraceRecord], method: str) -> int:
    """The deepest fixed k of ``method`` a judgement replays: the depth it was traced to
    (:func:`~specscope.sim.plan.traced_k_max`), or 1 where it never accepts a draft (then every
    k replays alike, and a trace without k_max would be searched to 64)."""
    accepts = any(int(r.acc_len(method).max(initial=1)) > 1 for r in records)
    return traced_k_max(records, [method]) if accepts else 1


def judge(rows: Sequence[SimRow], learned: str | None, seen: str | None = None,
          known: dict[tuple[str, int], tuple[float, str]] | None = None) -> list[dict]:
    """One line per dataset × batch size (see the module docstring) of the rows' speedups
    (``seen``: a second learned policy, fitted on data that included the dataset judged;
    ``known``: :func:`lookup_known` of the cells)."""
    cells: dict[tuple[str, int], dict[tuple[str, str], float]] = {}
    for row in rows:
        cells.setdefault((row.dataset, row.batch_size), {})[(row.acc, row.policy)] = row.speedup
    table = []
    for (dataset, b), values in cells.items():
        fixed = {key: v for key, v in values.items() if key[1].startswith("fixed:")}
        best_key = max(fixed, key=fixed.get)
        line = {"dataset": dataset, "batch_size": b, "best_fixed": f"{best_key[0]} {best_key[1]}",
                "best_fixed_speedup": fixed[best_key]}
        adaptive = {key: v for key, v in values.items() if key[1] == "adaptive"}
        if adaptive:  # the better proposer's, named
            best_adaptive = max(adaptive, key=adaptive.get)
            line["adaptive"], line["adaptive_acc"] = adaptive[best_adaptive], best_adaptive[0]
        for (acc, policy), v in values.items():
            if policy == "oracle":
                line[f"oracle_{acc}"] = v
            elif policy.startswith("oracle-switch"):
                line["oracle_switch"] = v
            elif policy.startswith("oracle-combined"):
                line["oracle_combined"] = v
            elif learned is not None and policy == learned:
                line["learned"] = v
            elif seen is not None and policy == seen:
                line["learned_seen"] = v
        if known and (dataset, b) in known:  # knowledge a policy may ignore: never below the best fixed policy
            searched, fixed_best = known[(dataset, b)], (fixed[best_key], line["best_fixed"])
            line["lookup_known"], line["lookup_known_rule"] = max(searched, fixed_best, key=lambda pair: pair[0])
        ceiling = ceiling_of(line)
        for name, gap, top in (("learned", "gap_closed", ceiling), ("learned_seen", "gap_closed_seen", ceiling),
                               ("learned", "gap_closed_known", line.get("lookup_known"))):
            if name in line and top is not None:
                line[gap] = _closed(line[name], line["best_fixed_speedup"], top)
        if np.isnan(line.get("gap_closed", 0.0)) or ceiling is None:  # said in the table written too
            line["gap_closed_why"] = no_gap_reason(line)
        table.append(line)
    return table


def _closed(value: float, best_fixed: float, top: float) -> float:
    """(value − best fixed) / (top − best fixed), NaN where top beats the best fixed policy by
    less than :data:`MIN_ROOM` of it (or lies below it)."""
    room = top - best_fixed
    return (value - best_fixed) / room if room > MIN_ROOM * best_fixed else float("nan")


def ceiling_of(line: dict) -> float | None:
    """The ceiling a line of :func:`judge` measures its gap to: oracle-switch, or for a policy of
    one method that method's oracle; None for a policy over more than two (no oracle-switch)."""
    oracles = [v for key, v in line.items() if key.startswith("oracle_") and key != "oracle_combined"]
    return line.get("oracle_switch", oracles[0] if len(oracles) == 1 else None)


def no_gap_reason(line: dict) -> str:
    """Why a line of :func:`judge` has no gap closed: ``no ceiling`` where it has none
    (:func:`ceiling_of`: a policy over more than two proposers), ``below`` where the ceiling lies
    below the best fixed policy (its own drafting and catch-up cost more than choosing the longer
    acc_len gains: a ceiling of tokens, not of speed), else ``no gap`` (above it by under
    :data:`MIN_ROOM`)."""
    ceiling = ceiling_of(line)
    if ceiling is None:
        return "no ceiling"
    return "below" if ceiling < line["best_fixed_speedup"] else "no gap"


def leave_one_out(records: Sequence[TraceRecord], methods: tuple[str, ...], costs: Sequence[CostModel],
                  config: SimConfig, workdir: Path, notes: list[str] | None = None,
                  labels: Sequence[str] = (), steady: bool = False,
                  on_fold: Callable[[str], None] | None = None) -> list[dict]:
    """For every dataset and every cost model of ``costs``: fit on the other datasets under that
    cost model (at ``config.batch_sizes``), write the policy to ``workdir``, and judge it on the
    held-out dataset under the same cost model — a policy is fitted for the engine it runs on —
    beside the policy fitted on every dataset (``learned_seen``); each line names its cost model by
    ``labels`` where given (one per cost model: its file too). ``notes`` gets a line for each
    held-out dataset traced deeper than its training traces reach (its policy proposes no deeper), and
    for each whose policy learned from fewer than :data:`~specscope.sim.fit.FEW_STEPS` steps.
    ``steady``: every speedup judged is the steady-state one (:func:`judged_rows`); each line says
    its ``mode`` and, in mixed mode, which (``throughput``: ``run`` or ``steady``). ``on_fold`` is
    told, as each fold is judged, which it was and how long it took (minutes a fold over large traces)."""
    require_methods(records, methods)
    records = on_common_positions(records, methods)
    datasets = by_dataset(records)
    depth = dataset_depths(records, methods)  # each is judged within its own
    seen: dict[tuple[int, int], str] = {}  # (cost model, depth) → the policy fitted on every dataset

    def seen_at(index: int, k: int) -> str:  # as deep as the held-out policy: the two judged alike
        if (index, k) not in seen:
            seen[index, k] = _write(fit_policy(records, methods, costs[index], config.batch_sizes, sources=list(datasets),
                                               max_k=k), workdir / f"policy-all-{index}-{k}.json")
        return seen[index, k]

    table, folds = [], len(datasets) * len(costs)
    for number, (held_out, members) in enumerate(datasets.items()):  # a fold's files by number: a name may hold '/'
        training = [r for name, group in datasets.items() if name != held_out for r in group]
        for index, cost in enumerate(costs):
            started = time.perf_counter()
            sources = [name for name in datasets if name != held_out]
            try:
                document = fit_policy(training, methods, cost, config.batch_sizes, max_k=depth[held_out], sources=sources,
                                      notes=notes if index == 0 else None)
            except SpecscopeError as error:  # which fold could not be fitted
                raise SpecscopeError(f"held out {held_out!r}, fitting on {'+'.join(sources)}: {error}") from None
            steps = document["training"]["steps"]
            if notes is not None and index == 0 and steps < FEW_STEPS:
                notes.append(f"held out {held_out!r}: its policy learned from {steps} steps of {len(training)} requests "
                             f"of {'+'.join(sources)}, too few to weigh {len(document['features'])} features")
            reach = len(document["intercept"][0])  # the policy's own depth (at most its deepest training dataset's, the held-out's, J_MAX)
            bounded = depth[held_out] < K_MAX_LIMIT or any(r.k_max is not None for r in members)  # else any k alike
            if notes is not None and index == 0 and reach < depth[held_out] and bounded:
                notes.append(f"held out {held_out!r}: its policy proposes at most k = {reach} (as deep as its "
                             f"training traces, {'+'.join(sources)}, tell, at most {J_MAX}), where {held_out!r} was traced to "
                             f"k = {depth[held_out]}: the best fixed k and the oracles there may go deeper than it can")
            learned = _write(document, workdir / f"policy-without-{number}-{index}.json")
            everything = seen_at(index, depth[held_out])
            rows = judged_rows(members, methods, [learned, everything], cost, config, steady)
            rows = _defined(rows, steady, notes if index == 0 else None)
            known = lookup_known(members, methods, cost, config, sorted({(r.dataset, r.batch_size) for r in rows}),
                                 steady)
            label = labels[index] if labels else cost.name
            for line in judge(rows, learned, seen=everything, known=known):
                table.append({"cost_model": label, "fitted_on": "+".join(document["training"]["sources"]),
                              "mode": config.mode, "throughput": ("steady" if steady else "run") if config.mode == "mixed"
                              else None, **line})
            if on_fold is not None:
                on_fold(f"held out {held_out!r} under {label} ({number * len(costs) + index + 1} of {folds}): "
                        f"{time.perf_counter() - started:.0f} s")
    if not table:
        raise SpecscopeError("no held-out cell has a speedup for every policy to judge"
                             + (" in steady state (no iteration ran with every slot decoding: batch sizes at or "
                                "above a dataset's requests, or outputs that end before the batch fills): judge "
                                "with --throughput run or smaller --batch-sizes" if steady else ""))
    return table


def _defined(rows: list[SimRow], steady: bool, notes: list[str] | None) -> list[SimRow]:
    """``rows`` less the cells (dataset × batch size) where some policy's speedup is undefined
    (NaN: a steady state is where no iteration ran every slot decoding) — a cell is judged on
    every policy or not at all; ``notes`` gets a line for each cell left out."""
    undefined: dict[tuple[str, int], list[SimRow]] = {}
    for row in rows:
        if not np.isfinite(row.speedup):
            undefined.setdefault((row.dataset, row.batch_size), []).append(row)
    for (dataset, b), missing in undefined.items():
        if notes is not None:
            total = sum((r.dataset, r.batch_size) == (dataset, b) for r in rows)
            notes.append(f"held out {dataset!r} at B={b}: left out, {len(missing)} of its {total} policies have no "
                         + ("steady-state speedup (no iteration of their run had every slot decoding)" if steady
                            else "speedup") + f", first {missing[0].acc} {missing[0].policy}")
    return [row for row in rows if (row.dataset, row.batch_size) not in undefined]


def _write(document: dict, path: Path) -> str:
    """Write a policy document to ``path``; its ``learned:`` policy name."""
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    return f"learned:{path}"


def discrimination(records: Sequence[TraceRecord], policy: LearnedPolicy) -> list[dict]:
    """Per method, along the policy's own walk of ``records`` at batch size 1: at every step
    where the method could draft (n-gram: where it offers a token), the model's P(acc_len ≥ 2)
    — its first draft accepted — against the trace's truth there (read after the walk, never by
    the policy): steps, mean predicted, observed rate, and the AUC (0.5: the features tell
    nothing of the next step; 1: everything; ``nan`` where one outcome never occurs); and,
    beside it, ``confidence_auc``: the same steps told apart by the drafter's own probability of
    its first draft (the trace's ``draft_prob``), which it knows only once it drafts — within the
    step, not before it — over the ``confidence_steps`` of those steps whose records keep it (``nan``
    for a lookup, where no record keeps it, or where one outcome never occurs among them)."""
    from sklearn.metrics import roc_auc_score

    chooser, decide, seen = policy.chooser(1), policy.decide_for(1), []

    def spy(observed, committed=()):
        seen.extend(observed)
        return decide(observed, committed)

    plan = causal_plan(records, policy.methods, lambda b: spy, policy.depth, confidence_for=policy.confidence_for)
    first = [[line[1] - 1.0 for line in chooser.row_gains(features(obs, policy.methods), max(obs.ngram_offer, 1),
                                                            chooser.shift_for(obs))]
             for obs in seen]  # [steps][M]: k = 1 emits 1 + P(acc_len ≥ 2)
    rows = []
    for m, name in enumerate(policy.methods):
        predicted, truth, own = [], [], []
        for obs, scores, r, pos in zip(seen, first, plan.request_of_step.tolist(), plan.pos.tolist()):
            if name == "ngram" and obs.ngram_offer == 0:
                continue
            predicted.append(scores[m])
            truth.append(int(records[r].acc_len(name)[pos - 1] >= 2))
            prob = records[r].proposers[name].draft_prob
            own.append(float(prob[pos - 1, 0]) if prob is not None and prob.shape[1] else float("nan"))
        both = 0 < sum(truth) < len(truth)
        kept = ~np.isnan(np.asarray(own, dtype=float))  # [steps] the steps whose traces keep the probability
        told = np.asarray(truth)[kept]
        rows.append({"method": name, "steps": len(truth), "predicted": float(np.mean(predicted)) if truth else float("nan"),
                     "observed": float(np.mean(truth)) if truth else float("nan"),
                     "auc": float(roc_auc_score(truth, predicted)) if both else float("nan"),
                     "confidence_steps": int(kept.sum()),
                     "confidence_auc": float(roc_auc_score(told, np.asarray(own)[kept]))
                     if 0 < told.sum() < len(told) else float("nan")})
    return rows
