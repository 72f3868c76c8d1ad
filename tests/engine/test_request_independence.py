"""A request's output depends on its own parameters only: not on the requests beside it
(per-request generators), and SD keeps the constraints (min_tokens, repetition_penalty,
stop_token_ids, min_p) lossless."""

from __future__ import annotations

import pytest
import torch
from test_engine import prompts

from specscope.engine.runner import SamplingParams
from specscope.assemble import load_engine
from specscope.errors import SpecscopeError

SEEDED = SamplingParams(temperature=1.0, top_p=0.95, seed=2**64 - 1)


def run(engine, requests: list[tuple[str, list[int], SamplingParams]], max_tokens: int = 20) -> dict:
    """Add all requests at once and decode them to the end (end-of-sequence ignored; stop
    tokens of the parameters end a request)."""
    outputs: dict[str, list[int]] = {}
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, max_tokens, params, ignore_eos=True)
    while engine.num_running():
        for out in engine.step():
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
    return outputs


@pytest.mark.parametrize("method, confidence", [("ngram", None), ("draft", None), ("draft", 0.05), ("draft", 0.2)])
def test_seeded_request_alone_equals_it_in_a_batch(llama_dir, draft_dir, method, confidence):
    """The same seeded request gives the same tokens alone and among five others (sampled,
    greedy, other seeds and prompts, ragged proposals), with SD on; also where the drafter stops
    each row at its confidence (a row that ended draws nothing more while its neighbours draft on)."""
    draft = draft_dir if method == "draft" else None
    engine, _ = load_engine(llama_dir, method, draft, k=3, max_batch_size=6, max_seq_len=128, confidence=confidence)
    prompt = prompts()[1]
    alone = run(engine, [("me", prompt, SEEDED)])["me"]
    neighbours = [
        (f"n{i}", prompts()[i], SamplingParams(temperature=0.7 + 0.1 * i, seed=i if i % 2 else None))
        for i in range(2, 6)
    ] + [("greedy", prompts()[0], SamplingParams())]
    crowded = run(engine, [neighbours[0], neighbours[1], ("me", prompt, SEEDED), *neighbours[2:]])
    assert crowded["me"] == alone and len(alone) == 20
    assert engine.stats.num_drafts > 0 and 0 < engine.stats.acceptance_rate() < 1
    assert run(engine, [("me", prompt, SamplingParams(temperature=1.0, top_p=0.95, seed=3))])["me"] != alone


@pytest.mark.parametrize("kind", ["min_tokens", "repetition_penalty", "both"])
def test_constraints_keep_greedy_sd_equal_to_plain(llama_dir, draft_dir, kind):
    plain, _ = load_engine(llama_dir, "none", max_batch_size=4, max_seq_len=128)
    free = run(plain, [(f"r{i}", p, SamplingParams()) for i, p in enumerate(prompts()[:4])])
    early = tuple(sorted({out[1] for out in free.values()}))  # stop tokens the outputs meet early
    params = {
        "min_tokens": SamplingParams(min_tokens=12, stop_token_ids=early),
        "repetition_penalty": SamplingParams(repetition_penalty=1.8),
        "both": SamplingParams(repetition_penalty=0.5, min_tokens=5, stop_token_ids=early),
    }[kind]
    requests = [(f"r{i}", p, params) for i, p in enumerate(prompts()[:4])]
    expected = run(plain, requests)
    assert expected != free  # the constraint changed the output
    for method, draft in (("ngram", None), ("draft", draft_dir)):
        engine, _ = load_engine(llama_dir, method, draft, k=3, max_batch_size=4, max_seq_len=128)
        assert run(engine, requests) == expected


def test_min_tokens_suppresses_stop_tokens_then_stops(llama_dir):
    engine, _ = load_engine(llama_dir, "ngram", k=3, max_batch_size=1, max_seq_len=128)
    free = run(engine, [("a", prompts()[0], SamplingParams())], max_tokens=30)["a"]
    stop = free[1]  # a token the request emits early
    params = SamplingParams(min_tokens=6, stop_token_ids=(stop,))
    engine.add_request("b", prompts()[0], 30, params)
    out = []
    while engine.num_running():
        (step,) = engine.step()
        out.extend(step.new_token_ids)
    assert stop not in out[:6]
    assert (out[-1] == stop and stop not in out[:-1] and step.finish_reason == "stop") or (
        stop not in out and step.finish_reason == "length"
    )
    assert len(out) > 6
    short = run(engine, [("c", prompts()[0], SamplingParams(stop_token_ids=(stop,)))], max_tokens=30)
    assert short["c"] == free[:2]


def test_min_p_one_keeps_only_the_most_likely_token(llama_dir):
    engine, _ = load_engine(llama_dir, "ngram", k=3, max_batch_size=2, max_seq_len=128)
    greedy = run(engine, [("g", prompts()[2], SamplingParams())])["g"]
    sampled = run(engine, [("s", prompts()[2], SamplingParams(temperature=1.0, min_p=1.0, seed=5))])["s"]
    assert sampled == greedy


@pytest.mark.parametrize(
    "given, stored", [(0.0, 0.0), (9e-6, 0.0), (1e-5, 0.01), (1e-300, 0.0), (0.005, 0.01), (0.7, 0.7)]
)
def test_temperature_rules_follow_vllm(given, stored):
    assert SamplingParams(temperature=given).temperature == stored


@pytest.mark.parametrize(
    "field, value",
    [("temperature", float("nan")), ("temperature", float("inf")), ("seed", 2**64), ("seed", -1),
     ("top_p", 0.0), ("min_p", 1.5), ("repetition_penalty", 0.0), ("min_tokens", -1), ("top_k", True)],
)
def test_bad_sampling_values_are_refused(field, value):
    with pytest.raises(SpecscopeError, match=f"^{field}: expected"):
        SamplingParams(**{field: value})


def test_max_seq_len_is_bounded_by_max_position_embeddings(llama_dir):
    engine, _ = load_engine(llama_dir, "none", max_batch_size=1)
    assert engine.max_seq_len == engine.target.config.max_position_embeddings == 512
    with pytest.raises(SpecscopeError, match="exceeds the model's max_position_embeddings"):
        load_engine(llama_dir, "none", max_batch_size=1, max_seq_len=513)


def test_seed_of_the_engine_draws_unseeded_requests(llama_dir):
    """Unseeded requests get their own generator, seeded from the engine's seed: reproducible
    run to run, different request to request."""
    params = SamplingParams(temperature=1.0)
    first, _ = load_engine(llama_dir, "none", max_batch_size=2, max_seq_len=64)
    second, _ = load_engine(llama_dir, "none", max_batch_size=2, max_seq_len=64)
    a = run(first, [("a", prompts()[0], params), ("b", prompts()[0], params)])
    assert a == run(second, [("a", prompts()[0], params), ("b", prompts()[0], params)])
    assert a["a"] != a["b"]
    torch.manual_seed(0)  # the global generator plays no part
