"""Collect traces for a workload: greedy outputs once, then every proposer teacher-forced.

Resumable per request: records are appended to the output file (flushed and fsynced) as each
batch finishes; a rerun reads the ids already there and traces only the rest. A trailing line
left half-written by a killed run is dropped (it is redone), never silently kept. A rerun with
other settings (model, proposers, k_max, ...) is refused (see :mod:`specscope.tracing.settings`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from specscope import validate
from specscope.errors import SpecscopeError
from specscope.fileio import exclusive
from specscope.reading import read_jsonl
from specscope.methods import NAMES, method
from specscope.progress import LazyProgress
from specscope.engine.config import check_max_tokens, model_fingerprint
from specscope.engine.proposer_api import NGRAM_MAX_N, NGRAM_MIN_N
from specscope.trace.load import parse_record
from specscope.trace.schema import DRAFT_PROBS, TraceRecord
from specscope.tracing.settings import check_resume, requests_fingerprint, settings_path
from specscope.trees import TreeShape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProposerSpec:
    """``ngram`` or ``METHOD=DIR`` (draft model or head checkpoint) from the command line."""

    name: str
    path: Path | None = None

    @property
    def lookup(self) -> bool:
        """A lookup method of :data:`specscope.methods.METHODS` (n-gram), traced without a model;
        a plugin's proposer is a model proposer."""
        return self.name in NAMES and method(self.name).kind == "lookup"

    @classmethod
    def parse_list(cls, text: str) -> list["ProposerSpec"]:
        specs = []
        try:
            parts = validate.split_list(text)
        except validate.Invalid as error:
            raise SpecscopeError(f"--proposers: {error}") from None
        from specscope.proposers import PROPOSERS  # every method module, plugins' too

        for part in parts:
            name, _, path = part.partition("=")
            if name not in PROPOSERS:  # before any model is read (it was said as --method's, after)
                raise SpecscopeError(f"--proposers: {part!r}: unknown proposer {name!r} "
                                     f"(known: {', '.join(sorted(PROPOSERS))})")
            spec = cls(name, Path(path) if path else None)
            if not spec.lookup and not path:
                raise SpecscopeError(f"--proposers: {part!r}: expected METHOD=DIR for model proposers")
            if spec.lookup and path:  # it would be dropped unsaid
                raise SpecscopeError(f"--proposers: {part!r}: {name} looks tokens up and reads no checkpoint: give "
                                     f"{name} alone")
            if any(other.name == spec.name for other in specs):  # a record keeps one trace per name
                raise SpecscopeError(f"--proposers: {name!r} given twice; a record holds one trace per method")
            specs.append(spec)
        if not specs:
            raise SpecscopeError("--proposers: expected at least one proposer")
        return specs


