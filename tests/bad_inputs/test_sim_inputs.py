"""Bad inputs of the simulator, the bound and the cost models (simulate, bound, costmodel):
each refused in one line naming the option, the file:line or the field."""

from __future__ import annotations

import json

import pytest
from harness import Case, check


def own(rid: str, k_max: int | None = 6) -> str:
    record = {"schema": "specscope.trace/1", "id": rid, "prompt_token_ids": [1, 2], "output_token_ids": [5, 6, 7, 8],
              "proposers": {"ngram": {"acc_len": [1, 2, 1, 1]}, "eagle": {"acc_len": [2, 3, 1, 1]}}}
    if k_max is not None:
        record["k_max"] = k_max
    return json.dumps(record) + "\n"


TRACES = {"t.jsonl": own("a") + own("b")}  # two requests, k_max 6
RANKED = {"t.jsonl": "".join(json.dumps({**json.loads(own(rid)), "proposers": {"eagle": {
    "acc_len": [2, 3, 1, 1], "tree_rank": [[0, 1], [0, 0], [2, -1], [-1, -1]]}}}) + "\n" for rid in "ab")}
TREE = ["simulate", "t.jsonl", "--acc", "eagle", "--policies", "tree:2x1", "--batch-sizes", "1"]
UNRECORDED = {"t.jsonl": own("a", None) + own("b", None)}  # largest acc_len − 1 of ngram seen: 1
SIM = ["simulate", "t.jsonl", "--acc", "ngram", "--policies", "fixed:1", "--batch-sizes", "1"]
CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
          "vocab_size": 100}


def linear(forward: dict, **extra) -> str:
    return json.dumps({"kind": "linear", "forward": forward, **extra})


def step(i: int) -> str:
    return json.dumps({"step": i, "method": "none", "k": 0, "batch_size": 1, "tokens_verified": 1,
                       "tokens_emitted": [1], "draft_s": 0.0, "verify_s": 0.01 + 0.001 * i, "sample_s": 0.0002,
                       "overhead_s": 0.0008, "kv_tokens": 10 * i, "prefill_tokens": 0, "prefill_s": 0.0}) + "\n"


