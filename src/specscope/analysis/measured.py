"""Measured speedups (from `specscope bench` or a study) beside the simulator's predictions.

A measured cell is one engine run: ``dataset`` (workload), ``method``, ``k``, ``batch_size``,
``measured_speedup`` = SD throughput / no-SD throughput on the same requests, ``tree`` (the
static tree every SD step drafted, :mod:`specscope.trees` name; ``None``: a chain of k) and, when known,
``simulated_speedup`` (the simulator's replay of the same requests) with
``error_pct`` = 100 · (simulated − measured) / measured. The advisor line picks, per dataset and
batch size, the measured cell with the highest speedup.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from specscope.analysis.paired import Paired
from specscope.errors import SpecscopeError
from specscope.reading import read_json
from specscope.methods import LEARNED, NO_SD, method as method_named, run_label
from specscope.trace.fields import Fields
from specscope.sim.policies import configured_policy
from specscope.trees import TreeShape, parse_tree
from specscope.validate import Invalid


@dataclass
class MeasuredCell:
    """One measured cell, and the simulator's speedup for it when known (module docstring)."""

    dataset: str
    method: str
    k: int
    batch_size: int
    measured_speedup: float
    simulated_speedup: float | None = None
    tree: str | None = None
    policy: str | None = None  # a learned cell's policy: its file and methods, as the bench row names it
    policy_sha256: str | None = None  # ... and the start of that file's SHA-256
    ran_on: str | None = None  # where the engine ran, as its row says (``cpu float32, 1 thread``; None: unsaid)
    confidence: float | None = None  # p of a chain whose drafter stopped at its first draft below p (k at most)
    engine: str | None = None  # the engine that measured it, as its row names it (a sweep's; None: unsaid)
    beside: str | None = None  # a chain run in lockstep beside a learned policy: that policy (its row's label)
    speedup_repeats: tuple[float, ...] | None = None  # its speedup in each repeat, in order (None: unsaid)

    @property
    def label(self) -> str:
        """``method`` for a chain, ``method tree:SHAPE`` for a tree, ``method confidence:p`` for a
        chain stopped by the drafter's confidence, a learned cell's policy (its file and methods)
        where the row names it, and ``beside learned`` after a chain run beside a policy: what a
        figure's line and a table's row say."""
        if self.policy is not None:
            return self.policy
        return run_label(self.method, self.tree, self.confidence) + (" beside learned" if self.beside else "")

    @property
    def simulated_policy(self) -> str:
        """The simulator's policy that replays this cell (:func:`~specscope.sim.policies.configured_policy`):
        ``fixed:k``, ``tree:SHAPE`` or ``confidence:p:k``."""
        return configured_policy(self.k, self.tree, self.confidence)

    @property
    def error_pct(self) -> float | None:
        """100 · (simulated − measured) / measured; ``None`` without a simulated speedup."""
        if self.simulated_speedup is None:
            return None
        return 100.0 * (self.simulated_speedup - self.measured_speedup) / self.measured_speedup

    def flat(self) -> dict:
        """The cell as a table row, ``error_pct``, ``tree_nodes`` and ``tree_depth`` included."""
        shape = {"tree": None, "tree_nodes": None, "tree_depth": None} if self.tree is None \
            else TreeShape.parse(self.tree).describe()
        row = {**asdict(self), **shape, "error_pct": self.error_pct}
        del row["speedup_repeats"]  # a table's cell holds one number: the repeats pair in :func:`beside_pairs`
        return row


def _sd_method(name: str) -> str:
    """``name``, a method that speculates, or a learned policy (a cell's no-SD run is its
    baseline, not a cell)."""
    if name == NO_SD:
        raise Invalid(f"expected an SD method ({NO_SD} is each cell's baseline, not a cell)")
    if name == LEARNED:
        return name
    try:
        method_named(name)
    except SpecscopeError as error:
        raise Invalid(str(error)) from None
    return name


WORKLOAD_SUFFIXES = (".jsonl", ".json", ".gz")  # a workload named by its file


def workload_name(workload: str) -> str:
    """The dataset a measured ``workload`` names, as traces name theirs: a file's stem
    (``/data/code.jsonl`` → ``code``: a sweep's cells keep the path configured), a name as it is
    (``llama3.1-8b_gsm8k``: a bench row's workload is its file's stem already, and may hold dots)."""
    path = Path(workload)
    return path.stem if path.suffix in WORKLOAD_SUFFIXES or len(path.parts) > 1 else workload


