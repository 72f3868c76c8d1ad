"""Calibrate the cost model to the engine a sweep measured, and validate it on held-out cells.

:func:`read_sweep` turns a ``specscope sweep`` output into the cells
:mod:`specscope.costmodel.calibrate` fits. :func:`validate` fits on all cells but one and
predicts the one left out, for every SD cell: the held-out cell's own requests (its timeline's
ids and output lengths) are replayed from the traces of its workload (records whose
``dataset`` is the workload file's stem; a repeat ``id#n`` reads ``id``) under ``fixed:k`` or
``tree:SHAPE``, in mixed mode at the cell's batch size, against the no-SD replay of the same
requests. A cell measured in segments (interleaved baselines: each segment a closed-loop run of
its own, ramp-up and drain included) is replayed segment by segment, its throughput their
tokens over their summed time, as measured. Measured speedup = the cell's throughput / its
``none`` cell's (same workload and batch size; with paired or interleaved baselines, the one
measured beside it); error_pct = 100 · (predicted − measured) / measured. The speedup is a ratio of
two throughputs, whose own errors it hides where they agree: ``throughput_error_pct`` and
``baseline_error_pct`` are the same fit's errors on the SD cell's tokens per second and on its
``none`` cell's (the latter replayed over the held-out cell's requests), what a prediction of
absolute throughput at an unmeasured batch size carries (docs/calibration.md, "Absolute
throughput": on one sweep the ``none`` cells ran 11–14 % high at batch sizes 4 and 8 while the
speedups were within 9 %).

How far a measurement itself can be trusted: a pair measured in segments (interleaved
baselines) measured one speedup per segment — the SD server's tokens per second over that
segment's requests against the ``none`` server's over the same requests, moments apart — and
``measured_se_pct`` is the relative standard error of their mean, their spread / √segments
(:func:`measured_se_pct`; empty for cells measured otherwise). An error within about two of
them is what the measurement alone can explain: on a 2-core machine whose speed wanders by
±15 % from one second to the next, a cell of a few seconds per server carries 2.5–4.5 %.
"""

from __future__ import annotations

import json

import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from specscope.backends.openai.metrics import HISTOGRAMS
from specscope.backends.openai.prompts import workload_id
from specscope.backends.openai.sweep import TIMELINE, read_cells
from specscope.costmodel.calibrate import DRAFTING_TERMS, CellRun, counter_assumptions, fit_cells
from specscope.costmodel.linear import FORWARD_TERMS, LinearCostModel
from specscope.errors import SpecscopeError
from specscope.reading import read_json
from specscope.methods import NO_SD, method as method_named
from specscope.sim.checks import check_k
from specscope.sim.grid import SimConfig, plan_for
from specscope.sim.mixed import predict_mixed
from specscope.sim.plan import baseline_plan
from specscope.sim.policies import configured_policy, parse_policy
from specscope.trace.schema import TraceRecord
from specscope.trees import TreeShape
from specscope.validate import K_MAX_LIMIT, MAX_CONTEXT, Invalid, check, integer, not_text, number

log = logging.getLogger(__name__)
COLUMNS = ("method", "k", "batch_size", "measured_speedup", "predicted_speedup", "error_pct", "measured_se_pct",
           "throughput_error_pct", "baseline_error_pct", "tree", "workload", "engine")
SPREAD_COLUMNS = ("term", "fitted", "jackknife_se", "relative_se_pct", "separated")  # SWEEP_DIR/coefficients.csv


