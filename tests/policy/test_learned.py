"""The learned policy: fitting, its portable file, decisions, and refusals of bad files."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from policy_traces import record

from specscope.costmodel.base import FractionDrafting, LinearDrafting
from specscope.costmodel.linear import LinearCostModel
from specscope.errors import SpecscopeError
from specscope.sim.evaluate import judge
from specscope.version import code_version
from specscope.sim.grid import SimConfig, simulate
from specscope.policy.chooser import PLAIN_ROWS
from specscope.policy.features import feature_names, features
from specscope.policy.learned import load_policy

pytest.importorskip("sklearn")

COST = LinearCostModel("toy", c_fixed=1.0, c_tok=0.02, c_kv=0.0, overhead_s=0.1, drafting={
    "ngram": FractionDrafting(0.01), "eagle": LinearDrafting(c_fixed=0.2, c_tok=0.05, c_kv=0.0)})


def workload(seed: int, count: int = 24, g: int = 80) -> list:
    """Requests in stretches: where n-gram matches it accepts 6 and eagle 1; elsewhere n-gram
    offers nothing and eagle accepts 2 or 3 (all visible to a causal policy via the offer)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(count):
        copying = np.repeat(rng.random(g // 8) < 0.4, 8)[:g]
        ngram = np.where(copying, 7, 1)
        offer = np.where(copying, 8, 0)
        eagle = np.where(copying, 1, rng.integers(2, 4, g))
        out.append(record(ngram.tolist(), eagle.tolist(), rid=f"{seed}-{r}", offer=offer.tolist(), dataset=f"w{seed}"))
    return out


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory):
    from specscope.sim.fit import fit_policy

    path = tmp_path_factory.mktemp("policy") / "policy.json"
    path.write_text(json.dumps(fit_policy(workload(0), ("ngram", "eagle"), COST, [1, 8])))
    return path


def test_the_file_is_plain_numbers_with_its_features_defined(policy_file):
    document = json.loads(policy_file.read_text())
    assert document["features"] == feature_names(("ngram", "eagle"))
    assert [m["batch_size"] for m in document["models"]] == [1, 8]
    assert np.asarray(document["coef"]).shape == (2, len(document["features"]))  # hazard slopes, one set per method
    assert np.asarray(document["intercept"]).shape == (2, 6)  # j = 2 … 7, the longest acc_len measured
    assert document["training"]["made_by"] == code_version()  # the code that fitted it


def told(records: list, depth: int = 8) -> list:
    """``records`` whose EAGLE trace keeps its probability of each of ``depth`` drafts, telling its
    acceptance exactly: 0.9 for each draft it accepts, 0.1 from the first it rejects on."""
    return [replace(r, proposers={**r.proposers, "eagle": replace(r.proposers["eagle"], draft_prob=np.where(
        np.arange(depth)[None, :] < r.proposers["eagle"].acc_len[:, None] - 1, 0.9, 0.1).astype(np.float32))})
            for r in records]


def test_a_fit_stops_the_drafter_at_its_confidence_where_the_traces_keep_it(policy_file, tmp_path, capsys):
    """Traces that keep no draft_prob: every batch size's rule says confidence none. Traces where
    EAGLE accepts anything from 0 to 6 drafts, unforeseeably, and its probability of each draft tells
    it exactly: at B = 1 the fit picks a p of the grid, and its walk stops EAGLE at its first rejected
    draft — it emits more per EAGLE step and proposes no draft beyond the one rejected, above the
    same policy without p."""
    from specscope.cli import main
    from specscope.policy.learned import LearnedPolicy, choosers_from_json
    from specscope.sim.fit import CONFIDENCE_GRID, fit_policy
    from specscope.sim.switching import causal_plan

    assert [m["confidence"] for m in json.loads(policy_file.read_text())["models"]] == [None, None]
    rng = np.random.default_rng(5)
    records = told([record([1] * 60, rng.integers(1, 8, 60).tolist(), rid=f"v{i}", dataset="v") for i in range(12)])
    document = fit_policy(records, ("ngram", "eagle"), COST, [1])
    (p,) = [m["confidence"] for m in document["models"]]
    assert p in CONFIDENCE_GRID
    path = tmp_path / "p.json"
    path.write_text(json.dumps(document))
    assert main(["policy", "explain", str(path)]) == 0
    assert f"in place of the k chosen — B=1: p = {p:g}" in capsys.readouterr().out
    policy = LearnedPolicy("t", ("ngram", "eagle"), choosers_from_json(document, ("ngram", "eagle")), document)
    stopped, plain = (causal_plan(records, policy.methods, policy.decide_for, policy.depth, confidence_for=lambda b: q)
                      for q in (p, None))
    from specscope.report.policy import policy_section
    from specscope.sim.grid import SimConfig

    _, choices = policy_section(records[:4], str(path), COST, SimConfig(mode="mixed", batch_sizes=(1,)))
    assert choices and all(c.confidence == p for c in choices)  # the report's walks stop the drafter too
    eagle = stopped.method == 1
    acc = np.stack([r.acc_len("eagle") for r in records])[stopped.request_of_step, stopped.pos - 1]  # [S]
    assert eagle.any() and np.all(stopped.proposed[eagle] <= acc[eagle])  # no draft past the first rejected
    assert stopped.emitted[eagle].mean() > plain.emitted[plain.method == 1].mean()


def test_a_policy_stopping_its_drafter_at_one_batch_size_is_refused_only_where_that_rule_is_walked(policy_file,
                                                                                                      tmp_path, capsys):
    """p at B = 8 alone, traces without draft_prob: paper mode at B = 1 walks B = 1's rule and runs;
    at B = 8 it is refused naming draft_prob, and so is mixed mode at B = 8 (its iterations of 8)."""
    from specscope.sim.grid import SimConfig, simulate

    document = json.loads(policy_file.read_text())
    document["models"][1]["confidence"] = 0.5  # B = 8
    path = tmp_path / "p.json"
    path.write_text(json.dumps(document))
    records = workload(1, count=8)
    (row,) = simulate(records, ["ngram+eagle"], [f"learned:{path}"], COST, SimConfig(mode="paper", batch_sizes=(1,)))
    assert row.speedup > 0
    for mode in ("paper", "mixed"):
        with pytest.raises(SpecscopeError, match=r"stops it at its confidence \(p = 0\.5: .*at batch size 8 \(" + mode
                                                 + r" mode\), but .*keeps draft_prob to 0 drafts: re-trace with "
                                                   r"`specscope trace --draft-probs"):
            simulate(records, ["ngram+eagle"], [f"learned:{path}"], COST, SimConfig(mode=mode, batch_sizes=(8,)))
    # mixed mode leaves out a batch size its 8 requests cannot fill: its rule is not walked, nothing refused
    document["models"][1]["confidence"], document["models"][0]["confidence"] = None, None
    document["batch_sizes"], document["models"] = [1, 8, 64], [*document["models"], {**document["models"][1],
                                                                                     "batch_size": 64, "confidence": 0.5}]
    path.write_text(json.dumps(document))
    rows = simulate(records, ["ngram+eagle"], [f"learned:{path}"], COST,
                    SimConfig(mode="mixed", batch_sizes=(1, 8, 64), oversize="skip"))
    assert [r.batch_size for r in rows] == [1, 8]
    # policy explain --traces walks every rule (B copies): refused there, in one line (it printed the k unstopped)
    from specscope.cli import main

    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    assert main(["policy", "explain", str(path), "--traces", str(traces)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at batch size 1, 8, 64 (paper mode)" in err and "draft_prob" in err


def test_rows_name_the_policy_files_content_not_only_its_name(policy_file, tmp_path):
    """A file fitted again in place runs under the same name; its rows' policy_sha256 (the start of
    the file's SHA-256, as the study's measured cells carry it) tells the two apart."""
    import hashlib

    from specscope.sim.grid import SimConfig, simulate

    path = tmp_path / "p.json"
    path.write_bytes(policy_file.read_bytes())
    config = SimConfig(mode="paper", batch_sizes=(1,))
    (first,) = simulate(workload(1, count=4), ["ngram+eagle"], [f"learned:{path}"], COST, config)
    (fixed,) = simulate(workload(1, count=4), ["eagle"], ["fixed:2"], COST, config)
    assert first.policy_sha256 == hashlib.sha256(policy_file.read_bytes()).hexdigest()[:16]
    assert fixed.policy_sha256 is None
    document = json.loads(path.read_text())
    document["training"]["seed"] = 1  # another fit, one name
    path.write_text(json.dumps(document))
    (second,) = simulate(workload(1, count=4), ["ngram+eagle"], [f"learned:{path}"], COST, config)
    assert second.policy == first.policy and second.policy_sha256 != first.policy_sha256
    assert "policy_sha256" in second.flat()


def test_a_feature_constant_in_training_carries_no_weight(policy_file):
    """Every training prompt has one length: log_prompt is constant, its float std rounding
    (~1e-16). Standardised by that, it was fitted on noise (slopes of 10^16 against offsets of
    10^16): a prompt of any other length decided at random."""
    from specscope.policy.learned import choosers_from_json

    document = json.loads(policy_file.read_text())
    column = list(document["features"]).index("log_prompt")
    assert document["scale"][column] == 1.0
    chooser = choosers_from_json(document, ("ngram", "eagle"))[1]
    assert np.abs(chooser.weights[:, column]).max() < 1e-6 and np.abs(chooser.bias).max() < 100


def test_a_feature_far_outside_training_moves_no_prediction_past_the_training_span():
    """Prompts of 5 tokens and one of 6: log_prompt varies a little, so it keeps a slope on its
    tiny scale. At a 100k-token prompt that slope alone moved EAGLE's logit by tens (predicted
    acceptance 1.000 against 0.6 observed); held to its training span, a prediction stays within
    those of the training steps."""
    from dataclasses import replace

    from specscope.policy.learned import choosers_from_json
    from specscope.sim.fit import fit_policy
    from specscope.sim.observe import Observer

    records = workload(0)
    records[0] = replace(records[0], prompt_token_ids=np.arange(1, 7, dtype=np.int64))
    document = fit_policy(records, ("ngram", "eagle"), COST, [1])
    chooser, methods = choosers_from_json(document, ("ngram", "eagle"))[1], ("ngram", "eagle")
    column = list(document["features"]).index("log_prompt")
    assert np.abs(np.asarray(document["coef"])[:, column]).max() > 0  # a real slope, on a tiny scale
    for o in (Observer(r, methods, 60, 6).observe(p) for r in records[:4] for p in (1, 30)):
        x = features(o, methods)
        far = [chooser.row_gains([*x[:column], float(np.log1p(n)), *x[column + 1:]], 8, [0.0, 0.0])
               for n in (100_000, 10_000_000)]
        assert far[0] == far[1]  # past the span: held at its edge (the slope alone added 40 and 59)
    edge = chooser.span[1, 1] + chooser.bias[1]  # EAGLE's hazard logits at the span's top, j = 2 … J + 1
    reach = np.cumprod(1.0 / (1.0 + np.exp(-edge)))  # P(acc_len ≥ j)
    assert np.allclose(far[0][1], np.concatenate([[1.0], 1.0 + np.cumsum(reach)]))
    assert far[0][1][-1] < 1.0 + len(reach) - 0.5  # unbounded, every draft was "accepted"


def test_a_method_that_accepted_everything_in_training_still_follows_a_request_that_rejects():
    """EAGLE accepted every draft in training: its hazards were set to σ(20), past the reach of
    any request's record, and a workload where it accepts nothing drafted k = J at every step
    (0.76× where not drafting is 1.00×). Its offsets are now its smoothed rate's log-odds, and a
    request whose drafts are all rejected stops drafting once its record outweighs them (here
    after 56 rejections here: training said 0.999)."""
    from specscope.sim.fit import fit_policy

    accepting = [record([1] * 60, [7] * 60, rid=f"a{i}", offer=[0] * 60, dataset="a") for i in range(6)]
    rejecting = [record([1] * 120, [1] * 120, rid=f"r{i}", offer=[0] * 120, dataset="r") for i in range(6)]
    path_document = fit_policy(accepting, ("ngram", "eagle"), COST, [1])
    from specscope.policy.learned import choosers_from_json
    from specscope.sim.switching import causal_plan

    policy_choosers = choosers_from_json(path_document, ("ngram", "eagle"))
    from specscope.policy.learned import LearnedPolicy

    policy = LearnedPolicy("p", ("ngram", "eagle"), policy_choosers, path_document)
    plan = causal_plan(rejecting, policy.methods, policy.decide_for, policy.depth)
    steps = plan.steps_per_request
    drafted = (plan.proposed > 0).reshape(len(rejecting), -1) if len(set(steps)) == 1 else None
    assert drafted is not None and drafted[:, :3].any()  # it tries, as training says it should
    assert not drafted[:, 80:].any()  # and stops once its record outweighs training (±20: it never did)


def test_max_k_caps_the_longest_proposal():
    from specscope.policy.learned import choosers_from_json
    from specscope.sim.fit import fit_policy

    document = fit_policy(workload(0)[:4], ("ngram", "eagle"), COST, [1], max_k=3)
    assert np.asarray(document["intercept"]).shape[1] == 3  # j = 2 … 4: k ≤ 3
    assert choosers_from_json(document, ("ngram", "eagle"))[1].seconds.shape == (2, 4)


def test_the_fit_does_not_depend_on_the_order_of_its_batch_sizes():
    """`--batch-sizes 8,1` wrote a file its own loader refused (batch sizes out of order), and its
    second round walked by B = 8's rule: the same fit as 1,8 now, in order."""
    from specscope.policy.learned import choosers_from_json
    from specscope.sim.fit import fit_policy

    forward = fit_policy(workload(0)[:4], ("ngram", "eagle"), COST, [1, 8], max_k=3)
    backward = fit_policy(workload(0)[:4], ("ngram", "eagle"), COST, [8, 1], max_k=3)
    assert backward["batch_sizes"] == [1, 8] and [m["batch_size"] for m in backward["models"]] == [1, 8]
    assert {k: v for k, v in backward.items() if k != "training"} == {k: v for k, v in forward.items() if k != "training"}
    assert sorted(choosers_from_json(backward, ("ngram", "eagle"))) == [1, 8]


def test_the_simulator_caps_ngram_offers_at_the_policys_depth_as_the_engine_does(tmp_path, monkeypatch):
    """The engine's n-gram lookup proposes at most the policy's deepest k, so the offer its
    features read is capped there; the simulator's walk must see the same offer (a trace
    recorded offers up to its k_max = 8)."""
    import specscope.policy.learned as learned
    from specscope.sim.fit import fit_policy

    path = tmp_path / "p.json"
    path.write_text(json.dumps(fit_policy(workload(0)[:4], ("ngram", "eagle"), COST, [1], max_k=3)))
    seen, real = [], learned.features
    monkeypatch.setattr(learned, "features", lambda obs, methods: seen.append(obs.ngram_offer) or real(obs, methods))
    simulate(workload(1)[:4], ["ngram", "eagle"], [f"learned:{path}"], COST, SimConfig(mode="mixed", batch_sizes=(1,)))
    assert seen and max(seen) == 3  # the workload offers 8 where n-gram matches


def test_the_reports_policy_section_walks_traces_deeper_than_the_policy(tmp_path):
    """The report's example walks of a policy proposing k ≤ 3 over traces recorded to k_max = 8:
    every choice within k ≤ 3, the table judged at each batch size."""
    from specscope.report.policy import policy_section
    from specscope.sim.fit import fit_policy

    path = tmp_path / "p.json"
    path.write_text(json.dumps(fit_policy(workload(0)[:4], ("ngram", "eagle"), COST, [1], max_k=3)))
    table, choices = policy_section(workload(1)[:8], str(path), COST, SimConfig(mode="mixed", batch_sizes=(1, 4)))
    assert sorted(line["batch_size"] for line in table) == [1, 4]
    assert choices and all(c.k.max() <= 3 for c in choices)
    from specscope.policy.learned import stamp  # each line names the file's content and methods (policy.csv)
    assert {(line["methods"], line["policy_sha256"]) for line in table} == {("ngram+eagle", stamp(path.read_bytes()))}


def test_a_policy_deeper_than_the_traces_is_refused_as_a_fixed_k_would_be(policy_file):
    """The fixture's policy proposes up to k = 6; traces recorded to k_max = 3 (acc_len ≤ 4) cannot
    say what its k = 4 … 6 steps would emit: refused (walking it within k ≤ 3 would judge another
    policy than the file's), with the --max-k that fits them."""
    shallow = [r.capped(3) for r in workload(1)[:8]]
    with pytest.raises(SpecscopeError, match=r"proposes k = 6, above the trace's k_max = 3 \(fit it with --max-k 3\)"):
        simulate(shallow, ["ngram", "eagle"], [f"learned:{policy_file}", "fixed:3"], COST,
                 SimConfig(mode="mixed", batch_sizes=(1, 4)))


def test_on_an_unseen_workload_it_beats_every_fixed_policy_and_closes_most_of_the_gap(policy_file):
    learned = f"learned:{policy_file}"
    policies = ["fixed:1", "fixed:2", "fixed:4", "fixed:7", "oracle-switch:ngram+eagle", learned]
    rows = simulate(workload(1), ["ngram", "eagle"], policies, COST, SimConfig(mode="paper", batch_sizes=(1, 8)))
    for line in judge(rows, learned):
        assert line["learned"] > line["best_fixed_speedup"]
        assert line["gap_closed"] > 0.5


def test_without_a_fixed_drafting_cost_a_group_decides_row_by_row_and_the_nearest_batch_size_decides(policy_file):
    from dataclasses import replace

    policy = load_policy(policy_file)
    assert policy.chooser(2) is policy.choosers[1] and policy.chooser(64) is policy.choosers[8]
    fitted = policy.chooser(8)
    chooser = replace(fitted, seconds=fitted.seconds + fitted.fixed, fixed=np.zeros_like(fitted.fixed))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, len(policy.document["features"])))
    offers = rng.integers(0, 9, 16)
    shift = rng.normal(size=(16, 2))
    decided = chooser.choose_group(x, offers, shift)
    assert [chooser.choose(row.tolist(), int(o), u) for row, o, u in zip(x, offers, shift)] == decided
    assert all(k <= o for (m, k), o in zip(decided, offers) if m == 0)  # n-gram never past its offer
    extreme = x * 1e4  # hazard logits of ±10^4: no overflow, the same decisions both ways
    assert [chooser.choose(row.tolist(), int(o), u) for row, o, u in zip(extreme, offers, shift)] \
        == chooser.choose_group(extreme, offers, shift)
    decided = fitted.choose_group(x, offers, shift)
    assert all(k <= o for (m, k), o in zip(decided, offers) if m == 0)


@pytest.mark.parametrize("rows", [4, 16, 17, 40])
def test_a_group_decides_alike_in_plain_python_and_vectorised(policy_file, rows, monkeypatch):
    """The group rule in plain Python (up to PLAIN_ROWS rows) and over arrays (more) agree, on
    random rows of the fitted policy at B = 8 and on a chooser with two model drafters, each also
    on an engine that pads (every batch width weighed), with committed rows beside them or none; a row's
    expected tokens in plain Python are those over arrays."""
    import specscope.policy.chooser as chooser_module
    from specscope.policy.chooser import Chooser

    chooser = load_policy(policy_file).chooser(8)
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, chooser.weights.shape[1]))
    offers, shift = rng.integers(0, 9, rows), rng.normal(size=(rows, 2))
    args = (x.tolist(), offers.tolist(), shift.tolist())
    tables = [chooser.row_gains(*row) for row in zip(*args)]
    assert np.allclose(tables, chooser.gains(x, np.minimum(offers, chooser.seconds.shape[1] - 1), shift))
    two = Chooser(chooser.weights, chooser.bias, chooser.seconds, -1, chooser.base_rate,
                  chooser.fixed + chooser.fixed[1], batch_size=8)  # both methods pay a fixed part
    verify = np.linspace(0.2, 0.6, chooser.seconds.shape[1]) * chooser.seconds.min()
    padded = [Chooser(rule.weights, rule.bias, rule.seconds, rule.ngram, rule.base_rate, rule.fixed, 8, verify, True)
              for rule in (chooser, two)]  # every row verified at the batch's widest proposal
    depth = chooser.seconds.shape[1] - 1  # committed rows beside them: none, n-gram's, a drafter's, mixed
    besides = [[], [(0, 2)] * 3, [(1, depth)], [(-1, 0), (0, 1), (1, 2), (1, 1)]]
    for rule in (chooser, two, *padded):
        for committed in besides:
            monkeypatch.setattr(chooser_module, "PLAIN_ROWS", rows)
            plain = rule.choose_group(*args, committed=committed)
            monkeypatch.setattr(chooser_module, "PLAIN_ROWS", 0)
            assert rule.choose_group(*args, committed=committed) == plain


