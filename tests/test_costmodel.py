"""Cost models: the paper's constants, the roofline against them, files and errors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from specscope.cli import main
from specscope.costmodel.base import StepLoad
from specscope.costmodel.linear import H100_LLAMA31_8B
from specscope.costmodel.presets import MODELS, ModelShape
from specscope.costmodel.registry import resolve_cost_model
from specscope.errors import SpecscopeError


def test_paper_preset_constants():
    cost = resolve_cost_model("h100-llama3.1-8b")
    # forward = 3.92645679e-08·kv + 2.10103129e-05·batched + 5.88590713e-03
    assert cost.forward_time(np.array([1]), np.array([1000]), np.array([1]))[0] == pytest.approx(
        3.92645679e-08 * 1000 + 2.10103129e-05 + 5.88590713e-03)
    assert cost.overhead_s == 1.20683946e-03
    load = StepLoad(np.array([8.0]), np.array([4000.0]), np.array([2.0]), np.array([1.0]), np.array([8.0]))
    verify = np.array([0.01])
    # EAGLE: once per step; (k + 1) is per request: 8 tokens over 2 requests → 4.
    assert cost.drafting_for("eagle").time(load, verify)[0] == pytest.approx(
        2.37768493e-09 * 4000 + 8.41429603e-07 * 4 + 2.13526175e-03)
    # n-gram: 0.5875 % of the verify time, for the share of requests that proposed.
    assert cost.drafting_for("ngram").time(load, verify)[0] == pytest.approx(0.005875 * 0.01 * 0.5)
    # fitted to vLLM's chains: its trees are priced from them, and simulate and report say so
    assert cost.trees_from_chains(["eagle", "ngram"]) == (
        "cost model 'h100-llama3.1-8b' prices no tree step of eagle beyond its passes (c_tree 0): their trees are "
        "priced from chains alone")


def test_roofline_h100_llama8b_within_25_percent_of_the_paper_fit():
    roofline = resolve_cost_model("roofline:h100:llama3.1-8b")
    batched, kv = np.meshgrid(np.unique(np.round(np.logspace(0, np.log10(1024), 30))), np.linspace(0, 200_000, 21))
    ratio = roofline.forward_time(batched, kv, batched) / H100_LLAMA31_8B.forward_time(batched, kv, batched)
    assert np.all(np.abs(ratio - 1) <= 0.25), (ratio.min(), ratio.max())


def test_model_presets_match_published_sizes():
    assert MODELS["llama3.1-8b"].params() == 8_030_261_248
    assert MODELS["llama3.2-1b"].params() == 1_235_814_400
    assert MODELS["llama3.1-8b"].kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2


def test_hf_config_is_read(tmp_path):
    config = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "intermediate_size": 128, "vocab_size": 100, "num_key_value_heads": 2, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = ModelShape.resolve(tmp_path)
    assert (shape.head_dim, shape.num_kv_heads, shape.tie_word_embeddings) == (16, 2, True)
    # embedding 6400 + 2 layers × (attention 64·64 + 2·64·32 + 64·64 + MLP 3·64·128 + norms 128) + final norm 64
    assert shape.params() == 6400 + 2 * (4096 + 4096 + 4096 + 24576 + 128) + 64


def test_cost_model_files(tmp_path):
    linear = tmp_path / "m.json"
    linear.write_text(json.dumps(H100_LLAMA31_8B.describe()))
    assert resolve_cost_model(str(linear)).describe() == H100_LLAMA31_8B.describe()
    toml = tmp_path / "r.toml"
    toml.write_text('kind = "roofline"\ngpu = "h200"\nmodel = "qwen3-8b"\ndraft_model = "qwen3-0.6b"\n'
                    '[efficiency]\nweights = 0.8\n')
    model = resolve_cost_model(str(toml))
    assert model.eff.weights == 0.8 and "draft" in model.drafting
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "linear", "forward": {"c_fixed": 1}}')
    with pytest.raises(SpecscopeError, match="bad.json: field 'forward.c_tok': missing"):
        resolve_cost_model(str(bad))
    with pytest.raises(SpecscopeError, match="not a preset"):
        resolve_cost_model("h900-nothing")
    for blank in ("", "  "):  # not the working folder, "is a directory"
        with pytest.raises(SpecscopeError, match="empty"):
            resolve_cost_model(blank)
    with pytest.raises(SpecscopeError, match="no drafting model for proposer 'mtp'"):
        H100_LLAMA31_8B.drafting_for("mtp")


def test_costmodel_show_cli(capsys):
    assert main(["costmodel", "show", "h100-llama3.1-8b", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["forward"]["c_kv"] == 3.92645679e-08 and shown["drafting"]["ngram"]["ratio"] == 0.005875
    assert main(["costmodel", "show", "roofline:h100:llama3.1-8b"]) == 0
    assert "target forward time" in capsys.readouterr().out


def test_costmodel_show_gives_a_tiny_models_times_in_significant_digits(tmp_path, capsys):
    model = tmp_path / "tiny.json"  # a 2 µs forward (it printed 0.00 ms in every cell)
    model.write_text(json.dumps({"kind": "linear", "name": "tiny", "forward": {"c_fixed": 2e-6, "c_tok": 1e-8, "c_kv": 0}}))
    assert main(["costmodel", "show", str(model)]) == 0
    table = capsys.readouterr().out.split("target forward time")[1]
    assert "0.00201" in table and "0.00 " not in table


@pytest.mark.parametrize("content, message", [
    ({"forward": {"c_fixed": -1e-3, "c_tok": 0, "c_kv": 0}}, "field 'forward.c_fixed': expected a number >= 0"),
    ({"forward": {"c_fixed": 0, "c_tok": 0, "c_kv": 0, "c_req": 0}}, "field 'forward': c_fixed, c_tok and c_req sum below 1e-12 s"),
    # finite but absurd: a step's sum overflowed to inf (costmodel show printed inf, bound c 0.0000)
    ({"forward": {"c_fixed": 1e308, "c_tok": 0, "c_kv": 0}}, r"field 'forward.c_fixed': expected a number <= 3600\.0"),
    ({"forward": {"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, "drafting": {"ngram": {"kind": "fraction", "ratio": 1e300}}},
     r"field 'drafting.ngram.ratio': expected a number <= 3600\.0"),
    # a forward of only cached tokens or only the multi-token term: a one-token step over an empty
    # cache is free (speedups of nan, throughputs of Infinity in the JSON written)
    ({"forward": {"c_fixed": 0, "c_tok": 0, "c_kv": 1e-6}}, "field 'forward': c_fixed, c_tok and c_req sum below 1e-12 s"),
    ({"forward": {"c_fixed": 1e-320, "c_tok": 0, "c_kv": 0}}, "field 'forward': c_fixed, c_tok and c_req sum below 1e-12 s"),
    ({"forward": {"c_fixed": 0, "c_tok": 0, "c_kv": 0, "c_multi": 1e-3}}, r"field 'forward': .* \(a one-token forward over an empty cache"),
    ({"forward": {"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, "pads_verification": "yes"},
     "field 'pads_verification': expected true or false"),
    ({"forward": {"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, "overhead_s": -1}, "field 'overhead_s': expected a number >= 0"),
    ({"forward": {"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, "drafting": {"eagle": {"kind": "linear", "c_fixed": 1e-3,
                                                                                  "c_tok": 0, "c_kv": 0, "c_x": 1}}},
     "field 'drafting.eagle.c_x': unknown field"),
    ({"forward": {"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, "drafting": {"eagle": {"kind": "tree"}}},
     "field 'drafting.eagle.kind': expected 'fraction' or 'linear'"),
    ({"kind": "roofline", "gpu": "h100", "model": "llama3.1-8b", "efficiency": {"compute": 0}},
     r"field 'efficiency.compute': expected a number >= 0\.001"),
    # finite but absurd: every forward inf, and simulate divided by it (ZeroDivisionError)
    ({"kind": "roofline", "gpu": "h100", "model": "llama3.1-8b", "efficiency": {"weights": 1e-320}},
     r"field 'efficiency.weights': expected a number >= 0\.001"),
    ({"kind": "roofline", "gpu": "h100", "model": "llama3.1-8b", "overhead_s": 1e308},
     r"field 'overhead_s': expected a number <= 3600\.0"),
    ({"kind": "roofline", "gpu": 100, "model": "llama3.1-8b"}, "field 'gpu': unknown GPU '100'"),
    ({"kind": "roofline", "gpu": "h100", "model": "llama3.1-8b", "draft_model": "zzz"},
     "field 'draft_model': zzz: not a model preset"),
    ({"kind": "roofline", "gpu": "h100", "model": "llama3.1-8b", "drafting": {"ngram": {"kind": "fraction", "ratio": 0.5}}},
     "field 'drafting': differs from what the model shapes give"),
])
def test_cost_model_files_are_validated_field_by_field(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SpecscopeError, match=f"c.json: {message}"):
        resolve_cost_model(str(path))


def test_roofline_description_reads_back(tmp_path):
    """What `costmodel show --format json` writes reads back as the same model, its draft model too."""
    model = resolve_cost_model("roofline:h200:qwen3-8b:qwen3-0.6b")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(model.describe()))
    assert model.describe()["draft_model"] == "qwen3-0.6b"
    assert resolve_cost_model(str(path)).describe() == model.describe()  # its name too


def test_a_config_json_of_absurd_sizes_is_refused(tmp_path):
    config = {"hidden_size": 10**30, "num_attention_heads": 32, "num_hidden_layers": 2, "intermediate_size": 100,
              "vocab_size": 100}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecscopeError, match=r"config\.json: field 'hidden_size': expected an integer <= 16777216"):
        resolve_cost_model(f"roofline:h100:{tmp_path / 'config.json'}")


def test_drafting_per_pass_trees_and_chains():
    """A chain of k is k passes of width 1 (k from the verified tokens, as before); a tree step
    pays one roofline forward per pass over its width × the running requests, and the linear
    model's per-pass term counts its passes plus one, its per-row term the tokens they read plus one."""
    from specscope.costmodel.base import LinearDrafting
    from specscope.costmodel.roofline import roofline_forward

    roofline = resolve_cost_model("roofline:h100:llama3.1-8b")
    head = roofline.drafting_for("eagle")
    running, kv = np.array([4.0]), np.array([4000.0])
    chain = StepLoad(4 * np.array([4.0]), kv, running, running, 4 * np.array([4.0]))  # k = 3
    as_passes = StepLoad(chain.batched_tokens, kv, running, running, chain.padded_tokens, draft_widths=(1, 1, 1))
    assert head.time(as_passes, chain.batched_tokens) == pytest.approx(head.time(chain, chain.batched_tokens))
    tree = StepLoad(4 * np.array([11.0]), kv, running, running, 4 * np.array([11.0]), draft_widths=(1, 2, 4))
    expected = sum(roofline_forward(head.net, head.hw, head.eff, w * running, kv) for w in (1, 2, 4))
    assert head.time(tree, tree.batched_tokens) == pytest.approx(expected)
    linear = LinearDrafting(c_fixed=1.0, c_tok=0.5, c_kv=0.0)
    assert linear.time(chain, chain.batched_tokens).tolist() == [1.0 + 0.5 * 4]
    assert linear.time(tree, tree.batched_tokens).tolist() == [1.0 + 0.5 * (3 + 1)]
    rows = LinearDrafting(c_fixed=1.0, c_tok=0.5, c_kv=0.0, c_batched=0.25)
    assert rows.time(tree, tree.batched_tokens).tolist() == [1.0 + 0.5 * 4 + 0.25 * 4 * (1 + 2 + 4 + 1)]


