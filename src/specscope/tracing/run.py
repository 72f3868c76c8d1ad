"""Collect traces for a workload: greedy outputs once, then every proposer teacher-forced.

Resumable per request: records are appended to the output file (flushed and fsynced) as each
batch finishes; a rerun reads the ids already there and traces only the rest. A trailing line
left half-written by a killed run is dropped (it is redone), never silently kept. A rerun with
other settings (model, proposers, k_max, ...) is refused (see :mod:`specscope.tracing.settings`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from specscope.errors import SpecscopeError
from specscope.progress import LazyProgress
from specscope.engine.proposer_api import NGRAM_MAX_N, NGRAM_MIN_N
from specscope.trace.load import parse_record
from specscope.trace.schema import TraceRecord
from specscope.tracing.settings import check_resume, model_fingerprint, requests_fingerprint
from specscope.trees import TreeShape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProposerSpec:
    """``ngram`` or ``METHOD=DIR`` (draft model or head checkpoint) from the command line."""

    name: str
    path: Path | None = None

    @classmethod
    def parse_list(cls, text: str) -> list["ProposerSpec"]:
        specs = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            name, _, path = part.partition("=")
            if name != "ngram" and not path:
                raise SpecscopeError(f"--proposers: {part!r}: expected METHOD=DIR for model proposers")
            specs.append(cls(name, Path(path) if path else None))
        if not specs:
            raise SpecscopeError("--proposers: expected at least one proposer")
        return specs


def done_ids(path: Path) -> set[str]:
    """Ids of complete records in ``path``; truncates a half-written last line."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        log.warning("%s: dropping a half-written last line (it will be traced again)", path)
        with path.open("r+b") as handle:
            handle.truncate(keep)
    ids = set()
    for number, line in enumerate(data[:keep].split(b"\n"), start=1):
        if line.strip():
            try:
                record, _ = parse_record(json.loads(line.decode("utf-8")), path, number)
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise SpecscopeError(f"{path}:{number}: not a JSON trace record; not a trace file to resume") from None
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
                   trees: Sequence[TreeShape] = ()) -> dict:
    """What decides the records' content (see :mod:`specscope.tracing.settings`); ``trees`` only
    when some were requested (so traces taken without them resume as before)."""
    return ({"trees": [tree.name for tree in trees]} if trees else {}) | {
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
    }


def tree_depth(specs: Sequence[ProposerSpec], trees: Sequence[TreeShape]) -> int:
    """The depth to record ``tree_rank`` to: the deepest requested tree (0: none). n-gram
    proposes no tree; asking for trees with no model proposer is an error."""
    if not trees:
        return 0
    if all(spec.name == "ngram" for spec in specs):
        raise SpecscopeError("--trees: n-gram proposes no tree; trees need a model proposer "
                             "(draft, eagle, eagle3, mtp)")
    return max(tree.depth for tree in trees)


def trace_workload(model_dir: Path, specs: list[ProposerSpec], requests: Sequence, output: Path,
                   k_max: int = 20, max_tokens: int = 256, batch_size: int = 8, dataset: str | None = None,
                   min_n: int = NGRAM_MIN_N, max_n: int = NGRAM_MAX_N, dtype: str = "float32", device: str = "cpu",
                   overwrite: bool = False, trees: Sequence[TreeShape] = ()) -> int:
    """Trace ``requests`` (objects with ``id`` and ``prompt_token_ids``); returns records written.
    ``overwrite`` starts over instead of resuming (needed when the settings changed); ``trees``
    adds ``tree_rank`` to every model proposer, deep enough to replay each of them."""
    import numpy as np

    from specscope.engine.loading import load_eos_token_ids, load_model, parse_dtype, resolve_device
    from specscope.engine.runner import Engine
    from specscope.proposers import ProposerConfig, create_proposer
    from specscope.tracing.model import model_traces
    from specscope.tracing.ngram import ngram_trace

    depth = tree_depth(specs, trees)
    if depth and any(spec.name == "ngram" for spec in specs):
        log.warning("--trees: n-gram proposes no tree; its records get no tree_rank")
    output.parent.mkdir(parents=True, exist_ok=True)
    settings = trace_settings(model_dir, specs, requests, k_max, max_tokens, dataset, min_n, max_n, dtype, trees)
    check_resume(output, settings, overwrite)
    finished = done_ids(output)
    todo = [r for r in requests if r.id not in finished]
    if finished:
        log.info("%s: %d requests already traced, %d to go", output, len(finished), len(todo))
    if not todo:
        return 0
    target = load_model(model_dir, parse_dtype(dtype), resolve_device(device))
    max_seq_len = max(len(r.prompt_token_ids) for r in todo) + max_tokens
    generator = Engine(target, None, 1, batch_size, max_seq_len, load_eos_token_ids(model_dir))
    proposers = {
        spec.name: create_proposer(ProposerConfig(spec.name, k_max, batch_size,
                                                  Engine.cache_capacity(max_seq_len, k_max), spec.path), target)
        for spec in specs if spec.name != "ngram"
    }
    written = 0
    with LazyProgress("tracing requests", len(todo)) as bar:
        for chunk in batches(todo, batch_size):
            outputs = generator.generate([(r.id, list(r.prompt_token_ids)) for r in chunk], max_tokens)
            prompts = [list(r.prompt_token_ids) for r in chunk]
            outs = [outputs[r.id] for r in chunk]
            traces: dict[str, list] = {}
            for spec in specs:
                if spec.name == "ngram":
                    traces["ngram"] = [ngram_trace(p, o, k_max, min_n, max_n) for p, o in zip(prompts, outs)]
                else:
                    traces[spec.name] = model_traces(target, proposers[spec.name], prompts, outs, k_max, depth)
            records = [
                TraceRecord(r.id, np.asarray(p), np.asarray(o), {name: traces[name][i] for name in traces},
                            k_max=k_max, dataset=dataset)
                for i, (r, p, o) in enumerate(zip(chunk, prompts, outs))
            ]
            append_records(output, records)
            written += len(records)
            bar.advance(len(chunk))
    return written
