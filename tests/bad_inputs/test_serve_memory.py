"""Bad options of `specscope serve` (refused before a model is loaded or a port bound) and
`specscope memory` (configs with impossible shapes)."""

from __future__ import annotations

import json

import pytest
from harness import Case, check

CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "vocab_size": 100}
WITH_DIR = {"empty/keep.txt": ""}

CASES = [
    Case("serve-model-without-config", ["serve", "--model", "empty"], r"empty: expected a Hugging Face model directory",
         WITH_DIR),
    Case("serve-port-past-65535", ["serve", "--model", "empty", "--port", "70000"], r"--port: expected 0\.\.65535",
         WITH_DIR),
    Case("serve-k-zero", ["serve", "--model", "empty", "--k", "0"], r"argument --k: expected an integer >= 1, got 0", WITH_DIR),
    Case("serve-k-without-sd", ["serve", "--model", "empty", "--method", "none", "--k", "5"],
         r"--k: only used with an SD --method", WITH_DIR),
    Case("serve-draft-of-a-lookup", ["serve", "--model", "empty", "--method", "ngram", "--draft", "empty"],
         r"--draft: only used with a method that reads a checkpoint .*not ngram", WITH_DIR),
    Case("serve-port-text", ["serve", "--model", "empty", "--port", "http"], r"--port"),
    Case("serve-step-records-directory", ["serve", "--model", "empty", "--step-records", "empty"],
         r"--step-records: empty: is a directory", WITH_DIR),
    Case("memory-unknown-preset", ["memory", "--target", "nonexistent-model"], r"nonexistent-model: not a model preset"),
    Case("memory-draft-of-another-vocabulary", ["memory", "--target", "llama3.1-8b", "--draft", "qwen3-0.6b"],
         r"draft model 'qwen3-0\.6b': its vocabulary of 151936 tokens is not the target 'llama3\.1-8b''s 128256"),
    Case("memory-heads-not-divisible", ["memory", "--target", "c.json"], r"c\.json.*num_key_value_heads",
         {"c.json": json.dumps({**CONFIG, "num_key_value_heads": 3})}),
    Case("memory-negative-hidden", ["memory", "--target", "c.json"], r"c\.json.*hidden_size",
         {"c.json": json.dumps({**CONFIG, "hidden_size": -64})}),
    Case("memory-config-not-json", ["memory", "--target", "c.json"], r"c\.json:1", {"c.json": "{hidden_size: 1"}),
    Case("memory-mixture-of-experts", ["memory", "--target", "c.json"], r"c\.json: field 'num_local_experts': a mixture of experts",
         {"c.json": json.dumps({**CONFIG, "num_local_experts": 8})}),
    Case("memory-latent-attention", ["memory", "--target", "c.json"], r"c\.json: field 'kv_lora_rank': latent attention",
         {"c.json": json.dumps({**CONFIG, "kv_lora_rank": 512})}),
    Case("memory-dtype-bytes", ["memory", "--target", "llama3.1-8b", "--dtype-bytes", "3"], r"--dtype-bytes"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)