def test_linear_drafting_per_batched_draft_token():
    """c_batched prices every running sequence's k + 1 (a drafter whose passes cost more with each
    row): 4 rows proposing k = 3 pay 1 + 0.5·4 + 0.1·4·4; it survives the model file."""
    from specscope.costmodel.base import LinearDrafting
    from specscope.costmodel.linear import LinearCostModel, linear_from_json

    running, kv = np.array([4.0, 0.0]), np.array([4000.0, 0.0])
    chain = StepLoad(np.array([16.0, 0.0]), kv, running, running, np.array([16.0, 0.0]))
    linear = LinearDrafting(c_fixed=1.0, c_tok=0.5, c_kv=0.0, c_batched=0.1)
    assert linear.time(chain, chain.batched_tokens).tolist() == [pytest.approx(1.0 + 0.5 * 4 + 0.1 * 4 * 4), 0.0]
    model = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, drafting={"draft": linear})
    assert linear_from_json(json.loads(json.dumps(model.describe())), "m.json").drafting_for("draft") == linear


def test_admission_cost_survives_the_model_file_and_scales():
    """``admit_s`` (a calibrated server's work on a request arriving to an idle engine) is
    written only when set, read back, refused when negative, and scaled like every time."""
    from specscope.costmodel.linear import LinearCostModel, linear_from_json
    from specscope.errors import SpecscopeError

    model = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, admit_s=2e-3)
    assert linear_from_json(json.loads(json.dumps(model.describe())), "m.json").admit_s == 2e-3
    assert "admit_s" not in LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0).describe()
    assert model.scaled(2.0).admit_s == 4e-3
    with pytest.raises(SpecscopeError, match="admit_s"):
        linear_from_json({**model.describe(), "admit_s": -1.0}, "m.json")


