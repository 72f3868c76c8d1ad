"""Simulator pricing: hand-computed cases and properties (with their exact conditions)."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.costmodel.base import FractionDrafting, LinearDrafting
from specscope.costmodel.linear import LinearCostModel
from specscope.errors import SpecscopeError
from specscope.fingerprint import file_sha256
from specscope.sim.grid import SimConfig, simulate
from specscope.sim.mixed import admission_iterations, predict_mixed
from specscope.sim.paper import predict_paper
from specscope.sim.plan import baseline_plan, make_plan
from specscope.sim.policies import parse_policy
from specscope.trace import ProposerTrace, TraceRecord
from specscope.version import code_version

COST = LinearCostModel("hand", c_fixed=1.0, c_tok=0.1, c_kv=0.01, overhead_s=0.5,
                       drafting={"ngram": FractionDrafting(0.1), "eagle": LinearDrafting(0.2, 0.0, 0.0)})
ACC = np.array([3, 1, 2, 4, 1, 1, 1, 1], dtype=np.int32)


def record(acc, prompt_len=10, rid="r", proposer="ngram", draft_len=None):
    acc = np.asarray(acc, dtype=np.int32)
    return TraceRecord(rid, np.arange(prompt_len), np.arange(len(acc)),
                       {proposer: ProposerTrace(acc, None if draft_len is None else np.asarray(draft_len, dtype=np.int32))},
                       k_max=20, dataset="d")


def oracle_plan(acc=ACC, prompt_len=10):
    return make_plan([acc], [prompt_len], parse_policy("oracle"), k_max=20)


def test_paper_mode_hand_computed_batch_one():
    # Oracle steps at pos 1 and 4 verify 3 and 4 tokens with 11 and 14 cached tokens:
    # forward = 1 + 0.1·3 + 0.01·11 = 1.41 and 1 + 0.4 + 0.14 = 1.54; n-gram drafting 10 % of
    # that; 0.5 overhead per step; prefill = 1 + 0.1·10 = 2 plus its step's 0.5 overhead (in the
    # split's overhead, as an engine's step records count it).
    sd = predict_paper(oracle_plan(), COST, COST.drafting_for("ngram"), 1)
    latency = 2.5 + (1.41 + 0.141 + 0.5) + (1.54 + 0.154 + 0.5)
    assert sd.throughput == pytest.approx(8 / latency)
    assert sd.time_split == pytest.approx({"prefill": 2.0, "drafting": 0.295, "verification": 2.95, "overhead": 1.5})
    assert sd.peak_kv_tokens == 14 + 4  # the step at pos 4: 14 cached, 4 verified
    # Without SD: 7 steps at pos 1..7, forward = 1.2 + 0.01·pos, plus overheads and prefill.
    base = predict_paper(baseline_plan([8], [10]), COST, None, 1)
    assert base.throughput == pytest.approx(8 / (2.5 + 7 * 1.2 + 0.01 * 28 + 7 * 0.5))


def test_paper_mode_hand_computed_batch_two():
    # Two copies: every step verifies and caches twice as many tokens.
    sd = predict_paper(oracle_plan(), COST, COST.drafting_for("ngram"), 2)
    latency = (3.0 + 0.5) + (1.82 + 0.182 + 0.5) + (2.08 + 0.208 + 0.5)
    assert sd.throughput == pytest.approx(16 / latency)
    assert sd.peak_kv_tokens == 2 * (14 + 4)


def test_model_drafting_is_charged_on_every_step():
    sd = predict_paper(oracle_plan(np.ones(4, dtype=np.int32)), COST, COST.drafting_for("eagle"), 1)
    assert sd.time_split["drafting"] == pytest.approx(3 * 0.2)
    lookup = predict_paper(oracle_plan(np.ones(4, dtype=np.int32)), COST, COST.drafting_for("ngram"), 1)
    assert lookup.time_split["drafting"] == 0.0  # proposing nothing costs no lookup


def test_admission_is_fifo_into_free_slots():
    # a request holds its slot for its prefill's iteration and then its steps: r0 iterations 0-3,
    # r1 0-1, r2 2-4 (r1's slot), r3 4-6 (r0's)
    assert admission_iterations(np.array([3, 1, 2, 2]), 2).tolist() == [0, 0, 2, 4]
    assert admission_iterations(np.array([0, 2]), 1).tolist() == [0, 1]  # a prefill alone holds its slot too


def test_mixed_mode_hand_computed_two_requests_one_slot():
    plan = make_plan([ACC, ACC], [10, 10], parse_policy("oracle"), k_max=20)
    mixed = predict_mixed(plan, COST, COST.drafting_for("ngram"), 1)
    alone = predict_paper(oracle_plan(), COST, COST.drafting_for("ngram"), 1)
    # One slot: the requests run back to back, so the makespan is twice one request's latency.
    assert mixed.throughput == pytest.approx(alone.throughput)
    assert mixed.latency_per_token == pytest.approx(alone.latency_per_token)


def test_mixed_mode_two_slots_share_steps():
    plan = make_plan([ACC, ACC], [10, 10], parse_policy("oracle"), k_max=20)
    mixed = predict_mixed(plan, COST, COST.drafting_for("ngram"), 2)
    together = predict_paper(oracle_plan(), COST, COST.drafting_for("ngram"), 2)
    assert mixed.throughput == pytest.approx(together.throughput)  # 2·G / the same latency
    assert mixed.peak_kv_tokens == together.peak_kv_tokens == 2 * (14 + 4)


acc_strategy = st.lists(st.integers(1, 6), min_size=2, max_size=60)
coef = st.floats(0.0, 2.0)


@settings(max_examples=60, deadline=None)
@given(acc=acc_strategy, prompt_len=st.integers(1, 50), b=st.sampled_from([1, 4, 16]),
       policy=st.sampled_from(["fixed:1", "fixed:3", "adaptive", "oracle"]))
def test_mixed_with_one_slot_equals_paper_with_batch_one(acc, prompt_len, b, policy):
    """Exact condition: a single request (or per-request latencies); B = 1 in both modes."""
    r = record(acc, prompt_len, draft_len=[5] * len(acc))
    config = dict(batch_sizes=(1,), sample=None)
    paper = simulate([r], ["ngram"], [policy], COST, SimConfig(mode="paper", **config))[0]
    mixed = simulate([r], ["ngram"], [policy], COST, SimConfig(mode="mixed", **config))[0]
    assert mixed.speedup == pytest.approx(paper.speedup)
    assert mixed.latency_per_token == pytest.approx(paper.latency_per_token)


@settings(max_examples=60, deadline=None)
@given(g=st.integers(2, 80), k=st.integers(1, 8), b=st.sampled_from([1, 8, 64]),
       c_tok=st.floats(1e-4, 1.0), c_kv=coef, c_fixed=coef,
       mode=st.sampled_from(["paper", "mixed"]), proposer=st.sampled_from(["ngram", "eagle"]))
def test_all_ones_acceptance_makes_every_fixed_k_slower(g, k, b, c_tok, c_kv, c_fixed, mode, proposer):
    """Exact condition: the proposer offers k tokens at every step (draft_len ≥ k, or a model
    drafter) and verifying more tokens costs more (c_tok > 0). Without SD the steps are the
    same; with SD each verifies k extra tokens and may pay drafting."""
    cost = LinearCostModel("p", c_fixed, c_tok, c_kv, 0.1, COST.drafting)
    requests = [record(np.ones(g), 7, rid=f"r{i}", proposer=proposer, draft_len=[k] * g) for i in range(b)]
    (row,) = simulate(requests, [proposer], [f"fixed:{k}"], cost, SimConfig(mode=mode, batch_sizes=(b,)))
    assert row.speedup < 1.0


def consistent_trace(draw_values, g):
    """acc[i+1] ≥ acc[i] − 1 and acc[i] ≤ G − 1 − i: a run accepted at one position stays
    accepted one later, and nothing is emitted past the end (the step reading acc[i] starts
    with i + 1 tokens generated)."""
    acc = []
    for p, value in enumerate(draw_values[:g]):
        low = max(1, acc[-1] - 1) if acc else 1
        acc.append(min(max(value, low), max(1, g - 1 - p)))
    return np.asarray(acc, dtype=np.int32)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(1, 8), min_size=3, max_size=80), k=st.integers(1, 6),
       b=st.sampled_from([1, 8, 32]), c_tok=coef, c_fixed=st.floats(1e-3, 2.0),
       mode=st.sampled_from(["paper", "mixed"]), proposer=st.sampled_from(["ngram", "eagle"]))
def test_oracle_beats_every_fixed_k(values, k, b, c_tok, c_fixed, mode, proposer):
    """Exact condition: the trace is suffix-consistent (see consistent_trace), the cached-token
    cost is zero (c_kv = 0) and drafting does not grow with k. Then the oracle is never behind a
    fixed-k walk, needs no more steps, and verifies no more tokens in total. (Without suffix
    consistency, a long oracle jump can land on a poor position and lose: see the next test.)"""
    acc = consistent_trace(values, len(values))
    cost = LinearCostModel("p", c_fixed, c_tok, 0.0, 0.1, COST.drafting)
    requests = [record(acc, 5, rid=f"r{i}", proposer=proposer, draft_len=[20] * len(acc)) for i in range(b)]
    rows = simulate(requests, [proposer], ["oracle", f"fixed:{k}"], cost, SimConfig(mode=mode, batch_sizes=(b,)))
    oracle, fixed = rows
    assert oracle.speedup >= fixed.speedup * (1 - 1e-9)


def test_oracle_can_lose_without_suffix_consistency():
    # pos 1 emits 4 (the oracle jumps to 5, where only 1 is emitted); fixed:2 stops at 4, where
    # 3 are emitted, and reaches G = 7 in two steps instead of three.
    acc = np.array([4, 1, 1, 3, 1, 1, 1], dtype=np.int32)
    r = record(acc, 5, draft_len=[20] * 7)
    cost = LinearCostModel("p", 1.0, 0.0, 0.0, 0.0, COST.drafting)
    oracle, fixed = simulate([r], ["ngram"], ["oracle", "fixed:2"], cost, SimConfig(mode="paper", batch_sizes=(1,)))
    assert oracle.speedup < fixed.speedup


@settings(max_examples=40, deadline=None)
@given(acc=acc_strategy, factor=st.floats(1e-3, 1e3), mode=st.sampled_from(["paper", "mixed"]),
       policy=st.sampled_from(["fixed:2", "adaptive", "oracle"]), proposer=st.sampled_from(["ngram", "eagle"]))
def test_scaling_every_cost_leaves_speedup_unchanged(acc, factor, mode, policy, proposer):
    """Exact: every time is linear in the coefficients (n-gram drafting is a fraction)."""
    r = record(acc, 9, proposer=proposer)
    config = SimConfig(mode=mode, batch_sizes=(1, 8), guess_no_match=False)
    base = simulate([r], [proposer], [policy], COST, config)
    scaled = simulate([r], [proposer], [policy], COST.scaled(factor), config)
    for a, b in zip(base, scaled):
        assert b.speedup == pytest.approx(a.speedup, rel=1e-9)


def test_combined_takes_the_longer_acc_len_over_the_common_length():
    r = TraceRecord("c", np.arange(4), np.arange(6), {
        "ngram": ProposerTrace(np.array([1, 4, 1, 1, 1, 1], dtype=np.int32)),
        "eagle": ProposerTrace(np.array([2, 1, 1, 1, 1], dtype=np.int32)),
    }, k_max=20, dataset="d")
    plan = make_plan([np.maximum(r.acc_len("ngram")[:5], r.acc_len("eagle"))], [4], parse_policy("oracle"), 20)
    assert plan.pos.tolist() == [1, 3, 4] and plan.emitted.tolist() == [2, 1, 1]
    (row,) = simulate([r], ["combined"], ["oracle-combined:ngram+eagle"], COST, SimConfig(batch_sizes=(1,)))
    assert row.mean_acceptance_length == pytest.approx(4 / 3)


def test_combined_pays_the_lookups_drafting_whichever_proposer_is_named_first():
    """The paper's oracle-combined charges every step n-gram's drafting (10 % of the forward here),
    never the model drafter's (0.2 s a step): the same speedup for ngram+eagle and eagle+ngram,
    above the one that charges EAGLE's drafting on every step."""
    r = TraceRecord("c", np.arange(4), np.arange(6), {
        "ngram": ProposerTrace(np.array([1, 4, 1, 1, 1, 1], dtype=np.int32)),
        "eagle": ProposerTrace(np.array([2, 1, 1, 1, 1], dtype=np.int32)),
    }, k_max=20, dataset="d")
    rows = simulate([r], ["combined"], ["oracle-combined:ngram+eagle", "oracle-combined:eagle+ngram"], COST,
                    SimConfig(batch_sizes=(1,)))
    plan = make_plan([np.maximum(r.acc_len("ngram")[:5], r.acc_len("eagle"))], [4], parse_policy("oracle"), 20)
    charged = predict_paper(plan, COST, COST.drafting_for("eagle"), 1)
    baseline = predict_paper(baseline_plan(plan.output_len, plan.prompt_len), COST, None, 1)
    assert rows[0].speedup == pytest.approx(rows[1].speedup, rel=1e-12)
    assert rows[0].speedup > charged.throughput / baseline.throughput