def read_sweep(sweep_dir: Path, engine: str | None = None) -> list[CellRun]:
    """The successful cells of ``sweep_dir`` of one engine (``engine``: its name; needed when the
    sweep measured several), a ``none`` cell and the SD cell it was measured beside sharing a
    ``pair``. Only the cells its ``results.json`` lists count: those of the configuration that
    ran last (records of an earlier configuration stay in ``cells/`` for a later resume). An
    error names the file, the request and the field of a record the fit cannot read — one with
    no timeline (a sweep recorded before timelines existed), a copied one (its ``cell_id`` is not
    its file's name), a value out of range — or says that none succeeded. A warning names the SD
    cells without a spec-decode counter and what the fit takes instead
    (:func:`~specscope.costmodel.calibrate.counter_assumptions`)."""
    if not (sweep_dir / "cells").is_dir():
        raise SpecscopeError(f"--from-sweep {sweep_dir}: no cells/ folder (expected a `specscope sweep` output)")
    listed = _listed(sweep_dir)
    runs, engines, failed, unlisted = [], set(), [], []
    records = read_cells(sweep_dir)
    if listed is None and records:
        log.warning("--from-sweep %s: no results.json (a sweep stopped before it listed its cells): fitting every "
                    "record in cells/ (%d), whatever configuration measured them", sweep_dir, len(records))
    for cell_id, record in records.items():
        if listed is not None and cell_id not in listed:
            unlisted += [cell_id] if record.get("status") == "ok" else []
            continue
        path = sweep_dir / "cells" / f"{cell_id}.json"
        if listed is not None:
            _check_listed(sweep_dir / "results.json", path, listed[cell_id], record)
        if record["status"] != "ok":
            failed += [cell_id] if engine is None or _engine_name(path, record) == engine else []
            continue
        if TIMELINE not in record:
            raise SpecscopeError(f"{path}: no per-request chunk timeline (recorded by an older specscope sweep); "
                                 "rerun the sweep into a new folder")
        name = _engine_name(path, record)
        engines.add(name)
        if engine is None or name == engine:
            runs.append(_cell_run(path, record))
    missing = sorted(set(listed or ()) - set(records))
    for what, ids in (("failed (not fitted; `sweep --retry-failed` reruns them)", failed),
                      ("listed in results.json but missing from cells/ (not fitted)", missing),
                      ("in cells/ but not listed in results.json (not fitted: an earlier configuration's, or "
                       "measured by a sweep stopped before it listed them; rerunning the sweep lists them)", unlisted)):
        if ids:
            log.warning("--from-sweep %s: %d cells %s: %s", sweep_dir, len(ids), what,
                        ", ".join(ids[:5]) + (", …" if len(ids) > 5 else ""))
    if engine is None and len(engines) > 1:
        raise SpecscopeError(f"--from-sweep {sweep_dir}: cells of engines {', '.join(sorted(engines))}; a cost model "
                             "describes one: choose it with --engine NAME")
    if not runs:
        raise SpecscopeError(f"--from-sweep {sweep_dir}: no successful cell"
                             + (f" of engine {engine!r} (have: {', '.join(sorted(engines)) or 'none'})" if engine else ""))
    for line in counter_assumptions(runs):
        log.warning("--from-sweep %s: %s", sweep_dir, line)
    twins = {_pair(r, r.baseline_for) for r in runs if r.method == NO_SD and r.baseline_for is not None}
    for i, run in enumerate(runs):
        pair = _pair(run, run.baseline_for or run.proposal)
        if pair in twins:  # a paired none cell, or an SD cell whose none cell succeeded
            runs[i] = replace(run, pair=pair)
    return runs


def _listed(sweep_dir: Path) -> dict[str, dict] | None:
    """The rows ``results.json`` lists (the last configuration's cells), by cell id; None without
    the file (a sweep that has not finished a group: every record counts)."""
    path = sweep_dir / "results.json"
    if not path.exists():
        return None
    rows = read_json(path)
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("cell_id"), str) for r in rows):
        raise SpecscopeError(f"{path}: expected the sweep's result rows, each with a cell_id")
    return {r["cell_id"]: r for r in rows}


def _check_listed(results: Path, path: Path, row: dict, record: dict) -> None:
    """``results.json``'s row of a cell says what its record says: its status, and an ok cell's
    throughput (a row edited, or a table left from another run, published figures the fit never
    read: a review)."""
    said, kept = row.get("status", record.get("status")), record.get("status")  # what the row says, where it does
    measured = (record.get("result") or {}).get("throughput")
    throughput = row.get("throughput", measured)
    same = isinstance(throughput, (int, float)) and isinstance(measured, (int, float)) \
        and math.isclose(throughput, measured, rel_tol=1e-9)
    if said != kept or (kept == "ok" and not same):
        raise SpecscopeError(f"{results}: cell {row['cell_id']}: status {said!r}, throughput {throughput!r}, where its "
                             f"record {path.name} says {kept!r}, {measured!r}: the table is out of step with cells/ "
                             "(rerun `specscope sweep` on its config to write it again)")


