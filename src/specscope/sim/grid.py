"""Simulate a grid: datasets × proposers ("acc") × policies × batch sizes.

One row per cell (:class:`SimRow`). The replay statistics of a cell are defined as:
acceptance rate α = Σ accepted drafts / Σ proposed drafts (``Plan.accepted``: what verification
accepted, past the output's end too, as an engine counts them:
:func:`~specscope.sim.plan.accepted_drafts`) and mean acceptance length τ = Σ emitted / steps
(bonus included; what the steps emitted into the output), over all steps of the plan.
"""

from __future__ import annotations

import logging
import math
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from specscope import validate
from specscope.costmodel.base import CostModel, Drafting
from specscope.costmodel.roofline import RooflineCostModel
from specscope.errors import SpecscopeError
from specscope.progress import LazyProgress
from specscope.sim.checks import LOOKUP_PROPOSERS, check_cell, check_k, check_learned_confidence, held_cells, replayable
from specscope.sim.mixed import predict_mixed
from specscope.sim.paper import predict_paper
from specscope.sim.plan import Plan, baseline_plan, make_plan, switch_k_max, traced_k_max, visit
from specscope.sim.policies import ADAPTIVE_START, Policy, bare_paired, parse_policies
from specscope.sim.pricing import DeepestPasses, Prediction
from specscope.sim.switching import SwitchDrafting, causal_plan, oracle_switch_plan
from specscope.trace.schema import ProposerTrace, TraceRecord, by_dataset

log = logging.getLogger(__name__)

COMBINED = "combined"
OPTIMISTIC = ("oracle-combined is optimistic, as the paper's: it knows every step's acceptance, choosing is free and "
              "every step pays only one proposer's drafting — its pair's lookup (n-gram in the paper), else the "
              "first-named (above oracle-switch, which charges the drafting of the proposer it picks, wherever the "
              "lookup drafts cheaper than the drafter, as on the presets)")
# The paper's guessed n-gram match probability where acc_len = 1 (shared/paper/README.md).
PAPER_MATCH_PROB = {"sharegpt": 0.2, "cnn": 0.4, "gsm8k": 0.2, "instructcoder": 0.8}


@dataclass
class SimConfig:
    """How to simulate. ``mode``: "paper" (B replicas of one request, the paper's method) or
    "mixed" (B distinct requests, continuous batching)."""

    mode: str = "mixed"
    batch_sizes: tuple[int, ...] = (1, 8, 16, 32, 64, 128)
    seed: int = 42  # the paper's seed: with it, paper mode draws the paper's 300 requests
    sample: int | None = None  # requests drawn per dataset (paper mode: 300); None = all
    match_prob: float | None = None  # n-gram match probability guess; None = per dataset
    guess_no_match: bool = True  # apply the guess where the trace has no draft_len
    combined: tuple[str, str] | None = None  # the pair of a bare oracle-combined or oracle-switch: dataset_pairs'
    # (datasets whose pairs differ are simulated apart, by_pair)
    # Mixed mode, a batch size above a dataset's request count (B distinct requests cannot be
    # filled): "skip" leaves that dataset's row out with a warning, "said" without one (the caller
    # says it once for all its runs), "refuse" is an error.
    oversize: str = "skip"

    def __post_init__(self) -> None:
        if self.mode not in ("paper", "mixed"):
            raise SpecscopeError(f"mode {self.mode!r}: expected 'paper' or 'mixed'")
        if self.oversize not in ("skip", "said", "refuse"):
            raise SpecscopeError(f"oversize {self.oversize!r}: expected 'skip', 'said' or 'refuse'")
        validate.check("seed", validate.seed, self.seed)
        if self.sample is not None:
            validate.check("sample", validate.integer, self.sample, low=1)
        if self.match_prob is not None:
            validate.check("match_prob", validate.probability, self.match_prob)
        for b in self.batch_sizes:
            validate.check("batch_sizes", validate.integer, b, low=1, high=validate.MAX_BATCH_SIZE)


PAPER_SAMPLE = 300


