"""Start and stop a serving engine (vLLM, SGLang or ``specscope serve``) for one benchmark.

One method vocabulary for all engines (specscope's): ``none``, ``ngram``, ``draft`` (a separate
draft model), ``eagle``, ``eagle3``, ``mtp``, and ``suffix`` (vLLM only). Every server gets
the batch size as its concurrency limit and, as in the paper, no prefix caching, so that
repeated prompts are not served from cache.

vLLM (``vllm serve MODEL``; docs "Speculative Decoding", ``vllm/config/speculative.py``):
``--max-num-seqs B --no-enable-prefix-caching`` and ``--speculative-config`` JSON with
``num_speculative_tokens = k`` and ``method``: ``ngram`` (+ ``prompt_lookup_min``/``max``),
``eagle``/``eagle3``/``draft_model`` (+ ``model`` = the draft), ``mtp`` (the target's own
MTP layers; vLLM maps the generic name to the model's own, and the per-model names such as
``deepseek_mtp`` are deprecated; ``model`` only when a separate head is given) or ``suffix``.
Health: ``GET /health``.

SGLang (``python -m sglang.launch_server``; docs "Speculative Decoding", "Server Arguments"):
``--max-running-requests B --disable-radix-cache --enable-metrics`` and
``--speculative-algorithm`` ``EAGLE``/``EAGLE3``/``STANDALONE`` (draft model)/``NGRAM``, with
``--speculative-draft-model-path``. specscope compares chains, not trees, so it sets
``--speculative-eagle-topk 1 --speculative-num-steps k --speculative-num-draft-tokens k+1``
(SGLang counts the tree root among the draft tokens; with top-k 1 it requires
num_draft_tokens = num_steps + 1). MTP runs as ``EAGLE`` on the target's MTP layers (SGLang's
``NEXTN`` is an alias of it). NGRAM: ``--speculative-ngram-max-bfs-breadth 1`` for a chain;
its other flags depend on the installed version (:func:`sglang_ngram_flags`).

specscope ``serve`` runs ``mtp`` only with a head directory (``draft``); vLLM and SGLang read
the MTP layers from the target checkpoint.

Proposers that learn across requests (:data:`LEARNS_ACROSS_REQUESTS`: SGLang's NGRAM keeps
one trie of every request's tokens, vLLM's ``suffix`` a tree over past outputs) accept more
when the same prompts come back; such a method needs a fresh server per measured run.

The server runs in its own process group (stopped with SIGTERM, then SIGKILL after a grace
period) and, on Linux, receives SIGTERM if the launching process dies, so a killed sweep
leaves no server behind.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specscope import validate
from specscope.errors import SpecscopeError
from specscope.serve.protocol import DEFAULT_PORT

log = logging.getLogger(__name__)
ENGINES = ("vllm", "sglang", "specscope")
METHODS = ("none", "ngram", "draft", "eagle", "eagle3", "mtp", "suffix")
NEEDS_DRAFT = ("draft", "eagle", "eagle3")  # on every engine; see needs_draft
VLLM_METHODS = {
    "ngram": "ngram",
    "draft": "draft_model",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "suffix": "suffix",
}
DEFAULT_LAUNCH_TIMEOUT_S = 900.0  # loading a large model and compiling kernels takes minutes
SGLANG_ALGORITHMS = {
    "draft": "STANDALONE",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "EAGLE",
    "ngram": "NGRAM",
}
LEARNS_ACROSS_REQUESTS = {"sglang": ("ngram",), "vllm": ("suffix",), "specscope": ()}
# SGLang PR #21225 (merged 2026-03) removed --speculative-ngram-min/max-match-window-size: the
# trie matches every suffix up to --speculative-ngram-max-trie-depth. Assumed first released in
# 0.5.10 (not verified against release notes).
SGLANG_NGRAM_WINDOW_DROPPED = (0, 5, 10)


def needs_draft(engine: str, method: str) -> bool:
    """Whether ``method`` on ``engine`` needs a draft model or head directory."""
    return method in NEEDS_DRAFT or (engine == "specscope" and method == "mtp")


def learns_across_requests(engine: str | None, method: str) -> bool:
    """Whether ``method`` on ``engine`` learns from earlier requests (any engine's, when the
    engine is not known)."""
    engines = [engine] if engine in LEARNS_ACROSS_REQUESTS else list(LEARNS_ACROSS_REQUESTS)
    return any(method in LEARNS_ACROSS_REQUESTS[e] for e in engines)


@dataclass(frozen=True)
class LaunchSpec:
    """One server: ``engine`` serving ``model`` with ``method`` at proposal length ``k`` and at
    most ``batch_size`` concurrent requests. ``mtp_method``: the vLLM method for ``mtp`` (the
    generic ``mtp`` unless a per-model name is wanted). ``extra_args``: passed through to the engine unchanged."""

    engine: str
    model: str
    method: str = "none"
    k: int = 3
    batch_size: int = 8
    draft: str | None = None
    prompt_lookup_min: int = 3
    prompt_lookup_max: int = 7
    mtp_method: str = "mtp"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise SpecscopeError(
                f"launch: expected an engine among {', '.join(ENGINES)}, got {self.engine!r}"
            )
        if self.method not in METHODS:
            raise SpecscopeError(f"launch: expected a method among {', '.join(METHODS)}, got {self.method!r}")
        if needs_draft(self.engine, self.method) and not self.draft:
            raise SpecscopeError(
                f"launch {self.engine}: method {self.method!r} needs a draft model or head directory (--draft)"
            )
        if not 1 <= self.k <= validate.K_MAX_LIMIT or self.batch_size < 1:
            raise SpecscopeError(
                f"launch: expected 1 <= k <= {validate.K_MAX_LIMIT} and batch size >= 1, got {self.k} and {self.batch_size}"
            )
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise SpecscopeError("launch: expected 1 <= prompt_lookup_min <= prompt_lookup_max")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def vllm_speculative_config(spec: LaunchSpec) -> dict | None:
    """The ``--speculative-config`` object for ``spec`` (``None`` without SD)."""
    if spec.method == "none":
        return None
    config: dict[str, object] = {
        "method": spec.mtp_method if spec.method == "mtp" else VLLM_METHODS[spec.method],
        "num_speculative_tokens": spec.k,
    }
    if spec.method == "ngram":
        config["prompt_lookup_min"] = spec.prompt_lookup_min
        config["prompt_lookup_max"] = spec.prompt_lookup_max
    if spec.draft:
        config["model"] = spec.draft
    return config


def vllm_command(spec: LaunchSpec) -> list[str]:
    command = [
        "vllm",
        "serve",
        spec.model,
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "--max-num-seqs",
        str(spec.batch_size),
        "--no-enable-prefix-caching",
    ]
    config = vllm_speculative_config(spec)
    if config is not None:
        command += ["--speculative-config", json.dumps(config)]
    return command + list(spec.extra_args)


def sglang_command(spec: LaunchSpec) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        spec.model,
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "--max-running-requests",
        str(spec.batch_size),
        "--disable-radix-cache",
        "--enable-metrics",
    ]
    if spec.method == "suffix":
        raise SpecscopeError("launch sglang: SGLang has no suffix decoding; use vllm for method 'suffix'")
    if spec.method != "none":
        command += ["--speculative-algorithm", SGLANG_ALGORITHMS[spec.method]]
        if spec.draft:
            command += ["--speculative-draft-model-path", spec.draft]
        if spec.method == "ngram":
            command += sglang_ngram_flags(spec, _installed_version("sglang"))
        else:
            command += ["--speculative-num-steps", str(spec.k), "--speculative-eagle-topk", "1"]
        command += ["--speculative-num-draft-tokens", str(spec.k + 1)]
    return command + list(spec.extra_args)


def _installed_version(package: str) -> str | None:
    """The version of ``package`` installed in this Python (``None`` when absent)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, int, int] | None:
    """``"0.5.9.post1"`` -> ``(0, 5, 9)``; ``None`` when it does not start with three numbers."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def sglang_ngram_flags(spec: LaunchSpec, version: str | None) -> list[str]:
    """SGLang's NGRAM flags for ``spec`` under SGLang ``version`` (``None``: unknown).

    Before 0.5.10 (assumed; see :data:`SGLANG_NGRAM_WINDOW_DROPPED`) the match window is set
    from ``prompt_lookup_min/max``; from then on SGLang has no such window (every suffix in its
    trie matches) and ``prompt_lookup_min/max`` are not passed. An unknown version is taken as
    the newer one, with a warning naming the flags assumed.
    """
    chain = ["--speculative-ngram-max-bfs-breadth", "1"]
    release = _release(version) if version else None
    if release is not None and release < SGLANG_NGRAM_WINDOW_DROPPED:
        return [
            "--speculative-ngram-min-match-window-size",
            str(spec.prompt_lookup_min),
            "--speculative-ngram-max-match-window-size",
            str(spec.prompt_lookup_max),
            *chain,
        ]
    if release is None:
        log.warning(
            "sglang version %s: assuming SGLang >= 0.5.10 NGRAM flags (%s, no match-window flags)",
            "unknown (not installed here)" if version is None else repr(version),
            " ".join(chain),
        )
    return chain


def specscope_command(spec: LaunchSpec) -> list[str]:
    if spec.method == "suffix":
        raise SpecscopeError("launch specscope: the reference engine has no suffix decoding")
    command = [
        sys.executable,
        "-m",
        "specscope",
        "serve",
        "--model",
        spec.model,
        "--method",
        spec.method,
        "--k",
        str(spec.k),
        "--max-batch-size",
        str(spec.batch_size),
        "--host",
        spec.host,
        "--port",
        str(spec.port),
    ]
    if spec.draft:
        command += ["--draft", spec.draft]
    return command + list(spec.extra_args)


def command_for(spec: LaunchSpec) -> list[str]:
    return {"vllm": vllm_command, "sglang": sglang_command, "specscope": specscope_command}[spec.engine](spec)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (another process may still take it first)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# Looked up once in the parent: the forked child must not call into the dynamic loader.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, between fork and exec: ask Linux for SIGTERM when the parent exits."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


class LaunchError(SpecscopeError):
    """The server did not become healthy."""


class ServerProcess:
    """``with ServerProcess(command, url, log_path) as server:`` — started, healthy, stopped."""

    def __init__(
        self,
        command: list[str],
        url: str,
        log_path: Path,
        health_timeout_s: float = DEFAULT_LAUNCH_TIMEOUT_S,
        stop_grace_s: float = 30.0,
    ) -> None:
        self.command, self.url, self.log_path = command, url, Path(log_path)
        self.health_timeout_s, self.stop_grace_s = health_timeout_s, stop_grace_s
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting %s (log: %s)", " ".join(self.command), self.log_path)
        with open(self.log_path, "ab") as log_file:
            try:
                self.process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent if _PRCTL else None,  # noqa: PLW1509 (no lookups after fork)
                )
            except OSError as error:
                raise LaunchError(f"cannot start {self.command[0]!r}: {error.strerror or error}") from None

    def _log_tail(self, lines: int = 5) -> str:
        try:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return " | ".join(line.strip() for line in tail if line.strip())

    def wait_healthy(self, poll_s: float = 0.5) -> None:
        """Poll ``GET /health`` until 200; fail if the process exits or ``health_timeout_s`` passes."""
        deadline = time.monotonic() + self.health_timeout_s
        while True:
            code = self.process.poll() if self.process else None
            if code is not None:
                raise LaunchError(
                    f"server exited with status {code} before becoming healthy; log: {self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(
                    self.url + "/health", timeout=min(5.0, self.health_timeout_s)
                ) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise LaunchError(
                    f"server not healthy after {self.health_timeout_s:g}s; log: {self._log_tail()}"
                )
            time.sleep(poll_s)

    def stop(self) -> None:
        """SIGTERM the server's process group; SIGKILL it after ``stop_grace_s``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, self.stop_grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                log.warning("server %d ignored %s after %gs", process.pid, sig.name, wait_s)
