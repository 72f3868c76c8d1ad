"""Synthetic traces for the report tests: copying bursts for n-gram, even EAGLE, hostile names."""

from __future__ import annotations

import numpy as np

from specscope.trace.schema import ProposerTrace, TraceRecord

HOSTILE_ID = "<script>alert(1)</script>"
HOSTILE_DATASET = '<img src=x onerror="alert(2)"> $x_1$ & co'


def synthetic_records(dataset: str, n: int, seed: int) -> list[TraceRecord]:
    """Requests whose n-gram acceptance comes in bursts where the output copies the prompt,
    and whose EAGLE acceptance is geometric everywhere (k_max = 10)."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        length = int(rng.integers(20, 400))
        prompt = rng.integers(0, 5000, int(rng.integers(10, 200)))
        copy = rng.random(length) < (0.8 if i % 3 == 0 else 0.1)
        output = np.where(copy, rng.choice(prompt, length), rng.integers(5000, 9000, length))
        ngram = np.where(copy, rng.integers(4, 12, length), 1)
        eagle = np.minimum(rng.geometric(0.35, length), 11)
        records.append(TraceRecord(
            id=HOSTILE_ID if i == 0 else f"{dataset}-{i}", dataset=dataset, k_max=10,
            prompt_token_ids=prompt.astype(np.int64), output_token_ids=output.astype(np.int64),
            proposers={"ngram": ProposerTrace(ngram.astype(np.int32)),
                       "eagle": ProposerTrace(eagle.astype(np.int32))},
        ))
    return records
