"""What a trace can replay: a policy no deeper than its proposers were traced, the proposers a
cell replays held by every record, a tree's ranks and a drafter's probabilities recorded as deep
as the policy reads them. Each check refuses in one line naming the dataset, the proposer, the
policy and what to re-trace."""

from __future__ import annotations

from typing import Sequence

from specscope import validate
from specscope.errors import SpecscopeError
from specscope.methods import of_kind
from specscope.sim.plan import switch_k_max, traced_k_max
from specscope.sim.policies import Policy
from specscope.trace.schema import TraceRecord, by_dataset

# Proposers that look tokens up (and may find nothing), as opposed to model drafters.
LOOKUP_PROPOSERS = frozenset(m.name for m in of_kind("lookup"))


def check_k_by_dataset(records: Sequence[TraceRecord], acc: str, policy: Policy) -> None:
    """:func:`check_k` for the records of each dataset among ``records``."""
    for dataset, group in by_dataset(records).items():
        check_k(group, acc, policy, dataset)


def check_k(records: Sequence[TraceRecord], acc: str, policy: Policy, dataset: str) -> None:
    """Refuse a policy that proposes more drafts than the trace measured: a ``fixed:k`` above its
    k_max, or a learned policy whose deepest k is (its walk would stop at the trace's depth)."""
    limit = policy.max_k if policy.max_k is not None else policy.depth
    if limit is None or policy.combined:
        return
    if policy.switch:  # it proposes each proposer at its own depth: the shallowest one limits it
        acc = min(policy.switch, key=lambda p: traced_k_max(records, [p]))
    k_max = traced_k_max(records, [acc])
    if limit <= k_max:
        return
    if len({r.k_max for r in records}) > 1:
        measured = f"{k_max}, the depth all its records were traced to (their k_max differ)"
    elif records[0].k_max is not None:
        measured = f"the trace's k_max = {k_max}"
    else:
        measured = (f"{k_max}, the largest acc_len − 1 of {acc} in the trace (k_max not recorded: the trace cannot "
                    "tell what more drafts would have given beyond what it recorded)")
    refit = f" (fit it with --max-k {k_max})" if policy.switch else ""
    raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: policy {policy.name!r} proposes "
                         f"k = {limit}, above {measured}{refit}")


def replayable(records: Sequence[TraceRecord], acc: str, policy: Policy, dataset: str, notes: list[str]) -> bool:
    """:func:`check_k`, its refusal a line in ``notes`` (the cell left out) instead of an error."""
    try:
        check_k(records, acc, policy, dataset)
    except SpecscopeError as error:
        notes.append(f"{error}: that cell is left out")
        return False
    return True


def held_cells(records: Sequence[TraceRecord], pairs: list[tuple[str, Policy]], dataset: str,
               missing: list[str]) -> list[tuple[str, Policy]]:
    """The cells whose proposers every record of ``dataset`` holds; one line in ``missing`` per
    proposer some of its records lack (:func:`lacking_note`), whose cells are left out."""
    lacking = lacking_records(records, [name for acc, policy in pairs for name in _replayed_proposers(acc, policy)])
    missing.extend(lacking_note(dataset, name, ids, len(records)) for name, ids in lacking.items())
    return [(acc, policy) for acc, policy in pairs if not set(_replayed_proposers(acc, policy)) & set(lacking)]


def lacking_records(records: Sequence[TraceRecord], names: Sequence[str]) -> dict[str, list[str]]:
    """Per proposer of ``names`` (in order, each once) that some of ``records`` lack: their ids."""
    lacking = {name: [r.id for r in records if name not in r.proposers] for name in dict.fromkeys(names)}
    return {name: ids for name, ids in lacking.items() if ids}


def lacking_note(dataset: str, name: str, ids: Sequence[str], total: int) -> str:
    """The line saying that ``ids``, of a dataset's ``total`` records, lack proposer ``name`` and
    that its cells there are left out (a cell compares proposers on the same requests)."""
    counted = f"none of its {total} records holds it" if len(ids) == total else \
        f"{len(ids)} of {total} records lack it (first id {ids[0]!r})"
    return (f"dataset {dataset!r}: its traces do not all hold proposer {name!r}: {counted}, so its cells with {name} "
            "are left out")


def _replayed_proposers(acc: str, policy: Policy) -> tuple[str, ...]:
    """The proposers whose traces a cell replays: a combined or switching policy's, else ``acc``."""
    return policy.combined or policy.switch or (acc,)


def check_cell(records: Sequence[TraceRecord], acc: str, policy: Policy, dataset: str) -> None:
    """Refuse a cell whose replayed proposers some record of ``dataset`` lacks, a tree policy
    without ranks deep enough, a confidence policy without the drafter's probabilities."""
    for name in _replayed_proposers(acc, policy):
        missing = [r.id for r in records if name not in r.proposers]
        if missing:
            asks = "" if name == acc else f" (policy {policy.name!r} replays it)"
            raise SpecscopeError(
                f"dataset {dataset!r}: proposer {name!r}{asks} missing from {len(missing)} records "
                f"(first id {missing[0]!r}); held by every record: "
                f"{', '.join(sorted(set.intersection(*(set(r.proposers) for r in records)))) or 'none'}"
            )
    if policy.tree is not None:
        _check_tree(records, acc, policy, dataset)
    if policy.by_confidence is not None:
        _check_confidence(records, acc, policy, dataset)