def test_no_step_emits_past_the_output_and_steady_state_at_batch_one_is_the_whole_run():
    """A trace's acc_len may reach one token past the output's end (the bonus token after its last
    token); the step emits only what the output has left, so at batch 1 (no ramp-up, no drain)
    the steady-state speedup is the whole run's."""
    r = record([3, 1, 1, 3, 2, 1, 2, 2], rid="end", proposer="eagle")  # at pos 7: 2 drafts accepted, 1 token left
    (row,) = simulate([r], ["eagle"], ["fixed:2"], COST, SimConfig(mode="mixed", batch_sizes=(1,)))
    plan = make_plan([r.acc_len("eagle")], [10], parse_policy("fixed:2"), k_max=20)
    assert plan.pos.tolist()[-1] == 7 and plan.emitted.tolist()[-1] == 1 and plan.emitted.sum() == 8 - 1
    assert row.steady_speedup == pytest.approx(row.speedup)


def test_steady_state_spreads_each_prefill_over_its_requests_steps():
    """Four requests at B = 4 with prompts of 2000 tokens: the first iteration prefills all four at
    once. Counted whole where it fell, it outweighed the rest (the steady speedup read 0.98× where
    the whole run's was 1.67×: 128 requests of 80 tokens at B = 128); left out, steady state paid
    no prefill at all, which a server under constant load does. Spread over each request's steps,
    identical requests in steady state run as the whole run (no drain here)."""
    acc = [4] * 13  # G = 13: fixed:3 takes steps at pos 1, 5, 9 (then 13 >= G); no SD takes 12
    records = [record(acc, prompt_len=2000, rid=f"r{i}", proposer="eagle") for i in range(4)]
    (row,) = simulate(records, ["eagle"], ["fixed:3"], COST, SimConfig(mode="mixed", batch_sizes=(4,)))
    assert row.steady_speedup == pytest.approx(row.speedup, rel=1e-12)
    longer = records + [record([4] * 25, prompt_len=2000, rid="long", proposer="eagle")]  # decodes alone at the end
    (row,) = simulate(longer, ["eagle"], ["fixed:3"], COST, SimConfig(mode="mixed", batch_sizes=(4,)))
    assert row.steady_speedup != pytest.approx(row.speedup, rel=1e-3)


def test_an_oracle_combined_named_without_acc_combined_is_simulated_not_dropped():
    """``--acc eagle --policies fixed:3,oracle-combined:ngram+eagle``: the oracle-combined row was
    left out without a word (oracle-switch, named the same way, was kept)."""
    r = TraceRecord("r", np.arange(10), np.arange(8), {"ngram": ProposerTrace(ACC), "eagle": ProposerTrace(ACC[::-1])},
                    k_max=20, dataset="d")
    rows = simulate([r], ["eagle"], ["fixed:3", "oracle-combined:ngram+eagle"], COST, SimConfig(batch_sizes=(1,)))
    assert [(row.acc, row.policy) for row in rows] == [("eagle", "fixed:3"), ("combined", "oracle-combined:ngram+eagle")]


def test_requests_of_one_token_take_their_slot_for_their_prefill():
    """Outputs of one token (the prefill's): no decode step, but the prefill holds a slot for an
    iteration. At B = 1 two such requests are prefilled one after the other (they were prefilled
    together, whatever B: 2 / 0.018 s where 2 / 0.028 s is right), and τ has no step to average."""
    one = [TraceRecord(f"r{i}", np.arange(10), np.arange(1), {"eagle": ProposerTrace(np.array([1], dtype=np.int32))},
                       k_max=4, dataset="d") for i in range(2)]
    (row,) = simulate(one, ["eagle"], ["fixed:1"], COST, SimConfig(mode="mixed", batch_sizes=(1,)))
    prefill = 1.0 + 0.1 * 10 + 0.5  # c_fixed + c_tok · 10 prompt tokens + overhead
    assert row.throughput == pytest.approx(2 / (2 * prefill)) and np.isnan(row.mean_acceptance_length)


def test_replay_statistics():
    (row,) = simulate([record(ACC, draft_len=[20] * 8)], ["ngram"], ["fixed:3"], COST, SimConfig(batch_sizes=(1,)))
    # Steps propose 3 and 3 drafts, emit 3 and 4: α = (2 + 3) / 6, τ = 7 / 2.
    assert row.acceptance_rate == pytest.approx(5 / 6)
    assert row.mean_acceptance_length == pytest.approx(3.5)


def test_a_last_step_cut_short_by_the_output_counts_every_draft_verification_accepted():
    """G = 3, acc_len 4 at pos 1: fixed:3 proposes 3 and emits the 2 tokens left; verification
    accepted all 3 drafts (the trace says so: the output's end cuts what the step emits, not what
    it accepted), as an engine counts drafts accepted past max_tokens: α = 1 (it read 2 / 3, the
    reference engine 1 on the same steps), and the oracle, proposing exactly acc_len − 1, wastes no
    draft (α = 1, as DESIGN.md defines it). τ counts what was emitted: 2. G = 2, acc_len 2: fixed:1's
    one draft is the last token, α = 1, not 0 (emitted − 1 undercounts a last step). A causal
    policy's walk counts alike."""
    from specscope.sim.switching import causal_plan

    rows = simulate([record([4, 1, 1], draft_len=[3] * 3)], ["ngram"], ["fixed:3", "oracle"], COST,
                    SimConfig(batch_sizes=(1,)))
    assert [r.acceptance_rate for r in rows] == [1.0, 1.0]
    assert [r.mean_acceptance_length for r in rows] == [2.0, 2.0]
    (row,) = simulate([record([2, 1], proposer="eagle")], ["eagle"], ["fixed:1"], COST, SimConfig(batch_sizes=(1,)))
    assert row.acceptance_rate == 1.0
    plan = causal_plan([record([4, 1, 1], proposer="eagle")], ("eagle",), lambda b: lambda seen, committed=(): [(0, 3)] * len(seen), 8)
    assert plan.accepted.tolist() == [3] and plan.emitted.tolist() == [2]


