"""Bad trace files and bad options of the verbs that read or write traces (traces, trace,
simulate's reading): each refused in one line naming the file:line or the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import Case, check, written_by_specscope


def bench(rid="a", acc=(1, 2, 1), output=(5, 6, 7), **extra) -> str:
    """One SpecDecode-Bench line (k_max not recorded unless given in ``extra``)."""
    return json.dumps({"id": rid, "prompt_token_ids": [1, 2], "generated_token_ids": list(output),
                       "acc_ngram": {"acc_len": list(acc)}, **extra}) + "\n"


def own(rid="a", acc=(1, 2, 1), k_max=4, **proposer) -> str:
    """One specscope.trace/1 line."""
    return json.dumps({"schema": "specscope.trace/1", "id": rid, "k_max": k_max, "prompt_token_ids": [1, 2],
                       "output_token_ids": [5, 6, 7], "proposers": {"ngram": {"acc_len": list(acc), **proposer}}}) + "\n"


GOOD = {"t.jsonl": bench("a") + bench("b", (2, 1, 1))}
ZOO_TARGET = str(Path(__file__).parents[2] / "src" / "specscope" / "data" / "zoo" / "target")
TRACE = ["trace", "--model", "m", "--proposers", "ngram", "--workload", "w.jsonl", "-o", "out.jsonl"]

CASES = [
    Case("inspect-empty-prompt", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:2: field 'prompt_token_ids': expected at least one token, got \[\]",
         files={"t.jsonl": bench("a") + bench("b").replace('"prompt_token_ids": [1, 2]', '"prompt_token_ids": []')}),
    Case("key-given-twice", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: key 'k_max' given twice",
         files={"t.jsonl": own().replace('"k_max": 4', '"k_max": 4, "k_max": 8')}),
    Case("acc-len-null", ["stats", "t.jsonl"],  # it was "missing"
         r"t\.jsonl:1: field 'proposers\.ngram\.acc_len': expected a list of integers, got None",
         files={"t.jsonl": own().replace('"acc_len": [1, 2, 1]', '"acc_len": null')}),
    Case("own-misspelt-field", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'k_mx': unknown field",
         files={"t.jsonl": own().replace('"k_max"', '"k_mx"')}),
    Case("own-misspelt-proposer-field", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'proposers\.ngram\.draft_lenn': unknown field \(expected acc_len, draft_len",
         files={"t.jsonl": own(draft_lenn=[0, 1, 0])}),
    Case("own-misspelt-proposer", ["traces", "inspect", "t.jsonl"],  # read, then left out of every priced table
         r"t\.jsonl:1: field 'proposers\.eagel': unknown proposer \(expected one of ngram, .*; did you mean 'eagle'\?\)",
         files={"t.jsonl": own().replace('"proposers": {"ngram"', '"proposers": {"eagel"')}),
    Case("bench-unknown-proposer", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'acc_eagle_3': unknown proposer \(expected acc_ngram, acc_eagle",
         files={"t.jsonl": bench(acc_eagle_3={"acc_len": [1, 1, 1]})}),
    Case("bench-proposer-under-another-name", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'medusa': unknown proposer \(expected acc_ngram",
         files={"t.jsonl": bench(medusa={"acc_len": [1, 1, 1]})}),
    Case("bench-without-its-output", ["traces", "inspect", "t.jsonl"],  # it named the other format's field
         r"t\.jsonl:1: field 'generated_token_ids': missing",
         files={"t.jsonl": json.dumps({k: v for k, v in json.loads(bench()).items() if k != "generated_token_ids"})}),
    Case("report-of-a-bench-acc-alone", ["report", "t.jsonl", "-o", "out"],
         r"can price none of the proposers \['default'\]; .*traces convert --rename default=METHOD",
         files={"t.jsonl": json.dumps({"id": "a", "prompt_token_ids": [1, 2], "generated_token_ids": [5, 6, 7],
                                       "acc": {"acc_len": [1, 2, 1]}}) + "\n"}),
    Case("bench-misspelt-field", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'datset': unknown field \(did you mean 'dataset'\?\)",
         files={"t.jsonl": bench(datset="gsm8k")}),
    Case("convert-rename-a-tree-onto-a-lookup", ["traces", "convert", "t.jsonl", "--rename", "eagle=ngram", "-o", "o.jsonl"],
         r"--rename eagle=ngram: request 'a' holds a tree_rank for 'eagle', and ngram drafts by lookup",
         files={"t.jsonl": own().replace('"ngram": {', '"eagle": {"tree_rank": [[0], [0], [-1]], ')}),
    Case("convert-k-max-below-a-draft-len", ["traces", "convert", "t.jsonl", "--k-max", "2", "-o", "o.jsonl"],
         r"--k-max 2: request 'a' of dataset 't': field 'proposers\.ngram\.draft_len': expected integers in \[0, 2\], "
         r"got 5 .*; it holds drafts 5 deep \(ngram draft_len 5\): expected --k-max 5 or more",
         files={"t.jsonl": bench(acc=(1, 1, 1)).replace('"acc_len": [1, 1, 1]', '"acc_len": [1, 1, 1], "draft_len": [5, 5, 1]')}),
    Case("own-k-max-as-text", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'k_max': expected an integer, got "
         r"text '4'", files={"t.jsonl": own().replace('"k_max": 4', '"k_max": "4"')}),
    Case("own-empty-dataset", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'dataset': expected non-empty text",
         files={"t.jsonl": own().replace('"k_max": 4', '"k_max": 4, "dataset": ""')}),
    Case("own-blank-dataset", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'dataset': expected non-empty text, got '   '",
         files={"t.jsonl": own().replace('"k_max": 4', '"k_max": 4, "dataset": "   "')}),
    Case("inspect-tree-not-a-shape", ["traces", "inspect", "t.jsonl", "--trees", "2x"], r"argument --trees: expected a tree",
         files=GOOD),
    Case("trace-trees-too-deep", [*TRACE, "--trees", "x".join(["1"] * 65)], r"argument --trees: expected a tree at most 64 "
         r"deep, got 1x1.* of depth 65"),
    Case("trace-trees-only-ngram", [*TRACE, "--trees", "2x2x1"], r"--trees: n-gram proposes no tree",
         files={"w.jsonl": '{"id": "a", "prompt_token_ids": [1, 2]}\n'}),
    Case("report-tree-zero-branching", ["report", "t.jsonl", "-o", "out", "--trees", "2x0"], r"argument --trees: .*>= 1",
         files=GOOD),
    Case("inspect-empty-file", ["traces", "inspect", "t.jsonl"], r"^specscope: error: t\.jsonl: no trace records",
         files={"t.jsonl": ""}),
    Case("inspect-blank-file", ["traces", "inspect", "t.jsonl"], r"t\.jsonl: no trace records", files={"t.jsonl": "\n \n"}),
    Case("inspect-invalid-utf8", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:2: not UTF-8",
         files={"t.jsonl": bench().encode() + b"\xff\xfe\n"}),
    Case("inspect-invalid-json", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:2: invalid JSON",
         files={"t.jsonl": bench() + "{oops\n"}),
    Case("inspect-missing-file", ["traces", "inspect", "absent.jsonl"], r"absent\.jsonl: cannot read"),
    Case("acc-len-1e12-integer", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'acc_ngram\.acc_len': .*1000000000000",
         files={"t.jsonl": bench(acc=(10**12, 1, 1))}),
    Case("acc-len-1e12-float", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'acc_ngram\.acc_len': expected a list of integers",
         files={"t.jsonl": bench().replace("[1, 2, 1]", "[1e12, 1, 1]")}),
    Case("acc-len-beyond-64-bits", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'acc_ngram\.acc_len'",
         files={"t.jsonl": bench(acc=(2**70, 1, 1))}),
    Case("acc-len-empty-list", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'acc_ngram\.acc_len': empty, but the output has 3",
         files={"t.jsonl": bench(acc=())}),
    Case("acc-len-zero", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'acc_ngram\.acc_len': .*got 0 at position 1",
         files={"t.jsonl": bench(acc=(1, 0, 1))}),
    Case("acc-len-above-k-max", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'proposers\.ngram\.acc_len': .*\(k_max = 4\)",
         files={"t.jsonl": own(acc=(1, 6, 1))}),
    Case("k-max-huge", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'k_max': expected an integer <= 64",
         files={"t.jsonl": own(k_max=10**9)}),
    Case("draft-len-other-length", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'proposers\.ngram\.draft_len'",
         files={"t.jsonl": own(draft_len=[1, 1])}),
    Case("negative-token-id", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'prompt_token_ids'",
         files={"t.jsonl": bench().replace("[1, 2]", "[-1, 2]")}),
    Case("output-empty-acc-len-not", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:1: field 'acc_ngram\.acc_len': 3 entries, but the output is empty",
         files={"t.jsonl": bench(output=())}),
    Case("duplicate-id-other-content", ["traces", "inspect", "t.jsonl"], r"t\.jsonl:2: field 'id': .*already at t\.jsonl:1",
         files={"t.jsonl": bench("a") + bench("a", (2, 1, 1))}),
    Case("duplicate-id-across-files", ["simulate", "t.jsonl", "u/t.jsonl", "--acc", "ngram", "--batch-sizes", "1"],
         r"u/t\.jsonl:1: field 'id': .*already at t\.jsonl:1",
         files={"t.jsonl": bench("a"), "u/t.jsonl": bench("a", (2, 1, 1))}),
    Case("convert-output-is-directory", ["traces", "convert", "t.jsonl", "-o", "d"], r"d: is a directory",
         files=GOOD, setup=lambda folder: (folder / "d").mkdir()),
    Case("convert-output-is-its-input", ["traces", "convert", "t.jsonl", "-o", "t.jsonl"],
         r"-o t\.jsonl: is also an input", files=written_by_specscope(GOOD, "t.jsonl")),
    Case("draft-prob-infinite", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'proposers\.ngram\.draft_prob': expected probabilities in \[0, 1\] or null, got inf",
         files={"t.jsonl": own(draft_prob=[[0.5], [1e400], [None]])}),
    Case("draft-prob-as-text", ["traces", "convert", "t.jsonl", "-o", "o.jsonl"],
         r"t\.jsonl:1: field 'proposers\.ngram\.draft_prob\[1\]': expected numbers \(or null\), got '0\.25'",
         files={"t.jsonl": own(draft_prob=[[0.5], ["0.25"], [None]])}),
    Case("draft-prob-true", ["traces", "convert", "t.jsonl", "-o", "o.jsonl"],
         r"t\.jsonl:1: field 'proposers\.ngram\.draft_prob\[0\]': expected numbers \(or null\), got True",
         files={"t.jsonl": own(draft_prob=[[True], [0.25], [None]])}),
    Case("draft-prob-bare-nan", ["stats", "t.jsonl"],  # read as null ("nothing offered") once; null says that
         r"t\.jsonl:1: field 'proposers\.ngram\.draft_prob\[1\]': expected numbers \(or null\), got nan",
         files={"t.jsonl": own(draft_prob=[[0.5], [None], [0.5]]).replace("null", "NaN")}),
    Case("convert-to-csv", ["traces", "convert", "t.jsonl", "-o", "out.csv"],  # it wrote JSON Lines there
         r"out\.csv: expected a \.jsonl output file", files=GOOD),
    Case("gzip-trace", ["stats", "t.jsonl.gz"], r"t\.jsonl\.gz: gzip-compressed \(decompress it first",
         files={"t.jsonl.gz": __import__("gzip").compress(own().encode())}),
    Case("draft-prob-above-one", ["traces", "inspect", "t.jsonl"],
         r"t\.jsonl:1: field 'proposers\.ngram\.draft_prob': expected probabilities in \[0, 1\] or null, got 7\.5",
         files={"t.jsonl": own(draft_prob=[[0.5], [7.5], [None]])}),
    Case("inspect-tree-wider-than-the-rank-cap", ["traces", "inspect", "t.jsonl", "--trees", "63,64"],
         r"argument --trees: 64 has a child of rank 63 \(the top-ranked child is 0\): expected ranks below 63, the "
         r"traces' rank cap", files=GOOD),
    Case("convert-k-max-zero", ["traces", "convert", "t.jsonl", "-o", "o.jsonl", "--k-max", "0"], r"argument --k-max",
         files=GOOD),
    Case("convert-k-max-below-recorded", ["traces", "convert", "t.jsonl", "-o", "o.jsonl", "--k-max", "1"],
         r"--k-max 1: request 'a' of dataset 't': field 'proposers\.ngram\.acc_len': .*; it holds drafts 2 deep "
         r"\(ngram acc_len 3\): expected --k-max 2 or more", files={"t.jsonl": bench(acc=(3, 1, 1))}),
    Case("trace-max-tokens-past-the-positions", ["trace", "--model", ZOO_TARGET, "--proposers", "ngram", "--workload",
                                                 "w.jsonl", "-o", "out.jsonl", "--max-tokens", "5000"],
         r"--max-tokens 5000: the longest prompt \(request 'a', 3 tokens\) and 5000 output tokens exceed the 1024 positions",
         files={"w.jsonl": json.dumps({"id": "a", "prompt_token_ids": [4, 5, 6]}) + "\n"}),
    Case("trace-unknown-proposer", [*TRACE[:4], "foo=m", *TRACE[5:]],  # said as --method's, after the models were read
         r"--proposers: 'foo=m': unknown proposer 'foo' \(known: draft, eagle, eagle3, mtp, ngram\)"),
    Case("trace-proposer-twice", ["trace", "--model", ZOO_TARGET, "--proposers", f"draft={ZOO_TARGET},draft={ZOO_TARGET}",
                                  "--workload", "w.jsonl", "-o", "out.jsonl"],
         r"--proposers: 'draft' given twice", files={"w.jsonl": json.dumps({"id": "a", "prompt_token_ids": [4]}) + "\n"}),
    Case("trace-k-max-huge", [*TRACE, "--k-max", "1000000000"], r"argument --k-max: expected an integer <= 64"),
    Case("trace-k-max-1e9-text", [*TRACE, "--k-max", "1e9"], r"argument --k-max: expected an integer"),
    Case("trace-max-tokens-zero", [*TRACE, "--max-tokens", "0"], r"argument --max-tokens"),
    Case("trace-batch-size-zero", [*TRACE, "--batch-size", "0"], r"argument --batch-size"),
    Case("trace-output-stdout", [*TRACE[:-1], "-"], r"-: expected a regular file"),
    Case("trace-output-directory", [*TRACE[:-1], "d"], r"d: is a directory", setup=lambda folder: (folder / "d").mkdir()),
    Case("trace-min-n-above-max-n", [*TRACE, "--min-n", "3", "--max-n", "2"], r"--min-n 3 is above --max-n 2: no n-gram"),
    Case("trace-batch-size-past-any-engine", [*TRACE, "--batch-size", "100000"],  # sized caches of 100000 rows: 19 GB
         r"argument --batch-size: expected an integer <= 65536"),
    Case("trace-min-n-above-the-default-max-n", [*TRACE, "--min-n", "8"],  # every n-gram acc_len came out 1
         r"--min-n 8 is above --max-n 7 \(--max-n's default\): no n-gram would match"),
    Case("trace-max-n-below-the-default-min-n", [*TRACE, "--max-n", "2"],
         r"--min-n 3 is above --max-n 2 \(--min-n's default\)"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)
