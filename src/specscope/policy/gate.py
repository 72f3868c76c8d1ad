"""A learned policy's admission gate: before a request's first step, from its prompt alone,
commit it to one method at one k for every step — a plain chain — or leave it to the per-step rule.

Why. An engine that keeps the switch open pays for it on every request: each model drafter
among the policy's methods reads every prompt (its prefill) and catches up after the steps it
sat out, n-gram lookup searches at every step (its offer is a feature), and the policy observes
and decides for every row at every step. A request that a chain serves best pays all of that
for nothing. A committed request runs exactly as that chain: no other proposer reads its prompt
or searches its tokens, and the policy does no work for it.

The rule. At admission the gate reads the prompt's features (:func:`admission_features`,
standardised by the training prompts' ``mean``/``scale``) and, for each option o = (method, k),
predicts g_o = w_o · z + b_o: the log of the ratio of that chain's tokens per second to the
per-step rule's on such a request at the gate's batch size (a linear regression over the
training requests, each priced by the simulator both ways). It commits to the option of the
greatest g_o where that is above 0; otherwise (and for a prompt outside the training prompts'
range of any feature, ``low``/``high``: no extrapolation) the per-step rule decides every step.

A policy file holds one gate per batch size (its model's ``gate``; null or absent: none, every
request decided per step): ``options`` [[method index, k], …], ``mean``/``scale``/``low``/``high``
[F], ``weights`` [O][F] and ``bias`` [O]; plain numbers only (read by
:func:`specscope.policy.learned.gate_from_json`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

ADMISSION_FEATURES = {
    "log_prompt": "log(1 + prompt length)",
    "log_prompt_squared": "log(1 + prompt length) squared (a gain that peaks at some prompt length)",
    "prompt_repeat": "share of the prompt's trigrams that occur earlier in the prompt",
}

CARRIED, FITTED, NO_GATE = "carried", "fitted", "none"  # how a fit keeps a gate (specscope.sim.fit_gate)
GATE_KEPT = (CARRIED, FITTED, NO_GATE)
Commitment = tuple[int, int] | None  # (method index, k) a request is committed to; None: decided per step


def admission_features(prompt: Sequence[int]) -> list[float]:
    """The gate's features of ``prompt`` (order of :data:`ADMISSION_FEATURES`)."""
    grams = list(zip(prompt, prompt[1:], prompt[2:]))  # each trigram, in order
    repeats = len(grams) - len(set(grams))  # those whose trigram occurs earlier: all but each one's first
    length = math.log1p(len(prompt))
    return [length, length * length, repeats / len(grams) if grams else 0.0]


@dataclass(frozen=True)
class Gate:
    """One batch size's admission gate (module docstring)."""

    options: tuple[tuple[int, int], ...]  # [O] (method index, k ≥ 1)
    mean: np.ndarray  # [F] of the training prompts' features
    scale: np.ndarray  # [F] (> 0)
    low: np.ndarray  # [F] least of the training prompts' features
    high: np.ndarray  # [F] greatest
    weights: np.ndarray  # [O, F] over the standardised features
    bias: np.ndarray  # [O]

    @classmethod
    def always(cls, option: tuple[int, int]) -> "Gate":
        """The gate that commits every request to ``option``: a chain walked as a committed request is."""
        width = len(ADMISSION_FEATURES)
        return cls((option,), np.zeros(width), np.ones(width), np.full(width, -np.inf), np.full(width, np.inf),
                   np.zeros((1, width)), np.ones(1))

    @functools.cached_property
    def _plain(self) -> tuple[list, list, list, list, list, list]:
        """mean, scale, low, high, weights, bias as Python lists: a prompt's prediction in plain
        Python (on three features numpy's calls cost more than the arithmetic: 32 µs a prompt, now 9)."""
        return (self.mean.tolist(), self.scale.tolist(), self.low.tolist(), self.high.tolist(), self.weights.tolist(),
                self.bias.tolist())

    def predict(self, prompt: Sequence[int]) -> list[float] | None:
        """[O] g_o of ``prompt``: the predicted log ratio of each option's rate to the per-step
        rule's; None where a feature lies outside the training prompts' range."""
        x = admission_features(prompt)
        mean, scale, low, high, weights, bias = self._plain
        if not all(lo <= v <= hi for v, lo, hi in zip(x, low, high)):
            return None
        z = [(v - m) / d for v, m, d in zip(x, mean, scale)]
        return [sum(w * f for w, f in zip(row, z)) + b for row, b in zip(weights, bias)]

    def commit(self, prompt: Sequence[int]) -> Commitment:
        """The option ``prompt``'s request is committed to, or None: decided per step."""
        gains = self.predict(prompt)
        if not gains or max(gains) <= 0.0:
            return None
        return self.options[gains.index(max(gains))]

    def to_json(self) -> dict:
        return {"options": [list(o) for o in self.options], "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "low": self.low.tolist(), "high": self.high.tolist(), "weights": self.weights.tolist(),
                "bias": self.bias.tolist()}

