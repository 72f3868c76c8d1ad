"""Prompt lookup (n-gram) proposer: copy what followed an earlier occurrence of the suffix.

Match rule, for one sequence with history ``h`` (prompt + output, ending with the newest token):
for ``n`` from ``max_n`` down to ``min_n``, look for an earlier occurrence of the last ``n``
tokens, i.e. a start ``j`` with ``h[j:j+n] == h[-n:]`` and ``j + n < len(h)``; take the most
recent such ``j`` (the largest) for the longest ``n`` that has one, and propose
``h[j+n : j+n+k]`` — up to ``k`` tokens, fewer when the continuation reaches the end of the
history. When no ``n`` matches, the proposer offers nothing (``draft_len = 0``): that step costs
no drafting and emits one token. Deterministic, so ``Proposal.probs`` is ``None``.
"""

from __future__ import annotations

import numpy as np
import torch

from specscope.errors import SpecscopeError
from specscope.engine.proposer_api import (
    NGRAM_MAX_N,
    NGRAM_MIN_N,
    Proposal,
    ProposeInput,
    ProposerConfig,
    TargetPass,
)
from specscope.proposers.registry import register


def lookup(history: list[int] | np.ndarray, k: int, min_n: int = NGRAM_MIN_N, max_n: int = NGRAM_MAX_N) -> list[int]:
    """The proposal for one history under the match rule above (``[]`` when nothing matches).

    Every earlier position ``e`` holding the newest token ends a candidate occurrence; walking
    back at most ``max_n - 1`` tokens gives each candidate's match length, in
    O(candidates x max_n) rather than a scan of the history per ``n``.
    """
    h = np.asarray(history, dtype=np.int64)
    ends = np.flatnonzero(h[:-1] == h[-1])  # candidate occurrence ends e < len(h) - 1
    lengths = np.ones(ends.size, dtype=np.int64)
    alive = np.ones(ends.size, dtype=bool)
    for back in range(1, max_n):
        if back >= h.size:
            break
        starts = ends - back
        alive &= starts >= 0
        alive[alive] = h[starts[alive]] == h[-1 - back]
        lengths += alive
    best = lengths.max(initial=0)
    if best < min_n:
        return []
    e = int(ends[lengths == best][-1])  # the most recent occurrence of the longest match
    return h[e + 1 : e + 1 + k].tolist()


class NgramProposer:
    """Stateless prompt lookup; see the module docstring for the match rule."""

    name = "ngram"
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, config: ProposerConfig, device: torch.device) -> None:
        if not 1 <= config.min_n <= config.max_n:
            raise SpecscopeError(
                f"n-gram: expected 1 <= min_n <= max_n, got {config.min_n}, {config.max_n}"
            )
        self.min_n, self.max_n, self.device = config.min_n, config.max_n, device

    def observe(self, target_pass: TargetPass) -> None:
        """Nothing to update: the histories passed to :meth:`propose` are all it reads."""

    def propose(self, request: ProposeInput) -> Proposal:
        batch, k = len(request.histories), request.k
        tokens = torch.zeros(batch, k, dtype=torch.long)
        draft_len = torch.zeros(batch, dtype=torch.long)
        for row, history in enumerate(request.histories):
            found = lookup(history, k, self.min_n, self.max_n)
            tokens[row, : len(found)] = torch.tensor(found, dtype=torch.long)
            draft_len[row] = len(found)
        return Proposal(tokens.to(self.device), draft_len.to(self.device))

    def release(self, slot: int) -> None:
        """Nothing is kept per slot."""


@register("ngram")
def create(config: ProposerConfig, target) -> NgramProposer:
    return NgramProposer(config, target.device)
