"""Draft-model proposer: a smaller checkpoint with the target's vocabulary and its own KV cache.

Per slot it tracks ``valid[slot]``: how many leading positions of its cache hold keys/values of
committed tokens. Each ``propose`` first feeds the committed tokens it has not seen (the last
step's accepted drafts that it had not itself processed, plus the newest token), then drafts
``k`` tokens autoregressively; ``observe`` after verification keeps only the entries of the
tokens that were accepted (the rest are overwritten later, as in the target's cache).

The draft must use the target's tokenizer. Checkpoints of one family sometimes pad the
embedding to different sizes (Qwen2.5-0.5B: 151936 rows, Qwen2.5-7B: 152064); the draft's
logits are then cut or padded (with -inf) to the target's vocabulary size, so the padding ids
can never be proposed, and a history token the draft cannot embed (a padding id only the
target has) is fed to the draft as id 0.
"""

from __future__ import annotations

import logging

import torch

from specscope.engine.config import check_context
from specscope.engine.kv_cache import KVCache
from specscope.engine.loading import load_model
from specscope.engine.model import Transformer
from specscope.errors import SpecscopeError
from specscope.engine.proposer_api import (
    Proposal,
    ProposeInput,
    ProposerConfig,
    RolloutInput,
    TargetPass,
    TreeProposal,
)
from specscope.proposers.chain_draft import draft_chain
from specscope.proposers.registry import register
from specscope.proposers.rollout import RolloutTree, roll_out
from specscope.proposers.tree_draft import draft_tree
from specscope.trees import TreeShape

log = logging.getLogger(__name__)


