"""Read trace files in either supported format, validate them, and report what was repaired.

Two formats are auto-detected per line:

- specscope's own (``"schema": "specscope.trace/1"``, see :mod:`specscope.trace.schema`);
- SpecDecode-Bench (the paper's public traces): ``generated_token_ids`` plus one or more of
  ``acc_ngram``, ``acc_eagle``, ``acc_eagle_three`` or ``acc`` (or ``acc_<method>`` for any
  method specscope knows: ``acc_mtp``, ``acc_eagle3``, ``acc_suffix``), each ``{"acc_len": [...]}``.

Real files are messy: an ``acc_len`` array is sometimes a few entries longer or shorter than the
output. The record is then cut to the common prefix of the output and every proposer's arrays,
and :class:`LoadReport` counts the records and positions that touched, so nothing is dropped
silently.

Values: every ``acc_len`` entry is an integer in 1..k_max + 1 (k_max as recorded; when it is
not, at most :data:`specscope.validate.K_MAX_LIMIT` + 1), ``draft_len`` in 0..k_max, token ids
>= 0, ``tree_rank`` rows of one length in -1..TREE_RANK_CAP.
An ``acc_len`` of ``[]`` beside a non-empty output is an error; a record whose output is
empty is skipped (and counted) when its arrays are empty too, and an error otherwise.

Duplicate request ids (the same ``id`` twice in one dataset, within a file or across the files
read together): a repeat with the same content is dropped with a warning naming both lines; a
repeat with other content is refused naming both lines. A request is never counted twice.
"""

from __future__ import annotations

import difflib
import json
import logging
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from specscope import validate
from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text
from specscope.reading import first_line, read_jsonl
from specscope.methods import BENCH_DEFAULT, METHODS, NAMES, of_kind
from specscope.trace.fields import Fields
from specscope.trace.schema import SCHEMA_VERSION, TREE_RANK_CAP, ProposerTrace, TraceRecord

# SpecDecode-Bench field -> specscope proposer name.
SPECDECODE_BENCH_PROPOSERS = {
    "acc_ngram": "ngram",
    "acc_eagle": "eagle",
    "acc_eagle_three": "eagle3",
    "acc": BENCH_DEFAULT,
}


PROPOSER_FIELDS = ("acc_len", "draft_len", "draft_prob", "tree_rank")  # a proposer trace's, in either format
RECORD_FIELDS = ("schema", "id", "dataset", "k_max", "prompt_token_ids", "output_token_ids", "proposers")  # own format
BENCH_FIELDS = ("id", "dataset", "k_max", "prompt_token_ids", "generated_token_ids", *SPECDECODE_BENCH_PROPOSERS)
BENCH_METHODS = {f"acc_{m.name}": m.name for m in METHODS}  # acc_mtp, acc_eagle3, acc_suffix, …: the same layout
LOOKUPS = {m.name for m in of_kind("lookup")}  # proposers without a tree: their tree_rank is refused

log = logging.getLogger(__name__)

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
    dropped_positions: int = 0  # output positions cut to reach the common prefix
    surplus_entries: int = 0  # acc_len entries beyond the output's end, cut with them
    mismatches_by_proposer: dict[str, int] = field(default_factory=dict)
    mismatched_lengths: list[tuple[int, dict[str, int]]] = field(default_factory=list)  # such a record's output
    # and acc_len lengths as the file holds them: what a walk of some of its proposers replays
    empty_outputs: int = 0  # records with an empty output (and empty arrays), skipped
    duplicates: int = 0  # repeats of a request (same id and content), dropped
    named_by_file: bool = False  # some record took its dataset from the file's name (it has no "dataset")
    rank_disagreements: int = 0  # positions whose tree_rank gives another greedy chain than acc_len (kept)
    ignored_fields: dict[str, None] = field(default_factory=dict)  # SpecDecode-Bench fields not read, in order seen
    merged_with: str = ""  # an earlier file of the same name whose dataset its records joined (neither names one)

    def summary(self, walked: Sequence[str] = ()) -> str:
        """One line: the records read and how length mismatches were handled (``walked``: the
        proposers a walk of several replays together, over the positions the output and their
        acc_len arrays cover, whatever the file was read with)."""
        return self._lengths(walked) + "".join(
            f"; {count} {what}" for count, what in ((self.empty_outputs, "records with an empty output skipped"),
                                                   (self.duplicates, "duplicate records dropped"),
                                                   (self.rank_disagreements, RANKS_DISAGREE)) if count) + (
            f"; read as one dataset with {self.merged_with} (the same file name, no \"dataset\" in their records)"
            if self.merged_with else "")

    def _lengths(self, walked: Sequence[str] = ()) -> str:
        if not self.mismatched_records:
            return f"{self.path}: {self.records} records, no length mismatches"
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(self.mismatches_by_proposer.items()))
        if walked:
            total, replayed = self.walked_positions(walked)
            return (f"{self.path}: {self.mismatched_records} of {self.records} records had acc_len arrays of another "
                    f"length than the output ({detail}); the walk replays the positions the output and the acc_len "
                    f"arrays of {', '.join(walked)} cover: {replayed} of {total} output positions "
                    f"({replayed / total:.1%})")
        if self.lengths == "own":
            return (
                f"{self.path}: {self.mismatched_records} of {self.records} records had acc_len "
                f"arrays of another length than the output ({detail}); each proposer keeps its "
                "own length (G = len(acc_len))"
            )
        return (
            f"{self.path}: {self.mismatched_records} of {self.records} records had acc_len "
            f"arrays of another length than the output ({detail}); cut to the common prefix, "
            f"dropping {self.dropped_positions} output positions"
            + (f" and {self.surplus_entries} acc_len entries beyond the output" if self.surplus_entries else "")
        )

    def walked_positions(self, walked: Sequence[str]) -> tuple[int, int]:
        """(output positions the file's kept records hold, those a walk of the ``walked``
        proposers replays): each record's positions up to its shortest walked array, or the common
        prefix ``lengths="common"`` cut it to."""
        total = self.positions + self.dropped_positions
        if self.lengths == "common":
            return total, self.positions
        short = sum(output - min([output, *(length for name, length in lengths.items() if name in walked)])
                    for output, lengths in self.mismatched_lengths)
        return total, total - short


