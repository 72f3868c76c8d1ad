"""Prompt/output overlap (BLEU-4) and how n-gram's advantage over EAGLE follows it.

BLEU-4 of a request: sacrebleu's sentence BLEU with the output read as hypothesis (the whole
output, or under ``--lengths common`` the positions every acc_len array covers: a row's
``output_tokens``) and the prompt as the single reference, on token ids (each id a word: ids joined by spaces, ``tokenize="none"``,
``effective_order=True``), divided by 100 so it lies in [0, 1]. A high score means the output
repeats n-grams of the prompt, which is what prompt-lookup drafting (n-gram) can exploit.

Requests are put in BLEU bins (``BLEU_EDGES``: 0–0.2, 0.2–0.4, …, 0.8–1.0; 1.0 falls in the
last bin); per dataset × bin × batch size the simulator is run on that bin's requests alone,
and the relative speedup of a lookup policy over the reference is
``speedup(lookup, policy) / speedup(reference, reference_policy) − 1``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specscope.analysis.acceptance import by_dataset
from specscope.costmodel.base import CostModel
from specscope.errors import SpecscopeError
from specscope.sim.checks import LOOKUP_PROPOSERS
from specscope.sim.grid import SimConfig, by_oracle_tau, candidates, oversize_notes, simulate
from specscope.sim.plan import traced_k_max
from specscope.sim.policies import parse_policies, parse_policy
from specscope.trace.schema import TraceRecord

BLEU_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class OverlapConfig:
    """Which proposers and policies the overlap comparison uses, and the simulator mode: paper
    mode by default, since a BLEU bin holds few requests and in mixed mode its speedup at a large
    batch would be the drain of its few longest requests rather than the effect of overlap."""

    lookup: str = "ngram"
    lookup_policies: tuple[str, ...] = ("fixed:3", "fixed:5")
    reference: str | None = None  # None: each dataset's default (default_references)
    reference_policy: str = "fixed:3"
    edges: tuple[float, ...] = BLEU_EDGES
    mode: str = "paper"


def _words(ids: np.ndarray) -> str:
    return " ".join(map(str, ids.tolist()))


def bleu_scores(records: Sequence[TraceRecord]) -> np.ndarray:
    """BLEU-4 of each record's output against its prompt, in [0, 1] ([records] float64; sacrebleu's
    percentage over 100, which rounding can put a few ulps past 1 for an output equal to its
    prompt)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(tokenize="none", effective_order=True)
    return np.clip([
        bleu.sentence_score(_words(r.output_token_ids), [_words(r.prompt_token_ids)]).score / 100.0
        if r.prompt_len else 0.0
        for r in records
    ], 0.0, 1.0)


def bin_index(scores: np.ndarray, edges: Sequence[float] = BLEU_EDGES) -> np.ndarray:
    """The bin of each score: ``edges[i] <= score < edges[i+1]``; the top edge joins the last bin."""
    inner = np.asarray(edges[1:-1])
    return np.searchsorted(inner, np.asarray(scores), side="right")


def bin_label(i: int, edges: Sequence[float] = BLEU_EDGES) -> str:
    return f"{edges[i]:.1f}–{edges[i + 1]:.1f}"


@dataclass
class BleuRow:
    """One request's BLEU-4 and bin, and the output tokens it scored."""

    dataset: str
    id: str
    bleu: float
    bin: str
    output_tokens: int

    def flat(self) -> dict:
        return asdict(self)


@dataclass
class OverlapRow:
    """Relative speedup of ``lookup`` with ``policy`` over the reference in one BLEU bin."""

    dataset: str
    bin: str
    bin_lo: float
    bin_hi: float
    requests: int
    batch_size: int
    policy: str
    lookup_speedup: float
    reference_speedup: float
    relative_speedup: float
    mode: str = "paper"  # the simulator's mode (OverlapConfig.mode: paper by default, whatever else the run uses)
    reference: str = ""  # the model proposer the lookup is set against (OverlapConfig.reference)
    lookup: str = ""  # the lookup proposer whose speedup ``policy`` is (OverlapConfig.lookup)
    reference_policy: str = ""  # the reference's policy (OverlapConfig.reference_policy)

    def flat(self) -> dict:
        return asdict(self)