def parse_bench_row(obj: object, path: Path, index: int) -> MeasuredCell:
    """Bench row ``index`` of ``path`` (a :class:`~specscope.backends.BenchRow` as written):
    ``method`` (one that speculates), ``k`` >= 1, ``batch_size``, ``speedup`` > 0, optionally
    ``tree`` (a static tree), ``speedup_repeats`` (its speedup in each repeat), a learned cell's
    ``policy`` and ``policy_sha256``, a chain's ``confidence``
    p (its drafter stopped at its first draft below p, ``confidence:p:k``), ``beside`` (a chain run
    in lockstep beside a learned policy: the policy's label), the ``engine`` (a
    sweep's rows name it) and where it ran (``device``, ``dtype``, ``threads``: the reference
    engine's rows say it);
    the dataset is its ``workload`` field (:func:`workload_name`), else the file's stem."""
    fields = Fields(obj, f"{path}: item {index}")
    tree = fields.text("tree", optional=True)
    method = fields.check("method", _sd_method, fields.text("method"))
    return MeasuredCell(
        dataset=workload_name(fields.text("workload", optional=True) or path.stem),
        method=method,
        k=fields.integer("k", minimum=1),
        batch_size=fields.integer("batch_size", minimum=1),
        measured_speedup=fields.number("speedup", low=0.0, low_open=True),
        tree=None if tree is None else fields.check("tree", parse_tree, tree).name,
        policy=fields.text("policy", optional=True) if method == LEARNED else None,
        policy_sha256=fields.text("policy_sha256", optional=True) if method == LEARNED else None,
        ran_on=_ran_on(fields),
        confidence=fields.number("confidence", optional=True, low=0.0, low_open=True, high=1.0),
        engine=fields.text("engine", optional=True),
        beside=fields.text("beside", optional=True) if method != LEARNED else None,
        speedup_repeats=fields.numbers("speedup_repeats", optional=True, low=0.0, low_open=True),
    )


def _ran_on(fields: Fields) -> str | None:
    """Where a bench row's engine ran, from its ``device``, ``dtype`` and ``threads`` (those it
    names): ``cpu float32, 1 thread``; None for a row that names none (a served engine's)."""
    device, dtype = fields.text("device", optional=True), fields.text("dtype", optional=True)
    threads = fields.integer("threads", optional=True, minimum=1)
    said = " ".join(part for part in (device, dtype) if part)
    if threads is not None:
        said += f"{', ' if said else ''}{threads} thread{'s' if threads > 1 else ''}"
    return said or None


def read_bench_results(paths: Iterable[str | Path]) -> list[MeasuredCell]:
    """Cells from bench output files (`specscope bench -o x.json`, a sweep's ``measured.json``,
    a study's ``measured/*.json``): each a non-empty JSON list of bench rows, of one engine (a
    row's ``engine``, where it has one), each cell (workload, method, k or tree, batch size, the
    policy a chain ran beside) once."""
    cells, engines, seen = [], {}, {}
    for path in map(Path, paths):
        try:
            rows = read_json(path)
        except SpecscopeError as error:  # JSON Lines (a trace, step records) is not one document
            raise SpecscopeError(f"{error}: expected a bench result file, one JSON list of rows (`specscope bench "
                                 "-o x.json`, a sweep's measured.json, a study's measured/*.json)") from None
        if not isinstance(rows, list) or not rows:
            raise SpecscopeError(f"{path}: expected a non-empty JSON list of bench results")
        for i, row in enumerate(rows):
            cell = parse_bench_row(row, path, i)
            where = f"{path}: item {i}"
            if cell.engine is not None:
                engines.setdefault(cell.engine, where)
            key = (cell.dataset, cell.method, cell.tree or cell.k, cell.batch_size, cell.confidence, cell.beside)
            if key in seen:
                raise SpecscopeError(f"{where}: the cell {cell.label} k={cell.k} B={cell.batch_size} of "
                                     f"{key[0]} was measured already ({seen[key]}); give each cell once")
            seen[key] = where
            cells.append(cell)
    if len(engines) > 1:
        raise SpecscopeError(f"--measured: cells of engines {', '.join(sorted(engines))} ({'; '.join(engines.values())}); "
                             "a report checks one engine's cells against one cost model")
    return cells


def simulated_for(cell: MeasuredCell, rows: Sequence) -> float | None:
    """The simulated speedup of ``cell``'s own configuration among ``rows`` (:class:`~specscope.sim.grid.SimRow`:
    its dataset, its batch size, its method's :attr:`MeasuredCell.simulated_policy`; 1 for no SD),
    ``None`` where the rows hold no such cell."""
    policy = cell.simulated_policy
    here = [r for r in rows if r.dataset == cell.dataset and r.batch_size == cell.batch_size]
    if cell.method == NO_SD:
        return 1.0 if here else None
    return next((r.speedup for r in here if r.acc == cell.method and r.policy == policy), None)