@dataclass
class SimRow:
    """One simulated cell."""

    dataset: str
    acc: str
    policy: str
    batch_size: int
    mode: str
    speedup: float
    steady_speedup: float  # speedup of the steady-state throughputs (see sim.mixed)
    throughput: float
    baseline_throughput: float
    latency_per_token: float
    baseline_latency_per_token: float
    acceptance_rate: float  # α = accepted / proposed drafts; NaN where nothing was proposed. Past the output's end
    # as far as the trace's acc_len reaches (the paper's arrays run past it); specscope's traces stop at the end, so an
    # engine's α (bench, serve) may count up to k more per request, drafts accepted beyond EOS (engine/records.py)
    mean_acceptance_length: float
    requests: int
    peak_kv_tokens: float = float("nan")  # the most tokens the KV cache held at once, with SD
    match_prob: float | None = None  # the no-match guess its lookup steps replayed without draft_len (None: none)
    policy_sha256: str | None = None  # a learned policy's file content (its stamp): a file fitted again is told apart
    deepest_k: int = 0  # the most draft tokens one request's step proposed (a tree: its nodes)
    time_split: dict[str, float] = field(default_factory=dict)

    def flat(self) -> dict:
        """A flat dict for CSV/JSON: the time split as ``time_<phase>_s`` columns."""
        row = asdict(self)
        split = row.pop("time_split")
        row.update({f"time_{phase}_s": seconds for phase, seconds in split.items()})
        return row


def oracle_tau(records: Sequence[TraceRecord], name: str) -> float:
    """Tokens per step of proposer ``name``'s oracle over the records that hold it (Σ emitted /
    Σ steps, pooled; NaN where they take no step): how much that proposer's traces accept."""
    steps = emitted = 0
    for record in records:
        if name in record.proposers:
            acc = record.acc_len(name).tolist()
            steps += len(visit(acc))
            emitted += max(len(acc) - 1, 0)  # the walk emits every token past the prefill's
    return emitted / steps if steps else float("nan")


def default_pair(records: Sequence[TraceRecord], names: Sequence[str],
                 aside: Sequence[str] = ()) -> tuple[tuple[str, str] | None, str]:
    """The pair a bare ``oracle-combined`` or ``oracle-switch`` replays on ``records``, and why: the
    lookup and the model proposer of ``names`` whose oracles emit the most tokens per step there
    (:func:`oracle_tau`; a tie to the first named); where ``names`` hold no lookup or no model
    proposer, the two that emit the most. None (and why) where ``names`` are fewer than two.
    ``names`` are taken as given: :func:`dataset_pairs` is the rule that chooses them (the proposers
    a cost model prices that every record of a dataset holds); ``aside``: why the others were left
    aside, said in the parenthesis beside the numbers."""
    ranked, measured = by_oracle_tau(records, names)
    measured = "; ".join([measured, *aside])
    lookups = [n for n in ranked if n in LOOKUP_PROPOSERS]
    models = [n for n in ranked if n not in LOOKUP_PROPOSERS]
    if lookups and models:
        return (lookups[0], models[0]), (f"the lookup and the model proposer whose oracles emit the most tokens "
                                         f"per step ({measured})")
    if len(ranked) >= 2:
        return (ranked[0], ranked[1]), f"the two proposers whose oracles emit the most tokens per step ({measured})"
    return None, f"the traces hold {'only ' + ranked[0] if ranked else 'no proposer'}, no pair to combine"


def by_oracle_tau(records: Sequence[TraceRecord], names: Sequence[str]) -> tuple[list[str], str]:
    """``names`` (``combined`` and repeats dropped) from the most tokens per oracle step over
    ``records`` to the fewest (NaN, no step, last; a tie to the first named), and those numbers
    as a phrase."""
    names = [n for n in dict.fromkeys(names) if n != COMBINED]
    taus = {n: oracle_tau(records, n) for n in names}
    ranked = sorted(names, key=lambda n: (math.isnan(taus[n]), -taus[n]))
    return ranked, "tokens per oracle step: " + ", ".join(f"{n} {taus[n]:.2f}" for n in ranked)


def held_by_all(records: Sequence[TraceRecord], names: Sequence[str]) -> list[str]:
    """The proposers of ``names`` every record of ``records`` holds, in the order of ``names``."""
    return [n for n in names if records and all(n in r.proposers for r in records)]