def _engine_name(path: Path, record: dict) -> str:
    engine = record["key"].get("engine") if isinstance(record["key"], dict) else None
    if not isinstance(engine, dict) or not isinstance(engine.get("name"), str):
        raise SpecscopeError(f"{path}: field 'key.engine.name': expected the engine's name")
    return engine["name"]


def _cell_run(path: Path, record: dict) -> CellRun:
    """An ok cell record as the fit reads it, every field it uses checked."""
    key, result, timeline = record["key"], record["result"], record[TIMELINE]

    def field(label: str, rule, value: object, **bounds: object):
        return _stored(f"{path}: field {label!r}", rule, value, **bounds)

    def optional(label: str, rule, value: object, **bounds: object):
        return None if value is None else field(label, rule, value, **bounds)

    method = key.get("method")
    if method != NO_SD:
        try:
            method_named(method if isinstance(method, str) else repr(method))
        except SpecscopeError as error:
            raise SpecscopeError(f"{path}: field 'key.method': {error}") from None
    tree = None
    if key.get("tree") is not None:
        try:
            tree = TreeShape.from_paths(key["tree"])
        except Invalid as error:
            raise SpecscopeError(f"{path}: field 'key.tree': expected a static tree's node paths ({error})") from None
        if tree.branching is None or TreeShape.from_branching(tree.branching) != tree:
            raise SpecscopeError(f"{path}: field 'key.tree': expected a static tree's node paths (the same branching "
                                 f"at every node of a depth), got {tree.name}")
    k = field("key.k", integer, key.get("k"), low=0 if method == NO_SD else 1, high=K_MAX_LIMIT
              if tree is None else None)
    if tree is not None and k != tree.nodes:
        raise SpecscopeError(f"{path}: field 'key.k': expected the tree's node count ({tree.nodes}), got {k}")
    if not isinstance(key.get("workload"), str):
        raise SpecscopeError(f"{path}: field 'key.workload': expected the workload's path")
    if not isinstance(timeline, list) or not timeline:
        raise SpecscopeError(f"{path}: field {TIMELINE!r}: expected one entry per request")
    for i, request in enumerate(timeline):
        _check_request(path, i, request)
    _check_whole(path, timeline, optional("result.num_requests", integer, result.get("num_requests"), low=1),
                 optional("result.output_tokens", integer, result.get("output_tokens"), low=0),
                 optional("result.duration_s", number, result.get("duration_s"), low=0.0))
    return CellRun(path.stem, method, k, tree, field("key.batch_size", integer, key.get("batch_size"), low=1),
                   key["workload"], field("result.throughput", number, result.get("throughput"), low=0.0,
                                          low_open=True),
                   optional("result.num_draft_tokens", integer, result.get("num_draft_tokens"), low=0),
                   timeline, {name: optional(f"result.{name}", number, result.get(name), low=0.0)
                              for name in HISTOGRAMS.values()},
                   key.get("baseline_for"),
                   num_drafts=optional("result.num_drafts", integer, result.get("num_drafts"), low=0),
                   num_accepted_tokens=optional("result.num_accepted_tokens", integer, result.get("num_accepted_tokens"),
                                                low=0),
                   metrics_error=_metrics_error(path, result.get("metrics_error")),
                   pads=key["engine"].get("launch") == "specscope", engine=_engine_name(path, record),
                   checkpoints={what: key["engine"][f"{what}_files"] for what in ("model", "draft")
                                if isinstance(key["engine"].get(f"{what}_files"), str)})


def _metrics_error(path: Path, value: object) -> str | None:
    """A cell's ``result.metrics_error``: why the sweep could not scrape its server's counters."""
    if value is not None and not isinstance(value, str):
        raise SpecscopeError(f"{path}: field 'result.metrics_error': expected the failed scrape's reason (text) or "
                             f"null, got {value!r}")
    return value


SPAN_RATIO = (0.8, 1.05)  # a timeline's span over its cell's duration_s: 0.986-0.9996 over 333 cells of nine sweeps