def test_the_simulators_decision_is_the_engines_and_copies_decide_alone(policy_file):
    """``decide_for(b)`` (what the engine's switching proposer and the simulator ask) on the rows
    of an iteration is ``choose_group`` on their features, offers and shifts; a lone row at B = 8, and B
    copies of one observation (paper mode), decide as the request alone (``choose``)."""
    from specscope.sim.observe import Observer

    policy = load_policy(policy_file)
    chooser = policy.chooser(8)
    records = workload(3, count=8)
    observed = [Observer(r, policy.methods, 40, policy.depth).observe(1) for r in records]

    def engine(rows):
        return chooser.choose_group([features(o, policy.methods) for o in rows], [o.ngram_offer for o in rows],
                                    [chooser.shift_for(o) for o in rows])

    def alone(obs):
        return chooser.choose(features(obs, policy.methods), obs.ngram_offer, chooser.shift_for(obs))

    decide = policy.decide_for(8)
    assert decide(observed) == engine(observed)
    # a lone row left of a batch of 8 pays the drafter's batch part at its own rate, θ·F, as a
    # request alone does (it was charged 8·θ·F: the last rows of a batch stopped drafting)
    assert all(decide([obs]) == engine([obs]) == [alone(obs)] for obs in observed)
    assert all(decide([obs] * 8) == [alone(obs)] * 8 for obs in observed)


