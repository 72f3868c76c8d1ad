"""Teacher-forced rollouts from every output position at once: a tree over one shared prefix.

A trace needs, at every output position of a request, the k drafts a model proposer would
offer there (:mod:`specscope.tracing.model`). One position at a time, that is n × k small
forwards. A drafter whose state is a KV cache over the true prefix can serve all positions
together instead:

1. one forward over the whole sequence writes the prefix cache (indices ``0..L-1``) and gives,
   at every *anchor* ``a`` (the prefix index whose output proposes ``d_1``), the first state;
2. forward ``j`` (``1 ≤ j < k``) feeds draft ``d_j`` of every anchor at once. Query ``(a, j)``
   sits at RoPE position ``a + j``, writes its key/value at cache index
   ``L + (j - 1)·W + b`` (``b`` = its branch, the anchor's column in the window) and reads the
   prefix up to ``a`` plus its own branch's drafts ``1..j``: n branches of depth k on one
   shared prefix, k − 1 forwards per window.

Anchors are taken ``W`` at a time (a *window*), so the rollout forwards' attention masks stay
[W, L + (k − 1)·W] however long the output is; every window reuses the same draft region. (The
prefix forward itself is an ordinary causal forward over the whole sequence.) Decoding is
greedy, as traces are.

Teacher-forced (``RolloutInput.ranks``): forward ``j`` feeds the *true* token output[i + j]
instead of the draft, and each depth returns the drafter's rank of the true next token
(0 = its argmax; ties broken by token id, as ``argmax`` does) — along the target's own path,
exactly what a tree-drafting step computes on its accepted path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specscope.engine.config import ModelConfig
from specscope.engine.kv_cache import KVCache
from specscope.engine.model import AttentionContext
from specscope.engine.proposer_api import RolloutInput, token_probability

# (draft tokens [batch, W], state [batch, W, h], RoPE positions [batch, W], context) -> next state
Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttentionContext], torch.Tensor]


@dataclass(frozen=True)
class RolloutTree:
    """Where every query of a windowed rollout sits. Row ``b`` has ``count[b]`` anchors
    ``first[b] .. first[b] + count[b] - 1``; ``prefix`` = L, the prefix entries per row
    (rows right-padded to it); ``k`` drafts per anchor; at most ``window`` anchors per window."""

    first: list[int]
    count: list[int]
    prefix: int
    k: int
    window: int
    truth: torch.Tensor | None = None  # [batch, L + k]: at a + j the true token of depth j + 1 (-1: none)

    @classmethod
    def for_batch(cls, batch: RolloutInput, shift: int) -> "RolloutTree":
        """The tree of ``batch`` for a drafter whose prefix entry ``p`` stands for token
        position ``p + shift`` (0: a draft model; 1: a head, whose entry p pairs x[p+1] with
        h[p]): output position i of a row anchors at ``P + i - shift``. With ``batch.ranks``
        it keeps the true tokens: anchor a's depth j + 1 is token ``a + shift + 1 + j``."""
        truth = None
        if batch.ranks:
            width = batch.tokens.shape[1]
            ended = torch.arange(width, device=batch.tokens.device)[None, :] >= torch.tensor(
                batch.lengths, device=batch.tokens.device)[:, None]  # [batch, T]
            padded = torch.nn.functional.pad(batch.tokens.masked_fill(ended, -1), (0, batch.k), value=-1)
            truth = padded[:, shift + 1:]  # [batch, T - shift - 1 + k]
        return cls([p - shift for p in batch.prompt_lengths],
                   [n - p for n, p in zip(batch.lengths, batch.prompt_lengths)],
                   batch.tokens.shape[1] - shift, batch.k, batch.window, truth)

    @property
    def width(self) -> int:
        """W: anchors per window."""
        return max(1, min(self.window, max(self.count)))

    @property
    def capacity(self) -> int:
        """Cache entries per row: the prefix and k − 1 draft layers of one window."""
        return self.prefix + (self.k - 1) * self.width

    @property
    def windows(self) -> int:
        return -(-max(self.count) // self.width)

    def anchors(self, window: int, device: torch.device) -> torch.Tensor:
        """Prefix indices of the anchors of ``window`` [batch, W]; rows with fewer anchors
        repeat their last one (those branches are computed and dropped; a row without anchors
        repeats a valid index)."""
        first = torch.tensor(self.first, device=device)[:, None]
        last = first + torch.tensor(self.count, device=device)[:, None].clamp(min=1) - 1
        offsets = window * self.width + torch.arange(self.width, device=device)
        return torch.minimum(first + offsets, last).clamp(0, self.prefix - 1)

    def context(self, config: ModelConfig, cache: KVCache, anchors: torch.Tensor, j: int,
                dtype: torch.dtype) -> tuple[torch.Tensor, AttentionContext]:
        """RoPE positions [batch, W] and the attention context of forward ``j`` (1 ≤ j < k)."""
        batch, width = anchors.shape
        device = anchors.device
        kv_len = self.prefix + j * width
        keys = torch.arange(kv_len, device=device)  # [S]
        branch = torch.arange(width, device=device)  # [W]
        in_prefix = keys[None, None, :] <= anchors[:, :, None]  # [batch, W, S]: up to the anchor
        drafted = keys >= self.prefix
        own = drafted & ((keys - self.prefix) % width == branch[:, None])  # [W, S]: own drafts 1..j
        visible = in_prefix | own[None]
        write = (self.prefix + (j - 1) * width + branch)[None, :].expand(batch, -1)  # [batch, W]
        ctx = AttentionContext.from_visible(config, visible, cache, slice(0, batch), write, kv_len, dtype)
        return anchors + j, ctx


@torch.no_grad()
def roll_out(tree: RolloutTree, prefix_out: torch.Tensor, step: Step,
             logits: Callable[[torch.Tensor], torch.Tensor], config: ModelConfig,
             cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy drafts of every anchor: ``prefix_out`` [batch, L, h] holds the prefix forward's
    outputs (its keys and values already in rows ``0..batch-1`` of ``cache``); ``logits``
    maps states [batch, W, h] to [batch, W, vocab]. Returns draft tokens [batch, A, k] and
    their probabilities [batch, A, k] (float32), A = max(count); with ``tree.truth``, the ranks
    of the true tokens (-1 where there is none) and their probabilities instead."""
    device, hidden_size = prefix_out.device, prefix_out.shape[-1]
    tokens, confidence = [], []
    for window in range(tree.windows):
        anchors = tree.anchors(window, device)  # [batch, W]
        state = prefix_out.gather(1, anchors[..., None].expand(-1, -1, hidden_size))  # [batch, W, h]
        drafts, probs = [], []
        for j in range(tree.k):
            scores = logits(state)  # [batch, W, vocab]
            if tree.truth is None:
                token = scores.argmax(-1)  # [batch, W]
                drafts.append(token)
            else:
                true = tree.truth.gather(1, anchors + j)  # [batch, W]
                token = true.clamp(min=0)
                drafts.append(torch.where(true >= 0, rank_of(scores, token), -1))
            probs.append(token_probability(scores.flatten(0, 1), token.flatten()).view_as(token))
            if j + 1 < tree.k:
                positions, ctx = tree.context(config, cache, anchors, j + 1, prefix_out.dtype)
                state = step(token, state, positions, ctx)
        tokens.append(torch.stack(drafts, -1))
        confidence.append(torch.stack(probs, -1))
    count = max(tree.count)
    return torch.cat(tokens, 1)[:, :count], torch.cat(confidence, 1)[:, :count]


def ranked(scores: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` best tokens of ``scores`` [..., vocab] in rank order [..., count]: by score,
    descending, and among equal scores the smaller id first — :func:`rank_of`'s order, which
    ``topk`` does not keep (on a CPU in bfloat16 it put the larger of two tied ids first, and a
    tree drafted another token than its trace's rank named). Exact: each score (a float32 holds
    a bfloat16 or float16 exactly) as an integer of the same order, the id below it."""
    values = scores.float() + 0.0  # −0.0 becomes +0.0: equal scores, equal keys
    bits = values.view(torch.int32).to(torch.int64)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # the floats' order, as signed integers
    ids = torch.arange(scores.shape[-1], device=scores.device)
    return ((ordered << 32) + (0xFFFFFFFF - ids)).topk(count, dim=-1).indices


def rank_of(scores: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """The rank of ``token`` [batch, W] in ``scores`` [batch, W, vocab]: how many tokens score
    higher, or as high with a smaller id (0 exactly when ``scores.argmax(-1) == token``)."""
    own = scores.gather(-1, token[..., None])  # [batch, W, 1]
    ids = torch.arange(scores.shape[-1], device=scores.device)
    ahead = (scores > own) | ((scores == own) & (ids < token[..., None]))  # [batch, W, vocab]
    return ahead.sum(-1)