def _check_whole(path: Path, timeline: list[dict], requests: int | None, tokens: int | None,
                 duration: float | None) -> None:
    """A cell's timeline is the run its ``result`` measured: each request once, as many as it
    counted and their output tokens its total (a cut or padded timeline fitted a run of other
    requests beside a speedup of all of them, unsaid: a review), and its requests' times span
    what it measured — per segment, from the first send to the last chunk, summed: within
    :data:`SPAN_RATIO` of ``duration`` (a send time off by minutes moved the fit's prefill terms
    unsaid: a review)."""
    seen: set[str] = set()
    for request in timeline:
        rid = json.dumps(request["id"])
        if rid in seen:
            raise SpecscopeError(f"{path}: field {TIMELINE!r}: request {request['id']!r} twice: expected each request "
                                 "of the run once")
        seen.add(rid)
    total = sum(request["output_tokens"] for request in timeline)
    if (requests is not None and requests != len(timeline)) or (tokens is not None and tokens != total):
        measured = " and ".join(part for part in (f"{requests} requests" if requests is not None else "",
                                                  f"{tokens} output tokens" if tokens is not None else "") if part)
        raise SpecscopeError(f"{path}: field {TIMELINE!r}: {len(timeline)} requests of {total} output tokens, but "
                             f"its result measured {measured}: expected the run's whole timeline (remove the "
                             "record to measure the cell again)")
    if duration:
        segments: dict[int, list[dict]] = {}
        for request in timeline:
            segments.setdefault(request.get("segment") or 0, []).append(request)
        span = sum(max(r["sent_ms"] + r["chunk_ms"][-1] for r in group) - min(r["sent_ms"] for r in group)
                   for group in segments.values()) / 1000
        if not SPAN_RATIO[0] * duration - 0.01 <= span <= SPAN_RATIO[1] * duration + 0.01:
            raise SpecscopeError(f"{path}: field {TIMELINE!r}: its requests' times span {span:.6g} s from the first "
                                 f"send to the last chunk (summed over its segments), but its result measured "
                                 f"{duration:.6g} s (result.duration_s): expected the run's own times (a sent_ms "
                                 "or chunk_ms is off; remove the record to measure the cell again)")


def _check_request(path: Path, index: int, request: object) -> None:
    """One request of a cell's timeline: its id, sent time, chunk times (from the send, in
    order), tokens per chunk (as many as chunks), prompt and output lengths, segment."""
    where = f"{path}: {TIMELINE}[{index}]"
    if not isinstance(request, dict) or not isinstance(request.get("id"), str):
        raise SpecscopeError(f"{where}: expected a request with an id")
    where = f"{where} (request {request['id']!r})"

    def field(name: str, rule, **bounds: object):
        return _stored(f"{where}: field {name!r}", rule, request.get(name), **bounds)

    field("sent_ms", number, low=0.0)
    field("output_tokens", integer, low=0, high=MAX_CONTEXT)
    if request.get("prompt_tokens") is None:
        raise SpecscopeError(f"{where}: field 'prompt_tokens': expected the prompt's length (the server's "
                             "usage.prompt_tokens: the fit prices each prefill by it)")
    field("prompt_tokens", integer, low=0, high=MAX_CONTEXT)
    chunks = request.get("chunk_ms")
    if not isinstance(chunks, list) or not chunks:
        raise SpecscopeError(f"{where}: field 'chunk_ms': expected a list of times, one per streamed chunk")
    times = [_stored(f"{where}: field 'chunk_ms[{j}]'", number, t, low=0.0) for j, t in enumerate(chunks)]
    if any(b < a for a, b in zip(times, times[1:])):
        raise SpecscopeError(f"{where}: field 'chunk_ms': expected times in the order the chunks came")
    counts = request.get("chunk_tokens")
    if counts is not None:
        if not isinstance(counts, list) or len(counts) != len(chunks):
            raise SpecscopeError(f"{where}: field 'chunk_tokens': expected one count per chunk ({len(chunks)})")
        for j, count in enumerate(counts):
            _stored(f"{where}: field 'chunk_tokens[{j}]'", integer, count, low=0, high=MAX_CONTEXT)
        if sum(counts) != request["output_tokens"]:
            raise SpecscopeError(f"{where}: field 'chunk_tokens': expected counts adding up to output_tokens "
                                 f"({request['output_tokens']}), got {sum(counts)}")
    if request.get("segment") is not None:
        field("segment", integer, low=0)


