"""Resolve a cost-model spec given on the command line into a cost model.

Accepted specs:

- a preset name: ``h100-llama3.1-8b`` (the paper's fitted linear model);
- ``roofline:GPU:MODEL`` — e.g. ``roofline:h200:llama3.1-8b``; MODEL may be a preset name or a
  path to an HF ``config.json``; an optional ``:DRAFT`` adds a ``draft`` proposer drafting with
  that model (``roofline:h100:llama3.1-8b:llama3.2-1b``); the weights must fit the one GPU;
- a path to a ``.json`` or ``.toml`` file in the form ``specscope costmodel show`` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from specscope.costmodel.base import CostModel
from specscope.costmodel.linear import H100_LLAMA31_8B, linear_from_json
from specscope.costmodel.presets import ModelShape, hardware
from specscope.costmodel.roofline import RooflineCostModel, roofline_from_json
from specscope.errors import SpecscopeError
from specscope.reading import read_json_object, read_toml_object
from specscope.trace.fields import Fields


PRESETS: dict[str, CostModel] = {H100_LLAMA31_8B.name: H100_LLAMA31_8B}
DEFAULT_COST_MODEL = H100_LLAMA31_8B.name  # the paper's fitted H100 model


def _roofline(spec: str) -> RooflineCostModel:
    parts = spec.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise SpecscopeError(f"cost model {spec!r}: expected roofline:GPU:MODEL[:DRAFT]"
                             + (" (a part is empty)" if len(parts) in (3, 4) else ""))
    try:  # an unknown GPU or model; the weights beyond the GPU's memory; a draft model of another vocabulary
        hw, target = hardware(parts[1]), ModelShape.resolve(parts[2])
        draft = ModelShape.resolve(parts[3]) if len(parts) == 4 else None
        model = RooflineCostModel(name=spec, hw=hw, target=target)
        return model if draft is None else model.with_draft_model(draft)
    except SpecscopeError as error:
        raise SpecscopeError(f"{spec}: {error}") from None


def _from_file(path: Path) -> CostModel:
    """A cost model from a JSON or TOML file in the form ``costmodel show`` prints."""
    if path.suffix.lower() == ".toml":
        obj = read_toml_object(path)
    else:
        obj = read_json_object(path, "a cost model (a JSON object)")
    spec = Fields(obj, path)
    if "kind" not in obj and {"gpu", "model"} & obj.keys():
        raise spec.error("kind", "missing: a file with 'gpu' and 'model' is a roofline: add kind = \"roofline\"")
    kind = spec.obj.get("kind", "linear")
    if kind == "linear":
        return linear_from_json(obj, str(path))
    if kind == "roofline":
        return roofline_from_json(spec, path.stem)
    raise spec.error("kind", f"expected 'linear' or 'roofline', got {kind!r}")


def resolve_cost_model(spec: str) -> CostModel:
    """A cost model from a preset name, a ``roofline:`` spec, or a JSON/TOML file."""
    if spec in PRESETS:
        return PRESETS[spec]
    if not spec.strip():  # Path('') is the working folder
        raise SpecscopeError(f"cost model {spec!r}: empty (expected a preset, roofline:GPU:MODEL or a JSON/TOML file)")
    if spec.startswith("roofline:"):
        return _roofline(spec)
    path = Path(spec)
    if path.is_file():
        return _from_file(path)
    if path.is_dir():
        raise SpecscopeError(f"cost model {spec!r}: is a directory (expected a preset, roofline:GPU:MODEL or a "
                             "JSON/TOML file)")
    raise SpecscopeError(
        f"cost model {spec!r}: not a preset ({', '.join(PRESETS)}), not roofline:GPU:MODEL, "
        "and no such file"
    )


def priced(cost: CostModel, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """``names`` split into the proposers ``cost`` prices the drafting of and those it does not
    (a replay of the latter would charge their drafting nothing), each in the order given."""
    kept, left = [], []
    for name in names:
        try:
            cost.drafting_for(name)
            kept.append(name)
        except SpecscopeError:
            left.append(name)
    return kept, left


def unpriced_note(name: str, label: str) -> str:
    """The note for a proposer left out of a simulation because cost model ``label`` prices no
    drafting of it (:func:`priced`)."""
    return f"not simulated: {name}: cost model {label!r} prices no drafting of it"


def cost_label(spec: str, model: CostModel) -> str:
    """What a result says priced it: the model's name, and the file it came from where that is
    not the name (a file may call itself ``h100-llama3.1-8b`` and hold other numbers)."""
    return model.name if spec == model.name else f"{model.name} (from {spec})"
