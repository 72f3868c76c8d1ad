"""Speed of tracing model proposers: every position at once (rollout) against one position at
a time through the engine's protocol (stepwise), on the bundled models and a bundled task.

    python benchmarks/bench_model_tracer.py [--task code] [--requests 8] [--k-max 10] [--threads 1]

For each model proposer: positions traced per second both ways (median of repeats, the two
timed alternately), the ratio, and how many positions got the same acc_len both ways (the two
differ only by float rounding: one forward over the whole sequence against one per token).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from specscope.engine.loading import load_eos_token_ids, load_model, load_tokenizer
from specscope.engine.runner import Engine
from specscope.proposers import ProposerConfig, create_proposer
from specscope.tracing.model import rollout_traces, stepwise_traces
from specscope.workloads.bundled import bundled_path
from specscope.workloads.jsonl import read_workload
from specscope.zoo.shipped import model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="code")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--k-max", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target_dir = model_dir("target")
    target = load_model(target_dir, torch.float32, torch.device("cpu"))
    requests = read_workload(bundled_path(args.task), load_tokenizer(target_dir))[: args.requests]
    prompts = [list(r.prompt_token_ids) for r in requests]
    longest = max(len(p) for p in prompts) + args.max_tokens
    generator = Engine(target, None, 1, len(prompts), longest, load_eos_token_ids(target_dir))
    generated = generator.generate([(r.id, p) for r, p in zip(requests, prompts)], args.max_tokens)
    outputs = [generated[r.id] for r in requests]
    positions = sum(len(o) for o in outputs)
    capacity = Engine.cache_capacity(longest, args.k_max)
    print(f"{args.task}: {len(prompts)} requests, {positions} output positions, k_max {args.k_max}, "
          f"{args.threads} thread(s)")
    for method in ("draft", "eagle", "mtp"):
        proposer = create_proposer(ProposerConfig(method, args.k_max, len(prompts), capacity, model_dir(method)), target)
        times: dict[str, list[float]] = {"stepwise": [], "rollout": []}
        traces = {}
        for _ in range(args.repeats):
            for name, trace in (("stepwise", stepwise_traces), ("rollout", rollout_traces)):
                start = time.perf_counter()
                traces[name] = trace(target, proposer, prompts, outputs, args.k_max)
                times[name].append(time.perf_counter() - start)
        same = sum(int(np.sum(a.acc_len == b.acc_len)) for a, b in zip(traces["stepwise"], traces["rollout"]))
        step_s, roll_s = statistics.median(times["stepwise"]), statistics.median(times["rollout"])
        print(f"{method:6s} stepwise {positions / step_s:8.0f} positions/s   rollout {positions / roll_s:8.0f} "
              f"positions/s   {step_s / roll_s:5.1f}x   same acc_len at {same}/{positions} positions")


if __name__ == "__main__":
    main()
