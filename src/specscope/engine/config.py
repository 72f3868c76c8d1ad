"""The decoder's configuration, read once from a Hugging Face ``config.json``.

Supported ``model_type`` values: ``llama`` (Llama 2/3/3.1, incl. ``llama3`` RoPE scaling),
``mistral``, ``qwen2`` (Qwen2 / Qwen2.5: biases on the q/k/v projections) and ``qwen3``
(RMSNorm over each head's queries and keys). All are the same pre-norm decoder: GQA attention
with RoPE, a SwiGLU MLP and RMSNorm, optionally an LM head tied to the embedding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specscope.fileio import read_json_object
from specscope.errors import SpecscopeError

if TYPE_CHECKING:
    import torch

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding: ``theta`` and an optional scaling rule (``rope_type``).

    ``linear`` divides every frequency by ``factor``; ``llama3`` (Llama 3.1) keeps the high
    frequencies, divides the low ones by ``factor`` and interpolates in between, using
    ``low_freq_factor``, ``high_freq_factor`` and ``original_max_position_embeddings``.
    """

    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def inv_freq(self, head_dim: int) -> "torch.Tensor":
        """Per-pair angular frequencies, float32 [head_dim // 2]."""
        import torch

        base = 1.0 / self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
        if self.rope_type == "linear":
            return base / self.factor
        if self.rope_type == "llama3":
            old = self.original_max_position_embeddings
            wavelen = 2 * math.pi / base
            smooth = (old / wavelen - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor
            )
            between = (1 - smooth) * base / self.factor + smooth * base
            scaled = torch.where(wavelen > old / self.low_freq_factor, base / self.factor, base)
            middle = (wavelen >= old / self.high_freq_factor) & (wavelen <= old / self.low_freq_factor)
            return torch.where(middle, between, scaled)
        return base


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of one decoder (names follow the HF config keys where they can)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = RopeConfig()
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    max_position_embeddings: int | None = None  # the longest sequence the model is made for

    @classmethod
    def from_hf(cls, data: dict, source: str = "config.json") -> "ModelConfig":
        """Build from a parsed HF ``config.json`` (``source`` names it in error messages)."""

        def need(key: str, kind: type = int):
            if key not in data:
                raise SpecscopeError(f"{source}: field '{key}': missing")
            value = data[key]
            if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SpecscopeError(f"{source}: field '{key}': expected a positive integer")
            return value

        model_type = data.get("model_type")
        if model_type not in MODEL_TYPES:
            raise SpecscopeError(
                f"{source}: field 'model_type': expected one of {', '.join(MODEL_TYPES)}, "
                f"got {model_type!r}"
            )
        if data.get("hidden_act", "silu") != "silu":
            raise SpecscopeError(f"{source}: field 'hidden_act': expected 'silu'")
        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        head_dim = data.get("head_dim") or hidden // heads
        kv_heads = data.get("num_key_value_heads") or heads
        if not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
            raise SpecscopeError(
                f"{source}: field 'num_key_value_heads': expected a positive divisor of "
                f"num_attention_heads ({heads}), got {kv_heads!r}"
            )
        window = data.get("sliding_window")
        if model_type in ("qwen2", "qwen3") and not data.get("use_sliding_window", False):
            window = None
        return cls(
            model_type=model_type,
            vocab_size=need("vocab_size"),
            hidden_size=hidden,
            intermediate_size=need("intermediate_size"),
            num_layers=need("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
            rope=_rope_from_hf(data, source),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bool(data.get("attention_bias", False)),
            o_bias=model_type != "qwen2" and bool(data.get("attention_bias", False)),
            mlp_bias=bool(data.get("mlp_bias", False)),
            qk_norm=model_type == "qwen3",
            sliding_window=window,
            max_position_embeddings=need("max_position_embeddings") if "max_position_embeddings" in data else None,
        )

    @classmethod
    def from_dir(cls, model_dir: Path) -> "ModelConfig":
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise SpecscopeError(
                f"{model_dir}: expected a Hugging Face model directory with config.json"
            )
        return cls.from_hf(read_json_object(path), str(path))


def check_max_tokens(model_dir: Path, longest_prompt: int, max_tokens: int) -> None:
    """Refuse ``--max-tokens`` where the longest prompt and ``max_tokens`` outputs would not fit the
    model's positions (``max_position_embeddings``), before any model is loaded."""
    limit = ModelConfig.from_dir(model_dir).max_position_embeddings
    if limit is not None and longest_prompt + max_tokens > limit:
        raise SpecscopeError(f"--max-tokens {max_tokens}: the longest prompt ({longest_prompt} tokens) and "
                             f"{max_tokens} output tokens exceed the {limit} positions of {model_dir} "
                             f"(max_position_embeddings); at most {max(limit - longest_prompt, 0)}")


def _rope_from_hf(data: dict, source: str) -> RopeConfig:
    """Read RoPE settings from ``rope_parameters`` (transformers 5) or ``rope_theta`` +
    ``rope_scaling`` (older files, and most checkpoints on the hub)."""
    params = dict(data.get("rope_parameters") or {})
    scaling = data.get("rope_scaling") or {}
    params = {**scaling, **params}
    theta = float(params.get("rope_theta", data.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise SpecscopeError(
            f"{source}: field 'rope_scaling': rope type {rope_type!r} is not supported "
            f"(expected one of {', '.join(ROPE_TYPES)})"
        )
    defaults = RopeConfig()
    return RopeConfig(
        theta=theta,
        rope_type=rope_type,
        factor=float(params.get("factor", defaults.factor)),
        low_freq_factor=float(params.get("low_freq_factor", defaults.low_freq_factor)),
        high_freq_factor=float(params.get("high_freq_factor", defaults.high_freq_factor)),
        original_max_position_embeddings=int(
            params.get("original_max_position_embeddings", defaults.original_max_position_embeddings)
        ),
    )
