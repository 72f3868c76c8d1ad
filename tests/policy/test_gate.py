"""The admission gate: its features, its decision, its file, a committed request priced as its
chain, and the fit that keeps a gate only where it pays."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from specscope.costmodel.base import FractionDrafting, LinearDrafting
from specscope.costmodel.linear import LinearCostModel
from specscope.policy.gate import ADMISSION_FEATURES, LEAF, Gate, admission_features
from specscope.policy.learned import gate_from_json
from specscope.sim.grid import SimConfig, drafting_of, plan_for
from specscope.sim.mixed import predict_mixed
from specscope.sim.paper import predict_paper
from specscope.sim.policies import parse_policy
from specscope.sim.switching import SwitchDrafting, causal_plan
from specscope.trace.schema import ProposerTrace, TraceRecord

METHODS = ("ngram", "eagle")
WIDTH = len(ADMISSION_FEATURES)
WORK = LinearDrafting(c_fixed=0.03, c_tok=0.0, c_kv=0.0, c_req=0.02)  # the policy's own work
COST = LinearCostModel("toy", c_fixed=1.0, c_tok=0.1, c_kv=0.001, overhead_s=0.05, drafting={
    "ngram": LinearDrafting(c_fixed=0.02, c_tok=0.01, c_kv=0.0),
    "eagle": LinearDrafting(c_fixed=0.2, c_tok=0.1, c_kv=0.0, c_prefill=0.05), "learned": WORK})


def gate(options, gains, split=None, low=None, high=None) -> Gate:
    """A gate over ``options`` of one leaf of ``gains`` [O], or with ``split`` = (feature, threshold,
    gains right [O]) a stump: a prompt whose feature is at most the threshold gets ``gains``. Every
    node's training prompts span ``low`` … ``high`` [F] (default: any)."""
    nodes = 1 if split is None else 3
    bounds = ((tuple(low or [-1e9] * WIDTH),) * nodes, (tuple(high or [1e9] * WIDTH),) * nodes)
    if split is None:
        return Gate(tuple(options), *bounds, (LEAF,), (0.0,), (LEAF,), (LEAF,), (tuple(gains),))
    feature, threshold, right = split
    return Gate(tuple(options), *bounds, (feature, LEAF, LEAF), (threshold, 0.0, 0.0), (1, LEAF, LEAF), (2, LEAF, LEAF),
                ((0.0,) * len(options), tuple(gains), tuple(right)))


def test_the_admission_features_are_the_prompts_length_and_its_repeated_trigrams():
    # trigrams (1,2,3) (2,3,1) (3,1,2) (1,2,3) (2,3,4): the fourth occurs earlier, 1 of 5
    assert admission_features([1, 2, 3, 1, 2, 3, 4]) == pytest.approx([7, 0.2])
    assert admission_features([7, 7]) == pytest.approx([2, 0.0])  # no trigram


def test_the_gate_commits_to_the_greatest_gain_above_zero_and_never_outside_its_prompts():
    two = [(0, 3), (1, 2)]
    assert gate(two, [0.1, 0.3]).commit([1, 2, 3]) == (1, 2)
    assert gate(two, [-0.1, -0.2]).commit([1, 2, 3]) is None  # the per-step rule wins
    # prompts of more than 10 tokens gain from the first chain
    longer = gate(two, [-1.0, -1.0], split=(0, 10.0, [0.5, 0.0]))
    assert longer.commit(list(range(10))) is None and longer.commit(list(range(11))) == (0, 3)
    # a prompt longer than any it was fitted on is decided per step, whatever its leaf says
    bounded = gate(two, [-1.0, -1.0], split=(0, 10.0, [0.5, 0.0]), low=[0, 0], high=[20, 1])
    assert bounded.commit(list(range(20))) == (0, 3) and bounded.commit(list(range(21))) is None


