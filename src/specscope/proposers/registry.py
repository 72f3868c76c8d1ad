"""The registry of proposers: a name -> a factory that builds it for a target.

Methods register a factory under a name with :func:`register`; :func:`create_proposer` builds
one from a :class:`~specscope.engine.proposer_api.ProposerConfig`. No dispatch on method names
happens anywhere else. The contract every proposer implements is
:mod:`specscope.engine.proposer_api`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from specscope.engine.proposer_api import Proposer, ProposerConfig
from specscope.errors import SpecscopeError

if TYPE_CHECKING:
    from specscope.engine.model import Transformer


ProposerFactory = Callable[[ProposerConfig, "Transformer"], Proposer]
PROPOSERS: dict[str, ProposerFactory] = {}


def register(name: str) -> Callable[[ProposerFactory], ProposerFactory]:
    """Decorator: make ``factory(config, target) -> Proposer`` available as ``name``."""

    def decorate(factory: ProposerFactory) -> ProposerFactory:
        if name in PROPOSERS:
            raise ValueError(f"proposer {name!r} registered twice")
        PROPOSERS[name] = factory
        return factory

    return decorate


def create_proposer(config: ProposerConfig, target: "Transformer") -> Proposer:
    """Build the proposer ``config.method`` for ``target``."""
    import specscope.proposers  # noqa: F401  (imports every method module, filling PROPOSERS)

    factory = PROPOSERS.get(config.method)
    if factory is None:
        raise SpecscopeError(
            f"--method: unknown proposer {config.method!r} (known: {', '.join(sorted(PROPOSERS))})"
        )
    if config.k < 1:
        raise SpecscopeError(f"--k: expected a positive proposal length, got {config.k}")
    return factory(config, target)
