"""The training data: an endless stream of fresh, tokenised task examples in padded batches."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from specscope.workloads import tasks
from specscope.workloads.chat import ChatTemplate
from specscope.zoo.config import TrainConfig
from specscope.zoo.tokenizer import CHAT_TEMPLATE, END

IGNORE = -100  # label of positions without loss


@dataclass
class Tokenised:
    """A tokenised training example: ``prompt`` = the chat-templated user turn, ``answer`` =
    the reference answer followed by ``<|end|>``."""

    task: str
    prompt: list[int]
    answer: list[int]


class Stream:
    """Endless fresh training examples: every batch draws new examples of one task (the tasks
    take turns), so the models learn the tasks' rules instead of memorising a fixed set.
    Prompts in ``held_out`` (the bundled workloads) are never drawn."""

    def __init__(self, config: TrainConfig, tokenizer, held_out: set[str]) -> None:
        self.config, self.tokenizer, self.held_out = config, tokenizer, held_out
        self.template = ChatTemplate(CHAT_TEMPLATE, eos_token=END)

    def draw(self, task: str, rng: random.Random) -> Tokenised:
        """One tokenised example of ``task`` that is not held out."""
        while True:
            ex = tasks.GENERATORS[task](rng)
            if ex.prompt not in self.held_out:
                encode = self.tokenizer.encode
                return Tokenised(task, encode(self.template.apply(ex.prompt), add_special_tokens=False).ids,
                                 encode(ex.reference + END, add_special_tokens=False).ids)

    def batches(self, steps: int, seed: int):
        """``steps`` batches: tokens [B, T], labels [B, T] (the next token at answer positions,
        ``IGNORE`` elsewhere), right-padded with id 0 (``<|pad|>``)."""
        rng = random.Random(seed)
        names, size = self.config.tasks, self.config.batch_size
        for step in range(steps):
            chosen = [self.draw(names[step % len(names)], rng) for _ in range(size)]
            width = max(len(e.prompt) + len(e.answer) for e in chosen) - 1
            tokens = torch.zeros(size, width, dtype=torch.long)
            labels = torch.full((size, width), IGNORE, dtype=torch.long)
            for row, e in enumerate(chosen):
                seq = e.prompt + e.answer
                tokens[row, : len(seq) - 1] = torch.tensor(seq[:-1])
                start = len(e.prompt) - 1  # the last prompt position predicts the first answer token
                labels[row, start : len(seq) - 1] = torch.tensor(e.answer)
            yield tokens, labels
