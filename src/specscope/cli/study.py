"""`specscope study`: trace, measure, fit, simulate and report — the whole study in one command."""

from __future__ import annotations

import argparse
from pathlib import Path

from specscope import validate
from specscope.cli._common import DTYPE_NAMES, batch_size_list, check_output_dir, model_dir_arg
from specscope.methods import METHODS
from specscope.study.config import BUNDLED_REQUESTS, StudyConfig

DEFAULTS_DOC = "With no --model: the bundled models and workloads"
DRAFTERS = tuple(m.name for m in METHODS if m.reference and m.needs_checkpoint)  # a --NAME DIR flag each


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = StudyConfig(Path("."), [], Path("."))
    parser = subparsers.add_parser(
        "study", help="the whole study: trace, measure, fit the cost model, simulate, report",
        description="Traces every proposer on the workloads, measures no-SD and SD throughput with the "
                    "reference engine (chains, and static trees with the tree drafter), fits the linear cost "
                    "model to the measured steps, fits a learned policy over n-gram and the fastest model "
                    "drafter and measures it, simulates every policy, and writes DIR/index.html and "
                    f"DIR/fidelity.csv (simulated vs measured speedup). {DEFAULTS_DOC}. Rerun the same command "
                    "to resume.",
    )
    parser.add_argument("--model", type=Path, help="target model directory (HF format)")
    for method in DRAFTERS:
        parser.add_argument(f"--{method}", type=Path, help=f"{method} checkpoint directory")
    parser.add_argument("--workload", type=Path, action="append", help="workload JSON Lines (repeatable)")
    parser.add_argument("--batch-sizes", type=batch_size_list, default=list(defaults.batch_sizes),
                        help=f"batch sizes measured and simulated (default {','.join(map(str, defaults.batch_sizes))})")
    count = validate.arg(validate.integer, low=1)
    parser.add_argument("--k", type=count, default=defaults.k, help=f"drafts per step in the measured runs (default {defaults.k})")
    parser.add_argument("--second-k", type=validate.arg(validate.integer, low=0), default=None,
                        help="each model drafter's chain is also measured with this many drafts, on the first workload: "
                             "two ks tell a drafter's cost per pass from its fixed cost, so the fitted cost model prices "
                             f"every k up to --k from measurement (default {defaults.second_k}, none with --k 1; 0: none)")
    parser.add_argument("--confidence-p", type=validate.arg(validate.number, low=0.0, high=1.0), default=None,
                        metavar="P", help="each model drafter's chain of --k is also measured stopped at its first draft "
                                          "below P, on the first workload: what reading each pass's probabilities costs "
                                          "is then priced, and the policy's confidence rule weighs it (default "
                                          f"{defaults.confidence_p:g}; 0: none)")
    parser.add_argument("--k-max", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT),
                        default=defaults.k_max, help=f"drafts per position in the traces (default {defaults.k_max}, at most {validate.K_MAX_LIMIT})")
    parser.add_argument("--max-tokens", type=validate.arg(validate.integer, low=2), default=defaults.max_tokens,
                        help=f"output tokens per request (default {defaults.max_tokens}; at least 2: a one-token output "
                             "takes no SD step)")
    parser.add_argument("--requests", type=count, default=None,
                        help=f"use the first N requests of each workload (bundled default: {BUNDLED_REQUESTS})")
    parser.add_argument("--replay", action="append", default=[], metavar="COST_MODEL",
                        help="also replay the traces against this cost model (repeatable), e.g. "
                             "roofline:h100:MODEL_DIR/config.json (default: with no --model, the paper's H100 fit and "
                             "an H100 roofline of the bundled target; with --model, none)")
    parser.add_argument("--threads", type=count, default=1,
                        help="torch CPU threads (default 1: the bundled models are too small to gain from more, "
                             "and threads contending with other work make timings erratic)")
    parser.add_argument("--device", default=defaults.device,
                        help=f"where the models run, traced and measured: cpu, cuda or cuda:N (default {defaults.device})")
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default=defaults.dtype,
                        help=f"the models' weights and activations (default {defaults.dtype})")
    parser.add_argument("-o", "--output", type=check_output_dir, default=Path("specscope-study"),
                        help="the study's folder (default specscope-study; rerun into it to resume)")
    parser.set_defaults(run=run, resumes=True)


def run(args: argparse.Namespace) -> int:
    import torch

    from specscope.errors import SpecscopeError
    from specscope.study.pipeline import run_study
    from specscope.workloads.jsonl import read_prompts

    if args.second_k and args.second_k >= args.k:  # the default, not below --k, is no second k (measured_second_k)
        raise SpecscopeError(f"--second-k {args.second_k}: expected below --k {args.k} (0: no second k), the chains of "
                             "--k being the study's deepest")
    if args.k > args.k_max:
        raise SpecscopeError(f"--k {args.k}: above --k-max {args.k_max} (the traces could not tell what "
                             f"{args.k} drafts accept)")
    from specscope.engine.loading import resolve_device

    resolve_device(args.device)  # before any work: a machine without it is refused in one line
    torch.set_num_threads(args.threads)
    if args.model is None:
        from specscope.study.bundled import bundled_study

        given = [f"--{name}" for name in ("workload", *DRAFTERS) if getattr(args, name)]
        if given:
            raise SpecscopeError(f"{given[0]}: only with --model (without it the study runs the bundled models on the "
                                 "bundled workloads)")
        config = bundled_study(args.output)
    else:
        if not args.workload:
            raise SpecscopeError("--workload: required with --model")
        drafters = {m: model_dir_arg(getattr(args, m)) for m in DRAFTERS if getattr(args, m)}
        stems = [w.name.removesuffix(".jsonl") for w in args.workload]
        if len(set(stems)) != len(stems):
            raise SpecscopeError(f"--workload: two workloads named {next(s for s in stems if stems.count(s) > 1)!r}; "
                                 "a study names its results by the workload's file name")
        config = StudyConfig(model_dir_arg(args.model), list(args.workload), args.output, drafters)
    config.batch_sizes, config.k, config.k_max = tuple(args.batch_sizes), args.k, args.k_max
    if args.second_k is not None:
        config.second_k = args.second_k
    if args.confidence_p is not None:
        config.confidence_p = args.confidence_p
    config.threads, config.device, config.dtype = args.threads, args.device, args.dtype
    config.max_tokens = args.max_tokens
    if args.requests is not None:
        config.requests = args.requests
    counts = {workload: len(read_prompts(workload)) for workload in config.workloads}
    for workload, prompts in counts.items():  # its measured batches fill with distinct requests
        requests = min(prompts, config.requests or prompts)
        if max(config.batch_sizes) > requests:
            raise SpecscopeError(f"--batch-sizes: {max(config.batch_sizes)} is above the {requests} requests the study "
                                 f"uses of {workload} (a batch of distinct requests cannot be filled)")
    if config.requests is not None and counts and config.requests >= max(counts.values()):
        config.requests = None  # every request of every workload: the same study as one that names no count
    twice = validate.first_repeat(args.replay)
    if twice is not None:  # replayed twice, its table written twice over
        raise SpecscopeError(f"--replay {twice}: given twice; give each cost model once")
    config.replay_cost_models = tuple(args.replay) or config.replay_cost_models
    from specscope.costmodel.registry import resolve_cost_model

    for spec in args.replay:  # a bad one is refused before the study's hours of work
        resolve_cost_model(spec)
    run_study(config, print)
    return 0
