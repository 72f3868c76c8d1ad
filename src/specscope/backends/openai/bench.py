"""``specscope bench --backend openai``: no-SD vs SD throughput of a serving engine, over HTTP.

Two ways to get servers:

- ``--url URL`` (the SD server, running ``--method`` at ``--k``) and optionally
  ``--baseline-url URL`` (the same model without SD); servers already running, so the batch
  size is only the client's concurrency;
- ``--launch vllm|sglang|specscope --model MODEL``: for every batch size B, a no-SD server and
  an SD server are started with concurrency limit B (``--max-num-seqs``), measured and stopped
  (see :mod:`~specscope.backends.openai.launchers`).

Each row holds the reference bench's fields (``method``, ``k``, ``batch_size``, ``throughput``,
``baseline_throughput``, ``speedup``, ``acceptance_rate``, ``mean_acceptance_length``), the
vLLM counter deltas (``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``, …), and
latency percentiles (``ttft_p50_s``, ``tpot_p50_s``, ``itl_p50_s``, …, and ``baseline_`` ones).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specscope.backends.openai.client import ClientConfig
from specscope.backends.openai.launchers import (
    DEFAULT_LAUNCH_TIMEOUT_S,
    ENGINES,
    LaunchSpec,
    ServerProcess,
    command_for,
    free_port,
    learns_across_requests,
)
from specscope.backends.openai.measure import measure
from specscope.backends.openai.prompts import Prompt, read_prompts, select_prompts, warmup_prompt
from specscope.backends.openai.verify import check_server
from specscope import validate
from specscope.errors import SpecscopeError

log = logging.getLogger(__name__)
POSITIVE = validate.arg(validate.integer, low=1)
SECONDS = validate.arg(validate.number, low=0.0, low_open=True)
BASELINE_FIELDS = ("throughput", "ttft_p50_s", "tpot_p50_s", "itl_p50_s", "duration_s", "verified")
LEARNS_NOTE = (
    "method %s learns across requests and the server at %s is not restarted between runs: "
    "acceptance may be inflated (rows marked learns_across_requests)"
)
WARMUP_NOTE = (
    "method %s learns across requests and the workload has no prompt left for the warm-up: it "
    "replays a measured one (rows marked learns_across_requests; give more prompts than --num-requests)"
)


@dataclass(frozen=True)
class ServingDefaults:
    """Defaults of the serving flags, defined once for ``bench`` and ``sweep``."""

    idle_timeout_s: float = ClientConfig.idle_timeout_s
    request_timeout_s: float = ClientConfig.request_timeout_s
    launch_timeout_s: float = DEFAULT_LAUNCH_TIMEOUT_S
    prompt_lookup_min: int = LaunchSpec.prompt_lookup_min
    prompt_lookup_max: int = LaunchSpec.prompt_lookup_max
    mtp_method: str = LaunchSpec.mtp_method


DEFAULTS = ServingDefaults()


def add_openai_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags only ``--backend openai`` uses (the bench parser supplies ``--model``,
    ``--method``, ``--draft``, ``--k``, ``--batch-sizes``, ``--workload``, ``--max-tokens``,
    ``--ignore-eos``, ``--temperature``)."""
    group = parser.add_argument_group("--backend openai (a server's OpenAI-compatible API)")
    group.add_argument("--url", help="the SD server, e.g. http://127.0.0.1:8000 (instead of --launch)")
    group.add_argument("--baseline-url", help="a no-SD server of the same model, for the speedup")
    group.add_argument("--launch", choices=ENGINES, help="start the engine per batch size (no-SD, then SD)")
    group.add_argument("--model-name", help="model id sent in requests (default: the server's /v1/models)")
    group.add_argument(
        "--num-requests", type=POSITIVE, help="requests per run (default: the workload's; cycles if more)"
    )
    group.add_argument(
        "--port", type=validate.arg(validate.integer, low=1, high=65535), help="port for --launch (default: a free one)"
    )
    group.add_argument(
        "--engine-args",
        default="",
        help='extra arguments for the launched engine, one string: --engine-args="--dtype bfloat16"',
    )
    group.add_argument("--prompt-lookup-min", type=POSITIVE, default=DEFAULTS.prompt_lookup_min)
    group.add_argument("--prompt-lookup-max", type=POSITIVE, default=DEFAULTS.prompt_lookup_max)
    group.add_argument(
        "--mtp-method", default=DEFAULTS.mtp_method,
        help="vLLM method for --method mtp (default %(default)s: vLLM picks the model's own)",
    )
    group.add_argument(
        "--request-timeout", type=SECONDS, default=DEFAULTS.request_timeout_s, help="seconds per request"
    )
    group.add_argument(
        "--idle-timeout", type=SECONDS, default=DEFAULTS.idle_timeout_s, help="seconds without a byte"
    )
    group.add_argument(
        "--launch-timeout", type=SECONDS, default=DEFAULTS.launch_timeout_s, help="seconds to become healthy"
    )
    group.add_argument(
        "--log-dir", type=Path, help="where launched servers write their logs (default: a temp dir)"
    )


