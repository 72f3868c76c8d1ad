"""Bad inputs of `specscope sweep`: a configuration field, an output folder or a cell record
that cannot be used is refused in one line naming the file and field, before any cell runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import Case, check

WORKLOAD = json.dumps({"id": "a", "prompt_token_ids": [4, 5, 6]}) + "\n"
ENGINE = '\n[[engines]]\nname = "v"\nlaunch = "vllm"\nmodel = "m"\n'
BASE = 'output = "out"\nworkloads = ["w.jsonl"]\n'


def config(extra: str = "", engine: str = ENGINE, base: str = BASE) -> dict[str, str]:
    """A sweep folder: ``s.toml`` (``base`` + ``extra`` + ``engine``) and its workload."""
    return {"s.toml": base + extra + engine, "w.jsonl": WORKLOAD}


DRY = ["sweep", "s.toml", "--dry-run"]
URL_ENGINE = '\n[[engines]]\nname = "x"\nurl = "http://127.0.0.1:1"\nmethod = "ngram"\n'
CELL = "out/cells/0123456789abcdef.json"
EAGLE3 = ENGINE + 'drafts = { eagle3 = "h" }\n'
SGLANG = '\n[[engines]]\nname = "s"\nlaunch = "sglang"\nmodel = "m"\ndrafts = { eagle3 = "h" }\n'

ZOO_TARGET = str(Path(__file__).resolve().parents[2] / "src" / "specscope" / "data" / "zoo" / "target")
LONG = json.dumps({"id": "long", "prompt_token_ids": [4] * 1020}) + "\n"  # the bundled target: 1024 positions
SPECSCOPE = f'\n[[engines]]\nname = "r"\nlaunch = "specscope"\nmodel = "{ZOO_TARGET}"\n'

CASES = [
    Case("fixed-port-with-ray", ["sweep", "s.toml", "--ray", "local"],
         r"s\.toml: engine 'r': a fixed port with --ray .* leave 'port' out",
         config(engine=SPECSCOPE + "port = 18431\n")),
    Case("paired-with-ray", ["sweep", "s.toml", "--ray", "local"],  # a review: Ray ran each pair's halves at once
         r's\.toml: baselines = "paired" with --ray: .* use "interleaved"',
         config('methods = ["none", "ngram"]\nbaselines = "paired"\n', engine=SPECSCOPE)),
    Case("specscope-engine-prompt-and-max-tokens-past-its-positions", ["sweep", "s.toml"],
         r"engine 'r', workload w\.jsonl: s\.toml: field 'max_tokens': 8: the longest prompt \(request 'long', 1020 "
         r"tokens\) and 8 output tokens exceed the 1024 positions", {"s.toml": BASE + "max_tokens = 8\n" + SPECSCOPE,
                                                                    "w.jsonl": LONG}),
    Case("specscope-engine-past-its-positions-in-a-dry-run", DRY,  # it listed every cell as pending
         r"engine 'r', workload w\.jsonl: s\.toml: field 'max_tokens': 8: the longest prompt",
         {"s.toml": BASE + "max_tokens = 8\n" + SPECSCOPE, "w.jsonl": LONG}),
    Case("specscope-engine-warm-up-prompt-past-its-positions", ["sweep", "s.toml"],  # every cell failed at its warm-up
         r"engine 'r', workload w\.jsonl: w\.jsonl:2: field 'prompt_token_ids': request 'long': its prompt \(1100 tokens\) "
         r"leaves no room",
         {"s.toml": BASE + "max_tokens = 8\nnum_requests = 1\n" + SPECSCOPE,
          "w.jsonl": WORKLOAD + json.dumps({"id": "long", "prompt_token_ids": [4] * 1100}) + "\n"}),
    Case("engine-name-a-path", DRY, r"s\.toml: engines\[0\]\.name: expected letters, digits.*got '\.\./\.\./x'",
         config(engine=ENGINE.replace('name = "v"', 'name = "../../x"'))),
    Case("engine-args-set-the-cell", DRY, r"s\.toml: engines\[0\]\.args: --max-num-seqs is set by the sweep",
         config(engine=ENGINE + 'args = ["--max-num-seqs", "1"]\n')),
    Case("engine-args-set-the-cell-underscored", DRY, r"s\.toml: engines\[0\]\.args: --max_num_seqs is set by the sweep",
         config(engine=ENGINE + 'args = ["--max_num_seqs", "1"]\n')),  # vLLM's parser reads _ as -
    Case("engine-args-set-the-cell-abbreviated", DRY, r"engines\[0\]\.args: --max-batch=1 is set by the sweep",
         config(engine='\n[[engines]]\nname = "r"\nlaunch = "specscope"\nmodel = "m"\nargs = ["--max-batch=1"]\n')),
    Case("url-port-past-65535", DRY, r"s\.toml: engines\[0\]\.url: expected http://HOST:PORT \(a port 0\.\.65535\), got "
         r"'http://127\.0\.0\.1:99999'", config(engine=URL_ENGINE.replace("127.0.0.1:1", "127.0.0.1:99999"))),
    Case("url-without-scheme", DRY, r"s\.toml: engines\[0\]\.url: expected http://HOST:PORT .*got 'localhost:18231'",
         config(engine=URL_ENGINE.replace("http://127.0.0.1:1", "localhost:18231"))),
    Case("url-engine-with-args", DRY, r"s\.toml: engines\[0\]\.args: is for an engine the sweep launches; the server at "
         r"http://127\.0\.0\.1:1 runs as it was started", config(engine=URL_ENGINE + 'k = 2\nargs = ["--x"]\n')),
    Case("url-engine-with-drafts", DRY, r"engines\[0\]\.drafts: is for an engine the sweep launches",
         config(engine=URL_ENGINE + 'k = 2\ndrafts = { eagle = "h" }\n')),
    Case("url-engine-model-not-text", DRY, r"s\.toml: field 'engines\[0\]\.model': expected the served model's "
         r"name, got 5", config(engine=URL_ENGINE + "k = 2\nmodel = 5\n")),  # a traceback, in a review
    Case("url-none-engine-with-k", DRY, r"s\.toml: engines\[0\]\.k: a server serving 'none' proposes nothing",
         config(engine=URL_ENGINE.replace('"ngram"', '"none"') + "k = 3\n")),
    Case("url-engine-with-port", DRY, r"engines\[0\]\.port: is for an engine the sweep launches",
         config(engine=URL_ENGINE + "k = 2\nport = 8001\n")),
    Case("temperature-nan", DRY, r"s\.toml: field 'temperature': expected a finite number, got nan",
         config("temperature = nan\n")),
    Case("temperature-inf", DRY, r"s\.toml: field 'temperature': expected a finite number", config("temperature = inf\n")),
    Case("temperature-negative", DRY, r"field 'temperature': expected a number >= 0", config("temperature = -1.0\n")),
    Case("output-missing", DRY, r"s\.toml: field 'output': missing \(expected an output directory\)",
         config(base='workloads = ["w.jsonl"]\n')),
    Case("k-with-none-alone", DRY, r"s\.toml: field 'k': methods = \[\"none\"\] proposes nothing; leave k out",
         config('methods = ["none"]\nk = [3]\n')),
    Case("k-zero", DRY, r"field 'k\[1\]': expected an integer >= 1, got 0", config("k = [1, 0]\n")),
    Case("k-huge", DRY, r"field 'k\[0\]': expected an integer <= 64", config("k = [100000]\n")),
    Case("num-requests-beyond-any-run", DRY, r"field 'num_requests': expected an integer <= 1000000",
         config("num_requests = 1000000000000\n")),
    Case("tree-twice", DRY, r"s\.toml: field 'trees': '2x1' is listed twice",
         config('methods = ["eagle"]\ntrees = ["2x1", "[(0,), (1,), (0, 0), (1, 0)]"]\n',
                engine='\n[[engines]]\nname = "r"\nlaunch = "specscope"\nmodel = "m"\ndrafts = { eagle = "h" }\n')),
    Case("k-float", DRY, r"field 'k\[0\]': expected an integer, got 2\.5", config("k = [2.5]\n")),
    Case("batch-size-zero", DRY, r"field 'batch_sizes\[0\]': expected an integer >= 1", config("batch_sizes = [0]\n")),
    Case("batch-sizes-empty", DRY, r"field 'batch_sizes': expected a non-empty list", config("batch_sizes = []\n")),
    Case("max-tokens-text", DRY, r"field 'max_tokens': expected a number, got '8'", config('max_tokens = "8"\n')),
    Case("timeout-zero", DRY, r"field 'idle_timeout_s': expected a number > 0", config("idle_timeout_s = 0\n")),
    Case("timeout-inf", DRY, r"field 'request_timeout_s': expected a finite number", config("request_timeout_s = inf\n")),
    Case("prompt-lookup-inverted", DRY, r"field 'prompt_lookup_min': expected <= prompt_lookup_max \(2\), got 5",
         config("prompt_lookup_min = 5\nprompt_lookup_max = 2\n")),
    Case("url-engine-without-k", DRY, r"field 'engines\[0\]\.k': expected an integer, got None",
         config(engine=URL_ENGINE)),
    Case("url-engine-k-huge", DRY, r"field 'engines\[0\]\.k': expected an integer <= 64",
         config(engine=URL_ENGINE + "k = 1000\n")),
    Case("port-out-of-range", DRY, r"field 'engines\[0\]\.port': expected an integer <= 65535",
         config(engine=ENGINE + "port = 99999\n")),
    Case("specscope-mtp-without-head", DRY, r"engine 'r': methods mtp need drafts\.<method>",
         config('methods = ["none", "mtp"]\n', '\n[[engines]]\nname = "r"\nlaunch = "specscope"\nmodel = "m"\n')),
    Case("tree-for-lookups-alone", DRY,
         r"s\.toml: field 'trees': engine 'v': launch vllm: no method listed drafts token trees there \(ngram\)$",
         config('methods = ["none", "ngram"]\ntrees = ["2x2x1"]\n', EAGLE3)),
    Case("trees-alone-beside-a-lookup", DRY,
         r"s\.toml: field 'k': engine 'v': launch vllm: k is empty and these methods draft no token trees there: "
         r"ngram \(they would measure nothing: give k, or leave them out of methods\)$",
         config('methods = ["none", "ngram", "eagle3"]\ntrees = ["2x2x1"]\n', EAGLE3)),
    Case("trees-for-url-engines-alone", DRY,
         r"s\.toml: field 'trees': no launched engine to draft them \(a url engine serves its own method and k\)$",
         config('methods = ["none"]\ntrees = ["2x2x1"]\n', engine=URL_ENGINE + "k = 2\n")),
    Case("tree-vllm-cannot-draft", DRY, r"field 'trees': engine 'v': launch vllm: tree paths:0;1;0\.0: vLLM drafts only full",
         config('methods = ["eagle3"]\ntrees = ["[(0,), (1,), (0, 0)]"]\n', EAGLE3)),
    Case("tree-sglang-cannot-draft", DRY, r"field 'trees': engine 's': launch sglang: tree 2x2x1: SGLang expands at most 2",
         config('methods = ["eagle3"]\ntrees = ["2x2x1"]\n', SGLANG)),
    Case("tree-not-a-tree", DRY, r"field 'trees\[1\]': expected a tree as branching per depth \(2x2x1\)",
         config('methods = ["eagle3"]\ntrees = ["2x1", "2y2"]\n', EAGLE3)),
    Case("tree-too-many-nodes", DRY, r"field 'trees\[0\]': expected at most 64 nodes, got 72 in 8x8",
         config('methods = ["eagle3"]\ntrees = ["8x8"]\n', EAGLE3)),
    Case("trees-not-a-list", DRY, r"field 'trees': expected a non-empty list of trees",
         config('methods = ["eagle3"]\ntrees = "2x2"\n', EAGLE3)),
    Case("method-the-engine-lacks", DRY, r"s\.toml: engine 's': sglang has no method suffix",
         config('methods = ["none", "suffix"]\n', SGLANG)),
    Case("output-is-a-file", DRY, r"s\.toml: field 'output': \S*out: exists and is not a directory",
         {**config(), "out": "a file, not a folder"}),
    Case("output-under-a-file", DRY, r"s\.toml: field 'output': \S*taken: is not a directory",
         {**config(base='output = "taken/out"\nworkloads = ["w.jsonl"]\n'), "taken": "a file"}),
    Case("cell-file-holding-a-list", DRY, r"0123456789abcdef\.json: not a cell record", {**config(), CELL: "[]\n"}),
    Case("cell-file-not-json", ["sweep", "s.toml"], r"0123456789abcdef\.json: unreadable cell record",
         {**config(), CELL: "{half"}),
    Case("cell-file-bad-status", ["sweep", "s.toml"], r"0123456789abcdef\.json: not a cell record",
         {**config(), CELL: json.dumps({"cell_id": "x", "key": {}, "status": "maybe", "reason": None,
                                        "started_at": 0, "finished_at": 0, "result": None})}),
    Case("k-twice", DRY, r"field 'k': 2 is listed twice", config("k = [2, 2]\n")),
    Case("method-twice", DRY, r"field 'methods': 'ngram' is listed twice", config('methods = ["none", "ngram", "ngram"]\n')),
    Case("workload-twice", DRY, r"field 'workloads': 'w\.jsonl' is listed twice",
         config(base='output = "out"\nworkloads = ["w.jsonl", "w.jsonl"]\n')),
    Case("workload-missing", DRY, r"field 'workloads\[0\]': nope\.jsonl: cannot read",
         config(base='output = "out"\nworkloads = ["nope.jsonl"]\n')),
    Case("segments-beyond-the-workload", DRY, r"field 'segments': expected at most the requests of w\.jsonl \(1\)",
         config('methods = ["none", "ngram"]\nbaselines = "interleaved"\nsegments = 4\n')),
    Case("batch-size-above-the-requests", DRY,
         r"field 'batch_sizes': 4 is above the requests w\.jsonl keeps in flight at once \(1 requests in all\)",
         config("batch_sizes = [1, 4]\n")),
    Case("batch-size-above-a-segment", DRY,
         r"field 'batch_sizes': 2 is above the requests w\.jsonl keeps in flight at once \(segments of 1\)",
         {**config('methods = ["none", "ngram"]\nbaselines = "interleaved"\nsegments = 2\nbatch_sizes = [2]\n'),
          "w.jsonl": WORKLOAD + WORKLOAD.replace('"a"', '"b"') + WORKLOAD.replace('"a"', '"c"')}),
    Case("workloads-of-one-name", DRY, r"field 'workloads': 'b/w\.jsonl' has the name 'w' of an earlier workload",
         {**config(base='output = "out"\nworkloads = ["a/w.jsonl", "b/w.jsonl"]\n'), "a/w.jsonl": WORKLOAD,
          "b/w.jsonl": WORKLOAD}),
    Case("output-folder-not-a-sweep", ["sweep", "s.toml"], r"out: not empty and holds no cells/ \(no sweep here\)",
         {**config(), "out/results.csv": "mine\n"}),
    Case("output-folder-of-the-users-with-a-cells-folder", ["sweep", "s.toml"], r"out/cells: holds 'cell1\.png', "
         r"which no sweep writes there: not a sweep's folder", {**config(), "out/cells/cell1.png": "img\n",
                                                                "out/config.json": '{"project": "mine"}\n'}),
    Case("only-none", DRY, r"s\.toml: plans no cell",
         {**config('methods = ["none"]\nbaselines = "interleaved-all"\nsegments = 2\n'), "w.jsonl": WORKLOAD + WORKLOAD.replace('"a"', '"b"')}),
    Case("launched-engine-with-k", DRY, r"engines\[0\]: method and k describe a server given by url",
         config(engine=ENGINE + "k = 3\n")),
    Case("drafts-of-no-drafter", DRY, r"engines\[0\]\.drafts\.ngram: expected a method that drafts with a checkpoint",
         config(engine=ENGINE + 'drafts = { ngram = "x" }\n')),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


def test_sweep_config_that_is_not_utf8(tmp_path, monkeypatch):
    check(Case("sweep-not-utf8", ["sweep", "s.toml"], r"s\.toml: not UTF-8 text \(byte 18\)",
               {"s.toml": b'output = "o"\nx = "\xff"\n'}), tmp_path, monkeypatch)
