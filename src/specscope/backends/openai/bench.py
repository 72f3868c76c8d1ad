"""``specscope bench --backend openai``: no-SD vs SD throughput of a serving engine, over HTTP.

Two ways to get servers:

- ``--url URL`` (the SD server, running ``--method`` at ``--k``) and optionally
  ``--baseline-url URL`` (the same model without SD); servers already running, so the batch
  size is only the client's concurrency;
- ``--launch vllm|sglang|specscope --model MODEL``: for every batch size B, a no-SD server and
  an SD server are started with concurrency limit B (``--max-num-seqs``), measured and stopped
  (see :mod:`~specscope.backends.openai.launchers`).

With ``--segments N`` (N > 1) the no-SD and SD servers are up at once and take turns over N
consecutive parts of the requests (A B, B A, …): on a machine whose speed wanders over seconds
both see nearly the same machine (:func:`~specscope.backends.openai.measure.measure_interleaved`;
why: :mod:`~specscope.backends.openai.sweep_config`, "Baselines").

Each row holds the reference bench's fields (``method``, ``k``, ``batch_size``, ``throughput``,
``baseline_throughput``, ``speedup``, ``acceptance_rate``, ``mean_acceptance_length``), the
vLLM counter deltas (``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``, …), and
latency percentiles (``ttft_p50_s``, ``tpot_p50_s``, ``itl_p50_s``, …, and ``baseline_`` ones).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from specscope.backends import BenchConfig, BenchResult, BenchRow, fill_batch_sizes
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
from specscope.backends.openai.measure import in_flight, measure, measure_interleaved
from specscope.backends.openai.prompts import Prompt, read_prompts, select_prompts, warmup_prompt
from specscope.backends.openai.verify import check_chain, check_server
from specscope import validate
from specscope.errors import SpecscopeError
from specscope.methods import NO_SD
from specscope.progress import LazyProgress

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
        "--num-requests", type=validate.arg(validate.integer, low=1, high=validate.MAX_REQUESTS),
        help="requests per run (default: the workload's; cycles if more)"
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
    group.add_argument(
        "--segments", type=POSITIVE, default=ServingBenchConfig.segments,
        help="> 1: run the no-SD and SD servers at once, taking turns over this many parts of the requests "
             "(A B, B A, ...), so both see the same machine (default 1: one run each)",
    )


@dataclass(frozen=True)
class ServingBenchConfig:
    """One serving bench: no-SD and SD servers measured at each batch size (the client's
    concurrency). Servers are running (``url``, ``baseline_url``) or launched per batch size
    (``launch``: an engine of :data:`~specscope.backends.openai.launchers.ENGINES`, serving
    ``model``); the sampling fields mean what they mean in :class:`BenchConfig`."""

    workload: Path
    method: str = BenchConfig.method
    k: int = BenchConfig.k
    batch_sizes: tuple[int, ...] = BenchConfig.batch_sizes
    batch_sizes_given: bool = True  # False: the defaults, of which those above the requests in flight are left out
    max_tokens: int = BenchConfig.max_tokens
    ignore_eos: bool = BenchConfig.ignore_eos
    temperature: float = BenchConfig.temperature
    url: str | None = None
    baseline_url: str | None = None
    launch: str | None = None
    model: str | None = None
    model_name: str | None = None  # the id sent in requests (None: the server's /v1/models)
    draft: str | None = None
    num_requests: int | None = None  # None: the workload's length
    port: int | None = None  # for launched servers (None: a free one)
    engine_args: tuple[str, ...] = ()
    prompt_lookup_min: int = DEFAULTS.prompt_lookup_min
    prompt_lookup_max: int = DEFAULTS.prompt_lookup_max
    mtp_method: str = DEFAULTS.mtp_method
    request_timeout_s: float = DEFAULTS.request_timeout_s
    idle_timeout_s: float = DEFAULTS.idle_timeout_s
    launch_timeout_s: float = DEFAULTS.launch_timeout_s
    log_dir: Path | None = None  # where launched servers log (None: a temporary folder)
    segments: int = 1  # > 1: no-SD and SD servers interleaved over this many parts of the requests

    def client(self, url: str) -> ClientConfig:
        """How to send this bench's requests to the server at ``url``."""
        return ClientConfig(
            url=url,
            model=self.model_name,
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
            temperature=self.temperature,
            idle_timeout_s=self.idle_timeout_s,
            request_timeout_s=self.request_timeout_s,
        )

    def launch_spec(self, method: str, batch_size: int) -> LaunchSpec:
        """The server to launch for ``method`` (:data:`~specscope.methods.NO_SD`: no SD, no
        draft) at ``batch_size``."""
        if self.launch is None or self.model is None:
            raise SpecscopeError("--model: required with --launch (a model name or directory)")
        return LaunchSpec(
            engine=self.launch,
            model=self.model,
            method=method,
            k=self.k,
            batch_size=batch_size,
            draft=self.draft if method != NO_SD else None,
            prompt_lookup_min=self.prompt_lookup_min,
            prompt_lookup_max=self.prompt_lookup_max,
            mtp_method=self.mtp_method,
            port=self.port or free_port(),
            extra_args=self.engine_args,
        )


def bench_row(method: str, k: int, row: dict[str, object], baseline: dict[str, object] | None) -> BenchRow:
    """A :class:`BenchRow` from a measured ``row`` (:func:`measure`'s, plus labels) and its
    no-SD ``baseline`` row (``None``: no baseline), whose :data:`BASELINE_FIELDS` join as
    ``baseline_*`` details."""
    details = dict(row)
    batch_size, throughput = details.pop("batch_size"), details.pop("throughput")
    alpha, tau = details.pop("acceptance_rate", None), details.pop("mean_acceptance_length", None)
    for name in BASELINE_FIELDS:
        details[f"baseline_{name}"] = baseline.get(name) if baseline else None
    return BenchRow(method, k, batch_size, throughput, details.pop("baseline_throughput"), alpha, tau, details)


