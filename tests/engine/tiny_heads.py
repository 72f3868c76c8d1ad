"""Seeded random EAGLE-1, EAGLE-3 and MTP heads for a tiny target, written in the published
checkpoint layouts (test helpers: real heads come from training or a hub)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specscope.engine.config import ModelConfig
from specscope.proposers.eagle import EagleHead
from specscope.proposers.eagle3 import Eagle3Head, default_layers
from specscope.proposers.heads import one_layer, read_config, save_head
from specscope.proposers.mtp import MtpHead, published_name


def randomize_(module: nn.Module, seed: int) -> None:
    """Seeded random weights: matrices ~ N(0, 1/fan_in), vectors (norm weights) ~ 1 + N(0, 0.1²)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(module.named_parameters()):
            noise = torch.randn(param.shape, generator=generator)
            if param.dim() == 1:
                param.copy_(1 + 0.1 * noise)
            else:
                param.copy_(noise / param.shape[-1] ** 0.5)


def write_random_eagle(
    target_dir: Path, out_dir: Path, seed: int = 0, fc_bias: bool = True
) -> Path:
    """Write a seeded random EAGLE-1 head for the target in ``target_dir``, in the published
    layout (``fc.*``, ``layers.0.*``); returns ``out_dir``."""
    target = read_config(target_dir)
    data = {**target, "num_hidden_layers": 1, "architectures": ["EagleLlamaForCausalLM"]}
    config = ModelConfig.from_hf(data, f"{target_dir}/config.json")
    head = EagleHead(config, target["num_hidden_layers"], fc_bias, own_embedding=False)
    randomize_(head, seed)
    return save_head(out_dir, data, head.state_dict())


def write_random_eagle3(
    target_dir: Path, out_dir: Path, draft_vocab_size: int, seed: int = 0
) -> Path:
    """Write a seeded random EAGLE-3 head for the target in ``target_dir`` in the published
    layout (``fc``, ``midlayer.*``, ``norm``, ``lm_head``, ``d2t``, ``t2d``); the draft
    vocabulary is a random subset of ``draft_vocab_size`` target ids."""
    target = read_config(target_dir)
    data = {  # published EAGLE-3 heads are Llama layers, whatever the target's family
        **target,
        "model_type": "llama",
        "num_hidden_layers": 1,
        "draft_vocab_size": draft_vocab_size,
        "architectures": ["LlamaForCausalLMEagle3"],
    }
    config = ModelConfig.from_hf(data, f"{target_dir}/config.json")
    head = Eagle3Head(
        config, default_layers(target["num_hidden_layers"]), draft_vocab_size, False, False
    )
    randomize_(head, seed)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randperm(config.vocab_size, generator=generator)[:draft_vocab_size].sort().values
    t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    tensors = {**head.state_dict(), "d2t": ids - torch.arange(draft_vocab_size), "t2d": t2d}
    return save_head(out_dir, data, tensors)


def write_random_mtp(target_dir: Path, out_dir: Path, seed: int = 0) -> Path:
    """Write a seeded random MTP module for the target in ``target_dir`` in the DeepSeek-V3
    layout (``model.layers.{N}.*``, ``N`` = the target's layer count; config = the target's
    with ``num_nextn_predict_layers: 1``)."""
    data = {**read_config(target_dir), "num_nextn_predict_layers": 1}
    config = ModelConfig.from_hf(data, f"{target_dir}/config.json")
    head = MtpHead(one_layer(config), config.num_layers, own_embedding=False, own_head=False)
    randomize_(head, seed)
    tensors = {published_name(name, config.num_layers): t for name, t in head.state_dict().items()}
    return save_head(out_dir, data, tensors)
