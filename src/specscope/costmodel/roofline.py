"""The roofline cost model: forward time from a GPU's peaks and a model's shape.

    forward(batched, kv) = streamed_bytes / (BW·e_weights)
                         + 2·matmul_params·batched / (FLOP/s·e_compute)
                         + kv·kv_bytes_per_token / (BW·e_kv)

The three terms add (a decode step streams the weights, multiplies, and reads the cache one
after another; an additive model, not the max of its terms: it prices the ridge up to 2× above
a strict roofline, which is what the paper's linear fit does too); attention FLOPs are left out
(small next to the matmuls below ~32k context). The weights streamed are those a token passes
through (:class:`Streamed`): the layers, the final norm and the LM head — not the input
embedding table, of which a forward reads only its tokens' rows.
Efficiency factors are the share of the data-sheet peak a real engine reaches; the defaults
(0.77 of bandwidth for the weights streamed, 0.95 for KV reads, 0.75 of peak FLOP/s) put H100 +
Llama-3.1-8B within 25 % of the paper's fitted linear model over batched tokens 1–1024 and
KV 0–200k (``tests/test_costmodel.py`` checks it).

Drafting: n-gram as a fraction of the verify time (as the paper measured); model drafters as
``k`` sequential roofline forwards over one token per running request (a tree step: one forward
per pass over that pass's width per request) of what they stream: ``draft`` a whole draft
model; the heads their own weights as :mod:`specscope.costmodel.memory` counts them, plus the
LM head they share with the target where they share it — ``eagle`` (EAGLE-1: fc 2h→h and one
decoder layer, the target's LM head), ``eagle3`` (fc 3h→h, one 2h-input layer and its own LM
head over a 32k draft vocabulary), ``mtp`` (eh_proj 2h→h and one decoder block, the target's
LM head); each caches one layer's K and V.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np

from specscope.costmodel.base import Drafting, StepLoad
from specscope.costmodel.linear import MAX_COEFFICIENT_S, PAPER_NGRAM, drafting_lookup
from specscope.costmodel.memory import eagle3_draft_vocab, eagle3_params, eagle_params, kv_bytes_per_layer, mtp_params
from specscope.costmodel.presets import BF16_BYTES, Hardware, ModelShape, hardware
from specscope.errors import SpecscopeError
from specscope.trace.fields import Fields

T = TypeVar("T")


MIN_EFFICIENCY = 1e-3  # a thousandth of a data-sheet peak: below it a typo (1e-320 made every forward inf)


@dataclass(frozen=True)
class Efficiency:
    """Shares of the data-sheet peaks reached in practice."""

    weights: float = 0.77
    kv: float = 0.95
    compute: float = 0.75


@dataclass(frozen=True)
class Streamed:
    """What one forward of a network costs a GPU per pass: ``weight_bytes`` streamed from memory,
    ``matmul_params`` each token multiplies through, ``kv_bytes_per_token`` of cache it reads
    per cached token."""

    name: str
    weight_bytes: float
    matmul_params: float
    kv_bytes_per_token: float

    @classmethod
    def model(cls, shape: ModelShape) -> "Streamed":
        """A whole model: its layers and final norm at the checkpoint's bytes per weight (FP8: 1)
        and its LM head (tied or not, read once by the head's matmul) in 16 bits; the input
        embedding is read a row per token; its cache in 16 bits."""
        embedding = 0 if shape.tie_word_embeddings else shape.vocab_size * shape.hidden_size * BF16_BYTES
        return cls(shape.name, shape.weight_bytes() - embedding, shape.matmul_params(), shape.kv_bytes_per_token())

    @classmethod
    def head(cls, target: ModelShape, kind: str) -> "Streamed":
        """An EAGLE, EAGLE-3 or MTP head of ``target`` (module docstring): its own weights, and
        the target's LM head where it shares it, in 16 bits."""
        shared_lm_head = target.vocab_size * target.hidden_size
        params = {"eagle": eagle_params(target) + shared_lm_head,
                  "eagle3": eagle3_params(target, eagle3_draft_vocab(target)),
                  "mtp": mtp_params(target) + shared_lm_head}[kind]
        return cls(f"{target.name}-{kind}-head", params * BF16_BYTES, params, kv_bytes_per_layer(target, BF16_BYTES))


VOCAB_PADDING = 128  # a draft model's vocabulary may be this many rows short of the target's (padding)


def roofline_forward(net: Streamed, hw: Hardware, eff: Efficiency, batched: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """Seconds for one forward of ``net`` on ``hw`` (see the module docstring)."""
    weights = net.weight_bytes / (hw.mem_bandwidth * eff.weights)
    compute = 2.0 * net.matmul_params * np.asarray(batched, dtype=float) / (hw.peak_flops * eff.compute)
    cache = np.asarray(kv, dtype=float) * net.kv_bytes_per_token / (hw.mem_bandwidth * eff.kv)
    return weights + compute + cache


HEADS = ("eagle", "eagle3", "mtp")  # the drafters a roofline prices as heads of its target


@dataclass(frozen=True)
class RooflineDrafting:
    """A model drafter: mean k sequential forwards of ``net`` over one token per request
    (a tree step: one forward per pass over ``width × num_running`` tokens), its cache as long
    as the target's (a draft model or a head sees every token), and one forward over each new
    prompt (its prefill)."""

    net: Streamed
    hw: Hardware
    eff: Efficiency

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray:
        if load.draft_widths:
            seconds = sum(roofline_forward(self.net, self.hw, self.eff, width * load.num_running, load.kv_tokens)
                          for width in load.draft_widths)
        else:
            running = np.maximum(load.num_running, 1)
            mean_k = (load.batched_tokens - load.num_running) / running
            one_pass = roofline_forward(self.net, self.hw, self.eff, load.num_running, load.kv_tokens)
            seconds = np.maximum(mean_k, 1.0) * one_pass
        return np.where(load.num_running > 0, seconds, 0.0)

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """One forward of ``net`` over the prompts, as the target's prefill."""
        prompt_tokens = np.asarray(prompt_tokens, dtype=float)
        seconds = roofline_forward(self.net, self.hw, self.eff, prompt_tokens, np.zeros_like(prompt_tokens))
        return np.where(prompt_tokens > 0, seconds, 0.0)

    def to_json(self) -> dict:
        return {"kind": "roofline", "model": self.net.name}


@dataclass
class RooflineCostModel:
    """Forward time from ``hw`` peaks and the ``target`` shape (see the module docstring)."""

    name: str
    hw: Hardware
    target: ModelShape
    overhead_s: float = 1.2e-3
    admit_s: float = 0.0  # a roofline prices the engine's steps only
    eff: Efficiency = field(default_factory=Efficiency)
    drafting: dict[str, Drafting] = field(default_factory=dict)
    pads_verification: bool = False
    draft: ModelShape | None = None  # the draft model's shape (proposer ``draft``)

    def __post_init__(self) -> None:
        self._target = Streamed.model(self.target)  # what every forward streams: computed once
        defaults: dict[str, Drafting] = {"ngram": PAPER_NGRAM, **{kind: RooflineDrafting(
            Streamed.head(self.target, kind), self.hw, self.eff) for kind in HEADS}}
        self.drafting = {**defaults, **self.drafting}
        self._check_fits()

    @property
    def _models(self) -> list[ModelShape]:
        """The models on the GPU: the target, and a draft model (a head adds a layer: left out)."""
        return [self.target, *([self.draft] if self.draft is not None else [])]

    def _check_fits(self) -> None:
        """Refuse weights (the target's, and a draft model's) beyond the GPU's memory: this
        roofline prices one GPU, and a model split over several runs other kernels and traffic."""
        models = self._models
        weights = sum(shape.weight_bytes() for shape in models)
        if weights > self.hw.memory_bytes:
            raise SpecscopeError(f"the weights of {' and '.join(s.name for s in models)} take "
                                 f"{weights / 2**30:.1f} GiB as their checkpoints store them ("
                                 f"{' and '.join('FP8 layers' if s.weight_dtype_bytes == 1 else 'BF16' for s in models)})"
                                 f", beyond one {self.hw.name}'s "
                                 f"{self.hw.memory_bytes / 2**30:.0f} GiB; this roofline prices a model on one GPU (no "
                                 "tensor parallelism)")

    def kv_capacity_tokens(self) -> float:
        """How many tokens of the target's KV cache fit beside the weights (the target's, a draft
        model's) in the GPU's memory; activations, a head's layer and its cache, and an engine's
        reserve (vLLM keeps 10 % free by default) are left out, so an engine holds fewer."""
        free = self.hw.memory_bytes - sum(shape.weight_bytes() for shape in self._models)
        return free / sum(shape.kv_bytes_per_token() for shape in self._models)

    def with_draft_model(self, draft: ModelShape) -> "RooflineCostModel":
        """The same model with a ``draft`` proposer that runs ``draft`` autoregressively; a draft
        model proposes the target's tokens, so its vocabulary is the target's, less at most
        :data:`VOCAB_PADDING` rows of padding (Qwen2.5-0.5B's 151936 beside 7B's 152064, as vLLM allows)."""
        check_draft_vocab(self.target, draft)
        return replace(self, draft=draft, drafting=dict(self.drafting, draft=RooflineDrafting(Streamed.model(draft), self.hw,
                                                                                           self.eff)))

    def forward_time(self, batched_tokens: np.ndarray, kv_tokens: np.ndarray,
                     num_running: np.ndarray) -> np.ndarray:
        """``num_running`` does not matter on a roofline: weights, FLOPs and cache bytes do."""
        return roofline_forward(self._target, self.hw, self.eff, batched_tokens, kv_tokens)

    def prefill_forward_time(self, prompt_tokens: np.ndarray, num_prompts: np.ndarray,
                             prompt_pairs: np.ndarray | float = 0.0) -> np.ndarray:
        """A forward over the prompts' positions with an empty cache (their attention among
        themselves, ``prompt_pairs``, not priced: a roofline reads a cache, and a prefill has none)."""
        return self.forward_time(prompt_tokens, np.zeros_like(np.asarray(prompt_tokens, dtype=float)), num_prompts)

    def drafting_for(self, proposer: str) -> Drafting:
        return drafting_lookup(self.name, self.drafting, proposer)

    def describe(self) -> dict:
        return {
            "kind": "roofline",
            "name": self.name,
            "gpu": self.hw.name,
            "model": self.target.name,
            "efficiency": {"weights": self.eff.weights, "kv": self.eff.kv, "compute": self.eff.compute},
            "overhead_s": self.overhead_s,
            **({"draft_model": self.draft.name} if self.draft is not None else {}),
            "drafting": {name: d.to_json() for name, d in self.drafting.items()},
        }


def roofline_from_json(spec: Fields, default_name: str) -> RooflineCostModel:
    """Parse a roofline cost model file: ``gpu``, ``model`` (a preset or a config.json path),
    optional ``draft_model``, ``efficiency`` shares in (0, 1], ``overhead_s`` >= 0. A
    ``drafting`` field (as ``costmodel show`` prints it) must be what the shapes give."""
    spec.only(["kind", "name", "gpu", "model", "draft_model", "efficiency", "overhead_s", "drafting"])
    efficiency = spec.child("efficiency", optional=True)
    shares = {}
    if efficiency is not None:
        efficiency.only([f.name for f in fields(Efficiency)])
        shares = {name: efficiency.number(name, low=MIN_EFFICIENCY, high=1.0) for name in efficiency.obj}
    hw, target = _located(spec, "gpu", hardware), _located(spec, "model", _beside_file(spec))
    overhead = spec.number("overhead_s", default=RooflineCostModel.overhead_s, low=0.0, high=MAX_COEFFICIENT_S)
    try:  # the weights beyond the GPU's memory
        model = RooflineCostModel(name=spec.text("name", optional=True) or default_name, hw=hw, target=target,
                                  eff=Efficiency(**shares), overhead_s=overhead)
    except SpecscopeError as error:
        raise spec.error("model", str(error)) from None
    if spec.obj.get("draft_model") is not None:
        draft = _located(spec, "draft_model", _beside_file(spec))
        try:  # another vocabulary; both models' weights beyond the GPU's memory
            model = model.with_draft_model(draft)
        except SpecscopeError as error:
            raise spec.error("draft_model", str(error)) from None
    if spec.has("drafting") and spec.obj["drafting"] != model.describe()["drafting"]:
        raise spec.error("drafting", "differs from what the model shapes give (a roofline derives its "
                                     "drafting; change model or draft_model instead)")
    return model


def _beside_file(spec: Fields) -> Callable[[str], ModelShape]:
    """:meth:`ModelShape.resolve` where a relative config path not found from here is read beside
    the cost model's file (a file written by ``costmodel show`` elsewhere keeps working)."""
    def resolve(text: str) -> ModelShape:
        beside = Path(str(spec.path)).parent / text
        return ModelShape.resolve(beside if not Path(text).is_absolute() and not Path(text).exists()
                                  and beside.exists() else text)
    return resolve


def check_draft_vocab(target: ModelShape, draft: ModelShape) -> None:
    """A draft model proposes the target's tokens: its vocabulary is the target's, less at most
    :data:`VOCAB_PADDING` rows of padding (SpecscopeError otherwise)."""
    if not 0 <= target.vocab_size - draft.vocab_size <= VOCAB_PADDING:
        raise SpecscopeError(f"draft model {draft.name!r}: its vocabulary of {draft.vocab_size} tokens is not the "
                             f"target {target.name!r}'s {target.vocab_size}: it cannot draft for it (a "
                             "draft model shares the target's tokenizer)")


def _located(spec: Fields, name: str, read: Callable[[str], T]) -> T:
    """``read`` the text field ``name``; what it refuses names the file and the field."""
    text = spec.text(name)  # its own error names the file and field already
    try:
        return read(text)
    except SpecscopeError as error:
        raise spec.error(name, str(error)) from None
