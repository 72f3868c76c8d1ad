"""How far the simulator is from measurement: simulated vs measured speedup per cell.

For every workload × method × batch size the reference engine measured a speedup; the
simulator replays the same requests' traces with ``fixed:k`` in mixed mode (B distinct
requests, continuous batching, as the engine ran them) against the cost model fitted to the
engine's own step records. ``error_pct`` = 100 · (simulated − measured) / measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from specscope.costmodel.base import CostModel
from specscope.sim.grid import SimConfig, simulate
from specscope.trace.schema import TraceRecord


@dataclass
class FidelityRow:
    workload: str
    method: str
    batch_size: int
    measured_speedup: float
    simulated_speedup: float
    error_pct: float


def fidelity_rows(workload: str, records: Sequence[TraceRecord], measured: Sequence[dict], cost: CostModel,
                  k: int) -> list[FidelityRow]:
    """One row per measured bench row (``method``, ``batch_size``, ``speedup``); each method is
    simulated once over all its measured batch sizes."""
    simulated: dict[tuple[str, int], float] = {}
    for method in dict.fromkeys(cell["method"] for cell in measured):
        sizes = tuple(sorted({int(cell["batch_size"]) for cell in measured if cell["method"] == method}))
        for row in simulate(records, [method], [f"fixed:{k}"], cost,
                            SimConfig(mode="mixed", batch_sizes=sizes, guess_no_match=False)):
            simulated[(method, row.batch_size)] = row.speedup
    rows = []
    for cell in measured:
        predicted = simulated[(cell["method"], int(cell["batch_size"]))]
        error = 100.0 * (predicted - cell["speedup"]) / cell["speedup"]
        rows.append(FidelityRow(workload, cell["method"], int(cell["batch_size"]), float(cell["speedup"]),
                                predicted, error))
    return rows
