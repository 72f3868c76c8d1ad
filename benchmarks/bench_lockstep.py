"""How far apart the repeats of one measured speedup lie, at each length of the lockstep's turns.

The reference bench runs no-SD and SD in lockstep by turns: an engine steps on until it leads the
others by ``BLOCK_TOKENS`` emitted tokens (``specscope.backends.reference``). Shorter turns let a
drift of the machine's speed hit both engines more alike; turns too short let one engine's step
run on the caches the other filled. This runs ``specscope bench`` on the bundled target at each
lead in ``--leads``, alternating, ``--rounds`` times, and prints per run the median speedup of
its ``--repeats``, their least and greatest and their standard deviation. With ``--policy`` it
runs that learned policy with a chain of ``--k`` of each of its methods beside it and prints, per
chain, the policy's speed over the chain's, paired repeat by repeat (where the policy commits
every request to that chain, one computation measured twice: its spread is the measurement's).
Figures for docs/learned-policy-log.md (stop 61); no goal. Usage:
``python benchmarks/bench_lockstep.py [--method mtp] [--tree 3x2x1x1] [--workload chat] [--requests 16]
[--batch-size 8] [--repeats 9] [--leads 256,64] [--rounds 2] [--policy policy.json --k 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from specscope.analysis.paired import Paired
from specscope.backends import BenchConfig
from specscope.backends import reference
from specscope.policy.learned import load_policy
from specscope.study.config import BUNDLED_REQUESTS
from specscope.study.run import first_requests
from specscope.trees import TreeShape
from specscope.workloads.bundled import bundled_path
from specscope.zoo.shipped import model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=("ngram", "draft", "eagle", "eagle3", "mtp"), default="mtp")
    parser.add_argument("--tree", type=TreeShape.parse, default=None)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--policy", default=None, help="a learned policy file (its drafter: --method's checkpoint)")
    parser.add_argument("--workload", default="chat", help="a bundled workload: chat, code, math or summary")
    parser.add_argument("--requests", type=int, default=BUNDLED_REQUESTS, help="its first N requests (the study's default)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--leads", default="256,64")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats: a spread needs 3 or more (an odd count)")
    torch.set_num_threads(args.threads)
    draft = None if args.method == "ngram" else model_dir(args.method)
    what = f"learned {args.policy}" if args.policy else args.tree.name if args.tree else f"{args.method} k={args.k}"
    print(f"torch {torch.__version__}, threads {args.threads}, bundled target, {what}, workload {args.workload}, "
          f"{args.requests} requests, B = {args.batch_size}, {args.repeats} repeats a run")
    print(f"{'lead':>5}{'round':>6}  {'row':28}{'median':>8}{'least':>8}{'most':>8}{'sd':>8}")
    with tempfile.TemporaryDirectory() as folder:
        workload = first_requests(bundled_path(args.workload), args.requests, Path(folder))
        k = load_policy(args.policy).depth if args.policy else args.tree.depth if args.tree else args.k  # as bench sets it
        config = BenchConfig(model_dir=model_dir("target"), workload=workload,
                             method="learned" if args.policy else args.method, draft_dir=draft,
                             k=k, batch_sizes=(args.batch_size,),
                             max_tokens=args.max_tokens, repeats=args.repeats, tree=args.tree, policy=args.policy,
                             beside_k=args.k if args.policy else None)
        for round_ in range(1, args.rounds + 1):
            for lead in (int(text) for text in args.leads.split(",")):
                reference.BLOCK_TOKENS = lead  # the knob this measures
                rows = reference.run_bench(config).rows
                policy = next((row.details["speedup_repeats"] for row in rows if row.method == "learned"), None)
                for row in rows:
                    show(lead, round_, row, policy)


def show(lead: int, round_: int, row, policy: list[float] | None) -> None:
    """A row's speedups over its repeats, and, beside a policy (whose speedups are ``policy``), the
    policy's speed over the chain's, paired repeat by repeat (:mod:`specscope.analysis.paired`)."""
    label = f"{row.method} beside" if row.details.get("beside") else row.method
    values = row.details["speedup_repeats"]
    print(f"{lead:5d}{round_:6d}  {label + ' speedup':28}{statistics.median(values):8.3f}{min(values):8.3f}"
          f"{max(values):8.3f}{statistics.stdev(values):8.3f}")
    if row.details.get("beside") and policy is not None:
        ratios = Paired.of(policy, values).ratios
        print(f"{'':13}{'learned / ' + row.method:28}{statistics.median(ratios):8.3f}{min(ratios):8.3f}"
              f"{max(ratios):8.3f}{statistics.stdev(ratios):8.3f}")


if __name__ == "__main__":
    main()
