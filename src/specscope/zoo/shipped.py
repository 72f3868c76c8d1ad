"""Where the shipped bundled models live: ``specscope/data/zoo/{target,draft,eagle,mtp,eagle3}``.

``target`` and ``draft`` are Llama checkpoints (with the tokenizer and chat template);
``eagle`` is an EAGLE-1 head, ``mtp`` an MTP module and ``eagle3`` an EAGLE-3 head for ``target``
(load them with ``--method eagle`` / ``mtp`` / ``eagle3`` and ``--draft DIR``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from specscope.errors import SpecscopeError

ZOO_DRAFTERS = ("draft", "eagle", "mtp", "eagle3")  # methods of specscope.methods whose checkpoint the zoo ships
ZOO_MODELS = ("target", *ZOO_DRAFTERS)
LANGUAGE_MODELS = ("target", "draft")  # the models with a tokenizer of their own (a head reads the target's)
WEIGHTS = "model.safetensors"  # each model's weights (heads too: the published layout), in its folder


def shipped_dir() -> Path:
    """The folder holding the shipped zoo."""
    return Path(str(resources.files("specscope") / "data" / "zoo"))


def model_dir(name: str, zoo: Path | None = None) -> Path:
    """The directory of zoo model ``name`` (in ``zoo``, default: the shipped one)."""
    if name not in ZOO_MODELS:
        raise SpecscopeError(f"unknown zoo model {name!r} (known: {', '.join(ZOO_MODELS)})")
    path = Path(zoo or shipped_dir()) / name
    needs = ("config.json", WEIGHTS, *(("tokenizer.json",) if name in LANGUAGE_MODELS else ()))  # a head: no tokenizer
    missing = [file for file in needs if not (path / file).is_file()]
    if missing:
        raise SpecscopeError(f"{path / missing[0]}: zoo model incomplete; run 'specscope zoo train -o {path.parent}'")
    return path
