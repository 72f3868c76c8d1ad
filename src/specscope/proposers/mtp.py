"""MTP proposer: a DeepSeek-V3-style multi-token-prediction module, reused for all k drafts.

Layout (DeepSeek-V3 checkpoints; vLLM's ``deepseek_mtp.py``): the module is stored as layer
``N = num_hidden_layers`` of the model, under ``model.layers.{N}.``:

- ``enorm.weight``, ``hnorm.weight``: RMSNorms of the token embedding and of the hidden state;
- ``eh_proj.weight`` [h, 2h]: projects ``cat(enorm(embed(x[p+1])), hnorm(h[p]))`` (embedding
  first, as vLLM feeds the released weights; the DeepSeek-V3 report writes the two the other way);
- the decoder block: ``self_attn.*``, ``mlp.*``, ``input_layernorm``,
  ``post_attention_layernorm`` (here a Llama / Qwen layer of the target's shape);
- ``shared_head.norm.weight``: the norm before the LM head.

Embedding and LM head are shared with the target; DeepSeek-V3 stores copies as
``model.layers.{N}.embed_tokens.weight`` and ``shared_head.head.weight``, which are used when
present. ``h[p]`` is the target's final, normed hidden state (index ``num_layers``); the
block's pre-norm output is fed back for the next draft. As in vLLM, the embedding at position 0
is zeroed. ``config.json`` is the target's config with ``num_nextn_predict_layers >= 1`` (only
the first MTP module is used); the directory may be the target's own (other tensors are skipped).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from specscope.engine.config import ModelConfig
from specscope.engine.model import AttentionContext, DecoderLayer, RMSNorm, Transformer
from specscope.errors import SpecscopeError
from specscope.engine.proposer_api import ProposerConfig
from specscope.proposers.registry import register
from specscope.proposers.heads import (
    Head,
    HeadProposer,
    layer_config,
    load_weights,
    read_config,
    read_weights,
)

log = logging.getLogger(__name__)

OWN_NAMES = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")  # not in the block


class SharedHead(nn.Module):
    """``norm`` before the LM head, and ``head`` when the checkpoint carries its own copy."""

    def __init__(self, config: ModelConfig, own_head: bool) -> None:
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if own_head:
            self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)


class MtpHead(Head):
    """``enorm``, ``hnorm``, ``eh_proj`` [h, 2h], ``mtp_block`` and ``shared_head``."""

    def __init__(
        self, config: ModelConfig, target_num_layers: int, own_embedding: bool, own_head: bool
    ) -> None:
        super().__init__(config, (target_num_layers,))
        h, eps = config.hidden_size, config.rms_norm_eps
        self.enorm = RMSNorm(h, eps)
        self.hnorm = RMSNorm(h, eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.mtp_block = DecoderLayer(config, 0)
        self.shared_head = SharedHead(config, own_head)
        if own_embedding:
            self.embed_tokens = nn.Embedding(config.vocab_size, h)

    def run_layer(
        self,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        ctx: AttentionContext,
    ) -> torch.Tensor:
        embeds = self.embed(tokens).masked_fill((positions == 0)[..., None], 0.0)  # [batch, T, h]
        x = self.eh_proj(torch.cat((self.enorm(embeds), self.hnorm(hidden)), dim=-1))
        return self.mtp_block(x, rope, ctx)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        normed = self.shared_head.norm(out)
        head = self.shared_head._modules.get("head")
        return head(normed).float() if head is not None else self.target.logits(normed)

    @classmethod
    def from_dir(cls, head_dir: Path, target: Transformer) -> MtpHead:
        """Load the first MTP module of ``head_dir`` for ``target``."""
        data = read_config(head_dir)
        source = f"{head_dir}/config.json"
        count = data.get("num_nextn_predict_layers")
        if not isinstance(count, int) or count < 1:
            raise SpecscopeError(
                f"{source}: field 'num_nextn_predict_layers': expected a positive integer "
                "(a config with an MTP module)"
            )
        config = layer_config(head_dir, data, target)
        prefix = f"model.layers.{data['num_hidden_layers']}."
        state, skipped = {}, 0
        for name, tensor in read_weights(head_dir, target).items():
            if name.startswith(prefix):
                state[module_name(name[len(prefix) :])] = tensor
            else:
                skipped += 1
        if not state:
            raise SpecscopeError(f"{head_dir}: no tensors named {prefix}* (the MTP module)")
        if skipped:
            log.info(
                "%s: %d tensors outside %s* are not part of the MTP module; skipped",
                head_dir,
                skipped,
                prefix,
            )
        with torch.device("meta"):
            head = cls(
                config,
                target.config.num_layers,
                "embed_tokens.weight" in state,
                "shared_head.head.weight" in state,
            )
        load_weights(head, state, Path(head_dir), lambda name: published_name(name, data["num_hidden_layers"]))
        return head.bind(target).eval().requires_grad_(False)


def module_name(published: str) -> str:
    """``self_attn.q_proj.weight`` -> ``mtp_block.self_attn.q_proj.weight``; own tensors keep
    their names (``enorm.weight``, ``shared_head.norm.weight``, ...)."""
    return published if published.startswith(OWN_NAMES) else f"mtp_block.{published}"


def published_name(module: str, layer: int) -> str:
    """The inverse of :func:`module_name`, with the ``model.layers.{layer}.`` prefix."""
    return f"model.layers.{layer}.{module.removeprefix('mtp_block.')}"


@register("mtp")
def create(config: ProposerConfig, target: Transformer) -> HeadProposer:
    if config.draft_dir is None:
        raise SpecscopeError("--draft: the 'mtp' method needs a directory holding the MTP module")
    return HeadProposer("mtp", MtpHead.from_dir(config.draft_dir, target), config, target)
