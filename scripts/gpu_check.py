"""GPU check of the reference engine, for a session lent a GPU (runs unchanged, no downloads).

On random BF16 weights of the real Llama-3.1-8B shape it measures, in under 8 minutes on an
H100/H200-class GPU:

1. target forward time over a grid of batched tokens (1..1024) x tokens in the KV cache
   (0..64k), fitted by least squares to the paper's linear cost model
   ``forward = c_kv·kv + c_tok·batched + c_fixed`` and printed beside the paper's H100 constants,
   eager and (on a GPU) replayed as CUDA graphs, beside one kernel launch's time;
2. the batch-1 decode step time against the memory floor (weight bytes / HBM bandwidth);
3. no-SD and SD throughput (greedy, k = 3) with a self-draft (the target drafts for itself:
   every draft accepted, a full target forward per draft token) and a layer-truncated draft
   (the target's first layers + its LM head) at batch 1, 8 and 32;
4. a learned policy's own work per step inside the engine (the step records' ``policy_s``:
   observations, features, decision, merging) against the step's time, at the same batch sizes:
   the engine switching per step and row between n-gram, the layer-truncated draft and no
   drafting, by a policy fitted in place to synthetic traces under item 1's fitted cost model
   (for timing: which choices it makes on random weights says nothing of a real workload).

Eager PyTorch without CUDA graphs: at batch 1 kernel launches can dominate, which item 2 shows.
``--tiny`` runs the same code on a tiny random model on the CPU in seconds (a smoke test).
``--json PATH`` also writes every figure as JSON, e.g.
``python scripts/gpu_check.py --json "$OUT/gpu_check.json"`` on the device machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from specscope.costmodel.base import FractionDrafting
from specscope.costmodel.fit import nonnegative_relative_fit
from specscope.costmodel.linear import H100_LLAMA31_8B, PAPER_NGRAM, LinearCostModel
from specscope.costmodel.presets import HARDWARE, MODELS
from specscope.engine.config import ModelConfig, RopeConfig
from specscope.engine.kv_cache import KVCache
from specscope.engine.model import Transformer
from specscope.engine.runner import Engine
from specscope.engine.proposer_api import ProposerConfig
from specscope.policy.learned import LearnedPolicy, choosers_from_json
from specscope.proposers.draft_model import DraftModelProposer
from specscope.proposers.ngram import NgramProposer
from specscope.proposers.switching import SwitchingProposer
from specscope.sim.fit import fit_policy
from specscope.trace.schema import ProposerTrace, TraceRecord

BUDGET_S = 360  # SD batch sizes still to run after this many seconds are skipped (limit: 8 min)
FULL = dict(
    batched=(1, 4, 16, 64, 256, 1024),
    kv=(0, 4096, 16384, 65536),
    rows_max=64,
    batch_sizes=(1, 8, 32),
    prompt_len=128,
    new_tokens=128,
    draft_layers=4,
    repeats=5,
)
TINY = dict(
    batched=(1, 4, 16),
    kv=(0, 64, 256),
    rows_max=4,
    batch_sizes=(1, 2),
    prompt_len=8,
    new_tokens=8,
    draft_layers=1,
    repeats=2,
)


def llama31_8b() -> ModelConfig:
    shape = MODELS["llama3.1-8b"]
    return ModelConfig(
        model_type="llama",
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_layers=shape.num_layers,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        rms_norm_eps=1e-5,
        rope=RopeConfig(
            theta=500000.0,
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    )


def tiny() -> ModelConfig:
    return ModelConfig(
        model_type="llama",
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
    )


def random_model(config: ModelConfig, dtype: torch.dtype, device: torch.device) -> Transformer:
    """Random weights, created directly on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Transformer(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval().requires_grad_(False)


def truncated(target: Transformer, layers: int) -> Transformer:
    """A draft made of the target's embedding, first ``layers`` layers, final norm and LM head."""
    with torch.device("meta"):
        draft = Transformer(replace(target.config, num_layers=layers))
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = nn.ModuleList(target.model.layers[:layers])
    draft.model.norm = target.model.norm
    draft.lm_head = target.lm_head
    return draft


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def time_forward(
    model: Transformer, rows: int, per_row: int, cached: int, repeats: int, graphed: bool = False
) -> float:
    """Median seconds of one forward of ``rows`` x ``per_row`` new tokens over ``cached`` tokens each.

    ``graphed``: the forward captured once as a CUDA graph and replayed, so the time is the GPU's
    own, without Python and kernel-launch overhead (what an engine's CUDA graphs remove)."""
    device = model.device
    cache = KVCache(model.config, rows, cached + per_row, model.dtype, device)
    tokens = torch.randint(0, model.config.vocab_size, (rows, per_row), device=device)
    positions = cached + torch.arange(per_row, device=device)[None].expand(rows, -1)

    def forward() -> None:
        model.logits(model(tokens, positions, cache, list(range(rows)), kv_len=cached + per_row)[0])

    if graphed:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
            forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
        forward = graph.replay
    times = []
    for i in range(repeats + 2):  # two warm-ups
        sync(device)
        start = time.perf_counter()
        forward()
        sync(device)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def graphed_time(model: Transformer, rows: int, per_row: int, cached: int, repeats: int) -> float | str:
    """:func:`time_forward` replayed as a CUDA graph, or the capture's error (its first line) where
    this torch cannot capture it: the check goes on without that point."""
    try:
        return time_forward(model, rows, per_row, cached, repeats, graphed=True)
    except RuntimeError as error:
        return str(error).splitlines()[0]


def launch_latency(device: torch.device, launches: int = 2000) -> float:
    """Seconds per launch of the smallest kernel (a one-element add), launched back to back:
    the floor under every operation of an eager forward."""
    x = torch.zeros(1, device=device)
    for _ in range(100):
        x.add_(1)
    sync(device)
    start = time.perf_counter()
    for _ in range(launches):
        x.add_(1)
    sync(device)
    return (time.perf_counter() - start) / launches


def fit_cost_model(model: Transformer, grid: dict, graphed: bool = False) -> dict:
    """Forward times over the grid and the linear model fitted to them. Graphed, a point whose
    capture fails (a kernel this torch cannot capture, memory) is kept with its error and left
    out of the fit; the points measured around it are not lost."""
    paper = H100_LLAMA31_8B
    points, failed = [], []
    for batched in grid["batched"]:
        rows = min(batched, grid["rows_max"])
        for kv in grid["kv"]:
            point = {"batched": batched, "kv": kv, "rows": rows}
            shape = (model, rows, batched // rows, kv // rows, grid["repeats"])
            seconds = graphed_time(*shape) if graphed else time_forward(*shape)
            if isinstance(seconds, str):
                failed.append({**point, "error": seconds})
                print(f"  forward  batched {batched:5d}  kv {kv:6d}  ({rows} rows)  capture failed: {seconds}", flush=True)
                continue
            point["seconds"] = seconds
            points.append(point)
            print(
                f"  forward  batched {batched:5d}  kv {kv:6d}  ({rows} rows)  {point['seconds'] * 1e3:9.3f} ms"
                f"   (paper H100 model: {paper.forward_time(batched, kv, rows) * 1e3:7.3f} ms)",
                flush=True,
            )
    if len(points) < 3:
        return {"points": points, "failed": failed, "error": f"{len(points)} points measured: no fit of 3 terms"}
    a = np.array([[p["kv"], p["batched"], 1.0] for p in points])
    y = np.array([p["seconds"] for p in points])
    # least squares with coefficients >= 0, as every cost model must have (absolute error: scale 1)
    c_kv, c_tok, c_fixed = map(float, nonnegative_relative_fit(a, y, "forward", scale=np.ones_like(y)))
    r2 = 1 - ((a @ [c_kv, c_tok, c_fixed] - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    print(f"{'':10}{'c_kv (s/token)':>18}{'c_tok (s/token)':>18}{'c_fixed (s)':>16}")
    print(f"{'measured':10}{c_kv:18.6e}{c_tok:18.6e}{c_fixed:16.6e}   R² = {r2:.4f}")
    print(f"{'paper H100':10}{paper.c_kv:18.6e}{paper.c_tok:18.6e}{paper.c_fixed:16.6e}")
    return {
        "points": points,
        "failed": failed,
        "c_kv": c_kv,
        "c_tok": c_tok,
        "c_fixed": c_fixed,
        "r2": r2,
        "paper_h100": {"c_kv": paper.c_kv, "c_tok": paper.c_tok, "c_fixed": paper.c_fixed},
    }


def memory_floor(model: Transformer, grid: dict) -> dict:
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    step = time_forward(model, 1, 1, grid["prompt_len"], grid["repeats"] * 4)
    result = {"weight_bytes": weight_bytes, "batch1_step_s": step}
    if model.device.type == "cuda":
        name = torch.cuda.get_device_name(model.device).lower()
        hw = next((h for key, h in HARDWARE.items() if key in name), HARDWARE["h200"])
        floor = weight_bytes / hw.mem_bandwidth
        result.update(hardware=hw.name, floor_s=floor, fraction_of_bandwidth=floor / step)
        print(
            f"batch-1 step {step * 1e3:.3f} ms; weights {weight_bytes / 1e9:.2f} GB / {hw.name} "
            f"{hw.mem_bandwidth / 1e12:.2f} TB/s = {floor * 1e3:.3f} ms floor; "
            f"achieved {floor / step:.0%} of bandwidth"
        )
        graphed = graphed_time(model, 1, 1, grid["prompt_len"], grid["repeats"] * 4)
        if isinstance(graphed, str):
            print(f"  CUDA graph capture failed: {graphed}")
        else:
            result.update(batch1_step_graphed_s=graphed, fraction_of_bandwidth_graphed=floor / graphed)
            print(f"as a CUDA graph: {graphed * 1e3:.3f} ms, {floor / graphed:.0%} of bandwidth")
    else:
        print(
            f"batch-1 step {step * 1e3:.3f} ms; weights {weight_bytes / 1e6:.2f} MB "
            "(no GPU bandwidth to compare)"
        )
    return result


def throughput(target: Transformer, draft: Transformer | None, k: int, batch: int, grid: dict,
               policy: LearnedPolicy | None = None) -> dict:
    """Tokens per second of ``batch`` random prompts decoded greedily: no SD (``draft`` None),
    SD with ``draft`` at ``k``, or, with ``policy``, the engine switching per row and step between
    n-gram, ``draft`` and no drafting as ``policy`` decides (its own work per step measured too)."""
    max_len = grid["prompt_len"] + grid["new_tokens"]
    proposer = None
    if draft is not None:
        capacity = Engine.cache_capacity(max_len, k)
        proposer = DraftModelProposer(ProposerConfig("draft", k, batch, capacity), draft, target)
        if policy is not None:
            ngram = NgramProposer(ProposerConfig("ngram", k, batch, capacity), target.device)
            proposer = SwitchingProposer(policy, [ngram, proposer], ngram, batch)
    engine = Engine(target, proposer, k, batch, max_len)
    gen = torch.Generator().manual_seed(batch)
    prompts = [
        torch.randint(0, target.config.vocab_size, (grid["prompt_len"],), generator=gen).tolist()
        for _ in range(batch)
    ]

    def run(new_tokens: int) -> tuple[int, float]:
        for i, prompt in enumerate(prompts):
            engine.add_request(str(i), prompt, new_tokens, ignore_eos=True)
        start, emitted = engine.clock.now(), 0
        while engine.num_running():
            emitted += sum(len(out.new_token_ids) for out in engine.step())
        return emitted, engine.clock.now() - start

    run(4)  # warm-up
    engine.reset_stats()
    tokens, seconds = run(grid["new_tokens"])
    stats = engine.stats
    decode = [r for r in engine.step_records if not r.prefill_tokens]
    row = {
        "batch_size": batch,
        "tokens_per_s": tokens / seconds,
        "acceptance_rate": stats.acceptance_rate(),
        "mean_acceptance_length": stats.mean_acceptance_length(),
        # per decode step, everything but drafting and the target forward (as the paper's overhead)
        "overhead_s": statistics.median(r.sample_s + r.overhead_s for r in decode),
    }
    if policy is not None:
        row["policy_s"] = statistics.mean(r.policy_s for r in decode)
        row["step_s"] = statistics.mean(r.decode_s for r in decode)
        chosen = [c[0] for r in decode for c in r.choices or () if c is not None]
        row["choices"] = {m: chosen.count(m) / len(chosen) for m in sorted(set(chosen))}
    return row


def synthetic_traces(vocab_size: int, grid: dict, requests: int = 48, seed: int = 0) -> list[TraceRecord]:
    """Traces to fit a policy on where none can be traced (random weights): per request a draft
    acceptance rate drawn from 0.3–0.9, per position an acc_len of the draft drawn geometric at that
    rate (k_max 8); n-gram's acc_len from the tokens' own repeats: an offer of up to 8 known tokens that followed the
    current token's last earlier occurrence, accepted as far as they match what follows."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(requests):
        prompt = rng.integers(0, vocab_size, grid["prompt_len"])
        output = rng.integers(0, min(vocab_size, 64), grid["new_tokens"])  # a small alphabet: some repeats
        alpha = rng.uniform(0.3, 0.9)
        draft = 1 + np.minimum(rng.geometric(1 - alpha, output.size) - 1, 8)
        tokens = np.concatenate([prompt, output])
        offer, ngram = np.zeros(output.size, np.int32), np.ones(output.size, np.int32)
        for p in range(output.size):
            end = prompt.size + p  # the last token known before position p
            earlier = np.flatnonzero(tokens[: end - 1] == tokens[end - 1])
            if earlier.size:
                follow = tokens[earlier[-1] + 1 : end][:8]  # known tokens only
                offer[p] = follow.size
                truth = tokens[end : end + follow.size]
                ngram[p] = 1 + int(np.cumprod(follow[: truth.size] == truth).sum())
        records.append(TraceRecord(
            id=str(i), prompt_token_ids=prompt.astype(np.int64), output_token_ids=output.astype(np.int64),
            proposers={"ngram": ProposerTrace(ngram, draft_len=offer), "draft": ProposerTrace(draft.astype(np.int32))},
            k_max=8, dataset="synthetic"))
    return records


def policy_table(target: Transformer, fit: dict, grid: dict, deadline: float, k: int = 3) -> list[dict]:
    """Item 4: a policy over n-gram and the layer-truncated draft, fitted to
    :func:`synthetic_traces` under ``fit`` (item 1's forward; n-gram priced as the paper's, the
    draft at its share of the target's layers per pass), run by the engine at each batch size:
    its own work per step (``policy_s``) against the step's time."""
    draft = truncated(target, grid["draft_layers"])
    cost = LinearCostModel("gpu_check", fit["c_fixed"], fit["c_tok"], fit["c_kv"], 0.0, drafting={
        "ngram": PAPER_NGRAM, "draft": FractionDrafting(grid["draft_layers"] / target.config.num_layers)})
    methods = ("ngram", "draft")
    started = time.perf_counter()
    document = fit_policy(synthetic_traces(target.config.vocab_size, grid), methods, cost, grid["batch_sizes"], max_k=k)
    for model in document["models"]:  # the per-step rule's own work is what this item measures: no request committed
        model["gate"] = None
    print(f"  policy fitted in {time.perf_counter() - started:.1f} s")
    policy = LearnedPolicy("synthetic.json", methods, choosers_from_json(document, methods), document)
    rows = []
    print(f"{'batch':>7}{'tok/s':>11}{'policy µs':>11}{'step ms':>9}{'share':>8}  choices")
    for batch in in_time(grid["batch_sizes"], deadline):
        row = throughput(target, draft, k, batch, grid, policy)
        row["policy_share"] = row["policy_s"] / row["step_s"]
        rows.append(row)
        mix = ", ".join(f"{m} {share:.0%}" for m, share in row["choices"].items())
        print(f"{batch:7d}{row['tokens_per_s']:11.1f}{row['policy_s'] * 1e6:11.0f}{row['step_s'] * 1e3:9.2f}"
              f"{row['policy_share']:8.1%}  {mix}", flush=True)
    return rows


def in_time(batch_sizes: tuple[int, ...], deadline: float) -> Iterator[int]:
    """The batch sizes still to start by ``deadline`` (``time.perf_counter()`` seconds), each one
    past it named as skipped, so the whole check stays within budget."""
    for batch in batch_sizes:
        if time.perf_counter() > deadline:
            print(f"  batch {batch}: skipped, the {BUDGET_S} s time budget is spent", flush=True)
            continue
        yield batch


def sd_table(target: Transformer, grid: dict, deadline: float, k: int = 3) -> list[dict]:
    """No-SD and SD rows per batch size (those started by ``deadline``: :func:`in_time`)."""
    drafts = {
        "none": None,
        "self-draft": target,
        f"first-{grid['draft_layers']}-layers": truncated(target, grid["draft_layers"]),
    }
    rows = []
    print(f"{'draft':>18}{'batch':>7}{'tok/s':>11}{'speedup':>9}{'α':>7}{'τ':>7}")
    for batch in in_time(grid["batch_sizes"], deadline):
        base = None
        for name, draft in drafts.items():
            row = {"draft": name, "k": k, **throughput(target, draft, k, batch, grid)}
            base = base or row["tokens_per_s"]
            row["speedup"] = row["tokens_per_s"] / base
            rows.append(row)
            alpha, tau = row["acceptance_rate"], row["mean_acceptance_length"]
            print(
                f"{name:>18}{batch:7d}{row['tokens_per_s']:11.1f}{row['speedup']:9.2f}"
                f"{'-' if alpha is None else f'{alpha:.2f}':>7}{tau:7.2f}",
                flush=True,
            )
    return rows


def check(
    args: argparse.Namespace, device: torch.device, dtype: torch.dtype, config: ModelConfig, grid: dict
) -> None:
    """Run the three measurements and write the requested files."""
    began = time.perf_counter()
    model = random_model(config, dtype, device)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"gpu_check on {label}: {'tiny' if args.tiny else 'Llama-3.1-8B shape'}, {dtype}, "
        f"torch {torch.__version__}"
    )
    result: dict = {"device": label, "torch": torch.__version__}

    def save() -> None:
        """Write what is measured so far, so a failure in a later section keeps the earlier ones."""
        result["seconds"] = time.perf_counter() - began
        if args.json:
            args.json.write_text(json.dumps(result, indent=1, default=float) + "\n")

    print("1. forward time vs batched tokens and KV tokens, fitted to the linear cost model")
    result["cost_model"] = fit_cost_model(model, grid)
    save()
    if device.type == "cuda":
        result["launch_s"] = launch_latency(device)
        print(
            f"1b. the same forwards replayed as CUDA graphs (the GPU's own time); one kernel launch "
            f"takes {result['launch_s'] * 1e6:.1f} µs"
        )
        result["cost_model_graphed"] = fit_cost_model(model, grid, graphed=True)
        save()
    print("2. batch-1 decode step vs the memory floor")
    result["memory_floor"] = memory_floor(model, grid)
    save()
    print("3. SD throughput (greedy, k = 3), speedup vs no-SD at the same batch size")
    result["sd"] = sd_table(model, grid, deadline=began + BUDGET_S)
    save()
    print("4. a learned policy's own work per step in the engine (n-gram / draft / none per row)")
    result["policy"] = policy_table(model, result["cost_model"], grid, deadline=began + BUDGET_S + 60)
    save()
    print(f"done in {result['seconds']:.0f} s")
    if args.cost_model:
        fit = result["cost_model"]
        overhead = next(r["overhead_s"] for r in result["sd"] if r["draft"] == "none")
        shape = "tiny" if args.tiny else "llama3.1-8b"
        name = f"{label.lower().replace(' ', '-')}-{shape}-reference-engine"
        fitted = LinearCostModel(name, fit["c_fixed"], fit["c_tok"], fit["c_kv"], overhead)
        args.cost_model.write_text(json.dumps(fitted.describe(), indent=1, default=float) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny random model on CPU (smoke test)")
    parser.add_argument("--json", type=Path, help="also write all figures to this JSON file")
    parser.add_argument(
        "--cost-model",
        type=Path,
        help="write the fitted linear cost model (with the measured batch-1 step overhead) as JSON "
        "that specscope's cost-model files accept",
    )
    args = parser.parse_args(argv)
    if args.tiny:
        device, dtype, config, grid = torch.device("cpu"), torch.float32, tiny(), TINY
    elif torch.cuda.is_available():
        device, dtype, config, grid = torch.device("cuda"), torch.bfloat16, llama31_8b(), FULL
    else:
        print("gpu_check: no CUDA device; run with --tiny for the CPU smoke test", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    if args.tiny:
        torch.set_num_threads(1)  # a smoke test: one thread avoids stalls on a busy machine
    try:
        check(args, device, dtype, config, grid)
    finally:
        torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