def test_adaptive_capped_below_its_start_by_the_traces_depth_is_said():
    """A trace without k_max whose longest acc_len is 2 was traced to k = 1: adaptive there is
    fixed:1 (its start, 5, capped), which a note says; a trace declaring k_max = 20 needs none."""
    from specscope.sim.grid import adaptive_notes

    shallow = TraceRecord("a", np.arange(2), np.arange(6), {"eagle": ProposerTrace(np.array([2, 2, 1, 2, 2, 1]))},
                          dataset="d")
    (note,) = adaptive_notes([shallow], ["eagle"], ["adaptive", "fixed:1"])
    assert "traced to k = 1 (its longest acc_len − 1), below adaptive's start k = 5" in note
    assert adaptive_notes([shallow], ["eagle"], ["fixed:1"]) == []
    assert adaptive_notes([replace(shallow, k_max=20)], ["eagle"], ["adaptive"]) == []
    assert "(its k_max)" in adaptive_notes([replace(shallow, k_max=3)], ["eagle"], ["adaptive"])[0]


def test_padded_verification_charges_the_longest_proposal_for_every_request():
    # Two requests in one batch: one proposes 3 drafts (verifies 4), one finds no match (1).
    plan = make_plan([np.array([1, 1], dtype=np.int32), np.array([1, 1], dtype=np.int32)], [10, 10],
                     parse_policy("fixed:3"), k_max=20,
                     draft_lens=[np.array([3, 3], dtype=np.int32), np.array([0, 0], dtype=np.int32)])
    flat = LinearCostModel("flat", 1.0, 0.1, 0.0, 0.0, {"ngram": FractionDrafting(0.0)})
    padded = LinearCostModel("padded", 1.0, 0.1, 0.0, 0.0, {"ngram": FractionDrafting(0.0)}, pads_verification=True)
    # Σ (k+1) = 5 tokens → 1.5 s; padded 2 × 4 = 8 tokens → 1.8 s (prefill 1 + 0.1·20 = 3 s each).
    assert predict_mixed(plan, flat, flat.drafting_for("ngram"), 2).time_split["verification"] == pytest.approx(1.5)
    assert predict_mixed(plan, padded, padded.drafting_for("ngram"), 2).time_split["verification"] == pytest.approx(1.8)


def test_mixed_batch_above_requests_is_skipped_with_a_warning_or_refused(caplog):
    requests = [record(ACC, rid=f"r{i}") for i in range(3)]
    rows = simulate(requests, ["ngram"], ["fixed:1"], COST, SimConfig(mode="mixed", batch_sizes=(1, 3, 8)))
    assert [row.batch_size for row in rows] == [1, 3]  # no row labelled B=8: it could not be filled
    assert "dataset 'd' has 3 requests: batch sizes 8 left out" in caplog.text
    with pytest.raises(SpecscopeError, match="dataset 'd' has 3 requests, fewer than batch size 8"):
        simulate(requests, ["ngram"], ["fixed:1"], COST, SimConfig(mode="mixed", batch_sizes=(1, 8), oversize="refuse"))
    paper = simulate(requests, ["ngram"], ["fixed:1"], COST, SimConfig(mode="paper", batch_sizes=(8,), oversize="refuse"))
    assert [row.batch_size for row in paper] == [8]  # paper mode replicates each request: any B


def test_fixed_k_above_k_max_is_refused_before_any_row():
    seen = []
    with pytest.raises(SpecscopeError, match=r"policy 'fixed:21' proposes k = 21, above the trace's k_max = 20"):
        simulate([record(ACC)], ["ngram"], ["fixed:1", "fixed:21"], COST, SimConfig(batch_sizes=(1,)), on_row=seen.append)
    assert seen == []
    unrecorded = record(ACC)
    unrecorded.k_max = None  # the largest acc_len − 1 seen stands in for it
    with pytest.raises(SpecscopeError, match=rf"above {max(ACC) - 1}, the largest acc_len − 1 .*k_max not recorded"):
        simulate([unrecorded], ["ngram"], [f"fixed:{max(ACC)}"], COST, SimConfig(batch_sizes=(1,)))
    (row,) = simulate([unrecorded], ["ngram"], [f"fixed:{max(ACC) - 1}"], COST, SimConfig(batch_sizes=(1,)))
    assert row.speedup > 0


@pytest.mark.parametrize("setting, message", [
    (dict(sample=0), "sample: expected an integer >= 1"),
    (dict(match_prob=1.5), "match_prob: expected a number <= 1"),
    (dict(seed=-1), "seed: expected an integer >= 0"),
    (dict(batch_sizes=(0,)), "batch_sizes: expected an integer >= 1"),
    (dict(oversize="cycle"), "oversize 'cycle'"),
])
def test_sim_config_refuses_bad_settings(setting, message):
    with pytest.raises(SpecscopeError, match=message):
        SimConfig(**setting)


def test_simulate_writes_the_table_to_stdout(tmp_path, capsys):
    from specscope.cli import main
    from specscope.trace.load import write_traces

    path = tmp_path / "t.jsonl"
    write_traces(path, [record(ACC, rid=f"r{i}") for i in range(2)])
    assert main(["simulate", str(path), "--acc", "ngram", "--policies", "fixed:1,oracle", "--batch-sizes", "1,2",
                 "-o", "-"]) == 0
    streams = capsys.readouterr()
    lines = streams.out.splitlines()
    assert lines[0].startswith("dataset,acc,policy,batch_size") and len(lines) == 1 + 4  # the CSV alone
    assert "predicted speedup (mixed mode" in streams.err  # the printed table: on stderr, not lost
    cells = list(csv.DictReader(lines))
    assert cells[0]["cost_model"] == "h100-llama3.1-8b"  # what priced each cell
    assert cells[0]["traces"] == f"{path.resolve()} (SHA-256 {file_sha256(path)[:12]})"
    assert cells[0]["made_by"] == code_version() and cells[0]["seed"] == "42" and cells[0]["lengths"] == "own"
    assert [c["deepest_k"] for c in cells] == ["1", "1", str(max(ACC) - 1), str(max(ACC) - 1)]


def test_a_cell_names_the_settings_that_moved_its_numbers(tmp_path, capsys):
    """Two runs told apart only by --match-prob (or --no-guess) wrote rows of equal labels and
    different speedups: each row names the no-match guess it was simulated under."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [record([1, 2, 1, 1, 1, 1], rid=f"r{i}") for i in range(2)])
    rows = {}
    for option in (["--match-prob", "0"], ["--match-prob", "1"], ["--no-guess"]):
        assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram", "--policies", "fixed:1",
                     "--batch-sizes", "1", "--format", "json", *option]) == 0
        (cell,) = json.loads(capsys.readouterr().out)
        rows[option[-1]] = (cell["match_prob"], cell["guess_no_match"], cell["speedup"])
    assert rows["0"][:2] == (0.0, True) and rows["1"][:2] == (1.0, True) and rows["--no-guess"][:2] == (None, False)
    assert rows["0"][2] != rows["1"][2]


def test_a_cost_model_file_is_named_with_its_file(tmp_path, capsys):
    """A file may call itself after a preset and hold other numbers: its rows and title say which file."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [record(ACC, rid=f"r{i}") for i in range(2)])
    (tmp_path / "mine.json").write_text(json.dumps({"name": "h100-llama3.1-8b", "forward": {
        "c_fixed": 0.01, "c_tok": 0.0, "c_kv": 0.0}, "drafting": {"ngram": {"kind": "fraction", "ratio": 0.1}}}))
    spec = str(tmp_path / "mine.json")
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram", "--policies", "fixed:1", "--batch-sizes", "1",
                 "--cost-model", spec, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["cost_model"] == f"h100-llama3.1-8b (from {spec})"


def ranked(ranks, prompt_len=10, rid="r"):
    """An eagle record whose acc_len is the greedy chain of ``ranks`` (1 + leading zeros)."""
    ranks = np.asarray(ranks, dtype=np.int16)
    acc = (1 + np.cumprod(ranks == 0, axis=1).sum(axis=1)).astype(np.int32)
    return TraceRecord(rid, np.arange(prompt_len), np.arange(len(ranks)),
                       {"eagle": ProposerTrace(acc, tree_rank=ranks)}, k_max=2, dataset="d")


# At position 0 the target's next two tokens are the drafter's 2nd, then 1st choice: a chain
# rejects at once, the tree 2x1 accepts both (acc_len 3) and its walk ends at pos 1 + 3 >= G.
TREE_RECORD = ranked([[1, 0], [0, 0], [-1, -1]])
TREE_COST = LinearCostModel("round", c_fixed=1.0, c_tok=0.1, c_kv=0.0, overhead_s=0.0,
                            drafting={"eagle": LinearDrafting(0.5, 0.01, 0.0)})


