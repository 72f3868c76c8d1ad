"""Drafting a chain with a model drafter, one draft token per forward.

Pass i reads the drafter's logits from its state, takes each row's draft d_{i+1} (argmax when
every row is greedy, else a sample from the row's own generator), and, unless it is the last
pass, feeds that draft back to get the next state. Under ``stop_below`` p
(:class:`~specscope.engine.proposer_api.ConfidentDrafts`) a row ends at its first draft of
probability below p (that draft included), and the passes end once no row is still drafting.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specscope.engine.proposer_api import ConfidentDrafts, Proposal, ProposeInput


@torch.no_grad()
def draft_chain(
    request: ProposeInput,
    state: torch.Tensor,
    logits: Callable[[torch.Tensor], torch.Tensor],
    advance: Callable[[torch.Tensor, int, torch.Tensor], torch.Tensor],
) -> Proposal:
    """Up to ``request.k`` drafts for each row of ``request``.

    ``state`` [batch, h] is the drafter's output at the newest token; ``logits`` maps a state to
    logits [batch, vocab] over the target's vocabulary; ``advance(token, i, state)`` feeds draft
    d_{i+1} [batch] (pass i, 0-based) and returns the next state [batch, h]. The proposal's tokens
    are [batch, passes ≤ k]; its probabilities [batch, passes, vocab] where any row samples; its
    confidence [batch, passes] where asked for (``want_confidence``), [batch, 1] where the first
    draft's alone is (``first_confidence``)."""
    sampling = request.sampling
    drafts, probs, confidence = [], [], []
    rows = ConfidentDrafts(request, state.device)
    for i in range(request.k):
        scores = logits(state)  # [batch, vocab]
        if sampling.all_greedy:
            token = scores.argmax(-1)
        else:
            probs.append(sampling.probs(scores))
            token = rows.sample(sampling, probs[-1])
        drafts.append(token)
        told = rows.probability(scores, token, i == 0)
        if request.want_confidence or (request.first_confidence and i == 0):
            confidence.append(told)
        if not rows.add(told) or i + 1 == request.k:
            break
        state = advance(token, i, state)
    return Proposal(
        torch.stack(drafts, 1),  # [batch, passes ≤ k]
        rows.lengths,
        torch.stack(probs, 1) if probs else None,  # [batch, passes, vocab]
        torch.stack(confidence, 1) if confidence else None,  # [batch, passes]
    )
