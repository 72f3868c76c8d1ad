"""`specscope memory`: weight and KV-cache bytes of a target and its drafter, from configs alone."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from specscope.costmodel.memory import (
    DTYPE_BYTES,
    EAGLE3_DRAFT_VOCAB_SIZE,
    MEMORY_MODELS,
    MemoryReport,
)
from specscope.errors import SpecscopeError
from specscope.methods import of_kind
from specscope.reading import read_json_object

[DRAFT_MODEL] = of_kind("draft model")  # --draft CONFIG; each head is a flag of its own name
HEAD = re.compile(r"eagle|mtp|medusa", re.IGNORECASE)  # a config.json architecture naming a speculative head


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "memory",
        help="weight and KV bytes per token of a target and its drafter",
        description=(
            "Weight bytes and KV-cache bytes per token of a target and its drafter, and the "
            "drafter's overhead in %. CONFIG is a preset name or a Hugging Face config.json "
            "(or a directory holding one). EAGLE / EAGLE-3 / MTP heads are derived from the "
            "target's shape; tensors a head shares with the target (embedding, LM head) cost "
            "nothing extra."
        ),
    )
    parser.add_argument("--target", required=True, metavar="CONFIG", help="the target model")
    drafter = parser.add_mutually_exclusive_group()
    drafter.add_argument(f"--{DRAFT_MODEL.name}", dest="draft", metavar="CONFIG",
                         help=MEMORY_MODELS[DRAFT_MODEL.memory_model].description)
    for head in of_kind("head"):
        drafter.add_argument(f"--{head.name}", dest="head", action="store_const", const=head.memory_model,
                             help=MEMORY_MODELS[head.memory_model].description)
    parser.add_argument(
        "--dtype-bytes",
        type=int,
        choices=(1, 2, 4),
        default=None,
        help=f"bytes per weight and per cached value (default: weights as a server loads each checkpoint — FP8 "
             f"layers at 1 byte, else {DTYPE_BYTES}, a float32 one too, as vLLM's --dtype auto serves it in 16 bits; "
             f"caches and heads at {DTYPE_BYTES})",
    )
    parser.add_argument(
        "--draft-vocab-size",
        type=int,
        metavar="N",
        help=f"the EAGLE-3 head's draft vocabulary (default {EAGLE3_DRAFT_VOCAB_SIZE}, at most the target's)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specscope.costmodel.memory import memory_report
    from specscope.costmodel.presets import ModelShape
    from specscope.costmodel.roofline import check_draft_vocab

    for option, given in (("--target", args.target), ("--draft", args.draft)):
        _refuse_a_head(option, given)
    target = ModelShape.resolve(args.target)
    draft = ModelShape.resolve(args.draft) if args.draft else None
    if draft is not None:
        check_draft_vocab(target, draft)
    kind = DRAFT_MODEL.memory_model if draft is not None else args.head
    draft_vocab_size = args.draft_vocab_size  # None: the published heads', at most the target's
    if args.draft_vocab_size is not None:
        if kind is None or not MEMORY_MODELS[kind].draft_vocab:
            with_vocab = [f"--{h.name}" for h in of_kind("head") if MEMORY_MODELS[h.memory_model].draft_vocab]
            raise SpecscopeError(f"--draft-vocab-size: applies to {' '.join(with_vocab)} only")
        if not 0 < args.draft_vocab_size <= target.vocab_size:
            raise SpecscopeError(
                f"--draft-vocab-size: expected 1..{target.vocab_size} (the target's vocabulary), "
                f"got {args.draft_vocab_size}"
            )
    report = memory_report(target, kind, draft, args.dtype_bytes, draft_vocab_size)
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=1))
    else:
        _print_table(report)
    if kind is not None and MEMORY_MODELS[kind].draft_vocab and draft_vocab_size is None \
            and target.vocab_size < EAGLE3_DRAFT_VOCAB_SIZE:
        print(f"note: the head's draft vocabulary is the target's {target.vocab_size} tokens, not the published "
              f"heads' {EAGLE3_DRAFT_VOCAB_SIZE} (--draft-vocab-size sets it)", file=sys.stderr)
    return 0


def _refuse_a_head(option: str, given: str | None) -> None:
    """Refuse a config.json (or its folder) whose architectures name a speculative head (or, as
    --draft, that declares an MTP module, as an MTP head's folder does): counted as
    a whole model, its shared embedding and LM head were counted again, and its KV for every layer
    of a model it is not (a head is derived from the target's shape: --eagle, --eagle3, --mtp)."""
    path = Path(given) / "config.json" if given and Path(given).is_dir() else Path(given or "")
    if not given or not path.is_file():
        return  # a preset, or none: ModelShape.resolve says what is wrong
    config = read_json_object(path)
    names = config.get("architectures") or []
    head = next((n for n in names if isinstance(n, str) and HEAD.search(n)), None)
    if head is None and option == "--draft" and config.get("num_nextn_predict_layers"):
        head = "num_nextn_predict_layers: an MTP module's folder holds its target's config"  # a target's MTP: --mtp
    if head is not None:
        raise SpecscopeError(f"{option} {given}: its config.json names a speculative head ({head}), not a model: "
                             "give the target with --target and the head as --eagle, --eagle3 or --mtp")


def _print_table(report: MemoryReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"memory at {report.dtype_bytes} bytes per value" if report.dtype_bytes else
                  "memory: weights as a server loads them (FP8 layers 1 byte, else 2, float32 too), caches and heads at 2")
    columns = ("role", "model", "params", "weight bytes", "GiB", "KV bytes/token", "KV layers")
    for column in columns + ("shares with target",):
        table.add_column(column, no_wrap=True, justify="right" if column in columns[2:] else "left")
    rows = [("target", report.target)]
    if report.drafter is not None:
        rows.append(("drafter", report.drafter))
    for role, footprint in rows:
        table.add_row(
            role,
            footprint.name,
            f"{footprint.params:,}",
            f"{footprint.weight_bytes:,}",
            f"{footprint.weight_bytes / 2**30:.2f}",
            f"{footprint.kv_bytes_per_token:,}",
            str(footprint.num_kv_layers),
            ", ".join(footprint.shared) or "-",
        )
    console = Console()
    console.width = max(console.width, Console(width=1000).measure(table).maximum)
    console.print(table)
    if report.drafter is not None:
        console.print(
            f"drafter overhead: weights {report.weight_overhead_pct:.3f}%, "
            f"KV per token {report.kv_overhead_pct:.3f}%"
        )