def _proposer(fields: Fields, name: str, obj: object, k_max: int | None, output_len: int) -> ProposerTrace:
    label = f"proposers.{name}" if fields.has("proposers") else name
    if not isinstance(obj, dict):
        raise fields.error(label, f"expected an object with 'acc_len', got {type(obj).__name__}")
    if "acc_len" not in obj:
        raise fields.error(f"{label}.acc_len", "missing")
    unknown = [key for key in obj if key not in PROPOSER_FIELDS]
    if unknown:  # a misspelt field's data would be dropped unsaid
        raise fields.error(f"{label}.{unknown[0]}", f"unknown field (expected {', '.join(PROPOSER_FIELDS)})")
    longest = validate.K_MAX_LIMIT if k_max is None else k_max
    note = f" (k_max = {k_max})" if k_max else f" (k_max not recorded; specscope's limit is {validate.K_MAX_LIMIT})"
    acc_len = fields.int_array(f"{label}.acc_len", obj["acc_len"], np.int32, low=1, high=longest + 1, note=note)
    if acc_len.size == 0 and output_len:
        raise fields.error(f"{label}.acc_len", f"empty, but the output has {output_len} tokens")
    if acc_len.size and not output_len:
        raise fields.error(f"{label}.acc_len", f"{acc_len.size} entries, but the output is empty")
    draft_len = None
    if obj.get("draft_len") is not None:
        draft_len = fields.int_array(f"{label}.draft_len", obj["draft_len"], np.int32, low=0, high=longest, note=note)
        if draft_len.shape != acc_len.shape:
            raise fields.error(f"{label}.draft_len", "expected the same length as acc_len")
        if np.any(acc_len > draft_len + 1):
            raise fields.error(f"{label}.draft_len", "expected acc_len <= draft_len + 1")
    draft_prob = None
    if obj.get("draft_prob") is not None:
        draft_prob = fields.float_matrix(f"{label}.draft_prob", obj["draft_prob"])
        if draft_prob.shape[0] != acc_len.shape[0]:
            raise fields.error(f"{label}.draft_prob", "expected one row per acc_len entry")
        known = draft_prob[~np.isnan(draft_prob)]
        if known.size and not ((known >= 0) & (known <= 1)).all():
            bad = known[~((known >= 0) & (known <= 1))][0]
            raise fields.error(f"{label}.draft_prob", f"expected probabilities in [0, 1] or null, got {bad:g}")
    tree_rank = None
    if obj.get("tree_rank") is not None:
        tree_rank = fields.int_matrix(f"{label}.tree_rank", obj["tree_rank"], np.int16, low=-1, high=TREE_RANK_CAP)
        if tree_rank.shape[0] != acc_len.shape[0]:
            raise fields.error(f"{label}.tree_rank", "expected one row per acc_len entry")
        if name in LOOKUPS:
            raise fields.error(f"{label}.tree_rank", f"{name} drafts by lookup and proposes no tree: expected "
                                                     "tree_rank of model proposers only")
    return ProposerTrace(acc_len=acc_len, draft_len=draft_len, draft_prob=draft_prob, tree_rank=tree_rank)


