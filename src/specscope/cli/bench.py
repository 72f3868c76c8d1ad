"""`specscope bench`: measured no-SD vs SD throughput at several batch sizes on one workload."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import TextIO

from specscope import validate
from specscope.analysis.paired import Paired
from specscope.backends import BATCHING, BenchConfig, BenchResult, BenchRow
from specscope.backends.openai.bench import POSITIVE, ServingBenchConfig, add_openai_bench_arguments
from specscope.backends.openai.bench import run_bench as run_serving_bench
from specscope.backends.openai.client import split_url
from specscope.backends.openai.launchers import check_engine_args
from specscope.cli._common import (
    DTYPE_NAMES,
    add_table_output,
    atomic_write_text,
    checkpoint_files,
    human_stream,
    is_stdout,
    refuse_clashes,
    batch_size_list,
    print_table,
    refuse_unused_draft,
    write_rows,
)
from specscope.errors import SpecscopeError
from specscope.fileio import check_jsonl_output, json_text
from specscope.methods import LEARNED, NO_SD, names, run_label
from specscope.policy.learned import load_policy, policy_notes
from specscope.trees import parse_tree

DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(BenchConfig) if f.default is not dataclasses.MISSING
}
METHODS = names("specscope")
SPLIT = ("prefill_s", "draft_s", "verify_s", "sample_s", "overhead_s")
REFERENCE, OPENAI = "reference", "openai"


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
        choices=(REFERENCE, OPENAI),
        default=REFERENCE,
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
        help=f"proposer ({', '.join(METHODS)}; others registered by plugins; default {DEFAULTS['method']})",
    )
    parser.add_argument(
        "--draft", type=Path, metavar="DIR", help="draft model or head checkpoint directory"
    )
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--k", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT),
        help=f"proposal length k, 1..{validate.K_MAX_LIMIT} (default {DEFAULTS['k']})",
    )
    shape.add_argument(
        "--policy", type=Path, metavar="FILE",
        help="reference backend: a learned policy (`specscope policy fit`) picks the proposer among its "
             "methods and k at every step for every sequence; --draft is its model drafter's checkpoint",
    )
    shape.add_argument(
        "--tree", type=validate.arg(parse_tree), metavar="SHAPE",
        help="reference backend: draft and verify a static token tree every step instead of a chain of k, "
             "as branching per depth (2x2x1) or a list of paths; its rows' k is its node count, the drafts a step proposes",
    )
    parser.add_argument(
        "--beside", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT), metavar="K",
        help="with --policy: also run a chain of K of each method the policy chooses between, in the same lockstep "
             "over the same requests, each its own row: the policy and the fixed policies measured side by side",
    )
    parser.add_argument(
        "--confidence", type=validate.arg(validate.number, low=0.0, low_open=True, high=1.0), metavar="P",
        help="reference backend: the model drafter ends each sequence's proposal at its first draft whose "
             "probability is below P (that draft included), k at most; its passes stop once every sequence has "
             "ended (what `simulate --policies confidence:P:K` replays)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=batch_size_list,
        default=None,
        help=f"comma list (default {','.join(map(str, DEFAULTS['batch_sizes']))}, less those above the workload's "
             "distinct requests)",
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
        "--seed", type=validate.arg(validate.seed), default=DEFAULTS["seed"],
        help="sampling seed: each request draws its own from it, the same in the no-SD and the SD run "
             "(copies of one request under --batching replicate sample apart)",
    )
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default=DEFAULTS["dtype"])
    parser.add_argument(
        "--device", default=DEFAULTS["device"], help="cpu, cuda or cuda:N (default %(default)s)"
    )
    parser.add_argument("--threads", type=POSITIVE, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--repeats",
        type=POSITIVE,
        default=DEFAULTS["repeats"],
        help="runs of no-SD and SD per batch size, the two in lockstep; the row is the run with the "
             "median speedup, so an odd count (default %(default)s)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    add_table_output(parser, "the rows")
    parser.add_argument(
        "--records", type=check_jsonl_output, metavar="FILE",
        help="write per-step records (a .jsonl file: JSON Lines; - for standard output)"
    )
    add_openai_bench_arguments(parser)
    parser.set_defaults(run=run)


REFERENCE_ONLY = ("batching", "top_p", "top_k", "seed", "repeats", "dtype", "device",
                  "records", "beside")  # the reference engine's (--beside without --policy: run_bench refuses it)


def bench_config(args: argparse.Namespace) -> BenchConfig | ServingBenchConfig:
    """The bench the flags ask for: the reference engine's or a serving engine's."""
    if args.confidence is not None:
        if args.backend == OPENAI:
            raise SpecscopeError("--confidence: only with --backend reference (the engine stops the drafter)")
        if args.policy is not None:
            raise SpecscopeError("--confidence: not with --policy (the policy chooses each step's k)")
    policy = None
    if args.policy is not None:
        if args.backend == OPENAI:
            raise SpecscopeError("--policy: only with --backend reference (the engine runs the policy)")
        if args.method is not None:
            raise SpecscopeError("--method: not used with --policy (the policy chooses the method and k)")
        policy = load_policy(args.policy)
        policy.drafter(args.draft)  # a missing checkpoint is refused before the model loads
    if args.method == NO_SD and args.k is not None:  # its rows would say k = K of a run that proposed nothing
        raise SpecscopeError(f"--k: only used with an SD --method (with {NO_SD}, nothing is proposed)")
    shared = dict(
        workload=args.workload,
        method=LEARNED if policy is not None else DEFAULTS["method"] if args.method is None else args.method,
        k=policy.depth if policy is not None else args.tree.depth if args.tree is not None
        else DEFAULTS["k"] if args.k is None else args.k,
        batch_sizes=tuple(args.batch_sizes or DEFAULTS["batch_sizes"]),
        batch_sizes_given=args.batch_sizes is not None,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
    )
    if policy is not None:
        from specscope.engine.config import model_fingerprint

        for note in policy_notes(policy, shared["batch_sizes"], args.model, args.draft, model_fingerprint):
            print(f"note: {note}", file=sys.stderr)
    if args.backend == OPENAI:
        if args.tree is not None:
            raise SpecscopeError("--tree: only with --backend reference (a sweep launches servers with trees)")
        for name in REFERENCE_ONLY:  # the serving client has no such setting: said, not ignored
            if getattr(args, name) != DEFAULTS.get(name):  # --records: None, no BenchConfig field
                why = "a server's steps are not visible to its client" if name == "records" else \
                    "the server decides it, or the client has no such setting"
                raise SpecscopeError(f"--{name.replace('_', '-')}: only with --backend reference ({why})")
        if args.threads is not None:
            raise SpecscopeError("--threads: only with --backend reference (a launched server takes its own args: "
                                 "--engine-args)")
        for name in ("url", "baseline_url"):  # named as given (a bad --baseline-url was called --url)
            if getattr(args, name) is not None:
                split_url(getattr(args, name), f"--{name.replace('_', '-')}")
        return ServingBenchConfig(
            **shared,
            url=args.url,
            baseline_url=args.baseline_url,
            launch=args.launch,
            model=None if args.model is None else str(args.model),
            model_name=args.model_name,
            draft=None if args.draft is None else str(args.draft),
            num_requests=args.num_requests,
            port=args.port,
            engine_args=_split_engine_args(args.engine_args, args.launch),
            prompt_lookup_min=args.prompt_lookup_min,
            prompt_lookup_max=args.prompt_lookup_max,
            mtp_method=args.mtp_method,
            request_timeout_s=args.request_timeout,
            idle_timeout_s=args.idle_timeout,
            launch_timeout_s=args.launch_timeout,
            log_dir=_log_dir(args.log_dir),
            segments=args.segments,
        )
    given = next((dest for dest, default in _openai_defaults().items() if getattr(args, dest) != default), None)
    if given is not None:  # the reference engine would run as if it were not given: a result not of what was asked
        why = " (the reference engine runs no-SD and SD in lockstep)" if given == "segments" else ""
        raise SpecscopeError(f"--{given.replace('_', '-')}: only with --backend openai{why}")
    if args.model is None:
        raise SpecscopeError("--model: required with --backend reference")
    if policy is None:
        refuse_unused_draft(args.draft, shared["method"])
    return BenchConfig(
        **shared,
        model_dir=Path(args.model),
        draft_dir=args.draft,
        batching=args.batching,
        dtype=args.dtype,
        device=args.device,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        repeats=args.repeats,
        tree=args.tree,
        policy=args.policy,
        confidence=args.confidence,
        beside_k=args.beside,
    )


def _openai_defaults() -> dict[str, object]:
    """The options of ``--backend openai`` alone, each with its default (one given otherwise is refused)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_openai_bench_arguments(parser)
    return vars(parser.parse_args([]))


