"""Start and stop a serving engine (vLLM, SGLang or ``specscope serve``) for one benchmark.

One method vocabulary for all engines (specscope's, :mod:`specscope.methods`): ``none`` and the
table's methods, each engine's own name for a method read from the table. Every server gets
the batch size as its concurrency limit and, as in the paper, no prefix caching, so that
repeated prompts are not served from cache.

vLLM (``vllm serve MODEL``; docs "Speculative Decoding", ``vllm/config/speculative.py``):
``--max-num-seqs B --no-enable-prefix-caching`` and ``--speculative-config`` JSON with
``num_speculative_tokens = k`` and ``method`` (the table's ``vllm_method``): ``ngram``
(+ ``prompt_lookup_min``/``max``), ``eagle``/``eagle3``/``draft_model`` (+ ``model`` = the
draft), ``mtp`` (the target's own MTP layers; vLLM maps the generic name to the model's own,
and the per-model names such as ``deepseek_mtp`` are deprecated; ``model`` only when a separate
head is given) or ``suffix``. Health: ``GET /health``.

SGLang (``python -m sglang.launch_server``; docs "Speculative Decoding", "Server Arguments"):
``--max-running-requests B --disable-radix-cache --enable-metrics`` and
``--speculative-algorithm`` (the table's ``sglang_algorithm``) with
``--speculative-draft-model-path``. A chain of k is
``--speculative-eagle-topk 1 --speculative-num-steps k --speculative-num-draft-tokens k+1``
(SGLang counts the tree root among the draft tokens; with top-k 1 it requires
num_draft_tokens = num_steps + 1). NGRAM: ``--speculative-ngram-max-bfs-breadth 1`` for a chain;
its other flags depend on the installed version (:func:`sglang_ngram_flags`).

**Trees** (:class:`~specscope.trees.TreeShape`, for methods whose ``tree_engines`` name the
engine): one step drafts and verifies the tree's nodes, so ``k`` is not used.

- vLLM (its EAGLE proposer, ``eagle``/``eagle3``): ``speculative_config`` gets
  ``speculative_token_tree = str(list of path tuples)`` (vLLM parses it with
  ``ast.literal_eval`` and sorts it breadth-first) and ``num_speculative_tokens`` = nodes (vLLM's
  tests require the two to agree), and the server gets ``--attention-backend TREE_ATTN``:
  without the tree backend vLLM drafts a chain of ``nodes`` tokens instead. vLLM drafts the
  top-b children of every node of a level (one b per level), so only full trees of branching
  per depth (``2x2x1``) are accepted. Assumed: a vLLM with tree drafting (added in PR #20401,
  2025-07; vllm-ascend reports its removal upstream in PR #42121) and the
  ``--attention-backend`` flag (older releases took ``VLLM_ATTENTION_BACKEND``; there the
  unknown flag stops the server, so no cell runs a chain under a tree's label).
- SGLang (EAGLE-style workers): ``--speculative-eagle-topk K`` (children ranked per expanded
  node, and nodes kept to expand per step), ``--speculative-num-steps`` = depth,
  ``--speculative-num-draft-tokens`` = nodes + 1 (the root counted). SGLang's tree is chosen per
  step by draft probability within that budget, so a shape maps to it when K = the root's
  children bounds every node's children and every depth's expanded nodes; the verified tree
  has the shape's node count and depth, its branches chosen by the drafter.
- ``specscope serve``: ``--tree SHAPE`` instead of ``--k``.

specscope ``serve`` runs ``mtp`` only with a head directory (``draft``); vLLM and SGLang read
the MTP layers from the target checkpoint.

Proposers that learn across requests (the table's ``learns_across_requests``: SGLang's NGRAM
keeps one trie of every request's tokens, vLLM's ``suffix`` a tree over past outputs) accept
more when the same prompts come back; such a method needs a fresh server per measured run.

The server runs in its own process group (stopped with SIGTERM, then SIGKILL after a grace
period) and, on Linux, receives SIGTERM if the launching process dies, so a killed sweep
leaves no server behind.
"""

