"""Read trace files in either supported format, validate them, and report what was repaired.

Two formats are auto-detected per line:

- specscope's own (``"schema": "specscope.trace/1"``, see :mod:`specscope.trace.schema`);
- SpecDecode-Bench (the paper's public traces): ``generated_token_ids`` plus one or more of
  ``acc_ngram``, ``acc_eagle``, ``acc_eagle_three`` or ``acc``, each ``{"acc_len": [...]}``.

Real files are messy: an ``acc_len`` array is sometimes a few entries longer or shorter than the
output. The record is then cut to the common prefix of the output and every proposer's arrays,
and :class:`LoadReport` counts the records and positions that touched, so nothing is dropped
silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text
from specscope.trace.fields import Fields
from specscope.trace.schema import SCHEMA_VERSION, ProposerTrace, TraceRecord

# SpecDecode-Bench field -> specscope proposer name.
SPECDECODE_BENCH_PROPOSERS = {
    "acc_ngram": "ngram",
    "acc_eagle": "eagle",
    "acc_eagle_three": "eagle3",
    "acc": "default",
}


LENGTHS = ("common", "own")  # how acc_len arrays of another length than the output are handled


@dataclass
class LoadReport:
    """What reading one file found: sizes, format, and the length repairs it made."""

    path: str
    lengths: str = "common"  # how mismatches were handled: "common" prefix or each array's "own"
    format: str = ""
    records: int = 0
    positions: int = 0
    mismatched_records: int = 0  # records whose arrays differed in length
    dropped_positions: int = 0  # positions cut to reach the common prefix
    mismatches_by_proposer: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        if not self.mismatched_records:
            return f"{self.path}: {self.records} records, no length mismatches"
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(self.mismatches_by_proposer.items()))
        if self.lengths == "own":
            return (
                f"{self.path}: {self.mismatched_records} of {self.records} records had acc_len "
                f"arrays of another length than the output ({detail}); each proposer keeps its "
                "own length (G = len(acc_len))"
            )
        return (
            f"{self.path}: {self.mismatched_records} of {self.records} records had acc_len "
            f"arrays of another length than the output ({detail}); cut to the common prefix, "
            f"dropping {self.dropped_positions} positions"
        )


def _proposer(fields: Fields, name: str, obj: object, k_max: int | None) -> ProposerTrace:
    label = f"proposers.{name}" if fields.has("proposers") else name
    if not isinstance(obj, dict):
        raise fields.error(label, f"expected an object with 'acc_len', got {type(obj).__name__}")
    if "acc_len" not in obj:
        raise fields.error(f"{label}.acc_len", "missing")
    acc_len = fields.int_array(f"{label}.acc_len", obj["acc_len"], dtype=np.int32)
    if acc_len.size and acc_len.min() < 1:
        position = int(np.argmin(acc_len))
        raise fields.error(
            f"{label}.acc_len", f"expected values >= 1, got {acc_len[position]} at position {position}"
        )
    if k_max is not None and acc_len.size and acc_len.max() > k_max + 1:
        position = int(np.argmax(acc_len))
        raise fields.error(
            f"{label}.acc_len",
            f"expected values <= k_max + 1 = {k_max + 1}, got {acc_len[position]} at position {position}",
        )
    draft_len = None
    if obj.get("draft_len") is not None:
        draft_len = fields.int_array(f"{label}.draft_len", obj["draft_len"], dtype=np.int32)
        if draft_len.shape != acc_len.shape:
            raise fields.error(f"{label}.draft_len", "expected the same length as acc_len")
        if draft_len.size and (draft_len.min() < 0 or np.any(acc_len > draft_len + 1)):
            raise fields.error(f"{label}.draft_len", "expected 0 <= draft_len and acc_len <= draft_len + 1")
    draft_prob = None
    if obj.get("draft_prob") is not None:
        draft_prob = fields.float_matrix(f"{label}.draft_prob", obj["draft_prob"])
        if draft_prob.shape[0] != acc_len.shape[0]:
            raise fields.error(f"{label}.draft_prob", "expected one row per acc_len entry")
    return ProposerTrace(acc_len=acc_len, draft_len=draft_len, draft_prob=draft_prob)


def parse_record(obj: object, path: object, line: int) -> tuple[TraceRecord, str]:
    """Decode one JSON object of either format; returns the record and the format's name."""
    fields = Fields(obj, path, line)
    if fields.has("schema"):
        if fields.obj["schema"] != SCHEMA_VERSION:
            raise fields.error("schema", f"expected {SCHEMA_VERSION!r}, got {fields.obj['schema']!r}")
        k_max = fields.integer("k_max", optional=True, minimum=1)
        raw = fields.get("proposers")
        if not isinstance(raw, dict) or not raw:
            raise fields.error("proposers", "expected a non-empty object of proposer traces")
        proposers = {name: _proposer(fields, name, value, k_max) for name, value in raw.items()}
        output = fields.int_array("output_token_ids")
        fmt = "specscope"
    elif fields.has("generated_token_ids"):
        k_max = fields.integer("k_max", optional=True, minimum=1)
        present = [key for key in SPECDECODE_BENCH_PROPOSERS if fields.has(key)]
        if not present:
            raise fields.error(
                "acc_ngram", "missing: expected at least one of " + ", ".join(SPECDECODE_BENCH_PROPOSERS)
            )
        proposers = {
            SPECDECODE_BENCH_PROPOSERS[key]: _proposer(fields, key, fields.obj[key], k_max)
            for key in present
        }
        output = fields.int_array("generated_token_ids")
        fmt = "specdecode-bench"
    else:
        raise fields.error(
            "output_token_ids",
            f"missing: expected a {SCHEMA_VERSION} record or a SpecDecode-Bench record (generated_token_ids)",
        )
    if output.size == 0:
        raise fields.error("output_token_ids" if fmt == "specscope" else "generated_token_ids", "empty output")
    record = TraceRecord(
        id=fields.text("id"),
        prompt_token_ids=fields.int_array("prompt_token_ids"),
        output_token_ids=output,
        proposers=proposers,
        k_max=k_max,
        dataset=fields.text("dataset", optional=True),
    )
    return record, fmt


