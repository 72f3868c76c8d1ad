"""The bundled models' tokenizer: a small byte-level BPE trained on the task corpus.

Byte-level (every string is encodable), digits split one by one (so numbers are spelt digit by
digit and arithmetic can be learnt), and four special tokens: ``<|pad|>`` (0), ``<|end|>``
(1, end of an answer), ``<|user|>`` (2) and ``<|assistant|>`` (3). The chat template (saved in
``tokenizer_config.json``) renders one user turn as ``<|user|>{prompt}<|assistant|>``; an
answer ends with ``<|end|>``. The tokenizer's post-processor adds the same two markers when
special tokens are requested (as a Llama tokenizer adds BOS), so ``encode(prompt)`` of a raw
prompt equals ``encode(chat_template(prompt), add_special_tokens=False)``: a plain-text
workload runs on the bundled models as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

PAD, END, USER, ASSISTANT = "<|pad|>", "<|end|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = (PAD, END, USER, ASSISTANT)
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` with :data:`SPECIAL_TOKENS` first (ids 0..3)."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{USER} $A {ASSISTANT}", special_tokens=[(USER, tokenizer.token_to_id(USER)),
                                                          (ASSISTANT, tokenizer.token_to_id(ASSISTANT))])
    return tokenizer


def save_tokenizer(tokenizer, out_dir: Path) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` (with the chat template)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1024,
        "pad_token": PAD,
        "eos_token": END,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