@pytest.mark.parametrize("plain_rows", [0, 64])  # vectorised, and in plain Python
def test_a_group_pays_the_drafters_fixed_cost_once_and_drafts_no_deeper_than_it_pays_for(monkeypatch, plain_rows):
    """Two methods (0 n-gram, 1 a model drafter), no features, J = 2, B = 2, every step 1 s per
    row. Every n-gram hazard is σ(−∞) = 0 (n-gram gains nothing; −50 stands for −∞). The drafter's
    hazards are 1/2, 1/2 for row 0 (shift 0) and 0 for row 1 (shift −∞): E[e] = 1, 1.5, 1.75 for
    row 0 at k = 0, 1, 2, 1 for row 1. θ is a row's best ratio alone, F included: row 1's is none's,
    1. F = (0, 0.2, 0.3): θ_0 = 1.75 / 1.3; a group's value Σ_rows (E[e] − θ) − (θ_0 + 1)·F(k_d) is
    −0.346, −0.315, −0.300 for k_d = 0, 1, 2: row 0 drafts k = 2, row 1 none. F = (0, 0.2, 0.5):
    θ_0 = 1.5 / 1.2, values −0.25, −0.2, −0.625: row 0 drafts k = 1. F = (0, 0.3, 0.5): θ_0 =
    1.75 / 1.5, values −0.167, −0.317, −0.5: no row drafts — though alone, F paid by it, row 0
    would draft k = 2 (its best ratio)."""
    import specscope.policy.chooser as chooser_module
    from specscope.policy.chooser import Chooser

    monkeypatch.setattr(chooser_module, "PLAIN_ROWS", plain_rows)
    bias = np.array([[-50.0, -50.0], [0.0, 0.0]])
    x, offer = np.zeros((2, 0)), np.array([0, 0])
    shift = np.array([[0.0, 0.0], [0.0, -50.0]])

    def group(fixed):
        chooser = Chooser(np.zeros((2, 0)), bias, np.ones((2, 3)), 0, np.full((2, 2), 0.5),
                          np.array([[0.0, 0.0, 0.0], fixed]), batch_size=2)
        return chooser.choose_group(x, offer, shift), chooser

    assert group([0.0, 0.2, 0.3])[0] == [(1, 2), (-1, 0)]
    assert group([0.0, 0.2, 0.5])[0] == [(1, 1), (-1, 0)]
    decided, chooser = group([0.0, 0.3, 0.5])
    assert decided == [(-1, 0), (-1, 0)]
    assert chooser.choose([], 0, shift[0]) == (1, 2)


@pytest.mark.parametrize("plain_rows", [0, 64])  # vectorised, and in plain Python
def test_committed_rows_beside_a_decided_row_weigh_its_drafting_and_share_what_they_run(monkeypatch, plain_rows):
    """The drafter of the test above, one row decided (E[e] = 1, 1.5, 1.75 at k = 0, 1, 2; every
    step 1 s a row), F = (0, 0.1, 0.15): θ = 1.75 / 1.15 = 1.522. Each of w committed rows that do
    not run the drafter waits for it, counted at θ: the value is E[e] − θ − (1 + w)·θ·F(k_d).
    w = 0: −0.522, −0.174, 0.000 for k_d = 0, 1, 2 (k = 2); w = 2: −0.522, −0.478, −0.457 (k = 2);
    w = 3: −0.522, −0.631, −0.685: the row drafts nothing, where alone it drafts k = 2. Three rows
    committed to the drafter at k = 2 run it to 2 anyway: k_d ≥ 2, and the row takes k = 2 at no
    further price; committed to it at k = 1, k_d = 1 costs nothing more and k_d = 2 costs
    4·θ·(F(2) − F(1)) = 0.304 for a gain of 0.25 − 0 in E[e]: k = 1."""
    import specscope.policy.chooser as chooser_module
    from specscope.policy.chooser import Chooser

    monkeypatch.setattr(chooser_module, "PLAIN_ROWS", plain_rows)
    chooser = Chooser(np.zeros((2, 0)), np.array([[-50.0, -50.0], [0.0, 0.0]]), np.ones((2, 3)), 0,
                      np.full((2, 2), 0.5), np.array([[0.0, 0.0, 0.0], [0.0, 0.1, 0.15]]), batch_size=4)

    def decide(committed):
        return chooser.choose_group(np.zeros((1, 0)), np.array([0]), np.zeros((1, 2)), committed=committed)

    assert [decide([(-1, 0)] * w) for w in range(4)] == [[(1, 2)]] * 3 + [[(-1, 0)]]
    assert decide([(0, 2)] * 3) == [(-1, 0)]  # n-gram's rows run no drafter: as waiting as rows of none
    assert decide([(1, 2)] * 3) == [(1, 2)]
    assert decide([(1, 1)] * 3) == [(1, 1)]


@pytest.mark.parametrize("plain_rows", [0, 64])  # vectorised, and in plain Python
def test_a_group_weighs_every_combination_of_two_drafters(monkeypatch, plain_rows):
    """Two model drafters A and B, J = 1, every step 1 s per row, B = 2: row 0 gains 0.5 from A
    alone (E[e] = 1.5), row 1 0.5 from B alone; a row's θ is its best ratio alone, max(1, 1.5 /
    (1 + F)), and a drafter running costs the batch (θ_0 + θ_1)·F. F = 0.1 each: both run (values
    −0.27 both, −0.5 one, −0.73 none); F = 0.3 each: none (−0.31 none, −0.5 one, −0.69 both);
    F_A = 0.1, F_B = 0.3: A alone (−0.27 A, −0.52 none, −0.52 both, −0.77 B)."""
    import specscope.policy.chooser as chooser_module
    from specscope.policy.chooser import Chooser

    monkeypatch.setattr(chooser_module, "PLAIN_ROWS", plain_rows)
    x, offer = np.zeros((2, 0)), np.array([0, 0])
    shift = np.array([[0.0, -50.0], [-50.0, 0.0]])

    def group(f_a, f_b):
        chooser = Chooser(np.zeros((2, 0)), np.zeros((2, 1)), np.ones((2, 2)), -1, np.full((2, 1), 0.5),
                          np.array([[0.0, f_a], [0.0, f_b]]), batch_size=2)
        return chooser.choose_group(x, offer, shift)

    assert group(0.1, 0.1) == [(0, 1), (1, 1)]
    assert group(0.3, 0.3) == [(-1, 0), (-1, 0)]
    assert group(0.1, 0.3) == [(0, 1), (-1, 0)]


def test_hazard_rows_are_the_draft_tokens_judged():
    """acc_len 1: token 1 rejected; 3: tokens 1, 2 accepted, 3 rejected; 20 with k ≤ 16: 16
    accepted, nothing judged beyond; 2 with an offer of 1: its one token accepted; 1 with no
    offer: nothing judged."""
    from specscope.sim.fit import hazard_rows

    step, j, accepted = hazard_rows(np.array([1, 3, 20, 2, 1]), np.array([16, 16, 16, 1, 0]))
    assert step.tolist() == [0, 1, 1, 1] + [2] * 16 + [3]
    assert j.tolist() == [0, 0, 1, 2, *range(16), 0]
    assert accepted.tolist() == [False, True, True, False] + [True] * 16 + [True]


def test_the_hazard_model_multiplies_into_acceptance():
    """Two methods, one feature, J = 2: P(acc_len ≥ j) is the product of the hazards, E[e] adds
    them (over arrays and in plain Python alike), and a shift moves every hazard logit."""
    from specscope.policy.chooser import Chooser

    weights, bias = np.array([[0.0], [1.0]]), np.log(np.array([[1.0, 1.0], [1.0, 3.0]]))  # σ(ln r) = r / (1 + r)
    seconds = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])
    chooser = Chooser(weights, bias, seconds, ngram=-1, base_rate=np.full((2, 2), 0.5), fixed=np.zeros((2, 3)))
    none = np.zeros((1, 2))
    score = chooser.gains(np.array([[0.0]]), np.array([0]), none)[0]
    assert np.allclose(score[0], [1.0, 1.5, 1.75])  # hazards 1/2, 1/2: 1, 1 + 1/2, 1 + 1/2 + 1/4
    assert np.allclose(score[1], [1.0, 1.5, 1.5 + 0.5 * 0.75])
    assert np.allclose(chooser.row_gains([0.0], 0, [0.0, 0.0]), score)
    shifted = chooser.gains(np.array([[0.0]]), np.array([0]), np.array([[np.log(3.0), 0.0]]))[0]
    assert np.allclose(shifted[0], [1.0, 1.75, 1.75 + 0.75 ** 2])  # a shift of ln 3 on every hazard: 1/2 → 3/4


