"""Causality: what a policy is handed before a step cannot reach the trace's future."""

from __future__ import annotations

import gc

import numpy as np
from policy_traces import record

from specscope.policy.observation import NONE, prompt_overlap
from specscope.sim.observe import Observer
from specscope.sim.plan import READS_EVERY, READS_FIRST
from specscope.sim.switching import causal_plan

NGRAM = [1, 3, 1, 1, 2, 1, 1, 1, 4, 1, 1, 1]
EAGLE = [2, 1, 3, 2, 1, 4, 1, 2, 1, 1, 2, 1]


def reachable(root, limit: int = 10_000) -> list:
    """Every object reachable from ``root`` through references (bounded)."""
    seen, stack, out = set(), [root], []
    while stack and len(out) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        out.append(obj)
        stack.extend(gc.get_referents(obj))
    return out


def walk(rec, decide):
    observations = []

    def spy(observed, committed=()):
        observations.extend(observed)
        return [decide(obs) for obs in observed]

    plan = causal_plan([rec], ("ngram", "eagle"), lambda b: spy, 8)
    return plan, observations


def test_observation_reaches_no_trace_array_and_only_the_tokens_so_far():
    rec = record(NGRAM, EAGLE, prob=[0.5] * len(NGRAM))
    arrays = [rec.prompt_token_ids, rec.output_token_ids,
              *(a for t in rec.proposers.values() for a in (t.acc_len, t.draft_len, t.draft_prob) if a is not None)]
    _, observations = walk(rec, lambda obs: (1, 2))
    assert observations
    for obs in observations:
        for obj in reachable(obs):
            assert obj is not rec and obj is not rec.proposers
            if isinstance(obj, np.ndarray):
                assert not any(np.shares_memory(obj, a) for a in arrays)
        expected = np.concatenate([rec.prompt_token_ids, rec.output_token_ids[:obs.pos]])
        assert isinstance(obs.tokens, tuple) and obs.tokens == tuple(expected.tolist())  # a copy nothing can change


def test_changing_the_future_changes_no_earlier_observation():
    cut = 5  # acc_len entries past index 5 differ; a step at pos <= cut + 1 has read indices < pos - 1 only
    rec = record(NGRAM, EAGLE)
    other = record(NGRAM[: cut + 1] + [8] * (len(NGRAM) - cut - 1), EAGLE[: cut + 1] + [7] * (len(EAGLE) - cut - 1))

    def decide(obs):
        return (0, 3) if obs.pos % 2 else (1, 2)

    _, first = walk(rec, decide)
    _, second = walk(other, decide)
    early = [o for o in first if o.pos <= cut + 1]
    assert len(early) >= 3
    for a, b in zip(early, second):
        assert a.pos == b.pos and a.steps == b.steps and a.steps_by_method == b.steps_by_method
        assert np.array_equal(a.judged, b.judged) and np.array_equal(a.accepted, b.accepted)
        assert a.ngram_offer == b.ngram_offer


def test_outcomes_are_censored_at_what_the_step_proposed():
    rec = record(NGRAM, EAGLE, prob=[0.25] * len(NGRAM))
    observer = Observer(rec, ("ngram", "eagle"), len(NGRAM), 8)
    # pos 3: eagle acc_len[2] = 3 but k = 1 reveals only min(3, 2) = 2; n-gram offered nothing there
    assert observer.step(3, 1, 1) == 2
    # pos 5: n-gram acc_len[4] = 2 offered 1 (draft_len), k = 4 capped by the caller, here k = 1
    assert observer.step(5, 0, 1) == 2
    assert observer.step(7, NONE, 0) == 1
    obs = observer.observe(8)
    assert [(o.method, o.k, o.emitted, o.ngram_offer, o.ngram_matched) for o in obs.steps] \
        == [(1, 1, 2, 0, 0), (0, 1, 2, 1, 1), (NONE, 0, 1, 0, 0)]
    assert [o.draft_prob for o in obs.steps] == [0.25, None, None]  # a probability only where a drafter ran
    assert obs.steps_by_method == (1, 1) and obs.num_steps == 3
    # judged per depth: n-gram's one offered token matched at pos 5; eagle's k = 1 accepted at pos 3
    assert np.asarray(obs.judged)[:, :2].tolist() == [[1, 0], [1, 0]]
    assert np.asarray(obs.accepted)[:, :2].tolist() == [[1, 0], [1, 0]]
    assert np.sum(obs.judged) == 2


def test_prompt_overlap_counts_output_trigrams_found_in_the_prompt():
    prompt = np.array([1, 2, 3, 4])
    output = np.array([1, 2, 3, 9, 2, 3, 4])
    # trigrams ending at 2: (1,2,3) yes; 3: (2,3,9) no; 4: (3,9,2) no; 5: (9,2,3) no; 6: (2,3,4) yes
    assert prompt_overlap(prompt, output).tolist() == [0, 0, 0, 1, 0.5, 1 / 3, 0.25]


