"""EAGLE-1 proposer (Li et al. 2024): a one-layer head over [token embedding; target feature].

Layout (SafeAILab EAGLE-1 heads such as ``yuhuili/EAGLE-LLaMA3-Instruct-8B``, and vLLM's
``llama_eagle.py``): ``fc`` (2h→h; ``fc.bias`` when the checkpoint has it, as the original
EAGLE-1 heads do) over ``cat(embed(x[p+1]), h[p])``, then ``layers.0.*``: one decoder layer of the
target's shape whose ``input_layernorm`` is absent. No final norm: the layer's output is the
predicted feature and goes straight into the target's LM head. ``h[p]`` is the target's final,
normed hidden state (index ``num_layers``). The embedding and LM head are the target's
(an ``embed_tokens.weight`` in the checkpoint, a copy in some published heads, is used if
present). ``config.json`` is a Llama / Qwen config with ``num_hidden_layers: 1``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specscope.engine.config import ModelConfig
from specscope.engine.model import AttentionContext, DecoderLayer, Transformer
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


class EagleHead(Head):
    """``fc`` [h, 2h] (+ bias), ``layers.0`` (no input norm); shares embedding and LM head."""

    def __init__(
        self, config: ModelConfig, target_num_layers: int, fc_bias: bool, own_embedding: bool
    ) -> None:
        super().__init__(config, (target_num_layers,))
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=fc_bias)
        layer = DecoderLayer(config, 0)
        layer.input_layernorm = nn.Identity()  # EAGLE-1's first layer has no input norm
        self.layers = nn.ModuleList([layer])
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
        x = self.fc(torch.cat((self.embed(tokens), hidden), dim=-1))  # [batch, T, h]
        return self.layers[0](x, rope, ctx)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        return self.target.logits(out)

    @classmethod
    def from_dir(cls, head_dir: Path, target: Transformer) -> EagleHead:
        """Load an EAGLE-1 head (``config.json`` + safetensors) for ``target``."""
        data = read_config(head_dir)
        if data.get("num_hidden_layers") != 1:
            raise SpecscopeError(
                f"{head_dir}/config.json: field 'num_hidden_layers': expected 1 (one EAGLE layer), "
                f"got {data.get('num_hidden_layers')!r}"
            )
        config = layer_config(head_dir, data, target)
        state = read_weights(head_dir, target)
        with torch.device("meta"):
            head = cls(
                config, target.config.num_layers, "fc.bias" in state, "embed_tokens.weight" in state
            )
        load_weights(head, state, Path(head_dir))
        return head.bind(target).eval().requires_grad_(False)


@register("eagle")
def create(config: ProposerConfig, target: Transformer) -> HeadProposer:
    if config.draft_dir is None:
        raise SpecscopeError("--draft: the 'eagle' method needs an EAGLE-1 head directory")
    return HeadProposer("eagle", EagleHead.from_dir(config.draft_dir, target), config, target)