def winner(cells: Sequence[MeasuredCell], dataset: str, batch_size: int) -> MeasuredCell:
    """The measured winner of one dataset and batch size among ``cells`` (of that dataset and
    batch size): the fastest cell where it beats no SD, else no SD itself (speedup 1, measured or
    not; a tie goes to it: SD that gains nothing is not worth running)."""
    none = MeasuredCell(dataset, NO_SD, 0, batch_size, 1.0)
    best = max(cells, key=lambda c: c.measured_speedup, default=none)
    return best if best.measured_speedup > 1.0 else none


def winners(cells: Sequence[MeasuredCell]) -> list[MeasuredCell]:
    """Per dataset × batch size, the measured :func:`winner`."""
    groups: dict[tuple[str, int], list[MeasuredCell]] = {}
    for cell in cells:
        groups.setdefault((cell.dataset, cell.batch_size), []).append(cell)
    return [winner(groups[key], *key) for key in sorted(groups)]


@dataclass(frozen=True)
class BesidePair:
    """A learned cell and a chain run beside it in one lockstep: the same workload and batch size,
    every repeat of the two against one no-SD run (:mod:`specscope.backends.reference`)."""

    learned: MeasuredCell
    chain: MeasuredCell

    @property
    def paired(self) -> Paired | None:
        """The policy over the chain, repeat by repeat; None where they do not pair (:attr:`unpaired`)."""
        return None if self.unpaired else Paired.of(self.learned.speedup_repeats, self.chain.speedup_repeats)

    @property
    def unpaired(self) -> str | None:
        """Why the two rows' repeats do not pair (None where they do)."""
        a, b = self.learned.speedup_repeats, self.chain.speedup_repeats
        if not a or not b:
            return "no repeats listed"
        return None if len(a) == len(b) else f"repeats differ ({len(a)} and {len(b)})"

    @property
    def simulated_ratio(self) -> float | None:
        """The simulator's speedup of the policy over the chain's (None where either is not simulated)."""
        a, b = self.learned.simulated_speedup, self.chain.simulated_speedup
        return None if a is None or b is None else a / b

    def flat(self) -> dict:
        paired = self.paired
        low, high, held = (None, None, None) if paired is None else paired.bounds
        return {"dataset": self.learned.dataset, "batch_size": self.learned.batch_size, "policy": self.learned.label,
                "chain": f"{self.chain.method} k={self.chain.k}", "learned_speedup": self.learned.measured_speedup,
                "chain_speedup": self.chain.measured_speedup, "repeats": None if paired is None else len(paired.ratios),
                "learned_over_chain": None if paired is None else paired.median, "low": low, "high": high,
                "confidence": held, "verdict": self.unpaired if paired is None else paired.verdict,
                "simulated_learned_over_chain": self.simulated_ratio}


def beside_pairs(cells: Sequence[MeasuredCell]) -> list[BesidePair]:
    """Every chain run beside a learned cell among ``cells`` with that cell: the same dataset and
    batch size, its ``beside`` the learned cell's label (the policy's file and methods), in order.
    Two learned cells of one dataset and batch size under one label (policies of one file name from
    two folders, say) are refused: which of them a chain ran beside cannot be told."""
    learned: dict[tuple[str, int, str], MeasuredCell] = {}
    for cell in cells:
        key = (cell.dataset, cell.batch_size, cell.label)
        if cell.method == LEARNED and learned.setdefault(key, cell) is not cell:
            raise SpecscopeError(f"measured cells: two learned cells of {cell.dataset} at B={cell.batch_size} are "
                                 f"both {cell.label}: the chains run beside them cannot be told apart (give each "
                                 "policy file its own name, or each its own report)")
    return [BesidePair(learned[key], c) for c in cells
            if c.beside is not None and (key := (c.dataset, c.batch_size, c.beside)) in learned]


def best_beside(pairs: Sequence[BesidePair]) -> list[BesidePair]:
    """Of each learned cell's ``pairs``, the one of the chain it is least faster than (the least
    paired median): the best fixed policy beside it, as the repeats pair them. Cells whose rows list
    no repeats are left out."""
    best: dict[tuple[str, int, str], BesidePair] = {}
    for pair in pairs:
        paired, key = pair.paired, (pair.learned.dataset, pair.learned.batch_size, pair.learned.label)
        if paired is not None and (key not in best or paired.median < best[key].paired.median):
            best[key] = pair
    return list(best.values())


def verdict_counts(pairs: Sequence[BesidePair]) -> str:
    """``12 no difference resolved, 1 faster`` over ``pairs`` (those with repeats), most first."""
    counts = Counter(pair.paired.verdict for pair in pairs if pair.paired is not None)
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.most_common())
