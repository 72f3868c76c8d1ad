"""Price batched steps with a cost model; the prediction both simulator modes return."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specscope.costmodel.base import CostModel, Drafting, StepLoad

PHASES = ("prefill", "drafting", "verification", "overhead")


@dataclass
class Prediction:
    """What one plan costs at one batch size.

    ``throughput`` is generated tokens per second (the prefill's token included);
    ``latency_per_token`` is the mean over requests of (finish − admission) / G;
    ``time_split`` holds seconds per phase (:data:`PHASES`), summed over the run;
    ``steady_throughput`` counts only the iterations in which the batch is full (mixed mode:
    the run without its ramp-up and drain; equal to ``throughput`` in paper mode);
    ``peak_kv_tokens`` the most tokens in the KV cache in any step.
    """

    throughput: float
    latency_per_token: float
    time_split: dict[str, float]
    steady_throughput: float
    peak_kv_tokens: float = float("nan")  # the most tokens cached at once: every running sequence's
    # prompt and output so far, and the tokens a step verifies
    request_throughput: np.ndarray | None = None  # [R] paper mode: each request's B·G / latency (None: mixed)


@dataclass
class PricedSteps:
    """Seconds per step, by phase (arrays [steps])."""

    drafting: np.ndarray
    verification: np.ndarray
    overhead: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.drafting + self.verification + self.overhead


@dataclass(frozen=True)
class DeepestPasses:
    """A model drafter's drafting in a batch whose rows propose different k, as an engine runs
    it: its passes serve every row, so they run to the deepest k among them — the cost model
    prices a step whose rows all propose that k (``padded_tokens`` per row; in paper mode the
    copies propose alike and nothing changes). The mean k would price a drafter that stops each
    row at its own k for free."""

    drafting: Drafting

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray:
        return self.drafting.time(replace(load, batched_tokens=load.padded_tokens), verify_time)

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray:
        return self.drafting.prefill_time(prompt_tokens)

    def to_json(self) -> dict:
        return self.drafting.to_json()


def price_steps(cost: CostModel, drafting: Drafting | None, load: StepLoad) -> PricedSteps:
    """Verification = one target forward over the step's tokens; drafting per ``drafting``;
    one overhead per step that has running requests. ``drafting=None`` means no SD. On an engine
    that pads, the target and a drafter read every row's cache padded to the longest."""
    active = load.num_running > 0
    load = replace(load, kv_tokens=load.cached_read(cost.pads_verification))
    verified = load.padded_tokens if cost.pads_verification else load.batched_tokens
    verification = np.where(active, cost.forward_time(verified, load.kv_tokens, load.num_running), 0.0)
    draft = np.zeros_like(verification) if drafting is None else drafting.time(load, verification)
    overhead = np.where(active, cost.overhead_s, 0.0)
    return PricedSteps(draft, verification, overhead)


def prefill_time(cost: CostModel, drafting: Drafting | None, prompt_tokens: np.ndarray,
                 num_prompts: np.ndarray, from_idle: np.ndarray, pairs: np.ndarray | float = 0.0) -> np.ndarray:
    """One forward over ``num_prompts`` prompts of ``prompt_tokens`` tokens in all, with an empty
    cache (its attention computing ``pairs`` query–key pairs among them: see
    :mod:`specscope.costmodel.base`), plus the drafter's own prefill (``drafting=None``: no SD), plus ``admit_s`` where the
    prompts arrive to an idle engine (``from_idle``, bool). The step's overhead is the caller's
    (one a step, in the time split's overhead, as an engine's step records count it)."""
    prompt_tokens = np.asarray(prompt_tokens, dtype=float)
    seconds = (cost.prefill_forward_time(prompt_tokens, num_prompts, pairs)
               + cost.admit_s * np.asarray(from_idle, dtype=float))
    if drafting is not None:
        seconds = seconds + drafting.prefill_time(prompt_tokens)
    return np.where(prompt_tokens > 0, seconds, 0.0)
