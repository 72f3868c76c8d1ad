"""Speculative-decoding counters scraped from a server's Prometheus ``/metrics`` endpoint.

A benchmark scrapes ``/metrics`` before and after a run and keeps only the difference, so the
figures cover exactly the run's requests even on a server that served other traffic before.

vLLM (v1 engine, ``vllm/v1/spec_decode/metrics.py``; docs: "Production Metrics") exports four
counters when speculative decoding is on and stats logging is (its default;
``--disable-log-stats`` removes them). The scheduler's ``make_spec_decoding_stats`` calls
``observe_draft(num_draft_tokens, num_accepted_tokens)`` once per request per step *that
carried draft tokens* (draft tokens it had to invalidate are not counted):

- ``vllm:spec_decode_num_drafts`` — request-steps that verified at least one draft token
  (an n-gram step that found no match proposes nothing and is not counted);
- ``vllm:spec_decode_num_draft_tokens`` — draft tokens proposed in those request-steps;
- ``vllm:spec_decode_num_accepted_tokens`` — draft tokens accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}`` — request-steps whose draft
  token at 0-based position ``i`` was accepted (acceptance is a prefix, so this is
  non-increasing in ``i``).

prometheus_client appends ``_total`` to counter samples in the text format
(``vllm:spec_decode_num_drafts_total``); both spellings are read here. Series that differ in
other labels (``model_name``, ``engine`` for data-parallel ranks) are summed.

Derived, as vLLM's own ``SpecDecodingLogging`` and ``SpecDecodingProm`` docstrings define them:

- acceptance rate α = accepted / draft tokens;
- mean acceptance length τ = 1 + accepted / drafts (tokens one drafted request-step emits,
  bonus token included). specscope's reference engine counts τ over all request-steps,
  including those without drafts, and counts the tokens the requests kept: where every step
  drafts the two still differ at each output's end — a last step emits no bonus token past it,
  and drafts it accepted past the end count in ``accepted`` only (EAGLE k = 3, 4 requests of 48
  tokens at most: 2.787 against τ 2.721);
- per-position acceptance rate ``per_pos[i] / drafts`` and conditional rate
  ``per_pos[i] / per_pos[i-1]`` (``per_pos[-1] = drafts``): the chance that position ``i`` is
  accepted given that every earlier position was.

Histograms (cross-checks of the cost-model calibration, :mod:`specscope.costmodel.calibrate`):
vLLM's ``vllm:iteration_tokens_total`` (tokens one engine step processed) and
``vllm:inter_token_latency_seconds`` (``vllm:time_per_output_token_seconds`` before v0.11: time
between two output chunks of one request). Their ``_sum`` and ``_count`` are kept, so that
:func:`histogram_means` gives each one's mean over the run.

SGLang (``sglang/srt/metrics/collector.py``, with ``--enable-metrics``) exports no counters for
this, only gauges recomputed over its last logging interval: ``sglang:spec_accept_length``
(accepted drafts + bonus per verify forward) and ``sglang:spec_accept_rate`` (accepted /
proposed drafts). They are not cumulative, so no delta exists: they are reported as read
after the run, averaged over series, and marked as such (``sglang_*`` fields).
"""

from __future__ import annotations

import math

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from specscope.errors import SpecscopeError

VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
HISTOGRAMS = {  # the run's mean of a histogram -> the row field it goes to
    "vllm:iteration_tokens_total": "server_iteration_tokens_mean",
    "vllm:inter_token_latency_seconds": "server_inter_token_latency_mean_s",
    "vllm:time_per_output_token_seconds": "server_inter_token_latency_mean_s",
}
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"


@dataclass
class MetricsSnapshot:
    """The spec-decode series of one scrape. ``has_spec_decode``: the vLLM counters exist;
    ``engine``: whose series the scrape holds (``vllm`` for any ``vllm:`` series, as vLLM and
    ``specscope serve`` export; ``sglang`` for ``sglang:``; ``None`` for neither)."""

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    has_spec_decode: bool = False
    sglang_accept_length: float | None = None
    sglang_accept_rate: float | None = None
    engine: str | None = None
    histograms: dict[str, list[float]] = field(default_factory=dict)  # name -> [sum, count] (HISTOGRAMS)