def test_a_prompt_walks_the_tree_to_its_leaf_and_is_judged_only_within_its_leafs_prompts():
    """Root: prompt_tokens ≤ 10 → leaf A (fitted on prompts of 2–8 tokens); else prompt_repeat ≤
    0.5 → leaf B (12–40 tokens), else leaf C (12–40). A prompt at a threshold goes left; one
    between a leaf's training prompts and its threshold (9 or 10 tokens: none like it was seen) is
    decided per step."""
    wide = (-1e9, -1e9), (1e9, 1e9)
    g = Gate(((0, 2),), (wide[0], (2, 0), wide[0], (12, 0), (12, 0.6)), (wide[1], (8, 0.5), wide[1], (40, 0.5), (40, 1)),
             (0, LEAF, 1, LEAF, LEAF), (10.0, 0.0, 0.5, 0.0, 0.0), (1, LEAF, 3, LEAF, LEAF), (2, LEAF, 4, LEAF, LEAF),
             ((0.0,), (0.1,), (0.0,), (0.2,), (0.3,)))
    assert g.leaves() == [1, 3, 4]
    assert g.predict(list(range(8))) == (0.1,) and g.predict(list(range(10))) is None  # left, beyond its prompts
    assert g.predict(list(range(12))) == (0.2,)  # no trigram repeats
    assert g.predict([1, 2, 3] * 4) == (0.3,)  # 9 of 10 trigrams occur earlier
    assert g.predict(list(range(41))) is None  # longer than any prompt that reached leaf B


@pytest.mark.parametrize("edit, message", [
    (lambda g: g.update(options=[[0, 9]]), "gate.options"),
    (lambda g: g.update(options=[[2, 1]]), "gate.options"),
    (lambda g: g.update(value=[[0.0, 1.0]] * 3), "gate.value"),
    (lambda g: g.update(threshold=["1", 0, 0]), "gate.threshold"),
    (lambda g: g.update(feature=[WIDTH, LEAF, LEAF]), "gate.feature"),
    (lambda g: g.update(left=[0, LEAF, LEAF]), "gate.left"),  # a node its own child: a walk that never ends
    (lambda g: g.update(right=[2, 1, LEAF]), "gate.right"),  # a leaf with a child
    (lambda g: g.update(feature=[]), "gate.feature"),
    (lambda g: g.update(high=[[-1e10] * WIDTH] * 3), "gate.high"),
    (lambda g: g.update(low=[[0.0] * WIDTH]), "gate.low"),
    (lambda g: g.pop("low"), "expected an object"),
])
def test_a_malformed_gate_names_its_field(edit, message):
    value = gate([(0, 3)], [1.0], split=(0, 9.5, [-1.0])).to_json()
    edit(value)
    with pytest.raises(ValueError, match=message):
        gate_from_json(value, methods=2, depth=4)


def test_a_gate_round_trips_through_its_json():
    original = gate([(0, 3), (1, 2)], [0.1, -0.2], split=(1, 0.3, [-0.5, 0.4]), low=[0, 0], high=[99, 1])
    assert original.low == ((0, 0),) * 3
    again = gate_from_json(json.loads(json.dumps(original.to_json())), methods=2, depth=3)
    assert again == original
    for prompt in ([1, 2, 3], list(range(40)), [5] * 30):
        assert again.commit(prompt) == original.commit(prompt)


def long_record(rid: str, prompt_len: int, ngram: list[int], eagle: list[int], dataset: str) -> TraceRecord:
    g = len(ngram)
    return TraceRecord(id=rid, prompt_token_ids=np.arange(1, prompt_len + 1, dtype=np.int64),
                       output_token_ids=np.arange(1000, 1000 + g, dtype=np.int64),
                       proposers={"ngram": ProposerTrace(np.asarray(ngram, dtype=np.int32),
                                                         draft_len=np.asarray([k - 1 for k in ngram], dtype=np.int32)),
                                  "eagle": ProposerTrace(np.asarray(eagle, dtype=np.int32))},
                       k_max=8, dataset=dataset)


RECORDS = [long_record(f"r{i}", 5 + 7 * i, [4, 1, 1, 3, 1, 2, 1, 1, 4, 1, 1, 1], [2, 3, 1, 2, 2, 1, 3, 1, 2, 2, 1, 1],
                       "d") for i in range(5)]


def every_step_to_eagle(b):
    return lambda observed, committed=(): [(1, 1)] * len(observed)


