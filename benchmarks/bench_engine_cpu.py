"""CPU speed of the reference engine (no SD) against transformers' ``generate``.

Goals: at batch 1 the engine decodes at least as fast as ``generate`` on the same
tiny model, and batch 8 gives at least 4x the tokens/s of batch 1. Both run in this process,
side by side, with pinned threads, a warm-up and the median of repeats; the greedy outputs are
compared too. Usage: ``python benchmarks/bench_engine_cpu.py [--threads 2] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

from specscope.engine.loading import load_model
from specscope.engine.runner import Engine


def make_checkpoint(directory: Path) -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model


def time_engine(
    engine: Engine, prompts: list[list[int]], new_tokens: int
) -> tuple[float, list[list[int]]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, new_tokens, ignore_eos=True)
    outputs: dict[str, list[int]] = {}
    start = time.perf_counter()
    while engine.num_running():
        for out in engine.step():
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
    return time.perf_counter() - start, [outputs[str(i)] for i in range(len(prompts))]


@torch.no_grad()
def time_generate(model, prompts: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    ids = torch.tensor(prompts)
    start = time.perf_counter()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
    )
    return time.perf_counter() - start, out[:, ids.shape[1] :].tolist()


def interleaved_rates(runs: dict, repeats: int) -> tuple[dict[str, float], dict[str, list[list[int]]]]:
    """Tokens/s of each ``name -> (fn, tokens)``: one warm-up each, then ``repeats`` rounds that
    run every fn once in turn (so background load hits all of them alike); medians."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    outputs = {name: fn()[1] for name, (fn, _) in runs.items()}  # warm-up
    for _ in range(repeats):
        for name, (fn, _) in runs.items():
            seconds[name].append(fn()[0])
    return {
        name: tokens / statistics.median(seconds[name]) for name, (_, tokens) in runs.items()
    }, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        hf = make_checkpoint(Path(tmp))
        target = load_model(Path(tmp))
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 4096, (args.prompt_len,), generator=gen).tolist() for _ in range(8)]
    max_len = args.prompt_len + args.new_tokens
    n = args.new_tokens
    engine = Engine(target, None, k=1, max_batch_size=8, max_seq_len=max_len)

    rates, outputs = interleaved_rates(
        {
            "hf_b1": (lambda: time_generate(hf, prompts[:1], n), n),
            "ours_b1": (lambda: time_engine(engine, prompts[:1], n), n),
            "hf_b8": (lambda: time_generate(hf, prompts, n), 8 * n),
            "ours_b8": (lambda: time_engine(engine, prompts, n), 8 * n),
        },
        args.repeats,
    )
    hf_b1, ours_b1, hf_b8, ours_b8 = (rates[key] for key in ("hf_b1", "ours_b1", "hf_b8", "ours_b8"))
    hf_out, our_out, our_out8 = outputs["hf_b1"], outputs["ours_b1"], outputs["ours_b8"]

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, threads {args.threads}, "
        f"model: Llama 4 layers, hidden 256, vocab 4096 (fp32), prompt {args.prompt_len}, "
        f"{n} new tokens, median of {args.repeats} interleaved rounds after a warm-up"
    )
    print(f"{'':28}{'batch 1 tok/s':>15}{'batch 8 tok/s':>15}{'b8 / b1':>10}")
    print(f"{'transformers generate':28}{hf_b1:15.1f}{hf_b8:15.1f}{hf_b8 / hf_b1:10.2f}")
    print(f"{'specscope engine (no SD)':28}{ours_b1:15.1f}{ours_b8:15.1f}{ours_b8 / ours_b1:10.2f}")
    print(f"engine / generate at batch 1: {ours_b1 / hf_b1:.2f}x  (goal >= 1)")
    print(f"engine batch 8 / batch 1:     {ours_b8 / ours_b1:.2f}x  (goal >= 4)")
    print(
        f"greedy outputs identical to generate at batch 1: {our_out == hf_out}; "
        f"batch 8 rows equal batch-1 output for row 0: {our_out8[0] == our_out[0]}"
    )


if __name__ == "__main__":
    main()
