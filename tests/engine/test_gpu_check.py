"""scripts/gpu_check.py --tiny: the GPU check's code path runs on the CPU in seconds."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def test_gpu_check_tiny_smoke(tmp_path, capsys):
    main = runpy.run_path(str(SCRIPT))["main"]
    cost_model = tmp_path / "cost.json"
    assert main(["--tiny", "--json", str(tmp_path / "gc.json"), "--cost-model", str(cost_model)]) == 0
    out = capsys.readouterr().out
    assert "paper H100" in out and "self-draft" in out
    result = json.loads((tmp_path / "gc.json").read_text())
    assert len(result["cost_model"]["points"]) == 9
    assert {r["draft"] for r in result["sd"]} == {"none", "self-draft", "first-1-layers"}
    self_draft = [r for r in result["sd"] if r["draft"] == "self-draft"]
    new_tokens = runpy.run_path(str(SCRIPT))["TINY"]["new_tokens"]  # k = 3: every step emits 4, the last of a
    steps = -(-(new_tokens - 1) // 4)  # request up to max_tokens (the prefill emits the first token)
    assert all(r["acceptance_rate"] == 1.0 and r["mean_acceptance_length"] == (new_tokens - 1) / steps
               for r in self_draft)
    policy = result["policy"]  # item 4: the learned policy's own work at each batch size
    assert [r["batch_size"] for r in policy] == [1, 2]
    assert all(r["policy_s"] > 0 and 0 < r["policy_share"] < 1 and sum(r["choices"].values()) == 1 for r in policy)
    from specscope.costmodel.linear import linear_from_json

    fitted = linear_from_json(json.loads(cost_model.read_text()), str(cost_model))
    assert fitted.c_fixed == result["cost_model"]["c_fixed"] and fitted.overhead_s > 0


def test_a_failed_graph_capture_keeps_the_other_points():
    """Graphed, a point whose capture fails is kept with its error and left out of the fit (one
    failure once discarded every graphed point measured before it); eager, a failure is raised."""
    import pytest

    names = runpy.run_path(str(SCRIPT))
    fit, tiny, grid = names["fit_cost_model"], names["tiny"], names["TINY"]
    model = names["random_model"](tiny(), names["torch"].float32, names["torch"].device("cpu"))

    def flaky(model, rows, per_row, cached, repeats, graphed=False):
        if rows * per_row == 4 and cached == 0:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
        return 1e-3 * (1 + rows * per_row) + 1e-6 * cached * rows

    fit.__globals__["time_forward"] = flaky
    result = fit(model, grid, graphed=True)
    assert len(result["points"]) == 8 and result["failed"] == [
        {"batched": 4, "kv": 0, "rows": 4, "error": "CUDA error: operation not permitted when stream is capturing"}]
    assert result["c_fixed"] == pytest.approx(1e-3, rel=1e-6) and result["c_tok"] == pytest.approx(1e-3, rel=1e-6)
    with pytest.raises(RuntimeError):
        fit(model, grid)


def test_synthetic_traces_offer_what_the_tokens_repeat():
    """The GPU check's synthetic n-gram acc_len: 1 + how far the tokens after the current token's
    last earlier occurrence match what follows, never past the offer."""
    import numpy as np

    names = runpy.run_path(str(SCRIPT))
    records = names["synthetic_traces"](50, {"prompt_len": 6, "new_tokens": 40}, requests=3)
    for r in records:
        tokens = np.concatenate([r.prompt_token_ids, r.output_token_ids])
        ngram = r.proposers["ngram"]
        for p in range(r.output_len):
            end = r.prompt_len + p
            earlier = [i for i in range(end - 1) if tokens[i] == tokens[end - 1]]
            follow = list(tokens[earlier[-1] + 1:end][:8]) if earlier else []  # known tokens only
            assert ngram.draft_len[p] == len(follow)
            matched = 0
            while matched < len(follow) and end + matched < tokens.size and follow[matched] == tokens[end + matched]:
                matched += 1
            assert ngram.acc_len[p] == 1 + matched
