"""`specscope memory` against hand-computed weight and KV bytes (arithmetic written out)."""

from __future__ import annotations

import json

import pytest

from specscope.cli import main
from specscope.costmodel.memory import memory_report
from specscope.costmodel.presets import ModelShape

# Llama-3.1-8B: h=4096, 32 heads, 8 KV heads, head_dim 128, intermediate 14336, vocab 128256.
# attention = 4096·4096 (q) + 2·4096·1024 (k, v) + 4096·4096 (o) = 41,943,040
# mlp       = 3·4096·14336                                         = 176,160,768
# layer     = 41,943,040 + 176,160,768 + 2·4096 (norms)            = 218,112,000
# params    = 2·128256·4096 (embedding, untied LM head) + 32·218,112,000 + 4096 (norm)
#           = 1,050,673,152 + 6,979,584,000 + 4096                  = 8,030,261,248
LLAMA8B_PARAMS = 8_030_261_248
LLAMA8B_BYTES = 16_060_522_496  # × 2 bytes
LLAMA8B_KV = 131_072  # 2 (K, V) · 32 layers · 8 heads · 128 · 2 bytes
HEAD_KV = 4_096  # one layer: 2 · 8 · 128 · 2 bytes


def run_json(capsys, *argv: str) -> dict:
    assert main(["memory", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_target_alone(capsys):
    out = run_json(capsys, "--target", "llama3.1-8b")
    assert out["target"]["params"] == LLAMA8B_PARAMS
    assert out["target"]["weight_bytes"] == LLAMA8B_BYTES
    assert out["target"]["kv_bytes_per_token"] == LLAMA8B_KV
    assert out["drafter"] is None
    assert out["weight_overhead_pct"] is None and out["kv_overhead_pct"] is None


def test_llama70b_with_llama1b_draft(capsys):
    # 70B: attention 8192·8192·2 + 2·8192·1024 = 150,994,944; mlp 3·8192·28672 = 704,643,072;
    # layer = 150,994,944 + 704,643,072 + 2·8192 = 855,654,400;
    # params = 2·128256·8192 + 80·855,654,400 + 8192 = 2,101,346,304 + 68,452,352,000 + 8192
    #        = 70,553,706,496 → 141,107,412,992 bytes; KV = 2·80·8·128·2 = 327,680.
    # 1B (tied): attention 2048·2048·2 + 2·2048·512 = 10,485,760;
    # mlp 3·2048·8192 = 50,331,648;
    # layer = 60,821,504; params = 128256·2048 + 16·60,821,504 + 2048
    #       = 262,668,288 + 973,144,064 + 2048 = 1,235,814,400 → 2,471,628,800 bytes;
    # KV = 2·16·8·64·2 = 32,768.
    out = run_json(capsys, "--target", "llama3-70b", "--draft", "llama3.2-1b")
    assert out["target"]["weight_bytes"] == 141_107_412_992
    assert out["target"]["kv_bytes_per_token"] == 327_680
    assert out["drafter"]["weight_bytes"] == 2_471_628_800
    assert out["drafter"]["kv_bytes_per_token"] == 32_768
    assert out["weight_overhead_pct"] == pytest.approx(100 * 2_471_628_800 / 141_107_412_992)
    assert out["weight_overhead_pct"] == pytest.approx(1.7516, abs=1e-4)
    assert out["kv_overhead_pct"] == pytest.approx(10.0)


def test_qwen3_8b_with_qwen3_06b_draft(capsys):
    # 8B: attention 4096·4096·2 + 2·4096·1024 = 41,943,040; q/k norms 2·128 = 256;
    # mlp 3·4096·12288 = 150,994,944; layer norms 8192 → layer = 192,946,432;
    # params = 2·151936·4096 + 36·192,946,432 + 4096
    #       = 1,244,659,712 + 6,946,071,552 + 4096 = 8,190,735,360; KV = 2·36·8·128·2 = 147,456.
    # 0.6B (tied): attention 1024·2048·2 + 2·1024·1024 = 6,291,456; q/k norms 256;
    # mlp 3·1024·3072 = 9,437,184; layer norms 2048 → layer = 15,730,944;
    # params = 151936·1024 + 28·15,730,944 + 1024
    #       = 155,582,464 + 440,466,432 + 1024 = 596,049,920; KV = 2·28·8·128·2 = 114,688.
    out = run_json(capsys, "--target", "qwen3-8b", "--draft", "qwen3-0.6b")
    assert out["target"]["weight_bytes"] == 2 * 8_190_735_360
    assert out["target"]["kv_bytes_per_token"] == 147_456
    assert out["drafter"]["weight_bytes"] == 2 * 596_049_920
    assert out["drafter"]["kv_bytes_per_token"] == 114_688
    assert out["kv_overhead_pct"] == pytest.approx(100 * 114_688 / 147_456)  # 77.78 %


def test_eagle_head(capsys):
    # fc 2·4096·4096 + 4096 (bias) = 33,558,528 + one layer without input_layernorm
    # (218,112,000 − 4096 = 218,107,904) = 251,666,432 params → 503,332,864 bytes.
    out = run_json(capsys, "--target", "llama3.1-8b", "--eagle")
    assert out["drafter"]["params"] == 251_666_432
    assert out["drafter"]["weight_bytes"] == 503_332_864
    assert out["drafter"]["kv_bytes_per_token"] == HEAD_KV
    assert out["drafter"]["shared_with_target"] == ["embedding", "lm_head"]
    assert out["weight_overhead_pct"] == pytest.approx(100 * 503_332_864 / LLAMA8B_BYTES)
    assert out["kv_overhead_pct"] == pytest.approx(100 * 4096 / 131_072)  # 3.125 %


def test_eagle3_head(capsys):
    # fc 3·4096·4096 = 50,331,648; midlayer attention from 2h = 8192:
    # 8192·4096 (q) + 2·8192·1024 (k, v) + 4096·4096 (o) = 67,108,864; mlp 176,160,768;
    # norms 3·4096 = 12,288 → midlayer 243,281,920; final norm 4096;
    # lm_head 32000·4096 = 131,072,000. params = 50,331,648 + 243,281,920 + 4096
    # + 131,072,000 = 424,689,664 → 849,379,328 bytes, + d2t 32000·8 = 256,000 → 849,635,328.
    out = run_json(capsys, "--target", "llama3.1-8b", "--eagle3")
    assert out["drafter"]["params"] == 424_689_664
    assert out["drafter"]["weight_bytes"] == 849_635_328
    assert out["drafter"]["kv_bytes_per_token"] == HEAD_KV
    assert out["drafter"]["shared_with_target"] == ["embedding"]
    # a smaller draft vocabulary: lm_head 1000·4096 and d2t 1000·8
    out = run_json(capsys, "--target", "llama3.1-8b", "--eagle3", "--draft-vocab-size", "1000")
    assert out["drafter"]["weight_bytes"] == 2 * (424_689_664 - 31_000 * 4096) + 8 * 1000


def test_mtp_head(capsys):
    # enorm + hnorm 2·4096 + eh_proj 2·4096·4096 = 33,554,432 + decoder block 218,112,000
    # + shared_head.norm 4096 = 251,678,720 params → 503,357,440 bytes.
    out = run_json(capsys, "--target", "llama3.1-8b", "--mtp")
    assert out["drafter"]["params"] == 251_678_720
    assert out["drafter"]["weight_bytes"] == 503_357_440
    assert out["drafter"]["kv_bytes_per_token"] == HEAD_KV


def test_dtype_bytes_scales_weights_and_kv(capsys):
    out = run_json(capsys, "--target", "llama3.1-8b", "--eagle", "--dtype-bytes", "4")
    assert out["target"]["weight_bytes"] == 4 * LLAMA8B_PARAMS
    assert out["target"]["kv_bytes_per_token"] == 2 * LLAMA8B_KV
    assert out["drafter"]["weight_bytes"] == 4 * 251_666_432


def test_hf_config_directory_matches_preset(tmp_path, capsys):
    config = {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = run_json(capsys, "--target", str(tmp_path), "--draft", str(tmp_path / "config.json"))
    assert out["target"]["weight_bytes"] == LLAMA8B_BYTES
    assert out["kv_overhead_pct"] == pytest.approx(100.0)


def test_table_output(capsys):
    assert main(["memory", "--target", "llama3-70b", "--draft", "llama3.2-1b"]) == 0
    out = capsys.readouterr().out
    assert "141,107,412,992" in out and "2,471,628,800" in out
    assert "weights 1.752%, KV per token 10.000%" in out


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not a model preset"),
        ("{not json", "invalid JSON"),
        ('{"hidden_size": 64}', "field 'num_attention_heads': missing"),
        ('{"hidden_size": "x", "num_attention_heads": 4}', "field 'hidden_size': expected an integer, got text 'x'"),
        ('{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128, '
         '"vocab_size": 100, "num_key_value_heads": 3}', "field 'num_key_value_heads': expected a divisor"),
        ('{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128, '
         '"vocab_size": 100, "head_dim": -16}', "field 'head_dim': expected an integer >= 1, got -16"),
    ],
)
def test_bad_config_is_one_line_error(tmp_path, capsys, content, message):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    assert main(["memory", "--target", str(path), "--eagle"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specscope: error: ") and message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--eagle", "--draft-vocab-size", "1000"], "applies to --eagle3 only"),
        (["--eagle3", "--draft-vocab-size", "0"], "expected 1..128256"),
        (["--eagle3", "--draft-vocab-size", "200000"], "expected 1..128256"),
    ],
)
def test_bad_draft_vocab_size(capsys, argv, message):
    assert main(["memory", "--target", "llama3.1-8b", *argv]) == 2
    assert message in capsys.readouterr().err