def _log_dir(path: Path | None) -> Path | None:
    """``--log-dir``: a folder (made if missing), not a file."""
    if path is not None and path.exists() and not path.is_dir():
        raise SpecscopeError(f"--log-dir {path}: not a folder")
    return path


def _split_engine_args(text: str, launch: str | None) -> tuple[str, ...]:
    """``--engine-args`` split as a shell would, refused where one sets what the launcher of
    ``launch`` sets from the bench (the server would run other than its rows say)."""
    try:
        words = tuple(shlex.split(text))
        check_engine_args(launch, words, "the bench")
    except ValueError as error:
        raise SpecscopeError(f"--engine-args: {error} in {text!r}") from None
    except SpecscopeError as error:
        raise SpecscopeError(f"--engine-args: {error}") from None
    return words


def run_bench(config: BenchConfig | ServingBenchConfig, into: BenchResult | None = None) -> BenchResult:
    """``config``'s backend's ``run_bench`` (imported only when picked: torch for the reference),
    each finished batch size added to ``into``."""
    if isinstance(config, ServingBenchConfig):
        return run_serving_bench(config, into)
    from specscope.backends.reference import run_bench as run_reference

    return run_reference(config, into)


def run(args: argparse.Namespace) -> int:
    out = human_stream(args.output, args.records)
    refuse_clashes({"-o": args.output, "--records": args.records}, [args.workload, *checkpoint_files(args.model, args.draft),
                                          *([args.policy] if args.policy else [])])
    config = bench_config(args)
    if args.threads is not None and isinstance(config, BenchConfig):
        import torch

        torch.set_num_threads(args.threads)
    finished = BenchResult([])
    try:
        result = run_bench(config, finished)
    except BaseException:  # interrupted, refused or failed (a server gone, memory run out): what finished is kept
        if finished.rows and (args.output or args.records):
            _write(args, config, finished)
            kept = " and ".join(str(p) for p in (args.output, args.records) if p and not is_stdout(p))
            done = list(dict.fromkeys(row.batch_size for row in finished.rows))  # chains beside a policy: its B's rows
            print(f"note: the {len(done)} batch size(s) finished (B={','.join(map(str, done))}) are in "
                  f"{kept or 'standard output'}", file=sys.stderr)
        raise
    rows = _write(args, config, result)
    if args.format == "json":
        if not is_stdout(args.output):  # with -o -, _write printed them there
            out.write(json_text(rows))
    elif isinstance(config, ServingBenchConfig):
        _print_openai_table(result.rows, out)
    else:
        _print_table(result.rows, out)
        policy_repeats = {row.batch_size: row.details["speedup_repeats"] for row in result.rows if row.method == LEARNED}
        for row in result.rows:  # the policy against each chain beside it, repeat by repeat
            if row.details.get("beside"):
                paired = Paired.of(policy_repeats[row.batch_size], row.details["speedup_repeats"])
                print(f"learned / {row.method} k={row.k} beside it at B={row.batch_size}: {paired.describe()}", file=out)
    for beside in (False, True):  # the policy's (or chain's) rows, then the chains run beside a policy
        idle = [row.batch_size for row in result.rows if row.method != NO_SD and row.details.get("num_drafts") == 0
                and bool(row.details.get("beside")) == beside]
        if idle:
            what = "the chains beside the policy: no step" if beside else "no SD step"
            why = "no n-gram match, or every output ended at its first token" if beside or args.policy is None \
                else "the policy chose to draft nothing"
            print(f"note: B={','.join(map(str, dict.fromkeys(idle)))}: {what} proposed a draft ({why}), so the "
                  "speedup measures running SD for nothing", file=sys.stderr)
    return 0