@dataclass
class SpecDecodeDelta:
    """Counter differences over one run, with α, τ and per-position rates derived from them."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: list[int]
    sglang_accept_length: float | None = None
    sglang_accept_rate: float | None = None

    @property
    def acceptance_rate(self) -> float | None:
        """α = accepted / draft tokens; ``None`` when nothing was drafted."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def drafting_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: tokens per step over the steps that drafted (vLLM's "mean
        acceptance length"); ``None`` without drafts. Not τ, which counts every step (a step where
        n-gram found no match emits 1): the client measures τ from the stream."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    def per_position_rates(self) -> list[float | None]:
        """``per_pos[i] / drafts``: how often position ``i`` of a draft was accepted."""
        return [n / self.num_drafts if self.num_drafts else None for n in self.num_accepted_tokens_per_pos]

    def conditional_rates(self) -> list[float | None]:
        """``per_pos[i] / per_pos[i-1]`` with ``per_pos[-1] = drafts``; ``None`` where 0/0."""
        rates: list[float | None] = []
        previous = self.num_drafts
        for count in self.num_accepted_tokens_per_pos:
            rates.append(count / previous if previous else None)
            previous = count
        return rates

    def as_row(self) -> dict[str, object]:
        """Flat fields for a result row (the names the bench and sweep rows use)."""
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": self.num_accepted_tokens_per_pos,
            "acceptance_rate": self.acceptance_rate,
            "drafting_acceptance_length": self.drafting_acceptance_length,
            "per_position_acceptance_rate": self.per_position_rates(),
            "conditional_acceptance_rate": self.conditional_rates(),
            "sglang_spec_accept_length": self.sglang_accept_length,
            "sglang_spec_accept_rate": self.sglang_accept_rate,
        }


def _base_name(sample_name: str) -> str:
    return sample_name.removesuffix("_total")