def done_ids(path: Path, requests: Sequence, specs: Sequence[ProposerSpec], k_max: int,
             dataset: str | None) -> set[str]:
    """Ids of the complete records in ``path`` (a half-written last line is truncated), each one
    this run's settings make, or a one-line error: a record of no request of the workload, or
    with other proposers, k_max or dataset, was put there by another command since (`traces
    convert -o` the same file), which the settings file beside it cannot vouch for."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        log.warning("%s: dropping a half-written last line (it will be traced again)", path)
        with path.open("r+b") as handle:
            handle.truncate(keep)
    wanted, names, ids = {str(r.id) for r in requests}, sorted(spec.name for spec in specs), set()
    for record, _ in read_jsonl(path, parse_record):
        said = "no request of the workload its settings name" if record.id not in wanted else next(
            (f"its {what} {got!r}, where its settings say {want!r}" for what, got, want in (
                ("proposers", sorted(record.proposers), names), ("k_max", record.k_max, k_max),
                ("dataset", record.dataset, dataset)) if got != want), None)
        if said is not None:
            raise SpecscopeError(f"{path}: record {record.id!r} was not traced with this file's settings "
                                 f"({said}): another command wrote into it since; start over (`trace --overwrite`) "
                                 "or trace into another file")
        ids.add(record.id)
    return ids


def append_records(path: Path, records: Sequence[TraceRecord]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def trace_settings(model_dir: Path, specs: Sequence[ProposerSpec], requests: Sequence, k_max: int,
                   max_tokens: int, dataset: str | None, min_n: int, max_n: int, dtype: str,
                   trees: Sequence[TreeShape] = (), batch_size: int = 8, draft_probs: int = DRAFT_PROBS) -> dict:
    """What decides the records' content (see :mod:`specscope.tracing.settings`); ``trees`` only
    when some were requested and ``draft_probs`` (at most k_max) only when a model proposer keeps
    other than the default, the first :data:`~specscope.trace.schema.DRAFT_PROBS` (so traces taken
    without them resume as before)."""
    models = any(not spec.lookup for spec in specs)  # a lookup keeps no probabilities
    return ({"trees": [tree.name for tree in trees]} if trees else {}) | (
        {"draft_probs": draft_probs} if models and draft_probs != min(DRAFT_PROBS, k_max) else {}) | {
        "model": str(model_dir.resolve()),
        "model_files": model_fingerprint(model_dir),
        "proposers": [spec.name if spec.path is None else
                      f"{spec.name}={spec.path.resolve()} {model_fingerprint(spec.path)}" for spec in specs],
        "k_max": k_max,
        "max_tokens": max_tokens,
        "dtype": dtype,
        "dataset": dataset,
        "ngram_n": [min_n, max_n],
        "workload": requests_fingerprint(requests),
        "batch_size": batch_size,
    }


def tree_depth(specs: Sequence[ProposerSpec], trees: Sequence[TreeShape]) -> int:
    """The depth to record ``tree_rank`` to: the deepest requested tree (0: none). n-gram
    proposes no tree; asking for trees with no model proposer is an error."""
    if not trees:
        return 0
    if all(spec.lookup for spec in specs):
        raise SpecscopeError("--trees: n-gram proposes no tree; trees need a model proposer "
                             "(draft, eagle, eagle3, mtp)")
    return max(tree.depth for tree in trees)


@dataclass(frozen=True)
class TraceJob:
    """Everything that decides a batch's records, apart from its requests (picklable, so that
    :mod:`specscope.distributed` can ship it to workers)."""

    model_dir: Path
    specs: tuple[ProposerSpec, ...]
    k_max: int
    max_tokens: int
    batch_size: int
    dataset: str | None
    min_n: int
    max_n: int
    dtype: str
    device: str
    depth: int  # tree_rank depth (0: none)
    max_seq_len: int  # longest prompt still to trace + max_tokens
    draft_probs: int = DRAFT_PROBS  # drafts per position whose probability is kept


class Tracer:
    """One model replica: loads the target and its proposers once, then traces batch after batch."""

    def __init__(self, job: TraceJob) -> None:
        from specscope.engine.loading import (
            check_same_tokenizer,
            load_eos_token_ids,
            load_model,
            parse_dtype,
            resolve_device,
        )
        from specscope.engine.runner import Engine
        from specscope.proposers import ProposerConfig, create_proposer

        self.job = job
        for spec in job.specs:
            if spec.path is not None:
                check_same_tokenizer(job.model_dir, spec.path)
        self.target = load_model(job.model_dir, parse_dtype(job.dtype), resolve_device(job.device))
        eos = load_eos_token_ids(job.model_dir)
        self.generator = Engine(self.target, None, 1, job.batch_size, job.max_seq_len, eos)
        self.proposers = {
            spec.name: create_proposer(ProposerConfig(spec.name, job.k_max, job.batch_size,
                                                      Engine.cache_capacity(job.max_seq_len, job.k_max), spec.path),
                                       self.target)
            for spec in job.specs if not spec.lookup
        }

    def trace(self, chunk: Sequence) -> list[TraceRecord]:
        """The records of ``chunk`` (at most ``batch_size`` requests, traced together), in order."""
        import numpy as np

        from specscope.tracing.model import model_traces
        from specscope.tracing.ngram import ngram_trace

        job, target, proposers = self.job, self.target, self.proposers
        k_max, min_n, max_n, depth = job.k_max, job.min_n, job.max_n, job.depth
        outputs = self.generator.generate([(r.id, list(r.prompt_token_ids)) for r in chunk], job.max_tokens)
        prompts = [list(r.prompt_token_ids) for r in chunk]
        outs = [outputs[r.id] for r in chunk]
        traces: dict[str, list] = {}
        for spec in job.specs:
            if spec.lookup:
                traces[spec.name] = [ngram_trace(p, o, k_max, min_n, max_n) for p, o in zip(prompts, outs)]
            else:
                traces[spec.name] = model_traces(target, proposers[spec.name], prompts, outs, k_max, depth,
                                                 job.draft_probs)
        return [
            TraceRecord(r.id, np.asarray(p), np.asarray(o), {name: traces[name][i] for name in traces},
                        k_max=k_max, dataset=job.dataset)
            for i, (r, p, o) in enumerate(zip(chunk, prompts, outs))
        ]


BatchMapper = Callable[[TraceJob, list[Sequence]], Iterator[list[TraceRecord]]]
"""Traces batches and yields their records batch by batch, in the batches' order (e.g.
:func:`specscope.distributed.trace.ray_batch_mapper`)."""


def trace_here(job: TraceJob, chunks: list[Sequence]) -> Iterator[list[TraceRecord]]:
    """The default :data:`BatchMapper`: one model replica in this process."""
    tracer = Tracer(job)
    for chunk in chunks:
        yield tracer.trace(chunk)


@contextlib.contextmanager
def _unmade_if_empty(output: Path, made: list[Path]) -> Iterator[None]:
    """On a failure (a Ray cluster refused, an interrupt) before ``output`` holds a record, remove
    what of ``made`` this run created: the empty trace and its settings (a refused ``--ray`` run
    left both), and the folders made for them (deepest first)."""
    try:
        yield
    except BaseException:
        if output.is_file() and output.stat().st_size == 0:
            for path in made:
                if path.is_dir():
                    with contextlib.suppress(OSError):  # a folder something else was put into stays
                        path.rmdir()
                else:
                    path.unlink(missing_ok=True)
        raise


def trace_workload(model_dir: Path, specs: list[ProposerSpec], requests: Sequence, output: Path,
                   k_max: int = 20, max_tokens: int = 256, batch_size: int = 8, dataset: str | None = None,
                   min_n: int = NGRAM_MIN_N, max_n: int = NGRAM_MAX_N, dtype: str = "float32", device: str = "cpu",
                   overwrite: bool = False, trees: Sequence[TreeShape] = (),
                   map_batches: BatchMapper = trace_here, draft_probs: int = DRAFT_PROBS) -> int:
    """Trace ``requests`` (objects with ``id`` and ``prompt_token_ids``); returns records written.
    ``overwrite`` starts over instead of resuming (needed when the settings changed); ``trees``
    adds ``tree_rank`` to every model proposer, deep enough to replay each of them;
    ``draft_probs`` keeps the probability of that many drafts per position (past k_max: all k_max). Batches are
    formed here, in the workload's order, and ``map_batches`` traces them (this process is the
    only writer of ``output``), so a sharded run writes the same bytes as a local one."""
    depth = tree_depth(specs, trees)
    draft_probs = min(draft_probs, k_max)  # the default of 4 past a shallower k_max: all there are
    check_max_tokens(model_dir, requests, max_tokens)  # before anything is written
    settings = trace_settings(model_dir, specs, requests, k_max, max_tokens, dataset, min_n, max_n, dtype, trees,
                              batch_size, draft_probs)
    check_resume(output, settings, overwrite, dry_run=True)  # a refusal leaves nothing behind, not even the lock
    folders = [folder for folder in (output.parent, *output.parent.parents) if not folder.exists()]  # made here
    held = contextlib.ExitStack()  # the lock, then the cleanup of what a refused run made
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        made = [path for path in (output, settings_path(output)) if not path.exists()] + folders  # a refused run removes
        held.enter_context(exclusive(output, f"{output}: another trace is writing into it (both would write every "
                                             "record); wait for it to end, or trace into another file"))
    except OSError as error:  # a folder that cannot be made or written (read-only, /proc)
        raise SpecscopeError(f"{error.filename or output}: cannot write the trace there ({error.strerror})") from None
    with held:
        held.enter_context(_unmade_if_empty(output, made))
        start_over = check_resume(output, settings, overwrite)  # run once the first new records are ready
        finished = set() if start_over else done_ids(output, requests, specs, k_max, dataset)
        # batches fixed over the whole workload: a resume traces each unfinished one whole, as a run done whole
        # did (a draft's probability moves in its last bits with the batch it was traced in), keeping what is new
        pending = [chunk for chunk in batches(requests, batch_size) if any(str(r.id) not in finished for r in chunk)]
        todo = [r for chunk in pending for r in chunk if str(r.id) not in finished]
        if finished:
            log.info("%s: %d requests already traced, %d to go", output, len(finished), len(todo))
        if not todo:
            return 0
        max_seq_len = max(len(r.prompt_token_ids) for chunk in pending for r in chunk) + max_tokens
        batch_size = max(map(len, pending))  # the caches hold no more rows than a batch has requests
        # absolute paths: a worker elsewhere (Ray) finds the checkpoints whatever its working folder
        absolute = tuple(replace(spec, path=None if spec.path is None else spec.path.resolve()) for spec in specs)
        job = TraceJob(model_dir.resolve(), absolute, k_max, max_tokens, batch_size, dataset, min_n, max_n, dtype,
                       device, depth, max_seq_len, draft_probs)
        written = 0
        with LazyProgress("tracing requests", len(todo)) as bar:
            for records in map_batches(job, pending):
                new = [record for record in records if str(record.id) not in finished]
                if start_over:  # the old traces go only now, the models loaded and a batch traced
                    start_over()
                    start_over = None
                append_records(output, new)
                written += len(new)
                bar.advance(len(new))
        return written
