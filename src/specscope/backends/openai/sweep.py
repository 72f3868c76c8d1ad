"""``specscope sweep``: run every cell of a sweep configuration, surviving interruption.

Each finished cell is written at once to ``OUTPUT/cells/<cell id>.json`` (a temporary file,
fsync, rename, fsync of the directory), so a cell's result either exists completely or not at
all. On start, cells whose file exists are skipped; so a sweep killed at any moment (even with
SIGKILL) and started again loses no finished cell and repeats none: only the cell that was
running when it died runs again. ``--retry-failed`` also reruns cells recorded as failed.

Before its cells run, every server is checked against the method and k its cells are labelled
with (:mod:`~specscope.backends.openai.verify`); a server that contradicts them fails those
cells, and each row's ``verified`` says what was checked. Methods that learn across requests
(the ``learns_across_requests`` of :mod:`specscope.methods`) get a fresh launched
server per cell, warmed up with a prompt that is not measured; on a ``url`` engine, which
cannot be restarted, their rows are marked ``learns_across_requests: true``.

A failure (connection refused, HTTP 5xx, a timeout, a malformed stream, a server that does not
start, a server check) is recorded in the cell's file with ``status: "failed"`` and a ``reason``, and the sweep
goes on. Launched servers are started once per (engine, method, k, batch size) for all the
workloads that still need them (once per cell for methods that learn), and stopped before the
next; with ``baselines = "interleaved"`` an SD server and its ``none`` server run at once, and
a pair's two cells are measured together (:func:`_run_interleaved`) or, resumed, again together;
with ``"interleaved-all"`` the same holds for all the cells of one workload, its servers (one per
method and k, launched for the largest batch size) serving every batch size.

After the cells, ``OUTPUT/results.csv`` and ``results.json`` list every cell with ``speedup``
against the ``none`` cell of the same engine, batch size and workload; ``measured.json`` holds
the successful SD cells (workload named by its file's stem), the bench-row list that
:func:`specscope.analysis.measured.read_bench_results` reads for the report; ``winners.csv``
names, for each engine, workload and batch size, the winning method and k: the fastest SD cell
above 1× its own baseline, else ``none`` (the report's rule); where no row has a speedup (a url
engine measured without a ``none`` server), the highest throughput.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from specscope.backends.openai.bench import ServingBenchConfig, bench_row, launched
from specscope.backends.openai.client import LoadResult
from specscope.backends.openai.launchers import free_port, learns_across_requests
from specscope.backends.openai.measure import measure_interleaved, measure_load
from specscope.backends.openai.prompts import Prompt, read_prompts, select_prompts, warmup_prompt
from specscope.backends.openai.verify import ServerCheckError, check_chain, check_server
from specscope.backends.openai.sweep_config import (
    INTERLEAVED,
    INTERLEAVED_ALL,
    INTERLEAVING,
    Cell,
    SweepConfig,
    describe,
    key_id,
    plan_cells,
)
from specscope.errors import SpecscopeError, where
from specscope.methods import NO_SD, proposal_label
from specscope.trees import TreeShape
from specscope.analysis.measured import MeasuredCell, winner
from specscope.fileio import atomic_write_text, check_kept_table, exclusive, refuse_foreign_folder
from specscope.progress import LazyProgress

log = logging.getLogger(__name__)
CELL_LABELS = ("engine", "workload", "method", "k", "tree", "tree_nodes", "tree_depth", "baseline_for", "status", "reason",
               "cell_id")  # a result row's, beside the bench row
RECORD_FIELDS = ("cell_id", "key", "status", "reason", "started_at", "finished_at", "result")
TIMELINE = "timeline"  # an ok cell's per-request chunk timeline (LoadResult.timeline); absent in old sweeps
# what a sweep writes in its output folder, and reads back when it resumes (ray-placement.jsonl: under --ray)
SWEEP_FILES = ("config.json", "results.json", "results.csv", "measured.json", "winners.csv", "ray-placement.jsonl")
SWEEP_FOLDERS = ("cells", "logs")


@dataclass
class SweepOutcome:
    total: int
    skipped: int
    ran: int
    failed: int
    rows: list[dict]  # what :func:`results` returned after the last cell


def read_cells(output: Path) -> dict[str, dict]:
    """Recorded cells by id; a file this code did not write is an error naming it."""
    cells = {}
    for path in sorted((output / "cells").glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise SpecscopeError(
                f"{path}: unreadable cell record ({error}); remove it to rerun the cell"
            ) from None
        if (
            not isinstance(record, dict)
            or set(record) - {TIMELINE} != set(RECORD_FIELDS)
            or record["status"] not in ("ok", "failed")
            or not isinstance(record["result"], (dict, type(None)))
        ):
            raise SpecscopeError(
                f"{path}: not a cell record (expected an object with {', '.join(RECORD_FIELDS)}); "
                "remove it to rerun the cell"
            )
        if record["cell_id"] != path.stem:
            raise SpecscopeError(f"{path}: field 'cell_id': {record['cell_id']!r} is not the file's name (a copied "
                                 "record would count twice); remove it to rerun the cell")
        if not isinstance(record["key"], dict) or key_id(record["key"]) != path.stem:
            raise SpecscopeError(f"{path}: field 'key': not the key the cell's id was made of (an edited key would "
                                 "stand for another measurement); remove it to rerun the cell")
        if record["status"] == "ok":
            _check_result(path, record["result"] or {})
        cells[path.stem] = record
    return cells


def _check_result(path: Path, result: dict) -> None:
    """An ok cell's figures as the sweep measured them: its output tokens over its duration, and
    the throughput they make (a hand-edited throughput of −5 or 1e308 was published as a speedup)."""
    tokens, seconds, throughput = (result.get(name) for name in ("output_tokens", "duration_s", "throughput"))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (tokens, seconds, throughput))
    if not (numbers and isinstance(tokens, int) and tokens >= 0 and 0 < seconds < math.inf
            and math.isclose(throughput, tokens / seconds, rel_tol=1e-9)):
        raise SpecscopeError(f"{path}: field 'result': expected an ok cell's measured figures (output_tokens, "
                             "duration_s > 0, and throughput = output_tokens / duration_s), got "
                             f"{tokens!r}, {seconds!r}, {throughput!r}; remove it to rerun the cell")


def _server_key(config: SweepConfig, cell: Cell) -> tuple:
    """Cells with one key share a server (an interleaved pair: its two servers; ``interleaved-all``:
    the servers of one workload); a launched method that learns gets one per cell."""
    if config.baselines == INTERLEAVED_ALL and interleaved(config, cell):
        return _unit_key(config, cell)
    if interleaved(config, cell):
        key, method = _unit_key(config, cell)[:3], (cell.baseline_for or cell.server).split()[0]  # the pair's SD method
    else:
        key, method = (cell.engine.name, cell.method, cell.k, cell.tree, cell.batch_size, cell.baseline_for), cell.method
    if cell.engine.launch is not None and learns_across_requests(cell.engine.launch, method):
        return (*key, cell.workload)
    return key


def interleaved(config: SweepConfig, cell: Cell) -> bool:
    """Whether ``cell`` is measured interleaved with others (launched engines only): half of a
    pair, or one of an ``interleaved-all`` group."""
    return config.baselines in INTERLEAVING and cell.engine.launch is not None


def measured_together(config: SweepConfig, cell: Cell) -> bool:
    """Whether ``cell`` is measured only together with others, and so measured again with them when
    one of them is missing: an interleaved cell, or half of a back-to-back pair (``paired``, a
    launched engine: an SD cell recorded by a shared run, or before an interruption, is no pair to
    a ``none`` cell measured later)."""
    return interleaved(config, cell) or (config.baselines == "paired" and cell.engine.url is None)


def group_servers(config: SweepConfig, group: list[Cell]) -> int:
    """How many servers ``group`` (cells sharing a :func:`_server_key`) runs at once."""
    if not interleaved(config, group[0]):
        return 1
    return config.replicas * (2 if config.baselines == INTERLEAVED else len({_server_of(c) for c in group}))


def _server_of(cell: Cell) -> tuple:
    """Which server of an ``interleaved-all`` group serves ``cell``: one per method and k (or
    tree) for every batch size, but one per cell for a launched method that learns across
    requests (a cell must not inherit another's learning)."""
    if learns_across_requests(cell.engine.launch, cell.method):
        return (cell.server, cell.batch_size)
    return (cell.server,)


def _unit_key(config: SweepConfig, cell: Cell) -> tuple:
    """The same for the cells measured together: a pair's two (engine, SD server, batch size,
    workload), an ``interleaved-all`` group's (engine, workload)."""
    if config.baselines == INTERLEAVED_ALL:
        return (cell.engine.name, cell.workload)
    return (cell.engine.name, cell.baseline_for or cell.server, cell.batch_size, cell.workload)


def serving_config(config: SweepConfig, cell: Cell) -> ServingBenchConfig:
    """``cell`` as one serving bench (its engine's server at its batch size); a ``none`` cell's
    server is launched with k = 1, which it does not use."""
    return ServingBenchConfig(
        workload=config.workload_path(cell.workload),
        method=cell.method,
        k=max(cell.k, 1),
        batch_sizes=(cell.batch_size,),
        max_tokens=config.max_tokens,
        ignore_eos=config.ignore_eos,
        temperature=config.temperature,
        url=cell.engine.url,
        launch=cell.engine.launch,
        model=cell.engine.model,
        draft=cell.engine.drafts.get(cell.method),
        num_requests=config.num_requests,
        port=cell.engine.port,
        engine_args=cell.engine.args,
        prompt_lookup_min=config.prompt_lookup_min,
        prompt_lookup_max=config.prompt_lookup_max,
        mtp_method=config.mtp_method,
        request_timeout_s=config.request_timeout_s,
        idle_timeout_s=config.idle_timeout_s,
        launch_timeout_s=config.launch_timeout_s,
    )


def _record(
    config: SweepConfig, cell: Cell, status: str, reason: str | None, result: dict | None, started: float
) -> dict:
    return {
        "cell_id": cell.cell_id(config),
        "key": cell.key(config),
        "status": status,
        "reason": reason,
        "started_at": started,
        "finished_at": time.time(),
        "result": result,
    }


def record_text(record: dict) -> str:
    """A record as JSON text; its timeline one compact line per request (a 64-request cell of
    32 tokens each: about 25 kB)."""
    timeline = record.get(TIMELINE)
    text = json.dumps({name: value for name, value in record.items() if name != TIMELINE}, indent=1)
    if timeline is None:
        return text + "\n"
    requests = ",\n  ".join(json.dumps(request, separators=(",", ":")) for request in timeline)
    return f'{text[:-2]},\n "{TIMELINE}": [\n  {requests}\n ]\n}}\n'


def failed_record(config: SweepConfig, cell: Cell, reason: str) -> dict:
    """A failed record for ``cell`` made by the driver (e.g. its Ray worker was lost for good)."""
    return _record(config, cell, "failed", reason, None, time.time())


def write_record(config: SweepConfig, record: dict) -> None:
    """Write a cell's record durably (the driver is the only writer of ``OUTPUT/cells``)."""
    atomic_write_text(config.output / "cells" / f"{record['cell_id']}.json", record_text(record))
    log.info("cell %s %s: %s", record["cell_id"], record["status"], record["reason"] or "")


def _prompts(config: SweepConfig, cell: Cell) -> tuple[list[Prompt], Prompt, bool]:
    """``cell``'s requests, its warm-up prompt, and whether that prompt is also measured."""
    bench = serving_config(config, cell)
    workload = read_prompts(bench.workload)
    return (select_prompts(workload, bench.num_requests, bench.workload), *warmup_prompt(workload, bench.num_requests))


def _measured(config: SweepConfig, cell: Cell, row: dict, load: LoadResult, verified: str, engine: str | None,
              learns: bool, started: float, key: dict) -> dict:
    """The ok record of ``cell``, measured as ``row`` by the run ``load``; failed where its key
    (``key``: as the run began — the workload's and the model's digests among it) changed
    while it ran: it measured what its key no longer names, and a rerun would skip it."""
    learns = learns_across_requests(engine, cell.method) and learns
    now = cell.key(config)
    if now != key:
        changed = ", ".join(name for name, value in key.items() if now.get(name) != value)
        return _record(config, cell, "failed", f"changed while the cell ran ({changed}): measure it again", None,
                       started)
    record = _record(config, cell, "ok", None, {**row, "verified": verified, "learns_across_requests": learns}, started)
    return {**record, TIMELINE: load.timeline()}


def _failed(config: SweepConfig, cells: list[Cell], error: Exception, started: float) -> list[dict]:
    """The failed records of ``cells``, whose run raised ``error``."""
    if isinstance(error, SpecscopeError):
        reason = str(error)
    else:  # a bug or an unforeseen answer: record it, keep sweeping
        log.exception("cell %s", cells[-1].cell_id(config))
        reason = f"internal error: {type(error).__name__}: {error}"
    return [_record(config, cell, "failed", reason, None, started) for cell in cells]


def _run_cell(config: SweepConfig, cell: Cell, url: str, verified: str, engine: str | None, reused: bool) -> dict:
    """Measure ``cell`` on the server at ``url`` (``engine``: its kind, when known; ``reused``:
    whether it served other cells' requests before); its record."""
    started, key = time.time(), cell.key(config)
    try:
        prompts, warmup, warmup_measured = _prompts(config, cell)
        row, load = measure_load(serving_config(config, cell).client(url), prompts, cell.batch_size, warmup)
        if cell.engine.url is not None:  # a server it did not start: its steps may draft short of its k
            check_chain(url, cell.method, cell.k, row)
    except Exception as error:
        return _failed(config, [cell], error, started)[0]
    return _measured(config, cell, row, load, verified, engine, reused or warmup_measured, started, key)


def _run_unit(config: SweepConfig, unit: tuple[Cell, ...], servers: list[list[tuple[str, str]]],
              reused: bool) -> list[dict]:
    """Measure cells interleaved (a pair, or an ``interleaved-all`` group: per batch size a ``none``
    cell and SD cells, of one workload) on ``servers`` (each cell's server: (url, what was
    verified) of each of its replicas), each at its batch size; their records."""
    started, keys = time.time(), [cell.key(config) for cell in unit]
    try:
        prompts, warmup, warmup_measured = _prompts(config, unit[-1])
        clients = [[serving_config(config, cell).client(url) for url, _ in replicas]
                   for cell, replicas in zip(unit, servers)]
        measured = measure_interleaved(clients, prompts, [c.batch_size for c in unit], config.segments, warmup)
    except Exception as error:
        return _failed(config, list(unit), error, started)
    return [_measured(config, cell, row, load, replicas[0][1], unit[0].engine.launch, reused or warmup_measured,
                      started, key)
            for cell, (row, load), replicas, key in zip(unit, measured, servers, keys)]


@contextlib.contextmanager
def _launched(config: SweepConfig, cell: Cell, port: int | None = None, replica: int | None = None
              ) -> Iterator[tuple[str, str]]:
    """``cell``'s server, launched (on ``port`` if given) and checked: (its url, what was
    verified); ``replica``: which of its server's processes (its log's name says so)."""
    bench = serving_config(config, cell)
    spec = replace(bench.launch_spec(cell.method, cell.batch_size), tree=cell.tree)
    if port is not None:
        spec = replace(spec, port=port)
    shape = f"-{cell.tree.name}" if cell.tree is not None else ""
    process = f"-r{replica}" if replica is not None else ""
    log_path = (config.output / "logs"
                / f"{cell.engine.name}-{cell.method}-k{cell.k}{shape}-b{cell.batch_size}{process}.log")
    with launched(bench, spec, log_path) as verified:
        yield spec.url, verified


def _unfinished(config: SweepConfig, cells: list[Cell], error: SpecscopeError, started: float) -> Iterator[dict]:
    """The failed records of ``cells``, left unmeasured when their server failed to start or
    its check failed with ``error``."""
    stage = "server check" if isinstance(error, ServerCheckError) else "launch failed"
    for cell in cells:
        yield _record(config, cell, "failed", f"{stage}: {error}", None, started)


def run_group(config: SweepConfig, cells: list[Cell]) -> Iterator[dict]:
    """Run ``cells`` (sharing one server, or an interleaved pair's two) against a running or
    freshly launched server; yields each cell's record as it finishes (the server stops when the
    generator ends or is closed)."""
    engine, first = cells[0].engine, cells[0]
    started = time.time()
    if engine.url is not None:
        try:
            view, verified = check_server(engine.url, first.method, first.k, engine.model, config.idle_timeout_s)
        except SpecscopeError as error:
            for cell in cells:
                yield _record(config, cell, "failed", f"server check: {error}", None, started)
            return
        for cell in cells:
            yield _run_cell(config, cell, engine.url, verified, view.engine, reused=True)
        return
    if config.baselines in INTERLEAVING:
        yield from _run_interleaved(config, cells)
        return
    finished: list[Cell] = []
    try:
        with _launched(config, first) as (url, verified):
            for cell in cells:
                yield _run_cell(config, cell, url, verified, engine.launch, reused=cell is not first)
                finished.append(cell)
    except SpecscopeError as error:
        yield from _unfinished(config, cells[len(finished) :], error, started)


def _units(config: SweepConfig, cells: list[Cell]) -> list[tuple[Cell, ...]]:
    """An interleaved group's cells as the units measured together, in :func:`plan_cells`' order:
    pairs (a ``none`` cell, then its SD cell), one per workload; or the whole ``interleaved-all``
    group (one workload; at every batch size a ``none`` cell first, then SD cells). A cell without
    its partners next to it (they ran in an earlier attempt) is a unit alone."""
    if config.baselines == INTERLEAVED_ALL:
        return [tuple(cells)] if _complete(cells) else [(cell,) for cell in cells]
    units, i = [], 0
    while i < len(cells):
        unit = cells[i : i + 2]
        units.append(tuple(unit) if _complete(unit) else (cells[i],))
        i += len(units[-1])
    return units


def _complete(cells: list[Cell]) -> bool:
    """Whether ``cells`` are of one workload and, per batch size in turn, a ``none`` cell and then
    at least one SD cell."""
    runs = [list(run) for _, run in itertools.groupby(cells, key=lambda c: c.batch_size)]
    return (len({c.workload for c in cells}) == 1 and len({run[0].batch_size for run in runs}) == len(runs)
            and all(len(run) > 1 and run[0].method == NO_SD and all(c.method != NO_SD for c in run[1:])
                    for run in runs))


def _run_interleaved(config: SweepConfig, cells: list[Cell]) -> Iterator[dict]:
    """An interleaved group: its units (:func:`_units`) measured on servers launched at once (a
    pair's two; an ``interleaved-all`` group's one per :func:`_server_of`, for its largest batch
    size; each as ``config.replicas`` processes); records in the cells' order. A cell alone is
    failed: a pair or group is measured together or not at all."""
    started, units = time.time(), _units(config, cells)
    measured_units = [unit for unit in units if len(unit) > 1]
    done = 0
    try:
        with contextlib.ExitStack() as stack:
            servers: dict[tuple, list[tuple[str, str]]] = {}
            for unit in units:
                if len(unit) == 1:
                    done += 1
                    yield _record(config, unit[0], "failed", "interleaved: its partners were measured apart; rerun "
                                  "with --retry-failed to measure them again", None, started)
                    continue
                if not servers:  # not two on one port: all but the last on a free one
                    largest = max(c.batch_size for c in unit)
                    first: dict[tuple, Cell] = {}  # each server's first cell
                    for cell in unit:
                        first.setdefault(_server_of(cell), cell)
                    fixed = unit[0].engine.port is not None
                    processes = [(key, cell, r) for key, cell in first.items() for r in range(config.replicas)]
                    for n, (key, cell, r) in enumerate(processes):
                        port = free_port() if fixed and n < len(processes) - 1 else None
                        replica = r if config.replicas > 1 else None
                        servers.setdefault(key, []).append(
                            stack.enter_context(_launched(config, replace(cell, batch_size=largest), port, replica)))
                for record in _run_unit(config, unit, [servers[_server_of(c)] for c in unit],
                                        reused=unit is not measured_units[0]):
                    done += 1
                    yield record
    except SpecscopeError as error:
        yield from _unfinished(config, cells[done:], error, started)


def run_groups_here(config: SweepConfig, groups: list[list[Cell]]) -> Iterator[dict]:
    """The default :data:`GroupRunner`: the groups one after another, in this process (a bar on
    a terminal once it takes a while: cells done of those to run)."""
    with LazyProgress("sweep: cells", sum(len(group) for group in groups)) as bar:
        for group in groups:
            for record in run_group(config, group):
                bar.advance()
                yield record


GroupRunner = Callable[[SweepConfig, list[list[Cell]]], Iterator[dict]]
"""Runs groups of cells (each sharing one server) and yields every cell's record exactly once,
in any order, as it finishes; it writes nothing (e.g. :mod:`specscope.backends.openai.ray_executor`)."""


def run_sweep(
    config: SweepConfig, retry_failed: bool = False, run_groups: GroupRunner = run_groups_here
) -> SweepOutcome:
    """Run every cell not yet recorded (and failed ones with ``retry_failed``), writing each
    record as ``run_groups`` yields it."""
    refuse_foreign_folder(config.output, "cells/", "sweep")  # it writes config.json, results.csv, winners.csv …
    cells = config.output / "cells"
    strangers = sorted(p.name for p in cells.iterdir() if not p.name.startswith(".") and p.suffix != ".json") \
        if cells.is_dir() else []
    if strangers:  # a folder of the user's that happens to hold a cells/ (a review: its files were replaced)
        raise SpecscopeError(f"{cells}: holds {strangers[0]!r}, which no sweep writes there: not a sweep's folder, "
                             "whose files would be replaced; write the sweep into an empty or new folder")
    read_cells(config.output)  # a bad record is refused before anything is written
    for name in SWEEP_FILES:  # checked before any cell is measured, not when the tables are written
        check_kept_table(config.output / name)
    made = _first_missing(config.output)  # the outermost folder this run makes (None: the output exists)
    try:
        (config.output / "cells").mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecscopeError(f"{config.output}: cannot make the sweep's folder ({error.strerror or error})") from None
    with exclusive(config.output / "cells" / ".lock", f"{config.output}: another sweep is running into this folder (its "
                   "cells would be measured twice at once); wait for it to end, or write elsewhere"):
        try:  # refused here, this run removes what it made — only while it holds the lock: a run refused the
            return _run_sweep(config, retry_failed, run_groups)  # lock leaves the folder to the run that holds it
        except SpecscopeError:
            if made is not None and not any((config.output / "cells").glob("*.json")):  # refused before a cell:
                shutil.rmtree(made, ignore_errors=True)  # leave nothing, parents it made included
            raise


def _first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet (None where ``path`` does)."""
    missing = None
    for folder in [path, *path.absolute().parents]:
        if folder.exists():
            return missing
        missing = folder
    return missing


def pending_cells(config: SweepConfig, cells: list[Cell], recorded: dict[str, dict], retry_failed: bool) -> list[Cell]:
    """The ``cells`` a run measures: those not ``recorded`` (failed ones too with ``retry_failed``),
    and every cell measured together with one of them (a pair, an interleaved group: together or
    not at all)."""
    ids = [c.cell_id(config) for c in cells]  # each once: a cell's key reads its workload's digest
    todo = [cid not in recorded or (retry_failed and recorded[cid]["status"] == "failed") for cid in ids]
    redo = {_unit_key(config, c) for c, due in zip(cells, todo) if due and measured_together(config, c)}
    if config.baselines == "paired":  # both halves recorded, but not one after the other: no pair
        redo |= _apart(config, [c for c, cid in zip(cells, ids) if measured_together(config, c) and cid in recorded],
                       recorded)
    return [c for c, due in zip(cells, todo) if due or (measured_together(config, c) and _unit_key(config, c) in redo)]


def _apart(config: SweepConfig, cells: list[Cell], recorded: dict[str, dict]) -> set[tuple]:
    """The pairs (:func:`_unit_key`) among recorded paired ``cells`` whose halves were not measured
    as a pair runs them: its server's ``none`` cells (one per workload), then its SD cells — a
    record of any other server began between its ``none`` cell and its SD cell (whatever its
    cell: one of a workload since edited counts as the server it names), or the SD cell came
    first (an SD cell a shared run recorded, or one measured before an interruption, beside a
    ``none`` cell measured later: its speedup would span the machine's drift between them)."""
    begun = sorted((r["started_at"], _measured_by(r.get("key"))) for r in recorded.values()
                   if isinstance(r.get("started_at"), (int, float)))
    units: dict[tuple, list[Cell]] = {}
    for cell in cells:
        units.setdefault(_unit_key(config, cell), []).append(cell)
    apart = set()
    for key, pair in units.items():
        if len(pair) != 2:
            continue
        none, sd = sorted(pair, key=lambda c: c.method != NO_SD)
        first, second = (recorded[c.cell_id(config)]["started_at"] for c in (none, sd))
        server = _measured_by(sd.key(config))
        if second < first or any(first < t < second and by != server for t, by in begun):
            apart.add(key)
    return apart


def _measured_by(key: object) -> tuple | None:
    """The server a cell record's ``key`` was measured by, as a pair runs them: its engine, batch
    size and SD server (a paired ``none`` cell's, the one it pairs with); None for a key that names none."""
    try:
        tree = key.get("tree")
        own = proposal_label(key["method"], key["k"], TreeShape.from_paths(tree).name if tree else None)
        return key["engine"]["name"], key["batch_size"], key.get("baseline_for") or own
    except (AttributeError, KeyError, TypeError, ValueError):  # validate.Invalid is a ValueError
        return None


def check_lengths(config: SweepConfig, cells: Sequence[Cell]) -> None:
    """Before any server starts (and in a dry run): the model of a launched specscope engine (a
    local checkpoint) holds the longest prompt a cell sends of each workload — its measured
    requests and its warm-up, the next one (:func:`warmup_prompt`); their tokens, before any chat
    template — and ``max_tokens``: else every cell would fail at its server, one by one."""
    from specscope.engine.config import check_max_tokens
    from specscope.engine.loading import load_tokenizer
    from specscope.workloads.jsonl import read_workload

    pairs = {(c.engine.name, c.workload): (c.engine, c.workload) for c in cells}  # an engine's tables: unhashable
    for engine, workload in pairs.values():
        model = Path(engine.model or "")
        if engine.launch != "specscope" or not (model / "config.json").is_file():
            continue
        try:
            requests = read_workload(config.workload_path(workload), load_tokenizer(model))
            sent = requests if config.num_requests is None else requests[: config.num_requests + 1]  # + the warm-up
            check_max_tokens(model, sent, config.max_tokens, option=f"{where(config.path, field='max_tokens')}:")
        except SpecscopeError as error:
            raise SpecscopeError(f"engine {engine.name!r}, workload {workload}: {error}") from None


def _run_sweep(config: SweepConfig, retry_failed: bool, run_groups: GroupRunner) -> SweepOutcome:
    """:func:`run_sweep` under its lock."""
    cells = plan_cells(config)
    pending = pending_cells(config, cells, read_cells(config.output), retry_failed)  # as the lock found them
    check_lengths(config, pending)
    groups: dict[tuple, list[Cell]] = {}
    for cell in pending:
        groups.setdefault(_server_key(config, cell), []).append(cell)
    rows = None
    group_of = {c.cell_id(config): key for key, group in groups.items() for c in group}
    left = {key: len(group) for key, group in groups.items()}
    for record in run_groups(config, list(groups.values())):
        write_record(config, record)
        left[group_of[record["cell_id"]]] -= 1
        if not left[group_of[record["cell_id"]]]:
            rows = results(config)  # the tables stay current while the sweep goes on
    rows = results(config) if rows is None else rows
    unpaired = sorted({r["engine"] for r in rows if r["status"] == "ok" and r["method"] != NO_SD and r.get("speedup") is None})
    if unpaired:  # a speedup is a ratio to the same engine's no-SD throughput, which these never measured
        log.warning("engines %s: SD cells without a successful 'none' cell of the same engine, workload and batch "
                    "size get no speedup (a url engine serves one method: give a url engine serving 'none' the "
                    "same name, or launch the engine so the sweep runs both)", ", ".join(unpaired))
    return SweepOutcome(
        total=len(cells),
        skipped=len(cells) - len(pending),
        ran=len(pending),
        failed=sum(1 for r in rows if r["status"] == "failed"),
        rows=rows,
    )


def results(config: SweepConfig) -> list[dict]:
    """One row per planned cell that has a record, with ``speedup`` against its ``none`` cell;
    also written to ``results.json``/``results.csv``, ``measured.json`` and ``winners.csv``, beside
    ``config.json``, the configuration they describe."""
    from specscope.fileio import write_rows

    recorded = read_cells(config.output)
    rows, servers = [], []
    for cell in plan_cells(config):
        record = recorded.get(cell.cell_id(config))
        if record is None:
            continue
        rows.append(
            {
                **cell.labels(),
                "status": record["status"],
                "reason": record["reason"],
                "cell_id": record["cell_id"],
                **(record["result"] or {}),
            }
        )
        servers.append(cell.server)
    baselines = {  # a paired none cell is found by the SD server it pairs with, a shared one by None
        (r["engine"], r["workload"], r["batch_size"], r["baseline_for"]): r
        for r in rows
        if r["method"] == NO_SD and r["status"] == "ok"
    }
    for i, (row, server) in enumerate(zip(rows, servers)):
        if row["status"] == "ok":
            labels = {name: row[name] for name in CELL_LABELS}
            measured = {name: value for name, value in row.items() if name not in labels}
            where = (row["engine"], row["workload"], row["batch_size"])
            pairs_with = row["baseline_for"] if row["method"] == NO_SD else server  # a paired none cell: its own pair
            baseline = baselines.get((*where, pairs_with)) or baselines.get((*where, None))
            rows[i] = {**labels, **bench_row(row["method"], row["k"], measured, baseline).flat()}

    atomic_write_text(config.output / "config.json", json.dumps(describe(config), indent=1) + "\n")  # with its tables:
    write_rows(config.output / "results.json", rows)  # a run stopped before they were written leaves both as they were
    write_rows(config.output / "results.csv", [_flat(r) for r in rows])
    measured = [
        {**r, "workload": Path(r["workload"]).stem}
        for r in rows
        if r["status"] == "ok" and r["method"] != NO_SD and r.get("speedup") is not None
    ]
    write_rows(config.output / "measured.json", measured)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["status"] == "ok":
            groups.setdefault((row["engine"], row["workload"], row["batch_size"]), []).append(row)
    best = {key: _winner(group) for key, group in groups.items()}
    write_rows(
        config.output / "winners.csv",
        [
            {
                "engine": r["engine"],
                "workload": r["workload"],
                "batch_size": r["batch_size"],
                "method": r["method"],
                "k": r["k"],
                "tree": r["tree"],
                "throughput": r["throughput"],
                "speedup": r.get("speedup"),
            }
            for r in best.values()
        ],
    )
    return rows


def _winner(rows: list[dict]) -> dict:
    """The winning row of one engine, workload and batch size: the report's measured winner
    (:func:`~specscope.analysis.measured.winner`: the fastest SD cell above 1× its own baseline,
    else no SD); where no row has a speedup (a url engine measured without a baseline), the
    highest throughput, the one thing measured."""
    rated = [r for r in rows if r["method"] != NO_SD and r.get("speedup") is not None]
    if not rated:
        return max(rows, key=lambda r: r["throughput"])
    cells = [MeasuredCell(r["workload"], r["method"], r["k"], r["batch_size"], r["speedup"], tree=r["tree"])
             for r in rated]
    won = winner(cells, rows[0]["workload"], rows[0]["batch_size"])
    if won.method != NO_SD:
        return rated[cells.index(won)]
    baselines = [r for r in rows if r["method"] == NO_SD]
    return baselines[0] if baselines else {**rated[0], "method": NO_SD, "k": 0, "tree": None, "speedup": 1.0,
                                           "throughput": None}


def _flat(row: dict) -> dict:
    return {
        name: json.dumps(value) if isinstance(value, (list, dict)) else value for name, value in row.items()
    }
