"""Drafting a static token tree with a model drafter, one depth per forward.

Tree rows as in :mod:`specscope.engine.tree_step` (0 = root, i = ``tree.paths[i - 1]``). The
drafter's state at the root is given (its forward over the committed tokens). Pass d reads the
logits of every row of depth d − 1, takes each one's top-ranked tokens as its children (a
node of rank r is the (r+1)-th most likely token), and, unless d is the last depth, runs the
drafter once over all rows of depth d with the tree's attention mask over its own KV cache:
row i writes at cache index ``base + i``, sits at RoPE position ``base + depth(i)`` and sees
the committed entries and its own root path (the same layout as the target's tree forward).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specscope.engine.config import ModelConfig
from specscope.engine.kv_cache import KVCache
from specscope.engine.model import AttentionContext
from specscope.proposers.rollout import Step, ranked
from specscope.trees import TreeShape


@torch.no_grad()
def draft_tree(
    tree: TreeShape,
    root_state: torch.Tensor,
    base: list[int],
    step: Step,
    logits: Callable[[torch.Tensor], torch.Tensor],
    config: ModelConfig,
    cache: KVCache,
    slots: list[int],
) -> torch.Tensor:
    """Tokens [batch, nodes] of every tree node, in ``tree.paths`` order.

    ``root_state`` [batch, h] is the drafter's output at the root; ``base[b]`` the cache index
    of row b's root entry; ``step`` maps (tokens [batch, W], the parents' states [batch, W, h],
    RoPE positions [batch, W], context) to the new states [batch, W, h]; ``logits`` maps
    states [batch, W, h] to logits over the target vocabulary [batch, W, vocab].
    """
    device = root_state.device
    parents = torch.from_numpy(tree.parents).to(device)  # [nodes + 1]
    ranks = torch.tensor([0] + [path[-1] for path in tree.paths], device=device)  # [nodes + 1]
    states, previous = root_state[:, None], range(0, 1)  # states of the rows of the last depth
    tokens = []
    for depth, width in enumerate(tree.widths, start=1):
        level = range(previous.stop, previous.stop + width)
        parent = parents[level.start : level.stop] - previous.start  # [W]: column in ``states``
        rank = ranks[level.start : level.stop]  # [W]
        most = max(path[-1] for path in tree.paths[level.start - 1 : level.stop - 1]) + 1
        top = ranked(logits(states), most)  # [batch, W_prev, most]
        level_tokens = top[:, parent, rank]  # [batch, W]
        tokens.append(level_tokens)
        if depth < tree.depth:
            positions, ctx = AttentionContext.for_tree(config, tree, level, base, cache, slots, states.dtype)
            states = step(level_tokens, states[:, parent], positions, ctx)
        previous = level
    return torch.cat(tokens, dim=1)
