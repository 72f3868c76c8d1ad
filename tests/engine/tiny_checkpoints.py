"""Tiny random Hugging Face checkpoints written with transformers' own classes (test helpers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 96


SHARED = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    eos_token_id=1,
    bos_token_id=0,
)


def llama_config(**overrides):
    return transformers.LlamaConfig(**{**SHARED, "tie_word_embeddings": False, **overrides})


def qwen3_config(**overrides):
    return transformers.Qwen3Config(**{**SHARED, "head_dim": 32, "tie_word_embeddings": True, **overrides})


def write_checkpoint(directory: Path, config, seed: int = 0, noise: float = 0.0):
    """Save a randomly initialised model for ``config`` as safetensors; returns the HF model.
    ``noise`` > 0 perturbs every matrix: the same ``seed`` then gives a similar model (a draft
    that agrees with its target only part of the time)."""
    torch.manual_seed(seed)
    cls = {
        "llama": transformers.LlamaForCausalLM,
        "qwen3": transformers.Qwen3ForCausalLM,
        "qwen2": transformers.Qwen2ForCausalLM,
        "mistral": transformers.MistralForCausalLM,
    }[config.model_type]
    model = cls(config).eval()
    with torch.no_grad():  # larger weights than the default init, so logits are not flat
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.08)
        gen = torch.Generator().manual_seed(seed + 1000)
        for param in model.parameters():
            if param.dim() == 2 and noise:
                param.add_(torch.randn(param.shape, generator=gen) * noise)
    model.save_pretrained(directory, safe_serialization=True)
    return model


def write_workload(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path
