"""`specscope bench`: measured no-SD vs SD throughput at several batch sizes on one workload."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Callable, TextIO

from specscope import validate
from specscope.backends import BATCHING, BENCH_BACKENDS, BenchConfig
from specscope.backends.openai.bench import POSITIVE, add_openai_bench_arguments
from specscope.cli._common import (
    add_table_output,
    atomic_write_text,
    check_output_file,
    human_stream,
    int_list,
    print_table,
    write_rows,
)
from specscope.errors import SpecscopeError

DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(BenchConfig) if f.default is not dataclasses.MISSING
}
METHODS = ("none", "ngram", "draft", "eagle", "eagle3", "mtp")
SPLIT = ("prefill_s", "draft_s", "verify_s", "sample_s", "overhead_s")
OPENAI = "openai"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure no-SD vs SD throughput on a workload",
        description=(
            "Run the workload without and with speculative decoding on the same requests at "
            "each batch size; report throughput (generated tokens/s), speedup, acceptance rate "
            "α, mean acceptance length τ and the measured time split. Greedy by default, and "
            "then SD output is checked token for token against no-SD output."
        ),
    )
    parser.add_argument(
        "--backend",
        choices=(*sorted(BENCH_BACKENDS), OPENAI),
        default="reference",
        help="reference: specscope's own engine; openai: a server's OpenAI-compatible API "
        "(vLLM, SGLang, specscope serve) given by --url or started with --launch",
    )
    parser.add_argument(
        "--model",
        metavar="DIR",
        help="target: a HF directory (config.json + *.safetensors); with --launch also a hub name",
    )
    parser.add_argument(
        "--method",
        default=DEFAULTS["method"],
        help=f"proposer ({', '.join(METHODS)}; others registered by plugins)",
    )
    parser.add_argument(
        "--draft", type=Path, metavar="DIR", help="draft model or head checkpoint directory"
    )
    parser.add_argument(
        "--k", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT), default=DEFAULTS["k"],
        help=f"proposal length k, 1..{validate.K_MAX_LIMIT} (default %(default)s)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int_list,
        default=list(DEFAULTS["batch_sizes"]),
        help="comma list (default 1,4,8)",
    )
    parser.add_argument(
        "--workload",
        required=True,
        type=Path,
        metavar="FILE",
        help='JSON Lines of {"id", "prompt"} or {"id", "prompt_token_ids"}',
    )
    parser.add_argument(
        "--max-tokens",
        type=POSITIVE,
        default=DEFAULTS["max_tokens"],
        help="output tokens per request (default %(default)s)",
    )
    parser.add_argument(
        "--batching",
        choices=BATCHING,
        default=DEFAULTS["batching"],
        help="distinct: B different requests decode together; "
        "replicate: B copies of one request (the paper's)",
    )
    parser.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens")
    parser.add_argument(
        "--temperature", type=validate.arg(validate.temperature), default=DEFAULTS["temperature"],
        help="0 = greedy (default)",
    )
    parser.add_argument(
        "--top-p", type=validate.arg(validate.number, low=0.0, low_open=True, high=1.0), default=DEFAULTS["top_p"]
    )
    parser.add_argument("--top-k", type=validate.arg(validate.integer, low=0), default=DEFAULTS["top_k"])
    parser.add_argument(
        "--seed", type=validate.arg(validate.seed), default=DEFAULTS["seed"], help="per-request sampling seed"
    )
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=DEFAULTS["dtype"])
    parser.add_argument(
        "--device", default=DEFAULTS["device"], help="cpu, cuda or cuda:N (default %(default)s)"
    )
    parser.add_argument("--threads", type=POSITIVE, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--repeats",
        type=POSITIVE,
        default=DEFAULTS["repeats"],
        help="runs of no-SD and SD per batch size, the two in lockstep; the row is the run with the "
             "median speedup (default %(default)s)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    add_table_output(parser, "the rows")
    parser.add_argument(
        "--records", type=check_output_file, metavar="FILE", help="write per-step records (JSON Lines; - for standard output)"
    )
    add_openai_bench_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.backends import get_backend

    out = human_stream(args.output, args.records)
    if args.backend == OPENAI:
        return _run_openai(args, out)
    if args.model is None:
        raise SpecscopeError("--model: required with --backend reference")
    backend = get_backend(args.backend)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    config = BenchConfig(
        model_dir=Path(args.model),
        workload=args.workload,
        method=args.method,
        draft_dir=args.draft,
        k=args.k,
        batch_sizes=tuple(args.batch_sizes),
        max_tokens=args.max_tokens,
        batching=args.batching,
        dtype=args.dtype,
        device=args.device,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        repeats=args.repeats,
    )
    result = backend.run_bench(config)
    if args.output:
        write_rows(args.output, result.rows)
    if args.records:
        atomic_write_text(args.records, "".join(line + "\n" for line in result.records))
    _show(args, result.rows, _print_table, out)
    return 0


def _run_openai(args: argparse.Namespace, out: TextIO) -> int:
    from specscope.backends.openai.bench import run_openai_bench

    rows = run_openai_bench(args)
    if args.output:
        write_rows(args.output, rows)
    _show(args, rows, _print_openai_table, out)
    return 0


def _show(args: argparse.Namespace, rows: list[dict], table: Callable[[list[dict], TextIO], None], out: TextIO) -> None:
    """The rows as ``--format`` asks, on ``out`` (standard error when ``-o -`` took stdout)."""
    if args.format == "json":
        print(json.dumps(rows, indent=1), file=out)
    else:
        table(rows, out)


def _print_table(rows: list[dict], out: TextIO) -> None:
    columns = ["method", "k", "B", "tok/s", "no-SD tok/s", "speedup", "α", "τ",
               "prefill/draft/verify/sample/other %", "greedy =="]
    lines = []
    for row in rows:
        total = sum(row[p] for p in SPLIT) or 1.0
        split = "/".join(f"{100 * row[p] / total:.0f}" for p in SPLIT)
        lines.append([row["method"], row["k"], row["batch_size"], row["throughput"], row["baseline_throughput"],
                      row["speedup"], row["acceptance_rate"], row["mean_acceptance_length"], split,
                      row["greedy_match"]])
    print_table("throughput = generated tokens/s; speedup = SD / no-SD; SD time split in %", columns, lines, file=out)


OPENAI_COLUMNS = (
    ("method", "method"), ("k", "k"), ("B", "batch_size"), ("tok/s", "throughput"),
    ("no-SD tok/s", "baseline_throughput"), ("speedup", "speedup"), ("α", "acceptance_rate"),
    ("τ", "mean_acceptance_length"), ("TTFT p50 s", "ttft_p50_s"), ("TPOT p50 s", "tpot_p50_s"),
    ("no-SD TPOT p50 s", "baseline_tpot_p50_s"),
)


def _print_openai_table(rows: list[dict], out: TextIO) -> None:
    print_table("throughput = output tokens/s at concurrency B; speedup = SD / no-SD",
                [header for header, _ in OPENAI_COLUMNS], [[row.get(key) for _, key in OPENAI_COLUMNS] for row in rows],
                file=out)
    for name in ("verified", "baseline_verified"):
        for text in dict.fromkeys(row[name] for row in rows if row.get(name)):
            print(f"{'no-SD server' if name.startswith('baseline') else 'SD server'}: {text}", file=out)
    if any(row.get("learns_across_requests") for row in rows):
        print("note: learns_across_requests: the proposer learns from earlier requests and saw these prompts "
              "before they were measured; acceptance and speedup may be inflated", file=out)