def parse_record(obj: object, path: object, line: int) -> tuple[TraceRecord, str]:
    """Decode one JSON object of either format; returns the record and the format's name."""
    fields = Fields(obj, path, line)
    if fields.has("schema"):
        if fields.obj["schema"] != SCHEMA_VERSION:
            raise fields.error("schema", f"expected {SCHEMA_VERSION!r}, got {fields.obj['schema']!r}")
        output_field, fmt = "output_token_ids", "specscope"
        raw = fields.get("proposers")
        if not isinstance(raw, dict) or not raw:
            raise fields.error("proposers", "expected a non-empty object of proposer traces")
        unknown = [key for key in fields.obj if key not in RECORD_FIELDS]
        if unknown:  # a misspelt field (k_mx) would be dropped unsaid
            raise fields.error(unknown[0], f"unknown field (expected {', '.join(RECORD_FIELDS)})")
        unknown = [key for key in raw if key not in NAMES and key != BENCH_DEFAULT]
        if unknown:  # a misspelt proposer (eagel) would be read, then left out of every priced table
            near = difflib.get_close_matches(unknown[0], NAMES, n=1)
            raise fields.error(f"proposers.{unknown[0]}", f"unknown proposer (expected one of {', '.join(NAMES)}, or "
                               f"{BENCH_DEFAULT}" + (f"; did you mean {near[0]!r}?" if near else "")
                               + "): rename it in the file (no command reads a record it holds)")
    elif fields.has("generated_token_ids"):
        output_field, fmt = "generated_token_ids", "specdecode-bench"
        raw = {key: fields.obj[key] for key in fields.obj if bench_proposer(key)}
        unknown = [key for key, value in fields.obj.items() if not bench_proposer(key)
                   and (key.startswith("acc") or isinstance(value, dict) and "acc_len" in value)]
        if unknown:  # a proposer under another name would be dropped unsaid
            raise fields.error(unknown[0], f"unknown proposer (expected {', '.join(SPECDECODE_BENCH_PROPOSERS)} or "
                                           "acc_METHOD for a method specscope knows)")
        for key in bench_extras(fields.obj):  # a misspelt field (datset, k_mx) would be dropped unsaid
            near = difflib.get_close_matches(key, [f for f in BENCH_FIELDS if f not in fields.obj], n=1, cutoff=0.75)
            if near:
                raise fields.error(key, f"unknown field (did you mean {near[0]!r}?)")
        if not raw:
            raise fields.error(
                "acc_ngram", "missing: expected at least one of " + ", ".join(SPECDECODE_BENCH_PROPOSERS)
            )
    else:  # a record with SpecDecode-Bench's acc fields is missing that format's output field
        bench = any(bench_proposer(key) for key in fields.obj)
        raise fields.error(
            "generated_token_ids" if bench else "output_token_ids",
            f"missing: expected a {SCHEMA_VERSION} record or a SpecDecode-Bench record (generated_token_ids)",
        )
    k_max = fields.integer("k_max", optional=True, minimum=1, maximum=validate.K_MAX_LIMIT)
    output = fields.int_array(output_field, low=0)
    proposers = {bench_proposer(key) if fmt == "specdecode-bench" else key: _proposer(fields, key, value, k_max, output.size)
                 for key, value in raw.items()}
    if len(proposers) < len(raw):  # acc_eagle_three beside acc_eagle3: one proposer twice
        raise fields.error("acc_eagle_three", "one proposer under two fields (acc_eagle_three is acc_eagle3)")
    prompt = fields.int_array("prompt_token_ids", low=0)
    if not prompt.size:  # a request starts from at least one token: its prefill emits the first output token
        raise fields.error("prompt_token_ids", "expected at least one token, got []")
    record = TraceRecord(
        id=fields.text("id"),
        prompt_token_ids=prompt,
        output_token_ids=output,
        proposers=proposers,
        k_max=k_max,
        dataset=fields.text("dataset", optional=True),
    )
    return record, fmt


def bench_proposer(key: str) -> str | None:
    """The proposer a SpecDecode-Bench field holds (:data:`SPECDECODE_BENCH_PROPOSERS`, or
    ``acc_<method>`` for any method specscope knows); None for another field."""
    return SPECDECODE_BENCH_PROPOSERS.get(key) or BENCH_METHODS.get(key)


