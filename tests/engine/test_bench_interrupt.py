"""An interrupted bench keeps the batch sizes it finished (probe: a Ctrl-C after B = 1 had
finished lost it, and the step records with it)."""

from __future__ import annotations

import csv
import dataclasses

from specscope.backends import BenchResult


def test_an_interrupted_bench_writes_the_batch_sizes_it_finished(tmp_path, monkeypatch, capsys):
    import specscope.cli.bench as bench
    from specscope.cli import main

    def stops_after_the_first(config, into: BenchResult):
        from specscope.backends.reference import run_bench

        first = run_bench(dataclasses.replace(config, batch_sizes=config.batch_sizes[:1]), into)
        assert first.rows
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_bench", stops_after_the_first)
    from specscope.workloads.bundled import bundled_path
    from specscope.zoo.shipped import model_dir

    out, records = tmp_path / "rows.csv", tmp_path / "steps.jsonl"
    code = main(["bench", "--backend", "reference", "--model", str(model_dir("target")), "--workload",
                 str(bundled_path("code")), "--method", "ngram", "--k", "2", "--batch-sizes", "1,2", "--max-tokens",
                 "8", "--repeats", "1", "-o", str(out), "--records", str(records)])
    assert code == 130
    assert out.read_text().count("\n") == 2 and records.read_text().strip()  # header + B = 1
    (named,) = csv.DictReader(out.read_text().splitlines())  # what ran: two checkpoints' rows were alike
    assert (named["model"], named["draft"], named["repeats"]) == ("target", "", "1")
    from specscope.engine.config import model_fingerprint  # and which target, in which precision, where

    assert named["model_files"] == model_fingerprint(model_dir("target"))[:16] and named["draft_files"] == ""
    assert (named["dtype"], named["device"]) == ("float32", "cpu")
    # and which workload's content, which code, the seed its requests drew from (none given: 0), no policy
    from specscope.fingerprint import file_sha256
    from specscope.version import code_version

    assert named["workload_sha256"] == file_sha256(bundled_path("code"))[:16] and named["made_by"] == code_version()
    assert (named["seed"], named["policy_sha256"], named["threads"]) == ("0", "", "")
    assert "the 1 batch size(s) finished (B=1) are in" in capsys.readouterr().err


def test_an_interrupted_bench_prints_its_finished_rows_as_json_with_o_dash(monkeypatch, capsys):
    """``-o - --format json``: the finished batch sizes reach standard output as JSON on an
    interrupt too (a review: 0 bytes there, while the note said they were in standard output)."""
    import json

    import specscope.cli.bench as bench
    from specscope.cli import main
    from specscope.workloads.bundled import bundled_path
    from specscope.zoo.shipped import model_dir

    def stops_after_the_first(config, into: BenchResult):
        from specscope.backends.reference import run_bench

        run_bench(dataclasses.replace(config, batch_sizes=config.batch_sizes[:1]), into)
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_bench", stops_after_the_first)
    code = main(["bench", "--model", str(model_dir("target")), "--workload", str(bundled_path("code")), "--method",
                 "ngram", "--k", "2", "--batch-sizes", "1,2", "--max-tokens", "8", "--repeats", "1", "--threads", "1",
                 "-o", "-", "--format", "json"])
    out = capsys.readouterr()
    assert code == 130
    assert [row["batch_size"] for row in json.loads(out.out)] == [1]
    assert "the 1 batch size(s) finished (B=1) are in standard output" in out.err
