"""`specscope report`: the whole study as one self-contained HTML page, PNG figures and CSV tables."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from specscope import validate
from specscope.cli._common import check_output_dir, batch_size_list, int_list, str_list
from specscope.errors import SpecscopeError
from specscope.report.config import ReportConfig
from specscope.sim.grid import SimConfig
from specscope.trees import parse_tree_list

DEFAULTS = ReportConfig()


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="write an HTML report with every figure of the study, and the tables as CSV",
        description="Analyse traces (acceptance statistics, position profiles, prompt/output overlap), "
                    "simulate every proposer × policy × batch size, and write DIR/index.html (one "
                    "self-contained file), one PNG per figure and one CSV per table.",
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (JSON Lines)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", type=check_output_dir,
                        help="output directory (made if missing)")
    parser.add_argument("--cost-model", default=DEFAULTS.cost_model,
                        help=f"preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file (default {DEFAULTS.cost_model})")
    parser.add_argument("--batch-sizes", type=batch_size_list, default=list(DEFAULTS.sim.batch_sizes),
                        help="default " + ",".join(map(str, DEFAULTS.sim.batch_sizes)))
    parser.add_argument("--mode", choices=("paper", "mixed"), default=DEFAULTS.sim.mode,
                        help=f"simulator mode (default {DEFAULTS.sim.mode})")
    parser.add_argument("--ks", type=int_list, default=list(DEFAULTS.ks),
                        help="fixed:k policies searched for the best one (default "
                             + ",".join(map(str, DEFAULTS.ks)) + ")")
    parser.add_argument("--figure-policies", type=str_list, default=None,
                        help="policies drawn in the speedup figure, among fixed:k of --ks, adaptive and oracle "
                             "(default " + ",".join(DEFAULTS.figure_policies) + ", those simulated)")
    parser.add_argument("--steps", action="append", default=list(DEFAULTS.steps), metavar="FILE",
                        help="measured per-step records (JSON Lines) for the time-split figure; repeatable")
    parser.add_argument("--measured", action="append", default=[], metavar="FILE",
                        help="`specscope bench` JSON results: measured speedups (the measured figure) and the "
                             "measured winner per workload and batch size; repeatable")
    parser.add_argument("--trees", type=validate.arg(parse_tree_list), default=None,
                        help="static trees set against the chain of their depth when the traces carry "
                             "tree_rank (default: the trees the traces were taken with, from their settings "
                             "files; else " + ",".join(DEFAULTS.trees) + ")")
    parser.add_argument("--seed", type=validate.arg(validate.seed), default=DEFAULTS.sim.seed,
                        help="draws paper mode's requests and n-gram's guessed no-match steps")
    parser.add_argument("--policy", default=None, metavar="FILE", type=policy_file,
                        help="a learned policy (`specscope policy fit`): judged against fixed policies and "
                             "oracle-switch on these traces, with its choices along a few outputs")
    parser.set_defaults(run=run)


def policy_file(path: str) -> str:
    """``path`` if it holds a readable policy (argparse type: refused before any work)."""
    from specscope.policy.learned import load_policy

    load_policy(path)
    return path


def traced_trees(traces: list[str]) -> tuple[str, ...]:
    """The trees the traces were taken with (``trace --trees``, kept in their settings files), in
    order, each once; :data:`DEFAULTS`' where none names any."""
    from specscope.tracing.settings import requested_trees

    named: dict[str, None] = {}
    for trace in traces:
        try:
            named.update(dict.fromkeys(requested_trees(Path(trace))))
        except SpecscopeError as error:  # a settings file that does not read names none, said
            print(f"warning: {error}; its trees are not replayed", file=sys.stderr)
    return tuple(named) or DEFAULTS.trees


def run(args: argparse.Namespace) -> int:
    from specscope.analysis.measured import read_bench_results
    from specscope.report.build import build_report

    config = dataclasses.replace(
        DEFAULTS, cost_model=args.cost_model, ks=tuple(args.ks),
        figure_policies=tuple(args.figure_policies or DEFAULTS.figure_policies),
        steps=tuple(args.steps), measured=tuple(read_bench_results(args.measured)), measured_files=tuple(args.measured),
        trees=traced_trees(args.traces) if args.trees is None else tuple(t.name for t in args.trees),
        sim=SimConfig(mode=args.mode, batch_sizes=tuple(args.batch_sizes), seed=args.seed), policy=args.policy,
    )
    unknown = [p for p in args.figure_policies or () if p not in config.policies]
    if unknown:  # the figure draws what the report simulates; another name would be left out unseen
        raise SpecscopeError(f"--figure-policies: {unknown[0]!r} is not a policy the report simulates "
                             f"({', '.join(config.policies)})")
    result = build_report(args.traces, args.output, config)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {result.index} ({len(result.figures)} figures, {len(result.tables)} tables)")
    return 0
