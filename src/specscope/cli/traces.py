"""`specscope traces inspect|convert`: look into trace files, or rewrite them in specscope's schema."""

from __future__ import annotations

import argparse
import sys

from pathlib import Path
from typing import Sequence

import numpy as np

from specscope import validate
from specscope.cli._common import add_trace_options, print_table, refuse_clashes, to_stdout
from specscope.fileio import check_jsonl_output, json_text
from specscope.errors import SpecscopeError
from specscope.trace.schema import TraceRecord
from specscope.trees import TreeShape, parse_tree_list


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("traces", help="inspect or convert acceptance trace files")
    verbs = parser.add_subparsers(dest="traces_verb", metavar="ACTION", required=True)
    inspect = verbs.add_parser("inspect", help="requests, positions, proposers, k_max, length mismatches")
    inspect.add_argument("traces", nargs="+", metavar="TRACE")
    inspect.add_argument("--format", choices=("table", "json"), default="table", help="json: the summary on standard output")
    inspect.add_argument("--trees", type=validate.arg(parse_tree_list), default=(),
                         help="static trees whose mean acc_len to show (default: those the trace was taken "
                              "with, from its settings file)")
    inspect.set_defaults(run=run_inspect)
    convert = verbs.add_parser("convert", help="rewrite traces (any supported format) in specscope's schema "
                                               "(draft_prob to 6 decimals)")
    add_trace_options(convert, lengths="own")  # a faithful copy by default: every array whole
    convert.add_argument("-o", "--output", required=True, type=check_jsonl_output,
                         help="output JSON Lines file (- for standard output)")
    convert.add_argument("--k-max", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT),
                         default=None, help="k_max to record when the input has none (at least the "
                                            "deepest draft seen: the largest draft_len and acc_len − 1)")
    convert.add_argument("--rename", type=renaming, action="append", default=[], metavar="OLD=NEW",
                         help="name a proposer after its method (repeatable), e.g. default=mtp: a SpecDecode-Bench "
                              "file's single 'acc' field reads as proposer 'default', which no cost model prices")
    convert.set_defaults(run=run_convert)


def renaming(text: str) -> tuple[str, str]:
    """``OLD=NEW`` (argparse type): two proposer names, NEW a known method."""
    from specscope.methods import method

    old, sep, new = text.partition("=")
    if not sep or not old.strip() or not new.strip():
        raise argparse.ArgumentTypeError(f"expected OLD=NEW, got {text!r}")
    try:
        method(new.strip())
    except SpecscopeError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return old.strip(), new.strip()


def tree_means(records: list, trees: Sequence[TreeShape]) -> dict[str, dict[str, float | None]]:
    """Per proposer with ``tree_rank``: each tree's mean acc_len over all positions (None when
    the tree is deeper than the ranks recorded)."""
    out: dict[str, dict[str, float | None]] = {}
    for name in sorted({n for r in records for n, t in r.proposers.items() if t.tree_rank is not None}):
        ranks = [r.proposers[name].tree_rank for r in records if name in r.proposers
                 and r.proposers[name].tree_rank is not None]
        depth = min(rank.shape[1] for rank in ranks)
        pooled = np.concatenate([rank[:, :depth] for rank in ranks])
        out[name] = {tree.name: float(tree.acc_len(pooled).mean()) if tree.depth <= depth else None for tree in trees}
    return out


def _settings_trees(path: Path) -> list[TreeShape]:
    """The trees ``path`` was traced with (its settings file); a settings file that does not read
    names none, said on stderr: the trace itself is what is inspected."""
    from specscope.tracing.settings import requested_trees

    try:
        return [TreeShape.parse(t) for t in requested_trees(path)]
    except SpecscopeError as error:
        print(f"warning: {error}; its trees are not summarised", file=sys.stderr)
        return []


