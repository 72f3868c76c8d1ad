"""`specscope bound`: the closed-form speedup table and the best k."""

from __future__ import annotations

import argparse

import numpy as np

from specscope import validate
from specscope.cli._common import note_mismatches, print_table
from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.errors import SpecscopeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bound", help="closed-form E[speedup] = (1 − α^(k+1)) / ((1 − α)(k·c + 1)) and its best k",
        description="Give --alpha and --c directly, or traces (α estimated per proposer) and a cost "
                    "model (c estimated at --batch-size and --context).",
    )
    parser.add_argument("traces", nargs="*", metavar="TRACE")
    parser.add_argument("--acc", default=None, help="proposer to estimate α for (default: every one in the traces)")
    parser.add_argument("--alpha", type=validate.arg(validate.number, low=0.0, high=1.0, high_open=True),
                        default=None, help="the i.i.d. model's per-token acceptance probability α in [0, 1) (a "
                                           "measured accepted/proposed rate at k is lower: (α − α^(k+1)) / ((1 − α)·k))")
    parser.add_argument("--c", type=validate.arg(validate.number, low=0.0), default=None,
                        help="draft/target forward time ratio c (>= 0)")
    parser.add_argument("--cost-model", default=DEFAULT_COST_MODEL,
                        help="what prices c at each k with traces: preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    parser.add_argument("--batch-size", type=validate.arg(validate.integer, low=1, high=validate.MAX_BATCH_SIZE),
                        default=1, help="running requests c is priced at")
    parser.add_argument("--context", type=validate.arg(validate.number, low=0.0, high=validate.MAX_CONTEXT),
                        default=None,
                        help="cached tokens per request for c (default: mean prompt + half the mean output)")
    k_range = validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT)
    parser.add_argument("--k", type=k_range, default=3, help="k at which c is measured (default 3)")
    parser.add_argument("--k-max", type=k_range, default=10,
                        help=f"largest k in the table (at most {validate.K_MAX_LIMIT})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.analysis.acceptance import by_dataset
    from specscope.analysis.bound_points import NO_ALPHA, traced_alpha, unoffered_note
    from specscope.theory.bound import c_by_k, estimate_c, expected_speedup, optimal_k

    cases: list[tuple[str, float, float, int, np.ndarray | None]] = []  # proposer, α, c at --k, the deepest k its
    # row shows, and c at each k from the cost model (None: one c given for all)
    source = "α and c given"
    at_trace_depth: set[str] = set()  # rows whose traces end at the table's last k
    if args.traces and args.alpha is not None and args.c is not None:  # the rows would carry the traces' names only
        raise SpecscopeError("TRACES: not used with both --alpha and --c (the traces give α, the cost model c); "
                             "give traces, or both numbers")
    if args.c is not None:  # c given: nothing is priced
        unused = [flag for flag, value, default in (("--cost-model", args.cost_model, DEFAULT_COST_MODEL),
                                                    ("--batch-size", args.batch_size, 1), ("--context", args.context, None),
                                                    ("--k", args.k, 3), *([] if args.traces else [("--acc", args.acc, None)]))
                  if value != default]
        if unused:
            raise SpecscopeError(f"{unused[0]}: not used with --c (it prices c" + ("" if args.traces else
                                 " or picks α from traces") + ")")
    if args.traces:
        from specscope.costmodel.linear import LinearCostModel
        from specscope.costmodel.registry import cost_label, resolve_cost_model
        from specscope.trace import load_traces

        records, reports = load_traces(args.traces, lengths="own")
        note_mismatches(reports)
        cost = resolve_cost_model(args.cost_model) if args.c is None else None
        held = sorted({name for r in records for name in r.proposers})
        names = [args.acc] if args.acc else held
        contexts, left_out = [], []  # per row shown: the context its c was priced at; why others are not
        for name in names:
            if not any(name in r.proposers for r in records):
                raise SpecscopeError(f"--acc: proposer {name!r} is in no trace record (they hold {', '.join(held)})")
        groups = by_dataset(records)  # α is a dataset's: one row per dataset × proposer, as the report's bound.csv
        for dataset, members in groups.items():
            for name in names:
                label = name if len(groups) == 1 else f"{dataset} · {name}"
                holding = [r for r in members if name in r.proposers]
                if not holding:
                    continue
                if args.c is None and not args.acc:  # every proposer held: one the cost model cannot price is left out
                    try:
                        cost.drafting_for(name)
                    except SpecscopeError as error:
                        left_out.append(f"{label}: {error}")
                        print(f"note: {label} left out: {error}")
                        continue
                depth = args.k_max
                alpha = args.alpha
                if alpha is None:  # α from proposals no longer than its records' k_max: beyond, the i.i.d. law alone
                    alpha, traced = traced_alpha(holding, name)
                    if np.isnan(alpha):
                        left_out.append(f"{label}: no α ({NO_ALPHA}; give --alpha)")
                        print(f"note: {label}: no α: {NO_ALPHA}")
                        continue
                    if len(holding) < len(members):
                        print(f"note: {label}: α from the {len(holding)} of {len(members)} records that hold it")
                    unoffered = unoffered_note(holding, name)
                    if unoffered:
                        print(f"note: {label}: {unoffered}")
                    depth = min(depth, traced)
                    if traced <= args.k_max:  # the traces, not the table, end it: a larger --k-max shows no more
                        at_trace_depth.add(label)
                    if depth < args.k_max:
                        declared = [r.k_max for r in holding if r.k_max is not None]
                        how = f"k_max = {depth}" if declared and min(declared) == depth else \
                            f"k_max = {depth}, inferred from the longest acc_len seen (some records declare none)"
                        print(f"note: {label}: k above {depth} not shown: its α was measured on proposals of at "
                              f"most {how}")
                context = args.context if args.context is not None else \
                    float(np.mean([r.prompt_len + r.output_len / 2 for r in holding]))  # of the requests its α is of
                if args.c is None:
                    cases.append((label, alpha, estimate_c(cost, name, args.k, args.batch_size, context), depth,
                                  c_by_k(cost, name, depth, args.batch_size, context)))
                else:
                    cases.append((label, alpha, args.c, depth, None))
                contexts.append(context)
        if not cases:
            raise SpecscopeError("no proposer left to bound: " + "; ".join(left_out))
        if isinstance(cost, LinearCostModel):  # c priced at each k shown: a fitted model's lines past its steps said
            past = cost.beyond_measured([max(args.k, *(depth for *_, depth, _ in cases))], [args.batch_size], names)
            if past:
                print(f"note: {past}")
        shown = f"context {contexts[0]:g}" if len(set(contexts)) == 1 else \
            "context each row's records' mean prompt + half output (" + \
            ", ".join(f"{name} {context:g}" for (name, *_), context in zip(cases, contexts)) + ")"
        source = ", ".join(filter(None, [
            "α given" if args.alpha is not None else "α from the traces (the i.i.d. rate that fits their acc_len "
            "best, not a policy's accepted/proposed)",
            "c given" if args.c is not None else f"c from cost model {cost_label(args.cost_model, cost)} at each "
                                               f"k (column c: at k = {args.k}), B = {args.batch_size}, {shown}"]))
    elif args.alpha is not None and args.c is not None:
        cases.append(("given", args.alpha, args.c, args.k_max, None))
    else:
        raise SpecscopeError("give traces, or both --alpha and --c")
    ks = np.arange(1, max(depth for *_, depth, _ in cases) + 1)
    print_table(
        f"closed-form E[speedup] (i.i.d. acceptance, α per draft; {source}; best k: 0 = run without SD)",
        ["proposer", "α", "c", *[f"k={k}" for k in ks], "best k", "best"],
        [[label, f"{alpha:.3f}", f"{c + 0.0:.4g}",
          *[f"{v:.2f}" for v in expected_speedup(alpha, ks[:depth], c if curve is None else curve)],
          *["–"] * (len(ks) - depth),
          *best_k(alpha, c if curve is None else curve, depth)] for label, alpha, c, depth, curve in cases],
    )
    edge = [label for label, alpha, c, depth, curve in cases if label not in at_trace_depth
            and depth == args.k_max and optimal_k(alpha, c if curve is None else curve, depth)[0] == depth]
    if edge:
        print(f"note: {', '.join(edge)}: the best k is the largest shown ({args.k_max}); the bound may keep rising past "
              "it (--k-max)")
    return 0


def best_k(alpha: float, c: float | np.ndarray, k_max: int) -> list[str]:
    """The table's last two cells: the best k among those it shows (0 … ``k_max``, ``c`` one ratio
    or c(k) for k = 1 … ``k_max``) and its speedup."""
    from specscope.theory.bound import optimal_k

    k, speedup = optimal_k(alpha, c, k_max)
    return [str(k), f"{speedup:.2f}"]
