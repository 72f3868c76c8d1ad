"""The linear-time n-gram tracer agrees with the proposer's own lookup at every position."""

from __future__ import annotations


import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.tracing.ngram import ngram_trace

from specscope.proposers.ngram import lookup


def reference(prompt, output, k_max, min_n, max_n):
    acc, offered = [], []
    for i in range(len(output)):
        proposal = lookup(list(prompt) + list(output[: i + 1]), k_max, min_n, max_n)
        truth = list(output[i + 1 : i + 1 + len(proposal)])
        accepted = next((a for a, (x, y) in enumerate(zip(proposal, truth)) if x != y), min(len(proposal), len(truth)))
        acc.append(accepted + 1)
        offered.append(len(proposal))
    return acc, offered


@settings(max_examples=150, deadline=None)
@given(prompt=st.lists(st.integers(0, 3), min_size=1, max_size=30),
       output=st.lists(st.integers(0, 3), min_size=1, max_size=40),
       k_max=st.integers(1, 8), min_n=st.integers(1, 3), extra=st.integers(0, 3))
def test_matches_the_proposer_lookup(prompt, output, k_max, min_n, extra):
    trace = ngram_trace(prompt, output, k_max, min_n, min_n + extra)
    acc, offered = reference(prompt, output, k_max, min_n, min_n + extra)
    assert trace.acc_len.tolist() == acc
    assert trace.draft_len.tolist() == offered


def test_hand_table():
    # prompt "a b c d e", output "c d e f": at position 0 the history ends "... c"; with
    # min_n = 1 the suffix "c" occurred at 2, so the proposal is "d e" (up to the end of h).
    trace = ngram_trace([1, 2, 3, 4, 5], [3, 4, 5, 6], k_max=4, min_n=1, max_n=2)
    assert trace.draft_len.tolist()[0] == 3  # h = a b c d e c → after "c": d e c
    assert trace.acc_len.tolist()[0] == 3  # d, e accepted; c ≠ f
    assert trace.acc_len[-1] == 1


def test_long_output():
    rng = np.random.default_rng(0)
    phrase = rng.integers(0, 500, 40).tolist()
    output = (phrase * 800)[:32_000]
    trace = ngram_trace(rng.integers(0, 500, 200).tolist(), output, k_max=20)  # speed: benchmarks/bench_tracer.py
    assert len(trace.acc_len) == 32_000 and trace.acc_len[100] == 21
