"""A sweep's model names the engine it was fitted to and the sweep it came from (its folder and
the SHA-256 of its results.json), so that a report can tell which engine its what-if checks; a
file without them (older, hand-written) still reads, and a malformed one is refused by field."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specscope.backends.openai.sweep_config import key_id
from specscope.costmodel.calibrate import fit_cells
from specscope.costmodel.linear import FittedSweep, linear_from_json
from specscope.errors import SpecscopeError

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # the simulated engine's timelines
from calibration_helpers import simulated_cell  # noqa: E402


def write_sweep(folder: Path, engine: str) -> None:
    """A sweep folder of simulated cells (no SD and draft k = 2, 4, at B = 1 and 2) of ``engine``,
    with the results.json that lists them."""
    (folder / "cells").mkdir(parents=True)
    rows = []
    for run in [simulated_cell("none", 0, b) for b in (1, 2)] + [simulated_cell("draft", k, b) for k in (2, 4)
                                                                  for b in (1, 2)]:
        key = {"engine": {"name": engine}, "method": run.method, "k": run.k, "batch_size": run.batch_size,
               "workload": "w.jsonl"}
        span = max(r["sent_ms"] + r["chunk_ms"][-1] for r in run.timeline) / 1000
        tokens = sum(r["output_tokens"] for r in run.timeline)
        result = {"output_tokens": tokens, "duration_s": span, "throughput": tokens / span,
                  "num_draft_tokens": run.num_draft_tokens, "num_drafts": run.num_drafts,
                  "num_accepted_tokens": run.num_accepted_tokens, "metrics_error": None}
        record = {"cell_id": key_id(key), "key": key, "status": "ok", "reason": None, "started_at": 0.0,
                  "finished_at": 1.0, "result": result, "timeline": run.timeline}
        (folder / "cells" / f"{key_id(key)}.json").write_text(json.dumps(record))
        rows.append({"cell_id": key_id(key), "status": "ok", "throughput": result["throughput"]})
    (folder / "results.json").write_text(json.dumps(rows))


def test_a_sweeps_model_names_its_engine_and_sweep(tmp_path, capsys):
    """engine.json recorded the cells it was fitted to but not the engine or the sweep: a report
    then checked it against another server's cells unsaid (a review)."""
    from specscope.cli import main

    write_sweep(tmp_path / "calib", "ref")
    assert main(["costmodel", "fit", "--from-sweep", str(tmp_path / "calib"), "-o", str(tmp_path / "m.json")]) == 0
    document = json.loads((tmp_path / "m.json").read_text())
    digest = hashlib.sha256((tmp_path / "calib" / "results.json").read_bytes()).hexdigest()
    assert document["engine"] == "ref"
    assert document["sweep"] == {"folder": str((tmp_path / "calib").resolve()), "results_sha256": digest}
    model = linear_from_json(document, "m.json")
    assert (model.engine, model.sweep) == ("ref", FittedSweep(str((tmp_path / "calib").resolve()), digest))
    assert model.sweep.describe() == f"{(tmp_path / 'calib').resolve()} (results.json SHA-256 {digest[:12]})"
    older = {key: value for key, value in document.items() if key not in ("engine", "sweep")}
    assert (linear_from_json(older, "old.json").engine, linear_from_json(older, "old.json").sweep) == ("", None)
    for change, field in ((lambda d: d["sweep"].update(results_sha256="c4274d"), "sweep.results_sha256"),
                          (lambda d: d["sweep"].update(file="results.json"), "sweep.file"),
                          (lambda d: d.update(engine=""), "engine"),
                          (lambda d: d.pop("fitted_cells"), "engine")):  # a sweep's engine without its cells
        broken = json.loads(json.dumps(document))
        change(broken)
        with pytest.raises(SpecscopeError, match=f"m.json: field '{re.escape(field)}'"):
            linear_from_json(broken, "m.json")
    assert linear_from_json({**document, "sweep": {**document["sweep"], "results_sha256": None}}, "m.json").sweep \
        .describe().endswith("(no results.json: every cell record fitted)")


def test_cells_of_two_engines_are_not_one_model():
    with pytest.raises(SpecscopeError, match="calibration: cells of engines 'a', 'b'; a cost model describes one"):
        fit_cells([replace(simulated_cell("none", 0, 1), engine="a"), replace(simulated_cell("draft", 2, 1), engine="b")])
