"""The report's headline: per dataset and batch size, the best policy, its speedup, and the gap
to the oracle.

- ``best``: the simulated cell with the highest speedup among realisable policies (everything
  but ``oracle`` and ``oracle-combined``: the static trees the traces reach too), over every
  proposer;
- ``oracle``: the best single-proposer ``oracle`` cell (no verification wasted);
  ``gap`` = oracle speedup − best speedup;
- ``combined``: the ``oracle-combined`` cell when simulated — optimistic, since choosing the
  proposer is taken as free and every step pays only the lookup's drafting (the paper's rule);
- ``steady``: in mixed mode, the realisable cell with the highest steady-state speedup (only
  iterations with a full batch: what a server under constant load sees), where it is another
  cell than ``best`` — whose whole-run speedup also holds the ramp-up and the drain of the
  longest requests, which can decide the whole run at a large batch;
- ``left_out``: the proposers some (not all) records of the dataset lack, whose cells are left out
  of it (a cell compares proposers on the same requests): with them the best may be another. They
  are counted over all the dataset's records, as the simulator decides, even where paper mode
  replays a draw of them (said: "all 310 of its records counted, not only the 300 drawn").

With trees (:mod:`specscope.report.trees`), one more line per dataset × proposer × tree: up to
which batch size the tree beats the chain of its depth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from specscope.report.trees import TreeRow
from specscope.sim.grid import COMBINED, SimRow


@dataclass
class AnswerRow:
    dataset: str
    batch_size: int
    best_acc: str
    best_policy: str
    best_speedup: float
    oracle_acc: str | None
    oracle_speedup: float | None
    gap: float | None
    combined_speedup: float | None
    combined_policy: str | None = None  # the pair it combined: oracle-combined:A+B
    steady_acc: str | None = None  # mixed mode, where the steady state's best is another cell than best
    steady_policy: str | None = None
    steady_speedup: float | None = None  # that cell's steady-state speedup
    best_steady_speedup: float | None = None  # best's own steady-state speedup, beside it
    left_out: str | None = None  # proposers some of its records lack, left out: "eagle (1 of 40 records lack it)"

    def flat(self) -> dict:
        return asdict(self)


def _is_oracle(row: SimRow) -> bool:
    return row.acc == COMBINED or row.policy == "oracle" or row.policy.startswith("oracle-")


def answer_rows(rows: Sequence[SimRow], left_out: Mapping[str, str] | None = None) -> list[AnswerRow]:
    """One row per dataset × batch size (in the order the simulator produced them); ``left_out``:
    per dataset, the proposers whose cells were left out of it, and why."""
    left_out = left_out or {}
    keys = list(dict.fromkeys((r.dataset, r.batch_size) for r in rows))
    out = []
    for dataset, batch_size in keys:
        cell = [r for r in rows if r.dataset == dataset and r.batch_size == batch_size]
        real = [r for r in cell if not _is_oracle(r)]
        if not real:
            continue
        best = max(real, key=lambda r: r.speedup)
        oracles = [r for r in cell if r.acc != COMBINED and r.policy == "oracle"]
        oracle = max(oracles, key=lambda r: r.speedup) if oracles else None
        combined = max((r for r in cell if r.acc == COMBINED), key=lambda r: r.speedup, default=None)
        steady = max(real, key=lambda r: r.steady_speedup) if best.mode == "mixed" else best
        other = steady is not best and steady.steady_speedup > best.steady_speedup
        out.append(AnswerRow(
            dataset, batch_size, best.acc, best.policy, best.speedup,
            oracle.acc if oracle else None, oracle.speedup if oracle else None,
            oracle.speedup - best.speedup if oracle else None,
            combined.speedup if combined else None, combined.policy if combined else None,
            *((steady.acc, steady.policy, steady.steady_speedup, best.steady_speedup) if other else (None,) * 4),
            left_out.get(dataset),
        ))
    return out


def tree_answer(rows: Sequence[TreeRow]) -> tuple[list[str], list[list[str]]]:
    """A table: a row per dataset × drafter, a column per tree (against the chain of its depth),
    each cell up to which batch size the tree beats that chain (``up to B=8``, ``never``, ``at
    every B, to 64``; ``at B=8 only`` and ``up to B=1, again at B=8`` where it wins past a batch
    size it lost at; ``–`` where it was not simulated)."""
    trees = list(dict.fromkeys((r.tree, r.nodes, r.depth) for r in rows))
    header = ["dataset", "drafter", *[f"{tree} ({nodes} nodes) beats fixed:{depth}" for tree, nodes, depth in trees]]
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        cells.setdefault((r.dataset, r.proposer), {})[r.tree] = (
            "never" if not r.beats_at else f"at B={r.again} only" if r.beats_up_to is None
            else f"at every B, to {r.beats_up_to}" if r.crossover is None
            else f"up to B={r.beats_up_to}" + (f", again at B={r.again}" if r.again else ""))
    return header, [[dataset, proposer, *[mine.get(tree, "–") for tree, _, _ in trees]]
                    for (dataset, proposer), mine in cells.items()]
