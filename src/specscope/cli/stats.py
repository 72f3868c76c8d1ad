"""`specscope stats`: acceptance statistics per dataset × proposer, and head-to-head shares."""

from __future__ import annotations

import argparse
from pathlib import Path

from specscope.cli._common import add_trace_options, print_table, read_trace_args, write_rows


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stats", help="acceptance statistics per dataset × proposer",
        description="Per dataset × proposer: requests, positions; mean/median/std/p5/p95 of the "
                    "per-request mean acc_len and of acc_len pooled over positions; mean prompt and "
                    "output length. Per proposer pair: the share of positions where each emits more. "
                    "Records are cut to the common length of their arrays by default (--lengths common).",
    )
    add_trace_options(parser, lengths="common")
    parser.add_argument("-o", "--output", help="write the per-proposer rows to a .csv or .json file")
    parser.add_argument("--pairs-output", help="write the per-pair rows to a .csv or .json file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.analysis.acceptance import acceptance_stats

    records = read_trace_args(args)
    singles, pairs = acceptance_stats(records)
    print_table(
        "acc_len per request (mean of each request's acc_len, then over requests) and pooled over positions",
        ["dataset", "proposer", "requests", "positions", "mean", "median", "std", "p5", "p95",
         "pooled mean", "pooled median", "pooled std", "mean prompt", "mean output"],
        [[s.dataset, s.proposer, s.requests, s.positions, s.request_mean, s.request_median, s.request_std,
          s.request_p5, s.request_p95, s.position_mean, s.position_median, s.position_std,
          f"{s.mean_prompt_len:.1f}", f"{s.mean_output_len:.1f}"] for s in singles],
    )
    if pairs:
        print_table(
            "head to head: share of common positions where each proposer emits more",
            ["dataset", "a", "b", "positions", "a > b", "b > a", "ties"],
            [[p.dataset, p.a, p.b, p.positions, f"{p.a_beats_b:.1%}", f"{p.b_beats_a:.1%}", f"{p.ties:.1%}"]
             for p in pairs],
        )
    if args.output:
        write_rows(Path(args.output), [s.flat() for s in singles])
        print(f"wrote {len(singles)} rows to {args.output}")
    if args.pairs_output:
        write_rows(Path(args.pairs_output), [p.flat() for p in pairs])
        print(f"wrote {len(pairs)} rows to {args.pairs_output}")
    return 0