def _stored(label: str, rule, value: object, **bounds: object):
    """``check(label, rule, value)`` for a value a cell record stores (:func:`~specscope.validate.not_text`)."""
    return check(label, rule, check(label, not_text, value, what="an integer" if rule is integer else "a number"),
                 **bounds)


def _pair(run: CellRun, server: str) -> str:
    """What a paired or interleaved ``none`` cell and its SD cell share: workload, batch size, SD server."""
    return f"{run.workload} B={run.batch_size} {server}"


def _requests(cell: CellRun, traces: dict[str, dict[str, TraceRecord]]) -> list[TraceRecord]:
    """The cell's requests as trace records, cut to the output lengths the cell measured."""
    dataset = Path(cell.workload).stem
    if dataset not in traces:
        raise SpecscopeError(f"--traces: no records of dataset {dataset!r} (workload {cell.workload}); "
                             f"have: {', '.join(sorted(traces)) or 'none'}")
    records = []
    for request in cell.timeline:
        record = traces[dataset].get(workload_id(request["id"], traces[dataset]))
        if record is None:
            raise SpecscopeError(f"--traces: dataset {dataset!r} has no request {request['id']!r}")
        if cell.method not in record.proposers:
            raise SpecscopeError(f"--traces: request {record.id!r} has no proposer {cell.method!r} "
                                 f"(has: {', '.join(sorted(record.proposers))})")
        length = request["output_tokens"]
        if record.output_len < length:
            raise SpecscopeError(f"--traces: request {record.id!r} traced {record.output_len} output tokens, the "
                                 f"sweep generated {length} (trace with --max-tokens {length}; a trace stops at EOS, so sweep "
                                 "with ignore_eos = false)")
        records.append(replace(record, output_token_ids=record.output_token_ids[:length],
                               proposers={n: t.truncated(length) for n, t in record.proposers.items()}))
    return records


def predict_throughputs(model: LinearCostModel, cell: CellRun, traces: dict[str, dict[str, TraceRecord]]
                        ) -> tuple[float, float]:
    """The tokens per second ``model`` predicts for ``cell`` and for no SD over the same requests
    (module docstring); their ratio is the predicted speedup."""
    records = _requests(cell, traces)
    policy = parse_policy(configured_policy(cell.k, cell.tree.name if cell.tree is not None else None))
    config = SimConfig(mode="mixed", batch_sizes=(cell.batch_size,), guess_no_match=False)
    segments: dict[int, list[TraceRecord]] = {}
    for request, record in zip(cell.timeline, records):
        segments.setdefault(request.get("segment", 0), []).append(record)
    seconds, tokens_in_all = {"sd": 0.0, "base": 0.0}, 0.0
    for part in segments.values():
        plan = plan_for(part, cell.method, policy, config, Path(cell.workload).stem)
        tokens = float(plan.output_len.sum())
        if not tokens:  # a segment whose requests emitted nothing: no time to predict
            continue
        seconds["sd"] += tokens / predict_mixed(plan, model, model.drafting_for(cell.method), cell.batch_size).throughput
        base = predict_mixed(baseline_plan(plan.output_len, plan.prompt_len), model, None, cell.batch_size)
        seconds["base"] += tokens / base.throughput
        tokens_in_all += tokens
    if not seconds["sd"]:
        raise SpecscopeError(f"{cell.label}: its requests emitted no output token: no speedup to predict")
    return tokens_in_all / seconds["sd"], tokens_in_all / seconds["base"]


