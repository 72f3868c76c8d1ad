"""`specscope bench --backend reference` end to end on a tiny model, and workload parsing."""

from __future__ import annotations

import json
import os

import pytest
import torch
from tiny_checkpoints import write_workload

from specscope.analysis.measured import read_bench_results
from specscope.analysis.timesplit import read_steps
from specscope.cli import main
from specscope.errors import SpecscopeError
from specscope.workloads.jsonl import read_workload

FIELDS = {
    "method",
    "k",
    "batch_size",
    "throughput",
    "baseline_throughput",
    "speedup",
    "acceptance_rate",
    "mean_acceptance_length",
}
RECORD_FIELDS = {
    "step",
    "method",
    "k",
    "batch_size",
    "tokens_verified",
    "tokens_emitted",
    "draft_s",
    "verify_s",
    "sample_s",
    "overhead_s",
    "kv_tokens",
    "prefill_tokens",
    "prefill_s",
    "prefill_requests",
    "tree",
    "policy_s",
    "prefill_width",
    "tokens_proposed",
    "choices",
    "kv_longest",
    "confidence",
    "policy_rows",
}


@pytest.fixture()
def workload(tmp_path):
    rows = [
        {"id": i, "prompt_token_ids": [2 + (7 * i + j) % 40 for j in range(4 + i)] * 2} for i in range(5)
    ]
    return write_workload(tmp_path / "w.jsonl", rows)


