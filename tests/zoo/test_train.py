"""`specscope zoo train --quick`: fast, seeded, and writes checkpoints every loader reads."""

from __future__ import annotations

import json
import random
import stat
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from specscope.cli import main
from specscope.engine.loading import load_model, load_tokenizer
from specscope.assemble import load_engine
from specscope.workloads.chat import load_chat_template
from specscope.zoo.evaluate import decode_all, distinct_4
from specscope.zoo.stream import Stream
from specscope.workloads.tasks import generate
from specscope.zoo.config import TrainConfig
from specscope.zoo.train import train_zoo

pytestmark = pytest.mark.slow  # zoo training


@pytest.fixture(scope="module")
def quick_zoo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zoo")
    assert main(["zoo", "train", "--quick", "-o", str(out)]) == 0
    return out


def test_quick_training_is_complete(quick_zoo):
    out = quick_zoo
    for name in ("target", "draft"):
        for file in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"):
            assert (out / name / file).is_file()
    for name in ("eagle", "mtp", "eagle3"):
        assert (out / name / "config.json").is_file() and (out / name / "model.safetensors").is_file()
    for name in ("target", "draft", "eagle", "mtp", "eagle3"):  # weights as readable as the config beside them
        modes = [stat.S_IMODE((out / name / file).stat().st_mode) for file in ("config.json", "model.safetensors")]
        assert modes[0] == modes[1], name
    stages = json.loads((out / "training.json").read_text())["stages"]
    assert sorted(stages) == ["draft", "eagle", "eagle3", "mtp", "target"]
    assert all(stage["loss"] > 0 for stage in stages.values())


def test_training_is_reproducible(quick_zoo, tmp_path):
    train_zoo(tmp_path, TrainConfig.quick(), held_out=_held_out())
    for name in ("target", "draft", "eagle", "mtp", "eagle3"):
        assert (tmp_path / name / "model.safetensors").read_bytes() == (quick_zoo / name / "model.safetensors").read_bytes()


def _held_out() -> set[str]:
    from specscope.workloads.bundled import held_out_prompts

    return held_out_prompts()


@pytest.mark.parametrize("method", ["draft", "eagle", "mtp", "eagle3"])
def test_every_proposer_loads_and_sd_is_lossless(quick_zoo, method):
    out = quick_zoo
    plain, tokenizer = load_engine(out / "target", "none", max_batch_size=2, max_seq_len=256)
    prompts = {f"r{i}": tokenizer.encode(ex.prompt).ids for i, ex in enumerate(generate("chat", 3, 9))}
    expected = decode_all(plain, prompts, 12)
    engine, _ = load_engine(out / "target", method, out / method, k=3, max_batch_size=2, max_seq_len=256)
    assert decode_all(engine, prompts, 12) == expected
    assert engine.stats.num_draft_tokens > 0


def test_raw_prompts_get_the_chat_markers(quick_zoo):
    out = quick_zoo / "target"
    tokenizer, template = load_tokenizer(out), load_chat_template(out)
    for ex in generate("summary", 3, 4):
        wrapped = tokenizer.encode(ex.prompt).ids
        assert wrapped == tokenizer.encode(template.apply(ex.prompt), add_special_tokens=False).ids
        assert wrapped[0] == 2 and wrapped[-1] == 3  # <|user|> ... <|assistant|>


def test_transformers_reads_the_target(quick_zoo):
    transformers = pytest.importorskip("transformers")
    out = quick_zoo / "target"
    hf = transformers.LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    ours = load_model(out)
    tokens = torch.tensor([load_tokenizer(out).encode("Hello! My name is Anna.").ids])
    positions = torch.arange(tokens.shape[1])[None]
    with torch.no_grad():
        expected = hf(tokens).logits
        hidden, _ = ours(tokens, positions)
    torch.testing.assert_close(ours.logits(hidden), expected, atol=1e-4, rtol=1e-4)


def test_training_stream_leaves_out_the_bundled_prompts():
    class Bytes:  # a lossless stand-in tokenizer
        def encode(self, text, add_special_tokens=True):
            return type("E", (), {"ids": list(text.encode())})()

    everyone_but_anna = {ex.prompt for ex in generate("chat", 20000, 5) if "Anna" not in ex.prompt}
    stream = Stream(TrainConfig(tasks=("chat",)), Bytes(), everyone_but_anna)
    rng = random.Random(0)
    drawn = [bytes(stream.draw("chat", rng).prompt).decode() for _ in range(20)]
    assert all("My name is Anna." in text for text in drawn)


