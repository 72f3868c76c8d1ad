"""The linear cost model: a target forward costs
``c_fixed + c_tok·batched + c_kv·kv + c_req·running + c_multi·[batched > 1]`` seconds.

This is the model the paper fitted on an H100 for Llama-3.1-8B-Instruct (preset
``h100-llama3.1-8b``; it has neither of the last two terms), and the one ``specscope costmodel
fit`` fits to measured step records, where they can show up: ``c_req``, a cost per sequence
(cache indexing, masks, per-row bookkeeping of a small engine); ``c_multi``, a fixed cost of a
forward of more than one token in all — on a CPU the matmuls switch from matrix-vector to
matrix-matrix kernels there (the bundled target, one sequence with 100 cached tokens: 1 token
2.97 ms, 2 tokens 3.25, 4 tokens 3.63, 8 tokens 3.65).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np

from specscope.costmodel.base import Drafting, FractionDrafting, LinearDrafting
from specscope.errors import SpecscopeError


@dataclass
class LinearCostModel:
    """Target forward time linear in batched tokens, cached tokens and running sequences, plus
    drafting models."""

    name: str
    c_fixed: float  # seconds per forward
    c_tok: float  # seconds per batched (new) token
    c_kv: float  # seconds per token in the KV cache
    overhead_s: float  # engine overhead per step
    drafting: dict[str, Drafting] = field(default_factory=dict)
    pads_verification: bool = False  # verify num_running × max(k+1) tokens (see costmodel.base)
    c_req: float = 0.0  # seconds per running sequence
    c_multi: float = 0.0  # seconds added to a forward of more than one token in all

    def forward_time(self, batched_tokens: np.ndarray, kv_tokens: np.ndarray,
                     num_running: np.ndarray) -> np.ndarray:
        batched, running = np.asarray(batched_tokens), np.asarray(num_running)
        return (self.c_fixed + self.c_tok * batched + self.c_kv * np.asarray(kv_tokens)
                + self.c_req * running + self.c_multi * (batched > 1))

    def drafting_for(self, proposer: str) -> Drafting:
        return drafting_lookup(self.name, self.drafting, proposer)

    def scaled(self, factor: float) -> "LinearCostModel":
        """Every time coefficient multiplied by ``factor`` (fractions stay fractions)."""
        drafting = {name: _times(d, factor) if isinstance(d, LinearDrafting) else d
                    for name, d in self.drafting.items()}
        return replace(_times(self, factor), drafting=drafting)

    def describe(self) -> dict:
        return {
            "kind": "linear",
            "name": self.name,
            "forward": {"c_fixed": self.c_fixed, "c_tok": self.c_tok, "c_kv": self.c_kv, "c_req": self.c_req,
                        "c_multi": self.c_multi},
            "overhead_s": self.overhead_s,
            "pads_verification": self.pads_verification,
            "drafting": {name: d.to_json() for name, d in self.drafting.items()},
        }


def _times(model, factor: float):
    """``model`` (a dataclass) with every ``c_*`` coefficient and ``overhead_s`` times ``factor``."""
    return replace(model, **{f.name: getattr(model, f.name) * factor for f in fields(model)
                             if f.name.startswith("c_") or f.name == "overhead_s"})


def drafting_lookup(model_name: str, drafting: dict[str, Drafting], proposer: str) -> Drafting:
    """The drafting model for ``proposer``, or a one-line error listing the known ones."""
    try:
        return drafting[proposer]
    except KeyError:
        known = ", ".join(sorted(drafting)) or "none"
        raise SpecscopeError(
            f"cost model {model_name!r} has no drafting model for proposer {proposer!r} (has: {known})"
        ) from None


def drafting_from_json(obj: dict, label: str) -> Drafting:
    """Parse ``{"kind": "fraction", "ratio": r}`` or ``{"kind": "linear", "c_fixed", ...}``."""
    try:
        kind = obj["kind"]
        if kind == "fraction":
            return FractionDrafting(float(obj["ratio"]))
        if kind == "linear":
            return LinearDrafting(float(obj["c_fixed"]), float(obj["c_tok"]), float(obj["c_kv"]),
                                  float(obj.get("c_req", 0.0)), float(obj.get("c_prefill", 0.0)),
                                  float(obj.get("c_multi", 0.0)))
    except KeyError as missing:
        raise SpecscopeError(f"{label}: field {missing} missing") from None
    except (TypeError, ValueError):
        raise SpecscopeError(f"{label}: expected numbers") from None
    raise SpecscopeError(f"{label}: field 'kind': expected 'fraction' or 'linear', got {kind!r}")


def linear_from_json(obj: dict, label: str) -> LinearCostModel:
    """Parse the ``describe()`` form of a linear cost model (from a JSON or TOML file)."""
    try:
        forward = obj["forward"]
        return LinearCostModel(
            name=str(obj.get("name", label)),
            c_fixed=float(forward["c_fixed"]),
            c_tok=float(forward["c_tok"]),
            c_kv=float(forward["c_kv"]),
            overhead_s=float(obj.get("overhead_s", 0.0)),
            drafting={
                name: drafting_from_json(d, f"{label}: drafting.{name}")
                for name, d in obj.get("drafting", {}).items()
            },
            pads_verification=bool(obj.get("pads_verification", False)),
            c_req=float(forward.get("c_req", 0.0)),
            c_multi=float(forward.get("c_multi", 0.0)),
        )
    except KeyError as missing:
        raise SpecscopeError(f"{label}: field {missing} missing") from None
    except (TypeError, ValueError, AttributeError):
        raise SpecscopeError(f"{label}: field 'forward': expected numbers c_fixed, c_tok, c_kv (and c_req, c_multi)") from None


# The paper's constants (shared/paper/README.md): Llama-3.1-8B-Instruct on an H100, seconds.
PAPER_NGRAM = FractionDrafting(0.005875)
_PAPER_EAGLE = LinearDrafting(c_fixed=2.13526175e-03, c_tok=8.41429603e-07, c_kv=2.37768493e-09)

H100_LLAMA31_8B = LinearCostModel(
    name="h100-llama3.1-8b",
    c_fixed=5.88590713e-03,
    c_tok=2.10103129e-05,
    c_kv=3.92645679e-08,
    overhead_s=1.20683946e-03,
    drafting={"ngram": PAPER_NGRAM, "eagle": _PAPER_EAGLE, "eagle3": _PAPER_EAGLE},
)
