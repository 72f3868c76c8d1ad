"""Proposal-length policies: how many draft tokens each SD step proposes.

A policy sees, at each step, the trace's ``acc_len`` at the step's position (``oracle`` policies
use it; the others must not) and returns the number of tokens to propose, then learns what the
step emitted. Policies are named on the command line and built by :func:`parse_policy` from the
registry :data:`POLICIES`:

- ``fixed:k`` — propose k tokens every step.
- ``adaptive`` — start at k = 5; +2 after a fully accepted step, −1 after a rejection, never
  below 1 nor above k_max (a step that proposed nothing changes nothing).
- ``oracle`` — propose exactly acc_len − 1: no verification is wasted.
- ``oracle-combined:a+b`` — per step, take the proposer whose acc_len is longer there and
  propose exactly that much.
- ``oracle-switch:a+b`` — per step, the proposer whose acc_len is longer proposes exactly that
  much, its drafting charged (:mod:`specscope.sim.switching`).
- ``learned:FILE`` — a causal policy fitted by ``specscope policy fit``: before each step it
  picks the proposer (or none) and k from an observation (:mod:`specscope.policy.learned`).
- ``confidence:p`` — a model drafter drafts until its own probability of a draft falls below p,
  that draft included (it has run the pass that made it), at most as deep as the trace kept its
  probabilities (``draft_prob``); ``confidence:p:k`` at most k. The drafter's confidence within
  the step, which it pays for, is what tells its acceptance there (on the bundled workloads the
  first draft's probability tells its acceptance with an AUC of 0.92–1.0, but the draft model's
  on chat, 0.78); every other policy here decides before the step.
- ``tree:SHAPE`` — every step drafts the static tree SHAPE (``2x2x1``, :mod:`specscope.trees`)
  and verifies its ``nodes + 1`` tokens; its acc_len is replayed from the trace's ``tree_rank``
  (the simulator swaps it in: :func:`specscope.sim.grid.plan_for`), so it proposes ``nodes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from specscope import validate
from specscope.costmodel.base import CostModel
from specscope.costmodel.linear import PROVENANCE
from specscope.errors import SpecscopeError
from specscope.methods import LEARNED, method
from specscope.policy.gate import Gate
from specscope.policy.learned import load_policy
from specscope.policy.observation import Decide
from specscope.trees import TreeShape, check_replayable, parse_tree


class PolicyState(Protocol):
    """Per-request state of a policy while it walks one trace."""

    def propose(self, acc_len: int) -> int:
        """Tokens to propose at a step where the trace says ``acc_len`` (oracles only look)."""

    def observe(self, proposed: int, emitted: int) -> None:
        """Learn that the step proposed ``proposed`` tokens and emitted ``emitted``."""


@dataclass(frozen=True)
class Policy:
    """A named policy; ``combined`` names the two traces oracle-combined reads.

    A policy of one proposer sets exactly one of ``by_position``, ``by_confidence`` (below) and
    ``new_state`` (a switching one, ``switch``, none of them): ``by_position`` maps acc_len [G]
    to k [G] for policies whose proposal depends on the position alone (the walk then needs no
    per-step Python state); ``new_state(k_max)`` makes the per-request state of the others.
    ``max_k`` is the proposal length a policy insists on (``fixed:k``); None when it proposes
    at most what the trace measured (k_max or acc_len − 1). ``tree`` is the static tree of a
    ``tree:SHAPE`` policy (its acc_len comes from ``tree_rank``, not ``acc_len``).
    ``by_confidence`` maps a drafter's ``draft_prob`` [G, m] to k [G] for a policy that reads its
    confidence within the step (``confidence:p``; ``by_position`` is then unset)."""

    name: str
    by_position: Callable[[np.ndarray], np.ndarray] | None = None
    new_state: Callable[[int], PolicyState] | None = None
    combined: tuple[str, str] | None = None
    max_k: int | None = None
    tree: TreeShape | None = None
    by_confidence: Callable[[np.ndarray], np.ndarray] | None = None
    switch: tuple[str, ...] | None = None
    decide_for: Callable[[int], Decide] | None = None
    depth: int | None = None  # a learned policy's deepest k: its walk caps n-gram's offer there, as the engine does
    confidence_for: Callable[[int], float | None] | None = None  # a learned policy's p per batch size (None: k)
    gate_for: Callable[[int], Gate | None] | None = None  # a learned policy's admission gate per batch size
    sha256: str | None = None  # a learned policy's file content (policy.learned.stamp): what its rows name


ADAPTIVE_START = 5  # adaptive's first k (the paper's), capped at the trace's depth


class _Adaptive:
    GROW, SHRINK = 2, 1

    def __init__(self, k_max: int):
        self.k_max = k_max
        self.k = min(ADAPTIVE_START, k_max)

    def propose(self, acc_len: int) -> int:
        return self.k

    def observe(self, proposed: int, emitted: int) -> None:
        if proposed == 0:
            return
        if emitted == proposed + 1:
            self.k = min(self.k + self.GROW, self.k_max)
        else:
            self.k = max(self.k - self.SHRINK, 1)


def _oracle_k(acc_len: np.ndarray) -> np.ndarray:
    """[G] acc_len − 1, as the paper's simulator proposes it: also where the output ends first, whose
    drafts past the end verification accepts and α counts (α = 1; oracle-switch proposes alike)."""
    return acc_len - 1


def _fixed(argument: str) -> Policy:
    try:
        k = validate.integer(argument, low=1, high=validate.K_MAX_LIMIT)
    except validate.Invalid as error:
        raise SpecscopeError(f"policy 'fixed:{argument}': expected fixed:k with k an integer in "
                             f"1..{validate.K_MAX_LIMIT} (k = 0 proposes nothing: that is no SD, the baseline "
                             f"of every speedup): {error}") from None
    return Policy(f"fixed:{k}", by_position=lambda acc: np.full_like(acc, k), max_k=k)


def _adaptive(argument: str) -> Policy:
    if argument:
        raise SpecscopeError("policy 'adaptive' takes no argument")
    return Policy("adaptive", new_state=_Adaptive)


def _oracle(argument: str) -> Policy:
    if argument:
        raise SpecscopeError("policy 'oracle' takes no argument")
    return Policy("oracle", by_position=_oracle_k)


def _oracle_combined(argument: str) -> Policy:
    names = _pair("oracle-combined", argument)
    return Policy(f"oracle-combined:{names[0]}+{names[1]}", by_position=_oracle_k, combined=(names[0], names[1]))


def _pair(kind: str, argument: str) -> tuple[str, str]:
    names = tuple(argument.split("+"))
    if not argument:
        raise SpecscopeError(f"policy '{kind}': name its two proposers, {kind}:A+B (a bare {kind} takes a default "
                             "pair only where the traces hold two proposers or more)")
    if len(names) != 2 or "" in names or names[0] == names[1]:
        raise SpecscopeError(f"policy '{kind}:{argument}': expected {kind}:A+B with two proposers")
    return names[0], names[1]


def _oracle_switch(argument: str) -> Policy:
    names = _pair("oracle-switch", argument)
    for name in names:
        method(name)  # an unknown method is an error: its drafting must be priced
    return Policy(f"oracle-switch:{names[0]}+{names[1]}", switch=names)


def _learned(argument: str) -> Policy:
    if not argument:
        raise SpecscopeError("policy 'learned': expected learned:FILE, a file made by `specscope policy fit`")
    learned = load_policy(argument)
    return Policy(f"learned:{argument}", switch=learned.methods, decide_for=learned.decide_for, depth=learned.depth,
                  sha256=learned.sha256, confidence_for=learned.confidence_for, gate_for=learned.gate_for)


def confident_drafts(draft_prob: np.ndarray, threshold: float, cap: int | None = None) -> np.ndarray:
    """[G] the drafts a drafter proposes at each position when it stops at the first whose
    probability (``draft_prob`` [G, m]; NaN: none offered) is below ``threshold``, that one
    included, and at the ``m``-th (or ``cap``-th) at the latest: past the probabilities kept it
    cannot tell. At least one: a model drafter's first pass always proposes."""
    above = np.nan_to_num(draft_prob, nan=-1.0) >= threshold  # [G, m]
    leading = np.cumprod(above, axis=1).sum(axis=1)  # [G] drafts at or above the threshold before the first below
    deepest = draft_prob.shape[1] if cap is None else min(cap, draft_prob.shape[1])
    return np.clip(leading + 1, 1, max(deepest, 1)).astype(np.int64)


