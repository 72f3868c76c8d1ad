"""A learned policy in the engine (:mod:`specscope.proposers.switching`): it switches between
n-gram, an EAGLE head and no drafting per step and sequence; greedy output stays the target's,
and the head, skipped for some steps, catches up: every draft it makes equals the drafts
recomputed from scratch."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from test_heads import (  # noqa: E402, F401  (the heads' tiny target and its fixtures, repeat heads, recomputation)
    K,
    MAX_SEQ_LEN,
    make_repeat_head,
    one_thread,
    prompts_of,
    reference_drafts,
    target,
    target_dir,
    write_head,
)
from tiny_checkpoints import write_workload  # noqa: E402

from specscope.assemble import build_proposer, load_engine  # noqa: E402
from specscope.cli import main  # noqa: E402
from specscope.engine.proposer_api import ProposerConfig  # noqa: E402
from specscope.engine.runner import Engine, SamplingParams  # noqa: E402
from specscope.errors import SpecscopeError  # noqa: E402
from specscope.policy.features import feature_names  # noqa: E402
from specscope.policy.learned import SCHEMA, load_policy, stamp  # noqa: E402
from specscope.policy.observation import NONE, OverlapCounter, prompt_overlap  # noqa: E402
from specscope.proposers.ngram import lookup  # noqa: E402
from specscope.serve.server import create_server  # noqa: E402

METHODS = ("ngram", "eagle")


def random_policy(path: Path, seed: int, methods: tuple[str, str] = METHODS) -> Path:
    """A policy file with random acceptance weights: its choices mix n-gram, the model drafter
    (EAGLE unless ``methods`` says otherwise), none and k."""
    rng = np.random.default_rng(seed)
    width = len(feature_names(methods))
    document = {
        "schema": SCHEMA, "methods": list(methods), "features": feature_names(methods),
        "mean": [0.0] * width, "scale": [1.0] * width,
        "coef": rng.normal(0, 1.0, (2, width)).tolist(), "intercept": rng.normal(0, 1.0, (2, K)).tolist(),
        "base_rate": rng.uniform(0.2, 0.8, (2, K)).tolist(), "span": [[-50.0, 50.0]] * 2,
        "pads": True, "cost_model": {"kind": "linear", "name": "random", "forward": {"c_fixed": 0.01, "c_tok": 0.0,
                                                                                      "c_kv": 0.0}}, "batch_sizes": [1, 4],
        "training": {"sources": ["random"]},
        "models": [{"batch_size": b, "seconds": [[1.0, 1.1, 1.2, 1.3], [1.0, 1.05, 1.1, 1.15]],
                    "fixed": [[0.0] * 4, [0.0, 0.1, 0.2, 0.3]], "verify": [0.5, 0.55, 0.6, 0.65]}
                   for b in (1, 4)],
    }
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, target_dir, target):
    root = tmp_path_factory.mktemp("switching")
    head_dir = make_repeat_head("eagle", write_head("eagle", target_dir, root / "eagle", seed=5), target_dir, mix=0.3)
    return target, head_dir, random_policy(root / "policy.json", seed=3), target_dir


def run(engine: Engine, prompts: list[list[int]], max_tokens: int, sampling: SamplingParams | None = None):
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, max_tokens, sampling or SamplingParams(), ignore_eos=True)
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    return [outputs[str(i)] for i in range(len(prompts))]


def run_queued(engine: Engine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy outputs of ``prompts`` admitted in order as the engine's slots free up."""
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    waiting = iter(enumerate(prompts))
    while True:
        while engine.num_running() < engine.max_batch_size and (item := next(waiting, None)) is not None:
            engine.add_request(str(item[0]), item[1], max_tokens, SamplingParams(), ignore_eos=True)
        if not engine.num_running():
            return [outputs[str(i)] for i in range(len(prompts))]
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids


def switching_engine(target, head_dir: Path, policy_path: Path, batch: int) -> Engine:
    policy = load_policy(policy_path)
    config = ProposerConfig("eagle", policy.depth, batch, Engine.cache_capacity(MAX_SEQ_LEN, policy.depth), head_dir)
    return Engine(target, build_proposer(target, "eagle", config, policy), policy.depth, batch, MAX_SEQ_LEN)


