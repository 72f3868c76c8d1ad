"""Proposers: one protocol, one registry (:mod:`specscope.proposers.base`).

Importing this package imports every method module in it, so each registers itself; adding a
method means adding one module that decorates its factory with ``@register("name")``.
"""

from __future__ import annotations

import importlib
import pkgutil

from specscope.proposers.base import (  # noqa: F401
    PROPOSERS,
    Proposal,
    ProposeInput,
    Proposer,
    ProposerConfig,
    TargetPass,
    create_proposer,
    register,
)

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