def test_a_prefill_position_has_its_own_price_where_one_was_fitted():
    """``c_prompt`` prices a prefill's positions (c_fixed + c_prompt·positions + c_req·prompts +
    c_multi), a verification's tokens keep c_tok; without it a prefill is the forward it always
    was. It survives the model file, is written only when set, and scales like every time."""
    from specscope.costmodel.linear import LinearCostModel, linear_from_json

    plain = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, c_req=2e-4, c_multi=1e-4)
    model = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, c_req=2e-4, c_multi=1e-4, c_prompt=3e-5)
    positions, prompts = np.array([200.0, 1.0]), np.array([2.0, 1.0])
    assert model.prefill_forward_time(positions, prompts).tolist() == pytest.approx(
        [1e-3 + 3e-5 * 200 + 2e-4 * 2 + 1e-4, 1e-3 + 3e-5 + 2e-4])
    assert plain.prefill_forward_time(positions, prompts).tolist() == pytest.approx(
        plain.forward_time(positions, np.zeros(2), prompts).tolist())
    assert model.forward_time(positions, np.zeros(2), prompts).tolist() == pytest.approx(
        plain.forward_time(positions, np.zeros(2), prompts).tolist())
    assert "c_prompt" not in plain.describe()["forward"]
    back = linear_from_json(json.loads(json.dumps(model.describe())), "m.json")
    assert back.c_prompt == 3e-5 and linear_from_json(plain.describe(), "m.json").c_prompt is None
    assert model.scaled(2.0).c_prompt == 6e-5 and plain.scaled(2.0).c_prompt is None
    with pytest.raises(SpecscopeError, match=r"m.json: field 'forward.c_prompt': expected a number >= 0"):
        linear_from_json({**model.describe(), "forward": {**model.describe()["forward"], "c_prompt": -1e-5}}, "m.json")


