"""A closed-loop load generator for an OpenAI-compatible ``/v1/completions`` endpoint.

Closed loop at concurrency B (as ``vllm bench serve --max-concurrency B``): B workers each send
one streamed request, wait for its last token, and send the next, until the request list is
used up; so at most B requests are in the server at any time. Greedy by default
(``temperature=0``); ``max_tokens`` and ``ignore_eos`` (a vLLM/SGLang extension) are sent as
given. The request list is fixed by the caller, so no-SD and SD runs see the same requests.

Figures (names as ``vllm bench serve`` reports them):

- ``throughput``: output tokens / run duration (first send to last finish), tokens/s;
- TTFT: send → first step chunk; TPOT: (latency − TTFT) / (output tokens − 1) per request; ITL:
  gaps between step chunks (with SD one chunk may carry several tokens).

A **step chunk** is a streamed choice that carries one engine step's output: its ``text``, even
empty, or its ``token_ids``, not empty. vLLM streams a choice of empty text at a step whose token
is EOS (its text left out as a special token, its token counted in ``completion_tokens``) or
whose UTF-8 character is still incomplete (it skips empty ones only before the first token); a
chunk of ``usage`` alone (no choices), a choice of a ``finish_reason`` alone, or one whose
``token_ids`` is empty, carries none.

Output tokens come from the stream's final ``usage`` chunk (``stream_options.include_usage``);
a server that sends none is an error, since counting text chunks would undercount SD output.
Every network wait is bounded: connect and each read by ``idle_timeout_s``, a whole request by
``request_timeout_s``.

For the cost-model calibration (:mod:`specscope.costmodel.calibrate`) each request also keeps
its chunk timeline: the arrival of every step chunk (seconds after the request was sent) and
its token count (``len(token_ids)``, as ``specscope serve`` and vLLM's
``return_token_ids`` send; ``None`` when the chunk carries text only), and the prompt length
from the usage chunk. :meth:`LoadResult.timeline` writes them compactly.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from specscope.backends import BenchConfig
from specscope.backends.openai.prompts import Prompt
from specscope.errors import SpecscopeError

PERCENTILES = (50, 90, 99)
MAX_LINE_BYTES = 16 << 20


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to send requests. ``model``: the served model name (``None``: ask the
    server's ``/v1/models``)."""

    url: str
    model: str | None = None
    max_tokens: int = BenchConfig.max_tokens
    ignore_eos: bool = BenchConfig.ignore_eos
    temperature: float = BenchConfig.temperature
    idle_timeout_s: float = 60.0
    request_timeout_s: float = 600.0


@dataclass
class RequestResult:
    """One request. ``error`` is ``None`` on success, else the reason it failed."""

    id: str
    output_tokens: int = 0
    ttft_s: float | None = None
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    finish_reason: str | None = None
    sent_s: float = 0.0  # time.perf_counter() when the request was sent
    prompt_tokens: int | None = None  # from the usage chunk
    chunk_s: list[float] = field(default_factory=list)  # step chunk arrivals (module docstring), after sent_s
    chunk_tokens: list[int | None] = field(default_factory=list)  # tokens per chunk; None: unknown


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    results: list[RequestResult]
    started_s: float = 0.0  # time.perf_counter() at the first send
    segment_of: tuple[int, ...] | None = None  # per result, its segment (a run made of segments, :func:`joined`)

    def timeline(self) -> list[dict[str, object]]:
        """Per request, compactly (milliseconds rounded to 0.01): ``id``, ``sent_ms`` after the run's
        start, ``prompt_tokens``, ``output_tokens``, ``chunk_ms`` (chunk arrivals after the
        request was sent) and ``chunk_tokens`` (``None`` where the server sent no ``token_ids``);
        in a run made of segments also ``segment`` (its index, from 0)."""
        rows = [
            {
                "id": r.id,
                "sent_ms": round(1e3 * (r.sent_s - self.started_s), 2),
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
                "chunk_ms": [round(1e3 * t, 2) for t in r.chunk_s],
                "chunk_tokens": None if None in r.chunk_tokens else r.chunk_tokens,
            }
            for r in self.results
        ]
        if self.segment_of is not None:
            for row, segment in zip(rows, self.segment_of):
                row["segment"] = segment
        return rows

    @property
    def failed(self) -> list[RequestResult]:
        return [r for r in self.results if r.error is not None]

    def peak_streaming(self) -> tuple[int, int, float]:
        """The most requests streaming at once — each from its first step chunk until its
        last: what the server held running, however many the client had sent — how many requests
        that counts (those of two chunks or more: a one-chunk answer spans no time), and their
        median span in seconds (spans of a few milliseconds overlap or not by thread scheduling)."""
        spans = [(r.sent_s + r.chunk_s[0], r.sent_s + r.chunk_s[-1]) for r in self.results
                 if r.error is None and len(r.chunk_s) > 1]
        events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])  # an end first on ties
        running = peak = 0
        for _, change in events:
            running += change
            peak = max(peak, running)
        median = sorted(end - start for start, end in spans)[len(spans) // 2] if spans else 0.0
        return peak, len(spans), median

    def summary(self) -> dict[str, object]:
        """Throughput and latency percentiles over the successful requests."""
        import numpy as np

        ok = [r for r in self.results if r.error is None]
        tokens = sum(r.output_tokens for r in ok)
        streamed = [r for r in ok if r.chunk_s]
        steps = sum(len(r.chunk_s) - 1 for r in streamed)  # chunks after the first: the prefill's token
        row: dict[str, object] = {
            "batch_size": self.concurrency,
            "num_requests": len(self.results),
            "num_failed": len(self.results) - len(ok),
            "output_tokens": tokens,
            "duration_s": self.duration_s,
            "throughput": tokens / self.duration_s if self.duration_s > 0 else None,
            "request_throughput": len(ok) / self.duration_s if self.duration_s > 0 else None,
            # τ = emitted tokens / steps, each chunk after the first one step (as vLLM and specscope
            # serve stream); a server streaming several steps per chunk reads higher
            "mean_acceptance_length": sum(r.output_tokens - 1 for r in streamed) / steps if steps else None,
        }
        tpot = [
            (r.latency_s - r.ttft_s) / (r.output_tokens - 1)
            for r in ok
            if r.ttft_s is not None and r.output_tokens > 1
        ]
        series = {
            "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
            "tpot": tpot,
            "itl": [gap for r in ok for gap in r.itl_s],
        }
        for name, values in series.items():
            for p in PERCENTILES:
                row[f"{name}_p{p}_s"] = float(np.percentile(values, p)) if values else None
        return row


class StreamError(Exception):
    """A request failed; the message is the reason recorded for it."""


def split_url(url: str, name: str) -> urllib.parse.SplitResult:
    """``url``'s parts, refused in one line naming ``name`` (an option, a file's field) unless it
    is ``http(s)://HOST[:PORT]``: a malformed bracketed host, a port not a number or past 65535."""
    try:
        parts = urllib.parse.urlsplit(url)  # ValueError: a bracketed host that is no IPv6 address
        parts.port  # ValueError: not a number, or past 65535
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(parts.scheme)
    except ValueError:
        raise SpecscopeError(f"{name}: expected http://HOST:PORT (a port 0..65535), got {url!r}") from None
    return parts


def _connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    parts = split_url(url, "--url")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout_s), parts.path.rstrip("/")


