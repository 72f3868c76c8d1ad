"""Teacher-forced acceptance of a model proposer (draft model, EAGLE, EAGLE-3, MTP).

At every output position i (the newest token is output[i], its position P + i) the proposer
proposes k_max tokens; ``acc_len[i]`` = 1 + how many of them agree with the target's greedy
continuation output[i+1:], ``draft_len[i]`` = how many it offered. Two ways, same numbers:

- proposers with :class:`~specscope.engine.proposer_api.PositionRollout` (all of specscope's model
  proposers) roll out every position at once: one target forward over prompt + output gives
  the hidden states, then the proposer drafts from all positions together over one shared
  prefix cache (:mod:`specscope.proposers.rollout`): one forward over the sequences, then
  k_max − 1 per window of positions, for a whole batch of requests;
- any other proposer is driven through the engine's protocol
  (:mod:`specscope.engine.proposer_api`): after the prompt's prefill, per position, ``propose``
  k_max tokens, then the target runs over output[i] alone and the proposer observes that pass
  (one committed token). Requests of a batch advance together, one position per iteration.

Proposers with a distribution also give ``draft_prob[i, j]``: their probability of the j-th
token they proposed at i (the first ``draft_probs``, :data:`~specscope.trace.schema.DRAFT_PROBS` unless asked for more,
at most k_max; NaN past what was offered), the confidence signal a ``confidence:p`` policy reads,
which stops at the deepest draft whose probability was kept. They are most of a trace's bytes
(EAGLE and MTP over the bundled math workload at k_max 10: 1340 KB with all ten, 166 KB with none),
so a trace keeps 4 unless asked.

With ``tree_depth`` > 0 a second, teacher-forced rollout (``RolloutInput.ranks``) records
``tree_rank`` [G, tree_depth] (see :mod:`specscope.trace.schema`), from which any static tree
up to that depth replays; it needs :class:`PositionRollout`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import torch

from specscope.engine.kv_cache import KVCache
from specscope.engine.model import Transformer
from specscope.engine.runner import Engine
from specscope.engine.sampling import BatchSampling, SamplingParams
from specscope.engine.step import prefill
from specscope.engine.proposer_api import (
    PositionRollout,
    ProposeInput,
    Proposer,
    RolloutInput,
    TargetPass,
    agreeing_prefix,
)
from specscope.errors import SpecscopeError
from specscope.trace.schema import DRAFT_PROBS, TREE_RANK_CAP, ProposerTrace

ROLLOUT_WINDOW = 128  # output positions rolled out together (bounds the attention mask)


def model_traces(target: Transformer, proposer: Proposer, prompts: Sequence[Sequence[int]],
                 outputs: Sequence[Sequence[int]], k_max: int, tree_depth: int = 0,
                 draft_probs: int = DRAFT_PROBS) -> list[ProposerTrace]:
    """Trace ``proposer`` on a batch of requests (at most the proposer's max batch size);
    ``tree_depth`` > 0 also records ``tree_rank`` to that depth; ``draft_probs``: the drafts per
    position whose probability is kept (at most k_max; 0: none, the records get no draft_prob)."""
    if isinstance(proposer, PositionRollout):
        return rollout_traces(target, proposer, prompts, outputs, k_max, tree_depth=tree_depth,
                              draft_probs=draft_probs)
    if tree_depth:
        raise SpecscopeError(f"--trees: proposer {getattr(proposer, 'name', type(proposer).__name__)!r} has no "
                             "teacher-forced rollout, so its tree ranks cannot be recorded")
    return stepwise_traces(target, proposer, prompts, outputs, k_max, draft_probs)


@torch.no_grad()
def rollout_traces(target: Transformer, proposer: PositionRollout, prompts: Sequence[Sequence[int]],
                   outputs: Sequence[Sequence[int]], k_max: int, window: int = ROLLOUT_WINDOW,
                   tree_depth: int = 0, draft_probs: int = DRAFT_PROBS) -> list[ProposerTrace]:
    """All positions of a batch of requests at once (see the module docstring)."""
    kept = draft_probs  # drafts per position whose probability the trace keeps (at most k_max)
    empty = ProposerTrace(acc_len=np.ones(0, dtype=np.int32), draft_len=np.zeros(0, dtype=np.int32),
                          tree_rank=np.zeros((0, tree_depth), dtype=np.int16) if tree_depth else None)
    if not any(outputs):
        return [empty for _ in outputs]
    sequences = [list(p) + list(o) for p, o in zip(prompts, outputs)]
    width = max(len(s) for s in sequences)
    tokens = torch.tensor([s + [0] * (width - len(s)) for s in sequences], device=target.device)  # [batch, T]
    layers = proposer.hidden_layers
    hidden = []
    if layers:  # the whole sequence in one forward, each row attending to itself only
        positions = torch.arange(width, device=target.device)[None, :].expand_as(tokens)
        _, hidden = target(tokens, positions, hidden_layers=layers)
    batch = RolloutInput(tokens, [len(p) for p in prompts], [len(s) for s in sequences], hidden, k_max, window)
    drafts, confidence = proposer.rollout(batch)
    drafts, confidence = drafts.cpu().numpy(), confidence.float().cpu().numpy()  # [batch, n, k]
    ranks = None
    if tree_depth:
        ranks, _ = proposer.rollout(replace(batch, k=tree_depth, ranks=True))
        ranks = ranks.clamp(max=TREE_RANK_CAP).cpu().numpy().astype(np.int16)  # [batch, n, tree_depth]
    traces = []
    for row, output in enumerate(outputs):
        n = len(output)
        if n == 0:
            traces.append(empty)
            continue
        truth = np.full(n + k_max, -1, dtype=np.int64)  # output[i+1+j] at [i + j], -1 past the end
        truth[: n - 1] = output[1:]
        windows = np.lib.stride_tricks.sliding_window_view(truth, k_max)[:n]  # [n, k]
        agree = np.cumprod(drafts[row, :n] == windows, axis=1).sum(axis=1)
        traces.append(ProposerTrace(acc_len=(1 + agree).astype(np.int32),
                                    draft_len=np.full(n, k_max, dtype=np.int32),
                                    draft_prob=confidence[row, :n, :kept].astype(np.float32) if kept else None,
                                    tree_rank=None if ranks is None else ranks[row, :n]))
    return traces


@torch.no_grad()
def stepwise_traces(target: Transformer, proposer: Proposer, prompts: Sequence[Sequence[int]],
                    outputs: Sequence[Sequence[int]], k_max: int, draft_probs: int = DRAFT_PROBS) -> list[ProposerTrace]:
    """One position per iteration through the engine's protocol (see the module docstring)."""
    batch = len(prompts)
    capacity = Engine.cache_capacity(max(len(p) + len(o) for p, o in zip(prompts, outputs)), k_max)
    cache = KVCache(target.config, batch, capacity, target.dtype, target.device)
    generators = [torch.Generator(device=target.device) for _ in range(batch)]
    greedy = [SamplingParams()] * batch
    slots = list(range(batch))
    prefill(target, cache, proposer, slots, [list(p) for p in prompts], BatchSampling(greedy, generators, target.device))
    acc_len = [np.ones(len(o), dtype=np.int32) for o in outputs]
    draft_len = [np.zeros(len(o), dtype=np.int32) for o in outputs]
    kept = draft_probs  # drafts per position whose probability the trace keeps (at most k_max)
    draft_prob = [np.full((len(o), kept), np.nan, dtype=np.float32) for o in outputs]
    histories = [list(p) for p in prompts]  # grown by one output token per position
    rows: list[int] = []
    for i in range(max(len(o) for o in outputs)):
        active = [r for r in slots if i < len(outputs[r])]
        if active != rows:  # a request finished: the batch shrinks
            rows = active
            sampling = BatchSampling([greedy[r] for r in rows], [generators[r] for r in rows], target.device)
        for r in rows:
            histories[r].append(outputs[r][i])
        positions = [len(prompts[r]) + i for r in rows]
        last = torch.tensor([outputs[r][i] for r in rows], device=target.device)  # [rows]
        proposal = proposer.propose(ProposeInput(rows, last, torch.tensor(positions, device=target.device),
                                                 [histories[r] for r in rows], k_max, sampling,
                                                 want_confidence=True))
        offered, drafted = proposal.draft_len.tolist(), proposal.tokens.tolist()
        confidence = None if proposal.confidence is None else proposal.confidence[:, :kept].float().cpu().numpy()
        for row, r in enumerate(rows):
            truth = outputs[r][i + 1 : i + 1 + offered[row]]
            acc_len[r][i] = 1 + agreeing_prefix(drafted[row][: offered[row]], truth)
            draft_len[r][i] = offered[row]
            if confidence is not None:
                shown = min(offered[row], kept)
                draft_prob[r][i, :shown] = confidence[row, :shown]
        tokens = last[:, None]  # [rows, 1]: teacher forcing commits exactly one token
        position_tensor = torch.tensor(positions, device=target.device)[:, None]  # [rows, 1]
        _, aux = target(tokens, position_tensor, cache, rows, kv_len=max(positions) + 1,
                        hidden_layers=proposer.hidden_layers)
        for r, pos in zip(rows, positions):
            cache.lengths[r] = pos + 1
        proposer.observe(TargetPass(rows, tokens, positions, [1] * len(rows), aux, prefill=False))
        for r in rows:
            if i + 1 == len(outputs[r]):
                proposer.release(r)
    has_prob = [not np.isnan(p).all() for p in draft_prob]
    return [ProposerTrace(acc_len=a, draft_len=d, draft_prob=p if keep else None)
            for a, d, p, keep in zip(acc_len, draft_len, draft_prob, has_prob)]