from __future__ import annotations

import ctypes
import functools
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
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from specscope import validate
from specscope.errors import SpecscopeError
from specscope.methods import ENGINES, NAMES, NO_SD, method, names
from specscope.serve.protocol import DEFAULT_PORT
from specscope.trees import TreeShape

log = logging.getLogger(__name__)
DEFAULT_LAUNCH_TIMEOUT_S = 900.0  # loading a large model and compiling kernels takes minutes
VLLM_TREE_BACKEND = ("--attention-backend", "TREE_ATTN")
VLLM_GENERIC_MTP = "mtp"  # vLLM's generic MTP method; LaunchSpec.mtp_method may name a per-model one
SGLANG_NGRAM = "NGRAM"  # SGLang's algorithm with its own (version-dependent) flags
# SGLang PR #21225 (merged 2026-03) removed --speculative-ngram-min/max-match-window-size: the
# trie matches every suffix up to --speculative-ngram-max-trie-depth. Assumed first released in
# 0.5.10 (not verified against release notes).
SGLANG_NGRAM_WINDOW_DROPPED = (0, 5, 10)


def needs_draft(engine: str, name: str) -> bool:
    """Whether method ``name`` on ``engine`` needs a draft model or head directory."""
    return name != NO_SD and method(name).needs_draft(engine)


def learns_across_requests(engine: str | None, name: str) -> bool:
    """Whether method ``name`` on ``engine`` learns from earlier requests (any engine's rule,
    when the engine is not known)."""
    return name in NAMES and method(name).learns_on(engine)


@dataclass(frozen=True)
class LaunchSpec:
    """One server: ``engine`` serving ``model`` with ``method`` at proposal length ``k`` (or
    drafting ``tree``, when given: then ``k`` is not used) and at most ``batch_size`` concurrent
    requests. ``mtp_method``: the vLLM method for ``mtp`` (the generic ``mtp`` unless a
    per-model name is wanted). ``extra_args``: passed through to the engine unchanged."""

    engine: str
    model: str
    method: str = NO_SD
    k: int = 3
    batch_size: int = 8
    draft: str | None = None
    prompt_lookup_min: int = 3
    prompt_lookup_max: int = 7
    mtp_method: str = VLLM_GENERIC_MTP
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    extra_args: tuple[str, ...] = ()
    tree: TreeShape | None = None

    @property
    def positions(self) -> int:
        """The draft positions the server's per-position acceptance counters show (what a launched
        server is checked against): k; for a tree, vLLM's ``num_speculative_tokens`` (its node
        count) and specscope serve's accepted path (its depth)."""
        if self.tree is None:
            return self.k
        return self.tree.depth if self.engine == "specscope" else self.tree.nodes

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise SpecscopeError(
                f"launch: expected an engine among {', '.join(ENGINES)}, got {self.engine!r}"
            )
        if self.method not in names(self.engine):
            raise SpecscopeError(
                f"launch {self.engine}: expected a method among {', '.join(names(self.engine))}, got {self.method!r}"
            )
        if self.tree is not None:
            check_tree(self.engine, self.method, self.tree)
        if needs_draft(self.engine, self.method) and not self.draft:
            raise SpecscopeError(
                f"launch {self.engine}: method {self.method!r} needs a draft model or head directory (--draft)"
            )
        if not (self.tree is not None or 1 <= self.k <= validate.K_MAX_LIMIT) or self.batch_size < 1:
            raise SpecscopeError(
                f"launch: expected 1 <= k <= {validate.K_MAX_LIMIT} and batch size >= 1, got {self.k} and {self.batch_size}"
            )
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise SpecscopeError("launch: expected 1 <= prompt_lookup_min <= prompt_lookup_max")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _full_tree(tree: TreeShape) -> bool:
    """Whether ``tree`` is the full tree of its branching per depth (``2x2x1``)."""
    return tree.branching is not None and TreeShape.from_branching(tree.branching) == tree