def segment_speedups(cell: CellRun, base: CellRun) -> list[float]:
    """The speedup each segment measured (``cell``'s tokens per second over a segment's requests
    against ``base``'s over the same segment; a segment's time runs from its first request sent to
    its last chunk): one per segment both cells ran, none unless both were measured in segments."""
    rates = []
    for run in (cell, base):
        spans: dict[int, list[float]] = {}
        for request in run.timeline:
            if request.get("segment") is None or not request["chunk_ms"]:
                return []
            span = spans.setdefault(request["segment"], [math.inf, -math.inf, 0.0])
            span[0] = min(span[0], request["sent_ms"])
            span[1] = max(span[1], request["sent_ms"] + request["chunk_ms"][-1])
            span[2] += request["output_tokens"]
        rates.append({segment: tokens / (end - start) for segment, (start, end, tokens) in spans.items()
                      if end > start and tokens > 0})  # a segment that emitted nothing measured no rate
    return [rates[0][s] / rates[1][s] for s in sorted(rates[0]) if s in rates[1]]


def measured_se_pct(cell: CellRun, base: CellRun) -> float | None:
    """The relative standard error of ``cell``'s measured speedup in %: the standard deviation of
    its :func:`segment_speedups` over √segments, over their mean (None below two segments)."""
    ratios = segment_speedups(cell, base)
    if len(ratios) < 2:
        return None
    mean = sum(ratios) / len(ratios)
    spread = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (len(ratios) - 1))
    return 100 * spread / math.sqrt(len(ratios)) / mean


def index_traces(records: Sequence[TraceRecord]) -> dict[str, dict[str, TraceRecord]]:
    """Trace records by dataset, then id."""
    traces: dict[str, dict[str, TraceRecord]] = {}
    for record in records:
        traces.setdefault(record.dataset or "trace", {})[record.id] = record
    return traces


def held_out(cells: Sequence[CellRun]) -> list[tuple[CellRun, CellRun]]:
    """The SD cells a validation holds out, each with its ``none`` cell (same workload and batch
    size; with paired or interleaved baselines, the one measured beside it); SD cells without
    one are left out, each named in a warning."""
    baselines = {(c.workload, c.batch_size, c.baseline_for): c for c in cells if c.method == NO_SD}
    pairs = []
    for held in cells:
        if held.method == NO_SD:
            continue
        where = (held.workload, held.batch_size)
        base = baselines.get((*where, held.proposal)) or baselines.get((*where, None))
        if base is None:
            log.warning("--validate: %s has no 'none' cell of its workload and batch size: not held out",
                        held.label)
        else:
            pairs.append((held, base))
    if not pairs:
        raise SpecscopeError("--validate: no SD cell with a 'none' cell of the same workload and batch size")
    return pairs


def check_traces(pairs: Sequence[tuple[CellRun, CellRun]], records: Sequence[TraceRecord],
                 traced_by: dict[str, tuple[str, dict[str, str]]] | None = None) -> dict[str, dict[str, TraceRecord]]:
    """The traces by dataset and id, checked against every held-out cell of ``pairs`` before any
    fit: traced by the checkpoints the cell's engine ran (``traced_by``: dataset → the trace
    file and the fingerprints its settings keep, :func:`~specscope.tracing.settings.traced_checkpoints`;
    a url engine's or a hub model's cells keep none, and are not compared), each request found,
    traced as long as the sweep ran it and as deep as the cell's k (a deeper k would be
    extrapolated); prompts whose traced length differs from what the server counted are named in
    a warning (another tokenization or chat template than the trace's)."""
    traces, differ, cells = index_traces(records), [], 0
    for held, _ in pairs:
        _check_checkpoints(held, (traced_by or {}).get(Path(held.workload).stem))
        requests = _requests(held, traces)
        policy = parse_policy(configured_policy(held.k, held.tree.name if held.tree is not None else None))
        check_k(requests, held.method, policy, Path(held.workload).stem)
        apart = [abs(r.prompt_len - q["prompt_tokens"]) for r, q in zip(requests, held.timeline)
                 if q.get("prompt_tokens") is not None and r.prompt_len != q["prompt_tokens"]]
        differ, cells = differ + apart, cells + bool(apart)
    if differ:
        log.warning("--traces: in %d of %d held-out cells, %d prompts were traced at another length than the server "
                    "counted (up to %d tokens apart: another tokenizer or chat template?)", cells, len(pairs),
                    len(differ), max(differ))
    return traces