def test_greedy_output_is_the_targets_and_the_head_catches_up(setup):
    target, head_dir, policy_path, _ = setup
    # repeated stretches give n-gram matches; random stretches give none
    prompts = [p * 3 for p in prompts_of((4, 5, 3, 6), seed=2)]
    plain = run(Engine(target, None, K, len(prompts), MAX_SEQ_LEN), prompts, 24)
    engine = switching_engine(target, head_dir, policy_path, len(prompts))
    switching = engine.proposer
    head = switching.members[METHODS.index("eagle")]
    calls, chosen, propose, choose = [], [], head.propose, switching.propose

    def recording_head(request):
        proposal = propose(request)
        calls.append(([list(h) for h in request.histories], proposal.tokens.tolist()))
        return proposal

    def recording_choice(request):
        proposal = choose(request)
        steps = [switching._sequences[slot].step for slot in request.slots]
        chosen.append({slot: step[0] for slot, step in zip(request.slots, steps)})
        assert proposal.draft_len.tolist() == [step[1] for step in steps]  # each row proposes the k it chose
        assert proposal.tokens.shape[1] >= max(step[1] for step in steps)
        return proposal

    head.propose, switching.propose = recording_head, recording_choice
    assert run(engine, prompts, 24) == plain
    methods = [m for step in chosen for m in step.values()]
    assert {-1, 0, 1} <= set(methods), "the policy should choose none, n-gram and EAGLE"
    skipped = any(step_a.get(s) != 1 and step_b.get(s) == 1 for step_a, step_b in zip(chosen, chosen[1:])
                  for s in step_b)
    assert skipped, "some EAGLE step must follow a step without the head (a catch-up)"
    assert any(set(step.values()) == {1} for step in chosen), "some step drafts every row with the head alone"
    assert any(len(set(step.values())) > 1 for step in chosen), "some step merges rows of different proposers"
    assert calls
    for histories, drafts in calls:  # every draft the head made, after any catch-up, is exact
        for history, row in zip(histories, drafts):
            assert row == reference_drafts(head.head, target, history)[: len(row)]


def every_pass_read(monkeypatch) -> list:
    """The probabilities of its drafts each pass of a model drafter reads, in order ([batch] a
    pass; a proposal's passes: clear the list before it): the engine's rule stops rows at them,
    while the proposal returns the first draft's alone (the policy's feature)."""
    import specscope.engine.proposer_api as api

    read, probability = [], api.token_probability

    def recording(logits, tokens):
        read.append(probability(logits, tokens))
        return read[-1]

    monkeypatch.setattr(api, "token_probability", recording)
    return read


def test_a_policy_that_stops_its_drafter_at_its_confidence_stays_lossless(setup, tmp_path, monkeypatch):
    """A policy file whose models say confidence p: every row that takes EAGLE proposes up to the
    policy's depth, ended at its first draft of probability below p (that one included), the head's
    passes at the deepest row; the step records and the policy's history say the k each row
    proposed. Greedy output stays the target's, and sampled requests run."""
    target, head_dir, _, _ = setup
    path = random_policy(tmp_path / "p.json", seed=3)
    document = json.loads(path.read_text())
    for model in document["models"]:
        model["confidence"] = 0.6
    path.write_text(json.dumps(document))
    assert load_policy(path).confidence_for(4) == 0.6
    prompts = [p * 3 for p in prompts_of((4, 5, 3, 6), seed=2)]
    plain = run(Engine(target, None, K, len(prompts), MAX_SEQ_LEN), prompts, 24)
    engine = switching_engine(target, head_dir, path, len(prompts))
    head = engine.proposer.members[METHODS.index("eagle")]
    seen, propose, read = [], head.propose, every_pass_read(monkeypatch)

    def recording_head(request):
        read.clear()
        proposal = propose(request)
        assert proposal.confidence.shape == (len(request.slots), 1)  # the first draft's: the policy's feature
        seen.append((request.k, request.stop_below, torch.stack(read, 1).tolist(), proposal.draft_len.tolist(),
                     proposal.tokens.shape[1]))
        return proposal

    head.propose = recording_head
    assert run(engine, prompts, 24) == plain
    assert seen and all(k == engine.k and p == 0.6 for k, p, *_ in seen)
    for k, p, confidence, lengths, passes in seen:
        for row, length in zip(confidence, lengths):
            below = [j for j, value in enumerate(row) if value < p]
            assert length == min(below[0] + 1 if below else k, k)
        assert passes == max(lengths)
    assert any(length < k for k, _, _, lengths, _ in seen for length in lengths), "some row stopped sooner"
    for r in engine.step_records:
        assert sum(c[1] for c in r.choices if c is not None) == r.tokens_proposed
    sampled = switching_engine(target, head_dir, path, 2)
    assert [len(o) for o in run(sampled, prompts_of((5, 7), seed=3), 12, SamplingParams(temperature=0.8, seed=4))] \
        == [12, 12]


def test_step_records_tell_the_policys_own_work_apart(setup):
    """``policy_s``: the switching proposer's time beyond its lookup and members, a part of every
    step's drafting; an engine without a policy records 0."""
    target, head_dir, policy_path, _ = setup
    prompts = [p * 3 for p in prompts_of((4, 5), seed=2)]
    engine = switching_engine(target, head_dir, policy_path, len(prompts))
    run(engine, prompts, 12)
    decode = [r for r in engine.step_records if r.tokens_verified]
    assert decode and all(0 < r.policy_s <= r.draft_s for r in decode)
    assert all(r.policy_rows == r.batch_size - r.prefill_requests for r in engine.step_records)  # no gate: all
    # Probe: every step was recorded "learned, k = depth", what each row took nowhere: now its choices
    for r in engine.step_records:
        assert len(r.choices) == r.batch_size and sum(c is None for c in r.choices) == r.prefill_requests
        assert sum(c[1] for c in r.choices if c is not None) == r.tokens_proposed  # what the rows proposed
        assert all(c is None or c[0] in ("none", "ngram", "eagle") for c in r.choices)
    plain = Engine(target, None, K, 2, MAX_SEQ_LEN)
    run(plain, prompts, 4)
    assert all(r.policy_s == 0.0 and r.choices is None and r.policy_rows is None for r in plain.step_records)


