"""A checkpoint that is not what its config.json says is refused in one line naming the file
and field: values of the wrong type or sign, weights in two files, integer weights, an LM head
that config.json ties away, malformed end-of-sequence ids and shard indexes."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from specscope.engine.loading import load_eos_token_ids, load_model
from specscope.errors import SpecscopeError

CONFIG_CASES = [
    ({"rms_norm_eps": "abc"}, "field 'rms_norm_eps': expected a positive number, got 'abc'"),
    ({"rms_norm_eps": -1}, "field 'rms_norm_eps': expected a number > 0"),  # NaN logits, reported as a clean run
    ({"rope_parameters": {"rope_theta": 0}}, "field 'rope_parameters.rope_theta': expected a number > 0"),
    ({"rope_parameters": None, "rope_theta": "big"}, "field 'rope_theta': expected a positive number"),
    ({"rope_scaling": [1, 2]}, "field 'rope_scaling': expected an object"),
    ({"rope_parameters": None, "rope_scaling": {"rope_type": "linear", "factor": "x"}}, "field 'rope_scaling.factor': expected a positive number"),
    ({"head_dim": "32"}, "field 'head_dim': expected a positive integer, got '32'"),
    ({"head_dim": -32}, "field 'head_dim': expected an integer >= 1"),
    ({"num_key_value_heads": 0}, "field 'num_key_value_heads': expected an integer >= 1"),
    ({"tie_word_embeddings": "false"}, "field 'tie_word_embeddings': expected true or false, got 'false'"),
    ({"hidden_act": "gelu"}, r"field 'hidden_act': expected 'silu' \(or 'swish'\), got 'gelu'"),
    ({"vocab_size": 10 ** 30}, "field 'vocab_size': expected an integer <= 2147483647"),  # a torch traceback
    ({"rope_parameters": None, "rope_scaling": {"rope_type": "linear"}},  # transformers refuses it; 1.0 was assumed
     r"field 'rope_scaling.factor': missing \(rope type 'linear' needs factor\)"),
    ({"rope_parameters": None, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0}},
     "field 'rope_scaling.original_max_position_embeddings': missing"),
    ({"rope_parameters": {"rope_type": "default"}, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
     "fields 'rope_scaling' and 'rope_parameters' disagree on 'rope_type'"),
]


def edited(source, tmp_path, **changes):
    """A copy of the checkpoint ``source`` with ``changes`` made to its config.json."""
    target = tmp_path / "model"
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **changes}))
    return target


@pytest.mark.parametrize("changes, message", CONFIG_CASES, ids=[f"{next(iter(c))}-{i}" for i, (c, _) in enumerate(CONFIG_CASES)])
def test_config_values_are_checked(llama_dir, tmp_path, changes, message):
    with pytest.raises(SpecscopeError, match=rf"config\.json: {message}"):
        load_model(edited(llama_dir, tmp_path, **changes))


def test_a_weight_in_two_files_is_refused(llama_dir, tmp_path):
    model = edited(llama_dir, tmp_path)
    save_file({"model.norm.weight": torch.full((64,), 7.0)}, str(model / "zz_extra.safetensors"))
    with pytest.raises(SpecscopeError, match=r"zz_extra\.safetensors: weight 'model\.norm\.weight' is also in model\.safetensors"):
        load_model(model)


def test_integer_weights_are_refused(llama_dir, tmp_path):
    model = edited(llama_dir, tmp_path)
    state = load_file(str(model / "model.safetensors"))
    state["model.norm.weight"] = state["model.norm.weight"].to(torch.int32)
    save_file(state, str(model / "model.safetensors"))
    with pytest.raises(SpecscopeError, match=r"weight 'model\.norm\.weight' is torch\.int32: expected a floating-point"):
        load_model(model)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused(llama_dir, tmp_path, value):
    """A NaN weight ran: every logit NaN, every token 0, and bench still printed a normal row."""
    model = edited(llama_dir, tmp_path)
    state = load_file(str(model / "model.safetensors"))
    state["model.norm.weight"] = state["model.norm.weight"].clone()
    state["model.norm.weight"][3] = value
    save_file(state, str(model / "model.safetensors"))
    with pytest.raises(SpecscopeError, match=r"model\.safetensors: weight 'model\.norm\.weight' holds values that are "
                                             r"not finite in torch\.float32"):
        load_model(model)


def test_a_head_of_its_own_is_not_tied_away(llama_dir, tmp_path):
    """tie_word_embeddings true beside an lm_head.weight that differs from the embeddings: tying
    would drop the head without a word (the probe's argmax agreement with the untied model: 0 %)."""
    with pytest.raises(SpecscopeError, match=r"hold another lm_head\.weight, which tying would drop: set "
                                             r"tie_word_embeddings to false to use it, or remove it to tie"):
        load_model(edited(llama_dir, tmp_path, tie_word_embeddings=True))
    # the head alone, no embedding: said as such (it read "hold another lm_head.weight")
    model = tmp_path / "model"
    weights = load_file(model / "model.safetensors")
    save_file({n: t for n, t in weights.items() if n != "model.embed_tokens.weight"}, model / "model.safetensors")
    with pytest.raises(SpecscopeError, match=r"hold lm_head\.weight but no model\.embed_tokens\.weight to tie it to"):
        load_model(model)


@pytest.mark.parametrize("value", ["<|end|>", 1.5, True, [1, "2"], -1, []])
def test_eos_token_ids_are_checked(llama_dir, tmp_path, value):
    model = edited(llama_dir, tmp_path)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": value}))
    with pytest.raises(SpecscopeError, match=r"generation_config\.json: field 'eos_token_id': expected a token id"):
        load_eos_token_ids(model)


def test_an_eos_token_id_outside_the_vocabulary_is_refused(llama_dir, tmp_path):
    """An id past vocab_size is never sampled: every output would run to its token limit."""
    model = edited(llama_dir, tmp_path)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, vocab]}))
    with pytest.raises(SpecscopeError, match=rf"field 'eos_token_id': {vocab} is no token of the model \(vocab_size {vocab}"):
        load_eos_token_ids(model)