def combine(row: dict[str, object], baseline: dict[str, object] | None) -> dict[str, object]:
    """``row`` plus ``baseline_*`` fields and ``speedup`` = throughput / baseline throughput."""
    out = dict(row)
    for name in BASELINE_FIELDS:
        out[f"baseline_{name}"] = baseline.get(name) if baseline else None
    base = out["baseline_throughput"]
    out["speedup"] = row["throughput"] / base if base and row.get("throughput") is not None else None
    return out


def _client(args: argparse.Namespace, url: str) -> ClientConfig:
    return ClientConfig(
        url=url,
        model=args.model_name,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        idle_timeout_s=args.idle_timeout,
        request_timeout_s=args.request_timeout,
    )


def _launch_specs(args: argparse.Namespace) -> list[tuple[LaunchSpec, LaunchSpec]]:
    """(no-SD, SD) server per batch size, all checked before the first one starts."""
    if args.model is None:
        raise SpecscopeError("--model: required with --launch (a model name or directory)")
    specs = []
    for batch_size in args.batch_sizes:
        pair = tuple(
            LaunchSpec(
                engine=args.launch,
                model=str(args.model),
                method=method,
                k=args.k,
                batch_size=batch_size,
                draft=str(args.draft) if args.draft and method != "none" else None,
                prompt_lookup_min=args.prompt_lookup_min,
                prompt_lookup_max=args.prompt_lookup_max,
                mtp_method=args.mtp_method,
                port=args.port or free_port(),
                extra_args=tuple(shlex.split(args.engine_args)),
            )
            for method in ("none", args.method)
        )
        specs.append(pair)
    return specs


def _launched(
    args: argparse.Namespace, spec: LaunchSpec, prompts: list[Prompt], warmup: Prompt, log_dir: Path
) -> dict:
    """Start ``spec``'s server, check it shows what ``spec`` asks, measure, stop it."""
    log_path = log_dir / f"{spec.engine}-{spec.method}-k{spec.k}-b{spec.batch_size}.log"
    with ServerProcess(command_for(spec), spec.url, log_path, args.launch_timeout):
        k = spec.k if spec.method != "none" else 0
        _, verified = check_server(spec.url, spec.method, k, args.model_name, args.idle_timeout)
        row = measure(_client(args, spec.url), prompts, spec.batch_size, warmup)
    return {**row, "verified": verified}


def run_openai_bench(args: argparse.Namespace) -> list[dict]:
    """Measure no-SD and SD at every batch size; one row per batch size, labelled only with
    what the servers do not contradict (:mod:`~specscope.backends.openai.verify`)."""
    if bool(args.url) == bool(args.launch):
        raise SpecscopeError("--backend openai: give exactly one of --url and --launch")
    specs = _launch_specs(args) if args.launch else None
    workload = read_prompts(args.workload)
    prompts = select_prompts(workload, args.num_requests)
    warmup, warmup_measured = warmup_prompt(workload, args.num_requests)
    label = {"method": args.method, "k": args.k if args.method != "none" else 0}
    rows = []
    if specs is None:
        model = args.model_name or (str(args.model) if args.model else None)
        view, verified = check_server(args.url, args.method, label["k"], model, args.idle_timeout)
        baseline_verified = (
            check_server(args.baseline_url, "none", 0, model, args.idle_timeout)[1] if args.baseline_url else None
        )
        learns = learns_across_requests(view.engine, args.method)  # one server for every batch size
        if learns:
            log.warning(LEARNS_NOTE, args.method, args.url)
        for batch_size in args.batch_sizes:
            baseline = (
                {**measure(_client(args, args.baseline_url), prompts, batch_size, warmup),
                 "verified": baseline_verified}
                if args.baseline_url
                else None
            )
            row = measure(_client(args, args.url), prompts, batch_size, warmup)
            rows.append(combine({**label, **row, "verified": verified, "learns_across_requests": learns},
                                baseline))
        return rows
    learns = learns_across_requests(args.launch, args.method) and warmup_measured
    if learns:
        log.warning(WARMUP_NOTE, args.method)
    with tempfile.TemporaryDirectory(prefix="specscope-logs-") as tmp:
        log_dir = args.log_dir or Path(tmp)
        for baseline_spec, spec in specs:
            baseline = _launched(args, baseline_spec, prompts, warmup, log_dir)
            row = _launched(args, spec, prompts, warmup, log_dir)
            rows.append(combine({**label, **row, "learns_across_requests": learns}, baseline))
    return rows