def test_sampled_requests_run(setup):
    target, head_dir, policy_path, _ = setup
    engine = switching_engine(target, head_dir, policy_path, 2)
    outputs = run(engine, prompts_of((5, 7), seed=3), 12, SamplingParams(temperature=0.8, seed=4))
    assert [len(o) for o in outputs] == [12, 12]


def test_one_model_drafter_and_its_checkpoint(setup, tmp_path):
    target, _, _, _ = setup
    document = json.loads(random_policy(tmp_path / "p.json", 0).read_text())
    config = ProposerConfig("eagle", K, 1, Engine.cache_capacity(MAX_SEQ_LEN, K), None)
    with pytest.raises(SpecscopeError, match="give its checkpoint with --draft"):
        build_proposer(target, "eagle", config, load_policy(tmp_path / "p.json"))
    document["methods"] = ["draft", "eagle"]
    document["features"] = feature_names(("draft", "eagle"))
    (tmp_path / "two.json").write_text(json.dumps(document))
    with pytest.raises(SpecscopeError, match="one model drafter"):
        build_proposer(target, "eagle", config, load_policy(tmp_path / "two.json"))
    target_dir = setup[3]  # a whole model where the policy's EAGLE head belongs: named as the policy's drafter
    wrong = ProposerConfig("eagle", K, 1, Engine.cache_capacity(MAX_SEQ_LEN, K), target_dir)
    with pytest.raises(SpecscopeError, match=rf"--draft {target_dir}: learned:p\.json \(ngram\+eagle\) drafts with "
                                             r"eagle, and the checkpoint does not load as one: "):
        build_proposer(target, "eagle", wrong, load_policy(tmp_path / "p.json"))


def test_overlap_counter_is_prompt_overlap_one_token_at_a_time():
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 4, 30)
    output = rng.integers(0, 4, 40)
    counter = OverlapCounter(prompt)
    expected = prompt_overlap(prompt, output)
    history = prompt.tolist() + output.tolist()
    assert [counter.value(history[: len(prompt) + i + 1]) for i in range(len(output))] \
        == pytest.approx(expected.tolist())