def candidates(records: Sequence[TraceRecord], cost: CostModel,
               names: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """The proposers a default may choose among on ``records`` (one dataset's): those of ``names``
    (default: every proposer the records hold) that ``cost`` prices the drafting of
    (:func:`~specscope.costmodel.registry.priced`) and every record holds; and a line per other
    one some record holds saying why it is not among them (empty where none is left aside)."""
    from specscope.costmodel.registry import priced

    held = list(dict.fromkeys(n for r in records for n in r.proposers))  # by some record: the others unsaid
    names = [n for n in dict.fromkeys(held if names is None else names) if n != COMBINED and n in held]
    kept, unpriced = priced(cost, names)
    chosen = held_by_all(records, kept)
    partly = [n for n in kept if n not in chosen]
    aside = ([f"{', '.join(unpriced)} left aside: the cost model prices no drafting of {_them(unpriced)}"]
             if unpriced else [])
    aside += [f"{', '.join(partly)} left aside: not every record holds {_them(partly)}"] if partly else []
    return chosen, aside


def _them(names: Sequence[str]) -> str:
    return "it" if len(names) == 1 else "them"


def dataset_pairs(records: Sequence[TraceRecord], cost: CostModel,
                  names: Sequence[str] | None = None) -> dict[str, tuple[tuple[str, str] | None, str]]:
    """Per dataset of ``records`` (in order), the pair a bare ``oracle-combined`` or
    ``oracle-switch`` replays there and why — the one rule simulate, overlap, report and paper
    follow: :func:`default_pair` of the :func:`candidates` there (the proposers of ``names`` the
    cost model prices that every record of the dataset holds). None (and why) where they are
    fewer than two."""
    out = {}
    for dataset, members in by_dataset(records).items():
        chosen, aside = candidates(members, cost, names)
        pair, why = default_pair(members, chosen, aside)
        if pair is None:
            why = (f"{'only ' + chosen[0] if chosen else 'none'} of its proposers can be combined"
                   + (f" ({'; '.join(aside)})" if aside else ""))
        out[dataset] = (pair, why)
    return out


def by_pair(records: Sequence[TraceRecord],
            pairs: dict[str, tuple[tuple[str, str] | None, str]]) -> dict[tuple[str, str] | None, list[TraceRecord]]:
    """``records`` grouped by their dataset's pair (:func:`dataset_pairs`), the groups in the
    order of their first dataset, each group's records in their order; ``None`` holds the
    datasets without a pair."""
    grouped: dict[tuple[str, str] | None, list[TraceRecord]] = {}
    for dataset, members in by_dataset(records).items():
        grouped.setdefault(pairs[dataset][0], []).extend(members)
    return grouped


def pair_notes(pairs: dict[str, tuple[tuple[str, str] | None, str]], policies: Sequence[str]) -> list[str]:
    """The lines saying which pair the bare ``oracle-combined`` / ``oracle-switch`` of ``policies``
    replayed in each dataset and why (:func:`dataset_pairs`), or that it was left out there (no
    pair); none where every one names its pair. One dataset: no name."""
    bare = bare_paired(policies)
    if not bare:
        return []
    notes = []
    for dataset, (pair, why) in pairs.items():
        where = f"dataset {dataset!r}: " if len(pairs) > 1 else ""
        notes.append(f"{where}{' and '.join(bare)} without a pair: {'+'.join(pair)}, {why}" if pair else
                     f"{where}{' and '.join(bare)} without a pair left out: {why} (name a pair: "
                     f"{bare[0]}:A+B)")
    return notes


def counted_over_all(total: int, drawn: int) -> str:
    """What a dataset's records lack is decided over all ``total`` of them, where ``drawn`` are
    replayed (:func:`simulate`): how a note and the report's answer say so."""
    return f"all {total} of its records counted, not only the {drawn} drawn"


def simulated_batch_sizes(rows: Sequence[SimRow]) -> list[int]:
    """The batch sizes ``rows`` simulated, in order: what notes may name (not those left out)."""
    return sorted({row.batch_size for row in rows})


def capacity_notes(rows: Sequence[SimRow], cost: CostModel) -> list[str]:
    """A line per dataset whose cells cache more tokens at once than fit beside the weights in
    the GPU's memory, where ``cost`` is a roofline (the only cost model that knows a GPU's
    memory): an engine would preempt sequences or run fewer at once, which the simulator does
    not price — those cells are optimistic."""
    if not isinstance(cost, RooflineCostModel):
        return []
    room = cost.kv_capacity_tokens()
    notes = []
    for dataset in dict.fromkeys(row.dataset for row in rows):
        over = sorted({row.batch_size for row in rows if row.dataset == dataset and row.peak_kv_tokens > room})
        if over:
            peak = max(row.peak_kv_tokens for row in rows if row.dataset == dataset)
            notes.append(f"dataset {dataset!r}: at batch size{'s' * (len(over) > 1)} {', '.join(map(str, over))} the "
                         f"KV cache holds up to {peak:,.0f} tokens, where {cost.hw.name}'s memory holds {room:,.0f} "
                         f"beside the weights ({cost.name}): an engine would preempt or run fewer requests at once, "
                         "which is not priced — those cells are optimistic")
    return notes


def match_prob_for(dataset: str, config: SimConfig, acc: str) -> float | None:
    """The no-match guess for lookup proposer ``acc`` on ``dataset``: the configured value, else
    the paper's table where a word of the dataset's name starts with one of its datasets (``cnn``
    in ``qwen3-8b_cnn`` and ``cnndm``, not in ``rcnn_eval``; ``sharegpt`` in ``ShareGPT52K``) — for
    n-gram only, the proposer it was measured for (suffix decoding matches at other rates)."""
    if config.match_prob is not None:
        return config.match_prob
    if acc != "ngram":
        return None
    named = paper_namesake(dataset)
    return None if named is None else PAPER_MATCH_PROB[named]


def paper_namesake(dataset: str) -> str | None:
    """The paper's dataset (a key of :data:`PAPER_MATCH_PROB`) a word of ``dataset``'s name starts
    with, if any (:func:`match_prob_for` takes its guess)."""
    words = re.split(r"[^a-z0-9]+", dataset.lower())
    return next((name for name in PAPER_MATCH_PROB if any(w.startswith(name) for w in words)), None)


def no_match_notes(records: Sequence[TraceRecord], accs: Sequence[str], config: SimConfig,
                   option: bool = True) -> list[str]:
    """One line per dataset × lookup proposer some of whose records keep no draft_len: what was
    assumed there — the no-match guess (``--match-prob``, or the paper's for a dataset named like
    one of its four), or, where none applies, that every step proposed — so that a result never
    rests on a file's name or a missing field unsaid (``option``: naming ``--match-prob``)."""
    notes = []
    for dataset in dict.fromkeys(r.dataset or "trace" for r in records):
        mine = [r for r in records if (r.dataset or "trace") == dataset]
        for acc in (a for a in accs if a in LOOKUP_PROPOSERS):
            prob = match_prob_for(dataset, config, acc) if config.guess_no_match else None
            holding = [r for r in mine if acc in r.proposers]
            lacking = sum(r.proposers[acc].draft_len is None for r in holding)
            if not lacking:
                continue
            which = "" if lacking == len(holding) else f" in {lacking} of its {len(holding)} records (the others: their own)"
            if prob is None:
                why = "--no-guess" if not config.guess_no_match else \
                    "no guess applies" + (": --match-prob sets one" if option else "")
                notes.append(f"dataset {dataset!r}: {acc} recorded no draft_len{which}, so its fixed and adaptive "
                             f"steps there are taken to have proposed (and paid its drafting) ({why})")
                continue
            source = "--match-prob" if config.match_prob is not None else \
                f"the paper's guess for its {paper_namesake(dataset)} traces"
            notes.append(f"dataset {dataset!r}: {acc} recorded no draft_len{which}, so a step that accepted nothing "
                         f"is taken to have found a match (and paid its drafting) with probability {prob:g} ({source})")
    return notes


def adaptive_notes(records: Sequence[TraceRecord], accs: Sequence[str], policies: Sequence[str]) -> list[str]:
    """One line per dataset × proposer whose traced depth is below adaptive's start (k = 5): there
    adaptive starts at that depth and can grow no further (the trace cannot tell what a deeper
    draft would have given), a policy other than the one its name promises — where a fixed:k
    that deep is refused."""
    if "adaptive" not in policies:
        return []
    notes = []
    for dataset, mine in by_dataset(records).items():
        for acc in accs:
            holding = [r for r in mine if acc in r.proposers]
            depth = traced_k_max(holding, [acc]) if holding else ADAPTIVE_START
            if depth < ADAPTIVE_START:
                source = "its k_max" if all(r.k_max is not None for r in holding) else "its longest acc_len − 1"
                notes.append(f"dataset {dataset!r}: {acc} was traced to k = {depth} ({source}), below adaptive's start "
                             f"k = {ADAPTIVE_START}: adaptive there starts at k = {depth} and grows no further")
    return notes


SEVERAL = ("oracle-switch:", "oracle-combined:", "learned:")  # the policies that read several proposers' arrays


def length_notes(records: Sequence[TraceRecord], policies: Sequence[str]) -> list[str]:
    """A line where policies of several proposers sit beside others on records whose acc_len
    arrays and output differ in length (``--lengths own``): they replay the positions their
    arrays share (oracle-switch and learned: and the output), the others each proposer's whole
    array — two sets of tokens in one table."""
    switching = [p for p in policies if p.startswith(SEVERAL)]
    uneven = sum(bool(r.uneven) for r in records)
    if not switching or len(switching) == len(policies) or not uneven:
        return []
    verb = "replays" if len(switching) == 1 else "replay"
    return [f"{', '.join(switching)} {verb} the positions its proposers' acc_len share, the other policies each "
            f"proposer's whole array ({uneven} of {len(records)} records differ): --lengths common replays one set "
            "of tokens for all"]


def _feasible(batch_sizes: Sequence[int], requests: int, dataset: str, config: SimConfig) -> list[int]:
    """The batch sizes one dataset can fill (see :attr:`SimConfig.oversize`)."""
    if config.mode != "mixed":
        return list(batch_sizes)
    over = [b for b in batch_sizes if b > requests]
    if over and config.oversize == "refuse":
        raise SpecscopeError(f"--batch-sizes: dataset {dataset!r} has {requests} requests, fewer than batch "
                             f"size {over[0]} (mixed mode decodes B distinct requests; use batch sizes up to "
                             f"{requests}, or --mode paper)")
    if over and config.oversize == "skip":
        log.warning("dataset %r has %d requests: batch sizes %s left out (mixed mode decodes B distinct requests)",
                    dataset, requests, ",".join(map(str, over)))
    return [b for b in batch_sizes if b <= requests]


def sample_size(config: SimConfig) -> int | None:
    """Requests drawn per dataset: ``--sample``, else the paper's 300 in paper mode (None: all)."""
    return config.sample if config.sample is not None else (PAPER_SAMPLE if config.mode == "paper" else None)


def oversize_notes(records: Sequence[TraceRecord], config: SimConfig) -> list[str]:
    """Mixed mode: one line per dataset holding fewer requests than some batch sizes, which it
    cannot fill (their cells left out)."""
    counts = Counter(r.dataset or "trace" for r in records)
    return [f"dataset {name!r} holds {count} requests: B={','.join(map(str, over))} left out there (mixed mode "
            "decodes B distinct requests; --mode paper B copies of each)"
            for name, count in counts.items()
            if config.mode == "mixed" and (over := [b for b in config.batch_sizes if b > count])]


def sample_notes(records: Sequence[TraceRecord], config: SimConfig, option: bool = True) -> list[str]:
    """One line per dataset holding more requests than are drawn from it: how many were replayed
    (``option``: and the ``--sample`` that replays them all); and one per dataset holding fewer
    than ``--sample`` asks for: all of them replayed, fewer than the sample its rows name."""
    size = sample_size(config)
    counts = Counter(r.dataset or "trace" for r in records)
    why = "--sample" if config.sample is not None else "paper mode draws the paper's 300"
    drawn = [f"dataset {dataset!r}: {size} of its {count} requests drawn at random (seed {config.seed}; {why}"
             + (f"; --sample {count} replays them all)" if option else ")")
             for dataset, count in counts.items() if size is not None and count > size]
    short = [f"dataset {dataset!r}: --sample {config.sample}, but it holds {count} request{'s' * (count > 1)}: "
             f"all {count} replayed (its rows' requests)"
             for dataset, count in counts.items() if config.sample is not None and count < config.sample]
    return drawn + short


def sampled(records: list[TraceRecord], config: SimConfig) -> list[TraceRecord]:
    """The requests of one dataset a simulation replays (:func:`sample_size` of them)."""
    size = sample_size(config)
    if size is None or len(records) <= size:
        return records
    # Python's random.sample, as the paper's simulator drew its requests (same seed, same set).
    chosen = sorted(random.Random(config.seed).sample(range(len(records)), size))
    return [records[i] for i in chosen]


def plan_for(records: Sequence[TraceRecord], acc: str, policy: Policy, config: SimConfig,
             dataset: str, batch_size: int = 1) -> Plan:
    """Walk ``records`` under ``policy`` using proposer ``acc`` (or the combined pair, or the
    switching policy's proposers); a causal switching policy decides for ``batch_size``."""
    prompt_lens = [r.prompt_len for r in records]
    if policy.switch is not None:
        if policy.decide_for is None:
            return oracle_switch_plan(records, policy.switch)
        k_max = switch_k_max(records, policy.switch)
        return causal_walk(records, policy, k_max if policy.depth is None else min(k_max, policy.depth),
                           batch_size, config.mode)
    if policy.tree is not None:
        acc_lens = [policy.tree.acc_len(r.proposers[acc].tree_rank) for r in records]
        return make_plan(acc_lens, prompt_lens, policy, policy.tree.depth)
    if policy.combined:
        a, b = policy.combined
        acc_lens = []
        for r in records:
            first, second = r.acc_len(a), r.acc_len(b)
            common = min(len(first), len(second))
            acc_lens.append(np.maximum(first[:common], second[:common]))
        return make_plan(acc_lens, prompt_lens, policy, traced_k_max(records, policy.combined), seed=config.seed)
    traces = [r.proposers[acc] for r in records]
    return make_plan(
        [t.acc_len for t in traces], prompt_lens, policy, traced_k_max(records, [acc]),
        draft_lens=[t.draft_len for t in traces],  # each record's own; the guess only where one lacks it
        match_prob=guessed_match_prob(records, acc, policy, config, dataset),
        seed=config.seed, draft_probs=kept_alike(traces) if policy.by_confidence is not None else None,
    )


def kept_alike(traces: Sequence[ProposerTrace]) -> list[np.ndarray]:
    """Each trace's ``draft_prob`` [G, m] cut to the fewest drafts any of them kept (records that
    keep different depths are refused unless the policy names a depth within all of them,
    :func:`_check_confidence`): a confidence policy stops at one depth over a dataset."""
    kept = min(t.draft_prob.shape[1] for t in traces)
    return [t.draft_prob[:, :kept] for t in traces]


def guessed_match_prob(records: Sequence[TraceRecord], acc: str, policy: Policy, config: SimConfig,
                       dataset: str) -> float | None:
    """The no-match guess a chain of lookup proposer ``acc`` replays on ``records`` of ``dataset``
    without a draft_len (:func:`match_prob_for`), ``None`` where none is guessed: every record
    keeps its draft_len, the guess is off (``--no-guess``), the dataset has none, or the policy
    is no chain of one proposer (a tree, an oracle of two, a switch)."""
    if (not config.guess_no_match or acc not in LOOKUP_PROPOSERS or policy.switch is not None
            or policy.tree is not None or policy.combined
            or all(r.proposers[acc].draft_len is not None for r in records)):
        return None
    return match_prob_for(dataset, config, acc)


def causal_walk(records: Sequence[TraceRecord], policy: Policy, k_max: int, batch_size: int, mode: str) -> Plan:
    """The plan of a causal policy at ``batch_size``. Paper mode: every step runs at B copies of
    its request, which decides alone. Mixed mode: the requests run together as the mixed
    schedule runs them, each iteration's decided together at its count (fewer than B while the
    run fills and drains), as an engine's policy decides. A learned policy's admission gate at
    ``batch_size`` commits some requests to one chain each (:mod:`specscope.policy.gate`)."""
    return causal_plan(records, policy.switch, policy.decide_for, k_max, batch_size, together=mode != "paper",
                       confidence_for=policy.confidence_for,
                       gate=None if policy.gate_for is None else policy.gate_for(batch_size))


def drafting_of(cost: CostModel, acc: str, policy: Policy) -> Drafting | SwitchDrafting:
    """What ``policy``'s steps draft with: the switching policy's proposers (a causal one priced
    as the engine runs it); for oracle-combined the lookup's of its pair (the paper's rule: every
    step pays n-gram's drafting, whichever proposer it takes — optimistic), the first-named's when
    neither is a lookup; else ``acc``'s — a model drafter's passes run to the deepest k among a
    step's rows (:class:`~specscope.sim.pricing.DeepestPasses`: adaptive's rows propose different
    k), as an engine runs them, but an oracle's keep the optimistic mean of its rows' k."""
    if policy.switch is not None:
        return SwitchDrafting.of(cost, policy.switch, causal=policy.decide_for is not None)
    if policy.combined:
        lookups = [m for m in policy.combined if m in LOOKUP_PROPOSERS]
        return cost.drafting_for((lookups or list(policy.combined))[0])
    drafting = cost.drafting_for(acc)
    if acc in LOOKUP_PROPOSERS or acc == COMBINED or policy.name == "oracle":
        return drafting
    return DeepestPasses(drafting)


def cells(accs: Sequence[str], policies: Sequence[Policy]) -> list[tuple[str, Policy]]:
    """The (acc, policy) pairs that make sense: each proposer of ``accs`` with each one-proposer
    policy; oracle-combined and a switching policy make one cell each whatever ``accs`` (acc
    ``combined``, and ``a+b`` naming a switching policy's proposers), named or not in ``accs``.
    A tree or a confidence policy goes with each model proposer of ``accs`` (a lookup drafts no
    tree and has no confidence: n-gram beside EAGLE gets no such cell). A one-proposer policy with no proposer in ``accs`` to run it, or
    ``combined`` with no oracle-combined policy, is refused: no cell would hold it."""
    single = [p for p in policies if p.switch is None and not p.combined]
    if single and accs and all(acc == COMBINED for acc in accs):
        raise SpecscopeError(f"{single[0].name}: --acc names no proposer to replay it with ('combined' goes with "
                             "oracle-combined only)")
    if COMBINED in accs and not any(p.combined for p in policies):
        raise SpecscopeError("--acc combined: goes with oracle-combined only, and no policy given is one")
    drafters = [acc for acc in accs if acc != COMBINED and acc not in LOOKUP_PROPOSERS]
    pairs = [(acc, p) for acc in accs if acc != COMBINED for p in single
             if (p.tree is None and p.by_confidence is None) or acc in drafters
             or not drafters]  # lookups alone: refused by _check_tree and _check_confidence
    pairs += [(COMBINED, p) for p in policies if p.combined]
    pairs += [("+".join(p.switch), p) for p in policies if p.switch is not None]
    if not pairs:
        raise SpecscopeError("no valid acc × policy pair: name proposers with --acc for fixed:k, adaptive and "
                             "oracle ('combined' goes with oracle-combined only)")
    return pairs


def simulate(records: Sequence[TraceRecord], accs: Sequence[str], policies: Sequence[str],
             cost: CostModel, config: SimConfig,
             on_row: Callable[[SimRow], None] | None = None, missing: list[str] | None = None,
             lacking: list[str] | None = None) -> list[SimRow]:
    """Simulate every dataset × acc × policy × batch size; rows in that order. A dataset whose
    records lack a proposer a cell needs, or were traced shallower than a cell proposes, is
    refused, or, given a ``missing`` list (a report over datasets traced with different proposers
    or depths), has that cell left out and a note added there; given a ``lacking`` list, a cell
    whose proposer some records lack is left out (said there), one traced too shallow refused.
    What records lack is decided over all the dataset's records, also where fewer are drawn."""
    lacking = missing if lacking is None else lacking
    parsed = parse_policies(policies, config.combined)
    pairs = cells(accs, parsed)
    predict = predict_paper if config.mode == "paper" else predict_mixed
    groups = []  # (dataset, its sampled requests, its cells, its batch sizes): all checked before any work
    for dataset, whole in by_dataset(records).items():
        members = sampled(whole, config)
        sizes = _feasible(config.batch_sizes, len(members), dataset, config)
        # What a dataset's records lack is decided over all of them, not the requests drawn (a cell
        # replayed by one seed's draw and left out by another's, and the report's answer counting
        # all of them, disagreed): the notes count its records and say so where fewer are drawn.
        said = len(lacking) if lacking is not None else 0
        mine = pairs if lacking is None else held_cells(whole, pairs, dataset, lacking)
        if lacking is not None and len(members) < len(whole):
            lacking[said:] = [f"{line} ({counted_over_all(len(whole), len(members))})" for line in lacking[said:]]
        for acc, policy in mine:
            check_cell(whole, acc, policy, dataset)
            if policy.confidence_for is not None:
                check_learned_confidence(members, policy, dataset, sizes, config.mode)
            drafting_of(cost, acc, policy)  # a missing one is an error
        if missing is None:
            for acc, policy in mine:
                check_k(members, acc, policy, dataset)
        else:  # a cell deeper than this dataset's traces is left out, said
            mine = [(acc, policy) for acc, policy in mine if replayable(members, acc, policy, dataset, missing)]
        groups.append((dataset, members, mine, sizes))
    rows: list[SimRow] = []
    total = sum(len(mine) * len(sizes) for _, _, mine, sizes in groups)
    with LazyProgress(f"simulating ({config.mode} mode)", total) as bar:
        for dataset, members, mine, sizes in groups:
            baselines: dict[tuple[int, ...], Plan] = {}
            baseline_predictions: dict[tuple[tuple[int, ...], int], Prediction] = {}
            for acc, policy in mine:
                drafting = drafting_of(cost, acc, policy)
                guess = guessed_match_prob(members, acc, policy, config, dataset)  # the row says what it replayed
                plan = None
                for b in sizes:
                    if plan is None or policy.decide_for is not None:  # a causal policy decides per batch size
                        plan = plan_for(members, acc, policy, config, dataset, b)
                        key = tuple(plan.output_len.tolist())
                        base = baselines.setdefault(key, baseline_plan(plan.output_len, plan.prompt_len))
                        proposed = plan.proposed.sum()
                        alpha = float(plan.accepted.sum() / proposed) if proposed else float("nan")
                        tau = float(plan.emitted.mean()) if len(plan.emitted) else float("nan")  # no step: none
                        deepest = int(plan.proposed.max(initial=0))
                    sd = predict(plan, cost, drafting, b)
                    base_pred = baseline_predictions.get((key, b))
                    if base_pred is None:
                        base_pred = baseline_predictions[(key, b)] = predict(base, cost, None, b)
                    row = SimRow(
                        dataset=dataset, acc=acc, policy=policy.name, batch_size=b, mode=config.mode,
                        speedup=sd.throughput / base_pred.throughput,
                        steady_speedup=sd.steady_throughput / base_pred.steady_throughput,
                        throughput=sd.throughput, baseline_throughput=base_pred.throughput,
                        latency_per_token=sd.latency_per_token,
                        baseline_latency_per_token=base_pred.latency_per_token,
                        acceptance_rate=alpha, mean_acceptance_length=tau,
                        requests=len(members), peak_kv_tokens=sd.peak_kv_tokens, policy_sha256=policy.sha256,
                        match_prob=guess,
                        deepest_k=deepest,
                        time_split=sd.time_split,
                    )
                    rows.append(row)
                    if on_row:
                        on_row(row)
                    bar.advance(description=f"{dataset} {acc} {policy.name}")
    return rows

