"""How far the simulator is from measurement: simulated vs measured speedup per cell.

For every workload × method (× tree) × batch size the reference engine measured a speedup; the
simulator replays the same requests' traces in mixed mode (B distinct requests, continuous
batching, as the engine ran them) with the cell's own policy — ``fixed:k`` for a chain,
``tree:SHAPE`` for a tree, ``learned:FILE`` over the policy's methods for the engine that ran the
learned policy (:func:`policy_of`) — against the cost model fitted to the engine's own step
records. The error is :attr:`MeasuredCell.error_pct`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from specscope.analysis.measured import MeasuredCell
from specscope.costmodel.base import CostModel
from specscope.methods import LEARNED
from specscope.policy.learned import load_policy
from specscope.sim.grid import SimConfig, simulate
from specscope.trace.schema import TraceRecord


def policy_of(cell: MeasuredCell, learned: Path | None = None) -> str:
    """The simulator policy the engine ran for ``cell``: its :attr:`~MeasuredCell.simulated_policy`, or
    ``learned:FILE`` for a cell of the engine that ran the policy file ``learned``."""
    return f"learned:{learned}" if cell.method == LEARNED else cell.simulated_policy


def with_simulated(records: Sequence[TraceRecord], measured: Sequence[MeasuredCell],
                   cost: CostModel, learned: Path | None = None) -> list[MeasuredCell]:
    """Each measured cell with its ``simulated_speedup``; each method × policy is simulated
    once over all its measured batch sizes (``learned``: the policy file of ``learned`` cells)."""
    simulated: dict[tuple[str, str, int], float] = {}
    for method, policy in dict.fromkeys((cell.method, policy_of(cell, learned)) for cell in measured):
        sizes = tuple(sorted({c.batch_size for c in measured if (c.method, policy_of(c, learned)) == (method, policy)}))
        accs = list(load_policy(learned).methods) if method == LEARNED else [method]
        for row in simulate(records, accs, [policy], cost,
                            SimConfig(mode="mixed", batch_sizes=sizes, guess_no_match=False)):
            simulated[(method, policy, row.batch_size)] = row.speedup
    return [replace(cell, simulated_speedup=simulated[(cell.method, policy_of(cell, learned), cell.batch_size)])
            for cell in measured]