def vllm_speculative_config(spec: LaunchSpec) -> dict | None:
    """The ``--speculative-config`` object for ``spec`` (``None`` without SD)."""
    if spec.method == NO_SD:
        return None
    chosen = method(spec.method)
    config: dict[str, object] = {
        "method": spec.mtp_method if chosen.vllm_method == VLLM_GENERIC_MTP else chosen.vllm_method,
        "num_speculative_tokens": spec.k if spec.tree is None else spec.tree.nodes,
    }
    if spec.tree is not None:
        config["speculative_token_tree"] = str(list(spec.tree.paths))
    if chosen.prompt_lookup:
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
    if spec.tree is not None:
        command += list(VLLM_TREE_BACKEND)
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
    if spec.method == NO_SD:
        return command + list(spec.extra_args)
    algorithm = method(spec.method).sglang_algorithm
    command += ["--speculative-algorithm", algorithm]
    if spec.draft:
        command += ["--speculative-draft-model-path", spec.draft]
    if spec.tree is not None:
        topk, steps, draft_tokens = sglang_tree(spec.tree)
        command += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk)]
        command += ["--speculative-num-draft-tokens", str(draft_tokens)]
    elif algorithm == SGLANG_NGRAM:
        command += sglang_ngram_flags(spec, _installed_version("sglang"))
        command += ["--speculative-num-draft-tokens", str(spec.k + 1)]
    else:
        command += ["--speculative-num-steps", str(spec.k), "--speculative-eagle-topk", "1"]
        command += ["--speculative-num-draft-tokens", str(spec.k + 1)]
    return command + list(spec.extra_args)


def sglang_tree(tree: TreeShape) -> tuple[int, int, int]:
    """SGLang's ``(--speculative-eagle-topk, --speculative-num-steps,
    --speculative-num-draft-tokens)`` for ``tree``: K = the root's children, depth, nodes + 1.

    SGLang expands K kept nodes per step, K children each, so a tree in which a node has more
    than K children, or a depth has more than K nodes with children, is refused.
    """
    topk = tree.widths[0]
    children = Counter(path[:-1] for path in tree.paths)  # parent path -> its children
    expanded = [sum(1 for parent in children if len(parent) == depth) for depth in range(tree.depth)]
    if max(children.values()) > topk or max(expanded) > topk:
        raise SpecscopeError(
            f"launch sglang: tree {tree.name}: SGLang expands at most {topk} nodes per depth (the root's "
            f"children), {topk} children each; this tree expands {'/'.join(map(str, expanded))} per depth"
        )
    return topk, tree.depth, tree.nodes + 1


