"""Greedy SD is lossless: token for token the output of plain greedy decoding."""

from __future__ import annotations

import pytest
import torch
from tiny_checkpoints import VOCAB

from specscope.engine.runner import Engine, SamplingParams
from specscope.assemble import load_engine
from specscope.errors import SpecscopeError

PROMPT_LENGTHS = [5, 17, 9, 3, 12, 7, 21, 4, 10, 6]


def prompts(seed: int = 0) -> list[list[int]]:
    """Random prompts of different lengths; every other one repeats a pattern (n-gram matches)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(PROMPT_LENGTHS):
        tokens = torch.randint(2, VOCAB, (n,), generator=gen).tolist()
        out.append(tokens * 3 if i % 2 else tokens)
    return out


def generate(
    engine: Engine, batch_size: int, max_tokens: int = 24, sampling=SamplingParams()
) -> dict[str, list[int]]:
    """Run all prompts with continuous batching, at most ``batch_size`` at a time."""
    queue, outputs = list(enumerate(prompts())), {}
    while queue or engine.num_running():
        while queue and engine.num_running() < batch_size:
            i, prompt = queue.pop(0)
            engine.add_request(f"r{i}", prompt, max_tokens + i % 3, sampling, ignore_eos=True)
        for out in engine.step():
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
    return outputs


@pytest.fixture(scope="module")
def reference(llama_dir):
    engine, _ = load_engine(llama_dir, "none", max_batch_size=1, max_seq_len=128)
    return generate(engine, 1)


@pytest.mark.parametrize("batch_size", [1, 4, 8])
@pytest.mark.parametrize("method", ["ngram", "draft", "self-draft"])
def test_greedy_sd_equals_plain_greedy(llama_dir, draft_dir, reference, method, batch_size):
    draft = {"draft": draft_dir, "self-draft": llama_dir}.get(method)
    engine, _ = load_engine(
        llama_dir, "draft" if draft else method, draft, k=3, max_batch_size=batch_size, max_seq_len=128
    )
    assert generate(engine, batch_size) == reference
    stats = engine.stats
    accepted_per_step = [r.tokens_emitted for r in engine.step_records]
    if method == "self-draft":  # the target drafting for itself: everything is accepted
        assert stats.acceptance_rate() == 1.0
        assert stats.num_accepted_tokens_per_pos == [stats.num_drafts] * 3
    else:  # partial, ragged acceptance
        assert 0.05 < stats.acceptance_rate() < 0.95
        assert stats.num_accepted_tokens_per_pos[0] > stats.num_accepted_tokens_per_pos[2] > 0
        if batch_size > 1:
            assert any(len(set(row)) > 1 for row in accepted_per_step)
    assert stats.num_accepted_tokens == sum(stats.num_accepted_tokens_per_pos)


def test_plain_batches_equal_batch_one(llama_dir, reference):
    engine, _ = load_engine(llama_dir, "none", max_batch_size=8, max_seq_len=128)
    assert generate(engine, 8) == reference
    assert engine.stats.acceptance_rate() is None
    assert engine.stats.mean_acceptance_length() == 1.0


def test_step_records_count_each_row_cache_and_the_longest(llama_dir):
    """Two requests of prompts 8 and 3 decoding together: a step's kv_tokens is their caches' sum,
    kv_longest the longer, and the record's kv_read the two rows padded to it."""
    engine, _ = load_engine(llama_dir, "none", max_batch_size=4, max_seq_len=64)
    engine.eos_token_ids = frozenset()
    engine.add_request("a", [5, 6, 7, 5, 6, 7, 5, 6], max_tokens=4)
    engine.add_request("b", [9, 10, 11], max_tokens=4)
    engine.step()  # both prefilled, a first token each
    engine.step()
    record = engine.step_records[-1]  # the caches hold the prompts; each row's first token is its input
    assert (record.decoded, record.kv_tokens, record.kv_longest, record.kv_read) == (2, 8 + 3, 8, 2 * 8)