@pytest.mark.parametrize("mode", ["paper", "mixed"])
@pytest.mark.parametrize("option", [(0, 3), (0, 1), (1, 2)])
@pytest.mark.parametrize("pads", [False, True])
def test_a_committed_request_is_priced_as_its_chain(mode, option, pads):
    """No other proposer reads its prompt or searches its tokens, and the policy does no work for
    it: every request committed, the switching engine costs what the chain does, to the last digit."""
    cost = LinearCostModel("toy", 1.0, 0.1, 0.001, 0.05, drafting=COST.drafting, pads_verification=pads)
    predict = predict_paper if mode == "paper" else predict_mixed
    method, k = option
    for b in (1, 3):
        chain = parse_policy(f"fixed:{k}")
        expected = predict(plan_for(RECORDS, METHODS[method], chain, SimConfig(mode=mode, batch_sizes=(b,)), "d", b),
                           cost, drafting_of(cost, METHODS[method], chain), b)
        plan = causal_plan(RECORDS, METHODS, every_step_to_eagle, 8, b, together=mode == "mixed",
                           gate=Gate.always(option))
        got = predict(plan, cost, SwitchDrafting.of(cost, METHODS, causal=True), b)
        assert plan.committed.tolist() == [method] * len(RECORDS)
        assert got.throughput == pytest.approx(expected.throughput, rel=1e-12)
        assert got.time_split == pytest.approx(expected.time_split, rel=1e-12)


def test_a_request_committed_to_the_lookup_pays_no_drafter_prefill_and_no_policy_work():
    """Paper mode, B = 1, two requests: the one committed to n-gram is charged the target's
    prefill alone; the other, decided per step, EAGLE's prefill of its prompt and the policy's
    work at each of its steps."""
    short, long = RECORDS[0], RECORDS[4]  # prompts of 5 and 33 tokens
    by_length = gate([(0, 2)], [-1.0], split=(0, 9.5, [1.0]))  # commits prompts of 10 tokens or more
    plan = causal_plan([short, long], METHODS, every_step_to_eagle, 8, 1, gate=by_length)
    assert plan.committed.tolist() == [-1, 0]
    none = causal_plan([short, long], METHODS, every_step_to_eagle, 8, 1)
    switch = SwitchDrafting.of(COST, METHODS, causal=True)
    split, split_none = (predict_paper(p, COST, switch, 1).time_split for p in (plan, none))
    assert split_none["prefill"] - split["prefill"] == pytest.approx(0.05 * 33)  # EAGLE's prefill of the long prompt
    steps = plan.steps_per_request
    bare = LinearCostModel("toy", 1.0, 0.1, 0.001, 0.05, drafting={m: COST.drafting[m] for m in METHODS})
    unpriced = predict_paper(plan, bare, SwitchDrafting.of(bare, METHODS, causal=True), 1).time_split
    assert split["drafting"] - unpriced["drafting"] == pytest.approx(steps[0] * (0.03 + 0.02))  # the decided one's


def test_a_chains_k_is_the_best_where_the_chain_gains_not_summed_where_it_is_never_committed():
    """Log throughputs of a chain at k = 1, 2, 3 on dataset X, where it beats the per-step rule
    (0.0): +0.1, +0.25, +0.3; on Y, where it loses to the rule (0.0) at every k: −0.1, −0.4, −0.6.
    Summed, k = 1 (0.0 against −0.15, −0.3); by its gain where it gains, k = 3 (0.3). A chain that
    gains nowhere takes the k of its greatest summed log throughput (first of equals)."""
    from specscope.sim.fit_gate import best_k, chain_score

    x, y = {1: 0.1, 2: 0.25, 3: 0.3}, {1: -0.1, 2: -0.4, 3: -0.6}
    assert best_k(lambda k: x[k] + y[k], 3) == 1
    assert best_k(lambda k: chain_score([x[k], y[k]], [0.0, 0.0]), 3) == 3
    assert chain_score([0.1, -0.4], [0.0, 0.0]) == (0.1, pytest.approx(-0.3))
    assert best_k(lambda k: chain_score([y[k], y[k] - 0.1], [0.0, 0.0]), 3) == 1


def test_a_datasets_gains_are_leveled_to_its_mixed_mode_walks():
    """Paper mode's gains of two options for dataset A's requests, (0.1, −0.2) and (0.3, 0.0): mean
    (0.2, −0.1); its mixed-mode walks gain (−0.05, 0.1): each request shifted by (−0.25, 0.2), to
    (−0.15, 0.0) and (0.05, 0.2) — the spread between requests kept, the level the batch's. A
    dataset without a level (B) is left as it is."""
    from specscope.sim.fit_gate import leveled

    gains = np.array([[0.1, -0.2], [0.3, 0.0], [0.5, 0.5]])
    out = leveled(gains, np.array(["A", "A", "B"]), {"A": np.array([-0.05, 0.1])})
    assert out == pytest.approx(np.array([[-0.15, 0.0], [0.05, 0.2], [0.5, 0.5]]))
    assert gains[0, 0] == 0.1  # a copy