def test_tree_policy_plan_and_pricing_hand_computed():
    # tree:2x1: nodes (0,), (1,), (0, 0), (1, 0): 4 nodes, depth 2, drafter passes of widths 1 and 2.
    policy = parse_policy("tree:2x1")
    assert (policy.tree.nodes, policy.tree.draft_pass_widths) == (4, (1, 2))
    from specscope.sim.grid import plan_for
    plan = plan_for([TREE_RECORD], "eagle", policy, SimConfig(mode="paper"), "d")
    # the tree accepts 2 drafts at pos 1 (acc_len 3), but the 3-token output has 2 tokens left
    assert plan.pos.tolist() == [1] and plan.proposed.tolist() == [4] and plan.emitted.tolist() == [2]
    assert plan.draft_widths == (1, 2)
    # Paper mode, B = 2: verify 2·5 = 10 tokens: 1 + 0.1·10 = 2.0 s; drafting makes 2 passes (over
    # 1 + 2 tokens per sequence), priced per pass: 0.5 + 0.01·(2 + 1) = 0.53 s; prefill 2·10 tokens: 1 + 2 = 3 s.
    sd = predict_paper(plan, TREE_COST, TREE_COST.drafting_for("eagle"), 2)
    assert sd.time_split == pytest.approx({"prefill": 3.0, "drafting": 0.53, "verification": 2.0, "overhead": 0.0})
    assert sd.throughput == pytest.approx(2 * 3 / 5.53)
    # The chain of depth 2 rejects at pos 1 (rank 1), then at pos 2 would take both drafts (ranks
    # 0, 0) but one output token is left.
    chain = plan_for([TREE_RECORD], "eagle", parse_policy("fixed:2"), SimConfig(mode="paper"), "d")
    assert chain.emitted.tolist() == [1, 1] and chain.draft_widths == ()
    # Mixed mode gives the tree step the same price (one request: nothing else differs).
    mixed = predict_mixed(plan, TREE_COST, TREE_COST.drafting_for("eagle"), 1)
    assert mixed.time_split["drafting"] == pytest.approx(0.53)
    assert mixed.time_split["verification"] == pytest.approx(1.5)  # 1 + 0.1·5


def test_tree_policy_runs_in_both_modes_and_refuses_traces_without_ranks():
    records = [TREE_RECORD, ranked([[0, 1], [0, 0], [-1, -1]], rid="s")]
    for mode in ("paper", "mixed"):
        rows = simulate(records, ["eagle"], ["fixed:2", "tree:2x1"], TREE_COST, SimConfig(mode=mode, batch_sizes=(1, 2)))
        assert [(r.policy, r.batch_size) for r in rows] == [("fixed:2", 1), ("fixed:2", 2), ("tree:2x1", 1), ("tree:2x1", 2)]
    old = record([2, 1, 1], proposer="eagle")
    with pytest.raises(SpecscopeError, match=r"proposer 'eagle': no tree_rank in 1 records .*--trees 2x1"):
        simulate([old], ["eagle"], ["tree:2x1"], TREE_COST, SimConfig(mode="paper", batch_sizes=(1,)))
    with pytest.raises(SpecscopeError, match=r"'tree:2x1x1' is 3 deep, but tree_rank was recorded to depth 2"):
        simulate(records, ["eagle"], ["tree:2x1x1"], TREE_COST, SimConfig(mode="paper", batch_sizes=(1,)))


def test_a_lookup_beside_a_model_proposer_gets_no_tree_cell():
    """Probe: `simulate --policies fixed:3,tree:2x1x1` with the default --acc ngram,eagle refused
    the whole run (n-gram drafts no tree), its fixed cells too. n-gram now gets its fixed cells
    and EAGLE both; n-gram alone with a tree is still refused."""
    with_ngram = [replace(r, proposers={**r.proposers, "ngram": ProposerTrace(r.acc_len("eagle"))})
                  for r in (TREE_RECORD, ranked([[0, 1], [0, 0], [-1, -1]], rid="s"))]
    cost = replace(TREE_COST, drafting={**TREE_COST.drafting, "ngram": LinearDrafting(0.0, 0.0, 0.0)})
    rows = simulate(with_ngram, ["ngram", "eagle"], ["fixed:2", "tree:2x1"], cost, SimConfig(mode="paper", batch_sizes=(1,)))
    assert [(r.acc, r.policy) for r in rows] == [("ngram", "fixed:2"), ("eagle", "fixed:2"), ("eagle", "tree:2x1")]
    with pytest.raises(SpecscopeError, match=r"proposer 'ngram': policy 'tree:2x1' needs a model proposer"):
        simulate(with_ngram, ["ngram"], ["tree:2x1"], cost, SimConfig(mode="paper", batch_sizes=(1,)))


def test_a_requests_arrival_is_charged_where_the_engine_was_idle():
    """``admit_s``: a server's work on an arriving request holds up an idle engine only. Three
    requests of 2, 4 and 2 steps (no SD): at B = 1 each arrives to an idle engine (3 charges); at
    B = 2 the first two arrive together to an idle engine (one charge) and the third is admitted
    while the second still runs (none)."""
    plan = baseline_plan([3, 5, 3], [10, 10, 10])  # steps after the prefill's token: 2, 4, 2
    plain = LinearCostModel("plain", 1.0, 0.0, 0.0, 0.0)
    admitting = LinearCostModel("admitting", 1.0, 0.0, 0.0, 0.0, admit_s=0.25)
    for batch, charges in ((1, 3), (2, 1)):
        extra = (predict_mixed(plan, admitting, None, batch).time_split["prefill"]
                 - predict_mixed(plan, plain, None, batch).time_split["prefill"])
        assert extra == pytest.approx(0.25 * charges)
    # paper mode: every request's batch of copies starts alone
    extra = (predict_paper(plan, admitting, None, 2).time_split["prefill"]
             - predict_paper(plan, plain, None, 2).time_split["prefill"])
    assert extra == pytest.approx(0.25 * 3)


def test_an_engine_that_pads_prefills_the_prompts_arriving_together_at_the_longest():
    """No SD, two slots, prompts of 10 and 30 tokens arriving together, a third of 20 admitted
    alone later (c_fixed 1, c_tok 0.1 per position): the first prefill covers 2 × 30 = 60
    positions on an engine that pads (7.0 s) and 40 tokens on one that does not (5.0 s); the third's
    20 either way (3.0 s)."""
    plan = baseline_plan([3, 5, 3], [10, 30, 20])  # steps after the prefill's token: 2, 4, 2
    cost = dict(c_fixed=1.0, c_tok=0.1, c_kv=0.0, overhead_s=0.0)
    padded = predict_mixed(plan, LinearCostModel("pads", **cost, pads_verification=True), None, 2)
    summed = predict_mixed(plan, LinearCostModel("sums", **cost), None, 2)
    assert padded.time_split["prefill"] == pytest.approx(7.0 + 3.0)
    assert summed.time_split["prefill"] == pytest.approx(5.0 + 3.0)
    # their attention among their own positions: 2 × 30² = 1800 pairs padded, 10² + 30² = 1000 not; 20² later
    cost["c_prompt_kv"] = 1e-3
    padded = predict_mixed(plan, LinearCostModel("pads", **cost, pads_verification=True), None, 2)
    summed = predict_mixed(plan, LinearCostModel("sums", **cost), None, 2)
    assert padded.time_split["prefill"] == pytest.approx(7.0 + 1.8 + 3.0 + 0.4)
    assert summed.time_split["prefill"] == pytest.approx(5.0 + 1.0 + 3.0 + 0.4)


def test_an_engine_that_pads_reads_every_row_cache_at_the_longest():
    """No SD, two slots, prompts of 10 and 30 tokens decoding together and a third of 20 after the
    first (c_fixed 1 s, c_kv 0.01 s per cached token): the steps' caches are (11, 31), (12, 32),
    (33), (34, 21), (22) — 196 cached tokens in all, read as 2 × 31 + 2 × 32 + 33 + 2 × 34 + 22 =
    249 by an engine whose attention reads a rectangle: 5 + 1.96 s against 5 + 2.49 s."""
    plan = baseline_plan([3, 5, 3], [10, 30, 20])
    cost = dict(c_fixed=1.0, c_tok=0.0, c_kv=0.01, overhead_s=0.0)
    padded = predict_mixed(plan, LinearCostModel("pads", **cost, pads_verification=True), None, 2)
    summed = predict_mixed(plan, LinearCostModel("sums", **cost), None, 2)
    assert summed.time_split["verification"] == pytest.approx(5 + 1.96)
    assert padded.time_split["verification"] == pytest.approx(5 + 2.49)
    assert padded.peak_kv_tokens == summed.peak_kv_tokens  # what the cache holds is not what is read


