"""Connecting to Ray: ``--ray ADDRESS`` is ``local`` (a Ray instance for this run on this
machine), ``auto`` (the cluster this machine belongs to) or a cluster address
(``HOST:PORT`` of the head's GCS, or ``ray://HOST:10001``)."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import socket
import sys
import threading
from typing import Iterator

from specscope.errors import SpecscopeError

log = logging.getLogger(__name__)
INSTALL_HINT = "--ray: Ray is not installed; install it with: pip install 'specscope[ray]'"
MAX_RETRIES = 3  # restarts of a lost worker (and retries of its unfinished call), then its cells fail
CONNECT_TIMEOUT_S = 5.0  # how long a HOST:PORT may take to accept a connection


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
    text = text.strip()  # ' local' is local, not an address Ray refuses only after the models load
    if not text:
        raise SpecscopeError("--ray: expected local, auto or a cluster address (HOST:PORT or ray://HOST:PORT)")
    port = _host_port(text)
    if port is None and text not in ("local", "auto"):  # Ray took 'foo' and failed only after setup
        raise SpecscopeError(f"--ray: {text!r}: expected local, auto or a cluster address (HOST:PORT or "
                             "ray://HOST:PORT)")
    if port is not None and not 1 <= port[1] <= 65535:
        raise SpecscopeError(f"--ray: {text!r}: expected a port in 1 … 65535, got {port[1]}")
    return text


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT`` (an IPv6 host in brackets, ``[::1]:6379``);
    None for ``local``, ``auto`` and anything else."""
    match = re.fullmatch(r"(?:ray://)?(?:\[([^\[\]/]+)\]|([^:\[\]/]+)):(-?\d+)", address.strip())
    return (match.group(1) or match.group(2), int(match.group(3))) if match else None


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)  # + an empty SETTINGS frame


def _reachable(address: str) -> None:
    """Refuse at once, in one line, a ``HOST:PORT`` where nothing listens, or where what listens
    is no gRPC server — Ray's GCS and client server are: to the HTTP/2 connection preface one
    answers first with its own SETTINGS frame (RFC 9113 §3.4); the dashboard's port (8265, which
    `ray start` prints) answers HTTP/1 (Ray itself retries for minutes, printing pages of its own
    logs). With TLS (``RAY_USE_TLS``) only the connection is checked."""
    import os

    host_port = _host_port(address)
    if host_port is None:
        return
    where = f"{host_port[0]}:{host_port[1]}"
    try:
        with socket.create_connection(host_port, timeout=CONNECT_TIMEOUT_S) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            connection.sendall(HTTP2_PREFACE)
            frame = connection.recv(9)
    except TimeoutError:
        frame = b""
    except OSError as error:
        raise SpecscopeError(f"--ray: cannot connect to Ray at {address!r}: nothing answers at {where} "
                             f"({error.strerror or error}); is the head running?") from None
    if len(frame) < 4 or frame[3] != 0x04:  # no SETTINGS frame first: no gRPC server
        seen = "an HTTP/1 server" if frame.startswith(b"HTTP/") else "something that is not a Ray cluster"
        raise SpecscopeError(f"--ray: {address!r}: {seen} listens at {where}, not Ray's GCS (the address `ray start` "
                             "prints after 'ray start --address=', port 6379 by default; not the dashboard's)")


def needs(option: dict) -> dict[str, float]:
    """What an actor's Ray ``option`` (``num_cpus``, ``num_gpus``, ``resources``) asks of one node,
    by resource name (those it asks none of left out)."""
    wanted = {"CPU": option.get("num_cpus", 1), "GPU": option.get("num_gpus", 0), **option.get("resources", {})}
    return {name: amount for name, amount in wanted.items() if amount}


def feasible(option: dict, nodes: list[dict]) -> bool:
    """Whether one of ``nodes`` (``ray.nodes()``: alive ones with their ``Resources``) holds every
    resource ``option`` asks for at once."""
    return any(all(node["Resources"].get(name, 0) >= amount for name, amount in needs(option).items())
               for node in nodes if node.get("Alive"))


def largest_node(nodes: list[dict]) -> str:
    """The resources of the cluster's largest alive node, for a message."""
    alive = [node["Resources"] for node in nodes if node.get("Alive")]
    if not alive:
        return "no node alive"
    biggest = max(alive, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)))
    return ", ".join(f"{name} {amount:g}" for name, amount in sorted(biggest.items())
                     if not name.startswith(("node:", "memory", "object_store_memory")))


@contextlib.contextmanager
def ray_session(address: str) -> Iterator[object]:
    """Connect to Ray at ``address`` for the block (a session already open in this process, as a
    test or a benchmark opens one, is used as it is and left open)."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    _reachable(address)
    with contextlib.redirect_stdout(sys.stderr):  # Ray prints its workers' errors: not into our output
        ours = signal.getsignal(signal.SIGTERM)  # ray.init puts its own in (a stack dump, exit 15)
        try:
            context = ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as error:
            raise SpecscopeError(f"--ray: cannot connect to Ray at {address!r}: {str(error).splitlines()[0]}") from None
        finally:
            if threading.current_thread() is threading.main_thread():  # where handlers live
                signal.signal(signal.SIGTERM, ours)  # a stop is an interrupt: finished work kept, exit 143
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


ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of Ray's messages
RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(\w*(?:Error|Exception))(?:: (.*))?$")  # "module.TypeError: message"


def worker_failure(error: BaseException) -> str:
    """One line for a Ray error: what the worker raised — a :class:`SpecscopeError` as it said it,
    another exception as ``Type: message`` (Ray wraps them in task errors, and an actor that failed
    to start keeps only their text, its traceback's last line) — else ``worker lost:`` and Ray's
    first line (a process or node that died)."""
    cause = error
    while isinstance(getattr(cause, "cause", None), BaseException):
        cause = cause.cause
    if isinstance(cause, SpecscopeError):
        return str(cause)
    if cause is not error:
        return f"{type(cause).__name__}: {next(iter(str(cause).splitlines()), '')}"
    lines = [ANSI.sub("", line).strip() for line in str(error).splitlines() if line.strip()]
    for line in reversed(lines):
        if match := RAISED.match(line):
            return match[2] if match[1] == "SpecscopeError" and match[2] else line
    return "worker lost: " + (lines[0] if lines else type(error).__name__)
