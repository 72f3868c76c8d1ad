"""The shipped bundled models load, are good at the bundled tasks and make SD pay off.

Minimum figures (documented in specscope/data/zoo/README.md) on the first few bundled requests
of each task, greedy: the target's exact match per task, how close its outputs are to the
references, its outputs' distinct-4, and the acceptance rate α of each proposer at k = 4.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specscope.zoo.evaluate import proposer_engines, score_model, score_proposers
from specscope.zoo.shipped import ZOO_MODELS, model_dir, shipped_dir

pytestmark = pytest.mark.slow  # the shipped models

N = 8  # requests per task
MIN_TARGET_EXACT_MATCH = {"code": 0.75, "math": 0.125, "summary": 0.5, "chat": 0.875}
MIN_TARGET_SIMILARITY = 0.85
MIN_DRAFT_SIMILARITY = 0.5
MIN_DISTINCT_4 = 0.9
MIN_ALPHA = {"ngram": 0.4, "draft": 0.5, "eagle": 0.4, "mtp": 0.6, "eagle3": 0.3}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_shipped_files_are_small():
    total = sum(f.stat().st_size for f in shipped_dir().rglob("*") if f.is_file())
    assert total <= 40 * 2**20
    for name in ZOO_MODELS:
        assert (model_dir(name) / "model.safetensors").is_file()


def test_target_is_accurate_and_not_degenerate():
    for score in score_model("target", None, N):
        assert score.exact_match >= MIN_TARGET_EXACT_MATCH[score.task], score
        assert score.similarity >= MIN_TARGET_SIMILARITY, score
        assert score.distinct_4 >= MIN_DISTINCT_4, score


def test_draft_is_a_weaker_but_working_model():
    scores = score_model("draft", None, N)
    assert all(s.similarity >= MIN_DRAFT_SIMILARITY and s.distinct_4 >= MIN_DISTINCT_4 for s in scores), scores


def test_every_proposer_is_accepted_and_lossless():
    scores = score_proposers(None, 2, proposer_engines(None, k=4))
    for method, minimum in MIN_ALPHA.items():
        mine = [s for s in scores if s.method == method]
        assert all(s.greedy_match for s in mine), mine
        drafted = [s.acceptance_rate for s in mine if s.acceptance_rate is not None]
        assert sum(drafted) / len(drafted) >= minimum, mine


def test_shipped_configs_are_what_the_trainer_writes():
    import json

    from specscope.zoo.config import TrainConfig
    from specscope.zoo.train import eagle3_layers, hf_config, stage_keys

    config = TrainConfig()
    target = hf_config(config.target, config.vocab_size, 1, 0)
    expected = {"target": target, "draft": hf_config(config.draft, config.vocab_size, 1, 0),
                "eagle": {**target, "num_hidden_layers": 1, "architectures": ["EagleLlamaForCausalLM"]},
                "mtp": {**target, "num_nextn_predict_layers": 1},
                "eagle3": {**target, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLMEagle3"],
                           "draft_vocab_size": config.vocab_size,
                           "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(eagle3_layers(config.target.layers))}}}
    for name, data in expected.items():
        assert json.loads((model_dir(name) / "config.json").read_text()) == data
    stages = json.loads((shipped_dir() / "training.json").read_text())["stages"]
    assert {name: stage["key"] for name, stage in stages.items()} == stage_keys(config)


def test_evaluate_refuses_a_broken_head_before_scoring_anything(tmp_path, capsys):
    """A review: a head of another hidden size was refused only after the models were scored (12 s
    and a table printed). Every engine is loaded first."""
    import json
    import shutil

    from specscope.cli import main
    from specscope.zoo.shipped import model_dir

    zoo = tmp_path / "zoo"
    shutil.copytree(model_dir("target").parent, zoo)
    config = zoo / "eagle" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_size": 128}))
    assert main(["zoo", "evaluate", "--zoo", str(zoo)]) == 2
    said = capsys.readouterr()
    assert "field 'hidden_size': 128 differs from the target's" in said.err and "exact match" not in said.out
