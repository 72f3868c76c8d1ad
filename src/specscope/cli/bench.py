"""`specscope bench`: measured no-SD vs SD throughput at several batch sizes on one workload."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from specscope.backends import BATCHING, BENCH_BACKENDS, BenchConfig
from specscope.backends.openai.bench import add_openai_bench_arguments
from specscope.cli._common import atomic_write_text, int_list, print_table, write_rows
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
        "--k", type=int, default=DEFAULTS["k"], help="proposal length k (default %(default)s)"
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
        type=int,
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
        "--temperature", type=float, default=DEFAULTS["temperature"], help="0 = greedy (default)"
    )
    parser.add_argument("--top-p", type=float, default=DEFAULTS["top_p"])
    parser.add_argument("--top-k", type=int, default=DEFAULTS["top_k"])
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="per-request sampling seed")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=DEFAULTS["dtype"])
    parser.add_argument(
        "--device", default=DEFAULTS["device"], help="cpu, cuda or cuda:N (default %(default)s)"
    )
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULTS["repeats"],
        help="runs of no-SD and SD per batch size, the two in lockstep; the row is the run with the "
             "median speedup (default %(default)s)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", type=Path, help="write the rows to .json or .csv")
    parser.add_argument("--records", type=Path, help="write per-step records (JSON Lines)")
    add_openai_bench_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.backends import get_backend

    if args.backend == OPENAI:
        return _run_openai(args)
    if args.model is None:
        raise SpecscopeError("--model: required with --backend reference")
    backend = get_backend(args.backend)
    if args.k < 1 or args.max_tokens < 1 or args.repeats < 1:
        raise SpecscopeError("--k, --max-tokens and --repeats: expected positive integers")
    if args.threads is not None:
        if args.threads < 1:
            raise SpecscopeError(f"--threads: expected a positive integer, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    from specscope.engine.sampling import SamplingParams

    SamplingParams(args.temperature, args.top_p, args.top_k, args.seed)  # validates
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
    if args.format == "json":
        print(json.dumps(result.rows, indent=1))
    else:
        _print_table(result.rows)
    return 0


def _run_openai(args: argparse.Namespace) -> int:
    from specscope.backends.openai.bench import run_openai_bench

    rows = run_openai_bench(args)
    if args.output:
        write_rows(args.output, rows)
    if args.format == "json":
        print(json.dumps(rows, indent=1))
    else:
        _print_openai_table(rows)
    return 0


def _print_table(rows: list[dict]) -> None:
    columns = ["method", "k", "B", "tok/s", "no-SD tok/s", "speedup", "α", "τ",
               "prefill/draft/verify/sample/other %", "greedy =="]
    lines = []
    for row in rows:
        total = sum(row[p] for p in SPLIT) or 1.0
        split = "/".join(f"{100 * row[p] / total:.0f}" for p in SPLIT)
        lines.append([row["method"], row["k"], row["batch_size"], row["throughput"], row["baseline_throughput"],
                      row["speedup"], row["acceptance_rate"], row["mean_acceptance_length"], split,
                      row["greedy_match"]])
    print_table("throughput = generated tokens/s; speedup = SD / no-SD; SD time split in %", columns, lines)


OPENAI_COLUMNS = (
    ("method", "method"), ("k", "k"), ("B", "batch_size"), ("tok/s", "throughput"),
    ("no-SD tok/s", "baseline_throughput"), ("speedup", "speedup"), ("α", "acceptance_rate"),
    ("τ", "mean_acceptance_length"), ("TTFT p50 s", "ttft_p50_s"), ("TPOT p50 s", "tpot_p50_s"),
    ("no-SD TPOT p50 s", "baseline_tpot_p50_s"),
)


def _print_openai_table(rows: list[dict]) -> None:
    print_table("throughput = output tokens/s at concurrency B; speedup = SD / no-SD",
                [header for header, _ in OPENAI_COLUMNS], [[row.get(key) for _, key in OPENAI_COLUMNS] for row in rows])
