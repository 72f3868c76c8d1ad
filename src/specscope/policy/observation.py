"""What a causal policy knows before a step: the :class:`Observation`, and its own past steps.

A causal policy decides, before each step, which proposer runs (or none) and k, from what an
engine knows at that moment and nothing else:

- ``pos`` (output tokens so far), ``prompt_len`` and ``tokens`` (a read-only copy of prompt +
  output[:pos], the tokens emitted so far);
- ``ngram_offer``: how many tokens n-gram lookup offers now (0: no match; at most the policy's
  deepest k), computed from the tokens so far;
- ``prompt_overlap``: the share of output trigrams so far (those ending before ``pos - 1``) that
  occur in the prompt (:func:`prompt_overlap`, :class:`OverlapCounter`);
- ``steps``: its own last :data:`MEMORY` steps as :class:`Outcome` (censored: a step that proposed
  k reveals only min(acc_len, k + 1)), plus running totals over all its steps (:class:`History`):
  per method the steps it ran, the draft tokens they accepted and the draft tokens they tried
  (accepted + 1 when the step stopped at a rejection, i.e. emitted ≤ k: the censored
  observations of a per-token acceptance rate), and n-gram's agreement with all emitted tokens.

Two builders fill it: the simulator from a trace (:class:`specscope.sim.observe.Observer`, which
never hands out the record) and the engine from live tokens
(:class:`specscope.proposers.switching.SwitchingProposer`). Both keep the past steps in a
:class:`History`, so the two agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

MEMORY = 4  # past steps an observation lists one by one
NONE = -1  # the method index of a step that proposes nothing


@dataclass(frozen=True)
class Outcome:
    """One past step: ``method`` (index into the policy's methods, :data:`NONE` for none), ``k``
    proposed, ``emitted`` tokens, ``ngram_agree`` = how many of the emitted tokens n-gram's
    proposal at that step matched, plus one, censored at ``emitted`` (min(acc_ngram, emitted);
    0 without an n-gram trace),
    and ``draft_prob``: the drafter's probability of its first draft where a model drafter ran
    and the trace records it (None otherwise)."""

    method: int
    k: int
    emitted: int
    ngram_agree: int
    draft_prob: float | None = None


@dataclass(frozen=True)
class Observation:
    """What an engine knows before the step at ``pos`` (see the module docstring)."""

    pos: int
    prompt_len: int
    tokens: np.ndarray  # [prompt_len + pos] read-only copy
    ngram_offer: int
    prompt_overlap: float
    steps: tuple[Outcome, ...]  # the last MEMORY steps, oldest first
    num_steps: int  # steps taken so far
    emitted_by_method: tuple[int, ...]  # tokens emitted by each method's steps so far
    steps_by_method: tuple[int, ...]  # steps each method ran so far
    tried_by_method: tuple[int, ...]  # draft tokens each method's steps tried: accepted + [stopped at a rejection]
    ngram_agree_total: int  # Σ ngram_agree over all past steps
    actions: np.ndarray  # [M + 1, depth + 1] past steps per (method, k); row M: none (a read-only copy)


def prompt_overlap(prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """[G] at position i: the share of output trigrams ending before i that occur in the prompt
    (0 before the first)."""
    grams = {tuple(prompt[j : j + 3].tolist()) for j in range(len(prompt) - 2)}
    hits = np.zeros(len(output), dtype=float)
    for end in range(2, len(output)):
        hits[end] = tuple(output[end - 2 : end + 1].tolist()) in grams
    counts = np.arange(len(output)) - 2  # trigrams ending at 2 … i − 1
    cumulative = np.concatenate([[0.0], np.cumsum(hits)[:-1]])
    return np.divide(cumulative, counts, out=np.zeros(len(output)), where=counts > 0)


class History:
    """A policy's own past steps for one request, and the observation they make with what the
    engine or simulator knows now (``methods``: how many methods the policy chooses between;
    ``depth``: the deepest k it proposes)."""

    def __init__(self, methods: int, depth: int):
        self._steps: list[Outcome] = []
        self._emitted = [0] * methods
        self._count = [0] * methods
        self._tried = [0] * methods
        self._agree = 0
        self._actions = np.zeros((methods + 1, depth + 1), dtype=np.int64)

    def record(self, outcome: Outcome) -> None:
        """Add the step just taken (its method is :data:`NONE` when it proposed nothing)."""
        self._steps.append(outcome)
        if outcome.method != NONE:
            self._emitted[outcome.method] += outcome.emitted
            self._count[outcome.method] += 1
            self._tried[outcome.method] += outcome.emitted - 1 + (outcome.emitted <= outcome.k)
        self._agree += outcome.ngram_agree
        self._actions[outcome.method, outcome.k] += 1  # NONE (−1) is the last row

    def observation(self, pos: int, prompt_len: int, tokens: np.ndarray, ngram_offer: int,
                    overlap: float) -> Observation:
        """The observation before the step at ``pos`` (``tokens``: read-only prompt + output[:pos])."""
        return Observation(
            pos=pos, prompt_len=prompt_len, tokens=tokens, ngram_offer=ngram_offer, prompt_overlap=overlap,
            steps=tuple(self._steps[-MEMORY:]), num_steps=len(self._steps),
            emitted_by_method=tuple(self._emitted), steps_by_method=tuple(self._count),
            tried_by_method=tuple(self._tried), ngram_agree_total=self._agree,
            actions=_frozen(self._actions.copy()),
        )


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


class OverlapCounter:
    """:func:`prompt_overlap` one token at a time: ``value(output)`` is ``prompt_overlap(prompt,
    output)[len(output) - 1]`` for an output that only grows between calls."""

    def __init__(self, prompt: list[int] | np.ndarray):
        prompt = list(map(int, prompt))
        self._grams = {tuple(prompt[j : j + 3]) for j in range(len(prompt) - 2)}
        self._done = 2  # trigrams ending before this index are counted
        self._hits = 0

    def value(self, output: list[int] | np.ndarray) -> float:
        last = len(output) - 2  # trigrams ending at 2 … len(output) − 2
        for end in range(self._done, last + 1):
            self._hits += tuple(int(t) for t in output[end - 2 : end + 1]) in self._grams
        self._done = max(self._done, last + 1)
        count = len(output) - 3
        return self._hits / count if count > 0 else 0.0


Decide = Callable[[Observation], tuple[int, int]]  # observation → (method index or NONE, k)
