"""EAGLE-3 proposer (Li et al. 2025): fused low/mid/high target features, a 2h-input midlayer and
its own draft-vocabulary LM head.

Layout (``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``; vLLM's ``llama_eagle3.py``):

- ``fc.weight`` [h, 3h]: fuses the target's hidden states at three indices, by default
  ``(2, L // 2, L - 3)`` (the residual stream entering those layers; ``config.json`` may set
  ``eagle_config.eagle_aux_hidden_state_layer_ids``). Applied to target states only: the head's
  own output is fed back as it is.
- ``midlayer.*``: ``input_layernorm`` on the token embedding, ``hidden_norm`` on the hidden
  state, attention over ``cat(norm(emb), norm(hidden))`` (q/k/v projections take 2h inputs), the
  residual being the un-normed hidden state (the normed one with ``norm_before_residual``), then
  ``post_attention_layernorm`` and the MLP.
- ``norm.weight`` and ``lm_head.weight`` [draft_vocab, h]: the head's own output norm and LM head
  over ``draft_vocab_size`` tokens. The pre-norm output is what is fed back.
- ``d2t`` [draft_vocab] (int64): draft id ``d`` is target id ``d + d2t[d]``; ``t2d`` [vocab]
  (bool) marks the target ids in the draft vocabulary (checked against ``d2t`` on loading).

The token embedding is the target's (or ``embed_tokens.weight`` if the checkpoint has one).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specscope.engine.config import ModelConfig
from specscope.engine.model import (
    MLP,
    Attention,
    AttentionContext,
    RMSNorm,
    Transformer,
)
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


def default_layers(num_layers: int) -> tuple[int, int, int]:
    """The target hidden-state indices EAGLE-3 fuses unless its config names others."""
    return (2, num_layers // 2, num_layers - 3)


class Eagle3Layer(nn.Module):
    """The midlayer: attention over [norm(embedding); norm(hidden)] (2h inputs), then the MLP."""

    def __init__(self, config: ModelConfig, norm_before_residual: bool) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Attention(config, 0)
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(self.self_attn, name)
            setattr(
                self.self_attn, name, nn.Linear(2 * h, old.out_features, bias=old.bias is not None)
            )
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.norm_before_residual = norm_before_residual

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        ctx: AttentionContext,
    ) -> torch.Tensor:
        """``embeds``, ``hidden`` [batch, T, h] -> the pre-norm output [batch, T, h]."""
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        x = torch.cat((self.input_layernorm(embeds), normed), dim=-1)  # [batch, T, 2h]
        x = residual + self.self_attn(x, rope, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle3Head(Head):
    """``fc`` [h, 3h], ``midlayer``, ``norm``, ``lm_head`` [draft_vocab, h] and ``d2t``."""

    def __init__(
        self,
        config: ModelConfig,
        target_layers: tuple[int, ...],
        draft_vocab_size: int,
        norm_before_residual: bool,
        own_embedding: bool,
    ) -> None:
        super().__init__(config, target_layers)
        h = config.hidden_size
        self.fc = nn.Linear(3 * h, h, bias=False)
        self.midlayer = Eagle3Layer(config, norm_before_residual)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab_size, dtype=torch.long))
        if own_embedding:
            self.embed_tokens = nn.Embedding(config.vocab_size, h)

    def fuse(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        return self.fc(torch.cat(hidden, dim=-1))  # 3 × [batch, T, h] -> [batch, T, h]

    def run_layer(
        self,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        ctx: AttentionContext,
    ) -> torch.Tensor:
        return self.midlayer(self.embed(tokens), hidden, rope, ctx)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits placed at their target ids; -inf elsewhere. [..., vocab]"""
        draft = self.lm_head(self.norm(out)).float()  # [..., draft_vocab]
        full = draft.new_full((*draft.shape[:-1], self.config.vocab_size), float("-inf"))
        target_ids = torch.arange(draft.shape[-1], device=draft.device) + self.d2t
        full[..., target_ids] = draft
        return full

    @classmethod
    def from_dir(cls, head_dir: Path, target: Transformer) -> Eagle3Head:
        """Load an EAGLE-3 head (``config.json`` + safetensors) for ``target``."""
        source = f"{head_dir}/config.json"
        data = read_config(head_dir)
        if data.get("num_hidden_layers") != 1:
            raise SpecscopeError(f"{source}: field 'num_hidden_layers': expected 1 (the midlayer)")
        config = layer_config(head_dir, data, target)
        vocab = config.vocab_size
        draft_vocab = data.get("draft_vocab_size")
        draft_vocab = vocab if draft_vocab is None else draft_vocab  # absent: the target's (0 is no size)
        if not isinstance(draft_vocab, int) or isinstance(draft_vocab, bool) or not 0 < draft_vocab <= vocab:
            raise SpecscopeError(
                f"{source}: field 'draft_vocab_size': expected an integer in 1..{vocab}, got {draft_vocab!r}"
            )
        norm_before_residual = data.get("norm_before_residual") or False
        if not isinstance(norm_before_residual, bool):
            raise SpecscopeError(f"{source}: field 'norm_before_residual': expected true or false, "
                                 f"got {norm_before_residual!r}")
        layers = aux_layers(data, target.config.num_layers, source)
        state = read_weights(head_dir, target)
        state["d2t"] = check_vocab_maps(state, draft_vocab, vocab, Path(head_dir))
        with torch.device("meta"):
            head = cls(
                config,
                layers,
                draft_vocab,
                norm_before_residual,
                "embed_tokens.weight" in state,
            )
        load_weights(head, state, Path(head_dir))
        return head.bind(target).eval().requires_grad_(False)


