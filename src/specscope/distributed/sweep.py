"""``specscope sweep --ray``: each group of cells that shares a server runs in one Ray actor.

The actor declares its server's resources (:func:`group_resources`), launches the server on the
node Ray places it on, and runs its cells one call at a time, each call returning one cell's
record to the driver, which writes it (:func:`specscope.backends.openai.sweep.run_sweep`). If
the actor's process or node dies, Ray restarts it (up to ``MAX_RETRIES`` times, on any node
with the resources) and resends its unfinished calls: the cell that was running starts again
on a fresh server, finished cells are not repeated, and every cell's record arrives once. A cell
whose worker is lost for good is recorded as failed (``--retry-failed`` reruns it).

Where each cell ran is appended to ``OUTPUT/ray-placement.jsonl`` (``cell_id``, ``node_id``,
``node_ip``, ``pid``) before its record is handed over — a driver killed between the two leaves the
line of a run with no record, and the rerun's line after it, so a cell's last line is the run that
recorded it (written after the record, a recorded cell could have none) — and each measured cell's
result says how many servers of other groups were
up on its node while it ran (``servers_sharing_node``, :class:`NodeShare`): groups that fit one node
at once share its cores, and their throughputs carry that contention.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import replace
from typing import Iterator

from specscope.backends.openai.sweep import GroupRunner, failed_record, group_servers, run_group
from specscope.backends.openai.sweep_config import Cell, EngineSpec, SweepConfig
from specscope.distributed.cluster import (
    MAX_RETRIES,
    feasible,
    largest_node,
    needs,
    placement,
    ray_session,
    worker_failure,
)
from specscope.errors import SpecscopeError, where
from specscope.progress import LazyProgress

log = logging.getLogger(__name__)

TP_FLAGS = ("--tensor-parallel-size", "-tp", "--tp", "--tp-size")  # vLLM, SGLang


def tensor_parallel_size(engine: EngineSpec) -> int:
    """The tensor-parallel size in a launched engine's ``args`` (1 when not given)."""
    size = "1"
    for i, arg in enumerate(engine.args):
        flag, equals, value = arg.partition("=")
        if flag in TP_FLAGS:
            size = value if equals else (engine.args[i + 1] if i + 1 < len(engine.args) else "")
    if not size.isdigit() or int(size) < 1:
        raise SpecscopeError(f"expected a positive tensor-parallel size, got {size!r}")
    return int(size)


def group_resources(engine: EngineSpec, servers: int = 1) -> dict[str, object]:
    """Ray options for one group's actor: ``num_gpus`` = the tensor-parallel size of a launched
    vLLM/SGLang server (0 for the CPU reference engine and for url engines), ``num_cpus`` = 1,
    both overridden by ``GPU``/``CPU`` in the engine's ``resources``, whose other entries (a GPU
    type, a node label) are Ray custom resources; every amount times ``servers``, the servers the
    group runs at once (2 for an interleaved pair, one per method and k of an ``interleaved-all`` group)."""
    custom = dict(engine.resources)
    gpus = tensor_parallel_size(engine) if engine.launch in ("vllm", "sglang") else 0
    gpus, cpus = custom.pop("GPU", gpus), custom.pop("CPU", 1)
    return {"num_gpus": servers * gpus, "num_cpus": servers * cpus,
            "resources": {name: servers * amount for name, amount in custom.items()}}


class GroupActor:
    """Runs one group's cells, one per :meth:`run` call, on one server it launches itself."""

    def __init__(self, config: SweepConfig, cells: list[Cell]) -> None:
        self.config, self.cells = config, cells
        self.records: Iterator[dict] | None = None
        self.position: int | None = None  # index of the cell ``records`` yields next

    def where(self) -> dict[str, object]:
        return placement()

    def run(self, index: int) -> tuple[dict, dict[str, object]]:
        """Cell ``index``'s record and where it ran. A restarted actor (or any call out of
        order) starts the group again from ``index`` on a fresh server."""
        if self.position != index:
            if self.records is not None:
                self.records.close()
            self.records, self.position = run_group(self.config, self.cells[index:]), index
        record = next(self.records)
        self.position += 1
        if self.position == len(self.cells):
            self.records.close()  # stops the server before the group's resources are released
        return record, placement()


class SweepProgress:
    """One bar for the sweep: cells done (of those to run), failed, and where the running ones run."""

    def __init__(self, total: int) -> None:
        self.bar = LazyProgress("sweep", total)
        self.failed = 0
        self.running: dict[int, str] = {}  # group -> node of the cell it runs now

    def __enter__(self) -> SweepProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def update(self, group: int, node: str | None, record: dict | None = None, group_done: bool = False) -> None:
        if group_done:
            self.running.pop(group, None)
        elif node is not None:
            self.running[group] = node
        self.failed += record is not None and record["status"] == "failed"
        places = ", ".join(f"{name} ×{count}" for name, count in sorted(Counter(self.running.values()).items()))
        running = f"{len(self.running)} running" + (f" on {places}" if places else "")
        self.bar.advance(int(record is not None), f"sweep: {self.failed} failed, {running}")