def test_drafter_flags_are_exclusive(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["memory", "--target", "llama3.1-8b", "--eagle", "--mtp"])
    assert exit_info.value.code == 2


def test_an_eagle3_heads_draft_vocabulary_is_at_most_its_targets(capsys):
    """The bundled target has 1024 tokens: its EAGLE-3 head was priced over the published heads'
    32000 (weights 386 % of the target's, where --draft-vocab-size 32000 is refused); by hand,
    fc 3h·h + a 2h-input layer + norms + 1024·h = 762,624 weights, 43.29 %."""
    from specscope.zoo.shipped import model_dir

    assert main(["memory", "--target", str(model_dir("target")), "--eagle3", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["drafter"]["params"] == 762_624 and shown["weight_overhead_pct"] == pytest.approx(43.288, abs=1e-3)


def test_report_api_without_cli():
    report = memory_report(ModelShape.resolve("llama3.1-8b"), "mtp")
    assert report.drafter.weight_bytes == 503_357_440
    assert report.kv_overhead_pct == pytest.approx(3.125)


def test_biases_are_counted_where_the_config_has_them():
    """Llama's attention_bias (q, k, v and o) and mlp_bias (gate, up, down), and Qwen2's q/k/v
    biases, were left out of the parameter count unsaid. Per layer of Llama-3.1-8B's shape:
    q 4096 + k 1024 + v 1024 + o 4096 + gate 14336 + up 14336 + down 4096."""
    from specscope.costmodel.presets import ModelShape

    config = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
              "intermediate_size": 14336, "vocab_size": 128256}
    plain = ModelShape.from_hf_config(config).params()
    assert plain == 8_030_261_248
    assert ModelShape.from_hf_config({**config, "attention_bias": True, "mlp_bias": True}).params() - plain == \
        32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)
    assert ModelShape.from_hf_config({**config, "model_type": "qwen2"}).params() - plain == 32 * (4096 + 1024 + 1024)
    # Qwen2 builds no o bias whatever attention_bias says, as the engine and Hugging Face build it; null is false
    assert ModelShape.from_hf_config({**config, "model_type": "qwen2", "attention_bias": True}).params() - plain == \
        32 * (4096 + 1024 + 1024)
    assert ModelShape.from_hf_config({**config, "attention_bias": None, "tie_word_embeddings": None}).params() == plain


