"""What a running server shows it serves, checked before a row is labelled with a method and k.

A row says "eagle, k=5" only if the server does not contradict it. Read before any measurement:

- the model: the ids in ``GET /v1/models`` (a requested model matches an id, or, for a
  directory, its last component: ``specscope serve``'s default id);
- speculative decoding on or off, and k: vLLM (and ``specscope serve``) export one series of
  ``vllm:spec_decode_num_accepted_tokens_per_pos`` per draft position ``0..k-1`` from startup
  when they speculate, and no ``vllm:spec_decode_*`` series when they do not. So on a server
  with ``vllm:`` metrics, SD is on exactly when those series exist, and k is the number of
  ``position`` series.
- the method is not visible in vLLM's metrics (n-gram and EAGLE look alike), nor is anything
  of SD in SGLang's gauges before a request has run.

After a run on a server given by URL, its counters are read once more: a model drafter's chain of
k proposes k drafts at every step that drafts, so one whose steps proposed on average clearly
fewer (below :data:`CHAIN_SHARE` of k: ``specscope serve --confidence`` stops its drafter early)
is no chain of k (:func:`check_chain`). A lookup is not checked: it proposes fewer where its
match offers fewer.

A contradiction (another model, SD on for ``none``, off for a method, another k, drafts per
step short of k) is refused with a one-line :class:`ServerCheckError`. What could not be seen
is said in the row's ``verified`` text, and a missing SD or k check is also logged as a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from specscope.backends.openai import metrics
from specscope.backends.openai.client import StreamError, get_json
from specscope.errors import SpecscopeError
from specscope.methods import NO_SD, method as method_of

log = logging.getLogger(__name__)
CHAIN_SHARE = 0.9  # of k drafts per drafting step, at least: vLLM trims a step's drafts at max_model_len and at
# its token budget (a case worked from its scheduler, not measured: 19 steps of 7 and two of 3 and 2 give 94 %)


class ServerCheckError(SpecscopeError):
    """The server cannot be read, or contradicts the method, k or model a row would carry."""


@dataclass(frozen=True)
class ServerView:
    """What ``url`` shows. ``engine``: whose metric names it exports (``vllm``, ``sglang``,
    ``None``); ``spec_decode``: SD on (``None``: cannot tell); ``k``: its number of per-position
    series (``None``: not shown); ``metrics_error``: why ``/metrics`` could not be read."""

    url: str
    models: tuple[str, ...]
    engine: str | None
    spec_decode: bool | None
    k: int | None
    metrics_error: str | None = None


def inspect_server(url: str, timeout_s: float = 10.0) -> ServerView:
    """Read ``/v1/models`` and ``/metrics`` of ``url``; an unreachable server is an error."""
    try:
        payload = get_json(url, "/v1/models", timeout_s)
        models = tuple(str(entry["id"]) for entry in payload["data"])
    except StreamError as error:
        raise ServerCheckError(f"{url}: {error}") from None
    except (KeyError, TypeError):
        raise ServerCheckError(f"{url}: GET /v1/models: expected {{'data': [{{'id': ...}}]}}") from None
    try:
        snapshot = metrics.scrape(url, timeout_s)
    except SpecscopeError as error:
        return ServerView(url, models, None, None, None, str(error))
    if snapshot.engine != "vllm":
        return ServerView(url, models, snapshot.engine, None, None)
    positions = sorted(snapshot.accepted_per_pos)
    k = len(positions) if positions and positions == list(range(len(positions))) else None
    return ServerView(url, models, "vllm", snapshot.has_spec_decode, k)


def verify_label(view: ServerView, method: str, k: int, model: str | None = None) -> str:
    """Refuse ``view`` if it contradicts ``method`` at ``k`` (and ``model`` when given); return
    the row's ``verified`` text: what was checked and what could not be."""
    seen, unseen = [], []
    if model is not None:
        if model not in view.models and Path(model).name not in view.models:
            raise ServerCheckError(
                f"model {model!r}: the server at {view.url} serves {', '.join(view.models) or 'nothing'} "
                "(GET /v1/models)"
            )
        seen.append(f"model {model}")
    series = f"'position' series of {metrics.VLLM_ACCEPTED_PER_POS}"
    if view.spec_decode is None:
        reason = view.metrics_error or (
            "SGLang gauges do not show it" if view.engine == "sglang" else "no vLLM or SGLang metrics"
        )
        unseen.append(f"{'SD off' if method == NO_SD else f'SD on, k={k}'} ({reason})")
    elif method == NO_SD:
        if view.spec_decode:
            raise ServerCheckError(
                f"--method none: the server at {view.url} speculates (vllm:spec_decode_* series, k={view.k})"
            )
        seen.append("SD off")
    elif not view.spec_decode:
        raise ServerCheckError(
            f"--method {method}: the server at {view.url} does not speculate (no vllm:spec_decode_* series)"
        )
    else:
        seen.append("SD on")
        if view.k is None:
            unseen.append(f"k={k} (no {series})")
        elif view.k != k:
            raise ServerCheckError(f"--k {k}: the server at {view.url} shows k={view.k} ({view.k} {series})")
        else:
            seen.append(f"k={k}")
    if method != NO_SD:
        unseen.append(f"method {method} (not shown by the server)")
    if any(item.startswith(("SD", "k=")) for item in unseen):
        log.warning("%s: could not verify %s", view.url, "; ".join(unseen))
    parts = [f"verified: {', '.join(seen)}"] if seen else []
    if unseen:
        parts.append(f"not verified: {', '.join(unseen)}")
    return "; ".join(parts)


def check_server(
    url: str, method: str, k: int, model: str | None = None, timeout_s: float = 10.0
) -> tuple[ServerView, str]:
    """:func:`inspect_server` then :func:`verify_label`: the view and the ``verified`` text."""
    view = inspect_server(url, timeout_s)
    return view, verify_label(view, method, k, model)


def check_chain(url: str, method: str, k: int, row: dict[str, object]) -> None:
    """Refuse a run of ``method`` at ``k`` on the server at ``url`` whose counters (``row``'s
    ``num_drafts``, ``num_draft_tokens``) show fewer than :data:`CHAIN_SHARE` of k drafts per
    drafting step: a model drafter that stops early is no chain of k. Lookups, and runs without
    the counters, are not checked."""
    drafts, tokens = row.get("num_drafts"), row.get("num_draft_tokens")
    if method == NO_SD or method_of(method).kind == "lookup" or not drafts or tokens is None:
        return
    if tokens < CHAIN_SHARE * k * drafts:
        raise ServerCheckError(
            f"--k {k}: the server at {url} proposed {tokens / drafts:.2f} drafts per drafting step ({tokens} draft "
            f"tokens in {drafts} drafts), not a chain of {k}: its drafter stops early (as specscope serve "
            "--confidence does), or the server trims drafts where a request nears its context (vLLM does at "
            "max_model_len: give it room for the prompt, max_tokens and k)"
        )