def check_learned_confidence(records: Sequence[TraceRecord], policy: Policy, dataset: str,
                              batch_sizes: Sequence[int], mode: str) -> None:
    """Refuse a learned policy whose rules for the iterations walked at ``batch_sizes`` (paper mode:
    B; mixed: every count up to B) stop a model drafter at its confidence (a ``confidence`` p in its
    file), on records that keep that drafter's ``draft_prob`` to fewer drafts than its walk may
    propose: past them it could not tell where the drafter stops."""
    counts = sorted({c for b in batch_sizes for c in ([b] if mode == "paper" else range(1, b + 1))})
    stopping = sorted({policy.confidence_for(c) for c in counts} - {None})
    if not stopping:
        return
    depth = min(switch_k_max(records, policy.switch), policy.depth or validate.K_MAX_LIMIT)
    for name in policy.switch:
        if name in LOOKUP_PROPOSERS:
            continue
        kept = _kept_depths(records, name)
        shallow = min(kept, key=kept.get)
        if kept[shallow] < depth:
            raise SpecscopeError(f"dataset {dataset!r}, proposer {name!r}: policy {policy.name!r} stops it at its "
                                 f"confidence (p = {', '.join(map(str, stopping))}: the drafter's probability of each "
                                 f"draft, draft_prob) to k = {depth} at batch size {', '.join(map(str, batch_sizes))} "
                                 f"({mode} mode), but record {shallow!r} keeps "
                                 f"draft_prob to {kept[shallow]} drafts: re-trace with `specscope trace --draft-probs "
                                 f"{depth}` (`policy explain` lists the batch sizes whose rule stops it)")


def _kept_depths(records: Sequence[TraceRecord], proposer: str) -> dict[str, int]:
    """Per record id, the drafts whose probability ``proposer``'s trace keeps (0: no ``draft_prob``)."""
    return {r.id: 0 if r.proposers[proposer].draft_prob is None else r.proposers[proposer].draft_prob.shape[1]
            for r in records}


def _check_confidence(records: Sequence[TraceRecord], acc: str, policy: Policy, dataset: str) -> None:
    """Refuse a confidence policy on a proposer without ``draft_prob`` to read (a lookup has none;
    the paper's traces keep none), or whose records keep it to fewer drafts than the policy may
    propose: asked for k (``confidence:p:k``), fewer than k; else fewer in some records than in
    others (a trace resumed across versions that kept 4): it would stop at the shallowest unsaid."""
    kept = _kept_depths(records, acc)
    missing = [rid for rid, depth in kept.items() if not depth]
    if missing:
        why = f"{acc} is a lookup and has no probabilities" if acc in LOOKUP_PROPOSERS else \
            "re-trace with `specscope trace`, whose model proposers keep it (`--draft-probs N`: of N drafts)"
        raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: policy {policy.name!r} reads the drafter's "
                             f"probability of each draft (draft_prob), which {len(missing)} records lack (first id "
                             f"{missing[0]!r}): {why}")
    shallow = min(kept, key=kept.get)
    deepest = max(kept.values())
    if policy.max_k is not None and policy.max_k > kept[shallow]:
        raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: policy {policy.name!r} may propose "
                             f"k = {policy.max_k}, but record {shallow!r} keeps draft_prob to {kept[shallow]} drafts "
                             f"(give k <= {kept[shallow]}, or re-trace)")
    if policy.max_k is None and kept[shallow] < deepest:
        raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: policy {policy.name!r}: its records keep "
                             f"draft_prob to {kept[shallow]} drafts (record {shallow!r}) and to {deepest} in others; "
                             f"give its depth, {policy.name}:{kept[shallow]} at most, or re-trace")


def _check_tree(records: Sequence[TraceRecord], acc: str, policy: Policy, dataset: str) -> None:
    """Refuse a tree policy on a proposer without ``tree_rank`` deep enough to replay it."""
    if acc in LOOKUP_PROPOSERS:
        raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: policy {policy.name!r} needs a model "
                             f"proposer ({acc} proposes no tree)")
    missing = [r.id for r in records if r.proposers[acc].tree_rank is None]
    if missing:
        raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: no tree_rank in {len(missing)} records "
                             f"(first id {missing[0]!r}), so policy {policy.name!r} cannot be replayed; re-trace "
                             f"with `specscope trace ... --trees {policy.tree.name}`")
    depth = min(r.proposers[acc].tree_rank.shape[1] for r in records)
    if policy.tree.depth > depth:
        raise SpecscopeError(f"dataset {dataset!r}, proposer {acc!r}: policy {policy.name!r} is {policy.tree.depth} "
                             f"deep, but tree_rank was recorded to depth {depth}; re-trace with "
                             f"`specscope trace ... --trees {policy.tree.name}`")
