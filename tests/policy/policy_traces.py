"""Tiny traces for the policy tests, small enough to follow by hand (imported by the tests)."""

from __future__ import annotations

import numpy as np

from specscope.trace.schema import ProposerTrace, TraceRecord


def record(ngram: list[int], eagle: list[int], rid: str = "r", offer: list[int] | None = None,
           prob: list[float] | None = None, dataset: str = "d") -> TraceRecord:
    """A request with the given acc_len per proposer (G = len(ngram)); prompt tokens 1..5,
    output tokens 10, 11, … (no n-gram repeats unless ``offer`` says what n-gram offers)."""
    g = len(ngram)
    offer = offer if offer is not None else [k - 1 for k in ngram]
    draft_prob = None if prob is None else np.asarray(prob, dtype=np.float32)[:, None]
    return TraceRecord(
        id=rid, prompt_token_ids=np.arange(1, 6, dtype=np.int64), output_token_ids=np.arange(10, 10 + g, dtype=np.int64),
        proposers={"ngram": ProposerTrace(np.asarray(ngram, dtype=np.int32), draft_len=np.asarray(offer, dtype=np.int32)),
                   "eagle": ProposerTrace(np.asarray(eagle, dtype=np.int32), draft_prob=draft_prob)},
        k_max=8, dataset=dataset,
    )