def _error_message(status: int, body: bytes) -> str:
    """``HTTP 400: message`` from an OpenAI-style (``{"error": {"message"}}``) or vLLM-style
    (``{"message"}``) error body, else the body's start on one line (an HTML page's, say)."""
    text = body.decode("utf-8", errors="replace")
    try:
        payload = json.loads(text)
        message = (
            payload["error"]["message"] if isinstance(payload.get("error"), dict) else payload["message"]
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        message = " ".join(text.split())[:200]
    return f"HTTP {status}: {message}"


def get_json(url: str, path: str, timeout_s: float = 10.0) -> object:
    """GET ``url + path`` and decode JSON; raises :class:`StreamError` with the reason."""
    conn, prefix = _connection(url, timeout_s)
    try:
        conn.request("GET", prefix + path)
        response = conn.getresponse()
        body = response.read(MAX_LINE_BYTES)
        if response.status != 200:
            raise StreamError(_error_message(response.status, body))
        return json.loads(body)
    except (OSError, http.client.HTTPException) as error:
        raise StreamError(_network_reason(error)) from None
    except ValueError:
        raise StreamError(f"GET {path}: response is not JSON") from None
    finally:
        conn.close()


def served_model(url: str, timeout_s: float = 10.0) -> str:
    """The first model id listed by ``/v1/models``."""
    payload = get_json(url, "/v1/models", timeout_s)
    try:
        return str(payload["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise StreamError("GET /v1/models: expected {'data': [{'id': ...}]}") from None


def _network_reason(error: BaseException) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "timeout"
    return f"{type(error).__name__}: {error}"


def stream_completion(config: ClientConfig, prompt: Prompt) -> RequestResult:
    """Send one streamed completion; never raises for network or protocol problems (they go
    to ``result.error``)."""
    start = time.perf_counter()
    result = RequestResult(prompt.id, sent_s=start)
    try:
        _stream(config, prompt, result, start)
    except StreamError as error:
        result.error = str(error)
    except (OSError, http.client.HTTPException) as error:
        result.error = _network_reason(error)
    except ValueError as error:  # http.client's parse of a bad chunked encoding
        result.error = f"malformed stream: {error}"
    result.latency_s = time.perf_counter() - start
    return result


def _stream(config: ClientConfig, prompt: Prompt, result: RequestResult, start: float) -> None:
    body = {
        "model": config.model,
        "prompt": prompt.payload,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": config.ignore_eos,
    }
    deadline = start + config.request_timeout_s
    conn, prefix = _connection(config.url, config.idle_timeout_s)
    try:
        conn.request(
            "POST",
            prefix + "/v1/completions",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        response = conn.getresponse()
        if response.status != 200:
            raise StreamError(_error_message(response.status, response.read(1 << 20)))
        buffer, done, usage, last_chunk = b"", False, None, None
        while not done:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise StreamError(f"timeout: request took over {config.request_timeout_s:g}s")
            if conn.sock is not None:
                conn.sock.settimeout(min(config.idle_timeout_s, remaining))
            data = response.read1(65536)
            if not data:
                raise StreamError("malformed stream: connection closed before 'data: [DONE]'")
            buffer += data
            if len(buffer) > MAX_LINE_BYTES:
                raise StreamError("malformed stream: line over 16 MiB")
            *lines, buffer = buffer.split(b"\n")
            now = time.perf_counter()
            for raw in lines:
                line = raw.strip()
                if not line or line.startswith(b":"):
                    continue
                if not line.startswith(b"data:"):
                    raise StreamError(f"malformed stream: expected 'data: ...', got {line[:60]!r}")
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                chunk = _decode_chunk(payload)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk["choices"]:
                    if _step_chunk(choice):
                        if result.ttft_s is None:
                            result.ttft_s = now - start
                        else:
                            result.itl_s.append(now - last_chunk)
                        last_chunk = now
                        result.chunk_s.append(now - start)
                        ids = choice.get("token_ids")
                        result.chunk_tokens.append(len(ids) if isinstance(ids, list) else None)
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
        if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int):
            raise StreamError(
                "malformed stream: no usage chunk with completion_tokens (stream_options.include_usage)"
            )
        tokens, streamed = usage["completion_tokens"], [n for n in result.chunk_tokens if n is not None]
        if isinstance(tokens, bool) or not sum(streamed) <= tokens <= config.max_tokens:
            raise StreamError(f"malformed stream: usage.completion_tokens = {tokens!r}, expected an integer from the "
                              f"{sum(streamed)} tokens streamed to max_tokens ({config.max_tokens})")
        if tokens and not result.chunk_s:
            raise StreamError(f"malformed stream: usage.completion_tokens = {tokens}, but no chunk carried text or "
                              "token_ids")
        result.output_tokens = tokens
        if isinstance(usage.get("prompt_tokens"), int) and not isinstance(usage["prompt_tokens"], bool) \
                and usage["prompt_tokens"] >= 0:
            result.prompt_tokens = usage["prompt_tokens"]
    finally:
        conn.close()


def _step_chunk(choice: dict) -> bool:
    """Whether a streamed ``choice`` is a step chunk (module docstring): ``token_ids`` not empty, or,
    where it has none, ``text`` (a string, even empty)."""
    ids = choice.get("token_ids")
    return bool(ids) if isinstance(ids, list) else isinstance(choice.get("text"), str)


def _decode_chunk(payload: bytes) -> dict:
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise StreamError(f"malformed stream: chunk is not JSON: {payload[:60]!r}") from None
    if not isinstance(chunk, dict):
        raise StreamError("malformed stream: chunk is not a JSON object")
    if "error" in chunk:
        error = chunk["error"]
        raise StreamError(
            f"server error in stream: {error.get('message') if isinstance(error, dict) else error}"
        )
    choices = chunk.setdefault("choices", [])
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise StreamError(f"malformed stream: 'choices' is not a list of objects: {payload[:60]!r}")
    return chunk


def run_load(config: ClientConfig, prompts: list[Prompt], concurrency: int) -> LoadResult:
    """Send ``prompts`` in a closed loop with ``concurrency`` requests in flight. Interrupted
    (Ctrl-C), it sends no more: the requests in flight end, and the interrupt goes on."""
    if concurrency < 1:
        raise SpecscopeError(f"concurrency: expected >= 1, got {concurrency}")
    results: list[RequestResult | None] = [None] * len(prompts)
    lock = threading.Lock()
    stopping = threading.Event()
    next_index = 0

    def worker() -> None:
        nonlocal next_index
        while not stopping.is_set():
            with lock:
                index = next_index
                next_index += 1
            if index >= len(prompts):
                return
            results[index] = stream_completion(config, prompts[index])

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="load") as pool:
        try:
            for future in [pool.submit(worker) for _ in range(min(concurrency, len(prompts)))]:
                future.result()
        except BaseException:  # an interrupt: the workers take no next request
            stopping.set()
            raise
    duration = time.perf_counter() - start
    return LoadResult(concurrency, duration, [r for r in results if r is not None], start)


def joined(segments: list[LoadResult]) -> LoadResult:
    """One run made of ``segments`` (closed-loop runs of one server, one after another, other
    work between them): its duration is theirs summed, so its throughput counts only the time the
    server was loaded; every request keeps its send time, and its segment's index."""
    return LoadResult(
        segments[0].concurrency,
        sum(s.duration_s for s in segments),
        [r for s in segments for r in s.results],
        segments[0].started_s,
        tuple(i for i, s in enumerate(segments) for _ in s.results),
    )
