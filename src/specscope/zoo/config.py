"""What decides the zoo: model shapes and the training schedule (one frozen dataclass)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specscope.workloads import tasks


@dataclass(frozen=True)
class Shape:
    """A Llama decoder's size (``head_dim`` = hidden / heads)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the zoo. ``quick()`` is a seconds-long smoke version."""

    vocab_size: int = 1024
    tokenizer_corpus: int = 2000  # examples per task the tokenizer is trained on
    target: Shape = Shape(hidden=192, layers=4, heads=6, kv_heads=2, intermediate=512)
    draft: Shape = Shape(hidden=96, layers=2, heads=3, kv_heads=1, intermediate=256)
    target_steps: int = 3000
    draft_steps: int = 1200
    head_steps: int = 500
    batch_size: int = 16
    lr: float = 3e-3
    head_lr: float = 2e-3
    eagle_feature_weight: float = 0.1  # weight of EAGLE's hidden-state regression beside the CE
    warmup: int = 60
    seed: int = 0
    threads: int = 2
    tasks: tuple[str, ...] = field(default=tasks.TASKS)

    @classmethod
    def quick(cls) -> TrainConfig:
        return cls(vocab_size=300, tokenizer_corpus=40,
                   target=Shape(hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64),
                   draft=Shape(hidden=16, layers=1, heads=1, kv_heads=1, intermediate=32),
                   target_steps=8, draft_steps=4, head_steps=4, batch_size=4, warmup=2)
