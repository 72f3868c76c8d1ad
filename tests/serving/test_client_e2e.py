"""The OpenAI client against `specscope serve` on loopback: real sockets, real HTTP.

The acceptance the client measures from ``/metrics`` deltas must equal the engine's own
counters, and a closed loop at concurrency 32 must finish with no failed request.
"""

from __future__ import annotations

import shutil

import pytest
from serving_helpers import VOCAB, start_server, write_workload

from specscope.backends.openai import metrics
from specscope.backends.openai.client import ClientConfig, run_load
from specscope.backends.openai.measure import measure
from specscope.backends.openai.prompts import read_prompts, select_prompts

pytestmark = pytest.mark.slow  # a real server on loopback


def test_measured_acceptance_equals_engine_counters_at_concurrency_32(ngram_server, tmp_path):
    prompts = read_prompts(write_workload(tmp_path / "w.jsonl", 32))
    config = ClientConfig(ngram_server.url, "tiny", max_tokens=48, ignore_eos=True)
    engine = ngram_server.engine
    before = metrics.scrape(ngram_server.url)
    assert engine.stats.num_drafts == 0  # a fresh server: the engine's counters cover exactly this run
    load = run_load(config, prompts, concurrency=32)
    after = metrics.scrape(ngram_server.url)
    assert load.failed == []
    assert [r.output_tokens for r in load.results] == [48] * 32
    d = metrics.delta(before, after)
    stats = engine.stats
    assert d.num_drafts == stats.num_drafts > 0
    assert d.num_draft_tokens == stats.num_draft_tokens
    assert d.num_accepted_tokens == stats.num_accepted_tokens > 0
    assert d.num_accepted_tokens_per_pos == list(stats.num_accepted_tokens_per_pos)
    assert d.acceptance_rate == pytest.approx(stats.acceptance_rate())
    assert d.drafting_acceptance_length == pytest.approx(1 + stats.num_accepted_tokens / stats.num_drafts)
    assert max(r.batch_size for r in engine.step_records) >= 16  # requests really were batched
    summary = load.summary()
    assert summary["num_failed"] == 0 and summary["output_tokens"] == 32 * 48
    # τ from the stream: the tokens after each request's first over its chunks after the first, one
    # per engine step (the engine's own τ also counts the few tokens its last steps emitted past max_tokens)
    assert summary["mean_acceptance_length"] == pytest.approx(32 * 47 / stats.num_request_steps)
    assert summary["throughput"] > 0 and 0 < summary["ttft_p50_s"] <= summary["ttft_p99_s"]
    assert summary["tpot_p50_s"] > 0 and summary["itl_p50_s"] > 0


def test_measure_row_and_cycled_prompts(ngram_server, tmp_path):
    path = write_workload(tmp_path / "w.jsonl", 5)
    prompts = select_prompts(read_prompts(path), 12, path)
    assert [p.id for p in prompts][5:7] == ["r0#1", "r1#1"]
    row = measure(ClientConfig(ngram_server.url, max_tokens=16, ignore_eos=True), prompts, 4)
    stats = ngram_server.engine.stats
    assert row["model_name"] == "tiny" and row["num_requests"] == 12 and row["output_tokens"] == 12 * 16
    assert row["acceptance_source"].startswith("vllm counters")
    assert 0 < row["num_drafts"] <= stats.num_drafts  # the warm-up ran before the first scrape
    assert row["conditional_acceptance_rate"][0] == pytest.approx(
        row["num_accepted_tokens_per_pos"][0] / row["num_drafts"]
    )


def test_text_prompts_are_tokenised_by_the_server(tiny_model, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    model_dir = tmp_path / "with-tokenizer"
    shutil.copytree(tiny_model, model_dir)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(model_dir / "tokenizer.json"))
    workload = tmp_path / "text.jsonl"
    workload.write_text(
        '{"id": "a", "prompt": "w5 w6 w7 w8 w5 w6 w7"}\n{"id": "b", "prompt_token_ids": [5, 6, 7, 8, 5, 6, 7]}\n'
    )
    running = start_server(model_dir, "none", max_batch_size=2)
    try:
        load = run_load(
            ClientConfig(running.url, "tiny", max_tokens=10, ignore_eos=True), read_prompts(workload), 2
        )
    finally:
        running.close()
    assert load.failed == [] and [r.output_tokens for r in load.results] == [10, 10]


