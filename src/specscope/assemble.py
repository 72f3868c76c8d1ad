"""Assemble an engine: a target model and its proposer, loaded from Hugging Face directories.

It sits above both :mod:`specscope.engine` (which calls proposers only through
:mod:`specscope.engine.proposer_api`) and :mod:`specscope.proposers` (whose registry builds the
proposer by name), so that neither imports the other's upper half.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specscope.engine.loading import load_eos_token_ids, load_model, load_tokenizer, parse_dtype, resolve_device
from specscope.engine.proposer_api import ProposerConfig
from specscope.engine.runner import DEFAULT_MAX_SEQ_LEN, Engine
from specscope.methods import NO_SD
from specscope.proposers import create_proposer
from specscope.trees import TreeShape

if TYPE_CHECKING:
    import tokenizers


def load_engine(
    model_dir: str | Path,
    method: str = NO_SD,
    draft_dir: str | Path | None = None,
    k: int = 3,
    max_batch_size: int = 8,
    max_seq_len: int | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    tree: TreeShape | None = None,
) -> tuple[Engine, "tokenizers.Tokenizer | None"]:
    """Load target (and proposer ``method`` unless :data:`~specscope.methods.NO_SD`) from HF directories; returns the
    engine and the target directory's ``tokenizer.json`` tokenizer (``None`` without one).
    ``max_seq_len`` defaults to the model's ``max_position_embeddings`` (else
    ``DEFAULT_MAX_SEQ_LEN``) and may not exceed it. With a ``tree`` the engine drafts and
    verifies that static token tree every step and ``k`` is ignored (it is the tree's depth)."""
    model_dir = Path(model_dir)
    torch_device = resolve_device(device)
    target = load_model(model_dir, parse_dtype(dtype), torch_device)
    if max_seq_len is None:
        max_seq_len = target.config.max_position_embeddings or DEFAULT_MAX_SEQ_LEN
    if tree is not None:
        k = tree.depth
    proposer = None
    if method != NO_SD:
        config = ProposerConfig(
            method,
            k,
            max_batch_size,
            Engine.cache_capacity(max_seq_len, k, tree),
            Path(draft_dir) if draft_dir is not None else None,
        )
        proposer = create_proposer(config, target)
    engine = Engine(target, proposer, k, max_batch_size, max_seq_len, load_eos_token_ids(model_dir), tree=tree)
    return engine, load_tokenizer(model_dir)
