"""`specscope serve`: the reference engine behind an OpenAI-compatible API with /metrics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specscope import validate
from specscope.cli._common import DTYPE_NAMES, checkpoint_files, refuse_overwriting, refuse_unused_draft
from specscope.errors import SpecscopeError
from specscope.fileio import check_output_file, open_appended
from specscope.reading import first_line
from specscope.methods import NO_SD, check_confidence, names
from specscope.policy.learned import load_policy, policy_notes
from specscope.serve.engine_loop import DEFAULT_MAX_WAITING
from specscope.serve.protocol import DEFAULT_PORT
from specscope.trees import parse_tree

ENGINE_FLAGS = ("k", "max_batch_size", "max_seq_len", "dtype", "device", "tree", "confidence")  # omitted: its defaults


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the reference engine over an OpenAI-compatible HTTP API",
        description=(
            "Serve a Hugging Face model directory with the reference engine: POST /v1/completions "
            "and /v1/chat/completions (streaming or not; chat uses the model's chat template), "
            "GET /v1/models[/ID], /health and /metrics (vLLM's counter names, including the "
            "spec-decode counters). Requests are batched continuously up to --max-batch-size. "
            "Listens on 127.0.0.1 unless told otherwise."
        ),
    )
    parser.add_argument(
        "--model", required=True, type=Path, metavar="DIR", help="target: config.json + *.safetensors"
    )
    parser.add_argument(
        "--method", help=f"proposer: {', '.join(names('specscope'))} ({NO_SD}: no SD, the default)"
    )
    parser.add_argument("--draft", type=Path, metavar="DIR", help="draft model or head checkpoint directory")
    parser.add_argument("--k", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT),
                        help=f"proposal length k, 1..{validate.K_MAX_LIMIT} (default: the engine's)")
    parser.add_argument(
        "--tree",
        type=validate.arg(parse_tree),
        metavar="SHAPE",
        help="verify a static token tree each step instead of a chain of --k: branching per depth "
        "(2x2x1) or a list of paths ('[(0,), (1,), (0, 0)]'); methods draft, eagle, eagle3, mtp",
    )
    parser.add_argument(
        "--confidence", type=validate.arg(validate.number, low=0.0, low_open=True, high=1.0), metavar="P",
        help="the model drafter ends each sequence's proposal at its first draft whose probability is below P "
             "(that draft included), --k at most (`simulate --policies confidence:P:K` replays it)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port (default %(default)s; 0 = any free port)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        help="most requests decoding at once (default: the engine's)",
    )
    parser.add_argument(
        "--max-seq-len",
        type=int,
        help="max_model_len: most prompt + output tokens per request (default: the model's "
        "max_position_embeddings; a larger value is refused)",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=DEFAULT_MAX_WAITING,
        help="queued requests beyond the batch before answering 503 (default %(default)s)",
    )
    parser.add_argument("--served-model-name", help="model id in the API (default: the directory's name)")
    parser.add_argument(
        "--dtype", choices=DTYPE_NAMES, help="weights (default: the engine's)"
    )
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: the engine's)")
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="a learned policy (`specscope policy fit`): the engine picks the proposer among its methods "
        "and k at every step for every sequence, by the rule of the count of sequences it decides; an admission "
        "gate commits requests by the rule of --max-num-seqs, the batch size its slots hold (--draft: its "
        "model drafter's checkpoint; not with --method, --k or --tree)",
    )
    parser.add_argument(
        "--step-records",
        type=Path,
        metavar="FILE",
        help="append every engine step's record (phase timings and load, JSON Lines) to FILE, "
        "for `specscope costmodel fit FILE`: the engine's own view of the steps a sweep times",
    )
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's choice)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.model.is_dir():
        raise SpecscopeError(f"--model: {args.model} is not a directory")
    if args.served_model_name is not None and not args.served_model_name.strip():
        raise SpecscopeError(f"--served-model-name: expected a non-blank name, got {args.served_model_name!r}")
    for name in ("k", "max_batch_size", "max_waiting", "threads", "max_seq_len"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SpecscopeError(f"--{name.replace('_', '-')}: expected a positive integer, got {value}")
    if not 0 <= args.port <= 65535:
        raise SpecscopeError(f"--port: expected 0..65535, got {args.port}")
    if args.max_seq_len is not None:  # before the model loads, naming the flag (the engine's check names none)
        from specscope.engine.config import ModelConfig

        limit = ModelConfig.from_dir(args.model).max_position_embeddings
        if limit is not None and args.max_seq_len > limit:
            raise SpecscopeError(f"--max-seq-len {args.max_seq_len}: exceeds the model's max_position_embeddings "
                                 f"({limit})")
    policy = None
    if args.policy is not None:
        given = [flag for flag, value in (("--method", args.method is not None), ("--k", args.k is not None),
                                          ("--tree", args.tree is not None),
                                          ("--confidence", args.confidence is not None)) if value]
        if given:
            raise SpecscopeError(f"{given[0]}: not used with --policy (the policy chooses the method and k)")
        policy = load_policy(args.policy)
        policy.drafter(args.draft)  # a bad file or a missing checkpoint: before the model loads
        from specscope.engine.config import model_fingerprint

        for note in policy_notes(policy, None, args.model, args.draft, model_fingerprint):
            print(f"note: {note}", file=sys.stderr)
    else:
        refuse_unused_draft(args.draft, args.method)
    if args.k is not None and args.method in (None, NO_SD) and args.policy is None:
        raise SpecscopeError(f"--k: only used with an SD --method (without one, {NO_SD}, nothing is proposed)")
    if args.confidence is not None and args.policy is None:  # refused before the model loads
        check_confidence(args.confidence, args.method or NO_SD, args.tree and args.tree.name)
    if args.tree is not None and args.k is not None:
        raise SpecscopeError(f"--k: not used with --tree (the tree {args.tree.name} drafts {args.tree.depth} deep)")
    if args.step_records is not None:  # refused before a model is loaded; opened once it is
        try:
            check_output_file(args.step_records)
        except SpecscopeError as error:
            raise SpecscopeError(f"--step-records: {error}") from None
        inputs = [*checkpoint_files(args.model, args.draft), *([args.policy] if args.policy else [])]
        refuse_overwriting(args.step_records, inputs, "--step-records")  # appended to: it would corrupt them
        _refuse_foreign(Path(args.step_records))
    import torch

    from specscope.assemble import load_engine
    from specscope.workloads.chat import load_chat_template
    from specscope.serve.server import create_server

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    given = {name: getattr(args, name) for name in ENGINE_FLAGS if getattr(args, name) is not None}
    chat_template = load_chat_template(args.model)
    engine, tokenizer = load_engine(args.model, method=args.method or NO_SD, draft_dir=args.draft, policy=args.policy,
                                    **given)
    name = args.served_model_name or args.model.resolve().name
    records = open_appended(args.step_records, "--step-records") if args.step_records is not None else None
    server = create_server(engine, tokenizer, name, args.host, args.port, args.max_waiting, chat_template, records)
    proposal = "" if engine.method == NO_SD else f", tree {engine.tree.name}" if engine.tree is not None else \
        f", k={engine.k}" if engine.confidence is None else f", k ≤ {engine.k}, confidence {engine.confidence!r}"
    method = policy.label + f", k ≤ {engine.k}" if policy is not None else engine.method + proposal
    print(
        f"specscope serve: {name} ({method}, max batch {engine.max_batch_size}, "
        f"max_model_len {engine.max_seq_len}, chat template {'yes' if chat_template else 'no'}) "
        f"on {server.url}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if records is not None:
            records.close()
    return 0


def _refuse_foreign(path: Path) -> None:
    """``--step-records`` is appended to: an existing file must be empty or hold step records (a
    workload or another file given by mistake would get lines it cannot read)."""
    if not path.is_file():
        return
    try:
        first = first_line(path)
    except OSError as error:
        raise SpecscopeError(f"--step-records: {path}: cannot read ({error.strerror or error})") from None
    if first is None:
        return
    try:
        record = json.loads(first[1])
    except (ValueError, RecursionError):
        record = None
    if not (isinstance(record, dict) and {"step", "tokens_verified", "tokens_emitted"} <= record.keys()):
        raise SpecscopeError(f"--step-records: {path}:{first[0]}: exists and holds no step records; they are "
                             "appended only to a new file or to earlier step records")
    _drop_half_line(path)


def _drop_half_line(path: Path) -> None:
    """Cut a half-written last line off step records (a server stopped while writing one): the
    next record would be glued to it, and every record behind an unreadable line."""
    with open(path, "rb+") as handle:
        size = end = handle.seek(0, 2)
        while end > 0:  # back, a chunk at a time, to the end of the last whole line
            start = max(0, end - (1 << 16))
            handle.seek(start)
            cut = handle.read(end - start).rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        if end == size:  # it ends with a newline
            return
        handle.seek(end)
        try:  # a whole record that lacks only its newline keeps it
            whole = isinstance(json.loads(handle.read()), dict)
        except ValueError:
            whole = False
        if whole:
            handle.write(b"\n")
            return
        handle.truncate(end)
    print(f"note: --step-records: {path}: dropped its half-written last line ({size - end} bytes)", file=sys.stderr)
