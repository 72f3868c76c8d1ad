"""One measured run against a server: warm up, scrape ``/metrics``, load, scrape again.

:func:`measure` returns a flat row: the load figures of
:meth:`~specscope.backends.openai.client.LoadResult.summary` plus the spec-decode deltas of
:mod:`~specscope.backends.openai.metrics` (``None`` where the server has no spec-decode
counters) and the means of the server's step histograms (:func:`metrics.histogram_means`).
:func:`measure_load` also returns the run's :class:`LoadResult`, whose per-request chunk
timeline the sweep records for the cost-model calibration. A run with any failed request raises
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
    if config.model is None:
        try:
            config = replace(config, model=served_model(config.url, config.idle_timeout_s))
        except StreamError as error:
            raise MeasureError(f"{config.url}: {error}") from None
    warmed = stream_completion(
        replace(config, max_tokens=min(WARMUP_TOKENS, config.max_tokens)), warmup or prompts[0]
    )
    if warmed.error is not None:
        raise MeasureError(f"warm-up request failed: {warmed.error}")
    metrics_error = None
    try:
        before = metrics.scrape(config.url, config.idle_timeout_s)
    except SpecscopeError as error:
        before, metrics_error = None, str(error)
    load = run_load(config, prompts, concurrency)
    if load.failed:
        first = load.failed[0]
        raise MeasureError(
            f"{len(load.failed)}/{len(load.results)} requests failed; first ({first.id}): {first.error}"
        )
    row = {"model_name": config.model, **load.summary()}
    row.update({name: None for name in metrics.SpecDecodeDelta(0, 0, 0, []).as_row()})
    row["acceptance_source"] = None
    row.update({name: None for name in metrics.HISTOGRAMS.values()})
    if before is not None:
        try:
            after = metrics.scrape(config.url, config.idle_timeout_s)
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