def test_a_prefill_forward_has_its_own_fixed_cost_where_one_was_fitted():
    """``c_prompt_fixed`` replaces c_fixed in a prefill (a prefill of 2 prompts over 200 positions:
    4 ms + 0.03·200 + 0.2·2 + 0.1 = 10.5 ms), not in a decode forward; it survives the model file,
    is written only when set, scales, and a negative one is refused naming the field."""
    from specscope.costmodel.linear import LinearCostModel, linear_from_json

    model = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, c_req=2e-4, c_multi=1e-4, c_prompt=3e-5, c_prompt_fixed=4e-3)
    positions, prompts = np.array([200.0]), np.array([2.0])
    assert model.prefill_forward_time(positions, prompts).tolist() == pytest.approx([10.5e-3])
    assert model.forward_time(np.array([1.0]), np.zeros(1), np.ones(1)).tolist() == pytest.approx([1e-3 + 1e-5 + 2e-4])
    back = linear_from_json(json.loads(json.dumps(model.describe())), "m.json")
    assert back.c_prompt_fixed == 4e-3 and model.scaled(2.0).c_prompt_fixed == 8e-3
    plain = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, c_prompt=3e-5)
    assert "c_prompt_fixed" not in plain.describe()["forward"]
    assert linear_from_json(plain.describe(), "m.json").c_prompt_fixed is None
    with pytest.raises(SpecscopeError, match=r"m.json: field 'forward.c_prompt_fixed': expected a number >= 0"):
        linear_from_json({**model.describe(), "forward": {**model.describe()["forward"], "c_prompt_fixed": -1.0}},
                         "m.json")


