"""Cost of a learned policy's decision on CPU: what an engine pays to run it every step.

Goals: ≤ 20 µs per step at batch 1 (features of one observation + the model), and ≤ 2 µs per
sequence at batch 64 with the model vectorised over the batch (``Chooser.choose_group`` on the
batch's feature matrix; the features themselves are also timed, per sequence). Also timed: what
the engine's :class:`~specscope.proposers.switching.SwitchingProposer` adds per sequence and
step before the model decides — recording what the last step emitted (n-gram agreement
included), the observation from the live tokens (tokens, prompt overlap, history) and its
features — over 64 requests of the trace decoding two tokens a step. The policy is
fitted here on the paper's gsm8k trace (a few seconds), the observations come from walking it.
Last, what the switching proposer costs per step inside the reference engine at batch 1 and 8
(a policy over n-gram and EAGLE, k ≤ 3, fitted on the same trace, run by the bundled target and
EAGLE head on the bundled math workload): the policy's own work, beyond the n-gram lookup and the
members' proposals (the step records' ``policy_s``, which the simulator prices). Code run
right after a forward pass pays more than the same code repeated at once (on 2026-12-01 the
decision of one row took 43 µs there and 15 µs repeated), so this figure, not the
micro-benchmarks above, is what an engine pays.

    python benchmarks/bench_policy.py [--traces-dir ../shared/paper] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from specscope.costmodel.registry import resolve_cost_model
from specscope.policy.features import features
from specscope.policy.learned import LearnedPolicy, choosers_from_json
from specscope.proposers.switching import SwitchingProposer
from specscope.sim.fit import fit_policy
from specscope.sim.switching import causal_plan
from specscope.trace import load_traces

METHODS = ("ngram", "eagle")
GOALS_US = {"batch 1, per step": 20.0, "batch 64, per sequence (model)": 2.0}


def observations(records, policy: LearnedPolicy) -> list:
    """The observations a walk of ``records`` at batch 1 hands ``policy``."""
    seen, decide = [], policy.decide_for(1)

    def spy(observed, committed=()):
        seen.extend(observed)
        return decide(observed, committed)

    causal_plan(records, METHODS, lambda b: spy, policy.depth)
    return seen


def engine_bookkeeping(records, policy: LearnedPolicy, steps: int = 40) -> tuple:
    """A function running ``steps`` engine steps of bookkeeping over 64 requests, and its calls."""
    requests = records[:64]

    def walk():
        proposer, chooser = SwitchingProposer(policy, [], lookup=None, batch_size=len(requests)), policy.chooser(len(requests))
        histories = [list(map(int, r.prompt_token_ids)) + [int(r.output_token_ids[0])] for r in requests]
        for step in range(steps):
            for slot, (record, history) in enumerate(zip(requests, histories)):
                obs = proposer._observe(slot, history, 2)
                features(obs, METHODS), chooser.shift_for(obs)
                proposer._sequences[slot].step = (0, 2, len(history), [])
                history += record.output_token_ids[len(history) - record.prompt_len:][:2].tolist()

    return walk, steps * len(requests)


def in_engine_us(document: dict, batch_size: int, workdir: Path) -> float:
    """µs per step the engine's switching proposer spends on the policy's own work — the
    observations, features, shift, decision and merging, beyond the n-gram lookup and the
    members' proposals, as an engine pays them right after its forward passes: the mean of its
    step records' ``policy_s`` (what the simulator prices), inside the reference engine (bundled
    target and EAGLE head, bundled math workload, greedy) at ``batch_size``."""
    from specscope.backends import BenchConfig
    from specscope.backends.reference import run_bench
    from specscope.methods import LEARNED
    from specscope.workloads.bundled import bundled_path
    from specscope.zoo.shipped import model_dir

    import torch

    torch.set_num_threads(1)  # as `specscope bench --threads 1`: the bundled models gain nothing from more
    path = workdir / "policy.json"
    path.write_text(json.dumps(document))
    result = run_bench(BenchConfig(model_dir=model_dir("target"), workload=bundled_path("math"), method=LEARNED,
                                   draft_dir=model_dir("eagle"), k=3, batch_sizes=(batch_size,), max_tokens=48,
                                   policy=path, repeats=1))
    work = [r.policy_s for r in result.records if r.method == LEARNED and r.tokens_verified]
    return 1e6 * statistics.mean(work)


def per_call_us(fn, calls: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces-dir", default=os.environ.get("SPECSCOPE_PAPER_DIR", "../shared/paper"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    path = Path(args.traces_dir) / "llama3.1-8b_gsm8k.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (set --traces-dir to the paper's traces)")
    records, _ = load_traces([path], lengths="own")
    document = fit_policy(records, METHODS, resolve_cost_model("roofline:h100:llama3.1-8b"), [1, 64])
    choosers = choosers_from_json(document, METHODS)
    batch, policy = choosers[64], LearnedPolicy("bench", METHODS, choosers, document)
    decide = policy.decide_for(1)  # what the simulator asks per step
    seen = observations(records[:40], policy)[:2000]

    def single():
        for obs in seen:
            decide([obs])

    x = np.asarray([features(obs, METHODS) for obs in seen[:64]])
    offers = np.asarray([obs.ngram_offer for obs in seen[:64]])
    shift = np.asarray([batch.shift_for(obs) for obs in seen[:64]])
    rounds = 200

    def batched():
        for _ in range(rounds):
            batch.choose_group(x, offers, shift)

    def batch_features():  # what the engine computes per sequence before the model: features, shift
        for obs in seen[:64]:
            features(obs, METHODS)
            batch.shift_for(obs)

    walk, calls = engine_bookkeeping(records, policy)
    results = {
        "batch 1, per step": per_call_us(single, len(seen), args.repeats),
        "batch 64, per sequence (model)": per_call_us(batched, rounds * 64, args.repeats),
        "batch 64, per sequence (features, shift)": per_call_us(batch_features, 64, args.repeats),
        "engine, per sequence (bookkeeping + features, shift)": per_call_us(walk, calls, args.repeats),
    }
    engine_policy = fit_policy(records, METHODS, resolve_cost_model("roofline:h100:llama3.1-8b"), [1, 8], max_k=3)
    for model in engine_policy["models"]:  # the per-step rule's work is measured: its gate commits no request
        model["gate"] = None
    with tempfile.TemporaryDirectory() as workdir:
        for b in (1, 8):
            results[f"inside the engine, per step at batch {b}"] = in_engine_us(engine_policy, b, Path(workdir))
    print(f"learned policy over {len(document['features'])} features, {len(seen)} observations of the gsm8k trace")
    for name, value in results.items():
        goal = GOALS_US.get(name)
        verdict = "" if goal is None else (f"  (goal ≤ {goal:g} µs: {'met' if value <= goal else 'MISSED'})")
        print(f"{name:46s} {value:7.2f} µs{verdict}")


if __name__ == "__main__":
    main()