def aux_layers(data: dict, num_layers: int, source: str) -> tuple[int, ...]:
    """The three target hidden-state indices the head fuses (config override or default)."""
    config = data.get("eagle_config") or {}
    if not isinstance(config, dict):
        raise SpecscopeError(f"{source}: field 'eagle_config': expected an object, got {config!r:.40}")
    layers = config.get("eagle_aux_hidden_state_layer_ids")
    if layers is None:
        if num_layers < 3:
            raise SpecscopeError(
                f"{source}: the default EAGLE-3 layers (2, L // 2, L - 3) need a target with at "
                f"least 3 layers (it has {num_layers}); set eagle_config.eagle_aux_hidden_state_layer_ids"
            )
        return default_layers(num_layers)
    if (
        not isinstance(layers, list)
        or len(layers) != 3
        or not all(type(i) is int and 0 <= i <= num_layers for i in layers)  # true is no index
    ):
        raise SpecscopeError(
            f"{source}: field 'eagle_config.eagle_aux_hidden_state_layer_ids': expected three "
            f"indices in 0..{num_layers}, got {layers!r}"
        )
    return tuple(layers)


def check_vocab_maps(
    state: dict[str, torch.Tensor], draft_vocab: int, vocab: int, source: Path
) -> torch.Tensor:
    """Validate ``d2t`` (and ``t2d`` if present, which is then dropped) and return ``d2t``."""
    t2d = state.pop("t2d", None)
    d2t = state.get("d2t")
    if d2t is None:
        if draft_vocab != vocab:
            raise SpecscopeError(
                f"{source}: tensor 'd2t' missing (needed when draft_vocab_size < vocab_size)"
            )
        device = next(iter(state.values())).device if state else "cpu"  # any tensor's: names are checked after
        return torch.zeros(draft_vocab, dtype=torch.long, device=device)
    if d2t.shape != (draft_vocab,) or d2t.is_floating_point():
        raise SpecscopeError(f"{source}: tensor 'd2t': expected integers of shape ({draft_vocab},)")
    ids = torch.arange(draft_vocab, device=d2t.device) + d2t.long()
    if bool((ids < 0).any() or (ids >= vocab).any()) or ids.unique().numel() != draft_vocab:
        raise SpecscopeError(
            f"{source}: tensor 'd2t': draft ids must map to distinct ids in 0..{vocab - 1}"
        )
    if t2d is not None:
        expected = torch.zeros(vocab, dtype=torch.bool, device=ids.device)
        expected[ids] = True
        if t2d.shape != (vocab,) or not torch.equal(t2d.bool(), expected):
            raise SpecscopeError(
                f"{source}: tensors 't2d' and 'd2t' disagree on the draft vocabulary"
            )
    return d2t.long()


@register("eagle3")
def create(config: ProposerConfig, target: Transformer) -> HeadProposer:
    if config.draft_dir is None:
        raise SpecscopeError("--draft: the 'eagle3' method needs an EAGLE-3 head directory")
    return HeadProposer("eagle3", Eagle3Head.from_dir(config.draft_dir, target), config, target)