def inspect_file(path: str, trees: Sequence[TreeShape] = ()) -> dict:
    """Summary of one trace file (with arrays kept whole, so mismatches are counted, not cut);
    ``trees`` default to those in the file's settings (``trace --trees``)."""
    from specscope.trace.load import LoadReport, iter_file

    report = LoadReport(path, "own")
    records = list(iter_file(path, report, lengths="own"))
    proposers = sorted({name for r in records for name in r.proposers})
    declared = {r.k_max for r in records if r.k_max is not None}
    undeclared = sum(r.k_max is None for r in records)
    observed = max(int(t.acc_len.max()) for r in records for t in r.proposers.values()) - 1
    return {
        "file": path,
        "format": report.format,
        "requests": report.records,
        "positions": int(sum(r.output_len for r in records)),
        "proposers": proposers,
        "k_max": min(declared) if declared and not undeclared else None,  # the depth every record was traced to
        "k_max_declared": sorted(declared),
        "k_max_missing": undeclared,
        "max_accepted": observed,
        "draft_len": sorted({n for r in records for n, t in r.proposers.items() if t.draft_len is not None}),
        "draft_len_records": {n: [sum(r.proposers[n].draft_len is not None for r in records if n in r.proposers),
                                  sum(n in r.proposers for r in records)] for n in proposers},  # [with it, holding]
        "draft_prob_depths": {n: sorted({r.proposers[n].draft_prob.shape[1] for r in records
                                         if n in r.proposers and r.proposers[n].draft_prob is not None})
                              for n in proposers},  # drafts whose probability each proposer's records keep
        "mismatched_records": report.mismatched_records,
        "mismatches_by_proposer": report.mismatches_by_proposer,
        "mean_prompt_len": float(np.mean([r.prompt_len for r in records])),
        "mean_output_len": float(np.mean([r.output_len for r in records])),
        "datasets": sorted({r.dataset for r in records}, key=lambda d: (d is None, d or "")),
        "tree_mean_acc_len": tree_means(records, trees or _settings_trees(Path(path))),
    }


def _k_max_text(summary: dict) -> str:
    """The k_max cell of an inspected file: its k_max, or what is known where records lack it."""
    if summary["k_max"] is not None and len(summary["k_max_declared"]) > 1:
        return (f"{summary['k_max']} (its records were traced to {', '.join(map(str, summary['k_max_declared']))}: "
                "a replay goes no deeper than the shallowest)")
    if summary["k_max"] is not None:
        return str(summary["k_max"])
    seen = f"max accepted drafts seen: {summary['max_accepted']}"
    if not summary["k_max_declared"]:
        return f"not recorded ({seen})"
    declared = ", ".join(map(str, summary["k_max_declared"]))
    return f"not recorded in {summary['k_max_missing']} of {summary['requests']} records (others: {declared}; {seen})"


def run_inspect(args: argparse.Namespace) -> int:
    summaries = [inspect_file(path, args.trees) for path in args.traces]
    if args.format == "json":
        sys.stdout.write(json_text(summaries))
        return 0
    for s in summaries:
        mismatch = ", ".join(f"{k} {v}" for k, v in s["mismatches_by_proposer"].items()) or "none"
        print_table(s["file"], ["property", "value"], [
            ["format", s["format"]],
            ["requests", str(s["requests"])],
            ["output positions", str(s["positions"])],
            ["proposers", ", ".join(name + ("" if holding == s["requests"] else f" (in {holding} of the records)")
                                   for name, (_, holding) in s["draft_len_records"].items())],
            ["k_max", _k_max_text(s)],
            ["datasets", ", ".join(d or "– (none named)" for d in s["datasets"])],
            ["draft_len recorded for", ", ".join(
                name + ("" if have == holding else f" ({have} of its {holding} records)")
                for name, (have, holding) in s["draft_len_records"].items() if have) or "none"],
            ["draft_prob kept for", ", ".join(
                f"{name} ({' or '.join(map(str, depths))} drafts{', records differ' if len(depths) > 1 else ''})"
                for name, depths in s["draft_prob_depths"].items() if depths) or "none"],
            ["acc_len length ≠ output", f"{s['mismatched_records']} records ({mismatch})"],
            ["mean prompt length", f"{s['mean_prompt_len']:.1f}"],
            ["mean output length", f"{s['mean_output_len']:.1f}"],
            *[[f"tree {tree} mean acc_len ({name})", "deeper than tree_rank" if mean is None else f"{mean:.3f}"]
              for name, means in s["tree_mean_acc_len"].items() for tree, mean in means.items()],
            *([["trees", "no proposer recorded tree_rank (trace with --trees)"]]
              if args.trees and not s["tree_mean_acc_len"] else []),
        ])
    return 0


