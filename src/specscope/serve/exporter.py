"""``/metrics`` in Prometheus text format, with vLLM's metric names.

Counters (prometheus_client writes them with a ``_total`` suffix, as vLLM's do):
``vllm:prompt_tokens``, ``vllm:generation_tokens``, ``vllm:request_success{finished_reason}``
and, when the engine speculates, ``vllm:spec_decode_num_drafts``,
``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
``vllm:spec_decode_num_accepted_tokens_per_pos{position}`` — the reference engine's
:class:`~specscope.engine.records.SpecDecodeStats`, which counts exactly as vLLM does (see
:mod:`specscope.backends.openai.metrics`). As vLLM, a speculating server exports one
``position`` series for each draft position ``0..k-1`` from startup (zero counts included) and a
server without SD none of the ``spec_decode`` series, so that a client can read SD on/off and k
(:mod:`specscope.backends.openai.verify`). Gauges: ``vllm:num_requests_running``,
``vllm:num_requests_waiting``. Histograms (:mod:`specscope.serve.histogram`), as vLLM counts
them: ``vllm:iteration_tokens_total`` (per engine step, the tokens its requests emitted plus the
prompts of those it gave their first token) and ``vllm:inter_token_latency_seconds`` (per request
and step after its first, the seconds since its tokens before). Every series carries ``model_name`` and ``engine`` (``"0"``: vLLM's
label for its one engine core; a data-parallel vLLM labels each rank's).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ["model_name", "engine"]  # vLLM's on every series


class EngineCollector:
    """Reads :attr:`EngineLoop.snapshot` at every scrape."""

    def __init__(self, loop, model_name: str, spec_decode: bool) -> None:
        self.loop, self.model_name, self.spec_decode = loop, model_name, spec_decode

    def collect(self):
        s = self.loop.snapshot
        name = [self.model_name, "0"]

        def counter(metric: str, doc: str, value: int) -> CounterMetricFamily:
            family = CounterMetricFamily(metric, doc, labels=LABELS)
            family.add_metric(name, value)
            return family

        def gauge(metric: str, doc: str, value: int) -> GaugeMetricFamily:
            family = GaugeMetricFamily(metric, doc, labels=LABELS)
            family.add_metric(name, value)
            return family

        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s["prompt_tokens"])
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", s["generation_tokens"]
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*LABELS, "finished_reason"],
        )
        for reason in ("length", "stop", "abort"):
            success.add_metric(name + [reason], s.get(f"success_{reason}", 0))
        yield success
        yield gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", s["num_running"]
        )
        yield gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", s["num_waiting"]
        )
        for metric, doc, histogram in (
                ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", s["iteration_tokens"]),
                ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                 s["inter_token_latency"])):
            family = HistogramMetricFamily(metric, doc, labels=LABELS)
            family.add_metric(name, histogram.cumulative(), histogram.total)
            yield family
        if not self.spec_decode:
            return
        yield counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s["num_drafts"])
        yield counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s["num_draft_tokens"])
        yield counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s["num_accepted_tokens"]
        )
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=[*LABELS, "position"],
        )
        counts = s["num_accepted_tokens_per_pos"]
        for position in range(self.loop.engine.k):
            per_pos.add_metric(name + [str(position)], counts[position] if position < len(counts) else 0)
        yield per_pos


def make_registry(loop, model_name: str, spec_decode: bool) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(loop, model_name, spec_decode))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