def test_resume_keeps_finished_stages(quick_zoo, tmp_path):
    import shutil

    out = tmp_path / "zoo"
    shutil.copytree(quick_zoo, out)
    before = {name: (out / name / "model.safetensors").stat().st_mtime_ns for name in ("target", "draft", "eagle", "mtp", "eagle3")}
    train_zoo(out, replace(TrainConfig.quick(), head_steps=3), held_out=set())
    after = {name: (out / name / "model.safetensors").stat().st_mtime_ns for name in before}
    assert after["target"] == before["target"] and after["draft"] == before["draft"]
    assert all(after[name] != before[name] for name in ("eagle", "mtp", "eagle3"))
    assert json.loads((out / "training.json").read_text())["config"]["head_steps"] == 3
    # a stage whose folder was removed, or whose weights changed, since: trained again, not said to be kept
    shutil.rmtree(out / "draft")
    (out / "eagle" / "model.safetensors").write_bytes(b"not the weights")
    train_zoo(out, replace(TrainConfig.quick(), head_steps=3), held_out=set())
    assert load_model(out / "draft") is not None and (out / "eagle" / "model.safetensors").stat().st_size > 100
    assert (out / "target" / "model.safetensors").stat().st_mtime_ns == before["target"]
    # its other files too: a tokenizer removed, a config emptied (kept, and the zoo unusable, before)
    heads = {name: (out / name / "model.safetensors").stat().st_mtime_ns for name in ("eagle", "mtp", "eagle3")}
    (out / "target" / "tokenizer.json").unlink()
    (out / "draft" / "config.json").write_text("{}")
    train_zoo(out, replace(TrainConfig.quick(), head_steps=3), held_out=set())
    assert (out / "target" / "tokenizer.json").is_file() and load_model(out / "draft") is not None
    # the target trained again: every head learns from it again (they were kept, trained on the old one)
    assert all((out / name / "model.safetensors").stat().st_mtime_ns != heads[name] for name in heads)
    record = json.loads((out / "training.json").read_text())
    assert {record["stages"][name]["target_sha256"] for name in heads} == \
        {record["stages"]["target"]["files_sha256"]["model.safetensors"]}
    # a head whose record names another target's weights is trained again, the others kept
    record["stages"]["mtp"]["target_sha256"] = "0" * 64
    (out / "training.json").write_text(json.dumps(record))
    heads = {name: (out / name / "model.safetensors").stat().st_mtime_ns for name in heads}
    train_zoo(out, replace(TrainConfig.quick(), head_steps=3), held_out=set())
    assert [(out / name / "model.safetensors").stat().st_mtime_ns != heads[name] for name in heads] == \
        [False, True, False]


def test_distinct_4():
    assert distinct_4([1, 2, 3, 4, 5]) == 1.0
    assert distinct_4([7, 7, 7, 7, 7, 7]) == pytest.approx(1 / 3)
    assert distinct_4([1, 2]) == 1.0



def test_evaluate_finds_every_model_before_measuring_any(quick_zoo, tmp_path, capsys):
    """A zoo trained before a stage existed (no eagle3/) is refused before anything is measured:
    it once printed the models' table and three proposers' work, then stopped at the missing head."""
    import shutil

    old = tmp_path / "zoo"
    shutil.copytree(quick_zoo, old)
    shutil.rmtree(old / "eagle3")
    assert main(["zoo", "evaluate", "--zoo", str(old), "--n", "1", "--k", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{old / 'eagle3' / 'config.json'}: zoo model incomplete" in err


def test_evaluate_says_what_it_measured(quick_zoo, tmp_path, capsys):
    """The evaluation's file names the zoo, each model's fingerprint, n, k and the code: the shipped
    zoo's and a quick zoo's files were told apart by nothing."""
    from specscope.engine.config import model_fingerprint

    out = tmp_path / "eval.json"
    assert main(["zoo", "evaluate", "--zoo", str(quick_zoo), "--n", "1", "--k", "2", "-o", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["zoo"] == str(quick_zoo.resolve()) and (written["n"], written["k"]) == (1, 2) and written["made_by"]
    assert written["model_files"]["target"] == model_fingerprint(quick_zoo / "target")
    assert sorted(written["model_files"]) == ["draft", "eagle", "eagle3", "mtp", "target"]
    assert f"the zoo in {quick_zoo.resolve()}" in " ".join(capsys.readouterr().out.split())  # a title wraps


def test_a_rerun_says_which_stages_it_kept(quick_zoo, tmp_path, capsys):
    """Kept stages printed their recorded loss and seconds as if trained now ('kept' only with -v)."""
    import shutil

    out = tmp_path / "zoo"
    shutil.copytree(quick_zoo, out)
    assert main(["zoo", "train", "--quick", "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert sum("(kept: trained by an earlier run)" in line for line in printed) == 5
    assert printed[-1].endswith("s of training (0 s this run)")