class DraftModelProposer:
    name = "draft"
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, config: ProposerConfig, draft: Transformer, target: Transformer) -> None:
        self.vocab_size = target.config.vocab_size
        if draft.config.vocab_size != self.vocab_size:
            log.warning(
                "%s: draft vocabulary size %d differs from the target's %d; fitting the draft's "
                "logits to the target's size (the tokenizers must be the same)",
                config.draft_dir,
                draft.config.vocab_size,
                self.vocab_size,
            )
        check_context(draft.config, config.sequence_len, f"draft model {config.draft_dir}", positions=False)
        self.draft = draft
        self.cache = KVCache(
            draft.config, config.max_batch_size, config.max_seq_len, draft.dtype, draft.device
        )
        self.valid = [0] * config.max_batch_size

    @torch.no_grad()
    def observe(self, target_pass: TargetPass) -> None:
        if target_pass.prefill:  # the draft's own prefill over the prompts
            tokens = self._embeddable(target_pass.tokens)
            positions = torch.arange(tokens.shape[1], device=tokens.device)[None, :].expand_as(tokens)
            self.draft(tokens, positions, self.cache, target_pass.slots, kv_len=tokens.shape[1])
        for slot, start, n in zip(target_pass.slots, target_pass.start, target_pass.num_committed):
            self.valid[slot] = start + n if target_pass.prefill else min(self.valid[slot], start + n)

    def _catch_up(self, slots: list[int], histories: list[list[int]]) -> torch.Tensor:
        """Feed each row's committed tokens the cache lacks (``history[valid:]``, right-padded)
        and return the draft's output at the newest token [batch, hidden]."""
        device = self.draft.device
        starts = [self.valid[s] for s in slots]
        pending = [h[start:] for h, start in zip(histories, starts)]
        width = max(len(p) for p in pending)
        tokens = torch.tensor([p + [0] * (width - len(p)) for p in pending], device=device)
        tokens = self._embeddable(tokens)  # [batch, width]
        positions = (torch.tensor(starts, device=device)[:, None] + torch.arange(width, device=device)).clamp(
            max=self.cache.capacity - 1)  # a short row's padding past its prefix: within the cache, never read
        hidden, _ = self.draft(tokens, positions, self.cache, slots,
                               kv_len=min(max(starts) + width, self.cache.capacity))
        last = torch.tensor([len(p) - 1 for p in pending], device=device)
        return hidden[torch.arange(len(slots), device=device), last]  # [batch, hidden]

    @torch.no_grad()
    def propose(self, request: ProposeInput) -> Proposal:
        slots, histories = request.slots, request.histories
        position = torch.tensor([len(h) for h in histories], device=self.draft.device)  # where d_1 goes
        kv_len = max(len(h) for h in histories)

        def advance(token: torch.Tensor, i: int, _: torch.Tensor) -> torch.Tensor:
            hidden, _ = self.draft(token[:, None], (position + i)[:, None], self.cache, slots, kv_len=kv_len + i + 1)
            return hidden[:, 0]

        proposal = draft_chain(request, self._catch_up(slots, histories),
                               lambda hidden: self._fit_vocab(self.draft.logits(hidden)), advance)
        for slot, history in zip(slots, histories):  # d_1 … d_{passes − 1} are cached, maybe rejected
            self.valid[slot] = len(history) + proposal.tokens.shape[1] - 1
        return proposal

    @torch.no_grad()
    def propose_tree(self, request: ProposeInput, tree: TreeShape) -> TreeProposal:
        """Draft ``tree`` (:func:`~specscope.proposers.tree_draft.draft_tree`); its nodes sit
        in the cache past the newest token, where the next catch-up overwrites them."""
        slots, histories = request.slots, request.histories
        root = self._catch_up(slots, histories)  # [batch, hidden]
        for slot, history in zip(slots, histories):
            self.valid[slot] = len(history)  # committed tokens only: the nodes may be rejected

        def step(token, state, positions, ctx):
            return self.draft(self._embeddable(token), positions, ctx=ctx)[0]

        def logits(state):
            return self._fit_vocab(self.draft.logits(state))

        base = [len(h) - 1 for h in histories]  # the newest token's entry is the root's
        return TreeProposal(draft_tree(tree, root, base, step, logits, self.draft.config, self.cache, slots))

    def release(self, slot: int) -> None:
        self.valid[slot] = 0

    @torch.no_grad()
    def rollout(self, batch: RolloutInput) -> tuple[torch.Tensor, torch.Tensor]:
        """All positions at once (:class:`~specscope.engine.proposer_api.PositionRollout`): the
        draft's forward over the whole sequence is the prefix; the anchor of output position
        i is the newest token's own position P + i."""
        tokens = self._embeddable(batch.tokens)  # [batch, T]
        rows, width = tokens.shape
        tree = RolloutTree.for_batch(batch, shift=0)
        cache = KVCache(self.draft.config, rows, tree.capacity, self.draft.dtype, self.draft.device)
        positions = torch.arange(width, device=tokens.device)[None, :].expand_as(tokens)
        prefix, _ = self.draft(tokens, positions, cache, list(range(rows)), kv_len=width)

        def step(token, state, positions, ctx):
            return self.draft(self._embeddable(token), positions, ctx=ctx)[0]

        return roll_out(tree, prefix, step, lambda state: self._fit_vocab(self.draft.logits(state)),
                        self.draft.config, cache)

    def _embeddable(self, tokens: torch.Tensor) -> torch.Tensor:
        """Ids beyond the draft's embedding (target-only padding ids) -> 0."""
        return tokens.masked_fill(tokens >= self.draft.config.vocab_size, 0)

    def _fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Cut or -inf-pad the draft's logits [batch, draft vocab] to the target's size."""
        extra = self.vocab_size - logits.shape[-1]
        if extra <= 0:
            return logits[..., : self.vocab_size]
        return torch.nn.functional.pad(logits, (0, extra), value=float("-inf"))


@register("draft")
def create(config: ProposerConfig, target: Transformer) -> DraftModelProposer:
    if config.draft_dir is None:
        raise SpecscopeError("--draft: the 'draft' method needs a draft model directory")
    draft = load_model(config.draft_dir, target.dtype, target.device)
    return DraftModelProposer(config, draft, target)
