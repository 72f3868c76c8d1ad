"""Bad inputs of the learned policy (policy fit/evaluate/explain, learned:/oracle-switch: policies,
report --policy): each refused in one line naming the option, the file or the field."""

from __future__ import annotations

import json

import pytest
from harness import Case, check, run_cli, written_by_specscope


def own(rid: str, dataset: str = "d") -> str:
    return json.dumps({"schema": "specscope.trace/1", "id": rid, "dataset": dataset, "k_max": 6,
                       "prompt_token_ids": [1, 2, ord(rid[0])], "output_token_ids": [5, 6, 7, 8],  # each its own request
                       "proposers": {"ngram": {"acc_len": [1, 2, 1, 1]}, "eagle": {"acc_len": [2, 3, 1, 1]}}}) + "\n"


TRACES = {"t.jsonl": own("a") + own("b")}


TOY = {"kind": "linear", "name": "toy", "forward": {"c_fixed": 0.01, "c_tok": 0.0, "c_kv": 0.0}, "overhead_s": 0.0,
       "drafting": {}}  # the cost model a policy file names as the one it was fitted for


def policy_file(methods: tuple[str, ...]) -> str:
    """A well-formed policy file over ``methods`` (J = 2; every weight 0)."""
    from specscope.policy.features import feature_names
    from specscope.policy.learned import SCHEMA

    width, m = len(feature_names(methods)), len(methods)
    return json.dumps({"schema": SCHEMA, "methods": list(methods), "features": feature_names(methods),
                       "mean": [0.0] * width, "scale": [1.0] * width, "coef": [[0.0] * width] * m,
                       "intercept": [[0.0] * 2] * m, "base_rate": [[0.5] * 2] * m, "span": [[0.0, 0.0]] * m,
                       "pads": False, "cost_model": TOY, "batch_sizes": [1],
                       "training": {"sources": ["t.jsonl"]}, "models": [{"batch_size": 1, "seconds": [[1.0, 1.1, 1.2]] * m,
                                                  "fixed": [[0.0] * 3] * m, "verify": [0.5, 0.6, 0.7]}]})


def altered(change) -> dict[str, str]:
    """The traces and a policy file over n-gram and EAGLE after ``change(document)``."""
    document = json.loads(policy_file(("ngram", "eagle")))
    change(document)
    return {**TRACES, "p.json": json.dumps(document)}


def one_token(rid: str) -> str:
    return json.dumps({"schema": "specscope.trace/1", "id": rid, "dataset": "d", "k_max": 6,
                       "prompt_token_ids": [1, 2], "output_token_ids": [5],
                       "proposers": {"ngram": {"acc_len": [1]}, "eagle": {"acc_len": [1]}}}) + "\n"


EAGLE_POLICY = {"p.json": policy_file(("ngram", "eagle")), "m/keep.txt": "", "w.jsonl": ""}
NGRAM_POLICY = {"p.json": policy_file(("ngram",)), "m/keep.txt": "", "w.jsonl": ""}
TWO_DATASETS = {"t.jsonl": own("a") + own("b"), "u.jsonl": own("c", "e") + own("d", "e")}
TWO_DRAFTERS = {"p.json": policy_file(("draft", "eagle")), "m/keep.txt": ""}
NOT_A_POLICY = {**TRACES, "p.json": json.dumps({"schema": "specscope.trace/1"})}
SIM = ["simulate", "t.jsonl", "--batch-sizes", "1", "--policies"]


def _cost_model() -> str:
    from specscope.costmodel.registry import resolve_cost_model

    return json.dumps(resolve_cost_model("h100-llama3.1-8b").describe())


COST_MODEL = _cost_model()  # a cost-model file a run reads (the paper's fit, written out)