def test_the_no_match_guess_is_said_where_it_decides(tmp_path, capsys):
    """n-gram traces without draft_len: a dataset named like one of the paper's takes its guessed
    match probability, and the run says so; any other name takes none, and the run says that every
    step there proposed."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    for name in ("qwen3-8b_cnn", "qwen3-8b_notes"):
        write_traces(tmp_path / f"{name}.jsonl", [replace(record(ACC, rid=f"r{i}"), dataset=None) for i in range(2)])
        assert main(["simulate", str(tmp_path / f"{name}.jsonl"), "--acc", "ngram", "--policies", "fixed:1",
                     "--batch-sizes", "1"]) == 0
        out = capsys.readouterr().out
        said = "with probability 0.4 (the paper's guess for its cnn traces)" in out
        assert said == (name == "qwen3-8b_cnn"), out
        assert ("its fixed and adaptive steps there are taken to have proposed (and paid its drafting) (no guess applies"
                in out) == (name != "qwen3-8b_cnn"), out
        # each row names the guess it replayed (a review: both rows said null, the option's value)
        assert main(["simulate", str(tmp_path / f"{name}.jsonl"), "--acc", "ngram", "--policies", "fixed:1",
                     "--batch-sizes", "1", "--format", "json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)
        assert row["match_prob"] == (0.4 if name == "qwen3-8b_cnn" else None)


def test_each_record_keeps_its_own_draft_len_where_another_lacks_one(tmp_path, capsys):
    """Records that did record draft_len are replayed by it even where another record of the
    dataset did not: one whose n-gram never matched (draft_len 0 everywhere) pays no drafting."""
    never = np.ones(8, dtype=np.int32)
    config = SimConfig(mode="paper", batch_sizes=(1,), guess_no_match=False)
    alone = simulate([record(never, rid="a", draft_len=np.zeros(8))], ["ngram"], ["fixed:3"], COST, config)
    mixed = simulate([record(never, rid="a", draft_len=np.zeros(8)), record(never, rid="b")], ["ngram"],
                     ["fixed:3"], COST, config)
    lacking = simulate([record(never, rid="b")], ["ngram"], ["fixed:3"], COST, config)
    assert alone[0].speedup == pytest.approx(1.0) and alone[0].time_split["drafting"] == 0.0
    assert mixed[0].time_split["drafting"] == pytest.approx(lacking[0].time_split["drafting"])  # only b's steps
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [record(never, rid="a", draft_len=np.zeros(8)), record(never, rid="b")])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram", "--policies", "fixed:3",
                 "--batch-sizes", "1", "--match-prob", "0.5"]) == 0
    assert "ngram recorded no draft_len in 1 of its 2 records (the others: their own)" in capsys.readouterr().out


def test_json_output_is_strict_json_and_no_guess_refuses_a_match_prob(tmp_path, capsys):
    """An undefined cell (no step proposed: no acceptance rate) is null on standard output as in a
    file, whether asked by --format json or by -o - with it; --match-prob with --no-guess is refused."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    path = tmp_path / "t.jsonl"
    write_traces(path, [record([1], rid=f"r{i}") for i in range(2)])  # one-token outputs: no step at all
    for extra in ([], ["-o", "-"]):
        assert main(["simulate", str(path), "--acc", "ngram", "--policies", "fixed:1", "--batch-sizes", "1",
                     "--format", "json", *extra]) == 0
        cells = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"bare {name}"))
        assert cells[0]["acceptance_rate"] is None
    assert main(["simulate", str(path), "--no-guess", "--match-prob", "0.5"]) == 2
    assert "--no-guess never guesses" in capsys.readouterr().err


def test_bare_oracle_combined_pairs_ngram_with_the_model_proposer_held(tmp_path, capsys):
    """n-gram and EAGLE-3 traces: a bare oracle-combined pairs them (EAGLE first where held)."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    two = [TraceRecord(f"r{i}", np.arange(10), np.arange(len(ACC)), {"ngram": ProposerTrace(np.asarray(ACC, np.int32)),
                                                                      "eagle3": ProposerTrace(np.asarray(ACC, np.int32))},
                       k_max=20, dataset="d") for i in range(2)]
    write_traces(tmp_path / "t.jsonl", two)
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "combined", "--policies", "oracle-combined",
                 "--batch-sizes", "1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["policy"] == "oracle-combined:ngram+eagle3"


def test_bare_oracle_combined_takes_the_first_model_proposer_the_traces_name_in_every_process(tmp_path):
    """n-gram, MTP and a draft model: the pair is n-gram + MTP (first named), whatever order a
    process's string hashing gives a set (it changed from run to run)."""
    import subprocess
    import sys

    from specscope.trace.load import write_traces

    traces = {name: ProposerTrace(np.asarray(ACC, np.int32)) for name in ("ngram", "mtp", "draft")}
    write_traces(tmp_path / "t.jsonl", [TraceRecord(f"r{i}", np.arange(10), np.arange(len(ACC)), traces, k_max=20,
                                                    dataset="d") for i in range(2)])
    cost = {"kind": "linear", "name": "toy", "forward": {"c_fixed": 0.01, "c_tok": 0.0, "c_kv": 0.0, "c_req": 0.0,
                                                         "c_multi": 0.0}, "overhead_s": 0.0, "drafting": {
        "ngram": {"kind": "fraction", "ratio": 0.0}, "mtp": {"kind": "fraction", "ratio": 0.1},
        "draft": {"kind": "fraction", "ratio": 0.2}}}
    (tmp_path / "cm.json").write_text(json.dumps(cost))
    for seed in ("1", "2", "3"):
        result = subprocess.run([sys.executable, "-m", "specscope", "simulate", str(tmp_path / "t.jsonl"), "--acc",
                                 "combined", "--policies", "oracle-combined", "--cost-model", str(tmp_path / "cm.json"),
                                 "--batch-sizes", "1", "--format", "json"], capture_output=True, text=True,
                                env={**os.environ, "PYTHONHASHSEED": seed})
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[0]["policy"] == "oracle-combined:ngram+mtp"


def test_a_batch_that_never_fills_says_why_its_steady_speedup_is_nan(tmp_path, capsys):
    from specscope.cli import main
    from specscope.trace.load import write_traces

    short = [record([1], rid="s0"), record([1, 1], rid="s1"), record([1, 1], rid="s2")]  # s0: one token, no step
    write_traces(tmp_path / "t.jsonl", short)
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram", "--policies", "fixed:1",
                 "--batch-sizes", "1,3"]) == 0
    assert "note: steady-state speedup nan at B=3: no iteration had every slot decoding" in capsys.readouterr().out


def test_mixed_mode_decodes_a_request_from_the_step_after_its_prefill():
    """As in an engine (the reference engine's step, vLLM's), a request admitted in an iteration
    gets its first token from the prefill and its first SD step in the next. Every forward 1 s, no
    overhead, free drafting, B = 2, fixed:4 with every draft accepted: r0 (G = 9) takes 2 steps, r1
    … r3 (G = 5) one each. SD: iterations [prefill r0 r1], [r0 r1], [r0, prefill r2], [r2, prefill
    r3], [r3] — with a prefill and a step in one iteration two forwards: 7 s, against 16 s without
    SD (the simulator had decoded each in its prefill's iteration: 6 s and 15 s, 2.5× for 2.29×)."""
    cost = LinearCostModel("u", 1.0, 0.0, 0.0, 0.0, {"eagle": LinearDrafting(0.0, 0.0, 0.0)})
    records = [record([5] * 9, prompt_len=4, rid="r0", proposer="eagle")] + [
        record([5] * 5, prompt_len=4, rid=f"r{i}", proposer="eagle") for i in (1, 2, 3)]
    (row,) = simulate(records, ["eagle"], ["fixed:4"], cost, SimConfig(mode="mixed", batch_sizes=(2,)))
    assert (24 / row.throughput, 24 / row.baseline_throughput, row.speedup) == pytest.approx((7.0, 16.0, 16 / 7))


def test_admit_s_is_paid_wherever_prompts_reach_an_idle_engine():
    """admit_s = 5 s at B = 1: r0's output is the prefill's one token (no step), r1's two; both
    reach an idle engine (r0's arrival was lost: it took no step, and "idle" counted steps)."""
    cost = LinearCostModel("u", 1.0, 0.0, 0.0, 0.0, {"eagle": LinearDrafting(0.0, 0.0, 0.0)}, admit_s=5.0)
    records = [record([1], prompt_len=10, rid="r0", proposer="eagle"),
               record([1, 1], prompt_len=10, rid="r1", proposer="eagle")]
    one, two = simulate(records, ["eagle"], ["fixed:1"], cost, SimConfig(mode="mixed", batch_sizes=(1, 2)))
    assert (one.time_split["prefill"], two.time_split["prefill"]) == (12.0, 6.0)  # 2 × (1 + 5); both at once


def test_adaptive_with_a_model_drafter_pays_its_passes_to_the_deepest_row():
    """Adaptive's rows propose different k in one iteration (B = 2): r0 takes k = 5, 7, 6 and r1
    5, 4, 3. An engine's drafter passes serve every row, so they run to the deepest: drafting
    c_tok·(k + 1) per step is 6 + 8 + 7 = 21 s (priced at the rows' mean k it was 18); an oracle
    keeps the optimistic mean."""
    cost = LinearCostModel("u", 1.0, 0.1, 0.0, 0.2, {"eagle": LinearDrafting(0.0, 1.0, 0.0)}, pads_verification=True)
    records = [record([7] * 15, rid="r0", proposer="eagle"), record([1] * 4, rid="r1", proposer="eagle")]
    (row,) = simulate(records, ["eagle"], ["adaptive"], cost, SimConfig(mode="mixed", batch_sizes=(2,)))
    assert row.time_split["drafting"] == pytest.approx(21.0)


def test_a_cell_deeper_than_its_datasets_traces_is_refused_or_left_out_with_a_note():
    """Alone, fixed:5 over a trace reaching k = 3 is refused; given a ``missing`` list (paper mode
    over several files, the report), that one cell is left out and said, the others kept."""
    shallow = [replace(record([4, 1, 2, 1, 3, 1, 1, 1], proposer="eagle"), k_max=None)]
    with pytest.raises(SpecscopeError, match="fixed:5"):
        simulate(shallow, ["eagle"], ["fixed:1", "fixed:5"], COST, SimConfig(mode="paper", batch_sizes=(1,)))
    notes: list[str] = []
    rows = simulate(shallow, ["eagle"], ["fixed:1", "fixed:5"], COST, SimConfig(mode="paper", batch_sizes=(1,)),
                    missing=notes)
    assert [r.policy for r in rows] == ["fixed:1"] and len(notes) == 1 and notes[0].endswith("that cell is left out")


