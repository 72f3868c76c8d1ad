"""n-gram (prompt lookup) acceptance at every output position, in one linear pass.

The proposer's match rule (:mod:`specscope.proposers.ngram`): with history ``h`` ending in its
newest token, for n from max_n down to min_n find the earliest start ``j``
(``j + n < len(h)``) with ``h[j:j+n] == h[-n:]`` and propose ``h[j+n : j+n+k]``.

Instead of searching the history at every position (quadratic), one dictionary per n maps each
n-gram to its earliest eligible start. When the history grows to length L, the n-grams that
end at index L − 2 become eligible (their continuation exists); the query is then
max_n − min_n + 1 dictionary look-ups. Each position costs O(max_n + k_max): linear overall.

At output position i the history is prompt + output[:i+1]; the proposal with k_max drafts is
compared with the true continuation output[i+1:], so ``acc_len[i]`` = 1 + the length of the
agreeing prefix and ``draft_len[i]`` = how many tokens were offered. Because a proposal with
k < k_max is the first k of the k_max one, a step proposing k emits min(acc_len[i], k + 1).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specscope.engine.proposer_api import NGRAM_MAX_N, NGRAM_MIN_N, agreeing_prefix
from specscope.trace.schema import ProposerTrace


def ngram_trace(prompt: Sequence[int], output: Sequence[int], k_max: int,
                min_n: int = NGRAM_MIN_N, max_n: int = NGRAM_MAX_N) -> ProposerTrace:
    """acc_len and draft_len of the n-gram proposer at every output position ([G] each)."""
    h = [int(t) for t in prompt] + [int(t) for t in output]
    p, g = len(prompt), len(output)
    first_start: list[dict[tuple[int, ...], int]] = [dict() for _ in range(max_n + 1)]
    acc_len = np.ones(g, dtype=np.int32)
    draft_len = np.zeros(g, dtype=np.int32)
    for length in range(1, len(h) + 1):
        end = length - 2  # the newest n-gram end with a continuation inside h[:length]
        for n in range(min_n, max_n + 1):
            start = end - n + 1
            if start >= 0:
                first_start[n].setdefault(tuple(h[start : end + 1]), start)
        i = length - p - 1  # output position whose step reads this history
        if i < 0:
            continue
        for n in range(min(max_n, length - 1), min_n - 1, -1):
            j = first_start[n].get(tuple(h[length - n : length]))
            if j is None:
                continue
            proposal = h[j + n : min(j + n + k_max, length)]
            acc_len[i] = agreeing_prefix(proposal, h[length : length + len(proposal)]) + 1
            draft_len[i] = len(proposal)
            break
    return ProposerTrace(acc_len=acc_len, draft_len=draft_len)