def test_step_records_and_stop_conditions(llama_dir):
    engine, _ = load_engine(llama_dir, "ngram", k=2, max_batch_size=4, max_seq_len=64)
    engine.eos_token_ids = frozenset()
    engine.add_request("a", [5, 6, 7, 5, 6, 7, 5, 6], max_tokens=1)
    engine.add_request("b", [9, 10, 11], max_tokens=5)
    first = engine.step()
    assert [(o.request_id, len(o.new_token_ids), o.finished, o.finish_reason) for o in first][0] == (
        "a",
        1,
        True,
        "length",
    )
    record = engine.step_records[0]
    assert record.prefill_tokens == 11 and record.kv_tokens == 0 and record.batch_size == 2
    assert (record.prefill_requests, record.prefill_width, record.prefill_positions) == (2, 8, 16)  # padded to 8
    assert record.tokens_emitted == [1, 1] and record.prefill_s > 0  # the prefill's token alone
    assert record.verify_s == 0 and record.tokens_verified == 0 and record.tokens_proposed == 0
    assert engine.num_running() == 1 and engine.has_capacity()
    total = sum(len(o.new_token_ids) for o in first if o.request_id == "b")
    assert total == 1
    while engine.num_running():
        outs = engine.step()
        total += len(outs[0].new_token_ids)
        last = engine.step_records[-1]
        assert last.kv_tokens >= 3 and last.kv_longest == last.kv_tokens  # b's prompt at least; one row
        assert last.tokens_proposed == last.tokens_verified - 1 == last.batched_tokens - 1  # one row, at its own k
    assert total == 5 and outs[0].finish_reason == "length"
    # a stop token ends the request and is the last token returned
    engine.eos_token_ids = frozenset(range(VOCAB))
    engine.add_request("c", [1, 2, 3], max_tokens=10)
    (out,) = engine.step()
    assert out.finished and out.finish_reason == "stop" and len(out.new_token_ids) == 1
    engine.add_request("d", [1, 2, 3], max_tokens=3, ignore_eos=True)
    while engine.num_running():
        (out,) = engine.step()
    assert out.finish_reason == "length"


def test_abort_frees_the_slot(llama_dir, reference):
    engine, _ = load_engine(llama_dir, "ngram", max_batch_size=2, max_seq_len=128)
    engine.add_request("gone", prompts()[1], 50)
    engine.add_request("r0", prompts()[0], 24, ignore_eos=True)
    engine.step()
    assert engine.abort_request("gone") and not engine.abort_request("gone")
    assert engine.num_running() == 1 and engine.has_capacity()
    engine.add_request("r1", prompts()[1], 25, ignore_eos=True)  # reuses the freed slot
    outputs: dict[str, list[int]] = {}
    while engine.num_running():
        for out in engine.step():
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
    assert outputs["r1"] == reference["r1"]


def test_add_request_errors(llama_dir):
    engine, _ = load_engine(llama_dir, "none", max_batch_size=1, max_seq_len=16)
    for prompt, max_tokens, match in [
        ([], 4, "empty"),
        ([1] * 10, 7, "max_seq_len"),
        ([VOCAB], 2, "token ids"),
        ([1], 0, "max_tokens"),
    ]:
        with pytest.raises(SpecscopeError, match=match):
            engine.add_request("x", prompt, max_tokens)
    engine.add_request("x", [1, 2], 3)
    assert not engine.has_capacity()
    with pytest.raises(SpecscopeError, match="full"):
        engine.add_request("y", [1, 2], 3)
    with pytest.raises(SpecscopeError, match="temperature"):
        SamplingParams(temperature=-1)


def test_unknown_method_and_missing_draft(llama_dir):
    with pytest.raises(SpecscopeError, match="unknown proposer"):
        load_engine(llama_dir, "medusa")
    with pytest.raises(SpecscopeError, match="--draft"):
        load_engine(llama_dir, "draft")


@pytest.mark.parametrize("extra", [16, -16])
def test_draft_with_padded_vocabulary(llama_dir, reference, tmp_path, extra):
    from tiny_checkpoints import llama_config, write_checkpoint

    write_checkpoint(tmp_path, llama_config(vocab_size=VOCAB + extra, num_hidden_layers=1), seed=2)
    engine, _ = load_engine(llama_dir, "draft", tmp_path, k=2, max_batch_size=4, max_seq_len=128)
    assert generate(engine, 4) == reference
    assert engine.stats.num_draft_tokens > 0


def test_qwen3_greedy_sd_equals_plain_greedy(qwen3_dir):
    plain, _ = load_engine(qwen3_dir, "none", max_batch_size=4, max_seq_len=128)
    sd, _ = load_engine(qwen3_dir, "draft", qwen3_dir, k=3, max_batch_size=4, max_seq_len=128)
    assert generate(sd, 4) == generate(plain, 4)
    assert sd.stats.acceptance_rate() == 1.0


def test_step_records_count_each_rows_own_proposal(llama_dir):
    """An n-gram step where one row finds a match and the other none verifies both at the widest
    (``tokens_verified`` = 2 × (k + 1)) but proposes only the matching row's drafts:
    ``tokens_proposed`` is Σ draft_len, what a drafting is priced by."""
    engine, _ = load_engine(llama_dir, "ngram", k=3, max_batch_size=2, max_seq_len=64)
    engine.eos_token_ids = frozenset()
    engine.add_request("repeats", [5, 6, 7, 8] * 4, max_tokens=6)
    engine.add_request("plain", [9, 10, 11, 12, 13], max_tokens=6)
    while engine.num_running():
        engine.step()
    decoded = [r for r in engine.step_records if r.tokens_verified]
    assert all(r.tokens_proposed <= r.tokens_verified - r.decoded for r in decoded)
    assert all(r.batched_tokens == r.tokens_proposed + r.decoded for r in decoded)
    uneven = [r for r in decoded if r.decoded == 2 and r.tokens_proposed < r.tokens_verified - 2]
    assert uneven and all(r.tokens_proposed > 0 for r in uneven)
