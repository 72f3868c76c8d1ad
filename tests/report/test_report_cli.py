"""`specscope report` end to end, with measured step records, and its errors."""

from __future__ import annotations

import csv
import html
import json

from specscope.cli import main


def _steps(path, lines):
    path.write_text("\n".join(json.dumps(line) if isinstance(line, dict) else line for line in lines) + "\n")
    return path


STEP = {"step": 0, "method": "eagle", "k": 3, "batch_size": 4, "tokens_verified": 16, "tokens_emitted": [2, 3, 1, 4],
        "draft_s": 0.003, "verify_s": 0.012, "sample_s": 0.0005, "overhead_s": 0.001, "kv_tokens": 800,
        "prefill_tokens": 0, "prefill_s": 0.0}


def test_report_cli_with_measured_steps(synthetic_traces, tmp_path, capsys):
    steps = _steps(tmp_path / "steps.jsonl", [STEP, {**STEP, "step": 1, "method": "ngram", "draft_s": 0.0002}])
    out = tmp_path / "out"
    code = main(["report", *map(str, synthetic_traces[:1]), "--batch-sizes", "1,16", "--mode", "paper",
                 "--ks", "2,4", "--steps", str(steps), "-o", str(out)])
    assert code == 0
    assert "index.html (8 figures" in capsys.readouterr().out
    with (out / "timesplit.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    measured = [r for r in rows if r["source"] == "measured"]
    assert [r["method"] for r in measured] == ["eagle", "ngram"]
    with (out / "speedup.csv").open() as handle:
        policies = {r["policy"] for r in csv.DictReader(handle)}
    assert policies == {"fixed:2", "fixed:4", "adaptive", "oracle", "oracle-combined:ngram+eagle"}


def test_report_cli_errors(synthetic_traces, tmp_path, capsys):
    steps = _steps(tmp_path / "steps.jsonl", [STEP, {**STEP, "verify_s": "slow"}])
    assert main(["report", str(synthetic_traces[0]), "--steps", str(steps), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "steps.jsonl:2: field 'verify_s'" in err
    assert main(["report", str(synthetic_traces[0]), "--cost-model", "nope", "-o", str(tmp_path / "o")]) == 2
    assert "cost model 'nope'" in capsys.readouterr().err
    taken = tmp_path / "file"
    taken.write_text("")
    assert main(["report", str(synthetic_traces[0]), "-o", str(taken)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_measured_cells_are_checked_against_the_reports_own_simulation(synthetic_traces, tmp_path, capsys):
    """Bench rows of the traces' workload get the report's simulated speedup for the same method,
    k and batch size (a cell it cannot simulate — k beyond the traces — is named in a note); a
    second report into the folder removes the files of the first that it does not write."""
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps([{"workload": "chat.jsonl", "method": "ngram", "k": 2, "batch_size": 1, "speedup": 1.3},
                                    {"workload": "chat.jsonl", "method": "ngram", "k": 60, "batch_size": 1, "speedup": 2.0}]))
    out = tmp_path / "out"
    base = ["report", str(synthetic_traces[0]), "--batch-sizes", "1,8", "--ks", "2,4", "-o", str(out)]
    assert main([*base, "--measured", str(measured)]) == 0
    err = capsys.readouterr().err
    assert "1 of 2 measured cells have no simulated counterpart" in err
    assert "1 measured cells are set beside the simulation of the traces' dataset of their workload's name" in err
    assert "compared in paper mode" not in err
    assert "measured cells: 2 (--measured: " in (out / "index.html").read_text()  # the option that gave them
    with (out / "measured.csv").open() as handle:
        rows = {r["k"]: r for r in csv.DictReader(handle)}
    with (out / "speedup.csv").open() as handle:
        simulated = next(float(r["speedup"]) for r in csv.DictReader(handle)
                         if (r["acc"], r["policy"], r["batch_size"]) == ("ngram", "fixed:2", "1"))
    assert float(rows["2"]["simulated_speedup"]) == simulated and rows["60"]["simulated_speedup"] == ""
    assert (out / "measured.csv").exists() and any(out.glob("fig*_measured.png"))
    assert "dashed what the simulator predicted" in (out / "index.html").read_text(encoding="utf-8")
    measured.write_text(json.dumps([{"workload": "chat.jsonl", "method": "ngram", "k": 60, "batch_size": 1,
                                     "speedup": 2.0}]))  # nothing simulated: no dashed line to describe
    assert main([*(a if a != "1,8" else "1,8,60000" for a in base), "--measured", str(measured)]) == 0
    page = html.unescape((out / "index.html").read_text(encoding="utf-8"))
    assert "nothing was simulated for these runs" in page and "dashed what the simulator" not in page
    assert "batch sizes 1, 8 (60000 left out of mixed mode: more than a dataset's requests)" in page
    (out / "mine.txt").write_text("kept")
    assert main(base) == 0
    assert not (out / "measured.csv").exists() and not any(out.glob("fig*_measured.png"))
    assert (out / "mine.txt").read_text() == "kept"  # not the report's: left alone


def test_report_refuses_to_write_over_its_inputs(synthetic_traces, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    trace = out / "stats.csv"  # a trace under the name of a table the report writes
    trace.write_bytes(synthetic_traces[0].read_bytes())
    assert main(["report", str(trace), "--batch-sizes", "1", "-o", str(out)]) == 2
    assert "the report writes stats.csv there, an input of this run" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["stats.csv"] and trace.read_bytes() == synthetic_traces[0].read_bytes()


def test_a_cost_model_that_prices_no_lookup_leaves_the_overlap_figure_out(synthetic_traces, tmp_path, capsys):
    """A model fitted to EAGLE's steps alone (the README's bench → costmodel fit → report path) over
    traces that also hold n-gram: the report was refused ('no drafting model for proposer ngram');
    it is written without the overlap figure, saying why."""
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"kind": "linear", "name": "model", "overhead_s": 0.0, "pads_verification": False,
                                 "forward": {"c_fixed": 1e-3, "c_tok": 1e-5, "c_kv": 0.0, "c_req": 0.0, "c_multi": 0.0},
                                 "drafting": {"eagle": {"kind": "linear", "c_fixed": 1e-4, "c_tok": 1e-5, "c_kv": 0.0,
                                                       "c_req": 0.0}}}))
    out = tmp_path / "out"
    assert main(["report", str(synthetic_traces[0]), "--cost-model", str(model), "--batch-sizes", "1,8",
                 "-o", str(out)]) == 0
    said = capsys.readouterr()
    assert "figure 'overlap' not drawn" in said.out + said.err and (out / "index.html").is_file()