def request_bleu(records: Sequence[TraceRecord], scores: np.ndarray | None = None,
                 edges: Sequence[float] = BLEU_EDGES) -> list[BleuRow]:
    """BLEU-4 and bin label per request (``scores``: precomputed :func:`bleu_scores`)."""
    scores = bleu_scores(records) if scores is None else scores
    bins = bin_index(scores, edges)
    return [BleuRow(r.dataset or "trace", r.id, float(s), bin_label(int(b), edges), r.output_len)
            for r, s, b in zip(records, scores, bins)]


def default_references(records: Sequence[TraceRecord], lookup: str, cost: CostModel,
                       reference: str | None = None) -> dict[str, tuple[str, str]]:
    """Each dataset's reference for ``lookup`` and why: ``reference`` where given, else the model
    proposer (not ``lookup``) whose oracle emits the most tokens per step there, among those
    the cost model prices that every record of the dataset holds
    (:func:`~specscope.sim.grid.candidates`, the rule of the default pair: with n-gram as the
    lookup, the proposer a bare oracle-combined pairs it with, :func:`~specscope.sim.grid.dataset_pairs`).
    A dataset without such a proposer is not listed; none anywhere is refused, naming why."""
    if reference is not None:
        return {dataset: (reference, "given") for dataset in by_dataset(records)}
    chosen, why_not = {}, []
    for dataset, members in by_dataset(records).items():
        held, aside = candidates(members, cost)
        models = [n for n in held if n not in LOOKUP_PROPOSERS and n != lookup]
        if models:
            ranked, measured = by_oracle_tau(members, models)
            chosen[dataset] = (ranked[0], f"the model proposer whose oracle emits the most tokens per step, of those "
                                          f"the cost model prices that every record holds ({measured}"
                                          + "".join(f"; {line}" for line in aside) + ")")
        else:
            lookups = [n for n in held if n != lookup]  # what else it holds: lookups
            parts = [f"{', '.join(lookups)}: {'a lookup' if len(lookups) == 1 else 'lookups'}"] * bool(lookups) + aside
            why_not.append(f"dataset {dataset!r}: {'; '.join(parts) or 'it holds no other proposer'}")
    if not chosen:
        raise SpecscopeError(f"overlap: no model proposer to set {lookup} against (--reference names one): "
                             + "; ".join(why_not))
    return chosen


def overlap_by_reference(records: Sequence[TraceRecord], cost: CostModel, sim: SimConfig, config: OverlapConfig,
                         references: dict[str, str], scores: np.ndarray | None = None,
                         notes: list[str] | None = None) -> list[OverlapRow]:
    """:func:`overlap_speedups` of each dataset of ``records`` against its own reference
    (``references``, dataset → proposer: :func:`default_references`), the datasets that share one
    simulated together; rows in the datasets' order. A dataset not in ``references`` has none."""
    scores = bleu_scores(records) if scores is None else scores
    rows: list[OverlapRow] = []
    for reference in dict.fromkeys(references.values()):
        mine = np.array([references.get(r.dataset or "trace") == reference for r in records])
        rows += overlap_speedups([r for r, held in zip(records, mine) if held], cost, sim,
                                 dataclasses.replace(config, reference=reference), scores[mine], notes=notes)
    order = list(by_dataset(records))
    return sorted(rows, key=lambda row: order.index(row.dataset))


