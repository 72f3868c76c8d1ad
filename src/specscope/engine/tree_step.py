"""The tree-verification step: draft a static token tree, verify every node in one forward.

Tree rows: 0 is the root (the sequence's newest token, at position ``n = len(history) - 1``),
row i is node ``tree.paths[i - 1]``. The target reads all ``nodes + 1`` rows of every sequence
in one forward: row i at RoPE position ``n + depth(i)``, its key/value written to scratch cache
index ``n + i``, attending to the committed cache (``0..n-1``) and to its own root path only
(:meth:`~specscope.engine.model.AttentionContext.for_tree`). Verification walks the accepted
root path (:func:`~specscope.engine.sampling.verify_tree_greedy` /
:func:`~specscope.engine.sampling.verify_tree_sampled`); the path's keys/values are then moved
to positions ``n + 1 .. n + a`` (compaction), so the cache holds exactly the sequence's tokens,
as after a chain step; what is left past them is overwritten later, as in the chain engine.
The invariant between steps is :mod:`specscope.engine.step`'s.
"""

from __future__ import annotations

import torch

from specscope.engine.kv_cache import KVCache
from specscope.engine.model import AttentionContext, Transformer
from specscope.engine.proposer_api import ProposeInput, TargetPass, TreeDrafting
from specscope.engine.sampling import BatchSampling, verify_tree_greedy, verify_tree_sampled
from specscope.engine.step import StepResult
from specscope.engine.timing import PhaseClock
from specscope.trees import TreeShape


@torch.no_grad()
def tree_step(
    target: Transformer,
    cache: KVCache,
    proposer: TreeDrafting,
    slots: list[int],
    histories: list[list[int]],
    tree: TreeShape,
    sampling: BatchSampling,
    clock: PhaseClock,
) -> StepResult:
    """One tree step for every row: draft ``tree``, verify all its nodes in one target forward,
    accept the longest agreeing root path, compact its keys/values, emit. ``draft_len`` is
    ``tree.nodes`` per row; ``accepted`` is the accepted path's length."""
    device, batch = target.device, len(slots)
    positions = [len(h) - 1 for h in histories]  # the root (newest token) of each row
    last = torch.tensor([h[-1] for h in histories], device=device)  # [batch]
    with clock.phase("draft"):
        request = ProposeInput(slots, last, torch.tensor(positions, device=device), histories, tree.depth, sampling)
        drafts = proposer.propose_tree(request, tree).tokens  # [batch, nodes]
    with clock.phase("verify"):
        tokens = torch.cat((last[:, None], drafts), dim=1)  # [batch, nodes+1]
        rope, ctx = AttentionContext.for_tree(
            target.config, tree, range(tree.nodes + 1), positions, cache, slots, target.dtype
        )
        hidden, aux = target(tokens, rope, hidden_layers=proposer.hidden_layers, ctx=ctx)
        logits = sampling.constrain(target.logits(hidden), drafts, tree)  # [batch, nodes+1, vocab]
    with clock.phase("sample"):
        if sampling.all_greedy:
            paths, next_tokens = verify_tree_greedy(logits, drafts, tree)
        else:
            paths, next_tokens = verify_tree_sampled(sampling.probs(logits), drafts, tree, sampling)
    with clock.phase("verify"):  # compaction: the accepted path's entries to n + 1 .. n + a
        moved_slots, source, dest = [], [], []
        for slot, n, path in zip(slots, positions, paths):
            moved_slots += [slot] * len(path)
            source += [n + row for row in path]
            dest += range(n + 1, n + len(path) + 1)
            cache.lengths[slot] = n + len(path) + 1  # the newest token and the accepted drafts
        cache.move(moved_slots, source, dest)
    # The accepted path as a chain (root first, right-padded with the root): [batch, depth+1]
    rows = torch.tensor([[0, *p] + [0] * (tree.depth - len(p)) for p in paths], device=device)
    with clock.phase("draft"):
        proposer.observe(
            TargetPass(
                slots,
                tokens.gather(1, rows),
                positions,
                [len(p) + 1 for p in paths],
                [h.gather(1, rows[..., None].expand(-1, -1, h.shape[-1])) for h in aux],
                prefill=False,
            )
        )
    node_tokens = drafts.tolist()
    emitted = [[row_tokens[i - 1] for i in path] + [t] for row_tokens, path, t in zip(node_tokens, paths, next_tokens)]
    return StepResult(emitted, [tree.nodes] * batch, [len(p) for p in paths], batch * (tree.nodes + 1))