def test_a_mixed_walk_tells_the_decided_rows_the_chains_of_the_committed_rows_beside_them():
    """Mixed mode, 3 slots, five requests: prompts of 10 tokens or more committed to n-gram k = 2
    (r1 … r4), r0 decided per step. Each decision of r0 is told the (method, k) of the iteration's
    committed rows' steps — n-gram at its offer, capped at 2, or none where it offers nothing —
    as the engine tells the policy."""
    by_length = gate([(0, 2)], [-1.0], split=(0, 9.5, [1.0]))
    told = []

    def decide_for(count):
        def decide(observed, committed=()):
            told.append((len(observed), list(committed)))
            return [(1, 1)] * len(observed)
        return decide

    plan = causal_plan(RECORDS, METHODS, decide_for, 8, 3, together=True, gate=by_length)
    assert plan.committed.tolist() == [-1, 0, 0, 0, 0]
    steps = plan.steps_per_request  # r0 decodes from iteration 1 beside r1 and r2 (all admitted at 0)
    assert all(count == 1 for count, _ in told) and len(told) == steps[0]
    assert len(told[0][1]) == 2 and all(chain in ((0, 1), (0, 2), (-1, 0)) for _, chains in told for chain in chains)
    first = [(int(m), int(k)) for m, k in zip(plan.method, plan.proposed)]  # r1's and r2's first steps
    at = plan.offsets[1:3]
    assert sorted(told[0][1]) == sorted(first[i] for i in at)


SWITCH_COSTS = LinearCostModel("switching costs", 1.0, 0.05, 0.0, 0.05, drafting={
    "ngram": FractionDrafting(0.02), "eagle": LinearDrafting(c_fixed=0.2, c_tok=0.1, c_kv=0.0, c_prefill=0.02),
    "learned": LinearDrafting(c_fixed=0.05, c_tok=0.0, c_kv=0.0, c_req=0.05)})


def workloads(rng: np.random.Generator, copying: int, free: int) -> tuple[list[TraceRecord], list[TraceRecord]]:
    """Datasets of long prompts whose output n-gram copies and of short ones only EAGLE drafts
    well (12 requests each; prompt lengths interleaved across datasets of a kind)."""
    copy = [long_record(f"c{d}-{i}", 60 + 2 * i + d, [5] * 30, rng.integers(1, 3, 30).tolist(), f"copy{d}")
            for d in range(copying) for i in range(12)]
    draft = [long_record(f"f{d}-{i}", 4 + (i + d) % 4, [1] * 30, rng.integers(2, 5, 30).tolist(), f"free{d}")
             for d in range(free) for i in range(12)]
    return copy, draft


def test_a_fit_keeps_a_gate_that_carries_to_the_datasets_it_did_not_see():
    """Long prompts whose output n-gram copies, short ones that only EAGLE drafts well, and a
    switch that costs (EAGLE's prefill of every prompt, the policy's work): each dataset walked
    with the gate fitted on the others gains, so the fit keeps the gate, which commits the long
    prompts to n-gram; the file holds it and the policy reads it back."""
    from specscope.policy.learned import choosers_from_json
    from specscope.sim.fit import fit_policy

    copying, free = workloads(np.random.default_rng(0), 2, 2)
    document = fit_policy(copying + free, METHODS, SWITCH_COSTS, [1, 4], max_k=4)
    choosers = choosers_from_json(json.loads(json.dumps(document)), METHODS)
    for b in (1, 4):
        kept = choosers[b].gate
        assert kept is not None
        assert all(kept.commit(r.prompt_token_ids.tolist()) == (0, 4) for r in copying)
        assert all(kept.commit(r.prompt_token_ids.tolist()) in (None, (1, kept.options[1][1])) for r in free)
        # each leaf bounded by its own prompts in the features its path splits on, by all in the others
        prompts = np.array([admission_features(r.prompt_token_ids.tolist()) for r in copying + free])
        paths = {0: set()}
        for node, feature in enumerate(kept.feature):
            if feature != LEAF:
                paths[kept.left[node]] = paths[kept.right[node]] = paths[node] | {feature}
        for leaf in kept.leaves():
            mine = np.array([x for x in prompts if kept.leaf(x) == leaf])
            for f in range(WIDTH):
                own = f in paths[leaf]
                assert kept.low[leaf][f] == (mine if own else prompts)[:, f].min()
                assert kept.high[leaf][f] == (mine if own else prompts)[:, f].max()
        assert any(paths[leaf] for leaf in kept.leaves())  # the tree split the kinds of prompts apart