def test_a_runs_step_records_sum_to_its_wall_time(llama_dir, workload, tmp_path, capsys):
    """Each step record covers the whole step: what its clock did not see (its record and outputs
    made, finished requests released, the decode loop) is in its overhead_s, so a run's records
    sum to its wall_s (they fell 0.4-2.5 % short: a review)."""
    records = tmp_path / "steps.jsonl"
    assert main(["bench", "--backend", "reference", "--model", str(llama_dir), "--method", "draft", "--draft",
                 str(llama_dir), "--k", "2", "--batch-sizes", "2", "--workload", str(workload), "--max-tokens", "6",
                 "--repeats", "1", "--format", "json", "--threads", "1", "--records", str(records)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    steps = read_steps([records])
    for method, wall in (("draft", row["wall_s"]), ("none", row["baseline_wall_s"])):
        assert sum(s.prefill_s + s.decode_s for s in steps if s.method == method) == pytest.approx(wall, rel=1e-9)


@pytest.mark.parametrize("batching", ["distinct", "replicate"])
def test_bench_json_output_records_and_csv(llama_dir, workload, tmp_path, capsys, batching):
    code = main(
        [
            "bench",
            "--backend",
            "reference",
            "--model",
            str(llama_dir),
            "--method",
            "draft",
            "--draft",
            str(llama_dir),
            "--k",
            "2",
            "--batch-sizes",
            "1,4",
            "--workload",
            str(workload),
            "--max-tokens",
            "6",
            "--batching",
            batching,
            "--format",
            "json",
            "--threads",
            "1",
            "-o",
            str(tmp_path / "r.csv"),
            "--records",
            str(tmp_path / "steps.jsonl"),
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["batch_size"] for r in rows] == [1, 4]
    for row in rows:
        assert FIELDS <= set(row)
        assert row["method"] == "draft" and row["k"] == 2
        assert row["acceptance_rate"] == 1.0 and row["mean_acceptance_length"] > 1  # self-draft
        assert row["greedy_match"] is True and row["throughput"] > 0
        assert row["speedup"] == pytest.approx(row["throughput"] / row["baseline_throughput"])
    records = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert records and all(set(r) == RECORD_FIELDS for r in records)
    assert {r["method"] for r in records} == {"none", "draft"}
    assert (tmp_path / "r.csv").read_text().startswith("method,k,batch_size")
    steps = read_steps([tmp_path / "steps.jsonl"])  # the records read back as typed steps
    assert [s.method for s in steps] == [r["method"] for r in records] and steps[-1].run > steps[0].run == 0
    (tmp_path / "r.json").write_text(json.dumps(rows))
    cells = read_bench_results([tmp_path / "r.json"])  # the rows read back as measured cells
    assert [(c.dataset, c.method, c.k, c.batch_size) for c in cells] == [("w", "draft", 2, 1), ("w", "draft", 2, 4)]
    assert [c.measured_speedup for c in cells] == pytest.approx([r["speedup"] for r in rows])


def test_bench_method_none_runs_the_baseline_only(llama_dir, workload, tmp_path, capsys):
    records = tmp_path / "steps.jsonl"
    args = ["bench", "--model", str(llama_dir), "--method", "none", "--workload", str(workload)]
    assert (
        main(
            [
                *args,
                "--max-tokens",
                "4",
                "--batch-sizes",
                "1,2",
                "--format",
                "json",
                "--records",
                str(records),
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [(r["method"], r["k"], r["speedup"], r["acceptance_rate"], r["greedy_match"]) for r in rows] == [
        ("none", 0, 1.0, None, None)
    ] * 2  # k = 0: its rows said k = 3 (the default) of a run that proposed nothing
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert {r["method"] for r in lines} == {"none"}
    assert all(r["draft_s"] == 0 and r["k"] == 0 for r in lines)  # probe: the empty proposal's building was
    # timed as drafting, and the records said k = 3
    assert main([*args, "--max-tokens", "4", "--batch-sizes", "1", "--format", "json", "-o", "-"]) == 0
    out = capsys.readouterr()  # a review: -o - with json wrote CSV to standard output, the JSON to standard error
    assert json.loads(out.out)[0]["method"] == "none" and "method,k" not in out.out + out.err


def test_bench_table_and_user_errors(llama_dir, workload, tmp_path, capsys):
    assert (
        main(
            [
                "bench",
                "--model",
                str(llama_dir),
                "--method",
                "ngram",
                "--workload",
                str(workload),
                "--max-tokens",
                "4",
                "--batch-sizes",
                "2",
            ]
        )
        == 0
    )
    assert "speedup" in capsys.readouterr().out
    bad = write_workload(tmp_path / "bad.jsonl", [{"id": "a", "prompt": "hello"}])  # no tokenizer.json
    assert main(["bench", "--model", str(llama_dir), "--workload", str(bad), "--max-tokens", "4"]) == 2
    assert f"{bad}:1: field 'prompt'" in capsys.readouterr().err
    assert main(["bench", "--model", str(tmp_path), "--workload", str(workload)]) == 2
    assert (
        main(["bench", "--model", str(llama_dir), "--workload", str(workload), "--method", "nope"]) == 2
    )
    assert "unknown proposer" in capsys.readouterr().err
    big = write_workload(tmp_path / "big.jsonl", [{"id": "a", "prompt_token_ids": [1, 10_000]}])
    assert main(["bench", "--model", str(llama_dir), "--workload", str(big), "--max-tokens", "4"]) == 2
    assert f"{big}:1: field 'prompt_token_ids': token id 10000 is not below the model's vocabulary size" \
        in capsys.readouterr().err
    if not torch.cuda.is_available():
        args = ["bench", "--model", str(llama_dir), "--workload", str(workload), "--device", "cuda"]
        assert main(args) == 2
        assert "no CUDA device" in capsys.readouterr().err


def test_bench_refuses_a_batch_of_more_distinct_requests_than_the_workload_has(llama_dir, workload, capsys):
    """Five requests at --batch-sizes 16: at most five ever ran together, yet the row said batch
    size 16. Refused, naming the workload; replicate batching (B copies of each) may go past it."""
    base = ["bench", "--model", str(llama_dir), "--method", "ngram", "--workload", str(workload), "--max-tokens", "2"]
    assert main([*base, "--batch-sizes", "1,16"]) == 2
    assert ("--batch-sizes: 16 is above the 5 requests in flight at once (the 5 distinct requests of "
            f"{workload};") in capsys.readouterr().err
    assert main([*base, "--batch-sizes", "6", "--batching", "replicate", "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main([*base[:-1], "1", "--batch-sizes", "1", "--repeats", "1"]) == 0  # the prefill's token only
    assert "note: B=1: no SD step proposed a draft" in capsys.readouterr().err


@pytest.mark.parametrize(
    "line,match",
    [
        ("not json", ":2: invalid JSON"),
        ('["a"]', ":2: expected a JSON object"),
        ('{"prompt_token_ids": [1]}', ":2: field 'id'"),
        ('{"id": "x", "prompt_token_ids": []}', ":2: field 'prompt_token_ids'"),
        ('{"id": "x", "prompt_token_ids": [1, -2]}', ":2: field 'prompt_token_ids'"),
        ('{"id": "x"}', ":2: expected exactly one"),
        ('{"id": "a", "prompt_token_ids": [1]}', ":2: field 'id': 'a' already used on line 1"),
        ('{"id": "x", "prompt": "hi", "max_tokens": 2}', ":2: field 'max_tokens': unknown field"),  # was ignored
        ('{"id": "x", "prompt_ids": [1]}', ":2: field 'prompt_ids': unknown field"),
    ],
)
def test_workload_errors_name_file_and_line(tmp_path, line, match):
    path = tmp_path / "w.jsonl"
    path.write_text('{"id": "a", "prompt_token_ids": [1, 2]}\n' + line + "\n")
    with pytest.raises(SpecscopeError, match=match):
        read_workload(path)


def test_text_prompts_use_the_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "w.jsonl"
    path.write_text('{"id": 1, "prompt": "hello world again"}\n\n{"id": 2, "prompt_token_ids": [2]}\n')
    requests = read_workload(path, tokenizer)
    assert [(r.id, r.prompt_token_ids) for r in requests] == [("1", [1, 2, 0]), ("2", [2])]


def test_bench_text_workload_with_tokenizer_and_sampling(llama_dir, tmp_path, capsys):
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers

    model = tmp_path / "model"
    shutil.copytree(llama_dir, model)
    words = {f"w{i}": i for i in range(40)}
    tokenizer = Tokenizer(models.WordLevel({**words, "[UNK]": 40}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(model / "tokenizer.json"))
    workload = write_workload(tmp_path / "w.jsonl", [{"id": "t", "prompt": "w3 w4 w5 w3 w4 w5 w3 w4"}])
    assert (
        main(
            [
                "bench",
                "--model",
                str(model),
                "--method",
                "ngram",
                "--workload",
                str(workload),
                "--max-tokens",
                "5",
                "--batch-sizes",
                "1,2",
                "--batching",
                "replicate",  # one request: a batch of 2 is two copies of it
                "--temperature",
                "0.7",
                "--seed",
                "3",
                "--format",
                "json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["greedy_match"] for r in rows] == [None, None]  # sampling: no token-for-token check
    assert all(r["generated_tokens"] > 0 for r in rows)
    assert all((r["temperature"], r["seed"], r["max_tokens"], r["top_p"], r["top_k"], r["ignore_eos"])
               == (0.7, 3, 5, 1.0, 0, False) for r in rows)  # each row says how its outputs were made


def test_openai_engine_args_with_bad_quoting_is_one_line(workload, capsys):
    argv = ["bench", "--backend", "openai", "--launch", "specscope", "--model", "m", "--workload", str(workload),
            "--engine-args", '--dtype "bfloat16']
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--engine-args: No closing quotation" in err and "Traceback" not in err


@pytest.mark.parametrize("launch, engine_args, message", [
    ("vllm", "--max-num-seqs 1", "--max-num-seqs is set by the bench from each run (method, k, batch size, port)"),
    ("sglang", "--max_running_requests=1", "--max_running_requests=1 is set by the bench"),
    ("specscope", "--threads 1 --confidence 0.5", "--confidence: the bench measures fixed-k chains"),
])
def test_openai_engine_args_may_not_set_what_the_bench_sets(workload, tmp_path, monkeypatch, capsys, launch,
                                                            engine_args, message):
    """--engine-args="--max-num-seqs 1" came after the launcher's own --max-num-seqs 8: vLLM ran one
    request at a time under a row saying B=8. Refused before any server starts."""
    fake = tmp_path / "bin" / "vllm"  # a vllm that logs its command line
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "argv.txt"}\nexit 3\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    argv = ["bench", "--backend", "openai", "--launch", launch, "--model", "m", "--method", "ngram", "--workload",
            str(workload), "--batch-sizes", "1", f"--engine-args={engine_args}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--engine-args: {message}" in err
    assert not (tmp_path / "argv.txt").exists()


def test_bench_self_draft_tree_accepts_the_full_depth(llama_dir, workload, tmp_path, capsys):
    """Self-draft (draft = target) with a 2x2x1 tree: every step accepts a whole root path,
    τ = depth + 1 = 4 exactly; greedy output equals no-SD; rows, cells and records name the tree."""
    argv = ["bench", "--model", str(llama_dir), "--method", "draft", "--draft", str(llama_dir), "--tree", "2x2x1",
            "--batch-sizes", "1,4", "--workload", str(workload), "--max-tokens", "9", "--threads", "1",
            "--repeats", "1", "--records", str(tmp_path / "steps.jsonl"), "-o", str(tmp_path / "r.json")]
    assert main(argv) == 0
    assert "2x2x1 (10 nodes, depth 3)" in capsys.readouterr().out
    rows = json.loads((tmp_path / "r.json").read_text())
    assert [(r["k"], r["tree"], r["tree_nodes"], r["tree_depth"]) for r in rows] == [(10, "2x2x1", 10, 3)] * 2
    assert [r["mean_acceptance_length"] for r in rows] == [4.0, 4.0]
    assert [r["acceptance_rate"] for r in rows] == pytest.approx([0.3, 0.3])  # 3 of 10 nodes per step
    assert all(r["greedy_match"] is True for r in rows)
    assert {c.tree for c in read_bench_results([tmp_path / "r.json"])} == {"2x2x1"}
    steps = read_steps([tmp_path / "steps.jsonl"])
    assert {(s.method, s.tree) for s in steps} == {("none", None), ("draft", "2x2x1")}
    assert all(s.tokens_verified == 11 * s.batch_size for s in steps if s.method == "draft" and s.verify_s > 0)


@pytest.mark.parametrize("extra,message", [
    (["--k", "2", "--tree", "2x1"], "argument --tree: not allowed with argument --k"),
    (["--method", "ngram", "--tree", "2x1"], "the 'ngram' method drafts chains only"),
    (["--method", "none", "--tree", "2x1"], "--tree: tree 2x1 needs an SD method"),
    (["--tree", "2x0"], "--tree"),
    (["--method", "ngram", "--confidence", "0.5"], "--confidence: needs a model drafter"),
    (["--method", "draft", "--tree", "2x1", "--confidence", "0.5"], "not tree 2x1"),
    (["--policy", "p.json", "--confidence", "0.5"], "--confidence: not with --policy"),
    (["--method", "ngram", "--beside", "2"], "--beside: only with --policy"),
    (["--backend", "openai", "--url", "http://127.0.0.1:1", "--confidence", "0.5"], "only with --backend reference"),
    (["--method", "draft", "--confidence", "0"], "--confidence"),
])
def test_bench_tree_and_confidence_errors_are_one_line(llama_dir, workload, tmp_path, capsys, extra, message):
    (tmp_path / "p.json").write_text("{}")
    extra = [str(tmp_path / a) if a == "p.json" else a for a in extra]
    try:  # usage errors exit from argparse, the others return 2
        code = main(["bench", "--model", str(llama_dir), "--workload", str(workload), "--max-tokens", "2", *extra])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_bench_confidence_stops_the_drafter_and_names_the_rule(llama_dir, draft_dir, workload, tmp_path, capsys):
    """--confidence P: rows say it, the table labels it and its k 'at most', the measured cell
    replays as confidence:P:k in the simulator; greedy output equals no SD's; fewer drafts than k
    a step (the tiny drafter's probabilities are of the order of 0.05)."""
    argv = ["bench", "--model", str(llama_dir), "--method", "draft", "--draft", str(draft_dir), "--k", "4",
            "--confidence", "0.05", "--batch-sizes", "1,4", "--workload", str(workload), "--max-tokens", "9",
            "--threads", "1", "--repeats", "1", "-o", str(tmp_path / "r.json")]
    assert main(argv) == 0
    assert "draft confidence:0.05" in capsys.readouterr().out
    rows = json.loads((tmp_path / "r.json").read_text())
    assert [(r["k"], r["confidence"], r["greedy_match"]) for r in rows] == [(4, 0.05, True)] * 2
    assert all(r["num_draft_tokens"] < 4 * r["num_drafts"] for r in rows)
    cells = read_bench_results([tmp_path / "r.json"])
    assert {(c.label, c.simulated_policy) for c in cells} == {("draft confidence:0.05", "confidence:0.05:4")}


def test_a_seeded_sampled_bench_is_reproducible(llama_dir, tmp_path):
    """--batching replicate --seed: B copies of one request, each with a seed of its own drawn from
    --seed by its engine (one seed for all had made the B samples one sample B times); the same seed,
    the same run."""
    from specscope.backends import BenchConfig
    from specscope.backends.reference import run_bench

    workload = write_workload(tmp_path / "w.jsonl", [{"id": "a", "prompt_token_ids": [4, 5, 6, 7]}])
    config = BenchConfig(model_dir=llama_dir, workload=workload, method="ngram", batch_sizes=(4,), max_tokens=12,
                         batching="replicate", temperature=1.0, seed=3, repeats=1)
    rows = [run_bench(config).rows[0] for _ in range(2)]
    assert rows[0].details["generated_tokens"] == rows[1].details["generated_tokens"]
    assert rows[0].acceptance_rate == rows[1].acceptance_rate  # reproducible
    from specscope.assemble import load_engine
    from specscope.engine.sampling import SamplingParams

    engine, _ = load_engine(llama_dir, "none", max_batch_size=4, max_seq_len=64)  # requests without a seed of
    copies = engine.generate([(f"c{i}", [4, 5, 6, 7]) for i in range(4)], 12, 4, SamplingParams(1.0))  # their own
    assert len({tuple(tokens) for tokens in copies.values()}) > 1  # sample apart


def test_the_reference_bench_refuses_a_draft_of_another_tokenizer(tmp_path, capsys):
    """Two token ids swapped in the draft's tokenizer.json: `trace` refused it, `bench --backend
    reference` ran it (exit 0, its drafts meaning other tokens)."""
    import shutil

    from specscope.workloads.bundled import bundled_path
    from specscope.zoo.shipped import model_dir

    draft = tmp_path / "draft"
    shutil.copytree(model_dir("draft"), draft)
    tokenizer = json.loads((draft / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["!"], vocab["<|assistant|>"] = vocab["<|assistant|>"], vocab["!"]
    (draft / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert main(["bench", "--backend", "reference", "--model", str(model_dir("target")), "--method", "draft",
                 "--draft", str(draft), "--workload", str(bundled_path("code")), "--max-tokens", "4",
                 "--batch-sizes", "1", "-o", str(tmp_path / "r.json")]) == 2
    assert "tokens differ in id or meaning" in capsys.readouterr().err


def test_replicate_batching_compares_every_copy_with_no_sd():
    """Only each request's first copy (#0) was compared: a difference in copy #1 read as greedy_match."""
    from types import SimpleNamespace

    from specscope.backends.reference import _row, _Run
    from specscope.engine.records import SpecDecodeStats

    config = SimpleNamespace(method="ngram", k=2, tree=None, batching="replicate", temperature=0.0, confidence=None)
    base = _Run({"a#0": [1, 2], "a#1": [1, 2], "b#0": [3], "b#1": [3]}, 6, 1.0, [], SpecDecodeStats(k=2))
    sd = _Run({"a#0": [1, 2], "a#1": [1, 9], "b#0": [3], "b#1": [3]}, 6, 0.5, [], SpecDecodeStats(k=2))
    row = _row(config, 2, 2, base, sd, compare=True)
    assert row.details["greedy_match"] is False and row.details["mismatched_requests"] == 1


def test_the_bench_warms_up_on_its_largest_step(llama_dir, tmp_path, monkeypatch):
    """Before it times anything, the reference bench runs its longest prompt at its largest batch
    size (a process's first prefill of a size runs slower than the same prefill later), untimed."""
    from specscope.backends import BenchConfig, reference

    calls = []
    lockstep = reference._lockstep

    def recording(engines, requests, batch_size, config, sampling):
        calls.append(([len(r.prompt_token_ids) for r in requests], batch_size, config.max_tokens))
        return lockstep(engines, requests, batch_size, config, sampling)

    monkeypatch.setattr(reference, "_lockstep", recording)
    workload = write_workload(tmp_path / "w.jsonl", [{"id": "a", "prompt_token_ids": [4, 5, 6]},
                                                      {"id": "b", "prompt_token_ids": [4, 5, 6, 7, 8, 9]},
                                                      {"id": "c", "prompt_token_ids": [7, 8]}])
    config = BenchConfig(model_dir=llama_dir, workload=workload, method="ngram", batch_sizes=(1, 3), max_tokens=12,
                         repeats=1)
    reference.run_bench(config)
    assert calls[0] == ([6, 6, 6], 3, 8)  # the warm-up: the longest prompt, three at once, eight tokens
    assert [c[1] for c in calls[1:]] == [1, 3] and calls[1][0] == [3, 6, 2]  # then the measured runs


def test_an_even_repeat_count_is_refused(workload, capsys):
    """The row is the repeat of median speedup: of two repeats the faster was reported as the
    median (a review), so an even --repeats is refused in one line before any model loads."""
    from specscope.zoo.shipped import model_dir

    assert main(["bench", "--model", str(model_dir("target")), "--method", "ngram", "--workload", str(workload),
                 "--repeats", "2"]) == 2
    assert capsys.readouterr().err.strip() == \
        "specscope: error: --repeats: expected an odd count: the row is the run of median speedup, got 2"
