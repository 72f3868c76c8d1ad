"""Measured speedups (from `specscope bench` or a study) beside the simulator's predictions.

A measured cell is one engine run: ``dataset`` (workload), ``method``, ``k``, ``batch_size``,
``measured_speedup`` = SD throughput / no-SD throughput on the same requests, and, when known,
``simulated_speedup`` (the simulator's replay of the same requests) with
``error_pct`` = 100 · (simulated − measured) / measured. The advisor line picks, per dataset and
batch size, the measured cell with the highest speedup.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from specscope.errors import SpecscopeError


@dataclass
class MeasuredCell:
    dataset: str
    method: str
    k: int
    batch_size: int
    measured_speedup: float
    simulated_speedup: float | None = None

    @property
    def error_pct(self) -> float | None:
        if self.simulated_speedup is None:
            return None
        return 100.0 * (self.simulated_speedup - self.measured_speedup) / self.measured_speedup

    def flat(self) -> dict:
        return {**asdict(self), "error_pct": self.error_pct}


def read_bench_results(paths: Iterable[str | Path]) -> list[MeasuredCell]:
    """Cells from `specscope bench` JSON output (a list of objects with method, k, batch_size,
    speedup); the dataset is the object's ``workload`` field, else the file's stem."""
    cells = []
    for path in map(Path, paths):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise SpecscopeError(f"{path}: cannot read ({error.strerror})") from None
        except json.JSONDecodeError as error:
            raise SpecscopeError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
        if not isinstance(rows, list) or not rows:
            raise SpecscopeError(f"{path}: expected a non-empty JSON list of bench results")
        for i, row in enumerate(rows):
            try:
                cells.append(MeasuredCell(str(row.get("workload") or path.stem), str(row["method"]), int(row["k"]),
                                          int(row["batch_size"]), float(row["speedup"])))
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                raise SpecscopeError(f"{path}: item {i}: expected method, k, batch_size, speedup ({error})") from None
    return cells


def winners(cells: Sequence[MeasuredCell]) -> list[MeasuredCell]:
    """Per dataset × batch size, the measured cell with the highest speedup."""
    best: dict[tuple[str, int], MeasuredCell] = {}
    for cell in cells:
        key = (cell.dataset, cell.batch_size)
        if key not in best or cell.measured_speedup > best[key].measured_speedup:
            best[key] = cell
    return [best[key] for key in sorted(best)]