def test_a_request_takes_the_best_ratio_alone_and_in_a_group():
    """One model drafter, hazards 1/2 (E[e] = 1, 1.5, 1.75 for k = 0, 1, 2), prices 1, 1.4, 2.2 s:
    ratios 1, 1.071, 0.795 — k = 1, though k = 2 emits more; alone, in a group of two (plain
    Python) and of PLAIN_ROWS + 1 (arrays). Priced 1, 1.4, 1.5 s, k = 2's ratio 1.167 wins; a
    drafter whose every k costs more than its tokens (1, 1.6, 1.8: 0.94, 0.97) is not run."""
    from specscope.policy.chooser import Chooser

    rows = PLAIN_ROWS + 1
    for prices, pick in (([1.0, 1.4, 2.2], (0, 1)), ([1.0, 1.4, 1.5], (0, 2)), ([1.0, 1.6, 1.8], (-1, 0))):
        chooser = Chooser(np.zeros((1, 0)), np.zeros((1, 2)), np.array([prices]), ngram=-1,
                          base_rate=np.full((1, 2), 0.5), fixed=np.zeros((1, 3)), batch_size=2)
        assert np.allclose(chooser.row_gains([], 0, [0.0]), [[1.0, 1.5, 1.75]])
        assert chooser.choose([], 0, [0.0]) == pick
        assert chooser.choose_group([[]] * 2, [0] * 2, [[0.0]] * 2) == [pick] * 2
        assert chooser.choose_group(np.zeros((rows, 0)), np.zeros(rows, dtype=int), np.zeros((rows, 1))) == [pick] * rows