def bench_extras(obj: dict) -> list[str]:
    """The fields of a SpecDecode-Bench record specscope does not read (its files may carry more
    than the paper's: they are said once per file, and a near-miss of a known one is refused)."""
    return [key for key in obj if key not in BENCH_FIELDS and not bench_proposer(key)] \
        if "generated_token_ids" in obj and "schema" not in obj else []


def _align(record: TraceRecord, mode: str) -> tuple[TraceRecord, list[str], tuple[int, int]]:
    """With ``lengths="common"`` the record cut to the common prefix of its output and proposer
    arrays, with ``"own"`` every array whole; and the proposers whose arrays differ in length from
    the output, and what was cut: output positions, and acc_len entries beyond the output's end
    (for :func:`_count_alignment`, once the record is kept)."""
    mismatched = record.uneven
    if not mismatched or mode == "own":
        return record, mismatched, (0, 0)
    lengths = [len(trace.acc_len) for trace in record.proposers.values()]
    common = min(record.output_len, *lengths)
    beyond = sum(max(0, length - record.output_len) for length in lengths)  # every array's entries past the output
    return record.truncated(common), mismatched, (record.output_len - common, beyond)


def _count_alignment(report: LoadReport, read: TraceRecord, mismatched: list[str], cut: tuple[int, int]) -> None:
    """Count a kept record's length mismatches (:func:`_align`; ``read``: the record as the file
    holds it) in ``report``."""
    report.mismatched_records += bool(mismatched)
    if mismatched:
        report.mismatched_lengths.append(
            (read.output_len, {name: len(trace.acc_len) for name, trace in read.proposers.items()}))
    for name in mismatched:
        report.mismatches_by_proposer[name] = report.mismatches_by_proposer.get(name, 0) + 1
    report.dropped_positions += cut[0]
    report.surplus_entries += cut[1]


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a pipe such as ``<(...)``'s ``/dev/fd/63``)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def iter_file(path: str | Path, report: LoadReport | None = None, lengths: str = "common",
              seen: dict[tuple[str, str], tuple[str, TraceRecord]] | None = None,
              whole: list[TraceRecord] | None = None) -> Iterator[TraceRecord]:
    """Stream the records of one JSON Lines file (blank lines are skipped); a file without
    records is an error.

    ``lengths``: "common" cuts each record to the common prefix of all its arrays (every
    proposer then aligns with the output position by position); "own" keeps each proposer's
    array whole, as the paper's simulator did (G of a proposer = len(acc_len)). ``seen`` maps
    (dataset, id) to the location and record (as read, before any cut) of requests already read
    (share it across files read together); repeats are handled as the module docstring says.
    ``whole``: a list that gets each record yielded as the file holds it, every array whole (the
    ``"own"`` reading of the same read: a stream is read once)."""
    path = Path(path)
    report = report if report is not None else LoadReport(str(path), lengths)
    seen = {} if seen is None else seen
    repeats: list[str] = []
    parsed = read_jsonl(path, lambda obj, where, line: (*parse_record(obj, where, line), line, bench_extras(obj)))
    for record, fmt, line_number, extras in parsed:
        report.ignored_fields.update(dict.fromkeys(extras))
        if report.format and report.format != fmt:
            report.format = "mixed"
        elif not report.format:
            report.format = fmt
        if record.dataset is None:
            record.dataset = path.stem
            if not report.named_by_file and not _regular(path):
                log.warning("%s is no regular file (a pipe?): its records have no \"dataset\", so they are named "
                            "%r after it; give them a dataset field to name them", path, path.stem)
            report.named_by_file = True
        location = f"{path}:{line_number}"
        if record.output_len == 0:
            report.empty_outputs += 1
            continue
        read = record  # as the file holds it: a repeat is compared so, whatever --lengths cuts
        record, mismatched, cut = _align(record, lengths)
        if record.output_len == 0:
            raise SpecscopeError(f"{location}: empty output after aligning acc_len arrays")
        key = (record.dataset, record.id)
        if key in seen:
            first, earlier = seen[key]
            if not same_record(earlier, read):
                raise SpecscopeError(f"{location}: field 'id': request {record.id!r} of dataset "
                                     f"{record.dataset!r} is already at {first} with other content")
            repeats.append(f"{location}: request {record.id!r} repeats {first} with the same content")
            report.duplicates += 1
            continue
        seen[key] = (location, read)
        if whole is not None:
            whole.append(read)
        _count_alignment(report, read, mismatched, cut)  # of the records kept: a repeat dropped counts nowhere
        report.rank_disagreements += rank_disagreements(record)
        report.records += 1
        report.positions += record.output_len
        yield record
    if report.empty_outputs:
        log.warning("%s: %d records with an empty output skipped", path, report.empty_outputs)
    if report.rank_disagreements:
        log.warning("%s: %d positions %s", path, report.rank_disagreements, RANKS_DISAGREE)
    if report.ignored_fields:
        log.warning("%s: field%s %s of its SpecDecode-Bench records not read (specscope reads %s)", path,
                    "s" * (len(report.ignored_fields) > 1), ", ".join(report.ignored_fields), ", ".join(BENCH_FIELDS))
    if repeats:
        more = f" ({len(repeats)} duplicates in all)" if len(repeats) > 1 else ""
        log.warning("%s: dropped%s", repeats[0], more)
    if report.records == 0 and not report.duplicates:
        raise SpecscopeError(f"{path}: no trace records found")


