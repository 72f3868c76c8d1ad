"""`specscope zoo train` and `specscope zoo evaluate`: the bundled models.

``zoo train -o DIR`` trains the target, draft, EAGLE, MTP and EAGLE-3 heads from scratch on the
synthetic tasks (seeded; ``--quick``: a seconds-long smoke run with tiny shapes) and writes
them as Hugging Face directories. To rebuild the shipped models:
``specscope zoo train -o src/specscope/data/zoo``. ``zoo evaluate`` prints per-task exact
match and distinct-4 of target and draft and each proposer's α and τ.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path


def register(subparsers) -> None:
    from specscope import validate
    from specscope.fileio import check_json_output, check_output_dir
    from specscope.workloads.bundled import BUNDLED_SIZE

    count = validate.arg(validate.integer, low=1)
    parser = subparsers.add_parser("zoo", help="train or evaluate the bundled models")
    verbs = parser.add_subparsers(dest="zoo_verb", metavar="ACTION", required=True)
    train = verbs.add_parser("train", help="train target, draft, EAGLE, MTP and EAGLE-3 heads from scratch (seeded)",
                             description="Train the bundled models from scratch on the synthetic tasks (seeded), "
                                         "into -o; resumable: a rerun keeps the finished stages whose settings "
                                         "and files are unchanged, and each head the target it learned from.")
    train.add_argument("-o", "--output", type=check_output_dir, default=Path("specscope-zoo"),
                       help="folder for target/, draft/, eagle/, mtp/, eagle3/ (default %(default)s)")
    train.add_argument("--quick", action="store_true", help="tiny shapes and a few steps (a smoke test)")
    train.add_argument("--threads", type=count, help="torch CPU threads (default: the training config's)")
    train.set_defaults(run=run_train, resumes="finished stages are kept; the interrupted stage starts over")
    evaluate = verbs.add_parser("evaluate", help="accuracy, distinct-4 and each proposer's α on the bundled tasks",
                                description="Score the zoo's language models (exact match, similarity to the "
                                            "reference, distinct-4, greedy) and each proposer's α and τ with the "
                                            "target on the bundled tasks' held-out requests.")
    evaluate.add_argument("--zoo", type=Path, help="zoo folder (default: the shipped models)")
    evaluate.add_argument("--n", type=validate.arg(validate.integer, low=1, high=BUNDLED_SIZE), default=25,
                          help=f"requests per task, of the {BUNDLED_SIZE} each ships (default %(default)s)")
    evaluate.add_argument("--k", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT), default=4,
                          help=f"proposal length for α, 1..{validate.K_MAX_LIMIT} (default %(default)s)")
    evaluate.add_argument("--threads", type=count, default=1, help="torch CPU threads (default %(default)s)")
    evaluate.add_argument("-o", "--output", type=check_json_output, help="also write the results as JSON (a .json file)")
    evaluate.set_defaults(run=run_evaluate)


def run_train(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from specscope.workloads.bundled import held_out_prompts
    from specscope.zoo.config import TrainConfig
    from specscope.zoo.shipped import ZOO_MODELS
    from specscope.zoo.train import train_zoo

    config = TrainConfig.quick() if args.quick else TrainConfig()
    if args.threads:
        config = replace(config, threads=args.threads)
    summary = train_zoo(args.output, config, held_out_prompts())
    for name in ZOO_MODELS:
        print(f"{name}: final loss {summary[f'{name}_loss']:.4f}, {summary[f'{name}_seconds']:.0f} s "
              f"-> {args.output / name}" + (" (kept: trained by an earlier run)" if summary[f"{name}_kept"] else ""))
    now = sum(summary[f"{name}_seconds"] for name in ZOO_MODELS if not summary[f"{name}_kept"])
    print(f"total {sum(summary[f'{name}_seconds'] for name in ZOO_MODELS):.0f} s of training ({now:.0f} s this run)")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    import torch

    from specscope.cli._common import atomic_write_text, print_table
    from specscope.engine.config import model_fingerprint
    from specscope.methods import method
    from specscope.version import code_version
    from specscope.zoo.evaluate import proposer_engines, score_model, score_proposers
    from specscope.zoo.shipped import ZOO_DRAFTERS, ZOO_MODELS, model_dir

    torch.set_num_threads(args.threads)
    folders = {name: model_dir(name, args.zoo) for name in ZOO_MODELS}  # every model found before any is measured
    engines = proposer_engines(args.zoo, args.k)  # and every head loaded: a broken one refused before any scoring
    language_models = [name for name in ZOO_MODELS if name not in ZOO_DRAFTERS or method(name).kind == "draft model"]
    models = [score for name in language_models for score in score_model(name, args.zoo, args.n)]
    zoo = folders[ZOO_MODELS[0]].resolve().parent
    print_table(f"exact match, similarity to the reference and distinct-4 per task (greedy; the zoo in {zoo})",
                ["model", "task", "requests", "exact match", "similarity", "distinct-4", "output tokens"],
                [[s.model, s.task, s.requests, s.exact_match, s.similarity, s.distinct_4, s.mean_output_tokens]
                 for s in models])
    proposers = score_proposers(args.zoo, args.n, engines)
    print_table(f"acceptance with the zoo target (k={args.k}, greedy)",
                ["proposer", "task", "alpha", "tau", "SD output == greedy"],
                [[p.method, p.task, "-" if p.acceptance_rate is None else p.acceptance_rate,
                  "-" if p.mean_acceptance_length is None else p.mean_acceptance_length,
                  "yes" if p.greedy_match else "NO"] for p in proposers])
    if args.output:
        made = {"zoo": str(zoo), "model_files": {name: model_fingerprint(path) for name, path in folders.items()},
                "n": args.n, "k": args.k, "made_by": code_version()}  # what measured these scores
        atomic_write_text(args.output, json.dumps(
            {**made, "models": [asdict(s) for s in models], "proposers": [asdict(p) for p in proposers]}, indent=1)
            + "\n")
    return 0