class NodeShare:
    """Which group held its servers (``servers[g]`` of them, up at once) on which node, over which
    spans of the driver's clock: the other groups' servers up on a cell's node while it ran (from
    its group's placement on that node, or its previous cell's end, to the cell's end) — those
    that shared its node's cores."""

    def __init__(self, servers: list[int]) -> None:
        self.servers = servers
        self.spans: dict[int, list[list]] = {}  # group -> [[node, up since, down at (None: still up)], ...]
        self.last: dict[int, float] = {}  # group -> when its last cell ended

    def up(self, group: int, node: str, now: float) -> None:
        """``group``'s servers are up on ``node`` (a restarted group on another node: down on its old one)."""
        spans = self.spans.setdefault(group, [])
        if spans and spans[-1][2] is None:
            if spans[-1][0] == node:
                return
            spans[-1][2] = now
        spans.append([node, now, None])

    def down(self, group: int, now: float) -> None:
        """``group``'s servers stopped (its last cell ended, or its worker was lost)."""
        spans = self.spans.get(group)
        if spans and spans[-1][2] is None:
            spans[-1][2] = now

    def cell_ended(self, group: int, node: str, now: float) -> int:
        """The other groups' servers up on ``node`` while ``group``'s cell ran, up to ``now``."""
        self.up(group, node, now)
        since = max(self.last.get(group, self.spans[group][-1][1]), self.spans[group][-1][1])
        self.last[group] = now
        return sum(self.servers[other] for other, spans in self.spans.items() if other != group
                   for where, start, end in spans if where == node and start <= now and (end is None or end >= since))


def node_label(place: dict[str, object]) -> str:
    """``IP/node`` (the node id's first 6 hex digits: several nodes may share an IP)."""
    return f"{place['node_ip']}/{str(place['node_id'])[:6]}"


def ray_group_runner(address: str, config: SweepConfig | None = None) -> GroupRunner:
    """A :data:`~specscope.backends.openai.sweep.GroupRunner` that runs the groups on the Ray
    cluster at ``address`` (see :mod:`specscope.distributed.cluster`); ``config``'s engines
    are checked now, before the sweep writes anything."""
    for i, engine in enumerate(config.engines if config is not None else ()):
        try:
            group_resources(engine)
        except SpecscopeError as error:
            raise SpecscopeError(f"{where(config.path, field=f'engines[{i}].args')}: {error}") from None

    def run(config: SweepConfig, groups: list[list[Cell]]) -> Iterator[dict]:
        options = [group_resources(group[0].engine, group_servers(config, group)) for group in groups]
        # workers read workloads and write server logs at the driver's absolute paths
        config = replace(config, path=config.path.resolve(), output=config.output.resolve())
        if not groups:  # every cell already done: no cluster to start
            return
        with ray_session(address) as ray, SweepProgress(sum(map(len, groups))) as progress:
            nodes, waiting = ray.nodes(), set()
            for group, option in zip(groups, options):
                if not feasible(option, nodes) and group[0].engine.name not in waiting:
                    waiting.add(group[0].engine.name)  # said once an engine, however many of its groups wait
                    message = (f"{where(config.path, field='engines')}: engine {group[0].engine.name!r} runs its "
                               f"servers with {', '.join(f'{n} {a:g}' for n, a in needs(option).items())} on one node; the cluster's largest node has "
                               f"{largest_node(nodes)}")
                    if address == "local":  # nothing will ever join it
                        raise SpecscopeError(message)
                    log.warning("%s: waiting for such a node to join (Ctrl-C to stop)", message)
            actor_class = ray.remote(GroupActor)
            actors, calls = {}, {}
            for g, (group, option) in enumerate(zip(groups, options)):
                actors[g] = actor_class.options(**option, max_restarts=MAX_RETRIES,
                                                max_task_retries=MAX_RETRIES).remote(config, group)
                calls[actors[g].where.remote()] = (g, None)
                calls.update({actors[g].run.remote(i): (g, i) for i in range(len(group))})
            left = {g: len(group) for g, group in enumerate(groups)}
            sharing = NodeShare([group_servers(config, group) for group in groups])
            while calls:
                [ready], _ = ray.wait(list(calls), num_returns=1)
                g, index = calls.pop(ready)
                try:
                    value = ray.get(ready)
                except ray.exceptions.RayError as error:
                    if index is None:
                        continue  # a group whose actor died before saying where it runs
                    value = (failed_record(config, groups[g][index], f"ray: {worker_failure(error)}"), None)
                if index is None:
                    progress.update(g, node_label(value))
                    sharing.up(g, node_label(value), time.monotonic())
                    continue
                record, place = value
                expected = groups[g][index].cell_id(config)
                if record["cell_id"] != expected:  # the worker saw another workload file
                    record = failed_record(config, groups[g][index], "ray: the worker's workload file differs from "
                                           "the driver's (is it on a filesystem all nodes share?)")
                left[g] -= 1
                if place is not None:
                    shared = sharing.cell_ended(g, node_label(place), time.monotonic())
                    if isinstance(record.get("result"), dict):
                        record = {**record, "result": {**record["result"], "servers_sharing_node": shared}}
                if not left[g]:
                    sharing.down(g, time.monotonic())
                if place is not None:  # before the record: a recorded cell's last line is the run that recorded it
                    _append_placement(config, expected, place)
                yield record  # the caller writes it before asking for the next
                progress.update(g, node_label(place) if place else None, record, group_done=not left[g])
                if not left[g]:
                    del actors[g]  # its last handle: Ray ends the actor and frees its resources

    return run


def _append_placement(config: SweepConfig, cell_id: str, place: dict[str, object]) -> None:
    with (config.output / "ray-placement.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"cell_id": cell_id, **place}) + "\n")
