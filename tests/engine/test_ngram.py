"""n-gram proposer: exact input -> proposal tables."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.engine.sampling import BatchSampling, SamplingParams
from specscope.proposers import ProposeInput, ProposerConfig, create_proposer
from specscope.proposers.ngram import lookup

# (history, k, min_n, max_n) -> proposal
TABLE = [
    # no earlier occurrence of any suffix of length >= min_n
    (([1, 2, 3, 4, 5, 6], 3, 3, 7), []),
    # suffix [1 2 3] occurred once: propose what followed it
    (([1, 2, 3, 9, 8, 7, 1, 2, 3], 3, 3, 7), [9, 8, 7]),
    # several occurrences: the earliest one wins, as in vLLM's proposer
    (([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3], 2, 3, 7), [4, 1]),
    # a run of one token: its earliest occurrence of the longest match offers the whole run (the
    # most recent one offered a single token, whatever k: k > 1 gained nothing in a repetition loop)
    (([5, 6] + [9] * 12, 4, 3, 7), [9, 9, 9, 9]),
    # the longest n wins over a more recent shorter match
    (([7, 1, 2, 3, 4, 0, 1, 2, 3, 5, 7, 1, 2, 3], 2, 3, 7), [4, 0]),
    # match at the very end: the continuation is cut by the end of the history
    (([5, 6, 7, 5, 6, 7], 4, 3, 7), [5, 6, 7]),
    # k beyond the context: fewer than k tokens are offered
    (([1, 2, 3, 8, 1, 2, 3], 10, 3, 7), [8, 1, 2, 3]),
    # repeats of one token overlap the suffix
    (([4, 4, 4, 4], 3, 3, 7), [4]),
    # a 2-gram match is ignored with min_n = 3 but used with min_n = 2
    (([1, 2, 9, 1, 2], 2, 3, 7), []),
    (([1, 2, 9, 1, 2], 2, 2, 7), [9, 1]),
    # history shorter than min_n + 1
    (([1, 2, 3], 3, 3, 7), []),
    # max_n = 2: only the suffix [3 4] is tried (a 3-gram would find 6 as well); its earliest match
    (([2, 3, 4, 6, 3, 4, 7, 2, 3, 4], 1, 2, 2), [6]),
]


@pytest.mark.parametrize("args,expected", TABLE)
def test_lookup_table(args, expected):
    assert lookup(*args) == expected


def test_proposer_pads_and_reports_draft_len():
    proposer = create_proposer(ProposerConfig("ngram", 3, 2, 64), _FakeTarget())
    histories = [[1, 2, 3, 9, 1, 2, 3], [1, 2, 3, 4]]
    sampling = BatchSampling([SamplingParams()] * 2, [torch.Generator()] * 2, torch.device("cpu"))
    last = torch.tensor([h[-1] for h in histories])
    pos = torch.tensor([len(h) - 1 for h in histories])
    proposal = proposer.propose(ProposeInput([0, 1], last, pos, histories, 3, sampling))
    assert proposal.draft_len.tolist() == [3, 0]
    assert proposal.tokens.tolist()[0] == [9, 1, 2]
    assert proposal.tokens.shape == (2, 3) and proposal.probs is None


class _FakeTarget:
    device = torch.device("cpu")


def brute_force(history: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The match rule written as plainly as possible."""
    for n in range(max_n, min_n - 1, -1):
        if n >= len(history):
            continue
        for j in range(len(history) - n):
            if history[j : j + n] == history[-n:]:
                return history[j + n : j + n + k]
    return []


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    history=st.lists(st.integers(0, 3), min_size=1, max_size=40),
    k=st.integers(1, 8),
    min_n=st.integers(1, 4),
    extra=st.integers(0, 4),
)
def test_lookup_equals_brute_force(history, k, min_n, extra):
    assert lookup(history, k, min_n, min_n + extra) == brute_force(history, k, min_n, min_n + extra)
