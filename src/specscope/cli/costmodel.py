"""`specscope costmodel show NAME`: what a cost model predicts, and its constants."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from specscope.cli._common import check_output_file, print_table, to_stdout


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("costmodel", help="show cost models, or fit one to measured steps")
    verbs = parser.add_subparsers(dest="costmodel_verb", metavar="ACTION", required=True)
    show = verbs.add_parser("show", help="constants and example forward times of a cost model")
    show.add_argument("name", help="preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    show.add_argument("--format", choices=("table", "json"), default="table")
    show.set_defaults(run=run_show)
    fit = verbs.add_parser("fit", help="fit the linear cost model to measured step records")
    fit.add_argument("records", nargs="+", metavar="RECORDS", help="step records (JSON Lines) of engine runs")
    fit.add_argument("-o", "--output", required=True, type=check_output_file,
                     help="write the fitted model (JSON) here (- for standard output)")
    fit.add_argument("--name", default=None, help="name of the fitted model (default: the output's stem, "
                                                  "'fitted' for standard output)")
    fit.set_defaults(run=run_fit)


def run_show(args: argparse.Namespace) -> int:
    from specscope.costmodel.registry import resolve_cost_model

    cost = resolve_cost_model(args.name)
    description = cost.describe()
    if args.format == "json":
        json.dump(description, sys.stdout, indent=1)
        print()
        return 0
    print(json.dumps(description, indent=1))
    batched = [1, 8, 32, 128, 512, 1024]
    kvs = [0, 8_000, 64_000, 200_000]
    decode = np.array(batched)  # one new token per sequence
    rows = [[f"kv={kv}", *[f"{1e3 * t:.2f}" for t in cost.forward_time(decode, np.full(len(batched), kv), decode)]]
            for kv in kvs]
    print_table(f"target forward time (ms) of {cost.name}, decoding one token per sequence",
                ["cached tokens", *[f"{b} tok" for b in batched]], rows)
    return 0


def run_fit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specscope.analysis.timesplit import read_steps
    from specscope.cli._common import atomic_write_text
    from specscope.costmodel.fit import fit_linear

    output = Path(args.output)
    name = args.name or ("fitted" if to_stdout(output) else output.stem)
    model, quality = fit_linear(read_steps(args.records), name=name)
    text = json.dumps(model.describe(), indent=1)
    atomic_write_text(output, text + "\n")
    if to_stdout(output):
        print(quality.summary(), file=sys.stderr)
        return 0
    print(text)
    print(quality.summary())
    print(f"wrote {output}")
    return 0
