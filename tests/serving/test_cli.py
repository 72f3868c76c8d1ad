"""`specscope serve` and `specscope sweep` as commands: a real server process, user errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from serving_helpers import write_workload

from specscope.backends.openai.client import ClientConfig, stream_completion
from specscope.backends.openai.prompts import Prompt

pytestmark = pytest.mark.slow  # real server processes


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specscope", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


@pytest.mark.parametrize("sigint_ignored", [False, True])
def test_serve_process_answers_and_stops_on_sigterm(tiny_model, sigint_ignored):
    """Also when started where SIGINT is ignored (`serve ... &` from a script): SIGTERM was then left
    to kill the server on the spot, its clients cut off without an answer."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specscope",
            "serve",
            "--model",
            str(tiny_model),
            "--method",
            "ngram",
            "--k",
            "2",
            "--port",
            "0",
            "--max-batch-size",
            "2",
            "--threads",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )
    try:
        line = process.stderr.readline()  # printed once listening
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        result = stream_completion(
            ClientConfig(match.group(1), max_tokens=6, model=tiny_model.name),
            Prompt("a", token_ids=(4, 5, 6, 4, 5, 6)),
        )
        assert result.error is None and result.output_tokens == 6
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
    assert process.returncode == 128 + signal.SIGTERM  # stopped as by Ctrl-C: said, no traceback
    assert process.stderr.read().strip().endswith("specscope: interrupted")


def test_serve_user_errors():
    result = run_cli("serve", "--model", "/no/such/dir")
    assert (
        result.returncode == 2
        and "specscope: error: --model: /no/such/dir is not a directory" in result.stderr
    )
    result = run_cli("serve", "--model", ".", "--k", "0")
    assert result.returncode == 2 and "argument --k: expected an integer >= 1, got 0" in result.stderr

def test_serve_confidence_stops_the_drafter_and_is_refused_where_it_cannot(tiny_model):
    """--confidence P: a self-drafting server (every draft certain, so nothing stops) names it and
    answers; a lookup, a tree, --policy are refused before the model loads."""
    process = subprocess.Popen(
        [sys.executable, "-m", "specscope", "serve", "--model", str(tiny_model), "--method", "draft", "--draft",
         str(tiny_model), "--k", "3", "--confidence", "0.5", "--port", "0", "--max-batch-size", "1", "--threads", "1"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        line = process.stderr.readline()
        assert "(draft, k ≤ 3, confidence 0.5, max batch 1" in line, line
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", line).group(1)
        result = stream_completion(ClientConfig(url, max_tokens=6, model=tiny_model.name),
                                   Prompt("a", token_ids=(4, 5, 6, 4, 5, 6)))
        assert result.error is None and result.output_tokens == 6
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
    for extra, message in ((["--method", "ngram"], "--confidence: needs a model drafter"),
                           (["--method", "draft", "--draft", str(tiny_model), "--tree", "2x1"], "not tree 2x1"),
                           (["--policy", "p.json"], "--confidence: not used with --policy")):
        result = run_cli("serve", "--model", str(tiny_model), "--confidence", "0.5", *extra)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_sweep_dry_run_and_bad_config(tmp_path):
    write_workload(tmp_path / "a.jsonl", 8)  # B = 8 needs 8 requests at once
    config = tmp_path / "s.toml"
    config.write_text(
        'output = "out"\nworkloads = ["a.jsonl"]\nmethods = ["none", "ngram"]\nk = [2, 4]\n'
        'batch_sizes = [1, 8]\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\n'
    )
    result = run_cli("sweep", str(config), "--dry-run", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 2 + 4 and {r["state"] for r in rows} == {"pending"}
    assert not (tmp_path / "out").exists()
    config.write_text('output = "out"\n')
    result = run_cli("sweep", str(config))
    assert (
        result.returncode == 2 and "field 'workloads'" in result.stderr and "Traceback" not in result.stderr
    )


def test_bench_openai_backend_through_the_cli(tiny_model, tmp_path, capsys):
    """`specscope bench --backend openai` against two real loopback servers (no SD and n-gram)."""
    import json

    from serving_helpers import start_server, write_workload

    from specscope.cli import main

    workload = write_workload(tmp_path / "w.jsonl", 8)
    baseline = start_server(tiny_model, method="none", max_batch_size=4)
    sd = start_server(tiny_model, method="ngram", k=3, max_batch_size=4)
    args = ["bench", "--backend", "openai", "--url", sd.url, "--baseline-url", baseline.url,
            "--method", "ngram", "--k", "3", "--workload", str(workload), "--max-tokens", "16"]
    try:
        assert main([*args, "--batch-sizes", "1,4", "--format", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert main([*args, "--batch-sizes", "2", "-o", "-"]) == 0  # the rows on stdout, the table on stderr
        streams = capsys.readouterr()
    finally:
        sd.close()
        baseline.close()
    import csv
    import io

    [streamed] = list(csv.DictReader(io.StringIO(streams.out)))
    assert (streamed["method"], streamed["k"], streamed["batch_size"]) == ("ngram", "3", "2")
    assert "speedup" in streams.err and "SD server: verified: SD on, k=3" in streams.err
    assert rows[0]["verified"] == "verified: SD on, k=3; not verified: method ngram (not shown by the server)"
    assert rows[0]["baseline_verified"] == "verified: SD off"
    assert rows[0]["learns_across_requests"] is False
    assert [r["batch_size"] for r in rows] == [1, 4]
    for row in rows:
        assert {"method", "k", "batch_size", "throughput", "baseline_throughput", "speedup", "acceptance_rate",
                "mean_acceptance_length", "num_drafts", "num_draft_tokens", "num_accepted_tokens"} <= set(row)
        assert row["speedup"] > 0 and row["num_draft_tokens"] >= row["num_accepted_tokens"]
    assert main(["bench", "--workload", str(workload)]) == 2  # the reference backend needs --model


def test_sweep_names_the_sd_cells_that_proposed_no_draft():
    """A cell whose server counted no draft measured SD doing nothing (its speedup is noise
    around 1): named; one with drafts, a failed one, the baseline and one whose counters are
    unknown are not."""
    from specscope.cli.sweep import idle_cells

    rows = [{"method": "none", "k": 0, "batch_size": 1, "status": "ok", "num_drafts": 0},
            {"method": "ngram", "k": 2, "batch_size": 1, "status": "ok", "num_drafts": 0},
            {"method": "ngram", "k": 2, "batch_size": 4, "status": "ok", "num_drafts": 17},
            {"method": "ngram", "k": 4, "batch_size": 1, "status": "failed", "num_drafts": 0},
            {"method": "eagle", "k": 2, "batch_size": 1, "status": "ok", "num_drafts": None}]
    assert idle_cells(rows) == ["ngram k=2 B=1"]