def _check_checkpoints(held: CellRun, traced: tuple[str, dict[str, str]] | None) -> None:
    """Refuse a trace whose target, or whose drafter of the held-out cell's method, is another
    checkpoint than the cell's engine ran: its acceptance is another model's."""
    if traced is None:
        return
    path, found = traced
    for what, ran in held.checkpoints.items():
        theirs = found.get("model" if what == "model" else held.method)
        if theirs is not None and theirs != ran:
            role = "target" if what == "model" else f"{held.method} drafter"
            raise SpecscopeError(f"--traces {path}: traced with another {role} (fingerprint {theirs[:12]}) than "
                                 f"{held.label} ran ({ran[:12]}): its acceptance would be priced as this engine's; "
                                 "trace the workload with the models the sweep served")


def validate(cells: Sequence[CellRun], records: Sequence[TraceRecord],
             traced_by: dict[str, tuple[str, dict[str, str]]] | None = None
             ) -> tuple[list[dict[str, object]], list[LinearCostModel]]:
    """Leave-one-out over the SD cells that have a ``none`` cell (:func:`held_out`): one row each
    (:data:`COLUMNS`), and the fit that left each out; a method with one cell, or one tree cell,
    is refused first (leaving it out leaves nothing of it to fit), then the traces are checked
    (:func:`check_traces`, ``traced_by`` its checkpoints by dataset)."""
    pairs = held_out(cells)
    for held, _ in pairs:
        if sum(c.method == held.method for c in cells) < 2:
            raise SpecscopeError(f"--validate: {held.method!r} has one cell only; leaving it out leaves no "
                                 "drafting to fit (measure at least two of each method)")
        if held.tree is not None and sum(c.method == held.method and c.tree is not None for c in cells) < 2:
            raise SpecscopeError(f"--validate: {held.label} is the one tree cell of {held.method!r}; leaving it "
                                 "out leaves no tree step to fit, whose own cost (c_tree) would be taken as 0 (measure "
                                 "its trees at two batch sizes at least)")
    traces = check_traces(pairs, records, traced_by)
    rows, fits = [], []
    for held, base in pairs:
        others = [c for c in cells if c is not held]
        measured = held.throughput / base.throughput
        try:
            fits.append(fit_cells(others))
        except SpecscopeError as error:
            raise SpecscopeError(f"--validate: the fit without {held.label}: {error}") from None
        sd, no_sd = predict_throughputs(fits[-1], held, traces)
        predicted = sd / no_sd
        rows.append({"method": held.method, "k": held.k, "batch_size": held.batch_size,
                     "measured_speedup": round(measured, 4), "predicted_speedup": round(predicted, 4),
                     "error_pct": _error_pct(predicted, measured),
                     "measured_se_pct": _rounded(measured_se_pct(held, base)),
                     "throughput_error_pct": _error_pct(sd, held.throughput),
                     "baseline_error_pct": _error_pct(no_sd, base.throughput),
                     "tree": held.tree.name if held.tree is not None else None, "workload": held.workload,
                     "engine": held.engine})
    return rows, fits


def _error_pct(predicted: float, measured: float) -> float:
    """100 · (predicted − measured) / measured, to 0.01."""
    return round(100 * (predicted - measured) / measured, 2)


def terms(model: LinearCostModel) -> dict[str, float]:
    """A calibrated model's fitted terms by name: the forward's, ``c_prompt`` and ``c_prompt_fixed``
    (``c_tok`` and ``c_fixed`` where no prefill was seen), ``c_prompt_kv``, ``c_batch``, ``admit_s``, and ``METHOD.TERM`` as the drafting was fitted, per
    proposed token — its ``c_fixed`` and ``c_req`` at k = 0 (the model file's ``k + 1`` form
    plus ``c_tok`` and ``c_batched``), and ``c_tree`` where it priced a tree step, the names :func:`~specscope.costmodel.calibrate._fit`
    reports as not separated."""
    named = {name: getattr(model, name) for name in (*FORWARD_TERMS, "admit_s")}
    named.update(c_prompt=model.prompt_price, c_batch=model.c_batch, c_prompt_fixed=model.prompt_fixed,
                 c_prompt_kv=model.c_prompt_kv)
    for method, drafting in model.drafting.items():
        fitted = {**{name: getattr(drafting, name) for name in DRAFTING_TERMS}, **drafting.at_no_proposal()}
        if not drafting.c_tree and not any(c.tree and c.method == method for c in model.fitted_cells):
            del fitted["c_tree"]  # chains alone: a term it never had
        if not drafting.c_confidence:
            del fitted["c_confidence"]  # a server's chunks never tell a confidence stop: a term a sweep never has
        named.update({f"{method}.{name}": value for name, value in fitted.items()})
    return named