def test_a_fit_on_one_dataset_has_no_gate_and_says_so_unless_kept_in_sample():
    """Nothing tells how a gate fitted on one workload carries to another: none is fitted, unless
    asked to keep it in sample (a policy run on the workloads it was fitted on); none where asked."""
    from specscope.sim.fit import fit_policy

    copying, _ = workloads(np.random.default_rng(0), 1, 0)

    def free_of(count: int) -> list[TraceRecord]:
        return workloads(np.random.default_rng(2), 0, count)[1]

    notes: list[str] = []
    document = fit_policy(copying, METHODS, SWITCH_COSTS, [1], max_k=4, notes=notes)
    assert document["models"][0]["gate"] is None
    assert any("admission gate" in note and "one dataset" in note for note in notes)
    fitted = fit_policy(copying, METHODS, SWITCH_COSTS, [1], max_k=4, gate="fitted")  # kept in sample: it gains
    assert fitted["models"][0]["gate"] is not None and fitted["training"]["gate"] == "fitted"
    assert fit_policy(copying + free_of(1), METHODS, SWITCH_COSTS, [1], max_k=4, gate="none")["models"][0]["gate"] is None


def test_a_gate_that_does_not_carry_to_an_unseen_dataset_is_dropped():
    """Copying workloads of overlapping prompt lengths where one copies and the other does not:
    the gate fitted on one commits the other's requests to the wrong chain, so none is kept."""
    from specscope.sim.fit import fit_policy

    rng = np.random.default_rng(1)
    copy = [long_record(f"c{i}", 30 + i, [5] * 30, rng.integers(1, 3, 30).tolist(), "copies") for i in range(12)]
    other = [long_record(f"o{i}", 30 + i, [1] * 30, rng.integers(3, 6, 30).tolist(), "drafts") for i in range(12)]
    document = fit_policy(copy + other, METHODS, SWITCH_COSTS, [1], max_k=4)
    assert document["models"][0]["gate"] is None


