"""What a causal policy knows before a step: the :class:`Observation`, and its own past steps.

A causal policy decides, before each step, which proposer runs (or none) and k, from what an
engine knows at that moment and nothing else:

- ``pos`` (output tokens so far), ``prompt_len`` and ``tokens`` (prompt + output[:pos], the
  tokens emitted so far, read-only: a tuple in the simulator, a :class:`TokensSoFar` view of its
  live history in the engine, which a tuple copy would cost O(context) at every step of every row);
- ``ngram_offer``: how many tokens n-gram lookup offers now (0: no match; at most the policy's
  deepest k), computed from the tokens so far;
- ``prompt_overlap``: the share of output trigrams so far (those ending before ``pos - 1``) that
  occur in the prompt (:func:`prompt_overlap`, :class:`OverlapCounter`);
- ``steps``: its own last :data:`MEMORY` steps as :class:`Outcome` (censored: a step that proposed
  k reveals only min(acc_len, k + 1)), plus running totals over all its steps (:class:`History`):
  per method the steps it ran, per method and draft-token depth the tokens judged and
  accepted (a model drafter's on its own steps, n-gram's agreement with the emitted tokens on
  every step).

Two builders fill it: the simulator from a trace (:class:`specscope.sim.observe.Observer`, which
never hands out the record) and the engine from live tokens
(:class:`specscope.proposers.switching.SwitchingProposer`). Both keep the past steps in a
:class:`History`, so the two agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol, Sequence, overload

import numpy as np

MEMORY = 4  # past steps an observation lists one by one
NONE = -1  # the method index of a step that proposes nothing


class Outcome(NamedTuple):
    """One past step: ``method`` (index into the policy's methods, :data:`NONE` for none), ``k``
    proposed, ``emitted`` tokens, ``ngram_offer`` = the tokens n-gram lookup offered at that step,
    ``ngram_matched`` = how many of the emitted tokens its proposal matched (their common prefix:
    min(acc_ngram − 1, emitted, offer); 0 without an n-gram trace),
    and ``draft_prob``: the drafter's probability of its first draft where a model drafter ran
    and the trace records it (None otherwise)."""

    method: int
    k: int
    emitted: int
    ngram_offer: int
    ngram_matched: int
    draft_prob: float | None = None


class TokensSoFar(Sequence[int]):
    """The first ``length`` tokens of ``source``, a list that only grows (an engine's history of a
    sequence: prompt, then each token as it is emitted), read-only and made in O(1): what they were
    when it was made, whatever is appended later."""

    __slots__ = ("_source", "_length")

    def __init__(self, source: Sequence[int], length: int) -> None:
        self._source, self._length = source, length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return tuple(self._source[i] for i in range(*index.indices(self._length)))
        if not -self._length <= index < self._length:
            raise IndexError("token index out of range")
        return self._source[index % self._length]

    def __iter__(self) -> Iterator[int]:
        return (self._source[i] for i in range(self._length))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, TokensSoFar)) and len(other) == self._length and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"TokensSoFar({list(self)!r})"


class Observation(NamedTuple):
    """What an engine knows before the step at ``pos`` (see the module docstring). Named tuples,
    this and :class:`Outcome`: immutable, and built for every sequence at every step of an
    engine at a fraction of a frozen dataclass's cost."""

    pos: int
    prompt_len: int
    tokens: Sequence[int]  # [prompt_len + pos] prompt + output so far (a tuple, or a TokensSoFar view)
    ngram_offer: int
    prompt_overlap: float
    steps: tuple[Outcome, ...]  # the last MEMORY steps, oldest first
    num_steps: int  # steps taken so far
    steps_by_method: tuple[int, ...]  # steps each method ran so far
    judged: tuple[tuple[int, ...], ...]  # [M][depth] draft tokens at depth j = 1 … depth judged so far (History)
    accepted: tuple[tuple[int, ...], ...]  # [M][depth] of those, accepted


def ngram_judged(outcome: Outcome) -> int:
    """The emitted tokens of ``outcome`` that n-gram's proposal was judged on: those it matched,
    plus the first it did not where its proposal and the step's tokens reach that far (a step
    it offered nothing judges none)."""
    return outcome.ngram_matched + (outcome.ngram_matched < min(outcome.emitted, outcome.ngram_offer))


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
    ``depth``: the deepest k it proposes; ``lookup``: n-gram's index, :data:`NONE` if absent).

    Per method and depth j = 1 … depth, it counts the draft tokens judged and accepted — the
    censored observations of each method's acceptance: a model drafter's over its own steps
    (a step emitting e of k proposed judged tokens 1 … min(e, k), accepted 1 … e − 1), n-gram's
    by its agreement on every step (:func:`ngram_judged`, ``ngram_matched``), whoever drafted.
    Plain lists and tuples, not arrays: an engine records and observes every sequence at every
    step, right after its forward passes, where an array operation's fixed cost is many times
    the arithmetic of these few counts."""

    def __init__(self, methods: int, depth: int, lookup: int = NONE):
        self._steps: list[Outcome] = []
        self._count = [0] * methods
        self._lookup = lookup
        self._judged = [[0] * depth for _ in range(methods)]
        self._accepted = [[0] * depth for _ in range(methods)]
        self._frozen: tuple | None = None  # (judged, accepted) as tuples, until the next record

    def record(self, outcome: Outcome) -> None:
        """Add the step just taken (its method is :data:`NONE` when it proposed nothing)."""
        self._steps.append(outcome)
        method = outcome.method
        if method != NONE:
            self._count[method] += 1
            if method != self._lookup:
                _count_up(self._judged[method], min(outcome.emitted, outcome.k))
                _count_up(self._accepted[method], outcome.emitted - 1)
        if self._lookup != NONE:
            _count_up(self._judged[self._lookup], ngram_judged(outcome))
            _count_up(self._accepted[self._lookup], outcome.ngram_matched)
        self._frozen = None

    def observation(self, pos: int, prompt_len: int, tokens: Sequence[int], ngram_offer: int,
                    overlap: float) -> Observation:
        """The observation before the step at ``pos`` (``tokens``: prompt + output[:pos])."""
        if self._frozen is None:
            self._frozen = (tuple(map(tuple, self._judged)), tuple(map(tuple, self._accepted)))
        judged, accepted = self._frozen
        return Observation(
            pos=pos, prompt_len=prompt_len, tokens=tokens, ngram_offer=ngram_offer, prompt_overlap=overlap,
            steps=tuple(self._steps[-MEMORY:]), num_steps=len(self._steps),
            steps_by_method=tuple(self._count), judged=judged, accepted=accepted,
        )


def _count_up(counts: list[int], depth: int) -> None:
    """Add one to ``counts[:depth]``."""
    for j in range(min(depth, len(counts))):
        counts[j] += 1


class OverlapCounter:
    """:func:`prompt_overlap` one token at a time: ``value(history)`` (prompt + output, a list
    that only grows between calls) is ``prompt_overlap(prompt, output)[len(output) - 1]``."""

    def __init__(self, prompt: list[int] | np.ndarray):
        prompt = list(map(int, prompt))
        self._start = len(prompt)
        self._grams = {tuple(prompt[j : j + 3]) for j in range(len(prompt) - 2)}
        self._done = 2  # output trigrams ending before this output index are counted
        self._hits = 0

    def value(self, history: list[int]) -> float:
        length = len(history) - self._start  # output tokens
        for end in range(self._done, length - 1):  # trigrams ending at 2 … length − 2
            at = self._start + end
            self._hits += tuple(history[at - 2 : at + 1]) in self._grams
        self._done = max(self._done, length - 1)
        count = length - 3
        return self._hits / count if count > 0 else 0.0


class Decide(Protocol):
    """The rows of one iteration deciding together → (method or NONE, k) each. ``committed``: the
    iteration's other rows, committed to chains by an admission gate, each one's (method or NONE,
    k) this step; they decide nothing but wait as long as the step takes, for whatever drafting
    and padded width the decided rows' choices add to what they run themselves."""

    def __call__(self, observed: Sequence[Observation],
                 committed: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]: ...