CASES = [
    Case("policy-cost-model-not-an-object", ["simulate", "t.jsonl", "--policies", "learned:p.json", "-o", "s.csv"],
         r"p\.json: malformed policy file: cost_model: expected a JSON object, got str",
         files=altered(lambda d: d.update(cost_model="garbage"))),
    Case("policy-batch-sizes-a-bare-double-dash", ["policy", "fit", "t.jsonl", "--batch-sizes=--", "-o", "p.json"],
         r"argument --batch-sizes: expected a value, got '--'", files=TRACES),  # argparse handed on [] (a traceback)
    Case("policy-cost-model-without-a-name", ["policy", "explain", "p.json"],  # a KeyError's traceback in three verbs
         r"p\.json: malformed policy file: cost_model: field 'name': missing",
         files=altered(lambda d: d["cost_model"].pop("name"))),
    Case("policy-batch-sizes-not-its-models", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: batch_sizes: expected those of its models, \[1\], got \[1, 8\]",
         files=altered(lambda d: d.update(batch_sizes=[1, 8]))),
    Case("policy-batch-size-absurd", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: models\[0\]\.batch_size: expected an integer in 1 … 65536, once, got 100000000000",
         files=altered(lambda d: d["models"][0].update(batch_size=10**11))),
    Case("policy-key-twice", ["policy", "explain", "p.json"], r"p\.json: key 'pads' given twice",
         files={**TRACES, "p.json": policy_file(("ngram", "eagle")).replace('"pads": false', '"pads": false, "pads": true')}),
    Case("policy-unknown-field", ["policy", "explain", "p.json"], r"p\.json: malformed policy file: extra: unknown field",
         files=altered(lambda d: d.update(extra=1))),
    Case("policy-deeper-than-any-engine", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: intercept: expected \[2\]\[J\], 1 <= J <= 64",
         files=altered(lambda d: [d.update(intercept=[[0.0] * 100] * 2, base_rate=[[0.5] * 100] * 2),
                                  d["models"][0].update(seconds=[[1.0] * 101] * 2, fixed=[[0.0] * 101] * 2,
                                                        verify=[0.5] * 101)])),
    Case("policy-file-twice", SIM + ["learned:p.json,learned:./p.json"],
         r"policies 'learned:p\.json' and 'learned:\./p\.json' read one policy file's content \(SHA-256 [0-9a-f]+\): "
         r"give it once", files=altered(lambda d: None)),
    Case("evaluate-view-is-the-cost-model", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--cost-model", "h100-llama3.1-8b",
                                             "--view", "cm.json"],
         r"--view cm\.json: prices every step as h100-llama3\.1-8b does \(it would be judged twice\)",
         files={**TWO_DATASETS, "cm.json": COST_MODEL}),
    Case("policy-feature-redefined", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: features\.ngram_offer: expected the definition this code computes, "
         r"'tokens n-gram lookup offers now \(0: no match\)', got 'tokens the EAGLE head offers now \(squared\)'",
         files=altered(lambda d: d["features"].update(ngram_offer="tokens the EAGLE head offers now (squared)"))),
    Case("policy-made-by-a-number", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: training: expected what it was fitted on .*the code that fitted it and the cost model.s name as text",
         files=altered(lambda d: d["training"].update(made_by=5))),
    Case("policy-sources-not-names", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: training: expected what it was fitted on \(an object with its sources' names",
         files=altered(lambda d: d["training"].update(sources=[{"a": 1}]))),
    Case("policy-price-absurd", ["policy", "explain", "p.json"], r"models\[0\] \(batch size 1\): expected seconds .*at most 3600",
         files=altered(lambda d: d["models"][0]["seconds"][0].__setitem__(1, 1e300))),
    Case("policy-price-free", ["policy", "explain", "p.json"], r"models\[0\] \(batch size 1\): expected seconds .*above 0",
         files=altered(lambda d: d["models"][0]["seconds"][0].__setitem__(1, 0.0))),  # a step takes time: a ratio needs it
    Case("policy-confidence-not-a-probability", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: models\[0\] \(batch size 1\): confidence: expected a probability p, "
         r"0 < p <= 1, or null .*got 1\.5", files=altered(lambda d: d["models"][0].update(confidence=1.5))),
    Case("policy-confidence-on-traces-without-probabilities", SIM + ["learned:p.json"],
         r"dataset 'd', proposer 'eagle': policy 'learned:p\.json' stops it at its confidence .*record 'a' keeps "
         r"draft_prob to 0 drafts: re-trace with `specscope trace --draft-probs 2`",
         files=altered(lambda d: d["models"][0].update(confidence=0.5))),
    Case("policy-coef-ragged", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: coef: expected a list \(of equal-length lists\) of numbers",
         files=altered(lambda d: d.update(coef=[[0.0], [0.0, 1.0]]))),
    Case("policy-coef-infinite", ["policy", "explain", "p.json"], r"p\.json: malformed policy file: coef: expected finite",
         files=altered(lambda d: d["coef"].__setitem__(0, [1e400] + d["coef"][0][1:]))),
    Case("policy-lookup-pays-a-drafting", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: models\[0\] \(batch size 1\): fixed: expected 0 at k = 0 .*lookup's row \(ngram\)",
         files=altered(lambda d: d["models"][0].update(fixed=[[0.0, 0.1, 0.1], [0.0, 0.2, 0.3]]))),
    Case("policy-drafting-at-k-zero", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: models\[0\] \(batch size 1\): fixed: expected 0 at k = 0",
         files=altered(lambda d: d["models"][0].update(fixed=[[0.0, 0.0, 0.0], [0.1, 0.2, 0.3]]))),
    Case("policy-cost-model-drafting-a-list", SIM + ["learned:p.json"],
         r"p\.json: malformed policy file: cost_model: field 'drafting': expected a JSON object, got list",
         files=altered(lambda d: d["cost_model"].update(drafting=[1]))),
    Case("fit-cost-model-past-a-policy-files-prices", ["policy", "fit", "t.jsonl", "--cost-model", "cm.json",
                                                       "--batch-sizes", "1", "-o", "p.json"],
         r"policy fit: cost model 'h100-llama3\.1-8b' prices a step at batch size 1 at .* s, beyond the 3600 s",
         files={**TRACES, "cm.json": COST_MODEL.replace('"c_fixed": 0.00588590713', '"c_fixed": 3599.0')
                .replace('"overhead_s": 0.00120683946', '"overhead_s": 3599.0')}),
    Case("fit-batch-size-absurd", ["policy", "fit", "t.jsonl", "--batch-sizes", "100000000000", "-o", "p.json"],
         r"argument --batch-sizes: .*expected an integer <= 65536", files=TRACES),
    Case("report-policy-deeper-than-the-traces", ["report", "t.jsonl", "--policy", "p.json", "-o", "out"],
         r"dataset 'd', proposer 'ngram': policy 'learned:p\.json' proposes k = 8, above the trace's k_max = 6",
         files=altered(lambda d: (d.update(intercept=[[0.0] * 8] * 2, base_rate=[[0.5] * 8] * 2),
                                  d["models"][0].update(seconds=[[1.0] * 9] * 2, fixed=[[0.0] * 9] * 2,
                                                        verify=[0.5] * 9)))),
    Case("fit-repeated-acc", ["policy", "fit", "t.jsonl", "--acc", "ngram,ngram", "-o", "p.json"], r"--acc",
         files=TRACES),
    Case("fit-proposer-not-traced", ["policy", "fit", "t.jsonl", "--acc", "ngram,mtp", "--cost-model",
                                     "roofline:h100:llama3.1-8b", "-o", "p.json"],
         r"--acc: proposer 'mtp' missing from 2 records", files=TRACES),
    Case("fit-proposer-not-priced", ["policy", "fit", "t.jsonl", "--acc", "ngram,mtp", "-o", "p.json"],
         r"--cost-model h100-llama3\.1-8b: cost model 'h100-llama3\.1-8b' has no drafting model for proposer 'mtp'",
         files=TRACES),
    Case("fit-bad-batch-size", ["policy", "fit", "t.jsonl", "--batch-sizes", "0", "-o", "p.json"], r"--batch-sizes",
         files=TRACES),
    Case("fit-max-k-zero", ["policy", "fit", "t.jsonl", "--max-k", "0", "-o", "p.json"], r"--max-k", files=TRACES),
    # deeper than a policy proposes: was fitted at k = 20 with a note blaming the traces
    Case("fit-max-k-past-a-policy", ["policy", "fit", "t.jsonl", "--max-k", "21", "-o", "p.json"],
         r"--max-k 21: a learned policy proposes at most k = 20", files=TRACES),
    Case("learned-missing-file", [*SIM, "learned:none.json"], r"none\.json", files=TRACES),
    Case("learned-no-argument", [*SIM, "learned"], r"learned:FILE", files=TRACES),
    Case("learned-not-a-policy", [*SIM, "learned:p.json"], r"p\.json.*expected a policy file", files=NOT_A_POLICY),
    Case("switch-one-proposer", [*SIM, "oracle-switch:ngram"], r"oracle-switch:A\+B", files=TRACES),
    Case("switch-unknown-method", [*SIM, "oracle-switch:ngram+foo"], r"unknown method 'foo'", files=TRACES),
    Case("evaluate-record-without-a-method", ["policy", "evaluate", "t.jsonl", "u.jsonl"],
         r"--acc: proposer 'eagle' missing from 1 records \(first id 'd' of dataset 'e'\)",
         files={**TWO_DATASETS, "u.jsonl": own("c", "e") + own("d", "e").replace(', "eagle": {"acc_len": [2, 3, 1, 1]}', "")}),
    Case("evaluate-one-dataset", ["policy", "evaluate", "t.jsonl"], r"at least two datasets", files=TRACES),
    Case("evaluate-steady-paper-mode", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--mode", "paper", "--throughput",
                                        "steady"], r"--throughput steady: paper mode's B copies .*--mode mixed",
         files=TRACES),
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
    Case("serve-policy-with-method-none", ["serve", "--model", "m", "--policy", "p.json", "--method", "none"],
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
    Case("report-policy-method-not-traced", ["report", "t.jsonl", "-o", "out", "--ks", "2", "--batch-sizes", "1",
                                             "--policy", "p.json"],
         r"--policy p\.json: chooses 'mtp', which the traces do not record",
         files={**TRACES, "p.json": policy_file(("ngram", "mtp"))}),
    Case("fit-combined", ["policy", "fit", "t.jsonl", "--acc", "combined,ngram", "-o", "p.json"],
         r"--acc: 'combined'", files=TRACES),
    Case("fit-repeated-batch-size", ["policy", "fit", "t.jsonl", "--batch-sizes", "1,1", "-o", "p.json"],
         r"--batch-sizes: expected distinct", files=TRACES),
    Case("fit-no-steps", ["policy", "fit", "t.jsonl", "-o", "p.json"], r"no step to learn from",
         files={"t.jsonl": one_token("a") + one_token("b")}),
    Case("fit-output-is-input", ["policy", "fit", "t.json", "-o", "t.json"], r"-o t\.json: is also an input",
         files=written_by_specscope({"t.json": TRACES["t.jsonl"]}, "t.json")),
    Case("fit-output-not-json", ["policy", "fit", "t.jsonl", "-o", "p.csv"], r"p\.csv: expected a \.json output file",
         files=TRACES),
    Case("evaluate-repeated-acc", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--acc", "ngram,ngram"], r"--acc",
         files=TWO_DATASETS),
    Case("evaluate-one-proposer", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--acc", "ngram"],
         r"--acc: expected 2 proposers", files=TWO_DATASETS),
    Case("evaluate-batch-too-large", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--batch-sizes", "8", "-o", "e.csv"],
         r"--batch-sizes: mixed mode", files=TWO_DATASETS),
    Case("policy-free-step", [*SIM, "learned:p.json"], r"p\.json.*batch size 1",
         files=altered(lambda d: d["models"][0].update(seconds=[[0.0, 1.1, 1.2]] * 2, verify=[0.0, 0.6, 0.7]))),
    Case("policy-features-mismatch", ["policy", "explain", "p.json"], r"p\.json.*features",
         files=altered(lambda d: d.update(methods=["eagle", "ngram"]))),
    Case("policy-features-missing", ["policy", "explain", "p.json"], r"p\.json.*missing field 'features'",
         files=altered(lambda d: d.pop("features"))),
    Case("policy-no-depth", [*SIM, "learned:p.json"], r"p\.json.*1 <= J <= 64",
         files=altered(lambda d: d.update(intercept=[[], []], base_rate=[[], []], models=[
             {"batch_size": 1, "seconds": [[1.0]] * 2, "fixed": [[0.0]] * 2, "verify": [0.5]}]))),
    Case("policy-span-reversed", [*SIM, "learned:p.json"], r"p\.json: malformed policy file: span: expected \[least, greatest\] pairs, least <= greatest",
         files=altered(lambda d: d.update(span=[[1.0, -1.0]] * 2))),
    Case("policy-span-missing", ["policy", "explain", "p.json"], r"p\.json: malformed policy file: span: missing",
         files=altered(lambda d: d.pop("span"))),
    Case("policy-coefficient-as-text", [*SIM, "learned:p.json"],
         r"p\.json: malformed policy file: coef: expected a list .* of numbers, written as numbers",
         files=altered(lambda d: d["coef"][0].__setitem__(0, "0.5"))),
    Case("policy-true-as-a-number", [*SIM, "learned:p.json"], r"p\.json: malformed policy file: mean: expected .* numbers",
         files=altered(lambda d: d["mean"].__setitem__(0, True))),
    Case("policy-training-missing", ["policy", "explain", "p.json"], r"p\.json: malformed policy file: missing field 'training'",
         files=altered(lambda d: d.pop("training"))),
    Case("policy-training-not-an-object", [*SIM, "learned:p.json"], r"p\.json: malformed policy file: training: expected",
         files=altered(lambda d: d.update(training="x"))),
    Case("policy-training-steps-as-text", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: training: expected .* steps as counts",
         files=altered(lambda d: d["training"].update(steps="many"))),
    Case("policy-feature-definition-not-text", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: features: expected .* each with its definition",
         files=altered(lambda d: d["features"].update(log_pos=5))),
    Case("policy-batch-sizes-missing", [*SIM, "learned:p.json"], r"p\.json: malformed policy file: missing field 'batch_sizes'",
         files=altered(lambda d: d.pop("batch_sizes"))),
    Case("policy-older-schema", [*SIM, "learned:p.json"],
         r"p\.json: expected a policy file .*, got 'specscope\.policy/5': made by another specscope; fit it again",
         files=altered(lambda d: d.update(schema="specscope.policy/5"))),
    Case("policy-batch-sizes-true", [*SIM, "learned:p.json"], r"p\.json: malformed policy file: batch_sizes: expected those",
         files=altered(lambda d: d.update(batch_sizes=[True]))),
    Case("policy-schema-a-number", [*SIM, "learned:p.json"], r"p\.json: expected a policy file .*, got 6$",
         files=altered(lambda d: d.update(schema=6))),
    Case("policy-base-rate-nan", [*SIM, "learned:p.json"], r"p\.json: malformed policy file: base_rate: expected rates in \(0, 1\)",
         files=altered(lambda d: d["base_rate"][0].__setitem__(0, float("nan")))),
    Case("policy-unknown-method", ["policy", "explain", "p.json"], r"p\.json: field 'methods': unknown method 'foo'",
         files=altered(lambda d: d.update(methods=["ngram", "foo"]))),
    Case("policy-batch-size-float", ["policy", "explain", "p.json"], r"p\.json.*models\[0\]\.batch_size: .*got 1\.5",
         files=altered(lambda d: d["models"][0].update(batch_size=1.5))),
    Case("policy-batch-size-twice", ["policy", "explain", "p.json"], r"p\.json.*models\[1\]\.batch_size: .*once, got 1",
         files=altered(lambda d: d["models"].append(dict(d["models"][0])))),
    Case("policy-models-not-a-list", ["policy", "explain", "p.json"], r"p\.json.*models",
         files=altered(lambda d: d.update(models="ab"))),
    Case("explain-traces-missing", ["policy", "explain", "p.json", "--traces", "none.jsonl"], r"none\.jsonl",
         files={"p.json": policy_file(("ngram", "eagle"))}),
    Case("bench-policy-with-method", ["bench", "--model", "m", "--workload", "w.jsonl", "--policy", "p.json",
                                      "--method", "mtp"], r"--method: not used with --policy", files=EAGLE_POLICY),
    Case("policy-integer-beyond-a-float", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: coef: expected finite numbers \(one is too large for a float\)",
         files={**TRACES, "p.json": policy_file(("ngram", "eagle")).replace('"coef": [[0.0', '"coef": [[' + "9" * 400, 1)}),
    Case("policy-coef-over-scale-overflows", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: coef, scale and mean: too large together",
         files=altered(lambda d: (d["coef"][0].__setitem__(0, 1e308), d["scale"].__setitem__(0, 1e-308)))),
    Case("policy-model-unknown-field", ["policy", "explain", "p.json"],
         r"p\.json: malformed policy file: models\[0\] \(batch size 1\): verfiy: unknown field",
         files=altered(lambda d: d["models"][0].update(verfiy=[0.5, 0.6, 0.7]))),
    Case("simulate-output-is-its-policy", [*SIM, "learned:p.json", "-o", "p.json"], r"-o p\.json: is also an input",
         files=written_by_specscope({**TRACES, "p.json": policy_file(("ngram", "eagle"))}, "p.json")),
    Case("fit-output-is-its-cost-model", ["policy", "fit", "t.jsonl", "--cost-model", "cm.json", "-o", "cm.json"],
         r"-o cm\.json: is also an input \(cm\.json\)",
         files=written_by_specscope({**TRACES, "cm.json": COST_MODEL}, "cm.json")),
    Case("evaluate-output-is-a-view", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--cost-model", "roofline:h100:llama3.1-8b",
                                         "--view", "cm.json", "-o", "cm.json"],
         r"-o cm\.json: is also an input \(cm\.json\)",
         files=written_by_specscope({**TWO_DATASETS, "cm.json": COST_MODEL}, "cm.json")),
    Case("evaluate-dataset-no-step", ["policy", "evaluate", "t.jsonl", "u.jsonl"],
         r"dataset 'e': no request decodes past its first token",
         files={**TWO_DATASETS, "u.jsonl": one_token("c").replace('"d"', '"e"')}),
    Case("evaluate-view-prices-no-proposer", ["policy", "evaluate", "t.jsonl", "u.jsonl", "--acc", "ngram,mtp",
                                              "--cost-model", "roofline:h100:llama3.1-8b", "--view", "h100-llama3.1-8b"],
         r"--view h100-llama3\.1-8b: cost model 'h100-llama3\.1-8b' has no drafting model for proposer 'mtp'",
         files=TWO_DATASETS),
    Case("fit-acc-not-a-method", ["policy", "fit", "t.jsonl", "--acc", "ngram,foo", "-o", "p.json"],
         r"--acc: unknown method 'foo' \(known: ", files=TRACES),
    Case("evaluate-dataset-a-copy", ["policy", "evaluate", "t.jsonl", "u.jsonl"],
         r"dataset '.': every one of its 2 requests is also in another dataset",
         files={**TWO_DATASETS, "u.jsonl": TWO_DATASETS["t.jsonl"].replace('"dataset": "d"', '"dataset": "e"')}),
    Case("bench-policy-lookups-with-draft", ["bench", "--model", "m", "--workload", "w.jsonl", "--policy", "p.json",
                                             "--draft", "m"], r"--draft: p\.json runs no model drafter",
         files=NGRAM_POLICY),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


def test_a_dataset_with_no_walked_step_is_refused(tmp_path, monkeypatch):
    """A held-out dataset whose outputs are long but whose acc_len arrays cover one position has
    no step a walk replays: refused (its row would be the prefill alone, counted in the verdict),
    after the note that says what the walk replays."""
    cut = TWO_DATASETS["u.jsonl"].replace('"eagle": {"acc_len": [2, 3, 1, 1]}', '"eagle": {"acc_len": [2]}')
    for name, text in {**TWO_DATASETS, "u.jsonl": cut}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(["policy", "evaluate", "t.jsonl", "u.jsonl"])
    lines = outcome.stderr.strip().splitlines()
    assert outcome.status == 2 and "Traceback" not in outcome.stderr
    assert lines[0].startswith("note: u.jsonl: 2 of 2 records had acc_len arrays of another length")
    assert lines[-1] == ("specscope: error: dataset 'e': no request decodes past its first token within the positions "
                         "its output and the acc_len arrays of ngram, eagle cover: nothing to judge")