def test_explain_shows_each_gate_and_whom_it_commits(tmp_path, capsys):
    """`policy explain FILE --traces T`: the gate per batch size (its kinds of prompts, each one's
    gains per chain and the chain it commits to), how it was kept, how many requests of each
    dataset it commits, and a committed record's chain."""
    from specscope.cli import main
    from specscope.sim.fit import fit_policy
    from specscope.trace.load import write_traces

    copying, free = workloads(np.random.default_rng(0), 2, 2)
    path, traces = tmp_path / "policy.json", tmp_path / "t.jsonl"
    path.write_text(json.dumps(fit_policy(copying + free, METHODS, SWITCH_COSTS, [1], max_k=4)))
    write_traces(traces, copying[:3] + free[:2])
    assert main(["policy", "explain", str(path), "--traces", str(traces)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "admission gate (kept where the training datasets, each walked with the gate fitted on the others, gained)" in out
    assert "ngram k=4" in out and "(committed)" in out  # the first record, a copying one, walked as its chain
    assert "copy0 │ 1 │ 0 │ ngram k=4: 3" in out
    assert re.search(r"│ 1 │ [\d.]+ … [\d.]+ prompt_tokens, [\d.]+ … [\d.]+ prompt_repeat │ ngram k=4 [+-][\d.]+, eagle k=\d "
                     r"[+-][\d.]+ │ ngram k=4 │", out), out  # a kind of prompt the gate commits to n-gram's chain


def test_a_carried_gates_folds_choose_their_chains_without_the_dataset_held_out(monkeypatch):
    """Each fold of the carried check fits the whole gate — each chain's k too — on the datasets it
    keeps: with a long-copying dataset held out, the fold's n-gram k is the one the others favour
    (it was the k chosen on all three, the held-out dataset's own deep copies included)."""
    import specscope.sim.fit_gate as fit_gate
    from specscope.sim.fit import fit_policy

    rng = np.random.default_rng(0)
    records = [long_record(f"{name}{i}", start + 2 * i, [acc] * 40, rng.integers(*eagle, 40).tolist(), name)
               for name, start, acc, eagle in (("short_copy", 60, 3, (1, 3)), ("long_copy", 61, 9, (1, 3)),
                                              ("free", 4, 1, (2, 5))) for i in range(12)]
    chosen, original = [], fit_gate.best_k

    def spy(score, depth):
        chosen.append(original(score, depth))
        return chosen[-1]

    monkeypatch.setattr(fit_gate, "best_k", spy)
    fit_policy(records, METHODS, SWITCH_COSTS, [4], max_k=8)
    ngram_ks = chosen[::2]  # (n-gram, eagle) per gate: all three datasets, then each fold
    assert len(ngram_ks) == 4 and ngram_ks[0] >= 7  # on all: the long copies pull k up
    assert min(ngram_ks[1:]) <= 3  # the fold without the long copies keeps n-gram short


def test_every_gate_the_fit_fits_levels_its_own_datasets_to_their_mixed_walks(monkeypatch):
    """The fit's gate on all three datasets, then each carried fold's on the other two: each levels
    the targets of exactly the datasets it is fitted on (none of a held-out one), to the log ratio
    of their mixed-mode walks, committed to each option against not."""
    import specscope.sim.fit_gate as fit_gate
    from specscope.sim.fit import fit_policy

    rng = np.random.default_rng(0)
    records = [long_record(f"{name}{i}", start + 2 * i, [acc] * 40, rng.integers(*eagle, 40).tolist(), name)
               for name, start, acc, eagle in (("short_copy", 60, 3, (1, 3)), ("long_copy", 61, 9, (1, 3)),
                                              ("free", 4, 1, (2, 5))) for i in range(12)]
    calls, original = [], fit_gate.leveled

    def spy(gains, source, level):
        calls.append({name: tuple(value) for name, value in level.items()})
        return original(gains, source, level)

    monkeypatch.setattr(fit_gate, "leveled", spy)
    fit_policy(records, METHODS, SWITCH_COSTS, [4], max_k=8)
    names = {"short_copy", "long_copy", "free"}
    assert [set(call) for call in calls] == [names, *({n for n in names if n != out} for out in
                                                       ("short_copy", "long_copy", "free"))]
    assert all(len(level) == 2 for call in calls for level in call.values())  # n-gram's chain and EAGLE's
    assert calls[0]["long_copy"][0] > 0 > calls[0]["free"][0]  # n-gram's chain gains on the copies alone


def test_a_gate_may_commit_to_a_drafter_its_rule_stops_at_a_confidence(tmp_path, monkeypatch):
    """The engine drafts a step's committed rows and the rule's in one call of the drafter, each row
    to its own k and p, as the simulator prices it (tests/engine/test_policy_engine.py): a fit whose
    rule stops EAGLE at p offers its gate EAGLE's chain as well, and the file loads; a fit's
    ``gate`` is one of its three ways."""
    from specscope.errors import SpecscopeError
    from specscope.policy.learned import load_policy
    from specscope.sim import fit as fit_module
    from specscope.sim.fit import fit_policy

    def stopping(records, methods, document, cost, depths, rng):  # the rule: EAGLE stops at p = 0.5
        for model in document["models"]:
            model["confidence"] = 0.5

    monkeypatch.setattr(fit_module, "choose_confidence", stopping)
    copying, free = workloads(np.random.default_rng(0), 2, 2)
    document = fit_policy(copying + free, METHODS, SWITCH_COSTS, [1, 4], max_k=4, gate="fitted")
    assert all(m["confidence"] == 0.5 for m in document["models"])
    assert any(m["gate"] and any(option[0] == 1 for option in m["gate"]["options"]) for m in document["models"])
    path = tmp_path / "p.json"
    path.write_text(json.dumps(document))
    policy = load_policy(path)
    assert policy.confidence_for(4) == 0.5
    assert any(policy.gate_for(b) is not None and any(m == 1 for m, _ in policy.gate_for(b).options) for b in (1, 4))
    with pytest.raises(SpecscopeError, match="gate 'carry': expected one of carried, fitted, none"):
        fit_policy(copying, METHODS, SWITCH_COSTS, [1], max_k=4, gate="carry")


def test_explain_says_an_old_file_predates_gates(tmp_path, capsys):
    from specscope.cli import main
    from specscope.sim.fit import fit_policy

    copying, free = workloads(np.random.default_rng(0), 2, 2)
    document = fit_policy(copying + free, METHODS, SWITCH_COSTS, [1], max_k=4, gate="none")
    del document["training"]["gate"]
    for model in document["models"]:
        del model["gate"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    assert main(["policy", "explain", str(path)]) == 0
    assert "admission gate: none at any batch size (the file predates admission gates)" in capsys.readouterr().out