def test_configs_beside_llamas_dense_bf16_are_priced_as_they_are_or_refused(tmp_path):
    """Probe: an FP8 Llama-3.1-8B was priced at 16.06 GB (8.03 by hand), a Gemma-2 config without
    tie_word_embeddings as untied (+917 M parameters; transformers' default ties it), and a hybrid
    Mamba model (Nemotron-H) or an ERNIE-4.5 mixture of experts as dense attention."""
    import json

    from specscope.costmodel.presets import ModelShape
    from specscope.errors import SpecscopeError

    llama = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
             "intermediate_size": 14336, "vocab_size": 128256, "model_type": "llama"}
    vocab = 2 * 128256 * 4096  # embedding and LM head: 16-bit in an FP8 checkpoint
    assert ModelShape.from_hf_config({**llama, "torch_dtype": "float8_e4m3fn"}).weight_bytes() == \
        8_030_261_248 - vocab + 2 * vocab
    for fp8 in ({"quant_method": "fbgemm_fp8"}, {"quant_method": "compressed-tensors", "config_groups": {
            "group_0": {"weights": {"num_bits": 8, "type": "float"}}}}):
        assert ModelShape.from_hf_config({**llama, "quantization_config": fp8}).weight_dtype_bytes == 1
    assert ModelShape.from_hf_config({**llama, "quantization_config": {"quant_method": "fp8"}}).weight_dtype_bytes == 1
    assert ModelShape.from_hf_config({**llama, "torch_dtype": "bfloat16"}).weight_bytes() == 2 * 8_030_261_248
    with pytest.raises(SpecscopeError, match="'gptq' quantized weights"):
        ModelShape.from_hf_config({**llama, "quantization_config": {"quant_method": "gptq", "bits": 4}})
    assert ModelShape.from_hf_config({**llama, "model_type": "gemma2"}).tie_word_embeddings
    assert not ModelShape.from_hf_config({**llama, "model_type": "gemma2", "tie_word_embeddings": False}).tie_word_embeddings
    for key, value in (("hybrid_override_pattern", "M-M*-"), ("moe_num_experts", 64), ("ssm_state_size", 128)):
        with pytest.raises(SpecscopeError, match=f"field '{key}'"):
            ModelShape.from_hf_config({**llama, key: value})
    # a sliding window reads (and keeps) only its last positions: priced as full attention it was wrong past it
    # (a Mistral of window 64 priced alike at a 20000-token context); switched off, or no layer sliding, it is dense
    for window in ({"sliding_window": 64}, {"sliding_window": 4096, "layer_types": ["sliding_attention", "full_attention"]}):
        with pytest.raises(SpecscopeError, match="field 'sliding_window': sliding-window attention"):
            ModelShape.from_hf_config({**llama, **window})
    for dense in ({"sliding_window": None}, {"model_type": "qwen2", "sliding_window": 131072},
                  {"sliding_window": 4096, "use_sliding_window": False},
                  {"sliding_window": 64, "layer_types": ["full_attention"] * 32}):
        shape = ModelShape.from_hf_config({**llama, **dense})
        assert shape == ModelShape.from_hf_config({**llama, "model_type": dense.get("model_type", "llama")})
    # a window no shorter than the model's positions never slides (Phi-3-mini-128k: 262144 over 131072)
    phi3 = {**llama, "model_type": "phi3", "sliding_window": 262144, "max_position_embeddings": 131072}
    assert ModelShape.from_hf_config(phi3) == ModelShape.from_hf_config({**phi3, "sliding_window": None})
    # a review: a two-matrix MLP (GPT-NeoX/Pythia, Phi-2) was priced as three (Pythia-6.9B: 9.0 B parameters, not
    # 6.9 B), a vision-language model's tower left out: refused, naming the field
    for other, field in (({"model_type": "gpt_neox"}, "model_type"), ({"model_type": "phi"}, "model_type"),
                         ({"model_type": "qwen2_5_vl", "vision_config": {"depth": 32}}, "vision_config")):
        with pytest.raises(SpecscopeError, match=f"field '{field}'"):
            ModelShape.from_hf_config({**llama, **other})
    with pytest.raises(SpecscopeError, match="field 'torch_dtype': expected a float8_\\* type or one of bfloat16"):
        ModelShape.from_hf_config({**llama, "torch_dtype": "float17"})
    assert ModelShape.from_hf_config({**llama, "torch_dtype": "float32"}).weight_dtype_bytes == 2  # served in 16 bits
    (tmp_path / "config.json").write_text(json.dumps({**llama, "torch_dtype": "float8_e4m3fn"}))
    from specscope.costmodel.registry import resolve_cost_model

    import numpy as np

    fp8, bf16 = resolve_cost_model(f"roofline:h100:{tmp_path}"), resolve_cost_model("roofline:h100:llama3.1-8b")
    one = (np.array([1.0]), np.array([0.0]), np.array([1.0]))
    assert fp8.forward_time(*one)[0] < 0.6 * bf16.forward_time(*one)[0]  # half the weights streamed