def _traced_to(record: TraceRecord, k_max: int) -> None:
    """``record`` labelled as traced to ``k_max`` (``--k-max``), refused where the reader would
    refuse it as convert writes it — the reader's own check
    (:func:`~specscope.trace.load.parse_record`) — naming the record and its deepest draft."""
    from specscope.trace.load import parse_record

    record.k_max = k_max
    try:
        parse_record(record.to_json(), f"request {record.id!r} of dataset {record.dataset!r}", None)
    except SpecscopeError as error:
        depth, field = _deepest(record)
        deeper = f"; it holds drafts {depth} deep ({field}): expected --k-max {depth} or more" if depth > k_max else ""
        raise SpecscopeError(f"--k-max {k_max}: {error}{deeper}") from None


def _deepest(record: TraceRecord) -> tuple[int, str]:
    """The deepest draft ``record``'s proposers recorded, and the entry that says so: an acc_len of
    k + 1, or a draft_len of k."""
    found = []
    for name, trace in record.proposers.items():
        if trace.acc_len.size:
            found.append((int(trace.acc_len.max()) - 1, f"{name} acc_len {int(trace.acc_len.max())}"))
        if trace.draft_len is not None and trace.draft_len.size:
            found.append((int(trace.draft_len.max()), f"{name} draft_len {int(trace.draft_len.max())}"))
    return max(found, default=(0, "no entries"))


def run_convert(args: argparse.Namespace) -> int:
    from specscope.trace import load_traces
    from specscope.trace.load import LOOKUPS, write_traces
    from specscope.tracing.settings import forget_settings

    refuse_clashes({"-o": args.output}, args.traces)
    records, reports = load_traces(args.traces, lengths=args.lengths)
    renames = dict(args.rename)
    twice = next((old for i, (old, _) in enumerate(args.rename) if old in dict(args.rename[:i])), None)
    if twice is not None:
        raise SpecscopeError(f"--rename: {twice!r} renamed twice ({', '.join(f'{o}={n}' for o, n in args.rename if o == twice)})")
    for old in renames:
        if not any(old in r.proposers for r in records):
            raise SpecscopeError(f"--rename {old}={renames[old]}: no record holds proposer {old!r}")
    for record in records:
        named = [renames.get(name, name) for name in record.proposers]  # a swap (a=b, b=a) is fine
        clash = validate.first_repeat(named)
        if clash is not None:
            raise SpecscopeError(f"--rename: request {record.id!r} would hold proposer {clash!r} twice")
        record.proposers = {renames.get(name, name): trace for name, trace in record.proposers.items()}
        treed = next((name for name, trace in record.proposers.items() if name in LOOKUPS and trace.tree_rank is not None),
                     None)
        if treed is not None:  # the reader refuses it: a file it wrote must read back
            old = next(o for o, n in renames.items() if n == treed)
            raise SpecscopeError(f"--rename {old}={treed}: request {record.id!r} holds a tree_rank for {old!r}, and "
                                 f"{treed} drafts by lookup and proposes no tree")
        if record.k_max is None and args.k_max is not None:
            _traced_to(record, args.k_max)
    count = write_traces(args.output, records)
    if not to_stdout(args.output):
        forget_settings(args.output)
    notes = sys.stderr if to_stdout(args.output) else sys.stdout
    for report in reports:  # on stderr when the records go to stdout
        print(report.summary(), file=notes)
    declared = [r for r in records if r.k_max is not None and r.k_max != args.k_max]
    if args.k_max is not None and declared:
        print(f"note: --k-max {args.k_max} applied to the records without one; {len(declared)} of {len(records)} "
              f"declare their own (e.g. request {declared[0].id!r}: k_max = {declared[0].k_max}), kept", file=notes)
    if not to_stdout(args.output):
        print(f"wrote {count} records to {args.output}")
    return 0