def _confidence(argument: str) -> Policy:
    text, colon, depth = argument.partition(":")
    try:
        threshold = float(text)
        if not 0.0 < threshold <= 1.0:
            raise ValueError
        cap = validate.integer(depth, low=1, high=validate.K_MAX_LIMIT) if colon else None
    except (ValueError, validate.Invalid):
        raise SpecscopeError(f"policy {'confidence:' + argument if argument else 'confidence'!r}: expected "
                             "confidence:p or confidence:p:k, p a "
                             f"probability in (0, 1] and k an integer in 1..{validate.K_MAX_LIMIT}") from None
    name = f"confidence:{threshold!r}" + (f":{cap}" if cap else "")  # the threshold as it is used, not rounded
    return Policy(name, by_confidence=lambda prob: confident_drafts(prob, threshold, cap), max_k=cap)


def _tree(argument: str) -> Policy:
    try:
        shape = parse_tree(argument)
        check_replayable(shape)
    except validate.Invalid as error:
        raise SpecscopeError(f"policy 'tree:{argument}': expected tree:SHAPE with SHAPE a static tree such as "
                             f"2x2x1: {error}") from None
    return Policy(f"tree:{shape.name}", by_position=lambda acc: np.full_like(acc, shape.nodes), tree=shape)


POLICIES: dict[str, Callable[[str], Policy]] = {
    "fixed": _fixed,
    "adaptive": _adaptive,
    "oracle": _oracle,
    "oracle-combined": _oracle_combined,
    "oracle-switch": _oracle_switch,
    "learned": _learned,
    "tree": _tree,
    "confidence": _confidence,
}


