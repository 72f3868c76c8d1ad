"""The roofline cost model: forward time from a GPU's peaks and a model's shape.

    forward(batched, kv) = weight_bytes / (BW·e_weights)
                         + 2·matmul_params·batched / (FLOP/s·e_compute)
                         + kv·kv_bytes_per_token / (BW·e_kv)

The three terms add (a decode step streams the weights, multiplies, and reads the cache one
after another); attention FLOPs are left out (small next to the matmuls below ~32k context).
Efficiency factors are the share of the data-sheet peak a real engine reaches; the defaults
(0.82 of bandwidth for weights, 0.95 for KV reads, 0.75 of peak FLOP/s) put H100 +
Llama-3.1-8B within 25 % of the paper's fitted linear model over batched tokens 1–1024 and
KV 0–200k (``tests/test_costmodel.py`` checks it).

Drafting: n-gram as a fraction of the verify time (as the paper measured); model drafters
(``eagle``, ``eagle3``, ``mtp``: one decoder layer of the target's shape plus the LM head;
``draft``: a whole draft model) as ``k`` sequential roofline forwards over one token per
running request; a tree step as one forward per pass over that pass's width per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable, TypeVar

import numpy as np

from specscope.costmodel.base import Drafting, StepLoad
from specscope.costmodel.linear import MAX_COEFFICIENT_S, PAPER_NGRAM, drafting_lookup
from specscope.costmodel.presets import Hardware, ModelShape, hardware
from specscope.errors import SpecscopeError
from specscope.trace.fields import Fields

T = TypeVar("T")


MIN_EFFICIENCY = 1e-3  # a thousandth of a data-sheet peak: below it a typo (1e-320 made every forward inf)


@dataclass(frozen=True)
class Efficiency:
    """Shares of the data-sheet peaks reached in practice."""

    weights: float = 0.82
    kv: float = 0.95
    compute: float = 0.75


def roofline_forward(shape: ModelShape, hw: Hardware, eff: Efficiency, batched: np.ndarray,
                     kv: np.ndarray, bytes_per_param: int = 2) -> np.ndarray:
    """Seconds for one forward of ``shape`` on ``hw`` (see the module docstring)."""
    weights = shape.weight_bytes(bytes_per_param) / (hw.mem_bandwidth * eff.weights)
    compute = 2.0 * shape.matmul_params() * np.asarray(batched, dtype=float) / (hw.peak_flops * eff.compute)
    cache = np.asarray(kv, dtype=float) * shape.kv_bytes_per_token(bytes_per_param) / (hw.mem_bandwidth * eff.kv)
    return weights + compute + cache


def head_shape(target: ModelShape) -> ModelShape:
    """An EAGLE/MTP-style head: one decoder layer of the target's shape with its LM head."""
    return ModelShape(f"{target.name}-head", 1, target.hidden_size, target.num_heads,
                      target.num_kv_heads, target.head_dim, target.intermediate_size,
                      target.vocab_size, target.tie_word_embeddings)


@dataclass(frozen=True)
class RooflineDrafting:
    """A model drafter: mean k sequential forwards of ``shape`` over one token per request
    (a tree step: one forward per pass over ``width × num_running`` tokens), its cache as long
    as the target's (a draft model or a head sees every token), and one forward over each new
    prompt (its prefill)."""

    shape: ModelShape
    hw: Hardware
    eff: Efficiency

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray:
        if load.draft_widths:
            seconds = sum(roofline_forward(self.shape, self.hw, self.eff, width * load.num_running, load.kv_tokens)
                          for width in load.draft_widths)
        else:
            running = np.maximum(load.num_running, 1)
            mean_k = (load.batched_tokens - load.num_running) / running
            one_pass = roofline_forward(self.shape, self.hw, self.eff, load.num_running, load.kv_tokens)
            seconds = np.maximum(mean_k, 1.0) * one_pass
        return np.where(load.num_running > 0, seconds, 0.0)

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """One forward of ``shape`` over the prompts, as the target's prefill."""
        prompt_tokens = np.asarray(prompt_tokens, dtype=float)
        seconds = roofline_forward(self.shape, self.hw, self.eff, prompt_tokens, np.zeros_like(prompt_tokens))
        return np.where(prompt_tokens > 0, seconds, 0.0)

    def to_json(self) -> dict:
        return {"kind": "roofline", "model": self.shape.name}


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

    def __post_init__(self) -> None:
        head = RooflineDrafting(head_shape(self.target), self.hw, self.eff)
        defaults: dict[str, Drafting] = {
            "ngram": PAPER_NGRAM,
            "eagle": head,
            "eagle3": head,
            "mtp": head,
        }
        self.drafting = {**defaults, **self.drafting}
        self._check_fits()

    def _check_fits(self) -> None:
        """Refuse weights (the target's, and a draft model's) beyond the GPU's memory: this
        roofline prices one GPU, and a model split over several runs other kernels and traffic."""
        draft = self.drafting.get("draft")  # a head (one layer) is left out: it shares the target's LM head
        models = [self.target, *([draft.shape] if isinstance(draft, RooflineDrafting) else [])]
        weights = sum(shape.weight_bytes() for shape in models)
        if weights > self.hw.memory_bytes:
            raise SpecscopeError(f"{self.name}: the weights of {' and '.join(s.name for s in models)} take "
                                 f"{weights / 2**30:.1f} GiB in BF16, beyond one {self.hw.name}'s "
                                 f"{self.hw.memory_bytes / 2**30:.0f} GiB; this roofline prices a model on one GPU (no "
                                 "tensor parallelism)")

    def with_draft_model(self, draft: ModelShape) -> "RooflineCostModel":
        """The same model with a ``draft`` proposer that runs ``draft`` autoregressively."""
        return replace(self, drafting=dict(self.drafting, draft=RooflineDrafting(draft, self.hw, self.eff)))

    def forward_time(self, batched_tokens: np.ndarray, kv_tokens: np.ndarray,
                     num_running: np.ndarray) -> np.ndarray:
        """``num_running`` does not matter on a roofline: weights, FLOPs and cache bytes do."""
        return roofline_forward(self.target, self.hw, self.eff, batched_tokens, kv_tokens)

    def prefill_forward_time(self, prompt_tokens: np.ndarray, num_prompts: np.ndarray) -> np.ndarray:
        """A forward over the prompts' positions with an empty cache."""
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
            **({"draft_model": self.drafting["draft"].shape.name} if isinstance(self.drafting.get("draft"), RooflineDrafting)
               else {}),
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
    model = RooflineCostModel(
        name=spec.text("name", optional=True) or default_name, hw=_located(spec, "gpu", hardware),
        target=_located(spec, "model", ModelShape.resolve), eff=Efficiency(**shares),
        overhead_s=spec.number("overhead_s", default=RooflineCostModel.overhead_s, low=0.0, high=MAX_COEFFICIENT_S))
    if spec.obj.get("draft_model") is not None:
        model = model.with_draft_model(_located(spec, "draft_model", ModelShape.resolve))
    if spec.has("drafting") and spec.obj["drafting"] != model.describe()["drafting"]:
        raise spec.error("drafting", "differs from what the model shapes give (a roofline derives its "
                                     "drafting; change model or draft_model instead)")
    return model


def _located(spec: Fields, name: str, read: Callable[[str], T]) -> T:
    """``read`` the text field ``name``; what it refuses names the file and the field."""
    try:
        return read(spec.text(name))
    except SpecscopeError as error:
        raise spec.error(name, str(error)) from None