def _labels(args: argparse.Namespace, config: BenchConfig | ServingBenchConfig) -> dict:
    """What every row is labelled with: the workload (its name: what `report --measured` matches),
    how its outputs were made (a sampled row measures other outputs than a greedy one) and the
    model that made them (two checkpoints' rows were indistinguishable; the reference engine's:
    each checkpoint's fingerprint, as a trace's settings keep it, the dtype and the device). A
    policy's content is no label of the run's end: its rows carry the stamp of the file the
    engine loaded (one refitted or removed while the bench ran relabelled or lost them)."""
    from specscope.fingerprint import file_sha256
    from specscope.version import code_version

    sampled = ("top_p", "top_k", "seed") if isinstance(config, BenchConfig) else ()  # a server's bench sends no others
    made = {name: getattr(config, name) for name in ("max_tokens", "ignore_eos", "temperature", *sampled)}
    if isinstance(config, BenchConfig):  # what ran: the checkpoints (their folders' names and contents), how, how often
        from specscope.engine.config import model_fingerprint

        made["seed"] = 0 if config.seed is None else config.seed  # the engine's requests draw from seed 0 unless given
        ran = {"model": Path(config.model_dir).name, "model_files": model_fingerprint(Path(config.model_dir))[:16],
               "draft": config.draft_dir and Path(config.draft_dir).name,
               "draft_files": config.draft_dir and model_fingerprint(Path(config.draft_dir))[:16],
               "dtype": config.dtype, "device": config.device, "repeats": config.repeats, "threads": args.threads}
    else:
        ran = {"model": config.model_name or config.model}
    workload = {"workload": Path(config.workload).stem, "workload_sha256": (file_sha256(config.workload) or "")[:16]}
    return {**workload, **made, **ran, "made_by": code_version()}


