"""The simulator's side of a causal policy: :class:`Observer` builds the
:class:`~specscope.policy.observation.Observation` before each step from a trace.

The simulator keeps the trace; an observation holds plain numbers and a copy of the tokens so
far, never a reference to the record or its arrays, so a future ``acc_len`` cannot be reached
from it. ``ngram_offer`` is the trace's n-gram ``draft_len`` where recorded, else
:func:`specscope.tracing.ngram.ngram_trace` over the tokens (its ``draft_len`` at position i
reads only prompt + output[:i+1]), capped at the policy's deepest k as the engine's lookup is;
where a record holds no n-gram trace, that lookup's agreement with the output is also n-gram's
``ngram_matched`` (an engine computes it so, whatever the traces held).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from specscope.policy.observation import NONE, History, Observation, Outcome, prompt_overlap
from specscope.sim.plan import accepted_drafts
from specscope.sim.policies import confident_drafts
from specscope.trace.schema import TraceRecord
from specscope.engine.proposer_api import NGRAM_MAX_N, NGRAM_MIN_N
from specscope.tracing.ngram import ngram_trace


class Observer:
    """Builds observations for one request; the only holder of its trace during a walk.

    ``methods`` are the proposers a policy chooses between; ``length`` the positions walked."""

    def __init__(self, record: TraceRecord, methods: tuple[str, ...], length: int, k_max: int):
        self._methods = methods
        self._prompt = record.prompt_token_ids
        self._output = record.output_token_ids
        ngram = record.proposers.get("ngram")
        if ngram is None or ngram.draft_len is None:
            offer, looked_up = _lookup(np.asarray(self._prompt, dtype=np.int64).tobytes(),
                                       np.asarray(self._output, dtype=np.int64).tobytes(), k_max)
            ngram_acc = looked_up if ngram is None else ngram.acc_len  # no n-gram trace: its agreement is the
        else:  # lookup's, as an engine's
            offer, ngram_acc = ngram.draft_len, ngram.acc_len
        self._offer = np.minimum(offer[:length], k_max).tolist()
        self._ngram_acc = ngram_acc[:length].tolist()
        self._length = length
        self._acc = [record.acc_len(m)[:length].tolist() for m in methods]
        self._prob = [None if m == "ngram" or record.proposers[m].draft_prob is None
                      or not record.proposers[m].draft_prob.shape[1]  # kept for no draft: unknown
                      else record.proposers[m].draft_prob for m in methods]
        self._history = History(len(methods), k_max, methods.index("ngram") if "ngram" in methods else NONE)

    def lookup_offer(self, pos: int) -> int:
        """The tokens n-gram lookup offers at ``pos`` (0: it found no match), whichever proposer runs."""
        return self._offer[pos - 1]

    def offer(self, method: int, pos: int) -> int | None:
        """What ``method`` offers at ``pos`` (n-gram: its draft length; a model: no cap)."""
        return self.lookup_offer(pos) if self._methods[method] == "ngram" else None

    def confident_k(self, method: int, pos: int, threshold: float, cap: int) -> int | None:
        """The drafts ``method`` proposes at ``pos`` when it stops at its first draft of probability
        below ``threshold`` (that one included), ``cap`` at most: its confidence within the step,
        known as it drafts (:func:`~specscope.sim.policies.confident_drafts`); ``None`` where the
        trace keeps no probability for it (a lookup)."""
        prob = self._prob[method]
        return None if prob is None else int(confident_drafts(prob[pos - 1: pos], threshold, cap)[0])

    @functools.cached_property
    def _tokens(self) -> tuple[int, ...]:  # sliced per step: an immutable copy (made at the first observation)
        return tuple(self._prompt.tolist() + self._output.tolist())

    @functools.cached_property
    def _overlap(self) -> list[float]:
        return prompt_overlap(self._prompt, self._output).tolist()

    def observe(self, pos: int) -> Observation:
        """The observation before the step at ``pos``."""
        return self._history.observation(pos, len(self._prompt), self._tokens[: len(self._prompt) + pos],
                                         self._offer[pos - 1],
                                         self._overlap[pos - 1])

    def emitted(self, pos: int, method: int, k: int) -> int:
        """The tokens the step at ``pos`` emits (``method`` proposing ``k``; NONE or k = 0:
        nothing), never past the output's end, as every walk (:func:`~specscope.sim.plan.walk_request`)."""
        return 1 if method == NONE or k == 0 else min(self._acc[method][pos - 1], k + 1, self._length - pos)

    def step(self, pos: int, method: int, k: int) -> int:
        """Run the step at ``pos`` (:meth:`emitted`) and record its censored outcome; returns the
        tokens it emitted."""
        emitted = self.emitted(pos, method, k)
        offer = self._offer[pos - 1]
        matched = min(self._ngram_acc[pos - 1] - 1, emitted, offer)
        prob = None
        if method != NONE and k > 0 and self._prob[method] is not None:
            value = float(self._prob[method][pos - 1, 0])
            prob = None if np.isnan(value) else value
        self._history.record(Outcome(method if k > 0 else NONE, k, emitted, offer, matched, prob))
        return emitted

    def accepted(self, pos: int, method: int, k: int) -> int:
        """The drafts the step at ``pos`` accepted (the simulator's α; a policy never sees it:
        :func:`~specscope.sim.plan.accepted_drafts`)."""
        if method == NONE or k == 0:
            return 0
        return int(accepted_drafts(self._acc[method][pos - 1], k))


