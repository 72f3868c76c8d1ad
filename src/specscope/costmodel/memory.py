"""Memory footprint of a target and its drafter: weight bytes and KV-cache bytes per token.

Everything is computed from shapes alone (:class:`~specscope.costmodel.presets.ModelShape`).
A drafter's footprint counts only what it adds to the target's: tensors it shares with the
target (embedding, LM head) cost nothing extra.

Drafters:

- ``draft`` — a separate checkpoint: all its weights and its own KV cache for every layer.
- ``eagle`` (EAGLE-1 layout) — ``fc`` over [token embedding; target hidden state] (2h→h with a
  bias, as the original EAGLE-1 heads have it) and one decoder layer of the target's shape whose
  ``input_layernorm`` is absent; no final norm; embedding and LM head shared with the target.
- ``eagle3`` (EAGLE-3 layout) — ``fc`` over three fused target layers (3h→h, no bias), one
  ``midlayer`` whose q/k/v projections take 2h inputs [norm(embedding); norm(hidden)], three
  RMSNorms in the midlayer (``input_layernorm``, ``hidden_norm``, ``post_attention_layernorm``),
  a final ``norm``, its own LM head over a draft vocabulary (``draft_vocab_size`` × h) and the
  ``d2t`` map (int64, one entry per draft token); embedding shared with the target.
- ``mtp`` (DeepSeek-V3 layout) — ``enorm`` and ``hnorm`` (h each), ``eh_proj`` (2h→h, no bias),
  one decoder block of the target's shape, ``shared_head.norm`` (h); embedding and LM head
  shared with the target.

Each head caches K and V for its one layer: KV bytes per token = 2 · kv_heads · head_dim · bytes.

Sharing follows vLLM (``llama_eagle.py`` shares the target's embedding and LM head,
``llama_eagle3.py`` the embedding unless the checkpoint has one, ``deepseek_mtp.py`` /
the DeepSeek-V3 report: MTP modules share both). EAGLE-3's ``t2d`` (one bool per target token)
is in its checkpoint but is only checked on loading, not kept. For Llama-3.1-8B the EAGLE-3
count, 849,635,328 bytes (810 MiB), agrees with the ~811 MB reported for the published head
(whose file stores no embedding).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specscope.costmodel.presets import BF16_BYTES, ModelShape

DTYPE_BYTES = BF16_BYTES  # the default: BF16 / FP16
EAGLE3_DRAFT_VOCAB_SIZE = 32000  # draft_vocab_size of the published EAGLE-3 heads
D2T_BYTES_PER_ENTRY = 8  # d2t is stored as int64


@dataclass(frozen=True)
class Footprint:
    """What one model (or head) adds to GPU memory.

    ``params`` are floating-point parameters stored at the chosen dtype; ``extra_bytes`` are
    integer tables stored at their own width (EAGLE-3's ``d2t``); ``shared`` names the target
    tensors the model uses without owning them.
    """

    name: str
    kind: str
    params: int
    extra_bytes: int
    num_kv_layers: int
    kv_bytes_per_token: int
    weight_bytes: int
    shared: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "params": self.params,
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_layers": self.num_kv_layers,
            "shared_with_target": list(self.shared),
        }


def kv_bytes_per_layer(shape: ModelShape, bytes_per_value: int) -> int:
    """K and V of one token in one layer: 2 · kv_heads · head_dim · bytes."""
    return 2 * shape.num_kv_heads * shape.head_dim * bytes_per_value


def attention_params(shape: ModelShape, input_size: int) -> int:
    """q/k/v projections from ``input_size`` plus the output projection back to h."""
    q_width = shape.num_heads * shape.head_dim
    kv_width = shape.num_kv_heads * shape.head_dim
    return input_size * (q_width + 2 * kv_width) + q_width * shape.hidden_size


def mlp_params(shape: ModelShape) -> int:
    """SwiGLU: gate, up and down projections."""
    return 3 * shape.hidden_size * shape.intermediate_size


def eagle_params(target: ModelShape) -> int:
    """EAGLE-1 head: fc (2h·h + h bias) + one decoder layer without its input_layernorm."""
    h = target.hidden_size
    return 2 * h * h + h + attention_params(target, h) + mlp_params(target) + h


def eagle3_draft_vocab(target: ModelShape) -> int:
    """The draft vocabulary of an EAGLE-3 head of ``target`` where none is given: the published
    heads' :data:`EAGLE3_DRAFT_VOCAB_SIZE`, at most the target's own (a 1024-token model's head
    was priced over 32000: its weights 386 % of the target's, against 43 %)."""
    return min(EAGLE3_DRAFT_VOCAB_SIZE, target.vocab_size)


def eagle3_params(target: ModelShape, draft_vocab_size: int) -> int:
    """EAGLE-3 head: fc (3h·h) + midlayer (2h-input attention, MLP, 3 norms) + norm + lm_head."""
    h = target.hidden_size
    midlayer = attention_params(target, 2 * h) + mlp_params(target) + 3 * h
    return 3 * h * h + midlayer + h + draft_vocab_size * h


def mtp_params(target: ModelShape) -> int:
    """MTP module: enorm + hnorm + eh_proj (2h·h) + one decoder block + shared_head.norm."""
    h = target.hidden_size
    return 2 * h + 2 * h * h + target.layer_params() + h


def target_footprint(shape: ModelShape, dtype_bytes: int | None) -> Footprint:
    """A model serving on its own (the target, or a separate draft checkpoint); ``dtype_bytes``
    None: its weights as its checkpoint stores them (FP8 layers: 1 byte), its cache in 16 bits."""
    return Footprint(
        name=shape.name,
        kind="model",
        params=shape.params(),
        extra_bytes=0,
        num_kv_layers=shape.num_layers,
        kv_bytes_per_token=shape.kv_bytes_per_token(dtype_bytes or DTYPE_BYTES),
        weight_bytes=shape.weight_bytes(dtype_bytes),
    )


def _head(
    target: ModelShape,
    kind: str,
    params: int,
    shared: tuple[str, ...],
    dtype_bytes: int | None,
    extra_bytes: int = 0,
) -> Footprint:
    """A head's footprint at ``dtype_bytes`` (None: 16 bits, as heads are published)."""
    dtype_bytes = dtype_bytes or DTYPE_BYTES
    return Footprint(
        name=f"{kind} head for {target.name}",
        kind=kind,
        params=params,
        extra_bytes=extra_bytes,
        num_kv_layers=1,
        kv_bytes_per_token=kv_bytes_per_layer(target, dtype_bytes),
        weight_bytes=params * dtype_bytes + extra_bytes,
        shared=shared,
    )


def _draft_model(target: ModelShape, draft: ModelShape | None, dtype_bytes: int | None, draft_vocab_size: int) -> Footprint:
    if draft is None:
        raise ValueError("a draft-model drafter needs the draft's shape")
    return target_footprint(draft, dtype_bytes)


def _eagle(target: ModelShape, draft: ModelShape | None, dtype_bytes: int | None, draft_vocab_size: int) -> Footprint:
    return _head(target, "eagle", eagle_params(target), ("embedding", "lm_head"), dtype_bytes)


def _eagle3(target: ModelShape, draft: ModelShape | None, dtype_bytes: int | None, draft_vocab_size: int) -> Footprint:
    return _head(target, "eagle3", eagle3_params(target, draft_vocab_size), ("embedding",), dtype_bytes,
                 extra_bytes=D2T_BYTES_PER_ENTRY * draft_vocab_size)


def _mtp(target: ModelShape, draft: ModelShape | None, dtype_bytes: int | None, draft_vocab_size: int) -> Footprint:
    return _head(target, "mtp", mtp_params(target), ("embedding", "lm_head"), dtype_bytes)


@dataclass(frozen=True)
class MemoryModel:
    """How one drafter layout is counted: ``footprint(target, draft, dtype_bytes,
    draft_vocab_size)``; ``draft_vocab``: whether it has its own draft vocabulary."""

    description: str
    footprint: Callable[[ModelShape, ModelShape | None, int, int], Footprint]
    draft_vocab: bool = False


# keyed by the methods table's ``memory_model`` (:mod:`specscope.methods`)
MEMORY_MODELS: dict[str, MemoryModel] = {
    "draft": MemoryModel("a separate draft model: all its weights and its own KV cache", _draft_model),
    "eagle": MemoryModel("an EAGLE-1 head (fc 2h→h + one decoder layer; shares embedding and LM head)", _eagle),
    "eagle3": MemoryModel("an EAGLE-3 head (fc 3h→h + one 2h-input layer + own draft-vocabulary LM head)",
                          _eagle3, draft_vocab=True),
    "mtp": MemoryModel("a DeepSeek-V3-style MTP module (norms, eh_proj 2h→h, one decoder block)", _mtp),
}
DRAFTERS = tuple(MEMORY_MODELS)


def drafter_footprint(
    kind: str,
    target: ModelShape,
    draft: ModelShape | None,
    dtype_bytes: int | None,
    draft_vocab_size: int,
) -> Footprint:
    """The drafter of memory model ``kind`` (one of :data:`DRAFTERS`) for ``target`` (``dtype_bytes``
    None: a draft checkpoint's weights as it stores them, a head's in 16 bits).

    ``draft`` is the separate checkpoint's shape (``kind == "draft"`` only); the heads are
    derived from the target's shape.
    """
    if kind not in MEMORY_MODELS:
        raise ValueError(f"unknown drafter kind {kind!r}; expected one of {DRAFTERS}")
    return MEMORY_MODELS[kind].footprint(target, draft, dtype_bytes, draft_vocab_size)


@dataclass(frozen=True)
class MemoryReport:
    """Target and (optional) drafter footprints; overheads are drafter ÷ target in %."""

    target: Footprint
    drafter: Footprint | None
    dtype_bytes: int | None  # None: each checkpoint's weights as stored, heads and caches in 16 bits

    @property
    def weight_overhead_pct(self) -> float | None:
        if self.drafter is None:
            return None
        return 100.0 * self.drafter.weight_bytes / self.target.weight_bytes

    @property
    def kv_overhead_pct(self) -> float | None:
        if self.drafter is None:
            return None
        return 100.0 * self.drafter.kv_bytes_per_token / self.target.kv_bytes_per_token

    def to_dict(self) -> dict:
        return {
            "target": self.target.to_dict(),
            "drafter": None if self.drafter is None else self.drafter.to_dict(),
            "weight_overhead_pct": self.weight_overhead_pct,
            "kv_overhead_pct": self.kv_overhead_pct,
            "dtype_bytes": self.dtype_bytes,
        }


def memory_report(
    target: ModelShape,
    kind: str | None = None,
    draft: ModelShape | None = None,
    dtype_bytes: int | None = DTYPE_BYTES,
    draft_vocab_size: int | None = None,
) -> MemoryReport:
    """Footprints of ``target`` and of its drafter of ``kind`` (None: no drafter); ``dtype_bytes``
    None: each checkpoint's weights as it stores them, heads and caches in 16 bits;
    ``draft_vocab_size`` None: :func:`eagle3_draft_vocab`."""
    vocab = eagle3_draft_vocab(target) if draft_vocab_size is None else draft_vocab_size
    drafter = None if kind is None else drafter_footprint(kind, target, draft, dtype_bytes, vocab)
    return MemoryReport(target_footprint(target, dtype_bytes), drafter, dtype_bytes)