def test_a_drafting_may_start_below_zero_in_its_k_plus_one_form():
    """Drafting per proposed token, ``(c_fixed + c_tok) + c_tok·k``: c_fixed may lie below 0 down to
    −c_tok (and c_req down to −c_batched) — a drafter of k passes at 0.56 ms each and 0.32 ms
    besides has c_fixed = −0.24 ms — and never below, where k = 0 would cost less than nothing."""
    from specscope.costmodel.base import LinearDrafting
    from specscope.costmodel.linear import LinearCostModel, linear_from_json

    passes = LinearDrafting(c_fixed=-0.24e-3, c_tok=0.56e-3, c_kv=0.0, c_req=-0.05e-3, c_batched=0.1e-3)
    running = np.array([1.0, 4.0])
    load = StepLoad(running * 2, np.zeros(2), running, running, running * 2)  # k = 1
    assert passes.time(load, np.zeros(2)).tolist() == pytest.approx([0.32e-3 + 0.56e-3 + 0.05e-3 + 0.1e-3,
                                                                       0.32e-3 + 0.56e-3 + 4 * (0.05e-3 + 0.1e-3)])
    model = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, drafting={"draft": passes})
    assert linear_from_json(json.loads(json.dumps(model.describe())), "m.json").drafting_for("draft") == passes
    for name, value, floor in (("c_fixed", -0.6e-3, "-0.00056"), ("c_req", -0.2e-3, "-0.0001")):
        spec = {**model.describe(), "drafting": {"draft": {**passes.to_json(), name: value}}}
        with pytest.raises(SpecscopeError, match=rf"field 'drafting.draft.{name}': expected a number >= {floor}"):
            linear_from_json(spec, "m.json")


def test_a_forward_over_several_sequences_may_cost_a_step_more():
    """``c_batch`` is added to a forward over more than one sequence (a verification of several
    rows, a prefill of several prompts), never to one row's, however many tokens it verifies; it
    survives the model file and is written only when set."""
    from specscope.costmodel.linear import LinearCostModel, linear_from_json

    model = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, c_batch=4e-4)
    rows = np.array([1.0, 1.0, 2.0])
    tokens = np.array([1.0, 5.0, 2.0])
    assert model.forward_time(tokens, np.zeros(3), rows).tolist() == pytest.approx(
        [1e-3 + 1e-5, 1e-3 + 5e-5, 1e-3 + 2e-5 + 4e-4])
    assert model.prefill_forward_time(np.array([30.0, 60.0]), np.array([1.0, 2.0])).tolist() == pytest.approx(
        [1e-3 + 3e-4, 1e-3 + 6e-4 + 4e-4])
    assert linear_from_json(json.loads(json.dumps(model.describe())), "m.json").c_batch == 4e-4
    assert "c_batch" not in LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0).describe()["forward"]