@functools.lru_cache(maxsize=4096)
def _lookup(prompt: bytes, output: bytes, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """(draft_len, acc_len) of :func:`~specscope.tracing.ngram.ngram_trace` over the int64 token
    ids ``prompt`` and ``output`` (as bytes: a fit walks each record many times; the lookup, a
    loop over every position, is computed once per record and depth)."""
    lookup = ngram_trace(np.frombuffer(prompt, dtype=np.int64), np.frombuffer(output, dtype=np.int64), k_max)
    return lookup.draft_len, lookup.acc_len


def offer_notes(records: Sequence[TraceRecord]) -> list[str]:
    """A line per dataset whose n-gram records no ``draft_len``, where the trace's n-gram accepted
    more drafts than specscope's lookup over the same tokens offers: a causal policy's n-gram
    offer is that lookup (:class:`Observer`), so there its n-gram steps are cut short, while
    fixed k, adaptive and the oracles replay the trace's acc_len in full (another n-gram rule or
    other n than specscope's :func:`~specscope.tracing.ngram.ngram_trace`)."""
    counts: dict[str, list[int]] = {}
    for record in records:
        ngram = record.proposers.get("ngram")
        if ngram is None or ngram.draft_len is not None:
            continue
        accepted = ngram.acc_len[: record.output_len] - 1  # [G'] drafts the trace's n-gram had accepted
        offer = ngram_trace(record.prompt_token_ids, record.output_token_ids, int(accepted.max(initial=0))).draft_len
        mine = counts.setdefault(record.dataset or "trace", [0, 0])
        mine[0] += int(np.count_nonzero(accepted > offer[: accepted.size]))
        mine[1] += int(np.count_nonzero(accepted > 0))
    return [f"dataset {dataset!r}: at {short} of the {total} positions where the trace's n-gram accepted drafts, "
            "specscope's lookup over the same tokens offers fewer (n-gram recorded no draft_len, so a learned "
            "policy's n-gram offer is that lookup): there its n-gram steps are cut short while fixed k, adaptive and "
            "the oracles replay the trace in full — the trace's n-gram is another rule than specscope's (n "
            f"{NGRAM_MIN_N}–{NGRAM_MAX_N}, the earliest occurrence)" for dataset, (short, total) in counts.items() if short]