def coefficient_spread(model: LinearCostModel, fits: Sequence[LinearCostModel]) -> list[dict[str, object]]:
    """Per term (:data:`SPREAD_COLUMNS`): ``model``'s value and its jackknife standard error over
    the leave-one-out ``fits`` (n of them), √((n − 1)/n · Σ (θ_i − θ̄)²): how firmly the sweep
    pins the term down. Terms that trade places with another (a cost per cached token and one
    per request, over prompts of one length) show a large one; a term the sweep cannot tell
    apart at all (``separated`` false) has its value from an arbitrary split, and no standard
    error (left empty: a spread of 0 there would read as a term pinned exactly), nor has a term
    some of the fits never priced."""
    without_one = [terms(fit) for fit in fits]
    rows = []
    for name, fitted in terms(model).items():
        separated = name not in model.not_separated
        held = [named[name] for named in without_one if name in named]  # a tree's term: in the fits that saw one
        spread = np.array(held)
        se = float(np.sqrt((len(spread) - 1) / len(spread) * np.sum((spread - spread.mean()) ** 2))) \
            if separated and len(held) == len(without_one) else None
        rows.append({"term": name, "fitted": fitted, "jackknife_se": se,
                     "relative_se_pct": round(100 * se / abs(fitted), 1) if fitted and se is not None else None,
                     "separated": separated})
    return rows


WEAK_PCT = 25.0  # a term whose jackknife standard error is above this share of its value is weakly pinned


def design_notes(spread: Sequence[dict[str, object]], cells: Sequence[CellRun]) -> list[str]:
    """One line of advice per term of :func:`coefficient_spread`'s rows that the sweep pins
    weakly (its standard error above :data:`WEAK_PCT` % of its value) where a known change of the
    sweep's design tells it apart (docs/calibration.md, stop 60): ``c_tok``, whose column on a
    chain is the per-row term's plus each drafter's per-row-and-draft one (k passes, k + 1
    tokens), where the sweep has a model drafter and no tree of one (on ``specscope serve``
    its cost per verified token came −100 … +292 % from the engine's own records without one,
    −11.6 … +2.3 % in seven runs with a one-level tree of 8); and ``c_kv``, nearly a per-request cost where
    the requests running together carry caches of one length (+19.5 and +39.3 % with lengths mixed
    among them, −3.4 and −7.0 % with lengths alike within each segment and differing across)."""
    weak = {row["term"]: row for row in spread if row["separated"] and row["jackknife_se"] is not None
            and row["jackknife_se"] > WEAK_PCT / 100 * abs(row["fitted"])}
    drafters = [c for c in cells if c.method != NO_SD and method_named(c.method).kind != "lookup"]
    notes = []
    if "c_tok" in weak and drafters and not any(c.tree is not None for c in drafters):
        notes.append(f"c_tok (a verified token) is pinned to ±{_spread_pct(weak['c_tok'])}: on a chain a step's verified "
                     "tokens grow with its drafter's passes, so it trades with the cost per row and the drafters' per "
                     "row and draft; sweep a wide one-level tree beside the chains (trees = [\"8\"]: one drafter "
                     "pass, 9 tokens verified a row) to tell them apart")
    if "c_kv" in weak:
        notes.append(f"c_kv (a cached token) is pinned to ±{_spread_pct(weak['c_kv'])}: where the requests running "
                     "together carry caches of one length it trades with the cost per request; give the requests of "
                     "each segment prompts of one length, different lengths in different segments")
    return notes


def _spread_pct(row: dict[str, object]) -> str:
    """A weak term's standard error as a share of its value: ``48 %``, or ``its whole value (fitted 0)``."""
    return f"{100 * row['jackknife_se'] / abs(row['fitted']):.0f} %" if row["fitted"] else "its whole value (fitted 0)"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