def learned_notes(policies: Sequence[str], cost: CostModel, batch_sizes: Sequence[int]) -> list[str]:
    """One line per ``learned:FILE`` policy fitted for other prices than ``cost``'s (its choices
    weigh those, whatever the model that prices its steps here; a model of the same name with
    other coefficients counts as other prices), and one per batch size it was not fitted for
    (:meth:`~specscope.policy.learned.LearnedPolicy.rule_notes`)."""
    notes = []
    for text in policies:
        kind, _, argument = text.strip().partition(":")
        if kind != "learned" or not argument:
            continue
        policy = load_policy(argument)
        fitted = policy.document["cost_model"]
        if _choice_prices(fitted) != _choice_prices(cost.describe()):
            other = f"cost model {fitted['name']!r}" + (" (other coefficients than the one of that name here)"
                                                         if fitted["name"] == cost.name else "")
            notes.append(f"{text}: fitted for {other}, whose prices its choices weigh; its steps are priced here by "
                         f"{cost.name!r}")
        notes.extend(policy.rule_notes(batch_sizes))
    return notes


def _choice_prices(described: dict) -> dict:
    """A cost model's prices without the policy's own work (drafting entry ``learned``), which
    prices a policy's steps and none of its choices (a study adds it once the policy is fitted),
    and without what fitted it (:data:`~specscope.costmodel.linear.PROVENANCE`: the code, a sweep's
    engine and folder)."""
    drafting = {m: d for m, d in described.get("drafting", {}).items() if m != LEARNED}
    return {**{key: value for key, value in described.items() if key not in PROVENANCE}, "drafting": drafting}


def held_to(policies: Sequence[str], depth: int) -> tuple[str, ...]:
    """``policies`` with each ``fixed:k`` proposing at most ``depth`` (``fixed:min(k, depth)``),
    the others as they are; a repeat that makes is dropped, order kept."""
    return tuple(dict.fromkeys(f"fixed:{min(int(p.split(':')[1]), depth)}" if p.startswith("fixed:") else p
                               for p in policies))


def configured_policy(k: int, tree: str | None = None, confidence: float | None = None) -> str:
    """The policy an engine configured with a chain of ``k`` or the static tree named ``tree``
    runs: ``fixed:k`` or ``tree:SHAPE``; a chain whose drafter stops each row at its first draft
    below ``confidence`` p (``bench --confidence``): ``confidence:p:k``."""
    if tree:
        return f"tree:{tree}"
    return f"fixed:{k}" if confidence is None else f"confidence:{confidence!r}:{k}"


PAIRED = ("oracle-combined", "oracle-switch")  # the policies of two proposers, which a bare name pairs by default


def bare_paired(texts: Sequence[str]) -> list[str]:
    """The policies of ``texts`` of :data:`PAIRED` named without their pair (each once, in order)."""
    return [p for p in dict.fromkeys(text.strip() for text in texts) if p in PAIRED]


def parse_policies(texts: Sequence[str], default_pair: tuple[str, str] | None = None) -> list[Policy]:
    """:func:`parse_policy` of each of ``texts``; two spellings of one policy (``fixed:03`` beside
    ``fixed:3``) are refused: its rows would be recorded twice."""
    parsed = [parse_policy(text, default_pair) for text in texts]
    names = [policy.name for policy in parsed]
    twice = validate.first_repeat(names)
    if twice is not None:
        first = names.index(twice)
        raise SpecscopeError(f"policies {texts[first]!r} and {texts[names.index(twice, first + 1)]!r} are one "
                             f"policy, {twice!r}: give it once")
    learned = [(text, policy.sha256) for text, policy in zip(texts, parsed) if policy.sha256]  # a file's content
    twice = validate.first_repeat([stamp for _, stamp in learned])
    if twice is not None:
        first, again = (text for text, stamp in learned if stamp == twice)
        raise SpecscopeError(f"policies {first!r} and {again!r} read one policy file's content (SHA-256 {twice}): "
                             "give it once")
    return parsed


def parse_policy(text: str, default_pair: tuple[str, str] | None = None) -> Policy:
    """Build a policy from its name; a bare ``oracle-combined`` or ``oracle-switch`` replays
    ``default_pair`` (:func:`specscope.sim.grid.default_pair`)."""
    kind, _, argument = text.strip().partition(":")
    if kind in PAIRED and not argument and default_pair:
        argument = "+".join(default_pair)
    try:
        factory = POLICIES[kind]
    except KeyError:
        raise SpecscopeError(
            f"unknown policy {text!r}; expected one of fixed:k, adaptive, oracle, oracle-combined:A+B, oracle-switch:A+B, "
            "learned:FILE, tree:SHAPE, confidence:p"
        ) from None
    return factory(argument)