def test_a_roofline_refuses_weights_beyond_its_one_gpus_memory():
    """Llama-3-70B's 141 GB of BF16 weights on one 80 GB H100 were priced as if they fit."""
    from specscope.costmodel.registry import resolve_cost_model

    with pytest.raises(SpecscopeError, match=r"^roofline:h100:llama3-70b: the weights of llama3-70b take 131\.4 GiB "
                                             r"as their checkpoints store them \(BF16\), beyond one h100's 80 GiB"):
        resolve_cost_model("roofline:h100:llama3-70b")
    with pytest.raises(SpecscopeError, match=r"llama3\.1-8b and llama3-70b take 146\.4 GiB"):
        resolve_cost_model("roofline:h100:llama3.1-8b:llama3-70b")
    assert resolve_cost_model("roofline:h200:llama3-70b").hw.name == "h200"  # 131.4 of its 140 GiB
    assert resolve_cost_model("roofline:h100:llama3.1-8b:llama3.2-1b").name == "roofline:h100:llama3.1-8b:llama3.2-1b"


def test_a_roofline_streams_what_a_token_passes_through_and_prices_each_head_by_its_own_weights():
    """Probe: every forward streamed the input embedding table (an untied 8B: +7 %), and EAGLE,
    EAGLE-3 and MTP were one priced head — a decoder layer with a full-vocabulary embedding and LM
    head, 2.54 GB a pass, above the whole Llama-3.2-1B. By hand for Llama-3.1-8B: the model
    streams all its parameters but the embedding's 128256 × 4096; the EAGLE-3 head its 424,689,664
    (as `memory` counts it, its own 32k LM head within); EAGLE-1 its 251,666,432 and the target's
    LM head."""
    from specscope.costmodel.presets import ModelShape
    from specscope.costmodel.roofline import Streamed

    llama = ModelShape.resolve("llama3.1-8b")
    embedding = 128256 * 4096
    assert Streamed.model(llama).weight_bytes == 2 * (8_030_261_248 - embedding)
    assert Streamed.head(llama, "eagle3").weight_bytes == 2 * 424_689_664
    assert Streamed.head(llama, "eagle").weight_bytes == 2 * (251_666_432 + embedding)
    roofline = resolve_cost_model("roofline:h100:llama3.1-8b:llama3.2-1b")
    passes = {name: roofline.drafting_for(name).net.weight_bytes for name in ("eagle", "eagle3", "mtp", "draft")}
    assert passes["eagle3"] < passes["eagle"] < passes["draft"]


def test_a_cost_model_file_refuses_a_drafting_entry_no_proposer_has(tmp_path):
    """Probe: a drafting entry 'eagel' was accepted, and simulating EAGLE then blamed the
    preset whose name the file carried ('cost model h100-llama3.1-8b has no drafting model')."""
    import json

    described = resolve_cost_model("h100-llama3.1-8b").describe()
    described["drafting"]["eagel"] = described["drafting"].pop("eagle")
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(described))
    with pytest.raises(SpecscopeError, match=r"typo\.json: field 'drafting\.eagel': unknown proposer"):
        resolve_cost_model(str(path))


def test_a_roofline_file_reads_its_model_beside_itself_and_names_a_missing_kind(tmp_path, monkeypatch):
    """Probe: a roofline file written by `costmodel show` with a relative config path worked only
    from the folder it was written in; a file with gpu and model but no kind was read as linear
    ('gpu: unknown field')."""
    import json

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps({
        "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 512,
        "vocab_size": 1000}))
    (tmp_path / "rl.json").write_text(json.dumps({"kind": "roofline", "gpu": "h100", "model": "cfg"}))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert resolve_cost_model(str(tmp_path / "rl.json")).target.num_layers == 2
    (tmp_path / "nokind.json").write_text(json.dumps({"gpu": "h100", "model": "llama3.1-8b"}))
    with pytest.raises(SpecscopeError, match=r"nokind\.json: field 'kind': missing: a file with 'gpu' and 'model' is a roofline"):
        resolve_cost_model(str(tmp_path / "nokind.json"))


