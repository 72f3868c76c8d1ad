"""`specscope stats`: acceptance statistics per dataset × proposer, and head-to-head shares."""

from __future__ import annotations

import argparse

from specscope.cli._common import (add_table_output, add_trace_options, human_stream, print_table, read_trace_args,
                                    trace_provenance, write_rows)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stats", help="acceptance statistics per dataset × proposer",
        description="Per dataset × proposer: requests, positions; mean/median/std/p5/p95 of the "
                    "per-request mean acc_len and of acc_len pooled over positions; mean prompt and "
                    "output length. Per proposer pair: the share of positions where each emits more. "
                    "Records are cut to the common length of their arrays by default (--lengths common).",
    )
    add_trace_options(parser, lengths="common")
    add_table_output(parser, "the per-proposer rows")
    add_table_output(parser, "the per-pair rows", "--pairs-output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.analysis.acceptance import acceptance_stats

    out = human_stream(args.output, args.pairs_output)
    records = read_trace_args(args)
    singles, pairs = acceptance_stats(records)
    print_table(
        "acc_len per request (mean of each request's acc_len, then over requests) and pooled over positions",
        ["dataset", "proposer", "requests", "positions", "mean", "median", "std", "p5", "p95",
         "pooled mean", "pooled median", "pooled std", "mean prompt", "mean output read"],
        [[s.dataset, s.proposer, s.requests, s.positions, s.request_mean, s.request_median, s.request_std,
          s.request_p5, s.request_p95, s.position_mean, s.position_median, s.position_std,
          f"{s.mean_prompt_len:.1f}", f"{s.mean_output_read:.1f}"] for s in singles],
        file=out,
    )
    if pairs:
        print_table(
            "head to head: share of common positions where each proposer emits more",
            ["dataset", "a", "b", "positions", "a > b", "b > a", "ties"],
            [[p.dataset, p.a, p.b, p.positions, *(None if v is None else f"{v:.1%}" for v in (p.a_beats_b, p.b_beats_a, p.ties))]
             for p in pairs],
            file=out,
        )
    made = trace_provenance(args) if args.output or args.pairs_output else {}  # they move with the traces, --lengths
    if args.output:
        write_rows(args.output, [{**s.flat(), **made} for s in singles])
        print(f"wrote {len(singles)} rows to {args.output}", file=out)
    if args.pairs_output:
        write_rows(args.pairs_output, [{**p.flat(), **made} for p in pairs])
        print(f"wrote {len(pairs)} rows to {args.pairs_output}", file=out)
    return 0