def test_openai_bench_with_baseline_url(tiny_model, tmp_path):
    from specscope.cli import build_parser
    from specscope.cli.bench import bench_config, run_bench

    plain = start_server(tiny_model, "none", max_batch_size=4)
    ngram = start_server(tiny_model, "ngram", k=3, max_batch_size=4)
    try:
        args = build_parser().parse_args(  # the bench verb's own parser
            [
                "bench",
                "--backend",
                "openai",
                "--url",
                ngram.url,
                "--baseline-url",
                plain.url,
                "--method",
                "ngram",
                "--k",
                "3",
                "--workload",
                str(write_workload(tmp_path / "w.jsonl", 8)),
                "--max-tokens",
                "16",
                "--ignore-eos",
                "--batch-sizes",
                "1,4",
            ]
        )
        rows = [row.flat() for row in run_bench(bench_config(args)).rows]
    finally:
        plain.close()
        ngram.close()
    assert [(r["method"], r["k"], r["batch_size"]) for r in rows] == [("ngram", 3, 1), ("ngram", 3, 4)]
    for row in rows:
        assert row["speedup"] == pytest.approx(row["throughput"] / row["baseline_throughput"])
        assert row["num_draft_tokens"] > 0 and 0 <= row["acceptance_rate"] <= 1
        assert row["mean_acceptance_length"] >= 1 and row["baseline_tpot_p50_s"] > 0


def test_openai_bench_interleaves_the_two_servers_in_segments(tiny_model, tmp_path, capsys):
    """--segments 3: the no-SD and SD servers take turns over three parts of the requests; each
    row counts its own server's time, and its counters cover all its requests."""
    from specscope.cli import build_parser, main
    from specscope.cli.bench import bench_config, run_bench

    plain = start_server(tiny_model, "none", max_batch_size=2)
    ngram = start_server(tiny_model, "ngram", k=3, max_batch_size=2)
    workload = str(write_workload(tmp_path / "w.jsonl", 6))
    base = ["bench", "--backend", "openai", "--url", ngram.url, "--method", "ngram", "--k", "3", "--workload",
            workload, "--max-tokens", "8", "--ignore-eos", "--batch-sizes", "2", "--segments", "3"]
    try:
        [row] = [r.flat() for r in run_bench(bench_config(build_parser().parse_args(
            base + ["--baseline-url", plain.url]))).rows]
        assert main(base) == 2  # nothing to interleave with
        assert "--segments" in capsys.readouterr().err
    finally:
        plain.close()
        ngram.close()
    assert row["speedup"] == pytest.approx(row["throughput"] / row["baseline_throughput"])
    assert row["output_tokens"] == 6 * 8 and row["num_requests"] == 6
    assert row["num_drafts"] > 0


def test_launched_servers_interleaved(tiny_model, tmp_path):
    """--launch with --segments: both servers launched at once, each row checked and measured."""
    from specscope.cli import build_parser
    from specscope.cli.bench import bench_config, run_bench

    args = build_parser().parse_args(
        ["bench", "--backend", "openai", "--launch", "specscope", "--model", str(tiny_model), "--method", "ngram",
         "--k", "2", "--workload", str(write_workload(tmp_path / "w.jsonl", 4)), "--max-tokens", "8",
         "--ignore-eos", "--batch-sizes", "1", "--segments", "2", "--engine-args=--threads 1",
         "--log-dir", str(tmp_path / "logs")])
    [row] = [r.flat() for r in run_bench(bench_config(args)).rows]
    assert row["speedup"] == pytest.approx(row["throughput"] / row["baseline_throughput"])
    assert row["verified"].startswith("verified: SD on, k=2") and row["baseline_verified"].startswith("verified: SD off")
    assert len(list((tmp_path / "logs").glob("*.log"))) == 2


def test_server_check_reads_k_and_sd_from_real_servers(tiny_model, fake_server):
    from specscope.backends.openai.verify import ServerCheckError, check_server, inspect_server

    ngram = start_server(tiny_model, "ngram", k=3, max_batch_size=2)
    plain = start_server(tiny_model, "none", max_batch_size=2)
    try:
        view = inspect_server(ngram.url)
        assert (view.models, view.engine, view.spec_decode, view.k) == (("tiny",), "vllm", True, 3)
        assert inspect_server(plain.url).spec_decode is False
        _, text = check_server(ngram.url, "eagle", 3, str(tiny_model.parent / "tiny"))  # a directory: its name
        assert text == "verified: model " + str(tiny_model.parent / "tiny") + ", SD on, k=3; " \
                       "not verified: method eagle (not shown by the server)"
        assert check_server(plain.url, "none", 0)[1] == "verified: SD off"
        with pytest.raises(ServerCheckError, match="--k 4: the server at .* shows k=3"):
            check_server(ngram.url, "ngram", 4)
    finally:
        ngram.close()
        plain.close()
    # SGLang's gauges show nothing of SD before a request: said, not guessed
    _, text = check_server(fake_server("ok", metrics="sglang").url, "ngram", 3)
    assert text == "not verified: SD on, k=3 (SGLang gauges do not show it), method ngram (not shown by the server)"
    _, text = check_server(fake_server("ok", metrics="none").url, "none", 0)
    assert text.startswith("not verified: SD off (") and "HTTP 404" in text


def test_warm_up_prompt_is_not_measured_when_the_workload_has_one_left(tmp_path):
    from specscope.backends.openai.prompts import warmup_prompt

    prompts = read_prompts(write_workload(tmp_path / "w.jsonl", 5))
    assert warmup_prompt(prompts, 3) == (prompts[3], False)
    assert warmup_prompt(prompts, None) == (prompts[0], True)
    assert warmup_prompt(prompts, 12) == (prompts[0], True)
