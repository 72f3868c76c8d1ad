"""Policies and the plan walk, on traces small enough to follow by hand."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.errors import SpecscopeError
from specscope.sim.plan import baseline_plan, walk_request
from specscope.sim.policies import parse_policy

ACC = np.array([3, 1, 2, 4, 1, 1, 1, 1], dtype=np.int32)  # G = 8


def walk(policy, acc=ACC, **kwargs):
    pos, proposed, emitted, _ = walk_request(acc, parse_policy(policy), k_max=20, **kwargs)
    return pos.tolist(), proposed.tolist(), emitted.tolist()


def test_fixed_one():
    # pos 1: acc[0]=3 → emits min(3, 2)=2; pos 3: acc[2]=2 → 2; pos 5, 6, 7: acc=1 → 1 each.
    assert walk("fixed:1") == ([1, 3, 5, 6, 7], [1, 1, 1, 1, 1], [2, 2, 1, 1, 1])


def test_fixed_three():
    # pos 1: 3 tokens → pos 4: acc[3]=4 = k+1 → pos 8 = G: done.
    assert walk("fixed:3") == ([1, 4], [3, 3], [3, 4])


def test_oracle_proposes_exactly_what_is_accepted():
    assert walk("oracle") == ([1, 4], [2, 3], [3, 4])


def test_adaptive_grows_after_full_acceptance_and_shrinks_after_rejection():
    acc = np.array([6, 1, 1, 1, 1, 1, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1], dtype=np.int32)
    # pos 1: k=5, acc 6 = k+1 (fully accepted) → k=7; pos 7: acc 8 = k+1 → k=9;
    # pos 15: acc 1 (rejection) → k=8; pos 16 = G.
    assert walk("adaptive", acc) == ([1, 7, 15], [5, 7, 9], [6, 8, 1])


def test_draft_len_limits_the_proposal_and_zero_means_no_drafting():
    acc = np.array([1, 2, 1, 1], dtype=np.int32)
    draft_len = np.array([0, 3, 2, 2], dtype=np.int32)
    assert walk("fixed:3", acc, draft_len=draft_len) == ([1, 2], [0, 3], [1, 2])


def test_no_match_guess_only_where_acc_len_is_one_and_never_for_oracles():
    rng = np.random.default_rng(0)
    pos, proposed, emitted = walk("fixed:3", ACC, match_prob=0.0, rng=rng)
    assert proposed == [3, 3]  # acc_len > 1 at both steps: the guess does not apply
    acc = np.ones(50, dtype=np.int32)
    _, proposed, _ = walk("fixed:2", acc, match_prob=0.0, rng=rng)
    assert set(proposed) == {0}
    _, proposed, _ = walk("fixed:2", acc, match_prob=1.0, rng=rng)
    assert set(proposed) == {2}
    _, proposed, _ = walk("oracle", acc, match_prob=0.0, rng=rng)
    assert set(proposed) == {0}  # the oracle proposes acc_len − 1 = 0 anyway


def test_baseline_takes_g_minus_one_single_token_steps():
    plan = baseline_plan([4, 1], [10, 5])
    assert plan.pos.tolist() == [1, 2, 3]
    assert plan.steps_per_request.tolist() == [3, 0]
    assert plan.verify_tokens.tolist() == [1, 1, 1]


@pytest.mark.parametrize("text", ["fixed", "fixed:-1", "fixed:x", "oracle:3", "nope", "oracle-combined:a", "adaptive:2"])
def test_bad_policy_names(text):
    with pytest.raises(SpecscopeError):
        parse_policy(text)


def test_policy_registry_names():
    assert parse_policy("oracle-combined", ("ngram", "eagle")).name == "oracle-combined:ngram+eagle"
    assert parse_policy("fixed:4").name == "fixed:4"


def test_adaptive_learns_nothing_from_a_step_with_no_match():
    """n-gram without draft_len, the paper's no-match guess at match_prob 0: the two steps where
    acc_len = 1 propose nothing, and adaptive keeps its k = 5 (it had counted them as rejections,
    shrunk to 3 and taken 6 steps instead of 5)."""
    acc = np.array([1, 1] + [6] * 18)
    pos, proposed, emitted, _ = walk_request(acc, parse_policy("adaptive"), k_max=8, match_prob=0.0,
                                          rng=np.random.default_rng(0))
    assert list(zip(pos.tolist(), proposed.tolist(), emitted.tolist())) == [
        (1, 0, 1), (2, 0, 1), (3, 5, 6), (9, 7, 6), (15, 6, 5)]  # 5 → 7 (all 6 accepted) → 6


def test_confidence_stops_at_the_first_draft_below_its_threshold_that_draft_included():
    """confidence:0.5 over draft_prob rows [0.9 0.8 0.2 0.9] → 3 (the third, at 0.2, proposed too:
    its pass ran), [0.1 …] → 1 (a first pass always proposes), all four at or above → 4 (as deep
    as the probabilities kept), [NaN …] (nothing offered) → 1; confidence:0.5:2 at most 2."""
    from specscope.sim.policies import confident_drafts

    prob = np.array([[0.9, 0.8, 0.2, 0.9], [0.1, 0.9, 0.9, 0.9], [0.5, 0.6, 0.7, 0.9],
                     [np.nan] * 4], dtype=np.float32)
    assert confident_drafts(prob, 0.5).tolist() == [3, 1, 4, 1]
    assert confident_drafts(prob, 0.5, cap=2).tolist() == [2, 1, 2, 1]
    policy = parse_policy("confidence:0.50:2")
    assert (policy.name, policy.max_k) == ("confidence:0.5:2", 2)
    assert parse_policy("confidence:0.1234567").name != parse_policy("confidence:0.1234568").name  # not rounded


def test_confidence_reads_the_drafters_probabilities_never_the_acc_len():
    """The walk: pos 1 proposes 3 (acc_len 3 emits 3); pos 4 proposes 1 (its first draft at 0.1)
    and emits 2 of acc_len 4. The same probabilities over other acc_len propose the same at a
    visited position: the policy is given draft_prob alone."""
    prob = np.full((8, 4), 0.9, dtype=np.float32)
    prob[0, 2] = 0.2
    prob[3, 0] = 0.1
    policy = parse_policy("confidence:0.5")
    pos, proposed, emitted, _ = walk_request(ACC, policy, k_max=4, draft_prob=prob)
    assert (pos.tolist(), proposed.tolist(), emitted.tolist()) == ([1, 4, 6, 7], [3, 1, 4, 4], [3, 2, 1, 1])
    other = np.array([1, 1, 1, 1, 1, 1, 1, 1], dtype=np.int32)
    pos, proposed, _, _ = walk_request(other, policy, k_max=4, draft_prob=prob)
    assert proposed.tolist() == [3, 4, 4, 1, 4, 4, 4]  # pos 1 … 7 read rows 0 … 6: the same k from the same rows


@pytest.mark.parametrize("text", ["confidence", "confidence:0", "confidence:1.5", "confidence:x", "confidence:0.5:0",
                                  "confidence:0.5:2:3", "confidence:nan", "confidence:0.5:"])
def test_bad_confidence_policies(text):
    with pytest.raises(SpecscopeError, match=r"expected confidence:p or confidence:p:k"):
        parse_policy(text)
