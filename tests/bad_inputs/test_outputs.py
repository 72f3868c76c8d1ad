"""Bad outputs and options of the analysis verbs (stats, overlap, paper, report, study,
workload, zoo): refused before any work, in one line, leaving nothing behind."""

from __future__ import annotations

import json
import os

import pytest
from harness import Case, check

TRACE = json.dumps({
    "schema": "specscope.trace/1", "id": "r1", "dataset": "d", "k_max": 4,
    "prompt_token_ids": [1, 2, 3], "output_token_ids": [4, 5, 6, 7],
    "proposers": {"ngram": {"acc_len": [1, 2, 1, 1]}, "eagle": {"acc_len": [2, 3, 1, 1]}},
}) + "\n"
WITH_TRACE = {"t.jsonl": TRACE}
WITH_DIR = {**WITH_TRACE, "taken/keep.txt": "mine"}
WITH_FILE = {**WITH_TRACE, "taken.txt": "mine"}

CASES = [
    Case("stats-o-directory", ["stats", "t.jsonl", "-o", "taken"], r"taken: is a directory", WITH_DIR),
    Case("stats-o-suffix", ["stats", "t.jsonl", "-o", "rows.txt"], r"rows\.txt: expected a \.csv or \.json", WITH_TRACE),
    Case("stats-o-under-a-file", ["stats", "t.jsonl", "-o", "taken.txt/rows.csv"], r"taken\.txt: is not a directory",
         WITH_FILE),
    Case("stats-two-stdouts", ["stats", "t.jsonl", "-o", "-", "--pairs-output", "-"], r"only one output may be -",
         WITH_TRACE),
    Case("stats-pairs-output-directory", ["stats", "t.jsonl", "--pairs-output", "taken"], r"taken: is a directory",
         WITH_DIR),
    Case("stats-two-outputs-one-file", ["stats", "t.jsonl", "-o", "rows.csv", "--pairs-output", "./rows.csv"],
         r"--pairs-output \S*rows\.csv: also given to -o", WITH_TRACE),
    Case("stats-pairs-output-is-an-input", ["stats", "t.json", "--pairs-output", "t.json"],
         r"--pairs-output t\.json: is also an input", {"t.json": TRACE}),
    Case("overlap-two-outputs-one-file", ["overlap", "t.jsonl", "-o", "rows.csv", "--bleu-output", "rows.csv"],
         r"--bleu-output rows\.csv: also given to -o", WITH_TRACE),
    Case("overlap-batch-size-zero", ["overlap", "t.jsonl", "--batch-sizes", "1,0"], r"--batch-sizes", WITH_TRACE),
    Case("overlap-batch-size-text", ["overlap", "t.jsonl", "--batch-sizes", "1,x"], r"--batch-sizes.*'x'", WITH_TRACE),
    Case("overlap-lookup-not-in-the-traces", ["overlap", "t.jsonl", "--lookup", "foo"],
         r"--lookup foo --reference eagle: no record holds both traces \(the traces hold eagle, ngram\)", WITH_TRACE),
    Case("overlap-lookup-policy-of-two-proposers", ["overlap", "t.jsonl", "--lookup-policies", "oracle-combined:ngram+eagle"],
         r"--lookup-policies: oracle-combined:ngram\+eagle replays several proposers", WITH_TRACE),
    Case("bound-batch-size-absurd", ["bound", "t.jsonl", "--batch-size", "100000000"],
         r"argument --batch-size: expected an integer <= 65536", WITH_TRACE),
    Case("bound-context-absurd", ["bound", "t.jsonl", "--context", "1e300"], r"argument --context: expected a number <= ",
         WITH_TRACE),
    Case("overlap-bleu-output-directory", ["overlap", "t.jsonl", "--bleu-output", "taken"], r"taken: is a directory",
         WITH_DIR),
    Case("stats-o-given-twice", ["stats", "t.jsonl", "-o", "a.csv", "-o", "b.csv"],
         r"argument -o/--output: given twice \(a\.csv and b\.csv\); give it once", WITH_TRACE),
    Case("overlap-option-twice-abbreviated", ["overlap", "t.jsonl", "--batch-sizes", "1", "--batch", "8"],
         r"argument --batch-sizes: given twice \(1 and 8\)", WITH_TRACE),
    Case("paper-missing-dir", ["paper", "--traces-dir", "nowhere"], r"nowhere: not a directory \(--traces-dir\)"),
    Case("paper-folder-named-like-traces", ["paper", "--traces-dir", "p"], r"p: no \*\.jsonl trace files",
         {"p/dir.jsonl/keep.txt": "mine"}),
    Case("paper-empty-dir", ["paper", "--traces-dir", "taken"], r"taken: no \*\.jsonl trace files", WITH_DIR),
    Case("paper-o-is-the-reference", ["paper", "--traces-dir", "p", "-o", "p/figures_gsm8k_sharegpt.csv"],
         r"-o p/figures_gsm8k_sharegpt\.csv: is also an input",
         {"p/llama3.1-8b_gsm8k.jsonl": TRACE, "p/figures_gsm8k_sharegpt.csv": "acc,dataset,policy,bs1\n"}),
    Case("paper-reference-not-finite", ["paper", "--traces-dir", "p"], r"p/figures_gsm8k_sharegpt\.csv:2: .*not a finite number",
         {"p/llama3.1-8b_gsm8k.jsonl": TRACE,
          "p/figures_gsm8k_sharegpt.csv": "acc,dataset,policy,bs1\nngram,gsm8k,fixed1,nan\n"}),
    Case("paper-reference-line-counts-comments", ["paper", "--traces-dir", "p"],
         r"p/figures_gsm8k_sharegpt\.csv:4: .*could not convert string to float: 'abc'",
         {"p/llama3.1-8b_gsm8k.jsonl": TRACE,
          "p/figures_gsm8k_sharegpt.csv": "# read by eye\n# two comments\nacc,dataset,policy,bs1\nngram,gsm8k,fixed1,abc\n"}),
    Case("paper-reference-row-twice", ["paper", "--traces-dir", "p"],
         r"p/figures_gsm8k_sharegpt\.csv:4: ngram gsm8k fixed1 is already on line 2",
         {"p/llama3.1-8b_gsm8k.jsonl": TRACE,
          "p/figures_gsm8k_sharegpt.csv": "acc,dataset,policy,bs1\nngram,gsm8k,fixed1,1.1\nngram,gsm8k,fixed3,1.2\n"
                                          "ngram,gsm8k,fixed1,9.9\n"}),
    Case("paper-o-directory", ["paper", "--traces-dir", "taken", "-o", "taken"], r"taken: is a directory", WITH_DIR),
    Case("report-o-is-a-file", ["report", "t.jsonl", "-o", "taken.txt"], r"taken\.txt: exists and is not a directory",
         WITH_FILE),
    Case("report-o-holds-a-users-table", ["report", "t.jsonl", "-o", "mine"],
         r"-o mine: holds speedup\.csv, which no report wrote there", {**WITH_TRACE, "mine/speedup.csv": "mine\n"}),
    Case("report-every-batch-size-above-the-requests", ["report", "t.jsonl", "-o", "out", "--batch-sizes", "2,8"],
         r"--batch-sizes: 2,8: every one is above the requests of every dataset here \(the largest holds 1", WITH_TRACE),
    Case("report-figure-policy-not-simulated", ["report", "t.jsonl", "-o", "out", "--figure-policies", "fixed:1,bogus"],
         r"--figure-policies: 'bogus' is not a policy the report simulates", WITH_TRACE),
    Case("report-seed-negative", ["report", "t.jsonl", "-o", "out", "--seed", "-1"], r"--seed", WITH_TRACE),
    Case("report-seed-past-64-bits", ["report", "t.jsonl", "-o", "out", "--seed", str(2**80)], r"--seed.*<= 18446744073709551615",
         WITH_TRACE),
    Case("report-measured-bad-json", ["report", "t.jsonl", "-o", "out", "--measured", "bad.json"], r"bad\.json:2",
         {**WITH_TRACE, "bad.json": '{"rows":\n'}),
    Case("report-measured-no-sd-cell", ["report", "t.jsonl", "-o", "out", "--measured", "m.json"],
         r"m\.json: item 0: field 'method': expected an SD method \(none is each cell's baseline",
         {**WITH_TRACE, "m.json": json.dumps([{"method": "none", "k": 0, "batch_size": 1, "speedup": 0.9}])}),
    Case("report-measured-k-zero", ["report", "t.jsonl", "-o", "out", "--measured", "m.json"],
         r"m\.json: item 0: field 'k': expected an integer >= 1, got 0",
         {**WITH_TRACE, "m.json": json.dumps([{"method": "eagle", "k": 0, "batch_size": 1, "speedup": 1.2}])}),
    Case("report-steps-bad-line", ["report", "t.jsonl", "-o", "out", "--steps", "steps.jsonl"], r"steps\.jsonl:1",
         {**WITH_TRACE, "steps.jsonl": "garbage\n"}),
    Case("study-k-zero", ["study", "--k", "0"], r"--k: expected an integer >= 1"),
    Case("study-batch-above-requests", ["study", "--requests", "2"],
         r"--batch-sizes: 8 is above the 2 requests the study uses of \S+code\.jsonl"),
    Case("study-k-above-k-max", ["study", "--k", "5", "--k-max", "3"], r"--k 5: above --k-max 3"),
    Case("study-k-max-past-the-limit", ["study", "--k-max", "100"], r"--k-max: expected an integer <= 64"),
    Case("study-max-tokens-one", ["study", "--max-tokens", "1"], r"--max-tokens: expected an integer >= 2"),
    Case("study-threads-text", ["study", "--threads", "two"], r"--threads.*'two'"),
    Case("study-o-is-a-file", ["study", "-o", "taken.txt"], r"taken\.txt: exists and is not a directory", WITH_FILE),
    Case("study-workload-without-model", ["study", "--workload", "w.jsonl"], r"--workload: only with --model"),
    Case("study-batch-size-twice", ["study", "--batch-sizes", "1,1"], r"--batch-sizes: expected distinct"),
    Case("study-workloads-of-one-name", ["study", "--model", ".", "--workload", "a/w.jsonl", "--workload", "b/w.jsonl"],
         r"--workload: two workloads named 'w'"),
    Case("study-replay-unknown", ["study", "--replay", "roofline:h999:x"], r"h999"),
    Case("study-folder-not-a-study", ["study", "-o", "."], r"not empty and holds no study\.json", WITH_FILE),
    Case("study-model-without-config", ["study", "--model", "taken", "--workload", "t.jsonl"],
         r"taken: no config\.json", WITH_DIR),
    Case("workload-n-zero", ["workload", "make", "code", "--n", "0", "-o", "w.jsonl"], r"--n"),
    Case("workload-seed-float", ["workload", "make", "code", "--seed", "1.5", "-o", "w.jsonl"], r"--seed.*'1\.5'"),
    Case("workload-o-directory", ["workload", "make", "code", "-o", "taken"], r"taken: is a directory", WITH_DIR),
    Case("workload-o-is-its-source", ["workload", "make", "gsm8k", "--source", "g.jsonl", "-o", "g.jsonl"],
         r"-o g\.jsonl: is also an input", {"g.jsonl": json.dumps({"question": "q", "answer": "a"}) + "\n"}),
    Case("workload-source-directory", ["workload", "make", "gsm8k", "--source", "taken", "-o", "w.jsonl"],
         r"taken: is a directory \(expected a dataset file\)", WITH_DIR),
    Case("workload-json-source-key-twice", ["workload", "make", "gsm8k", "--source", "g.json", "-o", "w.jsonl"],
         r"g\.json: key 'question' given twice", {"g.json": '[{"question": "a", "question": "b"}]'}),
    Case("workload-json-source-huge-number", ["workload", "make", "gsm8k", "--source", "g.json", "-o", "w.jsonl"],
         r"g\.json: invalid JSON \(Exceeds the limit", {"g.json": '[{"question": ' + "9" * 5000 + "}]"}),
    Case("workload-csv-unclosed-quote", ["workload", "make", "gsm8k", "--source", "g.csv", "-o", "w.jsonl"],
         r"g\.csv:3: not CSV \(unexpected end of data, in the row that starts here\)",
         {"g.csv": 'question,answer\nq1,1\n"open,2\nq3,3\n'}),
    Case("workload-csv-row-short", ["workload", "make", "gsm8k", "--source", "g.csv", "-o", "w.jsonl"],
         r"g\.csv:3: expected the header's 2 fields, got 1", {"g.csv": "question,answer\nq1,1\nq2\n"}),
    Case("workload-missing-source", ["workload", "make", "gsm8k", "--source", "missing.jsonl", "-o", "w.jsonl"],
         r"missing\.jsonl"),
    Case("zoo-evaluate-k-zero", ["zoo", "evaluate", "--k", "0"], r"--k"),
    Case("zoo-evaluate-n-zero", ["zoo", "evaluate", "--n", "0"], r"--n: expected an integer >= 1, got 0"),
    Case("zoo-evaluate-k-past-the-limit", ["zoo", "evaluate", "--k", "65"], r"--k: expected an integer <= 64"),
    Case("zoo-evaluate-o-not-json", ["zoo", "evaluate", "-o", "z.csv"], r"z\.csv: expected a \.json output file"),
    Case("zoo-evaluate-o-directory", ["zoo", "evaluate", "-o", "taken"], r"taken: is a directory", WITH_DIR),
    Case("zoo-train-o-holds-other-files", ["zoo", "train", "--quick", "-o", "taken"],
         r"taken: not empty and holds no training\.json", WITH_DIR),
    Case("zoo-train-o-is-a-file", ["zoo", "train", "-o", "taken.txt"], r"taken\.txt: exists and is not a directory",
         WITH_FILE),
    Case("unknown-verb", ["simulated"], r"invalid choice: 'simulated'"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


def test_dev_null_is_never_replaced(tmp_path, monkeypatch):
    """``-o /dev/null`` is a valid output; a refused run with it leaves the device as it was."""
    check(Case("stats-dev-null-bad-trace", ["stats", "missing.jsonl", "-o", os.devnull], r"missing\.jsonl",
               untouched=(os.devnull,)), tmp_path, monkeypatch)
