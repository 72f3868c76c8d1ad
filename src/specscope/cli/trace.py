"""`specscope trace`: teacher-forced acceptance traces of every proposer on a workload."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specscope import validate
from specscope.cli._common import check_output_file, refuse_clashes
from specscope.fingerprint import file_sha256
from specscope.written import record_file
from specscope.distributed.cluster import ray_address
from specscope.errors import SpecscopeError
from specscope.trace.schema import DRAFT_PROBS
from specscope.trees import parse_tree_list


def trace_output(text: str) -> Path:
    """``-o`` of ``trace``: a regular file (records are appended to it and resumed), checked
    before any work starts."""
    path = check_output_file(text)
    if str(path) == "-" or (path.exists() and not path.is_file()):
        raise SpecscopeError(f"{text}: expected a regular file (traces are appended to it and resumed)")
    return path


def _name(text: str) -> str:
    """``--dataset``: a name the records carry (blank, they would name no dataset)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a non-blank name, got {text!r}")
    return text


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
    positive = validate.arg(validate.integer, low=1)
    parser.add_argument("--k-max", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT), default=20,
                        help="the most drafts a proposer offers per position (acc_len at most k_max + 1)")
    parser.add_argument("--max-tokens", type=positive, default=256, help="output tokens per request")
    parser.add_argument("--batch-size", type=validate.arg(validate.integer, low=1, high=validate.MAX_BATCH_SIZE),
                        default=8, help="requests traced together")
    parser.add_argument("--dataset", type=_name, default=None,
                        help="dataset name in the records (default: workload file stem)")
    parser.add_argument("--min-n", type=positive, help="shortest n-gram matched (default: the n-gram proposer's)")
    parser.add_argument("--max-n", type=positive, help="longest n-gram matched (default: the n-gram proposer's)")
    parser.add_argument("--dtype", default="float32", help="the models' weights and activations (float32, bfloat16, float16)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--trees", type=validate.arg(parse_tree_list), default=(),
                        help="comma list of static trees (2x2x1,4x2x2x1): record each model proposer's "
                             "tree_rank deep enough to replay them (n-gram proposes no tree)")
    parser.add_argument("--draft-probs", type=validate.arg(validate.integer, low=0, high=validate.K_MAX_LIMIT),
                        default=None,
                        help=f"drafts per position whose probability a model proposer's records keep, at most "
                             f"k_max (default: {DRAFT_PROBS}, or k_max if fewer; a confidence:p policy stops no "
                             "deeper; they are most of a trace's bytes)")
    parser.add_argument("--threads", type=positive, default=None, help="torch CPU threads")
    parser.add_argument("-o", "--output", required=True, type=trace_output,
                        help="trace file (JSON Lines); its settings are kept in OUTPUT.settings.json")
    parser.add_argument("--ray", metavar="ADDRESS", type=ray_address,
                        help="shard the batches over model replicas on the Ray cluster at ADDRESS (local, auto, "
                             "HOST:PORT or ray://HOST:PORT); this process merges them into OUTPUT in order")
    parser.add_argument("--ray-workers", type=positive, default=None,
                        help="model replicas with --ray (default: one per GPU with --device cuda, else per CPU)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start over: discard traces in OUTPUT (needed when the settings changed)")
    parser.set_defaults(run=run, resumes=True)


def run(args: argparse.Namespace) -> int:
    import torch

    from specscope.cli._common import model_dir_arg
    from specscope.distributed.trace import ray_batch_mapper
    from specscope.engine.config import ModelConfig
    from specscope.engine.proposer_api import NGRAM_MAX_N, NGRAM_MIN_N
    from specscope.engine.loading import load_tokenizer, parse_device, parse_dtype, resolve_device
    from specscope.tracing.run import ProposerSpec, trace_here, trace_workload, tree_depth
    from specscope.workloads.jsonl import read_workload

    if args.threads:
        torch.set_num_threads(args.threads)
    min_n, max_n = args.min_n or NGRAM_MIN_N, args.max_n or NGRAM_MAX_N  # one given: the other's default
    if min_n > max_n:  # an empty range: every n-gram acc_len would be 1
        default = "" if args.min_n and args.max_n else f" ({'--max-n' if args.min_n else '--min-n'}'s default)"
        raise SpecscopeError(f"--min-n {min_n} is above --max-n {max_n}{default}: no n-gram would match")
    if args.draft_probs is not None and args.draft_probs > args.k_max:
        raise SpecscopeError(f"--draft-probs {args.draft_probs}: at most --k-max ({args.k_max}), the drafts a position has")
    if args.ray_workers and not args.ray:
        raise SpecscopeError("--ray-workers: needs --ray ADDRESS")
    refuse_clashes({"-o": args.output}, [args.workload])  # --overwrite would empty the workload it reads
    specs = ProposerSpec.parse_list(args.proposers)
    if tree_depth(specs, args.trees) and any(spec.lookup for spec in specs):  # refused before any model is read
        print("note: --trees: n-gram proposes no tree; its records get no tree_rank", file=sys.stderr)
    parse_dtype(args.dtype)  # here, not on a Ray worker: one line, before anything is written
    (parse_device if args.ray else resolve_device)(args.device)  # a cluster's workers may have the GPUs
    model = model_dir_arg(args.model)
    for spec in specs:
        if spec.path is not None:
            model_dir_arg(spec.path)
    requests = read_workload(args.workload, load_tokenizer(model), ModelConfig.from_dir(model).vocab_size)
    n_range = {name: value for name, value in (("min_n", args.min_n), ("max_n", args.max_n)) if value is not None}
    written = trace_workload(model, specs, requests, Path(args.output), k_max=args.k_max,
                             max_tokens=args.max_tokens, batch_size=args.batch_size,
                             dataset=args.dataset or Path(args.workload).stem, dtype=args.dtype,
                             device=args.device, overwrite=args.overwrite, trees=args.trees, **n_range,
                             **({} if args.draft_probs is None else {"draft_probs": args.draft_probs}),
                             map_batches=ray_batch_mapper(args.ray, args.ray_workers) if args.ray else trace_here)
    if Path(args.output).is_file():  # a later run may replace the trace it made (a device is written as ever)
        record_file(Path(args.output), file_sha256(Path(args.output)))
    print(f"traced {written} requests into {args.output}"
          + (f" ({len(requests) - written} were already there)" if written < len(requests) else ""))
    return 0
