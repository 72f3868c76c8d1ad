"""What a causal policy knows before a step: the :class:`Observation` the simulator builds.

A causal policy decides, before each step, which proposer runs (or none) and k, from what an
engine knows at that moment and nothing else:

- ``pos`` (output tokens so far), ``prompt_len`` and ``tokens`` (a read-only copy of prompt +
  output[:pos], the tokens emitted so far);
- ``ngram_offer``: how many tokens n-gram lookup offers now (0: no match), computed from the
  tokens so far (the trace's n-gram ``draft_len`` where recorded, else
  :func:`specscope.tracing.ngram.ngram_trace` over the tokens — its ``draft_len`` at position i
  reads only prompt + output[:i+1]);
- ``prompt_overlap``: the share of output trigrams so far (those ending before ``pos``) that
  occur in the prompt;
- ``steps``: its own last :data:`MEMORY` steps as :class:`Outcome` (censored: a step that proposed
  k reveals only min(acc_len, k + 1)), plus running totals over all its steps.

The simulator keeps the trace; an observation holds plain numbers and a copy of the tokens so
far, never a reference to the record or its arrays, so a future ``acc_len`` cannot be reached
from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specscope.trace.schema import TraceRecord
from specscope.tracing.ngram import ngram_trace

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
    ngram_agree_total: int  # Σ ngram_agree over all past steps


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


class Observer:
    """Builds observations for one request; the only holder of its trace during a walk.

    ``methods`` are the proposers a policy chooses between; ``length`` the positions walked."""

    def __init__(self, record: TraceRecord, methods: tuple[str, ...], length: int, k_max: int):
        self._methods = methods
        self._prompt = record.prompt_token_ids
        self._output = record.output_token_ids
        ngram = record.proposers.get("ngram")
        if ngram is not None and ngram.draft_len is not None:
            offer = ngram.draft_len
        else:
            offer = ngram_trace(self._prompt, self._output, k_max).draft_len
        self._offer = offer[:length].tolist()
        self._ngram_acc = None if ngram is None else ngram.acc_len[:length].tolist()
        self._overlap = prompt_overlap(self._prompt, self._output).tolist()
        self._acc = [record.acc_len(m)[:length].tolist() for m in methods]
        self._prob = [None if record.proposers[m].draft_prob is None or m == "ngram"
                      else record.proposers[m].draft_prob for m in methods]
        self._steps: list[Outcome] = []
        self._emitted = [0] * len(methods)
        self._count = [0] * len(methods)
        self._agree = 0

    def offer(self, method: int, pos: int) -> int | None:
        """What ``method`` offers at ``pos`` (n-gram: its draft length; a model: no cap)."""
        return self._offer[pos - 1] if self._methods[method] == "ngram" else None

    def observe(self, pos: int) -> Observation:
        """The observation before the step at ``pos``."""
        tokens = np.concatenate([self._prompt, self._output[:pos]])
        tokens.flags.writeable = False
        return Observation(
            pos=pos, prompt_len=len(self._prompt), tokens=tokens, ngram_offer=self._offer[pos - 1],
            prompt_overlap=self._overlap[pos - 1], steps=tuple(self._steps[-MEMORY:]),
            num_steps=len(self._steps), emitted_by_method=tuple(self._emitted),
            steps_by_method=tuple(self._count), ngram_agree_total=self._agree,
        )

    def step(self, pos: int, method: int, k: int) -> int:
        """Run the step at ``pos`` (``method`` proposing ``k``; NONE or k = 0: nothing) and
        record its censored outcome; returns the tokens it emitted."""
        emitted = 1 if method == NONE or k == 0 else min(self._acc[method][pos - 1], k + 1)
        agree = 0 if self._ngram_acc is None else min(self._ngram_acc[pos - 1], emitted)
        prob = None
        if method != NONE and k > 0 and self._prob[method] is not None:
            value = float(self._prob[method][pos - 1, 0])
            prob = None if np.isnan(value) else value
        self._steps.append(Outcome(method if k > 0 else NONE, k, emitted, agree, prob))
        if method != NONE and k > 0:
            self._emitted[method] += emitted
            self._count[method] += 1
        self._agree += agree
        return emitted


Decide = Callable[[Observation], tuple[int, int]]  # observation → (method index or NONE, k)
