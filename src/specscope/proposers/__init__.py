"""Proposers behind one protocol (:mod:`specscope.engine.proposer_api`) and one registry
(:mod:`specscope.proposers.registry`).

Importing this package imports every method module in it, so each registers itself; adding a
method means adding one module that decorates its factory with ``@register("name")``.
"""

from __future__ import annotations

import importlib
import pkgutil

from specscope.engine.proposer_api import (  # noqa: F401
    Proposal,
    ProposeInput,
    Proposer,
    ProposerConfig,
    TargetPass,
)
from specscope.proposers.registry import PROPOSERS, create_proposer, register  # noqa: F401

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "registry" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