def test_at_batch_1_the_steady_state_is_the_whole_run_with_one_token_outputs_too():
    """Probe: a one-token output takes no step, so its prefill and token fell out of the steady
    state: at B = 1, 1.42× steady against 1.33× for the whole run, where they must agree."""
    records = [replace(record(ACC, rid="a"), k_max=20), replace(record([1], rid="b"), k_max=20),
               replace(record([2, 1, 3, 1], rid="c"), k_max=20)]
    (row,) = simulate(records, ["ngram"], ["fixed:2"], COST, SimConfig(mode="mixed", batch_sizes=(1,)))
    assert row.steady_speedup == pytest.approx(row.speedup)


def test_simulate_says_where_a_rooflines_kv_cache_outgrows_the_gpu(tmp_path, capsys):
    """1024 copies of a request of 1000 prompt and 8 output tokens cache about 1.03M tokens; an
    H100 holds about 533k of Llama-3.1-8B's beside its weights: the run says so, B = 1 does not."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [record(ACC, prompt_len=1000)])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram", "--policies", "fixed:1", "--mode", "paper",
                 "--batch-sizes", "1,1024", "--cost-model", "roofline:h100:llama3.1-8b", "--no-guess"]) == 0
    out = capsys.readouterr().out
    assert "note: dataset 'd': at batch size 1024 the KV cache holds up to" in out and "batch sizes 1," not in out


def test_the_papers_no_match_guess_goes_by_a_word_of_the_datasets_name():
    """'rcnn_eval' took cnn's 0.4 (a substring); a word that starts with one of the paper's datasets keeps it."""
    from specscope.sim.grid import match_prob_for

    guesses = {name: match_prob_for(name, SimConfig(), "ngram")
               for name in ("qwen3-8b_cnn", "rcnn_eval", "combined_instructcoder", "llama3.1-8b_sharegpt", "gsm8k",
                            "ShareGPT52K", "cnndm")}
    assert guesses == {"qwen3-8b_cnn": 0.4, "rcnn_eval": None, "combined_instructcoder": 0.8,
                       "llama3.1-8b_sharegpt": 0.2, "gsm8k": 0.2, "ShareGPT52K": 0.2, "cnndm": 0.4}


def test_the_no_match_note_names_the_dataset_whose_guess_was_taken():
    """'rcnn_instructcoder' takes instructcoder's 0.8 (a word starts with it); the note credited
    cnn's traces (a substring of 'rcnn')."""
    from specscope.sim.grid import no_match_notes

    trace = TraceRecord("a", np.arange(4), np.arange(3), {"ngram": ProposerTrace(np.asarray([1, 2, 1], np.int32))},
                        k_max=4, dataset="rcnn_instructcoder")
    [note] = no_match_notes([trace], ["ngram"], SimConfig())
    assert "with probability 0.8 (the paper's guess for its instructcoder traces)" in note
    mine = TraceRecord("b", np.arange(4), np.arange(3), trace.proposers, k_max=4, dataset="mine")
    [unguessed] = no_match_notes([mine], ["ngram"], SimConfig(), option=False)
    assert unguessed.endswith("(no guess applies)")  # a verb without --match-prob names none


def test_the_peak_cache_holds_the_prompts_an_iteration_prefills():
    """r2's 40-token prompt, prefilled beside r0's last step at B = 2 (r0: 10 + 2 cached, 2 verified;
    r1 done): 54 tokens at once, by hand; alone at B = 1, 40. The steps alone said 18 and 14 (the
    roofline's memory note missed such cells). Paper mode: B copies of the longest prompt."""
    cost = LinearCostModel("toy", 1.0, 0.1, 0.0, 0.0, drafting={"eagle": LinearDrafting(0.2, 0.0, 0.0)})
    records = [record([1, 1, 1], 10, "r0", "eagle"), record([1, 1], 2, "r1", "eagle"), record([1], 40, "r2", "eagle")]
    rows = simulate(records, ["eagle"], ["fixed:1"], cost, SimConfig(batch_sizes=(1, 2), oversize="refuse"))
    assert [row.peak_kv_tokens for row in rows] == [40.0, 54.0]
    (paper,) = simulate(records, ["eagle"], ["fixed:1"], cost, SimConfig(mode="paper", batch_sizes=(2,)))
    assert paper.peak_kv_tokens == 2 * 40


def test_a_confidence_policy_runs_with_the_model_proposers_and_needs_their_probabilities():
    """confidence:p replays each model proposer whose traces keep draft_prob; beside n-gram (a
    lookup, no probabilities) n-gram gets no such cell, alone it is refused, and a model proposer
    traced without draft_prob (the paper's traces) is refused naming it. In mixed mode the drafter's
    passes run to the deepest row (its rows stop at different drafts: an engine's passes serve them all)."""
    prob = np.full((8, 4), 0.9, dtype=np.float32)
    prob[0, 1] = 0.1  # pos 1 proposes 2
    both = TraceRecord("r", np.arange(10), np.arange(8),
                       {"ngram": ProposerTrace(ACC), "eagle": ProposerTrace(ACC, draft_prob=prob)}, k_max=4, dataset="d")
    rows = simulate([both], ["ngram", "eagle"], ["confidence:0.5"], COST, SimConfig(batch_sizes=(1,)))
    assert [(r.acc, r.policy) for r in rows] == [("eagle", "confidence:0.5")]
    with pytest.raises(SpecscopeError, match=r"proposer 'ngram': policy 'confidence:0\.5' reads the drafter's probability "
                                             r"of each draft \(draft_prob\), which 1 records lack .*ngram is a lookup"):
        simulate([both], ["ngram"], ["confidence:0.5"], COST, SimConfig(batch_sizes=(1,)))
    bare = TraceRecord("p", np.arange(10), np.arange(8), {"eagle": ProposerTrace(ACC)}, k_max=4, dataset="d")
    with pytest.raises(SpecscopeError, match=r"which 1 records lack \(first id 'p'\): re-trace with `specscope trace`"):
        simulate([bare], ["eagle"], ["confidence:0.5"], COST, SimConfig(batch_sizes=(1,)))
    from specscope.sim.grid import drafting_of
    from specscope.sim.pricing import DeepestPasses
    assert isinstance(drafting_of(COST, "eagle", parse_policy("confidence:0.5")), DeepestPasses)


@pytest.mark.parametrize("mode", ["paper", "mixed"])
def test_a_drafter_stopped_at_its_confidence_pays_its_read_per_pass(mode):
    """EAGLE's drafting 0.2 s a step plus c_confidence 0.01 s a pass whose probabilities it reads.
    Under confidence:0.5:4, acc_len 3, 1, 2, 4, 1, 1, 1, 1 and every draft at 0.9 but the second at
    position 1 (0.1): it proposes 2 at position 1 (emits 3), then 4 at position 4 (emits 4, the
    output's end): 2 × 0.2 + 0.01 × (2 + 4) = 0.46 s of drafting, by hand. fixed:2 reads nothing
    and pays 0.2 a step whatever c_confidence; priced without the term, the rule drafts for 0.4 s."""
    prob = np.full((8, 4), 0.9, dtype=np.float32)
    prob[0, 1] = 0.1
    rec = TraceRecord("r", np.arange(10), np.arange(8), {"eagle": ProposerTrace(ACC, draft_prob=prob)}, k_max=4,
                      dataset="d")
    reading = replace(COST, drafting={"eagle": LinearDrafting(0.2, 0.0, 0.0, c_confidence=0.01)})
    config = SimConfig(mode=mode, batch_sizes=(1,))
    (rule,) = simulate([rec], ["eagle"], ["confidence:0.5:4"], reading, config)
    assert rule.time_split["drafting"] == pytest.approx(0.46)
    (plain,) = simulate([rec], ["eagle"], ["confidence:0.5:4"], COST, config)
    assert plain.time_split["drafting"] == pytest.approx(0.4)
    (chain,) = simulate([rec], ["eagle"], ["fixed:2"], reading, config)
    assert chain.time_split["drafting"] == pytest.approx(0.2 * 3)  # positions 1, 4, 6
    assert reading.drafting_for("eagle").to_json()["c_confidence"] == 0.01  # written, and read back:
    from specscope.costmodel.linear import drafting_from_json
    from specscope.trace.fields import Fields
    assert drafting_from_json(Fields(reading.drafting_for("eagle").to_json(), "m.json")).c_confidence == 0.01


def test_a_confidence_policy_is_refused_past_the_probabilities_its_records_keep():
    """Records keeping draft_prob to 4 drafts beside others keeping 6 (a trace resumed across
    versions): confidence:p would stop at 4 unsaid, so it is refused, naming the record and the
    depth to give; confidence:p:4 runs; confidence:p:5 is refused (a record keeps 4). A trace
    keeping more probabilities than its k_max proposes no deeper than k_max."""
    def rec(rid, kept, k_max=6):
        prob = np.full((8, kept), 0.9, dtype=np.float32)
        return TraceRecord(rid, np.arange(10), np.arange(8), {"eagle": ProposerTrace(ACC, draft_prob=prob)},
                           k_max=k_max, dataset="d")
    mixed = [rec("old", 4), rec("new", 6)]
    with pytest.raises(SpecscopeError, match=r"keep draft_prob to 4 drafts \(record 'old'\) and to 6 in others; give "
                                             r"its depth, confidence:0\.5:4 at most"):
        simulate(mixed, ["eagle"], ["confidence:0.5"], COST, SimConfig(batch_sizes=(1,)))
    assert simulate(mixed, ["eagle"], ["confidence:0.5:4"], COST, SimConfig(batch_sizes=(1,)))[0].deepest_k == 4
    with pytest.raises(SpecscopeError, match=r"may propose k = 5, but record 'old' keeps draft_prob to 4 drafts"):
        simulate(mixed, ["eagle"], ["confidence:0.5:5"], COST, SimConfig(batch_sizes=(1,)))
    wide = rec("w", 6, k_max=3)
    assert simulate([wide], ["eagle"], ["confidence:0.5"], COST, SimConfig(batch_sizes=(1,)))[0].deepest_k == 3


