"""Assemble an engine: a target model and its proposer, loaded from Hugging Face directories.

The engine (layer 3) calls proposers only through :mod:`specscope.engine.proposer_api` and may
not import :mod:`specscope.proposers` (layer 4, whose registry builds a proposer by name), so
loading a target and building its proposer happens here, above both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specscope.engine.loading import (
    check_same_tokenizer,
    load_eos_token_ids,
    load_model,
    load_tokenizer,
    parse_dtype,
    resolve_device,
)
from specscope.engine.proposer_api import Proposer, ProposerConfig
from specscope.engine.runner import DEFAULT_MAX_SEQ_LEN, Engine
from specscope.errors import SpecscopeError
from specscope.methods import NO_SD
from specscope.policy.learned import LearnedPolicy, load_policy
from specscope.proposers import create_proposer
from specscope.proposers.switching import SwitchingProposer
from specscope.trees import TreeShape

if TYPE_CHECKING:
    import tokenizers

    from specscope.engine.model import Transformer


def build_proposer(target: "Transformer", method: str, config: ProposerConfig,
                   policy: LearnedPolicy | None = None) -> Proposer | None:
    """The proposer ``method`` (``None`` for no SD) built from ``config``, or, with a learned
    ``policy``, a :class:`~specscope.proposers.switching.SwitchingProposer` over its methods
    proposing up to the policy's deepest k (``config.draft_dir``: the checkpoint of its one
    model drafter)."""
    if policy is None:
        return None if method == NO_SD else create_proposer(config, target)
    drafter = policy.drafter(config.draft_dir)

    def member(method: str) -> Proposer:
        try:
            return create_proposer(ProposerConfig(method, policy.depth, config.max_batch_size, config.max_seq_len,
                                                  config.draft_dir if method == drafter else None), target)
        except SpecscopeError as error:
            if method != drafter:
                raise
            raise SpecscopeError(f"--draft {config.draft_dir}: {policy.label} drafts with {method}, and the "
                                 f"checkpoint does not load as one: {error}") from None

    members = [member(m) for m in policy.methods]
    lookup = members[policy.methods.index("ngram")] if "ngram" in policy.methods else create_proposer(
        ProposerConfig("ngram", policy.depth, config.max_batch_size, config.max_seq_len), target)
    return SwitchingProposer(policy, members, lookup, config.max_batch_size)


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
    policy: str | Path | None = None,
    confidence: float | None = None,
) -> tuple[Engine, "tokenizers.Tokenizer | None"]:
    """Load target (and proposer ``method`` unless :data:`~specscope.methods.NO_SD`) from HF directories; returns the
    engine and the target directory's ``tokenizer.json`` tokenizer (``None`` without one).
    ``max_seq_len`` defaults to the model's ``max_position_embeddings`` (else
    ``DEFAULT_MAX_SEQ_LEN``) and may not exceed it. With a ``tree`` the engine drafts and
    verifies that static token tree every step and ``k`` is ignored (it is the tree's depth).
    With a learned ``policy`` file the engine switches proposer per step and sequence as the
    policy decides (``method`` and ``k`` are ignored; :func:`build_proposer`). With ``confidence`` p a
    model drafter ends each row's proposal at its first draft of probability below p (k at most)."""
    model_dir = Path(model_dir)
    torch_device = resolve_device(device)
    if draft_dir is not None:
        check_same_tokenizer(model_dir, Path(draft_dir))
    target = load_model(model_dir, parse_dtype(dtype), torch_device)
    if max_seq_len is None:
        max_seq_len = target.config.max_position_embeddings or DEFAULT_MAX_SEQ_LEN
    learned = load_policy(policy) if policy is not None else None
    if tree is not None:
        k = tree.depth
    if learned is not None:
        k = learned.depth
    engine = drafting_engine(target, method, k, max_batch_size, max_seq_len, load_eos_token_ids(model_dir),
                             Path(draft_dir) if draft_dir is not None else None, learned, tree, confidence)
    return engine, load_tokenizer(model_dir)


def drafting_engine(target: Transformer, method: str, k: int, max_batch_size: int, max_seq_len: int,
                    eos_token_ids: list[int], draft_dir: Path | None = None, policy: LearnedPolicy | None = None,
                    tree: TreeShape | None = None, confidence: float | None = None, seed: int = 0) -> Engine:
    """The engine over ``target`` whose proposer :func:`build_proposer` makes for ``method`` (or
    the ``policy``), its caches sized for ``max_seq_len`` tokens and proposals of ``k`` (a
    ``tree``'s nodes where it drafts one)."""
    config = ProposerConfig(method, k, max_batch_size, Engine.cache_capacity(max_seq_len, k, tree), draft_dir)
    return Engine(target, build_proposer(target, method, config, policy), k, max_batch_size, max_seq_len,
                  eos_token_ids, seed=seed, tree=tree, confidence=confidence)