def test_a_shard_index_of_another_shape_is_refused(llama_dir, tmp_path):
    model = edited(llama_dir, tmp_path)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["model.safetensors"]}))
    with pytest.raises(SpecscopeError, match=r"index\.json: field 'weight_map': expected an object"):
        load_model(model)


def test_a_drafter_with_another_tokenizer_is_refused(tmp_path):
    """Two token ids swapped in the draft's tokenizer.json (same size): its drafts would mean
    other tokens; padding or added tokens only one side has are no conflict."""
    from tokenizers import Tokenizer, models

    from specscope.engine.loading import check_same_tokenizer

    words = {f"w{i}": i for i in range(10)}
    renamed = {**{w: i for w, i in words.items() if w != "w1"}, "zz": 1}  # id 1 means another token
    for name, vocab in (("target", words), ("padded", {**words, "<pad>": 10}), ("swapped", {**words, "w1": 2, "w2": 1}),
                        ("renamed", renamed)):
        (tmp_path / name).mkdir()
        Tokenizer(models.WordLevel(vocab, unk_token="w0")).save(str(tmp_path / name / "tokenizer.json"))
    check_same_tokenizer(tmp_path / "target", tmp_path / "padded")
    with pytest.raises(SpecscopeError, match=r"swapped/tokenizer\.json: 2 tokens differ in id or meaning from .*target/"):
        check_same_tokenizer(tmp_path / "target", tmp_path / "swapped")
    with pytest.raises(SpecscopeError, match=r"renamed/tokenizer\.json: 1 tokens differ in id or meaning .*'w1'"):
        check_same_tokenizer(tmp_path / "target", tmp_path / "renamed")