def test_bench_and_serve_run_the_policy(setup, tmp_path, capsys, monkeypatch):
    """``bench --policy``: rows labelled ``learned`` with the policy file and its methods, greedy
    output equal to no SD; ``serve --policy``: completions equal to the no-SD engine's."""
    target, head_dir, policy_path, target_dir = setup
    prompts = [p * 3 for p in prompts_of((4, 5, 3), seed=6)]
    workload = write_workload(tmp_path / "w.jsonl", [{"id": str(i), "prompt_token_ids": p} for i, p in enumerate(prompts)])
    assert main(["bench", "--model", str(target_dir), "--policy", str(policy_path), "--draft", str(head_dir),
                 "--workload", str(workload), "--batch-sizes", "1,3", "--max-tokens", "12", "--ignore-eos",
                 "--repeats", "1", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    assert "its file does not record which model produced its traces" in err  # checked against --model, --draft
    assert [(r["method"], r["k"], r["batch_size"]) for r in rows] == [("learned", K, 1), ("learned", K, 3)]
    assert all(r["greedy_match"] and r["policy"] == "learned:policy.json (ngram+eagle)" for r in rows)
    # rows name the content that ran: the file refitted (or removed) while it ran relabelled them (or lost them)
    import specscope.policy.learned as learned_module

    moved, loaded = tmp_path / "policy.json", learned_module.load_policy
    moved.write_bytes(policy_path.read_bytes())

    def load_then_remove(path):
        policy = loaded(path)
        Path(path).unlink()
        return policy

    monkeypatch.setattr(learned_module, "load_policy", load_then_remove)
    assert main(["bench", "--model", str(target_dir), "--policy", str(moved), "--draft", str(head_dir),
                 "--workload", str(workload), "--batch-sizes", "1", "--max-tokens", "6", "--repeats", "1",
                 "-o", str(tmp_path / "rows.json")]) == 0
    assert not moved.exists()
    assert json.loads((tmp_path / "rows.json").read_text())[0]["policy_sha256"] == stamp(policy_path.read_bytes())

    engine, _ = load_engine(target_dir, draft_dir=head_dir, policy=policy_path, max_batch_size=2, max_seq_len=64)
    plain = run(Engine(target, None, K, 2, 64), prompts[:2], 10)
    server = create_server(engine, None, "tiny", "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        parts = urllib.parse.urlsplit(server.url)
        for prompt, expected in zip(prompts[:2], plain):
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": True}),
                headers={"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            conn.close()
            assert answer["choices"][0]["token_ids"] == expected
    finally:
        server.shutdown()
        server.server_close()


def test_bench_beside_runs_the_policys_methods_chains_in_its_lockstep(setup, tmp_path, capsys):
    """``bench --policy --beside K``: per batch size the learned row, then a chain of K of each of
    the policy's methods run over the same requests in the same lockstep, all from the policy's
    repeat of median speedup, against its no-SD run, lossless, naming the policy it ran beside; a report reads the
    three as distinct cells."""
    from specscope.analysis.measured import read_bench_results

    target, head_dir, policy_path, target_dir = setup
    prompts = [p * 3 for p in prompts_of((4, 5, 3), seed=7)]
    workload = write_workload(tmp_path / "w.jsonl", [{"id": str(i), "prompt_token_ids": p} for i, p in enumerate(prompts)])
    out = tmp_path / "rows.json"
    assert main(["bench", "--model", str(target_dir), "--policy", str(policy_path), "--draft", str(head_dir),
                 "--workload", str(workload), "--batch-sizes", "1,3", "--max-tokens", "10", "--ignore-eos",
                 "--repeats", "3", "--beside", "2", "--records", str(tmp_path / "steps.jsonl"), "-o", str(out)]) == 0
    rows = json.loads(out.read_text())
    label = "learned:policy.json (ngram+eagle)"
    assert [(r["method"], r["k"], r["batch_size"], r.get("beside")) for r in rows] == [
        ("learned", K, 1, None), ("ngram", 2, 1, label), ("eagle", 2, 1, label),
        ("learned", K, 3, None), ("ngram", 2, 3, label), ("eagle", 2, 3, label)]
    assert all(r["greedy_match"] for r in rows)
    assert "policy" not in rows[1] and rows[1]["policy_sha256"] is None  # a chain, not the policy
    for row in rows:  # each row one of the three repeats, against the no-SD run beside it
        assert row["speedup"] == pytest.approx(row["throughput"] / row["baseline_throughput"])
    for b in (1, 3):  # one repeat per batch size, the policy's median: its rows share a no-SD run
        assert len({(r["baseline_throughput"], r["baseline_wall_s"]) for r in rows if r["batch_size"] == b}) == 1
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert {(s["method"], s["k"]) for s in steps if s["tokens_verified"] and s["method"] != "none"} >= {
        ("ngram", 2), ("eagle", 2)}
    cells = read_bench_results([out])
    assert [c.label for c in cells[:3]] == [label, "ngram beside learned", "eagle beside learned"]
    assert [c.beside for c in cells[:3]] == [None, label, label]
    for b in (1, 3):  # every repeat's speedup, in order; a batch size's rows from the policy's median repeat
        learned, *chains = [r for r in rows if r["batch_size"] == b]
        repeats = learned["speedup_repeats"]
        assert len(repeats) == 3 and learned["speedup"] == pytest.approx(statistics.median(repeats))
        median = min(range(3), key=lambda i: abs(repeats[i] - learned["speedup"]))
        assert all(c["speedup"] == pytest.approx(c["speedup_repeats"][median]) for c in chains)
    for row in rows:  # each chain: the policy's speed over its own, paired repeat by repeat (3: no interval)
        learned = next(r for r in rows if r["method"] == "learned" and r["batch_size"] == row["batch_size"])
        paired = [row.get(f"learned_over_chain{end}") for end in ("_low", "", "_high", "_confidence", "_verdict")]
        ratios = [a / b for a, b in zip(learned["speedup_repeats"], row["speedup_repeats"])]
        assert paired == [None] * 5 if row["method"] == "learned" else \
            paired == [None, pytest.approx(statistics.median(ratios)), None, None, "too few repeats"]
    said = capsys.readouterr().out
    assert "learned / ngram k=2 beside it at B=1: " in said and "median of 3 paired repeats (" in said
    assert "too few repeats for a 90% interval" in said


def test_a_chains_row_says_the_policys_speed_over_it_with_its_interval_and_verdict():
    """Five repeats of the policy at 2.0, 1.1, 1.2, 1.3, 1.25 against a chain at 1.0, 1.0, 1.0, 1.0, 1.25:
    ratios 2, 1.1, 1.2, 1.3, 1 — median 1.2, interval [1, 2] at 93.75 %, which holds 1: no
    difference resolved."""
    from specscope.analysis.paired import Paired
    from specscope.backends.reference import paired_details

    details = paired_details(Paired.of([2.0, 1.1, 1.2, 1.3, 1.25], [1.0, 1.0, 1.0, 1.0, 1.25]))
    assert details == pytest.approx({"learned_over_chain": 1.2, "learned_over_chain_low": 1.0,
                                     "learned_over_chain_high": 2.0, "learned_over_chain_confidence": 0.9375,
                                     "learned_over_chain_verdict": "no difference resolved"})


def test_a_draft_model_member_catches_up_a_long_backlog_beside_a_full_row(tmp_path):
    """n-gram and the bundled draft model: a row that sat the draft model out for many steps drafts
    in the same step as a row near max_seq_len; the catch-up padded the short row past the draft's
    cache (IndexError) in 6 of 20 random policies. Greedy output stays the target's."""
    from specscope.zoo.shipped import model_dir

    limit = 128
    engine, _ = load_engine(model_dir("target"), draft_dir=model_dir("draft"),
                            policy=random_policy(tmp_path / "p.json", 1, ("ngram", "draft")),
                            max_batch_size=2, max_seq_len=limit)
    switching = engine.proposer

    def decide(observations):  # the long row drafts every step, the short one only at the end
        near = max(len(o.tokens) for o in observations) >= limit - 8
        return [(1, 1) if o.prompt_len >= 60 else ((1, 3) if near else (NONE, 0)) for o in observations]

    object.__setattr__(switching.policy, "decide_for", lambda batch: lambda observed, committed=(): decide(observed))
    short, long = list(range(5, 15)), [5 + i % 40 for i in range(60)]
    plain, _ = load_engine(model_dir("target"), max_batch_size=2, max_seq_len=limit)
    expected = [run(plain, [p], limit - len(p))[0] for p in (short, long)]
    outputs = {}
    for rid, prompt in (("0", short), ("1", long)):
        engine.add_request(rid, prompt, limit - len(prompt), SamplingParams(), ignore_eos=True)
        outputs[rid] = []
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    assert [outputs["0"], outputs["1"]] == expected


def _three_rows_two_steps_in(setup):
    """(the target, a switching engine of three running rows after two steps): what the failed-step
    tests fail a step of."""
    target, head_dir, policy_path, _ = setup
    prompts = [p * 3 for p in prompts_of((4, 5, 3), seed=2)]
    engine = switching_engine(target, head_dir, policy_path, len(prompts))
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, 20, SamplingParams(), ignore_eos=True)
    engine.step()
    engine.step()
    return target, engine


def test_a_failed_step_records_each_rows_last_outcome_once(setup):
    """A step that fails after the policy recorded each row's last outcome (a member raising, an
    out-of-memory), retried row by row as serve does, recorded it twice: the policy's own counts
    (steps, accepted drafts, θ) drifted. Recorded once, each row's history grows by one step."""
    _, engine = _three_rows_two_steps_in(setup)
    switching = engine.proposer
    steps = lambda: {slot: s.history.observation(0, 1, (0,), 0, 0.0).num_steps  # noqa: E731
                     for slot, s in switching._sequences.items()}
    before, decide_for = steps(), switching.policy.decide_for

    def failing(observed, committed=()):  # fails after the observations (and the records) were made
        raise RuntimeError("transient")

    object.__setattr__(switching.policy, "decide_for", lambda batch: failing)
    with pytest.raises(RuntimeError, match="transient"):
        engine.step()
    object.__setattr__(switching.policy, "decide_for", decide_for)
    for request in [s.request_id for s in engine._running]:
        engine.step(only={request})
    assert all(steps()[slot] == before[slot] + 1 for slot in before)


def test_a_step_whose_target_pass_failed_leaves_no_outcome_behind(setup, monkeypatch):
    """A step that fails in the target's pass (after the policy chose each row's step), retried
    row by row as serve does, was recorded at the retry as a step that emitted nothing: an
    outcome of 0 tokens entered each row's history and the policy decided differently from
    then on. A step that never ran is not recorded: each row's history grows by one step."""
    target, engine = _three_rows_two_steps_in(setup)
    switching = engine.proposer
    before = {slot: len(s.history._steps) for slot, s in switching._sequences.items()}
    forward = target.forward

    def failing(*args, **kwargs):  # once: the retries run
        monkeypatch.setattr(target, "forward", forward)
        raise RuntimeError("transient")

    monkeypatch.setattr(target, "forward", failing)
    states = engine.generator_states()
    with pytest.raises(RuntimeError, match="transient"):
        engine.step()
    engine.restore_generators(states)
    for request in [s.request_id for s in engine._running]:
        engine.step(only={request})
    for slot, state in switching._sequences.items():
        assert len(state.history._steps) == before[slot] + 1
        assert all(outcome.emitted > 0 for outcome in state.history._steps)


def test_a_heads_step_whose_target_pass_failed_is_retried_row_by_row(setup, monkeypatch):
    """An EAGLE engine (no policy) whose verification fails once, retried row by row as serve
    does: the head had dropped the hidden states its proposal read as soon as it proposed, so
    every retry failed ("propose for slot … before any target pass"). They are dropped at the
    slot's next target pass now: the retries draft again from them, and the output is no-SD's."""
    from specscope.assemble import build_proposer

    target, head_dir, _, _ = setup
    prompts = [p * 3 for p in prompts_of((3, 4), seed=2)]
    plain = run(Engine(target, None, K, 2, MAX_SEQ_LEN), prompts, 16)
    config = ProposerConfig("eagle", 3, 2, Engine.cache_capacity(MAX_SEQ_LEN, 3), head_dir)
    engine = Engine(target, build_proposer(target, "eagle", config), 3, 2, MAX_SEQ_LEN)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, 16, SamplingParams(), ignore_eos=True)
    outputs = {"0": [], "1": []}
    for _ in range(2):
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    forward = target.forward

    def failing(*args, **kwargs):  # once: the retries run
        monkeypatch.setattr(target, "forward", forward)
        raise RuntimeError("transient")

    monkeypatch.setattr(target, "forward", failing)
    with pytest.raises(RuntimeError, match="transient"):
        engine.step()
    for request in ("0", "1"):
        for out in engine.step(only={request}):
            outputs[out.request_id] += out.new_token_ids
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    assert [outputs["0"], outputs["1"]] == plain


def test_the_engines_observations_hold_the_tokens_so_far_as_they_were(setup):
    """The engine's observation copied each row's whole history into a tuple at every step
    (O(context): 12 µs a row at 8k tokens); it now holds a view of the live history, which shows
    the tokens as they were when it was made, whatever the engine appends later."""
    from specscope.policy.observation import TokensSoFar

    target, head_dir, policy_path, _ = setup
    prompts = [p * 3 for p in prompts_of((4, 5), seed=2)]
    engine = switching_engine(target, head_dir, policy_path, len(prompts))
    switching, seen = engine.proposer, []
    decide_for = switching.policy.decide_for

    def spying(batch):
        decide = decide_for(batch)

        def spy(observed, committed=()):
            seen.extend((obs, tuple(obs.tokens)) for obs in observed)
            return decide(observed, committed)

        return spy

    object.__setattr__(switching.policy, "decide_for", spying)
    outputs = run(engine, prompts, 12)
    assert len(seen) > 4
    for obs, then in seen:
        assert isinstance(obs.tokens, TokensSoFar) and obs.tokens == then and len(obs.tokens) == obs.prompt_len + obs.pos
        full = next(p + o for p, o in zip(prompts, outputs) if list(then[: len(p)]) == p)
        assert list(then) == full[: len(then)]


def gated_policy(path: Path, options: list[list[int]], tree: dict, confidence: float | None = None) -> Path:
    """:func:`random_policy` (seed 3) with an admission gate at every batch size (bounds wide enough
    for any prompt): ``options`` [[method index, k], …] and ``tree``, its nodes (``feature``,
    ``threshold``, ``left``, ``right``, ``value`` [N][O]: :mod:`specscope.policy.gate`); its rule
    stops the drafter at ``confidence`` p (None: k)."""
    document = json.loads(random_policy(path, seed=3).read_text())
    wide = 1e9
    for model in document["models"]:
        nodes = len(tree["feature"])
        model["gate"] = {"options": options, "low": [[-wide] * 2] * nodes, "high": [[wide] * 2] * nodes, **tree}
        model["confidence"] = confidence
    path.write_text(json.dumps(document))
    return path


def one_leaf(gains: list[float]) -> dict:
    """A gate's tree of one leaf: every prompt gets ``gains`` [O]."""
    return {"feature": [-1], "threshold": [0.0], "left": [-1], "right": [-1], "value": [gains]}


def refusing(switching) -> None:
    """Make the policy's decision raise: no row of ``switching`` may be decided."""
    def decide_for(batch):
        raise AssertionError(f"decided {batch} rows")

    object.__setattr__(switching.policy, "decide_for", decide_for)


def test_an_engine_of_more_slots_commits_by_the_gate_of_the_batch_size_it_serves_at(setup, tmp_path):
    """A bench runs every batch size on one engine of the largest's slots: at each it serves at
    (``Engine.serve_at``), requests are committed by that batch size's gate, as the simulator's
    run at that batch size commits them — here none at B = 1, every request at B = 4."""
    target, head_dir, _, _ = setup
    path = gated_policy(tmp_path / "p.json", [[METHODS.index("ngram"), 2]], one_leaf([1.0]))
    document = json.loads(path.read_text())
    for model in document["models"]:
        if model["batch_size"] == 1:
            model["gate"] = None
    path.write_text(json.dumps(document))
    assert {b: load_policy(path).gate_for(b) is None for b in (1, 4)} == {1: True, 4: False}
    prompts = [p * 3 for p in prompts_of((4, 5, 3, 6), seed=2)]
    engine = switching_engine(target, head_dir, path, 4)
    for served, decided in ((1, True), (4, False), (1, True)):
        engine.serve_at(served)
        engine.reset_stats()
        run(engine, prompts[:served], 10)
        decoded = [r for r in engine.step_records if r.tokens_verified]
        assert decoded and all((r.policy_rows > 0) == decided for r in decoded), served


def committing_engine(setup, tmp_path: Path, method: str) -> tuple:
    """(prompts, their no-SD greedy outputs, the engine, its switching proposer, its head) of an
    engine whose policy's gate commits every request to ``method`` at k = 2 and may decide none."""
    target, head_dir, _, _ = setup
    path = gated_policy(tmp_path / "p.json", [[METHODS.index(method), 2]], one_leaf([1.0]))
    prompts = [p * 3 for p in prompts_of((4, 5, 3, 6), seed=2)]
    plain = run(Engine(target, None, K, len(prompts), MAX_SEQ_LEN), prompts, 24)
    engine = switching_engine(target, head_dir, path, len(prompts))
    refusing(engine.proposer)
    return prompts, plain, engine, engine.proposer, engine.proposer.members[METHODS.index("eagle")]


def test_what_a_failed_step_left_in_the_policys_counts_goes_to_no_record(setup):
    """A step that fails after the policy decided (its verification, say) leaves its seconds, rows
    and choices behind; the next step starts from nothing, so its record holds only its own."""
    target, head_dir, policy_path, _ = setup
    prompts = [p * 3 for p in prompts_of((4, 5), seed=2)]
    engine = switching_engine(target, head_dir, policy_path, len(prompts))
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, 8, SamplingParams(), ignore_eos=True)
    engine.step()  # the prefills
    engine.proposer._policy_seconds, engine.proposer._policy_rows = 1.0, 5  # as a failed step leaves them
    engine.proposer._choices[99] = ("ngram", 3)
    engine.step()
    record = engine.step_records[-1]
    assert record.policy_rows == 2 and record.policy_s < 1.0 and len(record.choices) == 2


def test_a_gate_committing_every_request_to_ngram_keeps_the_head_out(setup, tmp_path):
    """Every request committed to n-gram at k = 2: the head never prefills or follows a prompt and
    never drafts, the policy neither observes nor decides (policy_s 0), every row proposes
    min(2, n-gram's offer now) (none where 0); greedy output stays the target's."""
    prompts, plain, engine, switching, head = committing_engine(setup, tmp_path, "ngram")
    head.observe = head.propose = lambda *_: pytest.fail("the head ran")
    choose, seen = switching.propose, []

    def recording_choice(request):
        offers = [len(lookup(h, switching.depth, switching.lookup.min_n, switching.lookup.max_n))
                  for h in request.histories]
        proposal = choose(request)
        seen.append((offers, [switching._choices[slot] for slot in request.slots]))
        return proposal

    switching.propose = recording_choice
    assert run(engine, prompts, 24) == plain
    assert not head.pending and not switching._sequences and switching._committed == {}
    for offers, choices in seen:
        assert choices == [("ngram", min(2, o)) if o else ("none", 0) for o in offers]
    assert {c[0] for _, choices in seen for c in choices} == {"ngram", "none"}
    assert all(r.policy_s == 0.0 and r.policy_rows == 0 for r in engine.step_records)


def test_a_gate_committing_every_request_to_the_head_drafts_its_k(setup, tmp_path):
    """Every request committed to EAGLE at k = 2: every step drafts exactly 2 per row in one call
    of the head, the n-gram lookup searches no row, nothing is decided, the head's proposal is the
    step's as it is (nothing merged); greedy output stays the target's. (A gate never commits to a
    drafter its policy's rule stops at a confidence p: tests/policy/test_gate.py.)"""
    prompts, plain, engine, switching, head = committing_engine(setup, tmp_path, "eagle")
    searched, find, calls, propose, switch = [], switching.lookup.find, [], head.propose, switching.propose
    made, returned = [], []

    def spying_find(histories, k):
        searched.extend(histories)
        return find(histories, k)

    def recording_head(request):
        proposal = propose(request)
        calls.append((request.k, request.stop_below, request.want_confidence or request.first_confidence,
                      proposal.draft_len.tolist()))
        made.append(proposal)
        return proposal

    def recording_switch(request):
        returned.append(switch(request))
        return returned[-1]

    switching.lookup.find, head.propose, switching.propose = spying_find, recording_head, recording_switch
    assert run(engine, prompts, 24) == plain
    assert not searched and not switching._sequences
    assert calls and all(call[:3] == (2, None, False) and set(call[3]) == {2} for call in calls)
    assert len(returned) == len(made) and all(a is b for a, b in zip(returned, made))
    decode = [r for r in engine.step_records if r.tokens_verified]
    assert len(calls) == len(decode)  # one call of the head per step
    assert all(c == ["eagle", 2] for r in decode for c in r.choices if c is not None)


@pytest.mark.parametrize("confidence", [None, 0.6])
def test_a_gate_committing_some_requests_leaves_the_rest_to_the_policy(setup, tmp_path, confidence, monkeypatch):
    """Prompts of 9 tokens committed to EAGLE at k = 2, of 15 and 18 to n-gram at k = 2, of 12
    decided per step (the gate's tree splits prompts at 10.5 and 13.5 tokens), 4 slots over 7 requests: the
    head sees no n-gram-committed row (its
    prefill cut to the longest prompt it keeps), the lookup never searches an EAGLE-committed
    row, the policy observes and decides only the 12-token prompts' rows, at their count, and
    committed rows take their chains; greedy output stays the target's. The head drafts once a
    step for its committed and decided rows together; where the policy's rule stops EAGLE at a
    ``confidence`` p, in that one call each decided row stops at its first draft below p and each
    committed row drafts its chain's k."""
    target, head_dir, _, _ = setup
    ngram, eagle = METHODS.index("ngram"), METHODS.index("eagle")
    path = gated_policy(tmp_path / "p.json", [[ngram, 2], [eagle, 2]], {  # ≤ 10.5 tokens; ≤ 13.5; longer
        "feature": [0, -1, 0, -1, -1], "threshold": [10.5, 0.0, 13.5, 0.0, 0.0], "left": [1, -1, 3, -1, -1],
        "right": [2, -1, 4, -1, -1], "value": [[0.0, 0.0], [-1.0, 1.0], [0.0, 0.0], [-1.0, -1.0], [1.0, -1.0]]},
        confidence)
    prompts = [p * 3 for p in prompts_of((3, 4, 5, 6, 4, 3, 4), seed=2)]
    commitment = {9: ("eagle", 2), 12: None, 15: ("ngram", 2), 18: ("ngram", 2)}  # by prompt length
    plain = run(Engine(target, None, K, len(prompts), MAX_SEQ_LEN), prompts, 20)
    engine = switching_engine(target, head_dir, path, 4)
    switching = engine.proposer
    head = switching.members[eagle]
    passes, observe, searched, find = [], head.observe, [], switching.lookup.find
    calls, propose, decisions, decide_for, asked = [], head.propose, [], switching.policy.decide_for, []
    choices, choose, rows = [], switching.propose, []

    def prompt_len() -> dict[int, int]:  # slot → its request's prompt length
        return {seq.slot: seq.prompt_len for seq in engine._running}

    def watching_head(target_pass):
        passes.append((target_pass.prefill, target_pass.tokens.shape[1], [prompt_len()[s] for s in target_pass.slots]))
        return observe(target_pass)

    def spying_find(histories, k):
        searched.extend(histories)
        return find(histories, k)

    read = every_pass_read(monkeypatch)

    def recording_head(request):
        read.clear()
        proposal = propose(request)
        stop = request.stop_below if isinstance(request.stop_below, list) else [request.stop_below] * len(request.slots)
        calls.append((stop, [prompt_len()[s] for s in request.slots], proposal.draft_len.tolist(),
                      torch.stack(read, 1).tolist() if read else None, len(rows)))
        asked.append(request.row_k)
        return proposal

    def spying(batch):
        decide = decide_for(batch)

        def spy(observed, committed=()):  # beside them, the step's committed rows wait
            decisions.append((batch, [o.prompt_len for o in observed], list(committed), rows[-1]))
            return decide(observed, committed)

        return spy

    def recording_choice(request):
        offers = [len(lookup(h, switching.depth, switching.lookup.min_n, switching.lookup.max_n))
                  for h in request.histories]
        rows.append(len(request.slots))
        proposal = choose(request)
        choices.extend((prompt_len()[s], o, switching._choices[s]) for s, o in zip(request.slots, offers))
        return proposal

    head.observe, switching.lookup.find, head.propose, switching.propose = \
        watching_head, spying_find, recording_head, recording_choice
    object.__setattr__(switching.policy, "decide_for", spying)
    assert run_queued(engine, prompts, 20) == plain
    # the head: only rows decided per step or committed to it; a prefill as wide as its longest prompt
    assert passes and all(commitment[n] in (None, ("eagle", 2)) for _, _, lengths in passes for n in lengths)
    prefills = [(width, lengths) for prefill, width, lengths in passes if prefill]
    assert all(width == max(lengths) for width, lengths in prefills) and prefills[0] == (12, [9, 12])
    # the lookup: never an EAGLE-committed row
    assert searched and not any(h[:9] in (prompts[0], prompts[5]) for h in searched)
    # the policy: the 12-token prompts' rows, at their count, told the chains of the step's committed rows
    assert decisions and all(batch == len(lengths) and set(lengths) == {12} and batch + len(committed) == step_rows
                             for batch, lengths, committed, step_rows in decisions)
    told = {chain for _, _, committed, _ in decisions for chain in committed}  # each its chain this step
    assert (eagle, 2) in told and told <= {(eagle, 2), (ngram, 1), (ngram, 2), (NONE, 0)}
    # the head: EAGLE-committed and decided rows in one call a step, each row to its own rule
    assert calls and all(set(lengths) <= {9, 12} for _, lengths, *_ in calls)
    assert len({step for *_, step in calls}) == len(calls)  # at most one a step (by the switch's call count)
    for stop, lengths, drafted, told, _ in calls:
        for row, (p, length, k) in enumerate(zip(stop, lengths, drafted)):
            if length == 9 or confidence is None:
                assert p is None and (length != 9 or k == 2)
            else:  # decided, taking EAGLE: to its first draft below p, the policy's depth at most
                assert p == confidence
                below = [j for j, value in enumerate(told[row]) if value < p]
                assert k == min(below[0] + 1 if below else K, K)
    assert any(set(lengths) == {9, 12} for _, lengths, *_ in calls), "some call held both kinds of rows"
    assert any(row_k is not None and max(row_k) > 2 and 9 in lengths
               for row_k, (_, lengths, *_) in zip(asked, calls)), "some call asked a decided row for more than k = 2"
    # committed rows take their chains (n-gram's cut to its offer)
    for length, offer, taken in choices:
        if commitment[length] == ("eagle", 2):
            assert taken == ("eagle", 2)
        elif commitment[length] == ("ngram", 2):
            assert taken == (("ngram", min(2, offer)) if offer else ("none", 0))
    assert {taken[0] for length, _, taken in choices if length == 12} >= {"ngram", "eagle"}
    sampled = switching_engine(target, head_dir, path, 4)  # the members' distributions merged
    assert [len(o) for o in run(sampled, prompts[:4], 12, SamplingParams(temperature=0.8, seed=4))] == [12] * 4
