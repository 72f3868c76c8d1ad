"""Bad inputs of the learned policy (policy fit/evaluate/explain, learned:/oracle-switch: policies,
report --policy): each refused in one line naming the option, the file or the field."""

from __future__ import annotations

import json

import pytest
from harness import Case, check


def own(rid: str, dataset: str = "d") -> str:
    return json.dumps({"schema": "specscope.trace/1", "id": rid, "dataset": dataset, "k_max": 6,
                       "prompt_token_ids": [1, 2], "output_token_ids": [5, 6, 7, 8],
                       "proposers": {"ngram": {"acc_len": [1, 2, 1, 1]}, "eagle": {"acc_len": [2, 3, 1, 1]}}}) + "\n"


TRACES = {"t.jsonl": own("a") + own("b")}


def policy_file(methods: tuple[str, ...]) -> str:
    """A well-formed policy file over ``methods`` (J = 2; every weight 0)."""
    from specscope.policy.learned import SCHEMA, feature_names

    width, m = len(feature_names(methods)), len(methods)
    return json.dumps({"schema": SCHEMA, "methods": list(methods), "features": feature_names(methods),
                       "mean": [0.0] * width, "scale": [1.0] * width, "coef": [[0.0] * width] * m,
                       "intercept": [[0.0] * 2] * m, "base_rate": [[0.5] * 2] * m,
                       "pads": False, "models": [{"batch_size": 1, "seconds": [[1.0, 1.1, 1.2]] * m,
                                                  "fixed": [[0.0] * 3] * m, "verify": [0.5, 0.6, 0.7]}]})


EAGLE_POLICY = {"p.json": policy_file(("ngram", "eagle")), "m/keep.txt": "", "w.jsonl": ""}
TWO_DRAFTERS = {"p.json": policy_file(("draft", "eagle")), "m/keep.txt": ""}
NOT_A_POLICY = {**TRACES, "p.json": json.dumps({"schema": "specscope.trace/1"})}
SIM = ["simulate", "t.jsonl", "--batch-sizes", "1", "--policies"]

CASES = [
    Case("fit-repeated-acc", ["policy", "fit", "t.jsonl", "--acc", "ngram,ngram", "-o", "p.json"], r"--acc",
         files=TRACES),
    Case("fit-unknown-proposer", ["policy", "fit", "t.jsonl", "--acc", "ngram,mtp", "-o", "p.json"],
         r"--acc.*'mtp'", files=TRACES),
    Case("fit-bad-batch-size", ["policy", "fit", "t.jsonl", "--batch-sizes", "0", "-o", "p.json"], r"--batch-sizes",
         files=TRACES),
    Case("fit-max-k-zero", ["policy", "fit", "t.jsonl", "--max-k", "0", "-o", "p.json"], r"--max-k", files=TRACES),
    Case("learned-missing-file", [*SIM, "learned:none.json"], r"none\.json", files=TRACES),
    Case("learned-no-argument", [*SIM, "learned"], r"learned:FILE", files=TRACES),
    Case("learned-not-a-policy", [*SIM, "learned:p.json"], r"p\.json.*expected a policy file", files=NOT_A_POLICY),
    Case("switch-one-proposer", [*SIM, "oracle-switch:ngram"], r"oracle-switch:A\+B", files=TRACES),
    Case("switch-unknown-method", [*SIM, "oracle-switch:ngram+foo"], r"unknown method 'foo'", files=TRACES),
    Case("evaluate-one-dataset", ["policy", "evaluate", "t.jsonl"], r"at least two datasets", files=TRACES),
    Case("explain-not-a-policy", ["policy", "explain", "p.json"], r"p\.json", files=NOT_A_POLICY),
    Case("bench-policy-missing", ["bench", "--model", "m", "--workload", "w.jsonl", "--policy", "none.json"],
         r"none\.json: cannot read the policy file", files=TRACES),
    Case("bench-policy-not-a-policy", ["bench", "--model", "m", "--workload", "w.jsonl", "--policy", "p.json"],
         r"p\.json.*expected a policy file", files=NOT_A_POLICY),
    Case("bench-policy-openai", ["bench", "--backend", "openai", "--url", "http://127.0.0.1:1", "--workload",
                                 "w.jsonl", "--policy", "p.json"], r"--policy: only with --backend reference",
         files=NOT_A_POLICY),
    Case("bench-policy-with-k", ["bench", "--model", "m", "--workload", "w.jsonl", "--policy", "p.json", "--k", "2"],
         r"--k", files=NOT_A_POLICY),
    Case("serve-policy-with-method", ["serve", "--model", "m", "--policy", "p.json", "--method", "ngram"],
         r"--method: not used with --policy", files={**NOT_A_POLICY, "m/keep.txt": ""}),
    Case("serve-policy-not-a-policy", ["serve", "--model", "m", "--policy", "p.json"],
         r"p\.json.*expected a policy file", files={**NOT_A_POLICY, "m/keep.txt": ""}),
    Case("serve-policy-without-draft", ["serve", "--model", "m", "--policy", "p.json"],
         r"--policy: p\.json runs eagle: give its checkpoint with --draft DIR", files=EAGLE_POLICY),
    Case("bench-policy-without-draft", ["bench", "--model", "m", "--workload", "w.jsonl", "--policy", "p.json"],
         r"--policy: p\.json runs eagle: give its checkpoint", files=EAGLE_POLICY),
    Case("serve-policy-two-drafters", ["serve", "--model", "m", "--policy", "p.json", "--draft", "m"],
         r"one model drafter beside n-gram", files=TWO_DRAFTERS),
    Case("report-bad-policy", ["report", "t.jsonl", "-o", "out", "--policy", "p.json"], r"p\.json",
         files=NOT_A_POLICY),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)