def test_a_draft_model_is_held_to_its_own_sliding_window_as_the_target_is(llama_dir, draft_dir, tmp_path):
    """A draft model with a sliding window of 4 (mistral-style) ran with full attention over 128
    positions: another model than its checkpoint (logits off by 13 against transformers). Refused as
    the target's own window is; a window as long as the engine's sequences is no refusal (the cache's
    scratch positions past them are not counted: a server at the target's whole context failed so)."""
    from specscope.assemble import load_engine

    windowed = edited(draft_dir, tmp_path, sliding_window=4, model_type="mistral")
    with pytest.raises(SpecscopeError, match=r"max_seq_len 128 exceeds draft model .*'s sliding window \(4\)"):
        load_engine(llama_dir, "draft", draft_dir=windowed, max_batch_size=1, max_seq_len=128)
    exact = edited(draft_dir, tmp_path / "exact", sliding_window=128, model_type="mistral")
    load_engine(llama_dir, "draft", draft_dir=exact, max_batch_size=1, max_seq_len=128)


def test_an_eagle3_config_of_another_shape_is_one_clear_error():
    """``eagle_config`` as text (a traceback: 'str' object has no attribute 'get'), and true as a
    layer index (read as 1)."""
    from specscope.proposers.eagle3 import aux_layers

    with pytest.raises(SpecscopeError, match=r"c\.json: field 'eagle_config': expected an object, got 'x'"):
        aux_layers({"eagle_config": "x"}, 4, "c.json")
    with pytest.raises(SpecscopeError, match=r"eagle_aux_hidden_state_layer_ids': expected three indices"):
        aux_layers({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [True, 2, 1]}}, 4, "c.json")
    assert aux_layers({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}, 4, "c.json") == (1, 2, 3)


def test_a_target_that_carries_its_mtp_module_loads_as_the_target(tmp_path):
    """DeepSeek-V3 keeps its MTP module as layer N of the target's own checkpoint
    (``num_nextn_predict_layers``): the target loads without it (it was refused: unexpected
    model.layers.4.*), and the directory serves as the mtp proposer's too."""
    import shutil

    from specscope.zoo.shipped import model_dir

    both = tmp_path / "both"
    shutil.copytree(model_dir("target"), both)
    shutil.copy(model_dir("mtp") / "config.json", both / "config.json")  # the target's, with num_nextn_predict_layers
    shutil.copy(model_dir("mtp") / "model.safetensors", both / "mtp.safetensors")
    alone, carrying = load_model(model_dir("target")), load_model(both)
    tokens = torch.tensor([[5, 9, 14, 3]])
    positions = torch.arange(4)[None, :]
    assert torch.equal(alone(tokens, positions)[0], carrying(tokens, positions)[0])


def test_weights_in_one_file_beside_a_shard_index_that_does_not_list_it_are_refused(llama_dir, tmp_path):
    """transformers reads model.safetensors, this reader the index's shards: two sets of weights."""
    model = edited(llama_dir, tmp_path)
    shutil.copy(model / "model.safetensors", model / "model-00001-of-00001.safetensors")
    names = load_file(model / "model.safetensors")
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {name: "model-00001-of-00001.safetensors" for name in names}}))
    with pytest.raises(SpecscopeError, match=r"holds model\.safetensors beside a shard index that does not list it"):
        load_model(model)


def test_a_weight_of_another_shape_names_the_shard_that_holds_it(llama_dir, tmp_path):
    """A review: a sharded checkpoint's bad tensor was named by its folder alone."""
    model = edited(llama_dir, tmp_path)
    state = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    names = sorted(state)
    second = {name: state[name] for name in names[len(names) // 2:]}
    second["model.norm.weight"] = torch.ones(7, 7)
    save_file({name: state[name] for name in names[: len(names) // 2] if name != "model.norm.weight"},
              str(model / "model-00001-of-00002.safetensors"))
    save_file(second, str(model / "model-00002-of-00002.safetensors"))
    shard = {**{name: "model-00001-of-00002.safetensors" for name in names[: len(names) // 2]},
             **{name: "model-00002-of-00002.safetensors" for name in second}}
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shard}))
    with pytest.raises(SpecscopeError, match=r"model-00002-of-00002\.safetensors: weight 'model\.norm\.weight' has "
                                             r"shape \(7, 7\)"):
        load_model(model)
