"""Static trees against chains: what a tree buys in acceptance and what it costs in verification.

Per dataset × model proposer (with ``tree_rank`` in its traces) × tree of depth D:

- ``mean_acc_len`` — the tree's acc_len (:meth:`TreeShape.acc_len`) averaged over output
  positions (not per step: a step starts only where the last one ended);
  ``chain_mean_acc_len`` — the same for the chain of depth D (``fixed:D``), from the same ranks;
- ``acc_per_verified`` — mean acc_len / (nodes + 1): tokens emitted per token verified, the
  closed-form view of what a tree trades against batch size (verification grows with nodes,
  and at large batch verification is paid per token); ``chain_acc_per_verified`` likewise with
  D + 1 verified tokens;
- ``beats_up_to`` — the largest simulated batch size up to which the tree's (whole-run) speedup beats the
  chain's (``fixed:D``) at every batch size (None: not even at the smallest); ``crossover`` — the
  first batch size where it does not (None: it beats at every one simulated); ``beats_at`` — every
  simulated batch size where it beats the chain (comma-separated in a table), which need not be
  the ones up to ``beats_up_to`` (a tree losing at B = 1 may win at B = 8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specscope.analysis.acceptance import by_dataset
from specscope.costmodel.base import CostModel
from specscope.sim.grid import SimConfig, SimRow, simulate
from specscope.trace.schema import TraceRecord
from specscope.trees import TreeShape, chain


@dataclass
class TreeRow:
    dataset: str
    proposer: str
    tree: str
    nodes: int
    depth: int
    chain: str  # the chain policy compared: fixed:D
    mean_acc_len: float
    chain_mean_acc_len: float
    acc_per_verified: float
    chain_acc_per_verified: float
    beats_up_to: int | None
    crossover: int | None
    beats_at: tuple[int, ...] = ()

    @property
    def again(self) -> str:
        """The batch sizes past ``beats_up_to`` (all, where it is None) at which the tree beats its
        chain, comma-separated ("" none)."""
        return ", ".join(str(b) for b in self.beats_at if self.beats_up_to is None or b > self.beats_up_to)

    def flat(self) -> dict:
        return {**asdict(self), "beats_at": ",".join(map(str, self.beats_at))}


def tree_depths(records: Sequence[TraceRecord], proposers: Sequence[str]) -> dict[tuple[str, str], int]:
    """(dataset, proposer) → the depth every record of the dataset reaches in the proposer's
    ``tree_rank``, where every one of them has it."""
    return {(dataset, name): min(r.proposers[name].tree_rank.shape[1] for r in mine)
            for dataset, mine in by_dataset(records).items() for name in proposers
            if all(name in r.proposers and r.proposers[name].tree_rank is not None for r in mine)}


def compare_trees(records: Sequence[TraceRecord], depths: dict[tuple[str, str], int], trees: Sequence[TreeShape],
                  k_max: Mapping[tuple[str, str], int], cost: CostModel, config: SimConfig
                  ) -> tuple[list[SimRow], list[TreeRow], list[str]]:
    """Simulate every tree and the chains ``fixed:1..D`` of each dataset × proposer in ``depths``
    (:func:`tree_depths`) whose chains reach D (``k_max``: per dataset and proposer, the deepest
    chain there is to compare);
    returns the simulated rows, one :class:`TreeRow` per dataset × proposer × tree, and notes
    naming the trees left out (deeper than the ranks recorded, or than ``k_max``)."""
    rows: list[SimRow] = []
    summary: list[TreeRow] = []
    notes: list[str] = []
    datasets = by_dataset(records)
    for (dataset, proposer), recorded in depths.items():
        limit = k_max.get((dataset, proposer), 0)
        kept = [t for t in trees if t.depth <= min(recorded, limit)]
        notes.extend(f"tree {t.name} not simulated for {dataset} ({proposer}): {t.depth} deep, but "
                     + (f"its traces reach depth {recorded} (re-trace with --trees {t.name})" if recorded < t.depth
                        else f"the chains compared stop at k = {limit}, so none of its depth to set it against")
                     for t in trees if t not in kept)
        if not kept:
            continue
        mine = datasets[dataset]
        chains = [f"fixed:{k}" for k in range(1, max(t.depth for t in kept) + 1)]
        simulated = simulate(mine, [proposer], chains + [f"tree:{t.name}" for t in kept], cost, config)
        rows.extend(simulated)
        if not simulated:  # every batch size above the dataset's requests
            continue
        ranks = np.concatenate([r.proposers[proposer].tree_rank[:, :recorded] for r in mine])
        summary.extend(_summarise(dataset, proposer, tree, ranks, simulated) for tree in kept)
    return rows, summary, notes


def _summarise(dataset: str, proposer: str, tree: TreeShape, ranks: np.ndarray, rows: Sequence[SimRow]) -> TreeRow:
    chain_policy = f"fixed:{tree.depth}"
    speedup = {(r.policy, r.batch_size): r.speedup for r in rows}
    sizes = sorted({r.batch_size for r in rows})
    beats = [speedup[(f"tree:{tree.name}", b)] > speedup[(chain_policy, b)] for b in sizes]
    losing = beats.index(False) if False in beats else len(sizes)
    tree_acc = float(tree.acc_len(ranks).mean())
    chain_acc = float(chain(tree.depth).acc_len(ranks).mean())
    return TreeRow(dataset, proposer, tree.name, tree.nodes, tree.depth, chain_policy, tree_acc, chain_acc,
                   tree_acc / (tree.nodes + 1), chain_acc / (tree.depth + 1),
                   sizes[losing - 1] if losing else None, sizes[losing] if losing < len(sizes) else None,
                   tuple(b for b, won in zip(sizes, beats) if won))
