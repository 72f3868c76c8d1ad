"""Fit the linear cost model to measured per-step records of an engine run.

From every step record (see :mod:`specscope.engine.records`):

- target forward: ``verify_s ≈ c_fixed + c_tok·tokens_verified + c_kv·kv_tokens``, plus one
  point ``prefill_s ≈ c_fixed + c_tok·prefill_tokens`` per step that prefilled;
- overhead per step: the mean of ``sample_s + overhead_s`` over the steps without SD (the
  simulator's overhead covers sampling and bookkeeping);
- drafting per method, n-gram included: everything an SD step costs beyond its verify forward
  and that plain-step overhead — ``draft_s`` plus the extra sampling and bookkeeping of
  checking drafts — as ``c_fixed + c_tok·(k + 1) + c_kv·kv_tokens + c_req·batch_size`` with
  ``k + 1 = tokens_verified / batch_size``, charged on every step: the reference engine runs
  its lookup or drafter for every request on every step, matched or not (the paper's n-gram
  fraction describes vLLM, not this engine);
- the engine verifies a rectangular batch (every request padded to the longest proposal), so
  the fitted model has ``pads_verification=True``.

Each linear fit minimises the squared *relative* error (times span orders of magnitude) with
non-negative coefficients: every subset of the terms is solved by least squares and the best
feasible one kept (three terms, so seven small solves).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

import numpy as np

from specscope.costmodel.base import Drafting, LinearDrafting
from specscope.costmodel.linear import LinearCostModel
from specscope.errors import SpecscopeError

NO_SD = "none"  # the engine's method name for a run without speculative decoding


@dataclass
class FitQuality:
    """Median and 90th-percentile relative error of the fitted forward time over its points."""

    points: int
    median_rel_error: float
    p90_rel_error: float


def nonnegative_relative_fit(features: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Coefficients ≥ 0 minimising Σ ((features @ coef − t) / t)²; features [n, m], times [n]."""
    if len(times) == 0:
        raise SpecscopeError("cost-model fit: no measured steps to fit")
    weights = 1.0 / np.maximum(times, 1e-12)
    a, b = features * weights[:, None], times * weights
    best, best_error = np.zeros(features.shape[1]), np.inf
    for size in range(1, features.shape[1] + 1):
        for subset in combinations(range(features.shape[1]), size):
            coef_subset, *_ = np.linalg.lstsq(a[:, subset], b, rcond=None)
            if np.any(coef_subset < 0):
                continue
            coef = np.zeros(features.shape[1])
            coef[list(subset)] = coef_subset
            error = float(np.sum((a @ coef - b) ** 2))
            if error < best_error:
                best, best_error = coef, error
    return best


def _design(batched: np.ndarray, kv: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(batched, dtype=float), batched.astype(float), kv.astype(float)])


def fit_linear(steps: Sequence, name: str = "fitted") -> tuple[LinearCostModel, FitQuality]:
    """Fit a :class:`LinearCostModel` to step records (objects with the StepRecord fields)."""
    decode = [s for s in steps if s.batch_size > 0 and s.verify_s > 0]
    prefill = [s for s in steps if s.prefill_tokens > 0 and s.prefill_s > 0]
    batched = np.array([s.tokens_verified for s in decode] + [s.prefill_tokens for s in prefill])
    kv = np.array([s.kv_tokens for s in decode] + [0] * len(prefill))
    times = np.array([s.verify_s for s in decode] + [s.prefill_s for s in prefill])
    c_fixed, c_tok, c_kv = nonnegative_relative_fit(_design(batched, kv), times)
    predicted = c_fixed + c_tok * batched + c_kv * kv
    rel = np.abs(predicted - times) / times
    plain = [s for s in decode if s.method == NO_SD] or decode
    overhead = float(np.mean([s.sample_s + s.overhead_s for s in plain])) if plain else 0.0
    drafting: dict[str, Drafting] = {}
    for method in sorted({s.method for s in decode} - {NO_SD}):
        mine = [s for s in decode if s.method == method]
        per_request = np.array([s.tokens_verified / s.batch_size for s in mine])
        draft_kv = np.array([s.kv_tokens for s in mine])
        running = np.array([s.batch_size for s in mine], dtype=float)
        extra = np.array([max(s.draft_s + s.sample_s + s.overhead_s - overhead, 1e-9) for s in mine])
        coef = nonnegative_relative_fit(np.column_stack([_design(per_request, draft_kv), running]), extra)
        drafting[method] = LinearDrafting(*map(float, coef))
    model = LinearCostModel(name, float(c_fixed), float(c_tok), float(c_kv), overhead, drafting,
                            pads_verification=True)
    quality = FitQuality(len(times), float(np.median(rel)), float(np.percentile(rel, 90)))
    return model, quality