def test_an_fp8_target_keeps_a_16_bit_cache_and_head_unless_told(tmp_path, capsys):
    """Review: --dtype-bytes defaulting to the FP8 checkpoint's 1 byte halved its KV cache and its
    BF16 EAGLE head; only its layers are 8-bit."""
    import json

    config = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
              "intermediate_size": 14336, "vocab_size": 128256, "quantization_config": {"quant_method": "fp8"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = run_json(capsys, "--target", str(tmp_path), "--eagle")
    assert out["target"]["kv_bytes_per_token"] == 131_072 and out["drafter"]["weight_bytes"] == 2 * 251_666_432
    assert out["target"]["weight_bytes"] == 8_030_261_248 + 2 * 128256 * 4096


def test_a_head_given_as_a_model_is_refused_and_a_capped_draft_vocabulary_said(capsys):
    """--draft on an EAGLE head's folder counted it as a whole model (590,400 parameters, its KV in
    every layer, where --eagle counts 467,328); the bundled target's 1024-token vocabulary cut the
    EAGLE-3 head's default 32000 unsaid."""
    from specscope.zoo.shipped import model_dir

    assert main(["memory", "--target", str(model_dir("target")), "--draft", str(model_dir("eagle"))]) == 2
    assert "names a speculative head (EagleLlamaForCausalLM), not a model" in capsys.readouterr().err
    assert main(["memory", "--target", str(model_dir("target")), "--draft", str(model_dir("mtp"))]) == 2  # +100 %
    assert "(num_nextn_predict_layers: an MTP module's folder" in capsys.readouterr().err
    assert main(["memory", "--target", str(model_dir("target")), "--eagle3"]) == 0
    assert "the head's draft vocabulary is the target's 1024 tokens, not the published heads' 32000" \
        in capsys.readouterr().err