def _align(record: TraceRecord, report: LoadReport, mode: str) -> TraceRecord:
    """Count length mismatches; with ``lengths="common"`` cut the record to the common prefix
    of its output and proposer arrays, with ``"own"`` keep every array whole."""
    lengths = {name: trace.acc_len.shape[0] for name, trace in record.proposers.items()}
    common = min([record.output_len, *lengths.values()])
    longest = max([record.output_len, *lengths.values()])
    if common == longest:
        return record
    report.mismatched_records += 1
    for name, length in lengths.items():
        if length != record.output_len:
            report.mismatches_by_proposer[name] = report.mismatches_by_proposer.get(name, 0) + 1
    if mode == "own":
        return record
    report.dropped_positions += longest - common
    record.output_token_ids = record.output_token_ids[:common]
    record.proposers = {name: trace.truncated(common) for name, trace in record.proposers.items()}
    return record


def iter_file(path: str | Path, report: LoadReport | None = None, lengths: str = "common"
              ) -> Iterator[TraceRecord]:
    """Stream the records of one JSON Lines file (blank lines are skipped).

    ``lengths``: "common" cuts each record to the common prefix of all its arrays (every
    proposer then aligns with the output position by position); "own" keeps each proposer's
    array whole, as the paper's simulator did (G of a proposer = len(acc_len))."""
    path = Path(path)
    report = report if report is not None else LoadReport(str(path), lengths)
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot read ({error.strerror})") from None
    with handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                raise SpecscopeError(f"{path}:{line_number}: invalid JSON ({error.msg}, column {error.colno})") from None
            record, fmt = parse_record(obj, path, line_number)
            if report.format and report.format != fmt:
                report.format = "mixed"
            elif not report.format:
                report.format = fmt
            if record.dataset is None:
                record.dataset = path.stem
            record = _align(record, report, lengths)
            if record.output_len == 0:
                raise SpecscopeError(f"{path}:{line_number}: empty output after aligning acc_len arrays")
            report.records += 1
            report.positions += record.output_len
            yield record


def load_traces(paths: Iterable[str | Path], lengths: str = "common"
                ) -> tuple[list[TraceRecord], list[LoadReport]]:
    """Read every file; returns all records (in file order) and one report per file."""
    records: list[TraceRecord] = []
    reports: list[LoadReport] = []
    for path in paths:
        report = LoadReport(str(path), lengths)
        records.extend(iter_file(path, report, lengths))
        if report.records == 0:
            raise SpecscopeError(f"{path}: no trace records found")
        reports.append(report)
    return records, reports


def write_traces(path: str | Path, records: Iterable[TraceRecord]) -> int:
    """Write records in specscope's format (atomically, see :func:`specscope.fileio.atomic_write_text`)."""
    lines = [json.dumps(record.to_json(), separators=(",", ":")) + "\n" for record in records]
    atomic_write_text(Path(path), "".join(lines))
    return len(lines)
