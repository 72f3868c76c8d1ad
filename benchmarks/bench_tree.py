"""CPU cost of a tree-verification step against a chain step of the same depth.

Goal: at batch 1 on the CPU engine, a step with a static token tree (default ``2x2x1``: 10
nodes, depth 3) costs at most 1.5x a chain step of k = depth: the tree is verified in one
target forward (and drafted in one forward per depth), not one per branch. Both engines use
the bundled zoo target and drafter (``--method draft``, ``eagle`` or ``mtp``), in this process,
with pinned threads; each round decodes the same request with the chain engine and then the
tree engine (one warm-up round first), timing every SD step (prefill excluded); the report
gives median step times over all rounds. Usage:
``python benchmarks/bench_tree.py [--tree 2x2x1] [--method draft] [--threads 2] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specscope.assemble import load_engine
from specscope.engine.runner import Engine
from specscope.trees import TreeShape
from specscope.zoo.shipped import model_dir


def step_seconds(engine: Engine, prompt: list[int], new_tokens: int) -> tuple[list[float], list[int]]:
    """Decode ``prompt`` alone; the wall time of each SD step (after the prefill step) and the
    output tokens."""
    engine.add_request("r", prompt, new_tokens, ignore_eos=True)
    seconds, output = [], []
    while engine.num_running():
        start = time.perf_counter()
        (out,) = engine.step()
        seconds.append(time.perf_counter() - start)
        output += out.new_token_ids
    return seconds[1:], output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=TreeShape.parse, default=TreeShape.parse("2x2x1"))
    parser.add_argument("--method", choices=("draft", "eagle", "mtp"), default="draft")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=96)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tree, target, draft = args.tree, model_dir("target"), model_dir(args.method)
    max_len = args.prompt_len + args.new_tokens
    engines = {
        "chain": load_engine(target, args.method, draft, k=tree.depth, max_batch_size=1, max_seq_len=max_len)[0],
        "tree": load_engine(target, args.method, draft, max_batch_size=1, max_seq_len=max_len, tree=tree)[0],
    }
    prompt = torch.randint(4, 1024, (args.prompt_len,), generator=torch.Generator().manual_seed(1)).tolist()
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    outputs = {}
    for round_ in range(args.repeats + 1):  # round 0 warms up
        for name, engine in engines.items():
            times, outputs[name] = step_seconds(engine, prompt, args.new_tokens)
            if round_:
                seconds[name] += times
    median = {name: statistics.median(times) for name, times in seconds.items()}
    tau = {name: engine.stats.mean_acceptance_length() for name, engine in engines.items()}
    print(
        f"torch {torch.__version__}, threads {args.threads}, zoo target + {args.method}, batch 1, "
        f"prompt {args.prompt_len}, {args.new_tokens} new tokens, medians over {args.repeats} "
        f"interleaved rounds after a warm-up"
    )
    print(f"{'':24}{'nodes':>7}{'depth':>7}{'step ms':>10}{'tau':>7}{'tok/s':>9}")
    for name, nodes in (("chain", tree.depth), ("tree", tree.nodes)):
        label = f"{name} {'1x' * (tree.depth - 1)}1" if name == "chain" else f"tree {tree.name}"
        rate = tau[name] / median[name]
        print(f"{label:24}{nodes:7d}{tree.depth:7d}{median[name] * 1e3:10.2f}{tau[name]:7.2f}{rate:9.1f}")
    print(f"tree step / chain step: {median['tree'] / median['chain']:.2f}x  (goal <= 1.5)")
    print(f"greedy outputs identical: {outputs['tree'] == outputs['chain']}")


if __name__ == "__main__":
    main()
