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


class MeasureError(SpecscopeError):
    """The run failed; the message is the reason (connection refused, HTTP 500, timeout, …)."""


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
    run = _Measurement(config, warmup or prompts[0])
    return run.finish(run_load(run.config, prompts, concurrency))


def measure_interleaved(
    configs: list[ClientConfig], prompts: list[Prompt], concurrency: int, segments: int,
    warmup: Prompt | None = None,
) -> list[tuple[dict[str, object], LoadResult]]:
    """:func:`measure_load` on every server of ``configs`` at once, interleaved: ``prompts`` cut
    into ``segments`` consecutive parts, each part run on every server in turn, the order
    reversed every other part (A B, B A, A B, …: a drift linear in time weighs on each alike).
    Each server's row counts its own segments only (:func:`~specscope.backends.openai.client.joined`),
    so a machine whose speed wanders over seconds slows every server's runs nearly alike."""
    if segments > len(prompts):
        raise MeasureError(f"{len(prompts)} requests cannot be cut into {segments} segments")
    runs = [_Measurement(config, warmup or prompts[0]) for config in configs]
    parts: list[list[LoadResult]] = [[] for _ in runs]
    for index in range(segments):
        part = prompts[index * len(prompts) // segments : (index + 1) * len(prompts) // segments]
        order = range(len(runs)) if index % 2 == 0 else reversed(range(len(runs)))
        for i in order:
            parts[i].append(run_load(runs[i].config, part, concurrency))
    return [run.finish(joined(loads)) for run, loads in zip(runs, parts)]


class _Measurement:
    """One server's measured run: warmed up and its metrics scraped when made, its row made
    from the load (:meth:`finish`)."""

    def __init__(self, config: ClientConfig, warmup: Prompt) -> None:
        if config.model is None:
            try:
                config = replace(config, model=served_model(config.url, config.idle_timeout_s))
            except StreamError as error:
                raise MeasureError(f"{config.url}: {error}") from None
        warmed = stream_completion(replace(config, max_tokens=min(WARMUP_TOKENS, config.max_tokens)), warmup)
        if warmed.error is not None:
            raise MeasureError(f"warm-up request failed: {warmed.error}")
        self.config, self.metrics_error = config, None
        try:
            self.before = metrics.scrape(config.url, config.idle_timeout_s)
        except SpecscopeError as error:
            self.before, self.metrics_error = None, str(error)

    def finish(self, load: LoadResult) -> tuple[dict[str, object], LoadResult]:
        """The row of ``load`` (this server's), with the metrics' deltas since the warm-up."""
        if load.failed:
            first = load.failed[0]
            raise MeasureError(
                f"{len(load.failed)}/{len(load.results)} requests failed; first ({first.id}): {first.error}"
            )
        before, metrics_error = self.before, self.metrics_error
        row = {"model_name": self.config.model, **load.summary()}
        row.update({name: None for name in metrics.SpecDecodeDelta(0, 0, 0, []).as_row()})
        row["acceptance_source"] = None
        row.update({name: None for name in metrics.HISTOGRAMS.values()})
        if before is not None:
            try:
                after = metrics.scrape(self.config.url, self.config.idle_timeout_s)
            except SpecscopeError as error:
                after, metrics_error = None, str(error)
            if after is not None:
                row.update(metrics.histogram_means(before, after))
            if after is not None and after.has_spec_decode:
                row.update(metrics.delta(before, after).as_row())
                row["acceptance_source"] = "vllm counters, delta over the run"
            elif after is not None and (
                after.sglang_accept_length is not None or after.sglang_accept_rate is not None
            ):
                row.update(
                    acceptance_rate=after.sglang_accept_rate,
                    mean_acceptance_length=after.sglang_accept_length,
                    sglang_spec_accept_rate=after.sglang_accept_rate,
                    sglang_spec_accept_length=after.sglang_accept_length,
                )
                row["acceptance_source"] = "sglang gauges, last logging interval"
        if metrics_error:
            log.warning("no spec-decode metrics: %s", metrics_error)
        row["metrics_error"] = metrics_error
        return row, load