def check_tree(engine: str, name: str, tree: TreeShape) -> None:
    """Refuse ``tree`` for method ``name`` on ``engine`` in one line when the engine cannot draft it."""
    if name == NO_SD or not method(name).drafts_trees_on(engine):
        raise SpecscopeError(f"launch {engine}: method {name!r} drafts no token trees there (tree {tree.name})")
    if engine == "vllm" and not _full_tree(tree):
        raise SpecscopeError(
            f"launch vllm: tree {tree.name}: vLLM drafts only full trees of branching per depth (2x2x1)"
        )
    if engine == "sglang":
        sglang_tree(tree)


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
    """``specscope serve`` for ``spec``; a tree goes as ``--tree SHAPE`` (branching per depth,
    or the list of paths for any other tree) in place of ``--k``; no SD takes neither."""
    if spec.method == NO_SD:
        drafts = []
    elif spec.tree is None:
        drafts = ["--k", str(spec.k)]
    else:
        drafts = ["--tree", spec.tree.name if _full_tree(spec.tree) else str(list(spec.tree.paths))]
    command = [
        sys.executable,
        "-m",
        "specscope",
        "serve",
        "--model",
        spec.model,
        "--method",
        spec.method,
        *drafts,
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


FIXED_K_ONLY = ("--confidence",)  # specscope serve's early stop: its steps draft fewer than the k a row says
CONTROLLED_FLAGS = {  # what each launcher sets from the cell: an engine's own args may not set them too
    "specscope": ("--model", "--method", "--k", "--tree", "--draft", "--policy", "--max-batch-size", "--host", "--port",
                  *FIXED_K_ONLY),
    "vllm": ("--host", "--port", "--max-num-seqs", "--speculative-config"),
    "sglang": ("--model-path", "--host", "--port", "--max-running-requests", "--speculative-algorithm",
               "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
               "--speculative-num-draft-tokens"),
}


def check_engine_args(engine: str | None, args: Sequence[str], by: str) -> None:
    """Refuse ``args`` (passed through to a launched ``engine``) that set a flag of
    :data:`CONTROLLED_FLAGS`: the server would run other than what its rows say. ``by``: who
    sets those flags (``the sweep``, ``the bench``), named in the one-line error."""
    controlled = next((arg for arg in args if _sets(arg, CONTROLLED_FLAGS.get(engine, ()))), None)
    if controlled is None:
        return
    if _sets(controlled, FIXED_K_ONLY):
        raise SpecscopeError(f"{controlled}: {by} measures fixed-k chains (its steps would draft fewer than the k "
                             "its rows say); leave it out")
    raise SpecscopeError(f"{controlled} is set by {by} from each run (method, k, batch size, port); leave it out")


def _sets(arg: str, flags: Sequence[str]) -> bool:
    """Whether the command-line word ``arg`` sets one of ``flags`` as a server's parser reads it:
    its name before any ``=``, underscores read as dashes (vLLM's and SGLang's parsers take
    ``--max_num_seqs``), and a long option's unambiguous start as the option (argparse's
    abbreviations: ``--max-batch`` is ``--max-batch-size``)."""
    name = arg.split("=", 1)[0].replace("_", "-")
    return name.startswith("--") and len(name) > 2 and any(flag.startswith(name) for flag in flags)


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


def _die_with_parent(parent: int) -> None:
    """In the child, between fork and exec: ask Linux for SIGTERM when the parent (``parent``, its
    pid) exits — and exit at once where it already has, between the fork and this request, when no
    signal will ever come (a Ray actor killed as it launched a server left that server running)."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


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
        self._log_start = 0  # where this launch's lines begin in its log (:meth:`start`)

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
        address = urllib.parse.urlsplit(self.url)
        try:  # something already answers there: its health and numbers would pass for the launched server's
            with socket.create_connection((address.hostname, address.port or 80), timeout=1.0):
                raise LaunchError(f"{address.hostname}:{address.port} is taken: another process listens there, and it "
                                  "would answer for the launched server (stop it, or choose another port)")
        except OSError:
            pass
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = open(self.log_path, "ab")
        except OSError as error:  # a file where its folder goes, a folder it may not write: the cell fails, said
            raise LaunchError(f"{self.log_path}: cannot write the server's log ({error.strerror or error})") from None
        log.info("starting %s (log: %s)", " ".join(self.command), self.log_path)
        with log_file:
            self._log_start = log_file.tell()  # the log keeps earlier launches' lines: this one's start here
            try:
                self.process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=functools.partial(_die_with_parent, os.getpid()) if _PRCTL else None,  # noqa: PLW1509
                )
            except OSError as error:
                raise LaunchError(f"cannot start {self.command[0]!r}: {error.strerror or error}") from None

    def _log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines this launch wrote to its log (not an earlier launch's)."""
        try:
            with open(self.log_path, "rb") as log_file:
                log_file.seek(self._log_start)
                tail = log_file.read().decode("utf-8", errors="replace").splitlines()[-lines:]
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