CASES = [
    Case("proposer-missing-from-a-record", SIM[:2] + ["--acc", "eagle", "--batch-sizes", "1"],
         r"no cell to simulate: dataset 't': its traces do not all hold proposer 'eagle': 1 of 2 records lack it \(first "
         r"id 'b'\), so its cells with eagle are left out$",
         files={"t.jsonl": own("a") + own("b").replace(', "eagle": {"acc_len": [2, 3, 1, 1]}', "")}),
    Case("batch-size-left-out", [*SIM[:-1], "1,,8"], r"argument --batch-sizes: .*got '1,,8' \(entry 2 is empty\)",
         files=TRACES),
    Case("switch-pair-with-an-empty-name", [*SIM[:5], "oracle-switch:ngram++eagle", *SIM[6:]],
         r"policy 'oracle-switch:ngram\+\+eagle': expected oracle-switch:A\+B with two proposers", files=TRACES),
    Case("batch-size-absurd", [*SIM[:-1], "100000", "--mode", "paper"], r"argument --batch-sizes: .*expected an integer <= 65536",
         files=TRACES),
    Case("k-beyond-the-shallowest-record", [*SIM[:-3], "fixed:4", "--batch-sizes", "1"],
         r"policy 'fixed:4' proposes k = 4, above 2, the depth all its records were traced to \(their k_max differ\)",
         files={"t.jsonl": own("a", 2).replace("[2, 3, 1, 1]", "[2, 3, 1, 1]").replace("[1, 2, 1, 1]", "[1, 2, 1, 1]")
                + own("b", 8)}),
    Case("fixed-zero-is-no-sd", [*SIM[:-3], "fixed:0", "--batch-sizes", "1"],
         r"policy 'fixed:0': expected fixed:k with k an integer in 1\.\.64 \(k = 0 proposes nothing: that is no SD",
         files=TRACES),
    Case("sample-zero", [*SIM, "--sample", "0"], r"argument --sample: expected an integer >= 1", files=TRACES),
    Case("one-policy-spelt-twice", [*SIM[:-3], "fixed:01,fixed:1", "--batch-sizes", "1"],
         r"policies 'fixed:01' and 'fixed:1' are one policy, 'fixed:1': give it once", files=TRACES),
    Case("match-prob-above-one", [*SIM, "--match-prob", "1.5"], r"argument --match-prob: expected a number <= 1", files=TRACES),
    Case("match-prob-negative", [*SIM, "--match-prob", "-0.1"], r"argument --match-prob", files=TRACES),
    Case("match-prob-nan", [*SIM, "--match-prob", "nan"], r"argument --match-prob: expected a finite number", files=TRACES),
    Case("seed-negative", [*SIM, "--seed", "-1"], r"argument --seed", files=TRACES),
    Case("seed-beyond-64-bits", [*SIM, "--seed", str(2**64)], r"argument --seed: expected an integer <= ", files=TRACES),
    Case("batch-above-requests-mixed", [*SIM[:-1], "1,8"], r"--batch-sizes: dataset 't' has 2 requests, fewer than batch size 8",
         files=TRACES),
    Case("fixed-k-above-k-max", [*SIM[:5], "fixed:7", *SIM[6:]], r"policy 'fixed:7' proposes k = 7, above the trace's k_max = 6",
         files=TRACES),
    Case("fixed-k-above-unrecorded-k-max", [*SIM[:5], "fixed:2", *SIM[6:]],
         r"policy 'fixed:2' proposes k = 2, above 1, the largest acc_len − 1 .*k_max not recorded", files=UNRECORDED),
    Case("fixed-k-huge", [*SIM[:5], "fixed:1000000000", *SIM[6:]], r"policy 'fixed:1000000000'", files=TRACES),
    Case("fixed-k-negative", [*SIM[:5], "fixed:-1", *SIM[6:]], r"policy 'fixed:-1'", files=TRACES),
    Case("unknown-policy", [*SIM[:5], "greedy", *SIM[6:]], r"unknown policy 'greedy'", files=TRACES),
    Case("tree-not-a-shape", [*TREE[:5], "tree:abc", *TREE[6:]], r"policy 'tree:abc': expected tree:SHAPE",
         files=RANKED),
    Case("tree-empty", [*TREE[:5], "tree:", *TREE[6:]], r"policy 'tree:': expected tree:SHAPE", files=RANKED),
    Case("tree-zero-branching", [*TREE[:5], "tree:0x2", *TREE[6:]], r"policy 'tree:0x2': expected tree:SHAPE .*>= 1",
         files=RANKED),
    Case("tree-rank-past-cap", [*TREE[:5], "tree:70x1", *TREE[6:]], r"policy 'tree:70x1'.*rank cap", files=RANKED),
    Case("tree-on-ngram", [*TREE[:3], "ngram", *TREE[4:]], r"proposer 'ngram': policy 'tree:2x1' needs a model "
         r"proposer", files={"t.jsonl": own("a")}),
    Case("tree-without-tree-rank", TREE, r"proposer 'eagle': no tree_rank in 2 records .*re-trace with "
         r"`specscope trace \.\.\. --trees 2x1`", files=TRACES),
    Case("tree-deeper-than-recorded", [*TREE[:5], "tree:2x1x1", *TREE[6:]], r"policy 'tree:2x1x1' is 3 deep, but "
         r"tree_rank was recorded to depth 2", files=RANKED),
    Case("tree-rank-out-of-range", TREE, r"t\.jsonl:1: field 'proposers\.eagle\.tree_rank\[0\]': expected integers "
         r"in \[-1, 63\], got 64", files={"t.jsonl": RANKED["t.jsonl"].replace("[[0, 1]", "[[64, 1]")}),
    Case("tree-rank-ragged", TREE, r"field 'proposers\.eagle\.tree_rank': expected a list of equal-length lists",
         files={"t.jsonl": RANKED["t.jsonl"].replace("[[0, 1]", "[[0]")}),
    Case("tree-rank-rows", TREE, r"field 'proposers\.eagle\.tree_rank': expected one row per acc_len entry",
         files={"t.jsonl": RANKED["t.jsonl"].replace("[[0, 1], ", "[")}),
    Case("combined-names-absent-proposer", ["simulate", "t.jsonl", "--acc", "combined", "--policies",
                                            "oracle-combined:ngram+medusa", "--batch-sizes", "1"],
         r"policy 'oracle-combined:ngram\+medusa': no record holds medusa \(the traces hold ngram, eagle\)$", files=TRACES),
    Case("acc-absent-proposer", [*SIM[:3], "draft", *SIM[4:]], r"--acc: no record holds draft \(the traces hold ngram, "
         r"eagle\)$", files=TRACES),
    Case("output-is-directory", [*SIM, "-o", "d"], r"d: is a directory", files=TRACES,
         setup=lambda folder: (folder / "d").mkdir()),
    Case("output-not-a-table", [*SIM, "-o", "rows.txt"], r"rows\.txt: expected a \.csv or \.json", files=TRACES),
    Case("cost-negative-coefficient", [*SIM, "--cost-model", "c.json"], r"c\.json: field 'forward\.c_fixed': expected a number >= 0",
         files={**TRACES, "c.json": linear({"c_fixed": -1, "c_tok": 0, "c_kv": 0})}),
    Case("roofline-empty-draft", ["costmodel", "show", "roofline:h100:llama3.1-8b:"],
         r"cost model 'roofline:h100:llama3\.1-8b:': expected roofline:GPU:MODEL\[:DRAFT\] \(a part is empty\)"),
    Case("roofline-unknown-gpu", ["costmodel", "show", "roofline:h900:llama3.1-8b"],
         r"roofline:h900:llama3\.1-8b: unknown GPU 'h900'"),
    Case("cost-all-zero", ["costmodel", "show", "c.json"], r"c\.json: field 'forward': c_fixed, c_tok and c_req sum below 1e-12 s",
         files={"c.json": linear({"c_fixed": 0, "c_tok": 0, "c_kv": 0})}),
    Case("cost-free-prefill", ["costmodel", "show", "c.json"],  # paper mode's speedup came out nan
         r"c\.json: field 'forward': c_prompt_fixed, c_prompt and c_req price a prefill at 0",
         files={"c.json": linear({"c_fixed": 1, "c_tok": 0, "c_kv": 0, "c_prompt": 0, "c_prompt_fixed": 0})}),
    Case("cost-nan", ["costmodel", "show", "c.json"], r"c\.json: field 'forward\.c_tok': expected a finite number",
         files={"c.json": '{"forward": {"c_fixed": 1e-3, "c_tok": NaN, "c_kv": 0}}'}),
    Case("cost-unknown-field", ["costmodel", "show", "c.json"], r"c\.json: field 'forward\.c_foo': unknown field",
         files={"c.json": linear({"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0, "c_foo": 1})}),
    Case("cost-unknown-top-field", ["costmodel", "show", "c.json"], r"c\.json: field 'overhead': unknown field",
         files={"c.json": linear({"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, overhead=1)}),
    Case("cost-drafting-negative", ["costmodel", "show", "c.json"], r"c\.json: field 'drafting\.ngram\.ratio'",
         files={"c.json": linear({"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0},
                                 drafting={"ngram": {"kind": "fraction", "ratio": -0.1}})}),
    Case("cost-fitted-cell-without-k", ["costmodel", "show", "c.json"], r"c\.json: field 'fitted_cells\[0\]\.k': missing",
         files={"c.json": linear({"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0},
                                 fitted_cells=[{"method": "ngram", "batch_size": 1, "workload": "w.jsonl"}])}),
    Case("cost-fitted-cell-unknown-method", ["costmodel", "show", "c.json"],
         r"c\.json: field 'fitted_cells\[0\]\.method': expected a method",
         files={"c.json": linear({"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0},
                                 fitted_cells=[{"method": "bogus", "k": 3, "batch_size": 1, "workload": "w.jsonl"}])}),
    Case("cost-measured-k-beyond-any", ["costmodel", "show", "c.json"], r"c\.json: field 'measured\.k': expected an integer <=",
         files={"c.json": linear({"c_fixed": 1e-3, "c_tok": 0, "c_kv": 0}, measured={"k": 10 ** 40, "batch_size": 1})}),
    Case("cost-toml-suffix-in-capitals", ["costmodel", "show", "r.TOML"], r"r\.TOML: field 'efficiency\.weights'",
         files={"r.TOML": 'kind = "roofline"\ngpu = "h100"\nmodel = "llama3.1-8b"\n[efficiency]\nweights = 1.5\n'}),
    Case("roofline-gpu-not-text", ["costmodel", "show", "r.json"], r"^specscope: error: r\.json: field 'gpu': expected a string, got list$",
         files={"r.json": json.dumps({"kind": "roofline", "gpu": ["h100"], "model": "llama3.1-8b"})}),
    Case("cost-invalid-utf8", ["costmodel", "show", "c.json"], r"c\.json: not UTF-8", files={"c.json": b"{\xff}"}),
    Case("roofline-file-model-beyond-its-gpu", ["costmodel", "show", "r.json"],
         r"^specscope: error: r\.json: field 'model': the weights of llama3-70b take 131\.4 GiB .* beyond one h100's 80 GiB",
         files={"r.json": json.dumps({"kind": "roofline", "name": "roofline:h100:llama3.1-8b", "gpu": "h100",
                                      "model": "llama3-70b"})}),
    Case("roofline-file-draft-of-another-vocabulary", ["costmodel", "show", "r.json"],
         r"^specscope: error: r\.json: field 'draft_model': draft model 'qwen3-0\.6b': its vocabulary of 151936",
         files={"r.json": json.dumps({"kind": "roofline", "gpu": "h100", "model": "llama3.1-8b",
                                      "draft_model": "qwen3-0.6b"})}),
    Case("roofline-efficiency-above-one", ["costmodel", "show", "r.toml"], r"r\.toml: field 'efficiency\.weights'",
         files={"r.toml": 'kind = "roofline"\ngpu = "h100"\nmodel = "llama3.1-8b"\n[efficiency]\nweights = 1.5\n'}),
    Case("roofline-negative-head-dim", ["costmodel", "show", "roofline:h100:m"], r"m/config\.json: field 'head_dim'",
         files={"m/config.json": json.dumps({**CONFIG, "head_dim": -16})}),
    Case("roofline-heads-not-divisible", ["costmodel", "show", "roofline:h100:m"],
         r"m/config\.json: field 'num_key_value_heads': expected a divisor of num_attention_heads = 4, got 3",
         files={"m/config.json": json.dumps({**CONFIG, "num_key_value_heads": 3})}),
    Case("fit-fewer-steps-than-coefficients", ["costmodel", "fit", "s.jsonl", "-o", "fitted.json"],
         r"target forward: 3 measured points for 5 coefficients", files={"s.jsonl": step(0) + step(1) + step(2)}),
    Case("fit-a-step-of-an-absurd-time", ["costmodel", "fit", "s.jsonl", "-o", "fitted.json"],
         r"s\.jsonl:2: field 'sample_s': expected a number <= 3600", files={"s.jsonl": step(0) + step(1).replace(
             '"sample_s": 0.0002', '"sample_s": 1e308') + step(2)}),  # it was a scipy traceback
    Case("fit-a-step-verifying-more-than-its-k", ["costmodel", "fit", "s.jsonl", "-o", "fitted.json"],
         r"s\.jsonl:2: field 'tokens_verified': expected at most k \+ 1 per request it decoded \(1 × 1\), got 1000",
         files={"s.jsonl": step(0) + step(1).replace('"tokens_verified": 1', '"tokens_verified": 1000') + step(2)}),
    Case("fit-a-step-of-an-absurd-k", ["costmodel", "fit", "s.jsonl", "-o", "fitted.json"],
         r"s\.jsonl:1: field 'k': expected an integer <= 64", files={"s.jsonl": step(0).replace(
             '"method": "none", "k": 0', '"method": "eagle", "k": 1000')}),
    Case("fit-output-is-directory", ["costmodel", "fit", "s.jsonl", "-o", "d"], r"d: is a directory",
         files={"s.jsonl": step(0)}, setup=lambda folder: (folder / "d").mkdir()),
    Case("bound-batch-size-zero", ["bound", "t.jsonl", "--batch-size", "0"], r"argument --batch-size", files=TRACES),
    Case("bound-traces-beside-alpha-and-c", ["bound", "t.jsonl", "--alpha", "0.5", "--c", "0.1"],
         r"TRACES: not used with both --alpha and --c", files=TRACES),
    Case("bound-k-max-huge", ["bound", "--alpha", "0.5", "--c", "0.1", "--k-max", "1000000000"],
         r"argument --k-max: expected an integer <= 64"),
    Case("bound-alpha-one", ["bound", "--alpha", "1", "--c", "0.1"], r"argument --alpha: expected a number < 1"),
    Case("bound-alpha-negative", ["bound", "--alpha", "-0.2", "--c", "0.1"], r"argument --alpha"),
    Case("bound-c-nan", ["bound", "--alpha", "0.5", "--c", "nan"], r"argument --c: expected a finite number"),
    Case("bound-c-negative", ["bound", "--alpha", "0.5", "--c", "-1"], r"argument --c: expected a number >= 0"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)
