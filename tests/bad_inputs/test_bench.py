"""Bad inputs of `specscope bench` (reference and openai backends): refused in one line before
any work, leaving nothing behind, and never a row labelled with what the server does not run.

Servers are real `specscope serve` engines on loopback (a tiny model: n-gram at k = 3, and no
SD); ``{ngram}``, ``{plain}`` and ``{refused}`` in a case's argv stand for their URLs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from harness import Case, check, written_by_specscope

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # the serving tests' helpers
from serving_helpers import refused_url, start_server, write_tiny_model  # noqa: E402

pytestmark = pytest.mark.slow  # real servers

WORKLOAD = {"w.jsonl": json.dumps({"id": "a", "prompt_token_ids": [4, 5, 6, 4, 5, 6]}) + "\n"}
WITH_DIR = {**WORKLOAD, "taken/keep.txt": "mine"}
WITH_FILE = {**WORKLOAD, "taken.txt": "mine"}
REF = ["bench", "--model", "m", "--workload", "w.jsonl"]
OPENAI = ["bench", "--backend", "openai", "--workload", "w.jsonl", "--max-tokens", "4", "--batch-sizes", "1"]

def _bundled_target() -> str:
    from specscope.zoo.shipped import model_dir

    return str(model_dir("target"))


LONG_PROMPT = {"long.jsonl": json.dumps({"id": "short", "prompt_token_ids": [4] * 10}) + "\n"
               + json.dumps({"id": "long-one", "prompt_token_ids": [4] * 1100}) + "\n"}  # past its 1024 positions

CASES = [
    Case("prompt-alone-fills-the-positions", ["bench", "--model", _bundled_target(), "--workload", "long.jsonl"],
         r"long\.jsonl:2: field 'prompt_token_ids': request 'long-one': its prompt \(1100 tokens\) leaves no room for an "
         r"output in the 1024 positions", LONG_PROMPT),
    Case("openai-top-p", ["bench", "--backend", "openai", "--url", "http://127.0.0.1:1", "--workload", "w.jsonl",
                          "--top-p", "0.5"], r"--top-p: only with --backend reference", WORKLOAD),
    Case("records-is-the-workload", [*REF, "--records", "w.jsonl"], r"--records w\.jsonl: is also an input",
         written_by_specscope(WORKLOAD, "w.jsonl")),
    Case("temperature-nan", [*REF, "--temperature", "nan"], r"--temperature.*finite.*nan", WORKLOAD),
    Case("k-without-sd", [*REF, "--method", "none", "--k", "3"], r"--k: only used with an SD --method", WORKLOAD),
    Case("device-meta", [*REF, "--device", "meta"], r"--device: expected cpu or cuda\[:N\], got 'meta'", WITH_DIR),
    Case("draft-with-lookup", [*REF, "--method", "ngram", "--draft", "taken"],
         r"--draft: only used with a method that reads a checkpoint .*not ngram", WITH_DIR),
    Case("temperature-inf", [*REF, "--temperature", "inf"], r"--temperature.*finite", WORKLOAD),
    Case("temperature-negative", [*REF, "--temperature", "-0.5"], r"--temperature.*>= 0", WORKLOAD),
    Case("top-p-zero", [*REF, "--top-p", "0"], r"--top-p.*> 0", WORKLOAD),
    Case("seed-negative", [*REF, "--seed", "-1"], r"--seed.*>= 0", WORKLOAD),
    Case("seed-past-64-bits", [*REF, "--seed", str(2**64)], r"--seed.*<= 18446744073709551615", WORKLOAD),
    Case("k-zero", [*REF, "--k", "0"], r"--k.*>= 1", WORKLOAD),
    Case("k-huge", [*REF, "--k", "100000"], r"--k.*<= 64", WORKLOAD),
    Case("batch-size-zero", [*REF, "--batch-sizes", "1,0"], r"--batch-sizes", WORKLOAD),
    Case("max-tokens-zero", [*REF, "--max-tokens", "0"], r"--max-tokens.*>= 1", WORKLOAD),
    Case("repeats-zero", [*REF, "--repeats", "0"], r"--repeats.*>= 1", WORKLOAD),
    Case("o-directory", [*REF, "-o", "taken"], r"taken: is a directory", WITH_DIR),
    Case("o-under-a-file", [*REF, "-o", "taken.txt/rows.csv"], r"taken\.txt: is not a directory", WITH_FILE),
    Case("o-suffix", [*REF, "-o", "rows.txt"], r"rows\.txt: expected a \.csv or \.json", WORKLOAD),
    Case("records-directory", [*REF, "--records", "taken"], r"taken: is a directory", WITH_DIR),
    Case("records-not-jsonl", [*REF, "--records", "steps.csv"], r"steps\.csv: expected a \.jsonl output file", WORKLOAD),
    Case("two-stdouts", [*REF, "-o", "-", "--records", "-"], r"only one output may be -", WORKLOAD),
    Case("openai-idle-timeout-zero", [*OPENAI, "--url", "{plain}", "--idle-timeout", "0"], r"--idle-timeout.*> 0",
         WORKLOAD),
    Case("openai-request-timeout-nan", [*OPENAI, "--url", "{plain}", "--request-timeout", "nan"],
         r"--request-timeout.*finite", WORKLOAD),
    Case("openai-num-requests-zero", [*OPENAI, "--url", "{plain}", "--num-requests", "0"], r"--num-requests.*>= 1",
         WORKLOAD),
    Case("openai-port-out-of-range", [*OPENAI, "--launch", "vllm", "--model", "m", "--port", "70000"],
         r"--port.*<= 65535", WORKLOAD),
    Case("openai-url-and-launch", [*OPENAI, "--url", "{plain}", "--launch", "vllm"], r"exactly one of --url and --launch",
         WORKLOAD),
    Case("openai-url-port-past-65535", [*OPENAI, "--url", "http://127.0.0.1:99999"],
         r"--url: expected http://HOST:PORT \(a port 0\.\.65535\), got 'http://127\.0\.0\.1:99999'", WORKLOAD),
    Case("openai-url-not-http", [*OPENAI, "--url", "ftp://host"], r"--url: expected http://HOST:PORT", WORKLOAD),
    Case("openai-url-refused", [*OPENAI, "--url", "{refused}"], r"http://127\.0\.0\.1:\d+: connection refused",
         WORKLOAD),
    Case("openai-batch-size-above-the-requests", [*OPENAI[:-1], "1,2", "--url", "{plain}"],
         r"--batch-sizes: 2 is above the 1 requests in flight at once \(1 requests in all\)", WORKLOAD),
    Case("openai-wrong-k", [*OPENAI, "--url", "{ngram}", "--method", "eagle", "--k", "5"],
         r"--k 5: the server at http://\S+ shows k=3 \(3 'position' series", WORKLOAD),
    Case("openai-none-against-sd", [*OPENAI, "--url", "{ngram}", "--method", "none"],
         r"--method none: the server at \S+ speculates .*k=3", WORKLOAD),
    Case("openai-sd-against-plain", [*OPENAI, "--url", "{plain}", "--method", "ngram", "--k", "3"],
         r"--method ngram: the server at \S+ does not speculate", WORKLOAD),
    Case("openai-baseline-speculates", [*OPENAI, "--url", "{ngram}", "--method", "ngram", "--k", "3",
                                        "--baseline-url", "{ngram}"], r"--method none: the server at \S+ speculates",
         WORKLOAD),
    Case("openai-wrong-model", [*OPENAI, "--url", "{ngram}", "--method", "ngram", "--k", "3", "--model-name", "llama"],
         r"model 'llama': the server at \S+ serves tiny \(GET /v1/models\)", WORKLOAD),
    Case("openai-mtp-without-head", [*OPENAI, "--launch", "specscope", "--model", "m", "--method", "mtp"],
         r"launch specscope: method 'mtp' needs a draft model or head directory \(--draft\)", WORKLOAD),
    Case("openai-eagle-without-draft", [*OPENAI, "--launch", "vllm", "--model", "m", "--method", "eagle"],
         r"method 'eagle' needs a draft", WORKLOAD),
    Case("openai-o-directory", [*OPENAI, "--url", "{ngram}", "--method", "ngram", "-o", "taken"],
         r"taken: is a directory", WITH_DIR),
]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    """Loopback servers of one tiny model: n-gram at k = 3, and no SD."""
    pytest.importorskip("prometheus_client")
    model = write_tiny_model(tmp_path_factory.mktemp("tiny"))
    ngram, plain = start_server(model, "ngram", k=3, max_batch_size=2), start_server(model, "none", max_batch_size=2)
    yield {"ngram": ngram.url, "plain": plain.url, "refused": refused_url()}
    ngram.close()
    plain.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch, request):
    if any("{" in arg for arg in case.argv):
        servers = request.getfixturevalue("urls")
        case = replace(case, argv=[arg.format(**servers) for arg in case.argv])
    check(case, tmp_path, monkeypatch)
