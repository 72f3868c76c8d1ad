"""`specscope costmodel show NAME`: what a cost model predicts, and its constants."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from specscope.cli._common import print_table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("costmodel", help="show cost models")
    verbs = parser.add_subparsers(dest="costmodel_verb", metavar="ACTION", required=True)
    show = verbs.add_parser("show", help="constants and example forward times of a cost model")
    show.add_argument("name", help="preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    show.add_argument("--format", choices=("table", "json"), default="table")
    show.set_defaults(run=run_show)


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
    rows = [[f"kv={kv}", *[f"{1e3 * t:.2f}" for t in cost.forward_time(np.array(batched), np.full(len(batched), kv))]]
            for kv in kvs]
    print_table(f"target forward time (ms) of {cost.name}", ["cached tokens", *[f"{b} tok" for b in batched]], rows)
    return 0