RANKS_DISAGREE = ("where tree_rank gives another greedy chain than acc_len (1 + its leading zero ranks, up to k_max): "
                  "its tree results are not those of the drafts it traced")


def rank_disagreements(record: TraceRecord) -> int:
    """Positions where a proposer's ``tree_rank`` and its ``acc_len`` tell different greedy
    chains: min(acc_len, d + 1) ≠ 1 + the leading zero ranks of the first d depths, d the depth
    both reach (``k_max`` and the ranks'). A tracer writes both from one greedy rollout; a
    disagreement is a corrupted or mismatched file, or a near tie the two rollouts broke apart."""
    count = 0
    for trace in record.proposers.values():
        if trace.tree_rank is None or not trace.tree_rank.shape[1]:
            continue
        depth = min(trace.tree_rank.shape[1], record.k_max or trace.tree_rank.shape[1])
        leading = 1 + np.cumprod(trace.tree_rank[:, :depth] == 0, axis=1).sum(axis=1)
        count += int(np.count_nonzero(np.minimum(trace.acc_len, depth + 1) != leading))
    return count


def holds_traces(path: Path) -> bool:
    """Whether the first line of ``path`` that is not blank is a trace record (either format)."""
    try:  # leniently: a trace whose first record is broken is read, and refused where it breaks
        record = json.loads((first_line(path) or (0, b""))[1])
    except (OSError, ValueError, RecursionError):  # a folder, an unreadable file, no JSON
        return False
    return isinstance(record, dict) and (record.get("schema") == SCHEMA_VERSION or "generated_token_ids" in record)


def same_record(a: TraceRecord, b: TraceRecord) -> bool:
    """Whether two records hold the same request, outputs and traces (NaN equals NaN)."""
    def equal(x: np.ndarray | None, y: np.ndarray | None) -> bool:
        if x is None or y is None:
            return x is y
        return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))

    return (a.id == b.id and a.k_max == b.k_max and a.dataset == b.dataset
            and equal(a.prompt_token_ids, b.prompt_token_ids) and equal(a.output_token_ids, b.output_token_ids)
            and a.proposers.keys() == b.proposers.keys()
            and all(equal(p.acc_len, q.acc_len) and equal(p.draft_len, q.draft_len) and equal(p.draft_prob, q.draft_prob)
                    and equal(p.tree_rank, q.tree_rank)
                    for p, q in ((a.proposers[n], b.proposers[n]) for n in a.proposers)))


def load_traces(paths: Iterable[str | Path], lengths: str = "common", whole: list[TraceRecord] | None = None
                ) -> tuple[list[TraceRecord], list[LoadReport]]:
    """Read every file; returns all records (in file order) and one report per file. A
    request repeated across the files is handled as within one (see the module docstring).
    ``whole``: a list that also gets every record with its arrays whole (see :func:`iter_file`)."""
    records: list[TraceRecord] = []
    reports: list[LoadReport] = []
    seen: dict[tuple[str, str], tuple[str, TraceRecord]] = {}
    named: dict[str, Path] = {}  # dataset → the file whose name gave it
    for path in paths:
        report = LoadReport(str(path), lengths)
        records.extend(iter_file(path, report, lengths, seen, whole))
        reports.append(report)
        stem = Path(path).stem
        if report.named_by_file and named.setdefault(stem, Path(path)) != Path(path):
            report.merged_with = str(named[stem])
            log.warning("%s and %s both name dataset %r (their records have no \"dataset\"): read as one dataset; "
                        "rename one file, or give its records a dataset field, to keep them apart", named[stem], path,
                        stem)
    return records, reports


def write_traces(path: str | Path, records: Iterable[TraceRecord]) -> int:
    """Write records in specscope's format (atomically, see :func:`specscope.fileio.atomic_write_text`)."""
    lines = [json.dumps(record.to_json(), separators=(",", ":")) + "\n" for record in records]
    atomic_write_text(Path(path), "".join(lines))
    return len(lines)
