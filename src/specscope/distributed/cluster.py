"""Connecting to Ray: ``--ray ADDRESS`` is ``local`` (a Ray instance for this run on this
machine), ``auto`` (the cluster this machine belongs to) or a cluster address
(``HOST:PORT`` of the head's GCS, or ``ray://HOST:10001``)."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from specscope.errors import SpecscopeError

log = logging.getLogger(__name__)
INSTALL_HINT = "--ray: Ray is not installed; install it with: pip install 'specscope[ray]'"
MAX_RETRIES = 3  # restarts of a lost worker (and retries of its unfinished call), then its cells fail


def require_ray():
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SpecscopeError(INSTALL_HINT) from None
    return ray


def ray_address(text: str) -> str:
    """``--ray ADDRESS`` (an argparse type): refused at once, in one line, without Ray installed."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise SpecscopeError(INSTALL_HINT)
    if not text.strip():
        raise SpecscopeError("--ray: expected local, auto or a cluster address (HOST:PORT or ray://HOST:PORT)")
    return text


@contextlib.contextmanager
def ray_session(address: str) -> Iterator[object]:
    """Connect to Ray at ``address`` for the block (a session already open in this process, as a
    test or a benchmark opens one, is used as it is and left open)."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    try:
        context = ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as error:
        raise SpecscopeError(f"--ray: cannot connect to Ray at {address!r}: {str(error).splitlines()[0]}") from None
    if getattr(context, "dashboard_url", None):
        log.warning("Ray dashboard: http://%s", context.dashboard_url)
    try:
        yield ray
    finally:
        ray.shutdown()


def placement() -> dict[str, object]:
    """The Ray node and process this code runs in."""
    import os

    import ray

    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid()}