def test_a_sample_above_a_datasets_requests_is_said():
    """Probe: --sample 1000 on 3 requests replayed the 3, its rows saying sample 1000, unsaid."""
    from specscope.sim.grid import sample_notes

    records = [record(ACC, rid=f"r{i}") for i in range(3)]
    assert sample_notes(records, SimConfig(sample=1000)) == [
        "dataset 'd': --sample 1000, but it holds 3 requests: all 3 replayed (its rows' requests)"]
    assert sample_notes(records, SimConfig(sample=3)) == [] and sample_notes(records, SimConfig()) == []


def test_simulate_leaves_out_a_proposer_some_records_lack_and_says_how_many(tmp_path, capsys):
    """Probe: one record without EAGLE refused the run, where report left EAGLE's cells out."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    both = [record(ACC, rid=f"r{i}") for i in range(2)]
    both = [replace(r, proposers={**r.proposers, "eagle": ProposerTrace(ACC)}) for r in both]
    write_traces(tmp_path / "t.jsonl", [*both, record(ACC, rid="r2")])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram,eagle", "--policies", "fixed:1",
                 "--batch-sizes", "1", "-o", str(tmp_path / "o.csv")]) == 0
    assert "note: dataset 'd': its traces do not all hold proposer 'eagle': 1 of 3 records lack it (first id 'r2'), so its cells with eagle are left out" \
        in capsys.readouterr().out
    assert {c["acc"] for c in csv.DictReader((tmp_path / "o.csv").open())} == {"ngram"}


def three_proposers(rid: str, dataset: str = "d") -> TraceRecord:
    """n-gram, MTP and EAGLE-3 in that key order; EAGLE-3 accepts most (every step emits 4)."""
    return TraceRecord(rid, np.arange(10), np.arange(12), {
        "ngram": ProposerTrace(np.array([1] * 12, dtype=np.int32)),
        "mtp": ProposerTrace(np.array([2] * 12, dtype=np.int32)),
        "eagle3": ProposerTrace(np.array([4] * 12, dtype=np.int32))}, k_max=5, dataset=dataset)


def test_the_default_pair_is_the_lookup_with_the_model_proposer_accepting_most_not_the_first_named():
    """Probe: with keys ngram, mtp, eagle3 the bare oracle-combined took ngram+mtp (the first model
    proposer named), below EAGLE-3's own oracle."""
    from specscope.sim.grid import default_pair

    records = [three_proposers(f"r{i}") for i in range(2)]
    pair, why = default_pair(records, ["ngram", "mtp", "eagle3"])
    assert pair == ("ngram", "eagle3")
    assert why.endswith("(tokens per oracle step: eagle3 3.67, mtp 1.83, ngram 1.00)")  # 11 tokens in 3, 6, 11 steps
    assert default_pair(records, ["mtp", "eagle3"])[0] == ("eagle3", "mtp")  # no lookup: the two that accept most
    assert default_pair(records, ["ngram"])[0] is None


def test_a_bare_oracle_combined_or_oracle_switch_takes_the_default_pair(tmp_path, capsys):
    """Probe: a bare oracle-switch was refused, naming a default that did not exist; a bare
    oracle-combined paired n-gram with the first model proposer named (MTP)."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [three_proposers(f"r{i}") for i in range(2)])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--policies", "oracle,oracle-combined,oracle-switch",
                 "--batch-sizes", "1", "--cost-model", "roofline:h100:llama3.1-8b:llama3.2-1b", "-o",
                 str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    cells = {(c["acc"], c["policy"]) for c in csv.DictReader((tmp_path / "o.csv").open())}
    assert {("combined", "oracle-combined:ngram+eagle3"), ("ngram+eagle3", "oracle-switch:ngram+eagle3")} <= cells
    assert ("note: oracle-combined and oracle-switch without a pair: ngram+eagle3, the lookup and the model proposer "
            "whose oracles emit the most tokens per step") in out


def test_simulate_replays_what_the_traces_hold_and_leaves_out_a_proposer_some_records_lack(tmp_path, capsys):
    """Probe: --acc defaulted to ngram,eagle, refusing traces of EAGLE-3; one record without a
    proposer refused the run, where report left that proposer's cells out."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    lacking = replace(three_proposers("r2"), proposers={"ngram": three_proposers("r2").proposers["ngram"],
                                                        "eagle3": three_proposers("r2").proposers["eagle3"]})
    write_traces(tmp_path / "t.jsonl", [three_proposers("r0"), three_proposers("r1"), lacking])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--policies", "fixed:1", "--batch-sizes", "1",
                 "--cost-model", "roofline:h100:llama3.1-8b:llama3.2-1b", "--sample", "5",
                 "-o", str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    assert {c["acc"] for c in csv.DictReader((tmp_path / "o.csv").open())} == {"ngram", "eagle3"}
    assert "note: dataset 'd': its traces do not all hold proposer 'mtp': 1 of 3 records lack it (first id 'r2'), so its cells with mtp are left out" in out
    assert "note: dataset 'd': --sample 5, but it holds 3 requests: all 3 replayed (its rows' requests)" in out


