"""The decoder against transformers' own implementation, the KV cache, and loading."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_checkpoints import VOCAB, llama_config, qwen3_config, write_checkpoint

from specscope.engine.kv_cache import KVCache
from specscope.engine.loading import load_model
from specscope.errors import SpecscopeError

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
CONFIGS = {
    "llama": lambda: llama_config(),
    "llama3-rope": lambda: llama_config(rope_scaling=LLAMA3_ROPE, rope_theta=500000.0),
    "qwen3": lambda: qwen3_config(),
    "qwen2": lambda: pytest.importorskip("transformers").Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    ),
    "mistral": lambda: pytest.importorskip("transformers").MistralConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=None,
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_and_hidden_states_equal_transformers(tmp_path, name):
    hf = write_checkpoint(tmp_path, CONFIGS[name]())
    model = load_model(tmp_path)
    tokens = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(40)[None].expand(3, -1)
    with torch.no_grad():
        ref = hf(tokens, output_hidden_states=True)
        hidden, aux = model(tokens, positions, hidden_layers=(0, 1, 2))
        logits = model.logits(hidden)
    assert ref.logits.std() > 0.3  # not flat: a wrong rotation or norm would show
    torch.testing.assert_close(logits, ref.logits, atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(aux, ref.hidden_states):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)


def test_llama3_rope_scaling_changes_logits(tmp_path):
    """The scaled config must differ from the unscaled one (else the test above proves little)."""
    write_checkpoint(tmp_path / "a", llama_config(rope_scaling=LLAMA3_ROPE, rope_theta=500000.0))
    write_checkpoint(tmp_path / "b", llama_config(rope_theta=500000.0))
    tokens = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(2))
    positions = torch.arange(40)[None]
    with torch.no_grad():
        a = load_model(tmp_path / "a").logits(load_model(tmp_path / "a")(tokens, positions)[0])
        b = load_model(tmp_path / "b").logits(load_model(tmp_path / "b")(tokens, positions)[0])
    assert (a - b).abs().max() > 1e-3


def test_cached_ragged_decoding_equals_recompute(qwen3_dir):
    """Rows at different lengths in non-contiguous slots, fed 1..3 tokens per call, with stale
    entries left beyond each row's length: every logit equals a from-scratch forward."""
    model = load_model(qwen3_dir)
    gen = torch.Generator().manual_seed(3)
    lengths = [5, 11, 8]
    seqs = [torch.randint(0, VOCAB, (30,), generator=gen).tolist() for _ in lengths]
    slots = [4, 1, 2]
    cache = KVCache(model.config, 6, 64, torch.float32, "cpu")
    cache.k.normal_()  # garbage everywhere: nothing unwritten may be read
    cache.v.normal_()
    done = [0, 0, 0]
    feeds = [[5, 11, 8], [1, 3, 2], [3, 1, 3], [2, 2, 1]]
    with torch.no_grad():
        for feed in feeds:
            width = max(feed)
            tokens = torch.tensor([s[d : d + width] for s, d in zip(seqs, done)])
            positions = torch.tensor(done)[:, None] + torch.arange(width)
            hidden, _ = model(tokens, positions, cache, slots)
            logits = model.logits(hidden)
            for row, (seq, d, n) in enumerate(zip(seqs, done, feed)):
                full = model.logits(model(torch.tensor([seq[: d + n]]), torch.arange(d + n)[None])[0])
                torch.testing.assert_close(logits[row, :n], full[0, d:], atol=1e-5, rtol=1e-5)
            # the padded tail of short rows wrote stale entries; the next call starts at d + n
            done = [d + n for d, n in zip(done, feed)]


def test_pickle_checkpoint_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(llama_config().to_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(SpecscopeError, match="pickle"):
        load_model(tmp_path)


def test_sharded_checkpoint_loads(tmp_path):
    hf = write_checkpoint(tmp_path / "one", llama_config())
    hf.save_pretrained(tmp_path / "sharded", safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    a, b = load_model(tmp_path / "one"), load_model(tmp_path / "sharded")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
    index = tmp_path / "sharded" / "model.safetensors.index.json"  # one shard named two ways: one file, read once
    data = json.loads(index.read_text())
    shards = list(data["weight_map"].values())
    shared = next(name for name, shard in data["weight_map"].items() if shards.count(shard) > 1)
    data["weight_map"][shared] = "./" + data["weight_map"][shared]
    index.write_text(json.dumps(data))
    c = load_model(tmp_path / "sharded")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_a_heads_pickle_is_told_how_to_convert_it_without_transformers(tmp_path):
    """transformers' save_pretrained renames or drops an EAGLE head's tensors: the refusal names
    safetensors' save_file for a head."""
    (tmp_path / "config.json").write_text(json.dumps(llama_config().to_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(SpecscopeError, match=r"a drafting head .* safetensors\.torch\.save_file\(torch\.load\(FILE"):
        load_model(tmp_path)


def test_bad_config_and_weights_are_one_line_errors(tmp_path, llama_dir):
    with pytest.raises(SpecscopeError, match="config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**llama_config().to_dict(), "model_type": "gpt2"}))
    with pytest.raises(SpecscopeError, match="model_type"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({**llama_config().to_dict(), "num_hidden_layers": 3})
    )
    (tmp_path / "model.safetensors").write_bytes((llama_dir / "model.safetensors").read_bytes())
    with pytest.raises(SpecscopeError, match="missing"):
        load_model(tmp_path)


def test_sliding_window_and_gqa_checks(tmp_path):
    from specscope.engine.config import ModelConfig
    from specscope.engine.runner import Engine

    transformers = pytest.importorskip("transformers")
    config = transformers.MistralConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=32,
    )
    write_checkpoint(tmp_path, config)
    model = load_model(tmp_path)
    assert model.config.sliding_window == 32
    Engine(model, None, k=2, max_batch_size=1, max_seq_len=32)
    with pytest.raises(SpecscopeError, match="sliding window"):
        Engine(model, None, k=2, max_batch_size=1, max_seq_len=33)
    with pytest.raises(SpecscopeError, match="num_key_value_heads"):
        ModelConfig.from_hf({**config.to_dict(), "num_key_value_heads": 3})


def test_kv_cache_too_large_is_a_clear_error():
    from specscope.engine.config import ModelConfig

    config = ModelConfig("llama", 100, 64, 128, 2, 4, 2, 16)
    with pytest.raises(SpecscopeError, match="could not be allocated"):
        KVCache(config, 8, 10**12, torch.float32, "cpu")
