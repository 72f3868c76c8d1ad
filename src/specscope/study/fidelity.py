"""How far the simulator is from measurement: simulated vs measured speedup per cell.

For every workload × method × batch size the reference engine measured a speedup; the
simulator replays the same requests' traces with ``fixed:k`` in mixed mode (B distinct
requests, continuous batching, as the engine ran them) against the cost model fitted to the
engine's own step records. The error is :attr:`MeasuredCell.error_pct`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from specscope.analysis.measured import MeasuredCell
from specscope.costmodel.base import CostModel
from specscope.sim.grid import SimConfig, simulate
from specscope.trace.schema import TraceRecord


def with_simulated(records: Sequence[TraceRecord], measured: Sequence[MeasuredCell], cost: CostModel,
                   k: int) -> list[MeasuredCell]:
    """Each measured cell with its ``simulated_speedup``; each method is simulated once over
    all its measured batch sizes."""
    simulated: dict[tuple[str, int], float] = {}
    for method in dict.fromkeys(cell.method for cell in measured):
        sizes = tuple(sorted({cell.batch_size for cell in measured if cell.method == method}))
        for row in simulate(records, [method], [f"fixed:{k}"], cost,
                            SimConfig(mode="mixed", batch_sizes=sizes, guess_no_match=False)):
            simulated[(method, row.batch_size)] = row.speedup
    return [replace(cell, simulated_speedup=simulated[(cell.method, cell.batch_size)]) for cell in measured]
