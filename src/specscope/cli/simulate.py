"""`specscope simulate`: replay traces against a cost model under proposal-length policies."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

from specscope import validate
from specscope.cli._common import (
    add_table_output,
    add_trace_options,
    batch_size_list,
    print_table,
    read_trace_args,
    trace_provenance,
    str_list,
    to_stdout,
    write_rows,
)
from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.sim.grid import SimConfig, simulated_batch_sizes
from specscope.sim.policies import POLICIES, bare_paired, parse_policies
from specscope.fileio import json_text
from specscope.errors import SpecscopeError

DEFAULTS = SimConfig()
DEFAULT_POLICIES = ("fixed:1", "fixed:3", "fixed:5", "oracle")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate", help="predict SD speedup per policy and batch size from traces",
        description="Replay per-position acceptance traces against a cost model. "
                    "--mode paper reproduces the paper's method (B copies of one request); "
                    "--mode mixed (default) decodes B distinct requests with continuous batching. "
                    "tree:SHAPE replays a static token tree (e.g. tree:2x2x1) from traces taken with "
                    "`specscope trace --trees`: nodes + 1 tokens verified per sequence, depth drafter passes.",
    )
    add_trace_options(parser)
    parser.add_argument("--acc", type=str_list, default=None,
                        help="proposers whose traces to replay; 'combined' for oracle-combined (default: every "
                             "proposer the traces hold that the cost model prices, the others named in a note; in a "
                             "dataset where some records lack one, its cells are left out, said in a note)")
    parser.add_argument("--policies", type=policy_list, default=None,
                        help="fixed:k, adaptive, oracle, oracle-combined:A+B, oracle-switch:A+B (its drafting "
                             "charged), tree:SHAPE (a static tree such as tree:2x2x1, replayed from traces taken "
                             "with `trace --trees`), confidence:p[:k] (a model drafter drafts until its own "
                             "probability of a draft falls below p, that draft included, at most k: read from the "
                             "traces' draft_prob), learned:FILE (a `policy fit` file; a comma in FILE is "
                             "kept where what follows it names no policy); a bare oracle-combined or oracle-switch "
                             "pairs, per dataset, the lookup with the model proposer whose oracle emits the most "
                             "tokens per step, among those the cost model prices that every record holds "
                             f"(default: {','.join(DEFAULT_POLICIES)}, a fixed k deeper than a dataset's traces "
                             "left out there with a note; a named one is refused)")
    parser.add_argument("--batch-sizes", type=batch_size_list, default=None,
                        help="default " + ",".join(map(str, DEFAULTS.batch_sizes)) + " (in mixed mode, those "
                             "above a dataset's request count are left out with a warning; given ones "
                             "above it are refused)")
    parser.add_argument("--cost-model", default=DEFAULT_COST_MODEL,
                        help="preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    parser.add_argument("--mode", choices=("paper", "mixed"), default=DEFAULTS.mode,
                        help="paper: B copies of one request; mixed: B distinct requests, continuously batched")
    parser.add_argument("--seed", type=validate.arg(validate.seed), default=DEFAULTS.seed,
                        help="draws paper mode's requests and n-gram's guessed no-match steps")
    parser.add_argument("--sample", type=validate.arg(validate.integer, low=1), default=None,
                        help="requests drawn per dataset (default: 300 in paper mode, all in mixed mode)")
    parser.add_argument("--match-prob", type=validate.arg(validate.probability), default=None,
                        help="n-gram match probability where acc_len = 1 and the trace has no draft_len "
                             "(default: the paper's per-dataset guess)")
    parser.add_argument("--no-guess", action="store_true",
                        help="never guess n-gram no-match: without draft_len every step proposes")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="json: every cell on standard output")
    add_table_output(parser, "every cell")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.analysis.acceptance import proposer_names
    from specscope.costmodel.linear import LinearCostModel
    from specscope.costmodel.registry import cost_label, priced, resolve_cost_model, unpriced_note
    from specscope.sim.grid import (COMBINED, OPTIMISTIC, adaptive_notes, by_pair, capacity_notes, dataset_pairs,
                                    length_notes, no_match_notes, pair_notes, sample_notes, simulate)
    from specscope.trace.schema import by_dataset
    from specscope.sim.observe import offer_notes
    from specscope.sim.policies import learned_notes

    if args.no_guess and args.match_prob is not None:
        raise SpecscopeError("--match-prob: --no-guess never guesses n-gram's no-match; give one of the two")
    defaulted = args.policies is None  # a default fixed k deeper than a dataset's traces is left out, not refused
    args.policies = list(DEFAULT_POLICIES) if defaulted else args.policies
    cost = resolve_cost_model(args.cost_model)
    records = read_trace_args(args)
    names = proposer_names(records)
    accs, unpriced = (args.acc, []) if args.acc else priced(cost, names)  # named ones unpriced: refused below
    if not accs:
        raise SpecscopeError(f"cost model {cost_label(args.cost_model, cost)!r} prices the drafting of none of the "
                             f"proposers the traces hold ({', '.join(names)}): give --cost-model one that does")
    unheld = [name for name in accs if name != COMBINED and name not in names]
    if unheld:
        raise SpecscopeError(f"--acc: no record holds {', '.join(unheld)} (the traces hold {', '.join(names)})")
    named = [name for name in accs if name != COMBINED]
    bare = bare_paired(args.policies)
    # A bare pair: the two --acc names, as given; else per dataset, among the proposers named (else
    # every one held) the cost model prices
    if bare and args.acc and len(named) == 2:
        pairs = {dataset: (tuple(named), "the two proposers --acc names") for dataset in by_dataset(records)}
    else:
        pairs = dataset_pairs(records, cost, named if len(named) >= 2 else names) if bare else {}
    groups = by_pair(records, pairs) if bare else {None: records}
    if bare and list(groups) == [None]:
        raise SpecscopeError(f"{' and '.join(bare)} without a pair: "
                             + "; ".join(f"dataset {d!r}: {why}" if len(pairs) > 1 else why
                                         for d, (_, why) in pairs.items())
                             + f" — name one: {bare[0]}:A+B")
    config = SimConfig(
        mode=args.mode, batch_sizes=tuple(args.batch_sizes or DEFAULTS.batch_sizes), seed=args.seed,
        sample=args.sample, match_prob=args.match_prob, guess_no_match=not args.no_guess,
        oversize="skip" if args.batch_sizes is None else "refuse",
    )
    runs = []  # (its records, its config, its proposers, its policies): one per pair of datasets sharing it
    lengths: list[str] = []  # each run's policies' notes on the positions they replay, its pair named
    for pair, members in groups.items():
        policies = [p for p in args.policies if pair is not None or p.strip() not in bare]
        mine = [a for a in accs if a != COMBINED or pair is not None or not bare]  # a dataset without its pair
        if not policies or not mine:  # a dataset with no pair, asked for nothing but it: said in pair_notes
            continue
        lengths += length_notes(members, [f"{p.strip()}:{'+'.join(pair)}" if pair and p.strip() in bare else p
                                          for p in policies])
        for policy in parse_policies(policies, pair):
            unheld = [name for name in policy.combined or policy.switch or () if name not in names]
            if unheld:
                raise SpecscopeError(f"policy {policy.name!r}: no record holds {', '.join(unheld)} (the traces "
                                     f"hold {', '.join(names)})")
        runs.append((members, replace(config, combined=pair), mine, policies))
    lacking: list[str] = []  # a dataset some of whose records lack a proposer: its cells left out, said
    rows = [row for members, setting, mine, policies in runs
            for row in simulate(members, mine, policies, cost, setting, lacking=lacking,
                                missing=lacking if defaulted else None)]
    order = list(by_dataset(records))
    rows.sort(key=lambda row: order.index(row.dataset))  # the datasets' order, whichever pair each replayed
    if not rows:
        raise SpecscopeError("no cell to simulate: " + "; ".join(lacking))
    label = cost_label(args.cost_model, cost)
    settings = {"cost_model": label, "seed": config.seed, "sample": config.sample,  # a row's own match_prob: its guess
                "guess_no_match": config.guess_no_match, **trace_provenance(args)}
    cells = [{**row.flat(), **settings} for row in rows]
    chains = [row.deepest_k for row in rows if not row.policy.startswith("tree:")]  # a tree's nodes are no chain's k
    simulated = simulated_batch_sizes(rows)
    past = cost.beyond_measured(chains, simulated, accs) if isinstance(cost, LinearCostModel) else None
    trees = cost.trees_from_chains([row.acc for row in rows if row.policy.startswith("tree:")]) \
        if isinstance(cost, LinearCostModel) else None
    notes = [*(f"{unpriced_note(name, label)} (--acc names what to replay)" for name in unpriced),
             *lacking, *pair_notes(pairs, args.policies), *sample_notes(records, config),
             *no_match_notes(records, accs, config), *dict.fromkeys(lengths),
             *adaptive_notes(records, accs, args.policies), *([past] if past else []), *([trees] if trees else []),
             *learned_notes(args.policies, cost, simulated), *capacity_notes(rows, cost),
             *(offer_notes(records) if any(p.startswith("learned:") for p in args.policies) else [])]
    if any(row.policy.startswith("oracle-combined") for row in rows):  # only beside such a cell
        notes.append(OPTIMISTIC)
    if args.output and not (to_stdout(args.output) and args.format == "json"):  # - with json: the JSON below
        write_rows(args.output, cells)
    out = sys.stderr if to_stdout(args.output) or args.format == "json" else sys.stdout  # stdout holding the cells
    for note in notes:
        print(f"note: {note}", file=out)
    if args.format == "json":
        sys.stdout.write(json_text(cells))
    sizes = sorted({row.batch_size for row in rows}, key=config.batch_sizes.index)
    show_speedups(rows, sizes, f"predicted speedup ({args.mode} mode, cost model {label})", file=out)
    if args.mode == "mixed" and max(sizes) > 1:
        show_speedups(rows, sizes, "steady-state speedup (only iterations with a full batch: "
                                              "no ramp-up, no drain of the longest requests)", "steady_speedup", out)
        never = sorted({row.batch_size for row in rows if math.isnan(row.steady_speedup)})
        if never:
            print(f"note: steady-state speedup nan at B={','.join(map(str, never))}: no iteration had every slot "
                  "decoding there (requests ended before the batch filled, or a one-token output held a slot for "
                  "its prefill alone)", file=out)
    if args.output and not to_stdout(args.output):
        print(f"wrote {len(rows)} cell{'s' * (len(rows) != 1)} to {args.output}", file=out)
    return 0


def policy_list(text: str) -> list[str]:
    """``--policies``: :func:`str_list`, a ``learned:FILE`` whose path holds a comma kept whole
    (``learned:runs/a,b.json``): a part that names no policy joins the ``learned:`` before it."""
    joined: list[str] = []
    for part in str_list(text):
        if joined and joined[-1].startswith("learned:") and part.split(":", 1)[0] not in POLICIES:
            joined[-1] += "," + part
        else:
            joined.append(part)
    return joined


def show_speedups(rows, batch_sizes: list[int], title: str, metric: str = "speedup", file=None) -> None:
    """One line per dataset × acc × policy, one column per batch size (to ``file``, default stdout)."""
    lines: dict[tuple[str, str, str], dict[int, float]] = {}
    for row in rows:
        lines.setdefault((row.dataset, row.acc, row.policy), {})[row.batch_size] = getattr(row, metric)
    print_table(
        title,
        ["dataset", "acc", "policy", *[f"B={b}" for b in batch_sizes]],
        [[*key, *[f"{values[b]:.2f}" if b in values else None for b in batch_sizes]] for key, values in lines.items()],
        file=file,
    )