def _launch_specs(config: ServingBenchConfig) -> list[tuple[LaunchSpec, LaunchSpec]]:
    """(no-SD, SD) server per batch size, all checked before the first one starts."""
    return [(config.launch_spec(NO_SD, b), config.launch_spec(config.method, b)) for b in config.batch_sizes]


@contextlib.contextmanager
def launched(config: ServingBenchConfig, spec: LaunchSpec, log_path: Path) -> Iterator[str]:
    """``spec``'s server, started (logging to ``log_path``) and checked to show what ``spec``
    asks: what was verified; stopped on leaving."""
    with ServerProcess(command_for(spec), spec.url, log_path, config.launch_timeout_s):
        k = spec.positions if spec.method != NO_SD else 0
        yield check_server(spec.url, spec.method, k, config.model_name, config.idle_timeout_s)[1]


def _log_path(log_dir: Path, spec: LaunchSpec) -> Path:
    return log_dir / f"{spec.engine}-{spec.method}-k{spec.k}-b{spec.batch_size}.log"


def _measure(config: ServingBenchConfig, urls: list[str], batch_size: int, prompts: list[Prompt],
             warmup: Prompt) -> list[dict]:
    """One row per server of ``urls`` at ``batch_size``: one after another, or with ``segments``
    > 1 interleaved (:func:`~specscope.backends.openai.measure.measure_interleaved`)."""
    clients = [config.client(url) for url in urls]
    if config.segments > 1:
        measured = measure_interleaved([[c] for c in clients], prompts, [batch_size] * len(clients), config.segments,
                                       warmup)
        return [row for row, _ in measured]
    return [measure(client, prompts, batch_size, warmup) for client in clients]


def run_bench(config: ServingBenchConfig, into: BenchResult | None = None) -> BenchResult:
    """Measure no-SD and SD at every batch size; one row per batch size, labelled only with
    what the servers do not contradict (:mod:`~specscope.backends.openai.verify`), added to
    ``into`` (when given) as it finishes. The servers' steps are not visible: ``records`` stays
    empty."""
    if bool(config.url) == bool(config.launch):
        raise SpecscopeError("--backend openai: give exactly one of --url and --launch")
    if config.segments > 1 and config.url and not config.baseline_url:
        raise SpecscopeError("--segments: interleaves a no-SD and an SD server; give --baseline-url (or --launch)")
    workload = read_prompts(config.workload)
    prompts = select_prompts(workload, config.num_requests, config.workload)
    if config.segments > len(prompts):
        raise SpecscopeError(f"--segments: {len(prompts)} requests cannot be cut into {config.segments} segments")
    config = fill_batch_sizes(config, *in_flight(len(prompts), config.segments))
    specs = _launch_specs(config) if config.launch else None
    warmup, warmup_measured = warmup_prompt(workload, config.num_requests)
    k = config.k if config.method != NO_SD else 0
    result = into if into is not None else BenchResult([])
    rows = result.rows
    if specs is None:
        model = config.model_name or config.model
        view, verified = check_server(config.url, config.method, k, model, config.idle_timeout_s)
        baseline_verified = (
            check_server(config.baseline_url, NO_SD, 0, model, config.idle_timeout_s)[1]
            if config.baseline_url else None
        )
        learns = learns_across_requests(view.engine, config.method)  # one server for every batch size
        if learns:
            log.warning(LEARNS_NOTE, config.method, config.url)
        with LazyProgress("bench: batch sizes", len(config.batch_sizes)) as bar:
            for batch_size in config.batch_sizes:
                measured = _measure(config, [u for u in (config.baseline_url, config.url) if u], batch_size, prompts,
                                    warmup)
                check_chain(config.url, config.method, k, measured[-1])
                baseline = {**measured[0], "verified": baseline_verified} if config.baseline_url else None
                rows.append(bench_row(config.method, k, {**measured[-1], "verified": verified,
                                                         "learns_across_requests": learns}, baseline))
                bar.advance()
        return result
    learns = learns_across_requests(config.launch, config.method) and warmup_measured
    if learns:
        log.warning(WARMUP_NOTE, config.method)
    with tempfile.TemporaryDirectory(prefix="specscope-logs-") as tmp, \
            LazyProgress("bench: batch sizes", len(specs)) as bar:
        log_dir = config.log_dir or Path(tmp)
        for baseline_spec, spec in specs:
            if config.segments > 1:  # both servers up at once, taking turns
                with contextlib.ExitStack() as stack:
                    spec = replace(spec, port=free_port()) if spec.port == baseline_spec.port else spec
                    checks = [stack.enter_context(launched(config, s, _log_path(log_dir, s))) for s in (baseline_spec, spec)]
                    measured = _measure(config, [baseline_spec.url, spec.url], spec.batch_size, prompts, warmup)
            else:  # one after the other
                checks, measured = [], []
                for s in (baseline_spec, spec):
                    with launched(config, s, _log_path(log_dir, s)) as check:
                        checks.append(check)
                        measured += _measure(config, [s.url], s.batch_size, prompts, warmup)
            baseline, row = ({**m, "verified": v} for m, v in zip(measured, checks))
            rows.append(bench_row(config.method, k, {**row, "learns_across_requests": learns}, baseline))
            bar.advance()
    return result