def test_a_trace_whose_ngram_accepts_where_specscopes_lookup_offers_nothing_is_named():
    """Without draft_len a learned policy's n-gram offer is specscope's lookup over the tokens;
    where the trace's n-gram (another rule) accepted drafts the lookup cannot offer, the policy's
    n-gram was cut to nothing while fixed k replayed it in full (1.07× against its oracle's
    4.45×), unsaid. Tokens 10, 11, … never repeat: the lookup offers nothing anywhere."""
    from dataclasses import replace

    from policy_traces import record

    from specscope.sim.observe import offer_notes

    traced = record([3, 1, 2, 1, 1], [1] * 5)
    bare = replace(traced, proposers={**traced.proposers, "ngram": replace(traced.proposers["ngram"], draft_len=None)})
    (note,) = offer_notes([bare])
    assert note.startswith("dataset 'd': at 2 of the 2 positions where the trace's n-gram accepted drafts")
    assert offer_notes([traced]) == []  # its own draft_len is the offer: nothing recomputed


def test_without_an_ngram_trace_its_agreement_is_the_lookups_as_in_an_engine():
    """An EAGLE-only walk records n-gram's agreement from specscope's lookup over the tokens, as
    the engine does, not 0 for a record without an n-gram trace (its features depended on that)."""
    from specscope.trace.schema import ProposerTrace, TraceRecord

    output = np.array([7, 8, 9, 7, 8, 9, 7, 8, 9, 7], dtype=np.int64)  # repeats: the lookup offers and matches
    eagle = ProposerTrace(np.full(10, 2, dtype=np.int32))
    lookup = {"ngram": ProposerTrace(np.array([1, 1, 1, 1, 1, 4, 4, 3, 2, 1], dtype=np.int32))}  # the lookup's acc_len
    outcomes = []
    for proposers in ({"eagle": eagle}, {"eagle": eagle, **lookup}):
        rec = TraceRecord("r", np.arange(1, 4, dtype=np.int64), output, proposers, k_max=8)
        observer = Observer(rec, ("eagle",), 10, 8)
        for pos in (1, 3, 5, 7):
            observer.step(pos, 0, 1)
        outcomes.append([(o.ngram_offer, o.ngram_matched) for o in observer.observe(9).steps])
    assert outcomes[0] == [(0, 0), (0, 0), (0, 0), (3, 2)] == outcomes[1]  # pos 7: 3 offered, 2 emitted, both matched


def test_a_draft_prob_kept_for_no_draft_is_unknown():
    """draft_prob of shape [G, 0] (valid: no draft's probability kept) reads as unknown, not an IndexError."""
    rec = record(NGRAM, EAGLE)
    rec.proposers["eagle"].draft_prob = np.zeros((len(NGRAM), 0), dtype=np.float32)
    observer = Observer(rec, ("ngram", "eagle"), len(NGRAM), 8)
    observer.step(3, 1, 1)
    assert observer.observe(5).steps[-1].draft_prob is None


def test_a_model_drafter_taken_under_a_confidence_proposes_to_its_first_unconfident_draft():
    """p = 0.5, the walk's deepest k 3. EAGLE acc_len 3, 1, 4, 2, 1, 1 and its drafts' probabilities
    (three a position) 0.9 0.4 0.9 at position 1 and 0.2 0.9 0.9 at position 4: a policy taking EAGLE
    at k = 1 proposes 2 at position 1 (the 0.4 included) and emits 3, then 1 at position 4 and emits
    2 to the output's end. Without p: k = 1 at positions 1, 3 and 5. n-gram, a lookup, keeps its k
    (its offer of 1: positions 1, 3, 5)."""
    from dataclasses import replace

    from specscope.trace.schema import ProposerTrace

    probs = np.full((6, 3), 0.9, dtype=np.float32)
    probs[0, 1], probs[3, 0] = 0.4, 0.2
    rec = record([2] * 6, [3, 1, 4, 2, 1, 1])  # n-gram offers 1 at every position
    rec = replace(rec, proposers={**rec.proposers, "eagle": ProposerTrace(rec.acc_len("eagle"), draft_prob=probs)})

    def plan(choice, p):
        return causal_plan([rec], ("ngram", "eagle"), lambda b: lambda observed, committed=(): [choice] * len(observed), 3,
                           confidence_for=lambda b: p)

    stopped = plan((1, 1), 0.5)
    assert (stopped.pos.tolist(), stopped.proposed.tolist(), stopped.emitted.tolist()) == ([1, 4], [2, 1], [3, 2])
    assert stopped.reads_confidence.tolist() == [READS_EVERY] * 2  # every pass read: priced per pass
    fixed = plan((1, 1), None)
    assert (fixed.pos.tolist(), fixed.proposed.tolist()) == ([1, 3, 5], [1, 1, 1])
    assert fixed.reads_confidence.tolist() == [READS_FIRST] * 3  # the first draft's: the policy's next feature
    lookup = plan((0, 2), 0.5)
    assert lookup.proposed.tolist() == plan((0, 2), None).proposed.tolist() == [1, 1, 1]
    assert lookup.reads_confidence is None  # n-gram's steps read nothing