def test_simulate_by_default_replays_the_proposers_its_cost_model_prices_and_names_the_others(tmp_path, capsys):
    """Its --acc defaults to what the traces hold: the paper's fitted model prices no MTP, and the
    run died on it ('has no drafting model for proposer mtp') where --acc ngram,eagle had been the
    default; now MTP is left out in a note, and a model pricing none of them is refused."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [three_proposers("r0"), three_proposers("r1")])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--policies", "fixed:1", "--batch-sizes", "1",
                 "-o", str(tmp_path / "o.csv")]) == 0
    assert {c["acc"] for c in csv.DictReader((tmp_path / "o.csv").open())} == {"ngram", "eagle3"}
    assert "note: not simulated: mtp: cost model 'h100-llama3.1-8b' prices no drafting of it" in capsys.readouterr().out
    only_mtp = [replace(r, proposers={"mtp": r.proposers["mtp"]}) for r in (three_proposers("r0"), three_proposers("r1"))]
    write_traces(tmp_path / "m.jsonl", only_mtp)
    assert main(["simulate", str(tmp_path / "m.jsonl"), "--policies", "fixed:1", "--batch-sizes", "1"]) == 2
    assert "prices the drafting of none of the proposers the traces hold (mtp)" in capsys.readouterr().err


def drawn(rid: str, means: dict[str, int], rng, dataset: str = "d", lacking: tuple[str, ...] = ()) -> TraceRecord:
    """A record of 40 positions whose proposers of ``means`` each emit about that many tokens a step."""
    return TraceRecord(rid, rng.integers(0, 50, 10), rng.integers(0, 50, 40), {
        name: ProposerTrace(np.clip(rng.integers(mean - 1, mean + 2, 40), 1, 6).astype(np.int32))
        for name, mean in means.items() if name not in lacking}, k_max=5, dataset=dataset)


def simulated_cells(tmp_path, *argv: str) -> tuple[int, set[tuple[str, str, str]], str]:
    """``simulate`` of ``argv`` (traces first): its exit status, its cells (dataset, acc, policy) and what it said."""
    import io
    import contextlib

    from specscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "o.csv"
    path.unlink(missing_ok=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["simulate", *argv, "--batch-sizes", "1", "-o", str(path)])
    cells = {(c["dataset"], c["acc"], c["policy"]) for c in csv.DictReader(path.open())} if path.exists() else set()
    return status, cells, out.getvalue() + err.getvalue()


def test_a_bare_pair_takes_only_proposers_the_cost_model_prices(tmp_path):
    """Probes: MTP accepting most, the default pair was ngram+mtp, which the default cost model
    prices no drafting of: a bare oracle-switch died on it, and a bare oracle-combined printed
    'not simulated: mtp' beside a row oracle-combined:ngram+mtp; with one proposer priced among
    those named (--acc ngram) the pair fell back to every proposer held, unpriced ones too."""
    from specscope.costmodel.linear import H100_LLAMA31_8B
    from specscope.trace.load import write_traces

    rng = np.random.default_rng(0)
    best = [drawn(f"r{i}", {"ngram": 1, "eagle": 3, "mtp": 5}, rng) for i in range(4)]
    write_traces(tmp_path / "m.jsonl", best)
    for argv, unpriced in ((["--policies", "oracle-combined,oracle-switch"], "note: not simulated: mtp: cost model "
                            "'h100-llama3.1-8b' prices no drafting of it"),
                           (["--acc", "ngram", "--policies", "oracle-switch"], "(tokens per oracle step: eagle 3.00, "
                            "ngram 1.34; mtp left aside: the cost model prices no drafting of it)")):
        status, cells, said = simulated_cells(tmp_path, str(tmp_path / "m.jsonl"), *argv)
        assert status == 0 and {policy for _, _, policy in cells} <= {"oracle-combined:ngram+eagle",
                                                                     "oracle-switch:ngram+eagle"}, said
        assert unpriced in said and "+mtp" not in said
    from specscope.sim.grid import dataset_pairs

    assert dataset_pairs(best, H100_LLAMA31_8B)["d"][0] == ("ngram", "eagle")  # the one rule behind them
    write_traces(tmp_path / "two.jsonl", [drawn(f"r{i}", {"ngram": 1, "mtp": 3}, rng) for i in range(4)])
    for policy in ("oracle-switch", "oracle-combined"):
        status, cells, said = simulated_cells(tmp_path, str(tmp_path / "two.jsonl"), "--policies", policy)
        assert status == 2 and not cells
        assert (f"{policy} without a pair: only ngram of its proposers can be combined (mtp left aside: the cost "
                f"model prices no drafting of it) — name one: {policy}:A+B") in said


def test_the_bare_pair_is_each_datasets_among_what_every_record_holds(tmp_path):
    """Probes: one pair over all records — two datasets whose best model proposers differ both
    combined with the first's, where report combined each with its own; EAGLE best but one record
    without it, the pair was ngram+eagle and no oracle-combined row came out (report: ngram+eagle3)."""
    from specscope.trace.load import write_traces

    rng = np.random.default_rng(1)
    write_traces(tmp_path / "ab.jsonl", [
        *(drawn(f"a{i}", {"ngram": 1, "eagle": 4, "eagle3": 2}, rng, "A") for i in range(4)),
        *(drawn(f"b{i}", {"ngram": 1, "eagle": 2, "eagle3": 4}, rng, "B") for i in range(4))])
    status, cells, said = simulated_cells(tmp_path, str(tmp_path / "ab.jsonl"), "--policies", "fixed:1,oracle-combined")
    assert status == 0 and {(d, p) for d, _, p in cells if p.startswith("oracle")} == \
        {("A", "oracle-combined:ngram+eagle"), ("B", "oracle-combined:ngram+eagle3")}
    assert "note: dataset 'B': oracle-combined without a pair: ngram+eagle3, the lookup" in said
    write_traces(tmp_path / "l.jsonl", [drawn(f"r{i}", {"ngram": 1, "eagle": 5, "eagle3": 3}, rng,
                                              lacking=("eagle",) if i == 0 else ()) for i in range(4)])
    status, cells, said = simulated_cells(tmp_path, str(tmp_path / "l.jsonl"), "--policies", "fixed:3,oracle-combined")
    assert status == 0 and ("d", "combined", "oracle-combined:ngram+eagle3") in cells
    assert "eagle left aside: not every record holds it" in said


def test_a_proposer_some_records_lack_is_decided_over_all_of_them_not_the_draw(tmp_path):
    """Probe: paper mode's draw decided what to leave out — a draw without the one record lacking
    EAGLE kept its cells (report's answer, counting all records, still named it left out), and a
    draw of 5 said '1 of 5 records lack it'. Now all the dataset's records decide, said."""
    from specscope.trace.load import write_traces

    rng = np.random.default_rng(2)
    write_traces(tmp_path / "t.jsonl", [drawn(f"r{i}", {"ngram": 1, "eagle": 3}, rng, lacking=("eagle",) if i == 0 else ())
                                        for i in range(12)])
    status, cells, said = simulated_cells(tmp_path, str(tmp_path / "t.jsonl"), "--mode", "paper", "--sample", "3",
                                          "--seed", "1", "--policies", "fixed:1")  # seed 1 draws r1, r2, r9
    assert status == 0 and {acc for _, acc, _ in cells} == {"ngram"}
    assert ("note: dataset 'd': its traces do not all hold proposer 'eagle': 1 of 12 records lack it (first id 'r0'), "
            "so its cells with eagle are left out (all 12 of its records counted, not only the 3 drawn)") in said


def test_the_optimistic_note_comes_only_beside_an_oracle_combined_row(tmp_path):
    """Probe: oracle-combined asked for, its pair's EAGLE lacking from one record: no such row was
    made, yet the note calling its rows optimistic was printed."""
    from specscope.sim.grid import OPTIMISTIC
    from specscope.trace.load import write_traces

    rng = np.random.default_rng(3)
    write_traces(tmp_path / "t.jsonl", [drawn(f"r{i}", {"ngram": 1, "eagle": 3}, rng, lacking=("eagle",) if i == 0 else ())
                                        for i in range(4)])
    status, cells, said = simulated_cells(tmp_path, str(tmp_path / "t.jsonl"), "--policies",
                                          "fixed:1,oracle-combined:ngram+eagle")
    assert status == 0 and {p for _, _, p in cells} == {"fixed:1"} and OPTIMISTIC not in said
    write_traces(tmp_path / "t.jsonl", [drawn(f"r{i}", {"ngram": 1, "eagle": 3}, rng) for i in range(4)])
    status, cells, said = simulated_cells(tmp_path, str(tmp_path / "t.jsonl"), "--policies",
                                          "fixed:1,oracle-combined:ngram+eagle")
    assert status == 0 and "oracle-combined:ngram+eagle" in {p for _, _, p in cells} and OPTIMISTIC in said


def test_a_bare_oracle_combined_takes_the_acc_pair_as_named_and_leaves_out_only_a_datasets_without_one(tmp_path,
                                                                                                     capsys):
    """A review of the per-dataset pair: `--acc ngram,combined` was refused outright where one
    dataset held no pair ('goes with oracle-combined only'); `--acc ngram,mtp --policies
    oracle-combined` was refused because the default model prices no MTP, though oracle-combined
    charges only the lookup's drafting and `oracle-combined:ngram+mtp` ran; a bare policy's note on
    the positions it replays was never printed (it matched the spelled-out name only)."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    ngram_only = [replace(three_proposers(f"n{i}", "solo"), proposers={"ngram": three_proposers("x").proposers["ngram"]})
                  for i in range(2)]
    write_traces(tmp_path / "t.jsonl", [three_proposers("r0"), three_proposers("r1"), *ngram_only])
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram,combined", "--policies",
                 "fixed:3,oracle-combined", "--batch-sizes", "1", "-o", str(tmp_path / "o.csv")]) == 0
    rows = [(c["dataset"], c["acc"], c["policy"]) for c in csv.DictReader((tmp_path / "o.csv").open())]
    assert rows == [("d", "ngram", "fixed:3"), ("d", "combined", "oracle-combined:ngram+eagle3"),
                    ("solo", "ngram", "fixed:3")]
    assert "dataset 'solo': oracle-combined without a pair left out" in capsys.readouterr().out
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram,mtp", "--policies", "oracle-combined",
                 "--batch-sizes", "1", "-o", str(tmp_path / "m.csv")]) == 0
    assert {c["policy"] for c in csv.DictReader((tmp_path / "m.csv").open())} == {"oracle-combined:ngram+mtp"}
    assert "oracle-combined without a pair: ngram+mtp, the two proposers --acc names" in capsys.readouterr().out
    longer = replace(three_proposers("u"), proposers={**three_proposers("u").proposers,
                                                      "eagle3": ProposerTrace(np.array([4] * 13, dtype=np.int32))})
    write_traces(tmp_path / "u.jsonl", [longer, three_proposers("v")])
    assert main(["simulate", str(tmp_path / "u.jsonl"), "--policies", "fixed:3,oracle-combined", "--batch-sizes",
                 "1", "--lengths", "own"]) == 0
    assert "oracle-combined:ngram+eagle3 replays the positions its proposers' acc_len share" in capsys.readouterr().out


def test_default_fixed_ks_deeper_than_the_traces_are_left_out_named_ones_refused(tmp_path, capsys):
    """Traces drafted 3 deep: the default policies' fixed:5 is left out with a note (the whole run
    was refused over a policy the user never named); --policies fixed:5 is still refused."""
    from specscope.cli import main

    record = {"schema": "specscope.trace/1", "id": "a", "k_max": 3, "prompt_token_ids": [1, 2],
              "output_token_ids": [5, 6, 7, 8, 9, 10], "proposers": {"eagle": {"acc_len": [2, 1, 3, 4, 1, 2]}}}
    path = tmp_path / "toy.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": "b"}) + "\n")
    out_csv = tmp_path / "cells.csv"
    assert main(["simulate", str(path), "--batch-sizes", "1", "-o", str(out_csv)]) == 0
    assert "policy 'fixed:5' proposes k = 5, above the trace's k_max = 3: that cell is left out" in capsys.readouterr().out
    with open(out_csv, encoding="utf-8") as handle:
        assert [row["policy"] for row in csv.DictReader(handle)] == ["fixed:1", "fixed:3", "oracle"]
    assert main(["simulate", str(path), "--batch-sizes", "1", "--policies", "fixed:5"]) == 2
    assert "policy 'fixed:5' proposes k = 5, above the trace's k_max = 3" in capsys.readouterr().err


def test_a_bare_pair_without_acc_follows_the_pairing_rule(tmp_path, capsys):
    """No --acc, traces holding two priced proposers (EAGLE first in the file): the bare pair is
    the lookup with the model proposer, by the one rule, not 'the two proposers --acc names' in
    the file's key order (a review finding)."""
    from specscope.cli import main

    record = {"schema": "specscope.trace/1", "id": "a", "k_max": 4, "prompt_token_ids": [1, 2],
              "output_token_ids": [5, 6, 7, 8], "proposers": {"eagle": {"acc_len": [3, 1, 2, 1]},
                                                              "ngram": {"acc_len": [2, 1, 3, 1]}}}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "id": "b"}) + "\n")
    out_csv = tmp_path / "cells.csv"
    assert main(["simulate", str(path), "--policies", "oracle-combined", "--batch-sizes", "1", "-o", str(out_csv)]) == 0
    out = capsys.readouterr().out
    assert "--acc names" not in out and "oracle-combined without a pair: ngram+eagle" in out
    with open(out_csv, encoding="utf-8") as handle:
        assert [row["policy"] for row in csv.DictReader(handle)] == ["oracle-combined:ngram+eagle"]