def overlap_speedups(records: Sequence[TraceRecord], cost: CostModel, sim: SimConfig,
                     config: OverlapConfig = OverlapConfig(), scores: np.ndarray | None = None,
                     notes: list[str] | None = None) -> list[OverlapRow]:
    """Per dataset × BLEU bin × batch size × lookup policy: speedups from the simulator run on
    that bin's requests. Bins with no request are listed with ``requests = 0`` and NaN speedups.
    ``scores`` may pass precomputed :func:`bleu_scores` of ``records``. (The simulator
    reports a proposer missing from some records.) In mixed mode a bin of fewer requests than a
    batch size has NaN there; ``notes`` (where given) gets one line per such bin, said once for
    both proposers' runs."""
    scores = bleu_scores(records) if scores is None else scores
    if config.reference is None:  # one dataset's, else overlap_by_reference gives each its own
        references = {ref for ref, _ in default_references(records, config.lookup, cost).values()}
        if len(references) > 1:
            raise SpecscopeError(f"overlap: the datasets' references differ ({', '.join(sorted(references))}): "
                                 "overlap_by_reference sets each against its own")
        config = dataclasses.replace(config, reference=references.pop())
    bins = bin_index(scores, config.edges)
    labelled: list[TraceRecord] = []
    keys: dict[str, tuple[str, int]] = {}
    counts: dict[tuple[str, int], int] = {}
    for record, b in zip(records, bins):
        dataset = record.dataset or "trace"
        # The label keeps the dataset's name, so per-dataset simulator settings still apply.
        label = f"{dataset} [BLEU {bin_label(int(b), config.edges)}]"
        keys[label] = (dataset, int(b))
        counts[(dataset, int(b))] = counts.get((dataset, int(b)), 0) + 1
        labelled.append(dataclasses.replace(record, dataset=label))
    # Simulate every request of a bin (paper mode would otherwise sample 300).
    sim = dataclasses.replace(sim, sample=len(records), mode=config.mode, oversize="said" if notes is not None else "skip")
    if notes is not None:
        notes.extend(oversize_notes(labelled, sim))
    speed: dict[tuple[str, int, str, str, int], float] = {}
    name = {p: policy.name for p, policy in zip(config.lookup_policies, parse_policies(config.lookup_policies))}
    name[config.reference_policy] = parse_policy(config.reference_policy).name
    lookup_rows = simulate(_at_dataset_depth(labelled, keys, config.lookup), [config.lookup],
                           sorted({name[p] for p in config.lookup_policies}), cost, sim)
    reference_rows = simulate(_at_dataset_depth(labelled, keys, config.reference), [config.reference],
                              [name[config.reference_policy]], cost, sim)
    for row in lookup_rows + reference_rows:  # only the cells the comparison reads
        dataset, b = keys[row.dataset]
        speed[(dataset, b, row.acc, row.policy, row.batch_size)] = row.speedup
    out: list[OverlapRow] = []
    n_bins = len(config.edges) - 1
    for dataset in by_dataset(records):
        for b in range(n_bins):
            for batch_size in sim.batch_sizes:
                ref = speed.get((dataset, b, config.reference, name[config.reference_policy], batch_size), np.nan)
                for policy in config.lookup_policies:
                    look = speed.get((dataset, b, config.lookup, name[policy], batch_size), np.nan)
                    out.append(OverlapRow(
                        dataset, bin_label(b, config.edges), config.edges[b], config.edges[b + 1],
                        counts.get((dataset, b), 0), batch_size, name[policy], look, ref, look / ref - 1.0,
                        config.mode, config.reference, config.lookup, name[config.reference_policy]))
    return out


def _at_dataset_depth(labelled: Sequence[TraceRecord], keys: dict[str, tuple[str, int]],
                      proposer: str) -> list[TraceRecord]:
    """``labelled`` (each record's dataset a bin's label, ``keys``: label → (dataset, bin)) with
    the depth ``proposer`` was traced to over its whole dataset written into the records that
    declare no k_max: a bin's few requests would infer their own, shallower one (refusing a k
    the dataset reaches, and moving adaptive's cap from bin to bin)."""
    members: dict[str, list[TraceRecord]] = {}
    for record in labelled:
        members.setdefault(keys[record.dataset][0], []).append(record)
    depth = {dataset: traced_k_max(group, [proposer]) for dataset, group in members.items()}
    return [record if record.k_max is not None else dataclasses.replace(record, k_max=depth[keys[record.dataset][0]])
            for record in labelled]