def test_a_draft_model_of_another_vocabulary_is_refused():
    """Probe: Qwen3-0.6B was accepted as Llama-3.1-8B's draft model (151936 tokens against 128256):
    it cannot draft for it. A vocabulary a few padding rows short is the target's (vLLM's rule)."""
    with pytest.raises(SpecscopeError, match="draft model 'qwen3-0.6b': its vocabulary of 151936 tokens is not "
                                             "the target 'llama3.1-8b''s 128256"):
        resolve_cost_model("roofline:h100:llama3.1-8b:qwen3-0.6b")
    target = resolve_cost_model("roofline:h100:qwen3-8b")
    padded = replace(ModelShape.resolve("qwen3-0.6b"), vocab_size=target.target.vocab_size - 128)
    assert target.with_draft_model(padded).drafting_for("draft")


def test_a_roofline_says_where_the_kv_cache_outgrows_the_gpu():
    """H100 (81559 MiB, as nvidia-smi counts it) beside Llama-3.1-8B's weights (~15 GiB) holds about 530k tokens of its KV
    cache (128 KiB a token): paper mode's 128 copies of an 8k-token ShareGPT output need twice that.
    The notes name the batch sizes past it; a fitted linear model, which knows no memory, says nothing."""
    from specscope.costmodel.registry import resolve_cost_model
    from specscope.sim.grid import SimRow, capacity_notes

    roofline = resolve_cost_model("roofline:h100:llama3.1-8b")
    room = roofline.kv_capacity_tokens()
    free = 81559 * 2**20 - roofline.target.weight_bytes()
    assert room == pytest.approx(free / (2 * 32 * 8 * 128 * 2))

    def row(b, peak):
        return SimRow("chat", "eagle", "fixed:3", b, "paper", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 2.0, 10, peak)

    rows = [row(1, 9e3), row(64, 0.6 * room), row(128, 2.0 * room), row(256, 4.0 * room)]
    (note,) = capacity_notes(rows, roofline)
    assert note.startswith("dataset 'chat': at batch sizes 128, 256 the KV cache holds up to")
    assert capacity_notes(rows, resolve_cost_model("h100-llama3.1-8b")) == []


def test_a_roofline_written_with_a_relative_config_path_reads_from_anywhere(tmp_path, monkeypatch):
    """`costmodel show roofline:h100:q --format json > sub/cm.json` kept "q/config.json", relative
    to where it ran: read from another folder, the file was refused. The model's path is written whole."""
    import json
    import shutil

    from specscope.costmodel.registry import resolve_cost_model
    from specscope.zoo.shipped import model_dir

    shutil.copytree(model_dir("target"), tmp_path / "q")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    written = resolve_cost_model("roofline:h100:q").describe()
    (tmp_path / "sub" / "cm.json").write_text(json.dumps(written))
    monkeypatch.chdir(tmp_path / "sub")
    again = resolve_cost_model(str(tmp_path / "sub" / "cm.json"))
    assert again.describe()["model"] == str(tmp_path / "q" / "config.json") == written["model"]


def test_costmodel_show_names_the_file_a_model_came_from(tmp_path, capsys, monkeypatch):
    """A file may call itself ``h100-llama3.1-8b`` and hold other numbers: the table says which file
    it read (as every result priced with it does), not only the name the file gives itself."""
    from specscope.cli import main
    from specscope.costmodel.linear import H100_LLAMA31_8B

    fake = tmp_path / "fake.json"
    fake.write_text(json.dumps({**H100_LLAMA31_8B.describe(), "forward": {
        **H100_LLAMA31_8B.describe()["forward"], "c_fixed": 0.05}}))
    monkeypatch.chdir(tmp_path)
    assert main(["costmodel", "show", "fake.json"]) == 0
    assert "target forward time (ms) of h100-llama3.1-8b (from fake.json)" in capsys.readouterr().out