def test_the_shift_is_the_requests_own_log_odds_against_the_training_rates_per_depth():
    """History(2 methods, depth 2, n-gram = 0). Eagle k = 2 emitting 3 judges depths 1, 2 and
    accepts both; eagle k = 2 emitting 1 judges depth 1 and accepts none. n-gram offered 2 and
    matched 1 of the 3 emitted (judged 2: the match and the miss), then offered nothing (judged
    none). Eagle: A = 2 of T = 3, the training rates (1/2, 1/4) expect E = 2·1/2 + 1/4 = 5/4:
    shift = 3/(3 + 16) · ln[(2.5 / 1.5) / (1.75 / 2.25)]."""
    from specscope.policy.chooser import PRIOR_TOKENS, Chooser
    from specscope.policy.observation import History, Outcome

    history = History(2, 2, lookup=0)
    history.record(Outcome(1, 2, 3, 2, 1))
    history.record(Outcome(1, 2, 1, 0, 0))
    obs = history.observation(5, 4, (0,) * 9, 0, 0.0)
    assert obs.judged == ((1, 1), (2, 1)) and obs.accepted == ((1, 0), (1, 1))
    rates = np.array([[0.5, 0.5], [0.5, 0.25]])
    chooser = Chooser(np.zeros((2, 1)), np.zeros((2, 2)), np.ones((2, 3)), 0, rates, np.zeros((2, 3)))
    eagle = 3 / (3 + PRIOR_TOKENS) * np.log((2.5 / 1.5) / (1.75 / 2.25))
    ngram = 2 / (2 + PRIOR_TOKENS) * np.log((1.5 / 1.5) / (1.5 / 1.5))  # 1 of 2 where 1/2 was expected: 0
    assert np.allclose(chooser.shift_for(obs), [ngram, eagle])


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema="other"), "expected a policy file"),
    (lambda d: d.pop("coef"), "malformed policy file"),
    (lambda d: d["models"][0].update(batch_size=0), r"models\[0\]\.batch_size: .* got 0"),
    (lambda d: d.update(scale=[0.0] * len(d["scale"])), "positive scales"),
    (lambda d: d["training"].update(gate="sometimes"), "training: .*how its gates were kept: carried, fitted, none"),
    (lambda d: d["models"][0].update(gate={"options": [[0, 1]]}), r"gate: expected an object with options"),
    # the cost model it was fitted for, checked as a cost model file is (NaN, text, -5 or a bare name were read)
    (lambda d: d["cost_model"]["forward"].update(c_fixed=-5), r"cost_model: field 'forward\.c_fixed': .*got -5"),
    (lambda d: d["cost_model"]["forward"].update(c_fixed="abc"), r"cost_model: field 'forward\.c_fixed'"),
    (lambda d: d.update(cost_model={"name": "toy"}), r"cost_model: field 'forward': missing"),
    (lambda d: d["cost_model"].update(kind="bogus"), r"cost_model: field 'kind': expected 'linear' or 'roofline'"),
    (lambda d: d.update(cost_model={"kind": "roofline", "name": "r", "gpu": "h100", "model": "m", "overhead_s": 0,
                                    "efficiency": {"weights": 7}, "drafting": {}}),
     r"cost_model: field 'efficiency\.weights'"),
])
def test_a_malformed_file_is_one_line_naming_it(policy_file, tmp_path, edit, message):
    document = json.loads(policy_file.read_text())
    edit(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(SpecscopeError, match=message) as error:
        load_policy(bad)
    assert str(bad) in str(error.value) and "\n" not in str(error.value)


def test_explain_names_the_weighty_features_and_walks_a_trace(policy_file, tmp_path, capsys):
    """`policy explain FILE --traces T`: the features by weight, the training acceptance per depth,
    the rule and prices per batch size, and decisions along the first record (deeper-traced than the
    policy: its walk stops at J)."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    traces = tmp_path / "t.jsonl"
    write_traces(traces, workload(1)[:1])
    assert main(["policy", "explain", str(policy_file), "--traces", str(traces)]) == 0
    out = capsys.readouterr().out
    assert "ngram_offer" in out and "best expected tokens per second" in " ".join(out.split()) and "decisions along record '1-0'" in out
    assert "acceptance of draft token j in" in out  # the reference of the request-level shift


def test_leave_one_out_fits_a_policy_for_each_cost_model_it_judges_by(tmp_path):
    """Two datasets × two cost models: four lines per batch size, each judged by the cost model
    its policy was fitted for (the policy files differ: the step prices do)."""
    from dataclasses import replace

    from specscope.sim.evaluate import leave_one_out

    slower = replace(COST, name="toy-slow-draft", drafting={**COST.drafting, "eagle": LinearDrafting(0.6, 0.1, 0.0)})
    records = workload(0, count=6, g=40) + workload(1, count=6, g=40)
    table = leave_one_out(records, ("ngram", "eagle"), [COST, slower], SimConfig(mode="paper", batch_sizes=(1,)), tmp_path)
    assert all(line["mode"] == "paper" and line["throughput"] is None for line in table)  # paper mode says so
    assert sorted((line["cost_model"], line["dataset"], line["fitted_on"]) for line in table) == [
        ("toy", "w0", "w1"), ("toy", "w1", "w0"), ("toy-slow-draft", "w0", "w1"), ("toy-slow-draft", "w1", "w0")]
    files = list(tmp_path.glob("policy-without-*.json"))
    assert len(files) == 4 and {json.loads(p.read_text())["cost_model"]["name"] for p in files} == {"toy", "toy-slow-draft"}
    everything = sorted(tmp_path.glob("policy-all-*.json"))  # beside it: one policy per cost model fitted on both
    assert [json.loads(p.read_text())["training"]["sources"] for p in everything] == [["w0", "w1"]] * 2
    for line in table:
        room = line["oracle_switch"] - line["best_fixed_speedup"]
        assert line["gap_closed_seen"] == pytest.approx((line["learned_seen"] - line["best_fixed_speedup"]) / room)


def test_a_fit_counts_the_steps_of_one_walk_of_every_record(monkeypatch):
    """``training.steps``: the steps one walk of every record took (its first round), not the rows
    of both rounds (the second walks the same records again): 4 requests of 32 tokens have at
    most 124 steps (4 of 30 tokens read 232 steps, and its warning below 200 steps came at 100)."""
    import specscope.sim.fit as fit

    walks, collect = [], fit.collect
    monkeypatch.setattr(fit, "collect", lambda *a, **k: walks.append(collect(*a, **k)) or walks[-1])
    records = workload(0, count=4, g=32)
    steps = fit.fit_policy(records, ("ngram", "eagle"), COST, [1])["training"]["steps"]
    assert len(walks) == fit.ROUNDS and steps == len(walks[0][0]) <= sum(r.output_len - 1 for r in records) == 124


def test_leave_one_out_judges_steady_state_speedups_where_asked(tmp_path):
    """``steady``: every speedup of a line is the steady-state one of the same cell (the held-out
    policy's, the best fixed k's in hindsight among the steady ones), and the line says so."""
    from specscope.sim.evaluate import leave_one_out

    records = workload(0, count=12, g=40) + workload(1, count=12, g=40)
    config = SimConfig(mode="mixed", batch_sizes=(4,))
    (tmp_path / "run").mkdir(), (tmp_path / "steady").mkdir()
    run = leave_one_out(records, ("ngram", "eagle"), [COST], config, tmp_path / "run")
    steady = leave_one_out(records, ("ngram", "eagle"), [COST], config, tmp_path / "steady", steady=True)
    assert {line["throughput"] for line in run} == {"run"} and {line["throughput"] for line in steady} == {"steady"}
    for line in steady:
        held = [r for r in records if r.dataset == line["dataset"]]
        number = ["w0", "w1"].index(line["dataset"])
        (learned,) = simulate(held, ["ngram+eagle"], [f"learned:{tmp_path / 'steady' / f'policy-without-{number}-0.json'}"],
                              COST, config)
        fixed = simulate(held, ["ngram", "eagle"], [f"fixed:{k}" for k in range(1, 9)], COST, config)
        assert line["learned"] == learned.steady_speedup != learned.speedup
        assert line["best_fixed_speedup"] == max(r.steady_speedup for r in fixed)


def test_a_cell_without_a_steady_state_is_left_out_and_said(tmp_path):
    """Dataset w1 of three requests, one a one-token output (it takes no step): at B = 3 no
    iteration runs every slot decoding, so no policy there has a steady-state speedup — the cell is
    left out of the judgement (it showed a reason where numbers stand, and was counted in the
    verdict) with a note; B = 1 is judged. With nothing left to judge, a one-line error."""
    from specscope.sim.evaluate import leave_one_out

    short = workload(1, count=3, g=40)
    records = workload(0, count=12, g=40) + [short[0].truncated(1), *short[1:]]
    notes: list[str] = []
    table = leave_one_out(records, ("ngram", "eagle"), [COST], SimConfig(mode="mixed", batch_sizes=(1, 3)), tmp_path,
                          notes=notes, steady=True)
    assert sorted((line["dataset"], line["batch_size"]) for line in table) == [("w0", 1), ("w0", 3), ("w1", 1)]
    assert all(np.isfinite(line[c]) for line in table for c in ("best_fixed_speedup", "learned", "oracle_switch"))
    assert [n for n in notes if "left out" in n] == [
        "held out 'w1' at B=3: left out, 24 of its 24 policies have no steady-state speedup (no iteration of their "
        "run had every slot decoding), first ngram adaptive"]
    with pytest.raises(SpecscopeError, match=r"no held-out cell has a speedup for every policy to judge in steady "
                                             r"state .*--throughput run or smaller --batch-sizes"):
        leave_one_out([short[0].truncated(1), *short[1:], *[replace(r, dataset="w2") for r in short[:2]]],
                      ("ngram", "eagle"), [COST], SimConfig(mode="mixed", batch_sizes=(3,), oversize="skip"), tmp_path,
                      steady=True)


def test_leave_one_out_judges_a_shallower_dataset_within_its_own_depth(tmp_path):
    """A dataset traced to k_max 2 beside one traced to 8: each held-out policy proposes at most
    what its dataset was traced to (it was refused: 'proposes k = 6, above the trace's k_max')."""
    from specscope.sim.evaluate import leave_one_out

    shallow = [r.capped(2) for r in workload(1, count=6, g=40)]
    table = leave_one_out(workload(0, count=6, g=40) + shallow, ("ngram", "eagle"), [COST],
                          SimConfig(mode="paper", batch_sizes=(1,)), tmp_path)
    assert {line["dataset"] for line in table} == {"w0", "w1"}
    assert np.asarray(json.loads((tmp_path / "policy-without-1-0.json").read_text())["intercept"]).shape[1] == 2
    assert all(np.isfinite(line["learned"]) for line in table)
    # the policy fitted on both is judged as deep as the held-out one (it was fitted once, at the
    # shallower depth, and judged on w0 against a held-out policy reaching 6: "seeing" it read worse)
    assert {p.name: np.asarray(json.loads(p.read_text())["intercept"]).shape[1]
            for p in tmp_path.glob("policy-all-*.json")} == {"policy-all-0-2.json": 2, "policy-all-0-8.json": 6}


def test_leave_one_out_takes_any_dataset_name(tmp_path):
    """A dataset named 'math/gsm8k', or 300 characters long: its fold's policy file is named by
    its number (its name as a file name was a FileNotFoundError, or too long)."""
    from dataclasses import replace

    from specscope.sim.evaluate import leave_one_out

    names = {"w0": "math/gsm8k", "w1": "x" * 300}
    records = [replace(r, dataset=names[r.dataset]) for r in workload(0, count=6, g=40) + workload(1, count=6, g=40)]
    table = leave_one_out(records, ("ngram", "eagle"), [COST], SimConfig(mode="paper", batch_sizes=(1,)), tmp_path)
    assert {line["dataset"] for line in table} == set(names.values())


def test_step_prices_split_a_drafters_cost_into_its_part_per_row_and_the_batchs():
    """The toy cost: forward 1 + 0.02 per token, overhead 0.1, n-gram drafting 1 % of the verify
    time, EAGLE 0.2 + 0.05 · (k + 1) per step whatever the rows (the batch's part, F), no drafter
    prefill. A step without EAGLE pays none of it; at B = 2 EAGLE's rows pay nothing per row and
    F = 0.2 + 0.05 · (k + 1). With 0.1 more per drafting row, D(n) = F + 0.1·n: B copies' rows pay
    2 · 0.1 and F is unchanged."""
    from dataclasses import replace

    from specscope.sim.fit import step_seconds

    k = np.arange(3)
    for b in (1, 2):
        seconds, fixed, _ = step_seconds(COST, ("ngram", "eagle"), 2, 0.0, b)
        verify = 1.0 + 0.02 * b * (k + 1)
        assert np.allclose(seconds[0], verify + 0.1 + np.where(k > 0, 0.01 * verify, 0.0))
        assert np.allclose(seconds[1], verify + 0.1)
        assert np.allclose(fixed, [[0, 0, 0], np.where(k > 0, 0.2 + 0.05 * (k + 1), 0.0)])
    per_row = replace(COST, drafting={**COST.drafting, "eagle": LinearDrafting(0.2, 0.05, 0.0, c_req=0.1)})
    seconds, fixed, _ = step_seconds(per_row, ("ngram", "eagle"), 2, 0.0, 2)
    assert np.allclose(seconds[1], 1.0 + 0.02 * 2 * (k + 1) + 0.1 + np.where(k > 0, 0.2, 0.0))
    assert np.allclose(fixed[1], np.where(k > 0, 0.2 + 0.05 * (k + 1), 0.0))


def test_discrimination_is_near_one_where_the_features_know_the_next_step(policy_file):
    """On the toy workload EAGLE's first draft is rejected exactly where n-gram offers (a feature)
    and accepted elsewhere; n-gram, where it offers, is always accepted (one outcome: no AUC)."""
    from specscope.sim.evaluate import discrimination

    rows = {r["method"]: r for r in discrimination(workload(1), load_policy(policy_file))}
    assert rows["eagle"]["steps"] > 100 and rows["eagle"]["auc"] > 0.95
    assert rows["ngram"]["observed"] == 1.0 and np.isnan(rows["ngram"]["auc"])
    assert np.isnan(rows["eagle"]["confidence_auc"])  # these traces keep no draft_prob
    # A drafter whose probability of its first draft is 0.9 where it is accepted and 0.2 where not:
    # its own AUC is 1 over the same steps (known within the step, not before it)
    told = [replace(r, proposers={**r.proposers, "eagle": replace(r.proposers["eagle"], draft_prob=np.where(
        r.proposers["eagle"].acc_len >= 2, 0.9, 0.2).astype(np.float32)[:, None])}) for r in workload(1)]
    rows = {r["method"]: r for r in discrimination(told, load_policy(policy_file))}
    assert rows["eagle"]["confidence_auc"] == 1.0 and np.isnan(rows["ngram"]["confidence_auc"])
    assert rows["eagle"]["confidence_steps"] == rows["eagle"]["steps"]
    # records that keep none beside those that do: told over the steps of those that do (it was nan)
    half = told[: len(told) // 2] + workload(1)[len(told) // 2:]
    rows = {r["method"]: r for r in discrimination(half, load_policy(policy_file))}
    assert rows["eagle"]["confidence_auc"] == 1.0 and 0 < rows["eagle"]["confidence_steps"] < rows["eagle"]["steps"]


def test_without_scikit_learn_fitting_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    import importlib.util

    from specscope.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a))
    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r.to_json()) + "\n" for r in workload(0, count=2)))
    assert main(["policy", "fit", str(traces), "--acc", "ngram,eagle", "--cost-model", "h100-llama3.1-8b",
                 "-o", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err.strip().endswith("pip install 'specscope[policy]'")
    assert not (tmp_path / "p.json").exists()


def test_fit_to_standard_output_writes_the_policy_alone(tmp_path, capsys):
    """``-o -``: standard output carries the JSON and nothing else (the summary line is for files)."""
    from specscope.cli import main
    from specscope.policy.learned import SCHEMA

    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r.to_json()) + "\n" for r in workload(0, count=2)))
    assert main(["policy", "fit", str(traces), "--acc", "ngram,eagle", "--cost-model", "h100-llama3.1-8b",
                 "--batch-sizes", "1", "-o", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == SCHEMA


def test_on_an_engine_that_pads_a_group_weighs_the_width_every_row_verifies():
    """One method (n-gram), J = 2, hazards 1/2 (gain 1, 1.5, 1.75 for k = 0, 1, 2), B = 2, the whole
    price verification: 1.0, 1.2, 1.35 for a batch of k = 0, 1, 2. Row 0 is offered 2, row 1
    nothing. Packed, row 0 takes its best ratio, k = 2 (1.75 / 1.35 = 1.296 beats 1.25 and 1).
    Padded, both rows verify the widest, at the rows' θ summed (row 0's best ratio and row 1's,
    none's 1: 2.296): w = 0 is worth 1 + 1 − 2.296 = −0.30, w = 1 2.5 − 2.296 · 1.2 = −0.26, w = 2
    2.75 − 2.296 · 1.35 = −0.35: row 0 takes k = 1."""
    from specscope.policy.chooser import Chooser

    verify = np.array([1.0, 1.2, 1.35])

    def group(pads: bool) -> list:
        chooser = Chooser(np.zeros((1, 0)), np.zeros((1, 2)), verify[None, :], 0, np.full((1, 2), 0.5),
                          np.zeros((1, 3)), batch_size=2, verify=verify, pads=pads)
        return chooser.choose_group([[], []], [2, 0], [[0.0], [0.0]])

    assert group(pads=False) == [(0, 2), (-1, 0)]
    assert group(pads=True) == [(0, 1), (-1, 0)]


@pytest.mark.parametrize("pads", [False, True])
def test_a_groups_plain_python_decision_is_the_best_of_every_assignment(pads):
    """Random groups of up to 3 rows over n-gram (method 0) and a model drafter (method 1), J = 2:
    the rows' (method, k) that :meth:`Chooser._choose_rows` picks reach the best value over every
    assignment of an action to each row, found by brute force: Σ row scores − B·θ·verify[w] (a
    padding engine: w the widest k) − B·θ·F[k_d] (k_d the drafter's deepest k)."""
    import itertools

    from specscope.policy.chooser import Chooser

    rng = np.random.default_rng(7)
    for _ in range(200):
        rows, theta = int(rng.integers(1, 4)), float(rng.uniform(0.1, 1.0))
        verify = np.cumsum(rng.uniform(0.1, 1.0, 3))
        fixed = np.array([[0.0, 0.0, 0.0], [0.0, *np.sort(rng.uniform(0, 1, 2))]])
        chooser = Chooser(np.zeros((2, 0)), np.zeros((2, 2)), np.tile(verify + 1, (2, 1)), 0, np.full((2, 2), 0.5),
                          fixed, rows, verify, pads)
        tables = [rng.normal(size=(2, 3)).tolist() for _ in range(rows)]
        for t in tables:
            t[1][0] = t[0][0]  # none: one action, whichever method's column holds it

        def value(picks) -> float:
            ks = [k for _, k in picks]
            drafted = [k for m, k in picks if m == 1]
            return (sum(tables[r][max(m, 0)][k] for r, (m, k) in enumerate(picks))
                    - (rows * theta * verify[max(ks)] if pads else 0.0)
                    - rows * theta * fixed[1][max(drafted, default=0)])

        actions = [(-1, 0), (0, 1), (0, 2), (1, 1), (1, 2)]
        best = max(value(picks) for picks in itertools.product(actions, repeat=rows))
        assert value(chooser._choose_rows(tables, theta)) == pytest.approx(best)


def test_a_policy_priced_by_another_cost_model_than_its_own_says_so(policy_file):
    """Fitted for the toy model at B = 1 and 8: its choices weigh the toy's prices. Simulated
    under the paper's fit, a note says so, and so does one under a model named "toy" with other
    coefficients; under its own, nothing is said. At B = 32 it decides by B = 8's rule, said too."""
    from dataclasses import replace

    from specscope.costmodel.registry import resolve_cost_model
    from specscope.sim.policies import learned_notes

    learned = f"learned:{policy_file}"
    assert learned_notes([learned, "fixed:3"], COST, [1, 8]) == []
    (note,) = learned_notes([learned], resolve_cost_model("h100-llama3.1-8b"), [1])
    assert note == (f"{learned}: fitted for cost model 'toy', whose prices its choices weigh; its steps are priced "
                    "here by 'h100-llama3.1-8b'")
    (note,) = learned_notes([learned], replace(COST, c_fixed=2 * COST.c_fixed), [8])
    assert "fitted for cost model 'toy' (other coefficients than the one of that name here)" in note
    (note,) = learned_notes([learned], COST, [1, 32])
    assert note == f"{learned} was fitted at batch sizes 1, 8: at B=32 it decides by B=8's rule"
    from specscope.costmodel.base import LinearDrafting

    # the policy's own work, which a study adds to its cost model once the policy is fitted: no other prices
    with_work = replace(COST, drafting={**COST.drafting, "learned": LinearDrafting(1e-4, 0.0, 0.0)})
    assert learned_notes([learned], with_work, [1, 8]) == []

def test_leave_one_out_says_where_the_held_out_policy_cannot_reach_its_datasets_depth(tmp_path):
    """Training traced to k_max 2, the held-out dataset to 8: its policy proposes at most 2, and the
    judgement says so (the best fixed k and the oracles there go deeper); a fold whose policy learned
    from fewer than 200 steps is said to."""
    from specscope.sim.evaluate import leave_one_out

    notes: list[str] = []
    shallow = [r.capped(2) for r in workload(1, count=6, g=40)]
    leave_one_out(workload(0, count=6, g=40) + shallow, ("ngram", "eagle"), [COST],
                  SimConfig(mode="paper", batch_sizes=(1,)), tmp_path, notes=notes)
    assert [n for n in notes if "proposes at most" in n] == [
        "held out 'w0': its policy proposes at most k = 2 (as deep as its training traces, w1, tell, at most 20), "
        "where 'w0' was traced to k = 8: the best fixed k and the oracles there may go deeper than it can"]
    notes.clear()  # a deep and a shallow training dataset: each walked within its own depth, the policy as deep as
    third = [replace(r, dataset="w2") for r in workload(1, count=6, g=40)]  # the deep one tells (acc_len ≤ 7 there)
    leave_one_out(workload(0, count=6, g=40) + shallow + third, ("ngram", "eagle"), [COST],
                  SimConfig(mode="paper", batch_sizes=(1,)), tmp_path, notes=notes)
    assert [n for n in notes if "proposes at most" in n] == [
        f"held out '{held}': its policy proposes at most k = 6 (as deep as its training traces, {others}, tell, at "
        f"most 20), where '{held}' was traced to k = 8: the best fixed k and the oracles there may go deeper than it "
        "can" for held, others in (("w0", "w1+w2"), ("w2", "w0+w1"))]
    notes.clear()  # traced to the same depth, but w1's steps never accepted more than 6 drafts: its fit stops there
    leave_one_out(workload(0, count=6, g=40) + workload(1, count=6, g=40), ("ngram", "eagle"), [COST],
                  SimConfig(mode="paper", batch_sizes=(1,)), tmp_path, notes=notes)
    assert {max(int(r.acc_len(m).max()) for r in workload(w, count=6, g=40) for m in ("ngram", "eagle"))
            for w in (0, 1)} == {7}
    deeper = ("held out '{}': its policy proposes at most k = 6 (as deep as its training traces, {}, tell, at most "
              "20), where '{}' was traced to k = 8: the best fixed k and the oracles there may go deeper than it can")
    assert notes == ["no admission gate for a policy fitted on one dataset: nothing tells how a gate carries to "
                     "another workload (fit on two or more to weigh one, or keep it in sample: --gate fitted)",
                     "held out 'w0': its policy learned from 101 steps of 6 requests of w1, too few to weigh 27 features",
                     deeper.format("w0", "w1", "w0"),
                     "held out 'w1': its policy learned from 92 steps of 6 requests of w0, too few to weigh 27 features",
                     deeper.format("w1", "w0", "w1")]
    # (the few steps: as `policy fit` warns below 200 steps, these folds' judgements are of little weight; the
    # steps of one walk of each record, at most its 39 decoding positions — the fit's second round walks them again)


def test_a_policy_deeper_than_a_datasets_traces_walks_each_within_its_own_depth():
    """Dataset 'a' traced to k_max 2, where EAGLE accepts both drafts at every step (acc_len 3: its
    third draft never judged), dataset 'b' to 6, where it accepts all six (acc_len 7). Fitted with
    --max-k 6: the policy reaches 6, and 'a' counts for draft tokens 1 and 2 only — read past its
    depth, its acc_len 3 would be a rejection of the third token at every step. Without --max-k
    the policy stops at 'a''s depth, where it replays both."""
    from specscope.sim.fit import fit_policy

    def traced(dataset: str, k_max: int, acc: int) -> list:
        return [replace(record([1] * 30, [acc] * 30, rid=f"{dataset}{i}", dataset=dataset), k_max=k_max)
                for i in range(4)]

    records = traced("a", 2, 3) + traced("b", 6, 7)
    document = fit_policy(records, ("ngram", "eagle"), COST, [1], max_k=6)
    assert len(document["intercept"][1]) == 6
    assert min(document["base_rate"][1]) > 0.9  # every judged EAGLE draft accepted, at every depth
    assert len(fit_policy(records, ("ngram", "eagle"), COST, [1])["intercept"][1]) == 2


def test_a_switching_policy_goes_no_deeper_than_its_shallowest_proposer_was_traced():
    """Records without k_max: the depth a trace can tell is each proposer's own largest acc_len − 1,
    and a policy switching between two reaches no deeper than the shallower (here EAGLE's 2),
    however far n-gram's acc_len reaches."""
    from dataclasses import replace

    from specscope.sim.plan import switch_k_max, traced_k_max

    records = [replace(record([7, 1, 1, 7, 1, 1], [3, 2, 1, 3, 2, 1], rid=f"r{i}"), k_max=None) for i in range(2)]
    assert traced_k_max(records, ["ngram"]) == 6 and switch_k_max(records, ["ngram", "eagle"]) == 2
    from specscope.sim.fit import fit_policy

    assert np.asarray(fit_policy(records, ("ngram", "eagle"), COST, [1])["intercept"]).shape[1] == 2  # nor its fit


def test_explain_names_a_later_record_that_lacks_a_method(policy_file, tmp_path, capsys):
    """`explain --traces` checks every record (a second one without n-gram was a KeyError)."""
    from dataclasses import replace

    from specscope.cli import main
    from specscope.trace.load import write_traces

    first, second = workload(1)[:2]
    write_traces(tmp_path / "t.jsonl", [first, replace(second, proposers={"eagle": second.proposers["eagle"]})])
    assert main(["policy", "explain", str(policy_file), "--traces", str(tmp_path / "t.jsonl")]) == 2
    assert "record '1-1' of dataset 'w1' has no 'ngram' trace (the policy chooses between ngram, eagle)" in \
        capsys.readouterr().err


def test_a_policy_over_three_proposers_has_no_ceiling():
    from specscope.sim.evaluate import no_gap_reason

    assert no_gap_reason({"best_fixed_speedup": 1.5, "oracle_ngram": 2.0, "oracle_eagle": 2.1,
                          "oracle_eagle3": 1.9}) == "no ceiling"
    assert no_gap_reason({"best_fixed_speedup": 1.5, "oracle_eagle": 1.505}) == "no gap"  # one method: its oracle
    assert no_gap_reason({"best_fixed_speedup": 1.5, "oracle_switch": 1.4}) == "below"
    assert no_gap_reason({"best_fixed_speedup": 1.5, "oracle_switch": 1.505}) == "no gap"


def test_fit_reads_every_array_whole_and_says_what_its_walk_replays(tmp_path, capsys):
    """A third proposer the policy does not choose between cuts nothing (its shorter arrays once cut
    every record under `fit`), and the note says the walk keeps to the --acc proposers' positions."""
    from dataclasses import replace

    from specscope.cli import main
    from specscope.sim.fit import fit_policy
    from specscope.trace import ProposerTrace
    from specscope.trace.load import write_traces

    records = [replace(r, proposers={**r.proposers, "suffix": ProposerTrace(np.ones(10, dtype=np.int32))})
               for r in workload(0, count=8, g=40)]
    write_traces(tmp_path / "t.jsonl", records)
    assert main(["policy", "fit", str(tmp_path / "t.jsonl"), "--batch-sizes", "1", "-o", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err
    assert "the walk replays the positions the output and the acc_len arrays of ngram, eagle cover: " \
           "320 of 320 output positions (100.0%)" in err  # suffix's 10 of each 40 cut none of them
    fitted = json.loads((tmp_path / "p.json").read_text())["training"]["steps"]
    assert fitted == fit_policy(workload(0, count=8, g=40), ("ngram", "eagle"), COST, [1])["training"]["steps"]


def test_a_policy_file_whose_path_holds_a_comma_is_simulated_whole(policy_file, tmp_path, capsys):
    """--policies splits on commas: a part naming no policy belongs to the learned:FILE before it."""
    import shutil

    from specscope.cli import main
    from specscope.cli.simulate import policy_list
    from specscope.trace.load import write_traces

    assert policy_list("fixed:1,learned:a,b.json,oracle") == ["fixed:1", "learned:a,b.json", "oracle"]
    assert policy_list("learned:a.json,fixed:2") == ["learned:a.json", "fixed:2"]
    path = tmp_path / "runs,1" / "p.json"
    path.parent.mkdir()
    shutil.copy(policy_file, path)
    write_traces(tmp_path / "t.jsonl", workload(0, count=4, g=40))
    assert main(["simulate", str(tmp_path / "t.jsonl"), "--acc", "ngram,eagle", "--policies", f"fixed:1,learned:{path}",
                 "--batch-sizes", "1", "--cost-model", "h100-llama3.1-8b", "--format", "json"]) == 0
    assert {row["policy"] for row in json.loads(capsys.readouterr().out)} >= {"fixed:1", f"learned:{path}"}


def test_the_evaluate_verdict_counts_cells_and_pools_the_gap_closed():
    """Cells at or above the best fixed k: 1 of 3. The gap closed pooled over the two cells with
    a gap: (0.1 − 0.05) / (0.5 + 2.0) = 2.0 %, where the cells' own are 20 % and −2.5 % (median
    8.75 %); the third cell's gap (0.005 over 1.0) is under the guard and counts nowhere."""
    from specscope.cli.policy import _verdict

    def line(best, learned, switch, gap):
        return {"best_fixed_speedup": best, "learned": learned, "oracle_switch": switch, "gap_closed": gap}

    lines = [line(2.0, 2.1, 2.5, 0.2), line(1.0, 0.9, 1.005, float("nan")), line(1.5, 1.45, 3.5, -0.025)]
    assert _verdict("cm", lines) == ("cm: learned at or above the best fixed k in 1 of 3 cells; 2.0 % of the gap to "
                                     "oracle-switch closed, pooled over the 2 cells that have one (median of the "
                                     "cells' own: 8.8 %)")


def test_evaluate_writes_its_rows_to_stdout_and_its_table_and_verdict_to_stderr(tmp_path, capsys):
    """With -o - stdout holds the rows alone (CSV, the yardstick and its rule among the columns);
    the printed table, the folds and the verdict go to stderr instead of nowhere."""
    import csv
    import io

    from specscope.cli import main
    from specscope.trace.load import write_traces

    for seed in (0, 1):  # each request its own output tokens (the same ones in two datasets would be refused)
        own = [replace(r, output_token_ids=r.output_token_ids + 100 * i + 1000 * seed)
               for i, r in enumerate(workload(seed, count=6, g=40))]
        write_traces(tmp_path / f"w{seed}.jsonl", own)
    assert main(["policy", "evaluate", str(tmp_path / "w0.jsonl"), str(tmp_path / "w1.jsonl"), "--batch-sizes", "1",
                 "-o", "-"]) == 0
    streams = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(streams.out)))
    assert [r["dataset"] for r in rows] == ["w0", "w1"] and all(r["lookup_known_rule"] for r in rows)
    assert all(float(r["lookup_known"]) >= float(r["best_fixed_speedup"]) for r in rows)
    assert "leave one dataset out" in streams.err and "learned at or above the best fixed k in" in streams.err
    assert "evaluate: held out 'w0' under h100-llama3.1-8b (1 of 2): " in streams.err  # each fold as it ends


def test_a_policy_fitted_on_datasets_of_two_depths_proposes_no_deeper_than_the_shallower():
    """Its default depth is what every dataset was traced to, so it replays on each of the traces
    it was fitted on (fitted at the deeper one's depth, `simulate` refused it on the other)."""
    from specscope.sim.fit import fit_policy

    shallow = [replace(r, k_max=None) for r in (r.capped(1) for r in workload(1, count=6, g=40))]  # depth 1
    deep = [replace(r, k_max=None) for r in workload(0, count=6, g=40)]  # n-gram's 6, EAGLE's 2
    document = fit_policy(deep + shallow, ("ngram", "eagle"), COST, (1,))
    assert np.asarray(document["intercept"]).shape[1] == 1


def test_fit_says_which_dataset_caps_its_depth_and_why_it_weighed_no_confidence(tmp_path, capsys):
    """A dataset traced to k_max 2 beside one traced to 6, EAGLE's draft_prob kept 2 drafts deep in
    the deeper one: the policy proposes at most 2 and says so, naming that dataset (it said
    nothing); fitted to 6, it says why it weighed no confidence rule (it dropped it unsaid); the
    file and explain name the cost model's file."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    own = [replace(r, output_token_ids=r.output_token_ids + 100 * i + 7) for i, r in enumerate(workload(1, count=6, g=40))]
    write_traces(tmp_path / "shallow.jsonl", told([r.capped(2) for r in own], depth=2))
    write_traces(tmp_path / "deep.jsonl", told(workload(0, count=6, g=40), depth=2))
    (tmp_path / "cm.json").write_text(json.dumps({**COST.describe(), "name": "h100-llama3.1-8b"}))
    traces = [str(tmp_path / "deep.jsonl"), str(tmp_path / "shallow.jsonl"), "--batch-sizes", "1",
              "--cost-model", str(tmp_path / "cm.json")]
    assert main(["policy", "fit", *traces, "-o", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err
    assert "the policy proposes at most k = 2, as deep as the traces of dataset 'w1' reach" in err
    assert "where 'w0' reaches 8" in err
    assert main(["policy", "fit", *traces, "--max-k", "6", "-o", str(tmp_path / "p6.json")]) == 0
    err = capsys.readouterr().err
    assert "no confidence rule weighed: eagle's draft_prob is kept 2 drafts deep in some records of dataset 'w0'" in err
    assert json.loads((tmp_path / "p6.json").read_text())["training"]["cost_model"] == \
        f"h100-llama3.1-8b (from {tmp_path / 'cm.json'})"
    assert main(["policy", "explain", str(tmp_path / "p6.json")]) == 0
    assert f"fitted for cost model 'h100-llama3.1-8b (from {tmp_path / 'cm.json'})'" in capsys.readouterr().out


def test_an_engine_running_a_policy_is_told_what_it_was_fitted_for(policy_file):
    """bench --policy and serve --policy said nothing where simulate notes a policy fitted for
    other prices and other batch sizes."""
    from specscope.policy.learned import load_policy, policy_notes

    policy = load_policy(policy_file)
    bench = policy_notes(policy, [1, 16])
    assert len(bench) == 2 and "weigh the prices of cost model 'toy'" in bench[0]
    assert bench[1].endswith("was fitted at batch sizes 1, 8: at B=16 it decides by B=8's rule")
    served = policy_notes(policy, None)
    assert served[1].endswith("was fitted at batch sizes 1, 8: an iteration of other rows decides by the nearest one's rule")


def test_the_policy_choices_walk_one_request_of_each_dataset(tmp_path):
    """All three walks the report drew were of one dataset (the median-length requests overall)."""
    from specscope.report.policy import _examples

    two = workload(0, count=5, g=40) + workload(1, count=5, g=40)
    assert [r.dataset for r in _examples(two)] == ["w0", "w1"]
    assert len(_examples(workload(0, count=5, g=40))) == 3  # one dataset: three of it


def test_a_fold_that_cannot_be_fitted_is_named(tmp_path):
    """`policy evaluate` said only "policy fit: no step to learn from in 5 records", naming neither
    the verb's fold nor the dataset held out."""
    from specscope.sim.evaluate import leave_one_out

    one_token = [replace(r, dataset="tiny") for r in (record([2], [2], rid=f"t{i}") for i in range(3))]
    with pytest.raises(SpecscopeError, match=r"held out 'w0', fitting on tiny: policy fit: no step to learn from"):
        leave_one_out(workload(0, count=4, g=40) + one_token, ("ngram", "eagle"), [COST],
                      SimConfig(mode="paper", batch_sizes=(1,)), tmp_path)


def test_the_cost_model_a_policy_was_fitted_for_is_read_as_any_cost_model_describes_itself():
    """A policy fitted for a roofline or a linear model carries its describe() form, which loads."""
    from specscope.costmodel.registry import resolve_cost_model
    from specscope.policy.learned import _fitted_for

    for name in ("roofline:h100:llama3.1-8b:llama3.2-1b", "roofline:a100:llama3.1-8b", "h100-llama3.1-8b"):
        _fitted_for(resolve_cost_model(name).describe())


def test_a_policy_is_no_deeper_than_the_positions_its_walks_replay(tmp_path):
    """A review: records without k_max whose EAGLE arrays run past the output (as the paper's
    traces hold) and reach acc_len 7 only there — the fit took depth 6 from the whole arrays, and
    `report --policy` on the very traces it was fitted on refused it (its judgement replays the
    positions output and arrays share, traced there to 4). The fit's depth is read from those
    positions."""
    from specscope.cli import main
    from specscope.sim.fit import fit_policy
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace

    records = []
    for r in workload(0, count=6, g=40):
        eagle = np.concatenate([r.acc_len("eagle"), [7, 1]])  # two positions past the output
        records.append(replace(r, k_max=None, proposers={**r.proposers, "eagle": ProposerTrace(eagle.astype(np.int32))}))
    within = min(int(r.acc_len(m)[: r.output_len].max()) - 1 for r in records for m in ("eagle",))
    document = fit_policy(records, ("ngram", "eagle"), COST, [1])
    assert np.asarray(document["intercept"]).shape[1] <= within < 6
    traces, policy = tmp_path / "t.jsonl", tmp_path / "p.json"
    write_traces(traces, records)
    policy.write_text(json.dumps(document))
    assert main(["report", str(traces), "--policy", str(policy), "--batch-sizes", "1", "--cost-model", "h100-llama3.1-8b",
                 "-o", str(tmp_path / "r")]) == 0
    # the page shows the policy's own speedups (only policy.csv held them), saying which positions they replay
    import csv
    (line,) = csv.DictReader((tmp_path / "r" / "policy.csv").open())
    page = (tmp_path / "r" / "index.html").read_text()
    assert "The learned policy judged (speedups; replayed on the positions its output and all its proposers" in page
    assert f"{float(line['learned']):.3f}" in page and f"{float(line['oracle_switch']):.3f}" in page
    # adaptive's speedup is its better proposer's, named beside it (policy.csv's adaptive_acc; the page dropped it)
    assert "<th>adaptive&#x27;s proposer</th>" in page and f'<td class=text>{line["adaptive_acc"]}</td>' in page
    # at the default batch sizes those above the 6 requests are left out: no note on the rule the policy takes there
    assert main(["report", str(traces), "--policy", str(policy), "--cost-model", "h100-llama3.1-8b",
                 "-o", str(tmp_path / "d")]) == 0
    page = (tmp_path / "d" / "index.html").read_text()
    assert "batch sizes 1 (8, 16, 32, 64, 128 left out" in page and "it decides by" not in page
    # a file calling itself by a preset's name is named as read, in the policy's caption too (a review)
    from specscope.costmodel.registry import resolve_cost_model

    named = tmp_path / "cm.json"
    named.write_text(json.dumps(resolve_cost_model("h100-llama3.1-8b").describe()))
    assert main(["report", str(traces), "--policy", str(policy), "--batch-sizes", "1", "--cost-model", str(named),
                 "-o", str(tmp_path / "f")]) == 0
    page = (tmp_path / "f" / "index.html").read_text()
    assert f"judged here under h100-llama3.1-8b (from {named})" in page


def test_simulate_notes_the_rule_only_at_batch_sizes_it_simulated(tmp_path, capsys):
    """A review: at the default batch sizes a 6-request dataset leaves out 8 … 128, yet simulate
    said which fitted rule the policy takes at B = 16, 32 and 128 (the report already did not)."""
    from specscope.cli import main
    from specscope.sim.fit import fit_policy
    from specscope.trace.load import write_traces

    records = workload(0, count=6, g=40)
    traces, policy = tmp_path / "t.jsonl", tmp_path / "p.json"
    write_traces(traces, records)
    policy.write_text(json.dumps(fit_policy(records, ("ngram", "eagle"), COST, [1, 8])))
    assert main(["simulate", str(traces), "--acc", "eagle", "--policies", f"learned:{policy}", "-o", "-"]) == 0
    err = capsys.readouterr().err
    assert "fitted for cost model 'toy'" in err and "it decides by" not in err  # B = 1 alone ran


def test_the_choices_figure_walks_as_deep_as_the_judged_table(tmp_path):
    """A review: the report's example walks took their depth from the examples' own acc_len (12 where
    the dataset reaches 13), capping the offers and k below the policy the table judges."""
    from specscope.report.policy import policy_section
    from specscope.sim.fit import fit_policy
    from specscope.sim.grid import SimConfig
    from specscope.sim.switching import causal_plan
    from specscope.trace.schema import ProposerTrace

    records = [replace(r, proposers={m: ProposerTrace(np.minimum(t.acc_len, 3)) for m, t in r.proposers.items()})
               for r in workload(0, count=6, g=40)]  # the examples (from the median up) reach k 2 alone
    records[0] = replace(records[0], proposers={m: ProposerTrace(np.full(40, 7, dtype=np.int32))
                                                for m in ("ngram", "eagle")})  # the dataset: k 6
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps(fit_policy(records, ("ngram", "eagle"), COST, [1], max_k=6)))
    _, choices = policy_section(records, str(policy), COST, SimConfig(batch_sizes=(1,)))
    from specscope.policy.learned import load_policy

    loaded = load_policy(policy)
    for walk in choices:
        (record,) = [r.capped(loaded.depth) for r in records if r.id == walk.request]
        plan = causal_plan([record], loaded.methods, loaded.decide_for, loaded.depth, 1)
        assert walk.pos.tolist() == plan.pos.tolist() and walk.k.tolist() == plan.proposed.tolist()


def test_the_reports_policy_table_takes_a_policy_of_one_proposer_and_says_why_no_gap(tmp_path):
    """A review: `report --policy` raised KeyError 'oracle_switch' for a policy fitted over one
    proposer (or three) — after writing every figure and table but the page — and printed "nan %"
    where the gap closed is undefined. A one-proposer policy is judged against that proposer's
    oracle; a policy whose ceiling is the best fixed k says "no gap", as `policy evaluate` does."""
    from specscope.cli import main
    from specscope.sim.fit import fit_policy
    from specscope.trace.load import write_traces

    traces = tmp_path / "t.jsonl"
    write_traces(traces, workload(0, count=6, g=40))
    for methods, name in ((("eagle",), "one"), (("ngram", "eagle"), "two")):
        policy = tmp_path / f"{name}.json"
        policy.write_text(json.dumps(fit_policy(workload(1, count=6, g=40), methods, COST, [1])))
        assert main(["report", str(traces), "--policy", str(policy), "--batch-sizes", "1", "--cost-model",
                     "h100-llama3.1-8b", "-o", str(tmp_path / name)]) == 0
        page = (tmp_path / name / "index.html").read_text()
        assert "nan %" not in page and "The learned policy judged" in page
    assert "the ceiling (oracle eagle)" in (tmp_path / "one" / "index.html").read_text()
    everything = [record([1] * 40, [7] * 40, rid=f"a{i}", offer=[0] * 40) for i in range(4)]  # eagle k = 6: the ceiling
    write_traces(traces, everything)
    policy = tmp_path / "all.json"
    policy.write_text(json.dumps(fit_policy(everything, ("ngram", "eagle"), COST, [1])))
    assert main(["report", str(traces), "--policy", str(policy), "--batch-sizes", "1", "--cost-model",
                 "h100-llama3.1-8b", "-o", str(tmp_path / "all")]) == 0
    assert "no gap" in (tmp_path / "all" / "index.html").read_text()


def model_dir(path, name: str):
    """A folder a fingerprint reads (config.json alone), told apart by ``name``."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"name": name}))
    return path


def test_a_policy_says_where_its_traces_came_from_another_model(tmp_path, capsys):
    """A policy fitted on traces of another target or drafter ran with no note: its file kept only
    the traces' names. It keeps what their settings say traced them; an engine of another target
    or drafter is told, and so is one whose policy's traces say nothing, or whose file predates it."""
    from specscope.cli import main
    from specscope.engine.config import model_fingerprint
    from specscope.policy.learned import checkpoint_notes
    from specscope.trace.load import write_traces

    target, head = model_dir(tmp_path / "target", "t"), model_dir(tmp_path / "eagle", "e")
    other = model_dir(tmp_path / "other", "o")
    write_traces(tmp_path / "t.jsonl", workload(0, count=4, g=40))
    (tmp_path / "t.jsonl.settings.json").write_text(json.dumps({
        "model": str(target), "model_files": model_fingerprint(target), "workload": "w", "k_max": 8,
        "proposers": ["ngram", f"eagle={head} {model_fingerprint(head)}"]}))
    write_traces(tmp_path / "bare.jsonl", workload(1, count=4, g=40))
    for traces in ("t", "bare"):
        assert main(["policy", "fit", str(tmp_path / f"{traces}.jsonl"), "--batch-sizes", "1", "-o",
                     str(tmp_path / f"{traces}.json")]) == 0
    policy = load_policy(tmp_path / "t.json")
    assert policy.document["training"]["checkpoints"] == [{"model": model_fingerprint(target),
                                                          "eagle": model_fingerprint(head)}]
    assert checkpoint_notes(policy, target, head, model_fingerprint) == []
    [note] = checkpoint_notes(policy, other, head, model_fingerprint)
    assert f"fitted on traces of another target model ({tmp_path / 't.jsonl'}: " \
           f"{model_fingerprint(target)[:12]}; this engine's {other}: {model_fingerprint(other)[:12]})" in note
    [note] = checkpoint_notes(policy, target, other, model_fingerprint)
    assert "fitted on traces of another eagle checkpoint" in note
    [note] = checkpoint_notes(load_policy(tmp_path / "bare.json"), target, head, model_fingerprint)
    assert f"fitted on traces that do not say which model produced them ({tmp_path / 'bare.jsonl'})" in note
    document = json.loads((tmp_path / "t.json").read_text())
    del document["training"]["checkpoints"]  # a file fitted before they were kept: loads, with a note
    (tmp_path / "old.json").write_text(json.dumps(document))
    [note] = checkpoint_notes(load_policy(tmp_path / "old.json"), target, head, model_fingerprint)
    assert "its file does not record which model produced its traces" in note
    document["training"]["checkpoints"] = {"model": "x"}
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(SpecscopeError, match="training.checkpoints: expected one object per source"):
        load_policy(tmp_path / "bad.json")


def test_a_policy_over_a_method_the_engine_does_not_run_is_refused_naming_its_file(policy_file, tmp_path, capsys):
    """A policy over suffix (a lookup `policy fit --acc` replays, the reference engine does not
    run) was refused only once the target had loaded, naming --method, a flag never given."""
    from specscope.cli import main

    document = json.loads(policy_file.read_text())
    document.update(methods=["suffix", "eagle"], features=feature_names(("suffix", "eagle")))
    path = tmp_path / "p_suffix.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SpecscopeError, match=r"p_suffix.json: field 'methods': suffix is not run by the reference "
                                             r"engine \(it runs ngram, draft, eagle, eagle3, mtp\)"):
        load_policy(path).drafter(tmp_path)
    workload_file = tmp_path / "w.jsonl"
    workload_file.write_text(json.dumps({"id": "a", "prompt_token_ids": [1, 2]}) + "\n")
    assert main(["bench", "--model", str(tmp_path / "no-model"), "--draft", str(tmp_path), "--policy", str(path),
                 "--workload", str(workload_file), "--batch-sizes", "1", "--max-tokens", "4"]) == 2
    assert "p_suffix.json: field 'methods': suffix is not run by the reference engine" in capsys.readouterr().err


def test_fit_says_when_no_step_accepted_a_draft_deep_enough(tmp_path, capsys):
    """Traces where n-gram never matches (acc_len 1, draft_len 0 throughout), traced to 6: the
    policy proposes k = 1, and fit blamed the dataset's depth ("as deep as the traces of dataset
    'nomatch' reach …, where 'nomatch' reaches 6"); it names the real cap, the drafts accepted."""
    from specscope.cli import main
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [replace(record([1] * 30, [1] * 30, rid=f"n{i}", offer=[0] * 30,
                                                       dataset="nomatch"), k_max=6) for i in range(4)])
    assert main(["policy", "fit", str(tmp_path / "t.jsonl"), "--acc", "ngram", "--batch-sizes", "1",
                 "-o", str(tmp_path / "p.json")]) == 0
    err = capsys.readouterr().err
    assert "note: the policy proposes at most k = 1: no step of the traces accepted any draft of ngram" in err
    assert "as deep as the traces" not in err and "reaches 6" not in err