def _write(args: argparse.Namespace, config: BenchConfig | ServingBenchConfig, result: BenchResult) -> list[dict]:
    """``result``'s rows with their labels (:func:`_labels`), written to ``-o`` (with ``-o -`` and
    ``--format json``: as JSON on standard output instead of the CSV, as simulate's), and its step
    records to ``--records``, where given; the rows. The one writer of both a finished and an
    interrupted bench."""
    labels = _labels(args, config)
    rows = [{**row.flat(), **labels} for row in result.rows]
    if is_stdout(args.output) and args.format == "json":
        sys.stdout.write(json_text(rows))
    elif args.output:
        write_rows(args.output, rows)
    if args.records:
        atomic_write_text(args.records, "".join(record.to_json() + "\n" for record in result.records))
    return rows


def _print_table(rows: list[BenchRow], out: TextIO) -> None:
    columns = ["method", "k", "tree", "B", "tok/s", "no-SD tok/s", "speedup", "α", "τ",
               "prefill/draft/verify/sample/other %", "greedy =="]
    lines = []
    for row in rows:
        total = sum(row.details[p] for p in SPLIT) or 1.0
        split = "/".join(f"{100 * row.details[p] / total:.0f}" for p in SPLIT)
        tree = "" if row.tree is None else f"{row.tree.name} ({row.tree.nodes} nodes, depth {row.tree.depth})"
        policy = row.details.get("policy")  # a learned policy chose the method and k at every step, up to k
        confidence = row.details.get("confidence")  # the drafter stopped at an unconfident draft, k at most
        label = policy or run_label(row.method, confidence=confidence) + (", beside it" if row.details.get("beside") else "")
        lines.append([label, f"≤{row.k}" if policy or confidence else row.k, tree, row.batch_size, row.throughput,
                      row.baseline_throughput,
                      row.speedup, row.acceptance_rate, row.mean_acceptance_length, split,
                      row.details["greedy_match"]])
    print_table("throughput = generated tokens/s; speedup = SD / no-SD; SD time split in %", columns, lines, file=out)


OPENAI_COLUMNS = (
    ("method", "method"), ("k", "k"), ("B", "batch_size"), ("tok/s", "throughput"),
    ("no-SD tok/s", "baseline_throughput"), ("speedup", "speedup"), ("α", "acceptance_rate"),
    ("τ", "mean_acceptance_length"), ("TTFT p50 s", "ttft_p50_s"), ("TPOT p50 s", "tpot_p50_s"),
    ("no-SD TPOT p50 s", "baseline_tpot_p50_s"),
)


def _print_openai_table(bench_rows: list[BenchRow], out: TextIO) -> None:
    rows = [row.flat() for row in bench_rows]
    print_table("throughput = output tokens/s at concurrency B; speedup = SD / no-SD",
                [header for header, _ in OPENAI_COLUMNS], [[row.get(key) for _, key in OPENAI_COLUMNS] for row in rows],
                file=out)
    for name in ("verified", "baseline_verified"):
        for text in dict.fromkeys(row[name] for row in rows if row.get(name)):
            print(f"{'no-SD server' if name.startswith('baseline') else 'SD server'}: {text}", file=out)
    if any(row.get("learns_across_requests") for row in rows):
        print("note: learns_across_requests: the proposer learns from earlier requests and saw these prompts "
              "before they were measured; acceptance and speedup may be inflated", file=out)