def parse_metrics(text: str) -> MetricsSnapshot:
    """Read the spec-decode series from Prometheus text exposition ``text``."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise SpecscopeError(
            "reading /metrics needs prometheus-client: pip install 'specscope[serve]'"
        ) from None

    snapshot = MetricsSnapshot()
    gauges: dict[str, list[float]] = {SGLANG_ACCEPT_LENGTH: [], SGLANG_ACCEPT_RATE: []}
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as error:
        raise SpecscopeError(f"/metrics: not Prometheus text format ({error})") from None
    read = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_ACCEPTED_PER_POS)
    for sample in samples:
        name = _base_name(sample.name)
        histogram = next((sample.name.removesuffix(s) for s in ("_sum", "_count") if sample.name.endswith(s)), None)
        if (name in read or histogram in HISTOGRAMS or sample.name in gauges) and not (
                math.isfinite(sample.value) and sample.value >= 0):  # a count, a sum, an acceptance: finite, >= 0
            raise SpecscopeError(f"/metrics: {sample.name} = {sample.value}: expected a finite value >= 0")
        # (a series it does not read may hold anything: SGLang's utilization is -1 on a prefill server)
        if histogram in HISTOGRAMS:  # [sum, count]
            snapshot.histograms.setdefault(histogram, [0.0, 0.0])[sample.name.endswith("_count")] += sample.value
        if snapshot.engine is None and name.startswith(("vllm:", "sglang:")):
            snapshot.engine = name.split(":", 1)[0]
        if name == VLLM_DRAFTS:
            snapshot.num_drafts += sample.value
        elif name == VLLM_DRAFT_TOKENS:
            snapshot.num_draft_tokens += sample.value
        elif name == VLLM_ACCEPTED:
            snapshot.num_accepted_tokens += sample.value
        elif name == VLLM_ACCEPTED_PER_POS:
            try:
                position = int(sample.labels["position"])
            except (KeyError, ValueError):
                raise SpecscopeError(
                    f"/metrics: {sample.name} needs an integer 'position' label, got {sample.labels}"
                ) from None
            snapshot.accepted_per_pos[position] = snapshot.accepted_per_pos.get(position, 0.0) + sample.value
        elif sample.name in gauges:
            gauges[sample.name].append(sample.value)
        else:
            continue
        if name.startswith("vllm:spec_decode"):
            snapshot.has_spec_decode = True
    if gauges[SGLANG_ACCEPT_LENGTH]:
        snapshot.sglang_accept_length = sum(gauges[SGLANG_ACCEPT_LENGTH]) / len(gauges[SGLANG_ACCEPT_LENGTH])
    if gauges[SGLANG_ACCEPT_RATE]:
        snapshot.sglang_accept_rate = sum(gauges[SGLANG_ACCEPT_RATE]) / len(gauges[SGLANG_ACCEPT_RATE])
    return snapshot


def scrape(base_url: str, timeout_s: float = 10.0) -> MetricsSnapshot:
    """GET ``base_url/metrics`` (bounded by ``timeout_s``) and parse it."""
    url = base_url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read(64 << 20).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        raise SpecscopeError(f"{url}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        raise SpecscopeError(f"{url}: {getattr(error, 'reason', error)}") from None
    return parse_metrics(text)


def histogram_means(before: MetricsSnapshot, after: MetricsSnapshot) -> dict[str, float | None]:
    """The mean of each :data:`HISTOGRAMS` series over the run (Δsum / Δcount), by row field;
    ``None`` where the server exports none or the run observed nothing."""
    means: dict[str, float | None] = {field: None for field in HISTOGRAMS.values()}
    for name, (total, count) in after.histograms.items():
        old_total, old_count = before.histograms.get(name, (0.0, 0.0))
        if count > old_count:
            means[HISTOGRAMS[name]] = (total - old_total) / (count - old_count)
    return means


def summed(spans: list[tuple[MetricsSnapshot, MetricsSnapshot]]) -> tuple[MetricsSnapshot, MetricsSnapshot]:
    """(before, after) scrapes around each part of a run → one (zero, total) pair whose
    :func:`delta` and :func:`histogram_means` are those of the parts together (a server that
    served other runs between the parts: only the parts count). The SGLang gauges, the engine and
    whether the counters exist are the last scrape's; a counter that went down within a part is
    refused as in :func:`delta`."""
    total = MetricsSnapshot()
    for before, after in spans:
        delta(before, after)  # refuses a restart
        total.num_drafts += after.num_drafts - before.num_drafts
        total.num_draft_tokens += after.num_draft_tokens - before.num_draft_tokens
        total.num_accepted_tokens += after.num_accepted_tokens - before.num_accepted_tokens
        for pos, count in after.accepted_per_pos.items():
            total.accepted_per_pos[pos] = total.accepted_per_pos.get(pos, 0.0) + count - before.accepted_per_pos.get(pos, 0.0)
        for name, (value, count) in after.histograms.items():
            old_value, old_count = before.histograms.get(name, (0.0, 0.0))
            kept = total.histograms.setdefault(name, [0.0, 0.0])
            kept[0] += value - old_value
            kept[1] += count - old_count
        total.has_spec_decode, total.engine = after.has_spec_decode, after.engine
        total.sglang_accept_length, total.sglang_accept_rate = after.sglang_accept_length, after.sglang_accept_rate
    return MetricsSnapshot(), total


def delta(before: MetricsSnapshot, after: MetricsSnapshot) -> SpecDecodeDelta:
    """``after - before`` for the counters; the SGLang gauges as read in ``after``.

    A counter that went down means the server restarted between the scrapes: an error, since
    the difference would be meaningless.
    """
    pairs = {
        "num_drafts": (before.num_drafts, after.num_drafts),
        "num_draft_tokens": (before.num_draft_tokens, after.num_draft_tokens),
        "num_accepted_tokens": (before.num_accepted_tokens, after.num_accepted_tokens),
    }
    positions = sorted(set(before.accepted_per_pos) | set(after.accepted_per_pos))
    for pos in positions:
        pairs[f"position {pos}"] = (
            before.accepted_per_pos.get(pos, 0.0),
            after.accepted_per_pos.get(pos, 0.0),
        )
    for name, (old, new) in pairs.items():
        if new < old:
            raise SpecscopeError(
                f"/metrics: counter {name} went down ({old:g} -> {new:g}); did the server restart?"
            )
    diff = {name: round(new - old) for name, (old, new) in pairs.items()}
    if diff["num_accepted_tokens"] > diff["num_draft_tokens"]:
        raise SpecscopeError(f"/metrics: {diff['num_accepted_tokens']} draft tokens accepted of {diff['num_draft_tokens']} "
                             "proposed: the server's spec-decode counters contradict each other")
    width = positions[-1] + 1 if positions else 0
    return SpecDecodeDelta(
        num_drafts=diff["num_drafts"],
        num_draft_tokens=diff["num_draft_tokens"],
        num_accepted_tokens=diff["num_accepted_tokens"],
        num_accepted_tokens_per_pos=[diff.get(f"position {pos}", 0) for pos in range(width)],
        sglang_accept_length=after.sglang_accept_length,
        sglang_accept_rate=after.sglang_accept_rate,
    )
