"""Everything the report shows, computed from traces without writing anything: ``analyse``.

Traces are read twice: with ``lengths="common"`` for per-position analysis (every proposer's
array aligned with the output) and with ``lengths="own"`` for simulation (each proposer's array
whole, as the paper's simulator did). Parts that cannot be computed (a proposer the cost model
cannot price, no pair of proposers to compare) are left empty and named in ``notes``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from specscope.analysis.acceptance import (
    PairStats,
    ProposerStats,
    acceptance_stats,
    by_dataset,
    proposer_names,
    request_means,
)
from specscope.analysis.bound_points import BoundPoint, bound_points
from specscope.analysis.measured import MeasuredCell, simulated_for
from specscope.analysis.overlap import (BleuRow, OverlapConfig, OverlapRow, bleu_scores, default_references,
                                        overlap_by_reference, request_bleu)
from specscope.analysis.position import ProfileRow, position_profiles
from specscope.analysis.timesplit import measured_split, predicted_split, read_steps
from specscope.costmodel.base import CostModel
from specscope.costmodel.linear import LinearCostModel
from specscope.costmodel.registry import cost_label, priced, resolve_cost_model, unpriced_note
from specscope.errors import SpecscopeError
from specscope.fingerprint import provenance
from specscope.methods import BENCH_DEFAULT, default_hint
from specscope.report.answer import AnswerRow, answer_rows, tree_answer
from specscope.report.config import LONGER_K, ReportConfig
from specscope.report.policy import PolicyChoices, policy_section
from specscope.sim.checks import lacking_records
from specscope.sim.grid import (COMBINED, SimConfig, SimRow, adaptive_notes, by_pair, capacity_notes,
                                counted_over_all, dataset_pairs, held_by_all, length_notes, no_match_notes,
                                sample_notes, sample_size, simulate, simulated_batch_sizes)
from specscope.sim.plan import traced_k_max
from specscope.trace import load_traces
from specscope.trace.load import LoadReport
from specscope.trace.schema import TraceRecord
from specscope.report.trees import TreeRow, compare_trees, tree_depths
from specscope.report.whatif import WhatIfRow, engine_note, whatif_rows
from specscope.sim.observe import offer_notes
from specscope.sim.policies import learned_notes
from specscope.trees import TreeShape
from specscope.version import code_version

TAIL_FACTOR = 8  # outputs this many times the median make the mixed-mode drain worth a note
FEW_REQUESTS = 30  # a dataset of fewer requests gets a note: its numbers rest on few outputs
PHASES = ("reading traces", "acceptance statistics", "simulating", "prompt/output overlap", "time split and bound")


@dataclass
class ReportData:
    """The analysis behind every figure and table of the report."""

    traces: list[str]
    config: ReportConfig
    cost: CostModel
    records: list[TraceRecord]  # cut to the common length (per-position analysis)
    load_reports: list[LoadReport]
    sim_records: list[TraceRecord]  # each proposer's array whole (simulation)
    names: list[str]  # proposers in the traces
    simulated: list[str]  # those the cost model can price
    pair_of: dict[str, tuple[str, str]]  # per dataset, the two proposers compared head to head and combined
    # (sim.grid.dataset_pairs; a dataset without a pair is not listed)
    singles: list[ProposerStats] = field(default_factory=list)
    pairs: list[PairStats] = field(default_factory=list)
    means: list[dict] = field(default_factory=list)  # one per request × proposer: mean acc_len
    profile: list[ProfileRow] = field(default_factory=list)
    rows: list[SimRow] = field(default_factory=list)  # every simulated cell
    answer: list[AnswerRow] = field(default_factory=list)
    bleu: list[BleuRow] = field(default_factory=list)
    overlap: list[OverlapRow] = field(default_factory=list)
    predicted: list[dict] = field(default_factory=list)  # predicted time split
    measured_split: list[dict] = field(default_factory=list)  # measured time split (from --steps)
    points: list[BoundPoint] = field(default_factory=list)
    measured: list[MeasuredCell] = field(default_factory=list)
    tree_rows: list[SimRow] = field(default_factory=list)  # trees and chains fixed:1..depth
    trees: list[TreeRow] = field(default_factory=list)  # one per dataset × proposer × tree
    tree_answer: tuple[list[str], list[list[str]]] = field(default_factory=lambda: ([], []))  # header, a row
    trees_from_chains: str | None = None  # a sweep's model that fitted no tree of a drafter: said by the tree figure too
    # per dataset × drafter
    policy_table: list[dict] = field(default_factory=list)  # the learned policy judged (--policy)
    policy_choices: list[PolicyChoices] = field(default_factory=list)
    whatif: list[WhatIfRow] = field(default_factory=list)  # a calibrated cost model's predictions, checked
    figure_policies: tuple[str, ...] = ()  # figure 1's configured policies, each proposer's within its own depth
    edges: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # per dataset and proposer: its
    # largest k tried, and why no longer
    notes: list[str] = field(default_factory=list)

    @property
    def cost_label(self) -> str:
        """The cost model's name, and the file it was read from where it calls itself otherwise
        (:func:`~specscope.costmodel.registry.cost_label`): what every priced table names."""
        return cost_label(self.config.cost_model, self.cost)

    @cached_property
    def made(self) -> dict[str, str]:
        """What produced its tables, as ``simulate -o`` rows name it: the traces (path and SHA-256)
        and the code — read once, however many tables carry it."""
        return {"traces": "; ".join(map(provenance, self.traces)), "made_by": code_version()}


def _held_per_dataset(config: ReportConfig, records: Sequence[TraceRecord]) -> dict[tuple[str, str], ReportConfig]:
    """Per dataset and proposer every record of it holds, ``config`` held to the depth that
    proposer was traced to there, where any part of it (the ks, the figures', overlap's and time
    split's fixed policies) would simulate deeper: one proposer's depth never limits another's
    (EAGLE had been cut to n-gram's inferred depth, its oracle 2.10× where simulate gives 2.17×),
    nor one dataset's another's. The traces' arrays are not cut to that depth: an oracle reaches
    each record's own depth, as simulate's does (cut at a dataset's shallowest record, its oracle
    moved with --ks). A proposer of ``config.proposer_depths`` is held to its own depth too. Where
    the largest k simulated reaches that depth, the answer's † says why it ends there, not that a
    longer k may do better."""
    own = {name: (depth, why) for name, depth, why in config.proposer_depths}
    held = {}
    for dataset, group in by_dataset(records).items():
        for name in sorted(set.intersection(*(set(r.proposers) for r in group))):
            depth = traced_k_max(group, [name])  # (records cut to config.depth: at most it)
            bound, said = own.get(name, (config.depth, config.longer_k))
            why = said if bound is not None and depth >= bound else _recorded(group, depth)
            reach = depth if bound is None else min(depth, bound)
            mine = config if reach >= config.deepest else config.held_to(reach, why)
            held[(dataset, name)] = replace(mine, longer_k=why if max(mine.ks) >= reach else LONGER_K)
    return held


def _held_proposers(record: TraceRecord, depths: Sequence[tuple[str, int, str]]) -> TraceRecord:
    """``record`` with each proposer of ``depths`` as a trace of its own depth would hold it
    (:meth:`~specscope.trace.schema.ProposerTrace.capped`): its oracle, and the pairs it joins,
    propose no deeper."""
    proposers = dict(record.proposers)
    for name, depth, _ in depths:
        if name in proposers:
            proposers[name] = proposers[name].capped(depth)
    return replace(record, proposers=proposers)


def _union(lists: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """The policies of ``lists``, each once: the fixed ks by k, then the others in the order first seen."""
    seen = list(dict.fromkeys(p for policies in lists for p in policies))
    return tuple(sorted(seen, key=lambda p: (0, int(p.split(":")[1])) if p.startswith("fixed:") else (1, seen.index(p))))


def _depth_notes(held: dict[tuple[str, str], ReportConfig], asked: Sequence[int], several: bool) -> list[str]:
    """A line per depth and reason where ks asked for were not simulated: the datasets it holds for
    named where ``several`` and not all of them, their proposers where not all of theirs."""
    said: dict[tuple[tuple[int, ...], str], dict[str, list[str]]] = {}  # (ks, why) → dataset → its proposers
    for (dataset, name), mine in held.items():
        if any(k not in mine.ks for k in asked):
            said.setdefault((mine.ks, mine.longer_k), {}).setdefault(dataset, []).append(name)
    notes = []
    for (ks, why), held_where in said.items():
        datasets = [f"{d!r}" for d in held_where] if several and len(held_where) < len({d for d, _ in held}) else []
        whole = all(len(those) == sum(d == dataset for d, _ in held) for dataset, those in held_where.items())
        names = [] if whole else list(dict.fromkeys(n for those in held_where.values() for n in those))
        where = ", ".join([*([f"dataset{'s' * (len(datasets) > 1)} {', '.join(datasets)}"] if datasets else []),
                           *names])
        notes.append(f"{where + ': ' if where else ''}{', '.join(f'fixed:{k}' for k in asked if k not in ks)} not "
                     f"simulated: {why}" + "".join(f"; fixed:{k} in their place" for k in sorted(set(ks) - set(asked))))
    return notes


def _recorded(group: Sequence[TraceRecord], depth: int) -> str:
    """What a dataset's answer says of a k deeper than ``depth``, the depth a proposer's traces reach
    (the note and the answer's † name the proposer)."""
    if all(r.k_max is not None for r in group):
        return f"the traces were recorded to k_max = {depth}"
    return (f"the traces reach k = {depth} (the proposer's longest acc_len − 1: k_max not recorded, they cannot "
            "tell what more drafts would have given)")


def analyse(traces: Sequence[str | Path], config: ReportConfig,
            advance: Callable[[str], None] = lambda phase: None) -> ReportData:
    """Read every input (a bad one is refused before anything is computed), then compute every
    part of the report; ``advance(phase)`` is called as each of :data:`PHASES` ends."""
    cost = resolve_cost_model(config.cost_model)
    if config.sim.oversize == "skip":  # the batch sizes a dataset cannot fill are said once, as a note (_tail_notes)
        config = replace(config, sim=replace(config.sim, oversize="said"))
    steps = read_steps(config.steps) if config.steps else []
    whole: list[TraceRecord] = []  # each array whole, from the same read (a pipe is read once): the bound's α,
    records, reports = load_traces(traces, lengths="common", whole=whole)  # as `specscope bound` reads them
    sim_records = whole
    if config.depth is not None:  # a depth the cost model was measured to: no walk (oracles too) prices deeper
        sim_records = [r.capped(config.depth) for r in sim_records]
    if config.proposer_depths:  # and a proposer measured shallower, no deeper than it was
        sim_records = [_held_proposers(r, config.proposer_depths) for r in sim_records]
    asked, held = config.ks, _held_per_dataset(config, sim_records)
    shallowest = min(held, key=lambda key: held[key].deepest, default=None)
    overlap_asked, config = config.overlap, held[shallowest] if shallowest else config  # overlap's: within every depth
    names = proposer_names(records)
    simulated, unpriced = priced(cost, names)
    notes = [unpriced_note(name, cost.name) for name in unpriced]
    if not simulated:
        raise SpecscopeError(f"cost model {cost.name!r} can price none of the proposers {names}"
                             + (default_hint(BENCH_DEFAULT) if BENCH_DEFAULT in names else ""))
    pairs = dataset_pairs(sim_records, cost, simulated)  # one rule: simulate's, overlap's
    data = ReportData([str(t) for t in traces], config, cost, records, reports, sim_records, names, simulated,
                      {dataset: pair for dataset, (pair, _) in pairs.items() if pair}, notes=notes,
                      measured=list(config.measured),
                      edges={key: (max(c.ks), c.longer_k) for key, c in held.items()},
                      figure_policies=_union(c.figure_policies for c in held.values()))
    data.notes.extend(_depth_notes(held, asked, len(by_dataset(sim_records)) > 1))
    data.notes.extend(_few_notes(sim_records))
    data.notes.extend(_tail_notes(sim_records, config))
    data.notes.extend(sample_notes(sim_records, config.sim, option=False))
    data.notes.extend(no_match_notes(sim_records, simulated, config.sim, option=False))
    data.notes.extend(adaptive_notes(whole, simulated, config.policies))  # as traced (a depth held to: said apart)
    every_k = sorted({k for c in held.values() for k in c.ks})
    past = cost.beyond_measured(every_k, config.sim.batch_sizes, names) if isinstance(cost, LinearCostModel) else None
    data.notes.extend([past] if past else [])
    advance(PHASES[0])

    data.singles, data.pairs = acceptance_stats(records)
    data.means = request_means(records)
    data.profile = position_profiles(records)
    advance(PHASES[1])

    before = len(data.notes)
    data.rows = _simulate_held(sim_records, held, simulated, cost, config, data.notes)
    if not data.rows:  # nothing to draw: no dataset holds its proposers in every record, or B is too large
        largest = max(Counter(r.dataset or "trace" for r in sim_records).values())
        if data.notes[before:] and (config.sim.mode == "paper" or min(config.sim.batch_sizes) <= largest):
            raise SpecscopeError("no cell to simulate: " + "; ".join(data.notes[before:]))
        raise SpecscopeError(f"--batch-sizes: {','.join(map(str, config.sim.batch_sizes))}: every one is above the "
                             f"requests of every dataset here (the largest holds {largest}; mixed mode decodes B "
                             "distinct requests, --mode paper B copies of each)")
    combined = []
    for dataset, (pair, why) in pairs.items():
        if pair and len(held_by_all(by_dataset(sim_records)[dataset], simulated)) > 2:  # a choice: said
            data.notes.append(f"dataset {dataset!r}: oracle-combined pairs {'+'.join(pair)}, {why}")
    for pair, members in by_pair(sim_records, pairs).items():  # each dataset its own pair
        if pair is None:
            continue
        combined.append(f"oracle-combined:{pair[0]}+{pair[1]}")
        data.rows += simulate(members, [COMBINED], combined[-1:], cost, config.sim, missing=data.notes)
    data.notes.extend(length_notes(sim_records, [*config.policies, *combined]))
    data.notes.extend(capacity_notes(data.rows, cost))
    if config.policy:
        data.policy_table, data.policy_choices = policy_section(sim_records, config.policy, cost, config.sim)
        data.notes.extend(learned_notes([f"learned:{config.policy}"], cost, simulated_batch_sizes(data.rows)))
        data.notes.extend(offer_notes(sim_records))
    depths = {key: depth for key, depth in tree_depths(sim_records, simulated).items()
              if config.tree_drafters is None or key[1] in config.tree_drafters}
    if depths:
        trees = [TreeShape.parse(t) for t in config.trees]
        data.tree_rows, data.trees, tree_notes = compare_trees(sim_records, depths, trees,
                                                               {key: max(c.ks) for key, c in held.items()}, cost, config.sim)
        data.notes.extend(tree_notes)
        data.trees_from_chains = cost.trees_from_chains([r.acc for r in data.tree_rows if r.policy.startswith("tree:")]) \
            if isinstance(cost, LinearCostModel) else None
        data.notes.extend([data.trees_from_chains] if data.trees_from_chains else [])
        without = [d for d in dict.fromkeys(r.dataset or "trace" for r in sim_records) if d not in {d for d, _ in depths}]
        if without:
            data.notes.append(f"tree vs chain: not for {', '.join(without)}, whose traces carry no tree_rank "
                              "(trace with --trees)")
        data.tree_answer = tree_answer(data.trees)
    data.answer = answer_rows(data.rows + [r for r in data.tree_rows if r.policy.startswith("tree:")],
                              _left_out(sim_records, simulated, config.sim))
    named = [c.simulated_speedup is None for c in data.measured]  # matched here by name (a study's come simulated)
    data.measured = [c if c.simulated_speedup is not None  # a study's cells come simulated on their own requests
                     else replace(c, simulated_speedup=simulated_for(c, data.rows + data.tree_rows)) for c in data.measured]
    unmatched = [c for c in data.measured if c.simulated_speedup is None]
    if unmatched:
        data.notes.append(f"{len(unmatched)} of {len(data.measured)} measured cells have no simulated counterpart in "
                          "this report (another workload than the traces', a batch size not simulated, a method, "
                          "k or tree the traces do not reach, or a drafter stopped at its confidence, which `simulate "
                          "--policies confidence:p:k` replays), so nothing checks them: " + ", ".join(
                              f"{c.dataset} {c.label} k{'≤' if c.confidence is not None else '='}{c.k} "
                              f"B={c.batch_size}" for c in unmatched[:5])
                          + (", …" if len(unmatched) > 5 else ""))
    matched = [c for c, by_name in zip(data.measured, named) if by_name and c.simulated_speedup is not None]
    if matched:
        data.notes.append(f"{len(matched)} measured cells are set beside the simulation of the traces' dataset of "
                          "their workload's name (its file name): nothing more ties them, so a workload and traces "
                          "of one name but other prompts would be compared unsaid")
        if config.sim.mode == "paper":
            data.notes.append("the measured cells are compared in paper mode (B copies of one request), where an "
                              "engine serving requests ran B distinct ones, continuously batched (mixed mode, "
                              "the default, replays that)")
    if isinstance(cost, LinearCostModel):
        data.whatif = whatif_rows(data.rows + data.tree_rows, data.measured, cost.fitted_cells, cost.engine)
        engines = engine_note(data.measured, cost.name, cost.engine, cost.sweep) if data.whatif and data.measured \
            else None
        data.notes.extend([engines] if engines else [])
    advance(PHASES[2])

    ov = config.overlap
    references = _overlap_references(sim_records, ov, cost)  # each dataset its own model proposer
    scores = bleu_scores(sim_records)
    data.bleu = request_bleu(sim_records, scores, ov.edges)
    data.overlap = overlap_by_reference(sim_records, cost, config.sim, ov, references, scores, notes=data.notes) \
        if references else []
    without = [d for d in by_dataset(sim_records) if d not in references]
    if data.overlap and without:
        data.notes.append(f"overlap: {', '.join(without)} left out: it compares {ov.lookup} with a model proposer "
                          "the cost model prices, which their records do not all hold")
    if data.overlap and ov != overlap_asked:  # one policy set compares every dataset's bins
        data.notes.append(f"overlap: n-gram's policies {', '.join(ov.lookup_policies)} and the reference's "
                          f"{ov.reference_policy} for every dataset, within the depth of {shallowest[0]!r} · "
                          f"{shallowest[1]} ({held[shallowest].depth}), the shallowest here")
    advance(PHASES[3])

    data.predicted = predicted_split(data.rows)
    data.measured_split = measured_split(steps)
    data.points = bound_points(whole, cost, simulated, min(config.sim.batch_sizes), config.bound_k, data.notes,
                               config.depth)
    advance(PHASES[4])
    return data


def _simulate_held(records: Sequence[TraceRecord], held: dict[tuple[str, str], ReportConfig], simulated: Sequence[str],
                   cost: CostModel, config: ReportConfig, notes: list[str]) -> list[SimRow]:
    """Every dataset's cells, each proposer at its own depth (``held``: its policies), in the
    datasets' order; a proposer some records lack is left out by the simulator, said in ``notes``."""
    rows = []
    for dataset, members in by_dataset(records).items():
        for name in simulated:
            policies = held.get((dataset, name), config).policies
            rows += simulate(members, [name], policies, cost, config.sim, missing=notes)
    return rows


def _overlap_references(records: Sequence[TraceRecord], ov: OverlapConfig, cost: CostModel) -> dict[str, str]:
    """Each dataset's reference for the overlap comparison, as `specscope overlap` sets it
    (:func:`~specscope.analysis.overlap.default_references`), where every record of it holds that
    and the lookup; a dataset without them is not listed, nor any where the cost model prices no
    drafting of the lookup (the catalogue's note says why the figure is not drawn)."""
    if not priced(cost, [ov.lookup])[0]:
        return {}
    try:
        chosen = default_references(records, ov.lookup, cost, ov.reference)
    except SpecscopeError:  # no dataset has one: no overlap figure (catalogue says why)
        return {}
    groups = by_dataset(records)
    return {dataset: reference for dataset, (reference, _) in chosen.items()
            if held_by_all(groups[dataset], [ov.lookup, reference]) == [ov.lookup, reference]}


def _left_out(records: Sequence[TraceRecord], simulated: Sequence[str], sim: SimConfig) -> dict[str, str]:
    """Per dataset, the priced proposers some (not all) of its records lack, whose cells are left
    out of its answer: ``eagle (1 of 40 records lack it)`` — counted over all its records, as the
    simulator decides (sim.grid.simulate), said where fewer are drawn (paper mode's 300)."""
    out = {}
    size = sample_size(sim)
    for dataset, members in by_dataset(records).items():
        partly = {name: ids for name, ids in lacking_records(members, simulated).items() if len(ids) < len(members)}
        drawn = f"; {counted_over_all(len(members), size)}" if size is not None and size < len(members) else ""
        if partly:
            out[dataset] = ", ".join(f"{name} ({len(ids)} of {len(members)} records lack it{drawn})"
                                     for name, ids in partly.items())
    return out


def _few_notes(records: Sequence[TraceRecord]) -> list[str]:
    """One note naming every dataset of fewer than :data:`FEW_REQUESTS` requests: its speedups, α
    and verdict stand on that many outputs."""
    few = [(dataset, len(members), sum(r.output_len for r in members))
           for dataset, members in by_dataset(records).items() if len(members) < FEW_REQUESTS]
    if not few:
        return []
    listed = "; ".join(f"dataset {dataset!r}: only {n} request{'s' * (n > 1)} ({positions} output positions)"
                       for dataset, n, positions in few)
    return [f"{listed}: {'its' if len(few) == 1 else 'their'} speedups, α and verdict rest on these alone; a few "
            "requests more or fewer may move them (the paper's datasets hold about 300)"]


def _tail_notes(records: Sequence[TraceRecord], config: ReportConfig) -> list[str]:
    """Mixed mode counts the drain at the end of a run, when the few longest requests decode
    alone; say so where a dataset has outputs far longer than its median, and where it has fewer
    requests than a batch size (that batch size is left out for it)."""
    if config.sim.mode != "mixed" or max(config.sim.batch_sizes) == 1:
        return []
    notes = []
    for dataset, members in by_dataset(records).items():
        over = [b for b in config.sim.batch_sizes if b > len(members)]
        if over:
            notes.append(f"{dataset}: {len(members)} request{'s' * (len(members) > 1)}, so batch sizes "
                         f"{', '.join(map(str, over))} are left "
                         "out for it (mixed mode decodes B distinct requests; --mode paper replays B copies of each)")
        lengths = np.array([r.output_len for r in members])
        median = float(np.median(lengths))
        long = int(np.count_nonzero(lengths > TAIL_FACTOR * median))
        if long:
            notes.append(
                f"{dataset}: {long} request(s) have outputs over {TAIL_FACTOR}× the median ({median:.0f} tokens, "
                f"longest {lengths.max()}); in mixed mode they decode almost alone at the end of the run, so "
                "speedups at large batch sizes weigh them heavily — compare with --mode paper.")
    return notes
