"""An OpenAI-compatible HTTP server around the reference engine (standard library only).

Endpoints: ``POST /v1/completions`` (see :mod:`specscope.serve.protocol`; streamed as
server-sent events ``data: {...}`` ending with ``data: [DONE]``), ``GET /v1/models``,
``GET /health`` (200, or 503 once the engine loop has failed) and ``GET /metrics``
(:mod:`specscope.serve.exporter`). One thread per connection; the engine runs on its own
thread (:class:`~specscope.serve.engine_loop.EngineLoop`). Bad requests get a 4xx JSON error
naming the problem and the server stays up. Responses close the connection (HTTP/1.0).
"""

from __future__ import annotations

import json
import logging
import queue
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from specscope.errors import SpecscopeError
from specscope.serve import exporter, protocol
from specscope.serve.detokenize import IncrementalDecoder
from specscope.serve.engine_loop import DEFAULT_MAX_WAITING, EngineLoop, Job, JobEvent
from specscope.serve.protocol import ApiError, CompletionRequest

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 8 << 20
EVENT_POLL_S = 1.0


class CompletionServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` holding the engine loop, tokenizer and metrics registry."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], loop: EngineLoop, tokenizer, model_name: str) -> None:
        super().__init__(address, CompletionHandler)
        self.loop, self.tokenizer, self.model_name = loop, tokenizer, model_name
        engine = loop.engine
        self.max_seq_len: int = engine.max_seq_len
        self.vocab_size: int = engine.target.config.vocab_size
        self.registry = exporter.make_registry(loop, model_name, spec_decode=engine.proposer is not None)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def server_close(self) -> None:
        super().server_close()
        self.loop.stop()


def create_server(
    engine, tokenizer, model_name: str, host: str, port: int, max_waiting: int = DEFAULT_MAX_WAITING
) -> CompletionServer:
    """Bind (``port=0``: any free port) and start the engine loop; call ``serve_forever()``."""
    loop = EngineLoop(engine, max_waiting)
    try:
        server = CompletionServer((host, port), loop, tokenizer, model_name)
    except OSError as error:
        raise SpecscopeError(
            f"--host/--port: cannot listen on {host}:{port} ({error.strerror or error})"
        ) from None
    loop.start()
    return server


class CompletionHandler(BaseHTTPRequestHandler):
    server: CompletionServer
    timeout = 30  # seconds a client may take to send its request
    server_version = "specscope"

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # --- plumbing -------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, payload: object) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send_error(self, error: ApiError) -> None:
        self._send(error.status, error.body())

    # --- routes ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if self.server.loop.alive():
                self._send(200, b"")
            else:
                self._send_error(ApiError(503, f"engine unavailable: {self.server.loop.failure}"))
        elif path == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.server.model_name,
                            "object": "model",
                            "created": int(time.time()),
                            "owned_by": "specscope",
                            "max_model_len": self.server.max_seq_len,
                        }
                    ],
                },
            )
        elif path == "/metrics":
            self._send(200, exporter.render(self.server.registry), exporter.CONTENT_TYPE)
        else:
            self._send_error(ApiError(404, f"no route GET {path}"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path != "/v1/completions":
                raise ApiError(404, f"no route POST {path}")
            self._completions(self._read_body())
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            log.info("client %s went away", self.address_string())
        except Exception as error:  # a bug: answer 500, keep serving
            log.exception("request failed")
            self._send_error(ApiError(500, f"internal error: {type(error).__name__}: {error}"))

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            raise ApiError(411, "missing Content-Length")
        try:
            size = int(length)
        except ValueError:
            raise ApiError(400, f"bad Content-Length {length!r}") from None
        if size < 0 or size > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(size)

    def _tokens(self, request: CompletionRequest) -> list[int]:
        if request.prompt_token_ids is not None:
            ids = list(request.prompt_token_ids)
            if max(ids) >= self.server.vocab_size:
                raise ApiError(
                    400, f"'prompt': token ids must be below the vocabulary size {self.server.vocab_size}"
                )
        else:
            if self.server.tokenizer is None:
                raise ApiError(400, "'prompt': this model directory has no tokenizer.json; send token ids")
            ids = self.server.tokenizer.encode(request.prompt_text).ids
            if not ids:
                raise ApiError(400, "'prompt': tokenises to no tokens")
        if len(ids) + request.max_tokens > self.server.max_seq_len:
            raise ApiError(
                400,
                f"prompt ({len(ids)} tokens) + max_tokens ({request.max_tokens}) exceeds the "
                f"maximum sequence length {self.server.max_seq_len}",
            )
        return ids

    def _completions(self, raw: bytes) -> None:
        from specscope.engine.sampling import SamplingParams

        request = protocol.parse_completion_request(raw, self.server.model_name)
        prompt_ids = self._tokens(request)
        try:
            sampling = SamplingParams(request.temperature, request.top_p, request.top_k, request.seed)
        except SpecscopeError as error:
            raise ApiError(400, str(error)) from None
        job = Job(uuid.uuid4().hex, prompt_ids, request.max_tokens, sampling, request.ignore_eos)
        self.server.loop.submit(job)
        try:
            self._answer(request, job, prompt_ids)
        except (BrokenPipeError, ConnectionResetError):
            self.server.loop.cancel(job)  # the client went away: free its batch slot
            raise

    def _answer(self, request: CompletionRequest, job: Job, prompt_ids: list[int]) -> None:
        """Wait for ``job``'s tokens and send them, in one answer or as a stream."""
        cid = protocol.new_completion_id()
        output: list[int] = []
        first = self._next_event(job)
        if first.error is not None:
            raise first.error
        if not request.stream:
            event = first
            output.extend(event.token_ids)
            while event.finish_reason is None:
                event = self._next_event(job)
                if event.error is not None:
                    raise event.error
                output.extend(event.token_ids)
            choice = protocol.choice(self._decode(output), output, event.finish_reason)
            self._send_json(
                200,
                protocol.completion_object(
                    cid, self.server.model_name, [choice], protocol.usage(len(prompt_ids), len(output))
                ),
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        event = first
        decoder = IncrementalDecoder(self.server.tokenizer) if self.server.tokenizer is not None else None
        while True:
            output.extend(event.token_ids)
            delta = decoder.add(event.token_ids, final=event.finish_reason is not None) if decoder else ""
            choice = protocol.choice(delta, event.token_ids, event.finish_reason)
            self.wfile.write(protocol.sse(protocol.completion_object(cid, self.server.model_name, [choice])))
            self.wfile.flush()
            if event.finish_reason is not None:
                break
            event = self._next_event(job)
            if event.error is not None:  # headers are out: report the error inside the stream
                self.wfile.write(protocol.sse(json.loads(event.error.body())))
                break
        if request.include_usage:
            self.wfile.write(
                protocol.sse(
                    protocol.completion_object(
                        cid, self.server.model_name, [], protocol.usage(len(prompt_ids), len(output))
                    )
                )
            )
        self.wfile.write(protocol.sse("[DONE]"))
        self.wfile.flush()

    def _next_event(self, job: Job) -> JobEvent:
        while True:
            try:
                return job.events.get(timeout=EVENT_POLL_S)
            except queue.Empty:
                if not self.server.loop.alive():
                    return JobEvent(
                        [], error=ApiError(503, f"engine unavailable: {self.server.loop.failure}")
                    )

    def _decode(self, token_ids: list[int]) -> str:
        tokenizer = self.server.tokenizer
        return tokenizer.decode(token_ids) if tokenizer is not None and token_ids else ""
