"""A learned policy's admission gate: before a request's first step, from its prompt alone,
commit it to one method at one k for every step — a plain chain — or leave it to the per-step rule.

Why. An engine that keeps the switch open pays for it on every request: each model drafter
among the policy's methods reads every prompt (its prefill) and catches up after the steps it
sat out, n-gram lookup searches at every step (its offer is a feature), and the policy observes
and decides for every row at every step. A request that a chain serves best pays all of that
for nothing. A committed request runs exactly as that chain: no other proposer reads its prompt
or searches its tokens, and the policy does no work for it.

The rule. At admission the gate reads the prompt's features (:func:`admission_features`) and
walks a regression tree over them to a leaf that holds, for each option o = (method, k), g_o: the
predicted log of the ratio of that chain's tokens per second to the per-step rule's on such a
request at the gate's batch size (fitted over the training requests, each priced by the simulator
both ways: :mod:`specscope.sim.fit_gate`). It commits to the option of the greatest g_o where that
is above 0; otherwise the per-step rule decides every step — and so it does for a prompt outside
its leaf's bounds (``low``/``high``): in each feature the leaf's path splits on, the range of the
training prompts that reached it (a leaf speaks for prompts like those it was fitted on, not for a
kind of prompt between two it saw), in the others the range of all training prompts. A tree,
not a line: the gains are levels of kinds of prompts — on the study's workloads MTP's chain gains
3 % over the rule on prompts of 14–32 tokens and loses 23–39 % on those of 52–90, which no line in
the length follows.

A policy file holds one gate per batch size (its model's ``gate``; null or absent: none, every
request decided per step): ``options`` [[method index, k], …] and the tree's nodes [N], the root
first: ``feature`` (the feature a node splits on; -1: a leaf), ``threshold`` (a prompt goes to
``left`` where its feature is at most this, else to ``right``; children come after their node, -1
at a leaf), ``value`` [N][O] (g at a leaf) and ``low``/``high`` [N][F] (the node's bounds, as
above); plain numbers only (read by
:func:`specscope.policy.learned.gate_from_json`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

ADMISSION_FEATURES = {
    "prompt_tokens": "the prompt's length in tokens",
    "prompt_repeat": "share of the prompt's trigrams that occur earlier in the prompt",
}

CARRIED, FITTED, NO_GATE = "carried", "fitted", "none"  # how a fit keeps a gate (specscope.sim.fit_gate)
GATE_KEPT = (CARRIED, FITTED, NO_GATE)
LEAF = -1  # a node's feature and children at a leaf
Commitment = tuple[int, int] | None  # (method index, k) a request is committed to; None: decided per step


def admission_features(prompt: Sequence[int]) -> list[float]:
    """The gate's features of ``prompt`` (order of :data:`ADMISSION_FEATURES`)."""
    grams = list(zip(prompt, prompt[1:], prompt[2:]))  # each trigram, in order
    repeats = len(grams) - len(set(grams))  # those whose trigram occurs earlier: all but each one's first
    return [float(len(prompt)), repeats / len(grams) if grams else 0.0]


@dataclass(frozen=True)
class Gate:
    """One batch size's admission gate (module docstring); plain tuples, walked in plain Python
    (on two features numpy's calls cost more than the walk)."""

    options: tuple[tuple[int, int], ...]  # [O] (method index, k ≥ 1)
    low: tuple[tuple[float, ...], ...]  # [N][F] each node's bounds (module docstring): least features
    high: tuple[tuple[float, ...], ...]  # [N][F] greatest
    feature: tuple[int, ...]  # [N] the feature each node splits on (LEAF at a leaf)
    threshold: tuple[float, ...]  # [N] a prompt goes left where its feature ≤ this
    left: tuple[int, ...]  # [N] children, after their node (LEAF at a leaf)
    right: tuple[int, ...]  # [N]
    value: tuple[tuple[float, ...], ...]  # [N][O] the predicted gains (read at leaves)

    @classmethod
    def always(cls, option: tuple[int, int]) -> "Gate":
        """The gate that commits every request to ``option``: a chain walked as a committed request is."""
        width = len(ADMISSION_FEATURES)
        return cls((option,), ((-math.inf,) * width,), ((math.inf,) * width,), (LEAF,), (0.0,), (LEAF,), (LEAF,),
                   ((1.0,),))

    def leaf(self, x: Sequence[float]) -> int:
        """The leaf features ``x`` [F] reach from the root."""
        node = 0
        while self.feature[node] != LEAF:
            node = self.left[node] if x[self.feature[node]] <= self.threshold[node] else self.right[node]
        return node

    def predict(self, prompt: Sequence[int]) -> tuple[float, ...] | None:
        """[O] g_o of ``prompt``: the predicted log ratio of each option's rate to the per-step
        rule's; None where a feature lies outside its leaf's bounds."""
        x = admission_features(prompt)
        leaf = self.leaf(x)
        if not all(lo <= v <= hi for v, lo, hi in zip(x, self.low[leaf], self.high[leaf])):
            return None
        return self.value[leaf]

    def commit(self, prompt: Sequence[int]) -> Commitment:
        """The option ``prompt``'s request is committed to, or None: decided per step."""
        gains = self.predict(prompt)
        if not gains or max(gains) <= 0.0:
            return None
        return self.options[gains.index(max(gains))]

    def leaves(self) -> list[int]:
        """The leaves' node indices, in the file's order."""
        return [node for node, f in enumerate(self.feature) if f == LEAF]

    def to_json(self) -> dict:
        return {"options": [list(o) for o in self.options], "low": [list(v) for v in self.low],
                "high": [list(v) for v in self.high],
                "feature": list(self.feature), "threshold": list(self.threshold), "left": list(self.left),
                "right": list(self.right), "value": [list(v) for v in self.value]}
