"""One measured run against a server: warm up, scrape ``/metrics``, load, scrape again.

:func:`measure` returns a flat row: the load figures of
:meth:`~specscope.backends.openai.client.LoadResult.summary` plus the spec-decode deltas of
:mod:`~specscope.backends.openai.metrics` (``None`` where the server has no spec-decode
counters) and the means of the server's step histograms (:func:`metrics.histogram_means`).
:func:`measure_load` also returns the run's :class:`LoadResult`, whose per-request chunk
timeline the sweep records for the cost-model calibration; :func:`measure_interleaved` measures
several servers over the same requests in alternating segments. A run with any failed request raises
:class:`MeasureError`: throughput over a partial set of requests would not be comparable with
the baseline.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Sequence

from specscope.backends.openai import metrics
from specscope.backends.openai.client import (
    ClientConfig,
    LoadResult,
    StreamError,
    joined,
    run_load,
    served_model,
    stream_completion,
)
from specscope.backends.openai.prompts import Prompt
from specscope.errors import SpecscopeError

log = logging.getLogger(__name__)
WARMUP_TOKENS = 8


STREAMING_S = 0.05  # requests streaming this long (median) tell how many a server ran at once; shorter ones
# may not overlap (the row's peak_streaming: None)


class MeasureError(SpecscopeError):
    """The run failed; the message is the reason (connection refused, HTTP 500, timeout, …)."""


def in_flight(requests: int, segments: int = 1) -> tuple[int, str]:
    """The most requests a run over ``requests`` keeps in flight at once — all of them, or cut
    into ``segments`` (:func:`measure_interleaved`'s cut) the smallest segment's — and those words.
    A batch size above it would label a run with a concurrency it never reached."""
    if segments > 1:
        return requests // segments, f"segments of {requests // segments}"
    return requests, f"{requests} requests in all"


def measure(
    config: ClientConfig, prompts: list[Prompt], concurrency: int, warmup: Prompt | None = None
) -> dict[str, object]:
    """Run ``prompts`` at ``concurrency`` against ``config.url`` and return one row; the
    server is first warmed up with one short request for ``warmup`` (default: the first prompt)."""
    return measure_load(config, prompts, concurrency, warmup)[0]


def measure_load(
    config: ClientConfig, prompts: list[Prompt], concurrency: int, warmup: Prompt | None = None
) -> tuple[dict[str, object], LoadResult]:
    """:func:`measure`'s row, and the run itself."""
    run = _Measurement([config], warmup or prompts[0], concurrency, prompts)
    run.run(prompts)
    return run.finish()


def measure_interleaved(
    replicas: list[list[ClientConfig]], prompts: list[Prompt], concurrencies: list[int], segments: int,
    warmup: Prompt | None = None,
) -> list[tuple[dict[str, object], LoadResult]]:
    """:func:`measure_load` of every run (a server each, given as its replicas: one client per
    process; at ``concurrencies``; two runs may share a server) at once, interleaved: ``prompts``
    cut into ``segments`` consecutive parts, each part run by every run in turn, the order
    reversed every other part (A B, B A, A B, …: a drift linear in time weighs on each alike),
    part i on replica i mod R of each run. Each run's row counts its own segments only
    (:func:`~specscope.backends.openai.client.joined`; its server's counters scraped around
    each of them), so a machine whose speed wanders over seconds slows every run nearly alike."""
    if segments > len(prompts):
        raise MeasureError(f"{len(prompts)} requests cannot be cut into {segments} segments")
    runs = [_Measurement(configs, warmup or prompts[0], c, prompts)
            for configs, c in zip(replicas, concurrencies, strict=True)]
    for index in range(segments):
        part = prompts[index * len(prompts) // segments : (index + 1) * len(prompts) // segments]
        for i in range(len(runs)) if index % 2 == 0 else reversed(range(len(runs))):
            runs[i].run(part, index)
    return [run.finish() for run in runs]


def stretched(warmup: Prompt, prompts: Sequence[Prompt]) -> Prompt:
    """``warmup`` repeated to the length of the longest of ``prompts`` given as it is (characters
    of text prompts, ids of prompts given as token ids; ``warmup`` itself where none is): a prompt
    as long as the run's longest that is none of its prompts unless the warm-up prompt is itself
    measured (a server that caches prefixes would otherwise serve a measured prompt from its
    cache)."""
    kind = "text" if warmup.text else "token_ids" if warmup.token_ids else None
    unit = getattr(warmup, kind) if kind else None
    size = max((len(getattr(p, kind)) for p in prompts if getattr(p, kind) is not None), default=0) if kind else 0
    return Prompt(warmup.id, **{kind: (unit * -(-size // len(unit)))[:size]}) if size else warmup


class _Measurement:
    """One measured run on one server (one or more processes: its replicas, each warmed up when
    made); its parts run (:meth:`run`) with the serving replica's ``/metrics`` scraped around each,
    so that runs sharing a server between parts count only their own; its row made from them all
    (:meth:`finish`).

    The warm-up: one short request, then as many at once as the run keeps in flight (its
    concurrency, at most its prompts), each as long as the run's longest prompt (:func:`stretched`),
    so that the server has met the largest step of the run before it is timed. (Stop 49, on
    ``specscope serve`` beside nine other servers on a 2-core machine, without this warm-up: each
    server's first prefills of seven long prompts took 2–4× what the same prefills took later, in
    the measured segments that met them; the fit predicted one such server's batch-8 throughput
    23 % above what it measured.)"""

    def __init__(self, replicas: list[ClientConfig], warmup: Prompt, concurrency: int,
                 prompts: Sequence[Prompt] = ()) -> None:
        largest = [stretched(warmup, prompts)] * min(concurrency, len(prompts))
        self.replicas = [self._warmed(config, warmup, largest) for config in replicas]
        self.config, self.concurrency = self.replicas[0], concurrency
        self.loads: list[LoadResult] = []
        self.spans: list[tuple[metrics.MetricsSnapshot, metrics.MetricsSnapshot]] = []  # scrapes around each part
        self.metrics_error: str | None = None

    @staticmethod
    def _warmed(config: ClientConfig, warmup: Prompt, largest: list[Prompt]) -> ClientConfig:
        """``config`` with its served model named, after the warm-up (class docstring) of its
        server: ``warmup``, then ``largest`` at once. A server that refuses the long ones (a
        stretched text may hold more tokens than the prompt it copies the length of, past the
        server's context) is warmed by the short request alone, and the log says so."""
        if config.model is None:
            try:
                config = replace(config, model=served_model(config.url, config.idle_timeout_s))
            except StreamError as error:
                raise MeasureError(f"{config.url}: {error}") from None
        short = replace(config, max_tokens=min(WARMUP_TOKENS, config.max_tokens))
        warmed = stream_completion(short, warmup)
        if warmed.error is not None:
            raise MeasureError(f"warm-up request failed: {warmed.error}")
        failed = [r.error for r in run_load(short, largest, len(largest)).results if r.error] if largest else []
        if failed:
            log.warning("%s: the warm-up at the run's concurrency with prompts as long as its longest failed (%s): "
                        "warmed up by one short request", config.url, failed[0])
        return config

    def run(self, prompts: list[Prompt], index: int = 0) -> None:
        """Part ``index``: ``prompts`` at this run's concurrency on replica index mod R, between
        two scrapes of it."""
        config = self.replicas[index % len(self.replicas)]
        before = self._scrape(config)
        self.loads.append(run_load(config, prompts, self.concurrency))
        after = self._scrape(config)
        if before is not None and after is not None:
            self.spans.append((before, after))

    def _scrape(self, config: ClientConfig) -> metrics.MetricsSnapshot | None:
        """The metrics of ``config``'s server now; ``None`` once a scrape failed (the counts would be partial)."""
        if self.metrics_error is None:
            try:
                return metrics.scrape(config.url, config.idle_timeout_s)
            except SpecscopeError as error:
                self.metrics_error = str(error)
        return None

    def finish(self) -> tuple[dict[str, object], LoadResult]:
        """The row of this run's parts (one load; :func:`joined` when there were several), with
        the metrics' deltas summed over them."""
        load = self.loads[0] if len(self.loads) == 1 else joined(self.loads)
        if load.failed:
            first = load.failed[0]
            raise MeasureError(
                f"{len(load.failed)}/{len(load.results)} requests failed; first ({first.id}): {first.error}"
            )
        peak, spanned, span_s = load.peak_streaming()
        metrics_error = self.metrics_error
        row = {"model_name": self.config.model, **load.summary(),
               "peak_streaming": peak if spanned >= self.concurrency and span_s >= STREAMING_S else None}
        row.update({name: None for name in metrics.SpecDecodeDelta(0, 0, 0, []).as_row()})
        row["acceptance_source"] = None
        row.update({name: None for name in metrics.HISTOGRAMS.values()})
        if metrics_error is None:
            before, after = metrics.summed(self.spans)
            row.update(metrics.histogram_means(before, after))
            if after.has_spec_decode:
                row.update(metrics.delta(before, after).as_row())
                row["acceptance_source"] = "vllm counters, delta over the run"
            elif after.sglang_accept_length is not None or after.sglang_accept_rate is not None:
                row.update(
                    acceptance_rate=after.sglang_accept_rate,
                    drafting_acceptance_length=after.sglang_accept_length,
                    sglang_spec_accept_rate=after.sglang_accept_rate,
                    sglang_spec_accept_length=after.sglang_accept_length,
                )
                row["acceptance_source"] = "sglang gauges, last logging interval"
        else:
            log.warning("no spec-decode metrics: %s", metrics_error)
        row["metrics_error"] = metrics_error
        return row, load
