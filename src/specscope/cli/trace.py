"""`specscope trace`: teacher-forced acceptance traces of every proposer on a workload."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trace", help="record per-position acceptance of proposers on a workload (teacher-forced)",
        description="The target's greedy output is generated once; at every output position each "
                    "proposer proposes k_max tokens, and acc_len/draft_len are recorded (n-gram in one "
                    "linear pass; model proposers roll out every position at once over one shared "
                    "prefix cache). Resumable: rerun the same command to continue.",
    )
    parser.add_argument("--model", required=True, help="target model directory (HF format)")
    parser.add_argument("--proposers", required=True,
                        help="comma list: ngram, draft=DIR, eagle=DIR, eagle3=DIR, mtp=DIR")
    parser.add_argument("--workload", required=True, help="JSON Lines of {id, prompt} or {id, prompt_token_ids}")
    parser.add_argument("--k-max", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8, help="requests traced together")
    parser.add_argument("--dataset", default=None, help="dataset name in the records (default: workload file stem)")
    parser.add_argument("--min-n", type=int, help="shortest n-gram matched (default: the n-gram proposer's)")
    parser.add_argument("--max-n", type=int, help="longest n-gram matched (default: the n-gram proposer's)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("-o", "--output", required=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from specscope.cli._common import model_dir_arg
    from specscope.engine.loading import load_tokenizer
    from specscope.errors import SpecscopeError
    from specscope.tracing.run import ProposerSpec, trace_workload
    from specscope.workloads.jsonl import read_workload

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.k_max < 1 or args.max_tokens < 1 or args.batch_size < 1:
        raise SpecscopeError("--k-max, --max-tokens and --batch-size must be positive")
    model = model_dir_arg(args.model)
    specs = ProposerSpec.parse_list(args.proposers)
    requests = read_workload(args.workload, load_tokenizer(model))
    n_range = {name: value for name, value in (("min_n", args.min_n), ("max_n", args.max_n)) if value is not None}
    written = trace_workload(model, specs, requests, Path(args.output), k_max=args.k_max,
                             max_tokens=args.max_tokens, batch_size=args.batch_size,
                             dataset=args.dataset or Path(args.workload).stem, dtype=args.dtype,
                             device=args.device, **n_range)
    print(f"traced {written} requests into {args.output}"
          + (f" ({len(requests) - written} were already there)" if written < len(requests) else ""))
    return 0
