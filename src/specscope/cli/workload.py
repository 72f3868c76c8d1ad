"""`specscope workload make`: write a workload file from one of the paper's datasets or a
bundled task.

``specscope workload make gsm8k --source test.jsonl --n 300 --tokenizer MODEL_DIR -o w.jsonl``
writes JSON Lines ``{"id", "prompt", "reference"}`` (``prompt_token_ids`` instead of ``prompt``
with ``--token-ids``). With ``--tokenizer`` the model directory's chat template is applied (see
:mod:`specscope.workloads.chat`; ``--no-chat-template`` keeps the raw prompt) and ShareGPT
lengths are counted in its tokens. Bundled tasks (``code``, ``math``, ``summary``, ``chat``)
need no ``--source``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_N = 300  # the paper sampled 300 requests per dataset


def register(subparsers) -> None:
    from specscope import validate
    from specscope.fileio import check_jsonl_output
    from specscope.workloads.datasets import DATASETS, PAPER_SEED
    from specscope.workloads.tasks import TASKS

    parser = subparsers.add_parser("workload", help="make workload files (datasets, bundled tasks)")
    verbs = parser.add_subparsers(dest="workload_verb", metavar="ACTION", required=True)
    make = verbs.add_parser(
        "make", help="sample a dataset into a workload JSON Lines file",
        description="Sample one of the paper's datasets (from a local file in its own format, or "
                    "the hub) or a bundled task into a workload file.",
    )
    make.add_argument("dataset", choices=sorted(DATASETS) + list(TASKS), metavar="DATASET",
                      help=f"one of: {', '.join(sorted(DATASETS))} (need --source); bundled: {', '.join(TASKS)}")
    make.add_argument("--source", help="a local file in the dataset's format, or 'hub' (the datasets library)")
    make.add_argument("--n", type=validate.arg(validate.integer, low=1), default=DEFAULT_N, help="requests to sample (all when fewer; default %(default)s)")
    make.add_argument("--seed", type=validate.arg(validate.seed), default=PAPER_SEED, help="sampling seed (default %(default)s, as the paper)")
    make.add_argument("--tokenizer", type=Path, metavar="DIR",
                      help="model directory: chat template and tokenizer.json (token counts, --token-ids)")
    make.add_argument("--no-chat-template", action="store_true", help="with --tokenizer: keep the raw prompt")
    make.add_argument("--token-ids", action="store_true", help="write prompt_token_ids (needs --tokenizer)")
    make.add_argument("-o", "--output", type=check_jsonl_output, required=True, help="workload file to write (.jsonl)")
    make.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.cli._common import atomic_write_text, refuse_clashes
    from specscope.fileio import is_stdout
    from specscope.tracing.settings import forget_settings
    from specscope.errors import SpecscopeError
    from specscope.workloads.bundled import bundled_prompts
    from specscope.workloads.chat import ChatTemplate, load_chat_template
    from specscope.workloads.datasets import DATASETS, load_prompts, to_rows
    from specscope.workloads.jsonl import read_workload

    tokenizer = None
    template = ChatTemplate(None)
    if args.tokenizer is not None:
        from specscope.engine.loading import load_tokenizer

        if not args.tokenizer.is_dir():
            raise SpecscopeError(f"--tokenizer: {args.tokenizer} is not a directory (a model directory is expected)")
        tokenizer = load_tokenizer(args.tokenizer)
        if tokenizer is None and (args.token_ids or args.dataset == "sharegpt"):
            raise SpecscopeError(f"--tokenizer: {args.tokenizer}/tokenizer.json not found")
        if not args.no_chat_template:
            template = load_chat_template(args.tokenizer)
        if tokenizer is None and template.source is None:  # a mistyped folder would drop the template unsaid
            raise SpecscopeError(f"--tokenizer: {args.tokenizer} holds neither a tokenizer.json nor a chat template")
    if args.token_ids and tokenizer is None:
        raise SpecscopeError("--token-ids: needs --tokenizer DIR with a tokenizer.json")
    if args.no_chat_template and args.tokenizer is None:  # without a tokenizer no template applies: the flag says nothing
        raise SpecscopeError("--no-chat-template: applies with --tokenizer DIR (without it prompts are kept raw)")
    if args.dataset in DATASETS:
        if not args.source:
            raise SpecscopeError(f"--source: {args.dataset} needs a local file in its format, or 'hub'")
        refuse_clashes({"-o": args.output}, [args.source])
        count = (lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)) if tokenizer else None
        prompts, report = load_prompts(args.dataset, args.source, args.n, args.seed, count)
        note = report.summary()
    else:
        if args.source not in (None, "bundled"):
            raise SpecscopeError(f"--source: the bundled task {args.dataset} takes no source")
        prompts = bundled_prompts(args.dataset, args.n, args.seed)
        note = f"bundled task {args.dataset}"
    rows = to_rows(prompts, template, tokenizer if args.token_ids else None)
    lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in rows]
    atomic_write_text(args.output, "".join(lines))
    if not is_stdout(args.output):
        forget_settings(args.output)
    if tokenizer is not None and not is_stdout(args.output):
        read_workload(args.output, tokenizer)  # the engine's reader accepts what was written
    shown = "no chat template" if template.source is None else f"chat template of {args.tokenizer}"
    said = sys.stderr if is_stdout(args.output) else sys.stdout  # '-': the workload is standard output
    print(f"wrote {len(lines)} requests to {args.output} ({note}; {shown})", file=said)
    if tokenizer is not None and template.source is not None and not args.token_ids and \
            tokenizer.encode("x").ids != tokenizer.encode("x", add_special_tokens=False).ids:
        print(f"note: {args.tokenizer}'s tokenizer adds special tokens when it encodes text, so a text "
              "prompt that already holds the chat template gets them twice; use --token-ids", file=said)
    if len(lines) < args.n:
        print(f"note: {args.n} requested, only {len(lines)} available", file=said)
    return 0
