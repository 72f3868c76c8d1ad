"""An OpenAI-compatible HTTP server around the reference engine (standard library only).

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (fields:
:mod:`specscope.serve.protocol`; streamed as server-sent events ``data: {...}`` ending with
``data: [DONE]``; the first event carries the prefill's token alone), ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health`` (200, or 503 once the engine loop has failed) and
``GET /metrics`` (:mod:`specscope.serve.exporter`). One thread per connection; the engine runs
on its own thread (:class:`~specscope.serve.engine_loop.EngineLoop`). Bad requests get a 4xx
JSON error naming the problem, and no request stops the server. A request body comes with a
``Content-Length`` or ``Transfer-Encoding: chunked`` (as HTTP/1.1 clients stream one), at most
8 MiB. ``max_model_len`` (prompt +
output tokens) is the engine's ``max_seq_len``. Responses close the connection (HTTP/1.0). A
client that closes its connection — or only its sending side — before its answer is complete is
taken to have left, streamed or not: its request is aborted and frees its batch slot.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import queue
import select
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TextIO

from specscope.errors import SpecscopeError
from specscope.serve import exporter, protocol
from specscope.serve.engine_loop import DEFAULT_MAX_WAITING, EngineLoop, Job, JobEvent
from specscope.serve.output import OutputText, Piece
from specscope.serve.protocol import ApiError, GenerationRequest
from specscope.workloads.chat import ChatTemplate

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 8 << 20
MAX_LINE_BYTES = 1024  # a chunked body's size or trailer line
MAX_TRAILERS = 32  # a chunked body's trailer lines
HEX_DIGITS = b"0123456789abcdefABCDEF"
EVENT_POLL_S = 1.0
GONE_POLL_S = 0.05  # how often a non-streamed answer checks that its client is still connected
NORMALIZED = 4  # how far a tokenizer's normalisation may shorten a text (stripped accents), for a safe bound
SHUTDOWN_GRACE_S = 2.0  # how long a stopping server waits for its handlers to send their last answers


class CompletionServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` holding the engine loop, tokenizer and metrics registry."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        loop: EngineLoop,
        tokenizer,
        model_name: str,
        chat_template: ChatTemplate | None = None,
    ) -> None:
        self.answering, self.answers = threading.Condition(), 0  # POST handlers at work (server_close waits)
        self.loop, self.tokenizer, self.model_name = loop, tokenizer, model_name  # before binding:
        super().__init__(address, CompletionHandler)  # a failed bind calls server_close()
        self.chat_template = chat_template if chat_template is not None and chat_template.source is not None else None
        engine = loop.engine
        self.max_model_len: int = engine.max_seq_len
        # the most characters one token holds (byte-level vocabularies: bytes): a text of more than
        # NORMALIZED × this × max_model_len characters cannot fit, and is refused untokenised
        self.token_chars = max(map(len, tokenizer.get_vocab(with_added_tokens=True)), default=1) if tokenizer else 1
        self.vocab_size: int = engine.target.config.vocab_size
        self.registry = exporter.make_registry(loop, model_name, spec_decode=engine.proposer is not None)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def server_close(self) -> None:
        """Stop listening, stop the engine (every job still under way gets a 503, :meth:`EngineLoop.stop`),
        and give the handlers :data:`SHUTDOWN_GRACE_S` to send it (their threads die with the process)."""
        super().server_close()
        self.loop.stop()
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        with self.answering:
            while self.answers and time.monotonic() < deadline:
                self.answering.wait(deadline - time.monotonic())


def create_server(
    engine,
    tokenizer,
    model_name: str,
    host: str,
    port: int,
    max_waiting: int = DEFAULT_MAX_WAITING,
    chat_template: ChatTemplate | None = None,
    step_records: TextIO | None = None,
) -> CompletionServer:
    """Bind (``port=0``: any free port) and start the engine loop; call ``serve_forever()``.
    Without ``chat_template``, ``/v1/chat/completions`` answers 400. ``step_records``: a text
    file each step's record is appended to (:class:`~specscope.serve.engine_loop.EngineLoop`)."""
    loop = EngineLoop(engine, max_waiting, step_records)
    try:
        server = CompletionServer((host, port), loop, tokenizer, model_name, chat_template)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise SpecscopeError(
                f"--port: {host}:{port} is already in use; choose another port (0: any free port)"
            ) from None
        raise SpecscopeError(
            f"--host/--port: cannot listen on {host}:{port} ({error.strerror or error})"
        ) from None
    loop.start()
    return server


class CompletionHandler(BaseHTTPRequestHandler):
    server: CompletionServer
    timeout = 30  # seconds a client may take to send its request
    server_version = "specscope"
    _checked = 0.0  # when a non-streamed answer last checked that its client is still there

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # --- plumbing -------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":  # an answer to HEAD has no body (RFC 9110 §9.3.2)
            self.wfile.write(body)

    def _route(self) -> str:
        """The request's path, without its query; a target in absolute form
        (``http://host:port/v1/completions``, RFC 9112 §3.2.2) read as its path."""
        return urllib.parse.urlsplit(self.path).path

    def _send_json(self, status: int, payload: object) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send_error(self, error: ApiError) -> None:
        """Answer ``error``; a client that has gone by then (it sent less than it announced, and
        left) is noted, not a traceback."""
        allow = {"Allow": _allowed(self._route())} if error.status == 405 else None  # RFC 9110 §15.5.6: a 405 says which
        try:
            self._send(error.status, error.body(), headers=allow)
        except (BrokenPipeError, ConnectionResetError):
            log.info("client %s went away before its error (%d) was sent", self.address_string(), error.status)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (a malformed request line, too many headers, an unknown
        method) as JSON errors like the others."""
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # a request line too bad to read: answer with a status line
        if code == 501:  # a method with no do_<METHOD>: the client's mistake, not the server's
            code, message = 405, f"method {str(self.command)[:20]!r} not allowed"
        self._send_error(ApiError(code, message or self.responses.get(code, ("error",))[0]))

    # --- routes ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self._route()
        server = self.server
        if path in ROUTES:
            self._not_allowed()
        elif path == "/health":
            if server.loop.alive():
                self._send(200, b"")
            else:
                self._send_error(ApiError(503, f"engine unavailable: {server.loop.failure}"))
        elif path == "/v1/models":
            model = protocol.model_object(server.model_name, server.max_model_len)
            self._send_json(200, {"object": "list", "data": [model]})
        elif path.startswith("/v1/models/"):
            name = urllib.parse.unquote(path[len("/v1/models/") :])
            if name != server.model_name:
                self._send_error(ApiError(404, f"model {name[:80]!r} does not exist"))
            else:
                self._send_json(200, protocol.model_object(server.model_name, server.max_model_len))
        elif path == "/metrics":
            self._send(200, exporter.render(server.registry), exporter.CONTENT_TYPE)
        else:
            self._send_error(ApiError(404, f"no route GET {path[:80]}"))

    def do_POST(self) -> None:
        server = self.server
        with server.answering:
            server.answers += 1
        try:
            self._post()
        finally:
            with server.answering:
                server.answers -= 1
                server.answering.notify_all()

    def _post(self) -> None:
        path = self._route()
        try:
            if path in GET_ROUTES or path.startswith("/v1/models/"):
                raise ApiError(405, f"method POST not allowed on {path[:80]} (GET it)")
            if path not in ROUTES:
                raise ApiError(404, f"no route POST {path[:80]}")
            chat = path == "/v1/chat/completions"
            parse = protocol.parse_chat_request if chat else protocol.parse_completion_request
            self._generate(parse(self._read_body(), self.server.model_name), chat)
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):  # a stalled reader: its writes time out
            log.info("client %s went away", self.address_string())
        except Exception as error:  # a bug: answer 500, keep serving
            log.exception("request failed")
            self._send_error(ApiError(500, f"internal error: {type(error).__name__}: {error}"))

    def _not_allowed(self) -> None:
        self._send_error(ApiError(405, f"method {str(self.command)[:20]} not allowed on {self._route()[:80]}"))

    do_HEAD = do_GET  # GET's answer without its body (RFC 9110 §9.3.2: a general-purpose server supports HEAD)
    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _read_body(self) -> bytes:
        """The request body (:meth:`_read_sized`); one that does not arrive within
        :attr:`timeout` is 408 (it was a 500 and a logged traceback)."""
        try:
            return self._read_sized()
        except TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.timeout} s") from None

    def _read_sized(self) -> bytes:
        """The request body: ``Content-Length`` bytes, or a ``Transfer-Encoding: chunked`` body
        (:meth:`_read_chunks`); a request with both, or another transfer coding, is refused."""
        lengths, coding = self.headers.get_all("Content-Length") or [], self.headers.get("Transfer-Encoding")
        if len(set(lengths)) > 1:  # RFC 9112 §6.3: which one frames the body would be a guess
            raise ApiError(400, f"Content-Length given {len(lengths)} times with different values")
        length = lengths[0] if lengths else None
        if coding is not None:
            if coding.strip().lower() != "chunked":
                raise ApiError(501, f"Transfer-Encoding {coding[:40]!r} not supported (only 'chunked')")
            if length is not None:
                raise ApiError(400, "both Content-Length and Transfer-Encoding given; send one")
            return self._read_chunks()
        if length is None:
            raise ApiError(411, "missing Content-Length (or Transfer-Encoding: chunked)")
        if not (length.strip().isascii() and length.strip().isdigit()):  # int() also took '4_9', ' +5', '٤'
            raise ApiError(400, f"bad Content-Length {length[:40]!r} (expected decimal digits)")
        size = int(length)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        body = self.rfile.read(size)
        if len(body) < size:
            raise ApiError(400, f"request body has {len(body)} bytes, Content-Length said {size}")
        return body

    def _read_chunks(self) -> bytes:
        """A chunked body (RFC 9112 §7.1): chunks of a hexadecimal size line (extensions after
        ``;`` ignored), that many bytes and CRLF, ended by a chunk of size 0 and trailer lines
        up to an empty one (ignored). At most :data:`MAX_BODY_BYTES` in all."""
        body = bytearray()
        while True:
            line = self.rfile.readline(MAX_LINE_BYTES + 1)
            size_text = line.split(b";", 1)[0].strip()
            if len(line) > MAX_LINE_BYTES or not size_text or size_text.strip(HEX_DIGITS):
                raise ApiError(400, f"bad chunk size line {line[:40]!r} (expected a hexadecimal size)")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > MAX_BODY_BYTES:
                raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(3) != b"\r\n":
                raise ApiError(400, f"chunk {len(body)}+{size}: the body ended early or a chunk lacks its CRLF")
            body += chunk
        for _ in range(MAX_TRAILERS + 1):
            trailer = self.rfile.readline(MAX_LINE_BYTES + 1)
            if trailer in (b"\r\n", b"\n"):
                return bytes(body)
            if not trailer:
                raise ApiError(400, "chunked body ended before its last CRLF")
        raise ApiError(400, f"chunked body has over {MAX_TRAILERS} trailer lines")

    # --- generation -----------------------------------------------------------------------
    def _prompt_ids(self, request: GenerationRequest) -> list[int]:
        server = self.server
        if request.prompt_token_ids is not None:
            ids = list(request.prompt_token_ids)
            if max(ids) >= server.vocab_size:
                raise ApiError(400, f"'prompt': token ids must be below the vocabulary size {server.vocab_size}")
            return ids
        if request.messages is not None and server.chat_template is None:
            raise ApiError(
                400, "this model has no chat template (tokenizer_config.json 'chat_template'); "
                "use /v1/completions"
            )
        if server.tokenizer is None:
            raise ApiError(400, "'prompt': this model directory has no tokenizer.json; send token ids")
        if request.messages is not None:
            try:
                text = server.chat_template.render(list(request.messages))
            except SpecscopeError as error:
                raise ApiError(400, f"'messages': the model's chat template refused them ({error})") from None
            ids = self._encode(text, special=False)
        else:
            ids = self._encode(request.prompt_text, special=True)
        if not ids:
            raise ApiError(400, "'prompt': tokenises to no tokens")
        return ids

    def _encode(self, text: str, special: bool) -> list[int]:
        """``text``'s token ids (``special``: with the tokenizer's special tokens), tokenised off the
        GIL (``encode_batch``: a 6 MB prompt held every other request, /health too, for 8 s); a text
        too long for max_model_len however it tokenises is refused without tokenising it."""
        server = self.server
        if len(text) > NORMALIZED * server.token_chars * server.max_model_len:
            raise ApiError(400, f"'prompt': {len(text)} characters are more than the maximum sequence length "
                                f"(max_model_len) {server.max_model_len} tokens can hold (a token holds at most "
                                f"{server.token_chars} characters)")
        return server.tokenizer.encode_batch([text], add_special_tokens=special)[0].ids

    def _job(self, request: GenerationRequest, prompt_ids: list[int]) -> Job:
        from specscope.engine.sampling import SamplingParams

        server = self.server
        room = server.max_model_len - len(prompt_ids)
        max_tokens = request.max_tokens if request.max_tokens is not None else room
        if room < 1:  # no max_tokens would do (given or not): the prompt is the problem
            raise ApiError(400, f"prompt ({len(prompt_ids)} tokens) leaves no room for an output in the maximum "
                                f"sequence length (max_model_len) {server.max_model_len}")
        if max_tokens > room:
            raise ApiError(
                400,
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"maximum sequence length (max_model_len) {server.max_model_len}",
            )
        if request.min_tokens > max_tokens:
            raise ApiError(400, f"'min_tokens': expected <= max_tokens ({max_tokens}), got {request.min_tokens}")
        if request.stop and server.tokenizer is None:
            raise ApiError(400, "'stop': stop strings need the model's tokenizer.json; use 'stop_token_ids'")
        if any(t >= server.vocab_size for t in request.stop_token_ids):
            raise ApiError(
                400, f"'stop_token_ids': token ids must be below the vocabulary size {server.vocab_size}"
            )
        try:
            sampling = SamplingParams(
                request.temperature,
                request.top_p,
                request.top_k,
                request.seed,
                request.min_p,
                request.repetition_penalty,
                request.min_tokens,
                request.stop_token_ids,
            )
        except SpecscopeError as error:
            raise ApiError(400, str(error)) from None
        return Job(uuid.uuid4().hex, prompt_ids, max_tokens, sampling, request.ignore_eos, stop_strings=bool(request.stop))

    def _generate(self, request: GenerationRequest, chat: bool) -> None:
        prompt_ids = self._prompt_ids(request)
        job = self._job(request, prompt_ids)
        self.server.loop.submit(job)
        try:
            self._answer(request, job, len(prompt_ids), chat)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.server.loop.cancel(job)  # the client went away (or stopped reading): free its batch slot
            raise

    def _pieces(
        self, request: GenerationRequest, job: Job
    ) -> Iterator[tuple[Piece, str | None, str | int | None]]:
        """Per engine event: the piece to send, the finish reason (on the last) and the stop
        reason (the stop string, or the stop token id from ``stop_token_ids``)."""
        output = OutputText(self.server.tokenizer, request.stop, request.min_tokens)
        heard = False  # a stream's writes notice a client that left; before its first event (queued) none come
        while True:
            event = self._next_event(job, watch=not request.stream or not heard)
            heard = True
            if event.error is not None:
                raise event.error
            piece = output.add(event.token_ids, final=event.finish_reason is not None,
                               stop_token=event.finish_reason == "stop")  # EOS or stop_token_ids
            if piece.stop is not None:
                self.server.loop.cancel(job, reason="stop")
                yield piece, "stop", piece.stop
                return
            finish = event.finish_reason
            if finish is not None:
                self.server.loop.settle(job)  # no stop string in its last tokens: its finish counts as the engine's
            last = event.token_ids[-1] if event.token_ids else None
            stop_reason = last if finish == "stop" and last in request.stop_token_ids and (  # as vLLM: EOS first,
                request.ignore_eos or last not in self.server.loop.engine.eos_token_ids) else None  # with no reason
            yield piece, finish, stop_reason
            if finish is not None:
                return

    def _answer(self, request: GenerationRequest, job: Job, prompt_len: int, chat: bool) -> None:
        """Wait for ``job``'s tokens and send them, in one answer or as a stream."""
        model = self.server.model_name
        cid, created = protocol.new_id("chatcmpl" if chat else "cmpl"), int(time.time())  # one for every chunk
        pieces = self._pieces(request, job)
        if not request.stream:
            texts, tokens = [], []
            for piece, finish, stop_reason in pieces:
                texts.append(piece.text)
                tokens.extend(piece.token_ids)
            make = protocol.chat_choice if chat else protocol.choice
            kind = "chat.completion" if chat else "text_completion"
            answer = protocol.completion_object(
                cid, created, model, [make("".join(texts), tokens, finish, stop_reason)],
                protocol.usage(prompt_len, len(tokens)), kind,
            )
            self._send_json(200, answer)
            return
        first = next(pieces)  # before the headers: an error here is still an HTTP status
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"
        count = 0

        def so_far() -> dict | None:  # the usage on every chunk, where the client asked for it
            return protocol.usage(prompt_len, count) if request.continuous_usage else None

        if chat:  # vLLM's first chat chunk: the role
            delta = {"role": "assistant", "content": ""}
            role = protocol.chat_choice("", [], None, delta=delta)
            self._event(protocol.completion_object(cid, created, model, [role], so_far(), kind=kind))
        try:
            for piece, finish, stop_reason in itertools.chain([first], pieces):
                count += len(piece.token_ids)
                if chat:
                    delta = {"content": piece.text}
                    made = protocol.chat_choice("", piece.token_ids, finish, stop_reason, delta=delta)
                else:
                    made = protocol.choice(piece.text, piece.token_ids, finish, stop_reason)
                self._event(protocol.completion_object(cid, created, model, [made], so_far(), kind=kind))
        except ApiError as error:  # headers are out: report the error inside the stream
            self._event(json.loads(error.body()))
        if request.include_usage:
            self._event(protocol.completion_object(cid, created, model, [], protocol.usage(prompt_len, count), kind))
        self._event("[DONE]")

    def _event(self, payload: dict | str) -> None:
        self.wfile.write(protocol.sse(payload))
        self.wfile.flush()

    def _next_event(self, job: Job, watch: bool = False) -> JobEvent:
        """``job``'s next event; with ``watch`` (an answer sent only at the end, or a stream still
        waiting for its first tokens, so no write would notice a client that left) a closed
        connection raises ConnectionResetError, so that the job is aborted at once instead of
        taking a batch slot and running to its max_tokens."""
        while True:
            if watch and time.monotonic() - self._checked >= GONE_POLL_S:
                self._checked = time.monotonic()  # at most every GONE_POLL_S, however often events come
                if self._client_gone():
                    raise ConnectionResetError("the client closed the connection")
            try:
                return job.events.get(timeout=GONE_POLL_S if watch else EVENT_POLL_S)
            except queue.Empty:
                if not self.server.loop.alive():
                    reason = self.server.loop.failure or "server shutting down"
                    return JobEvent([], error=ApiError(503, f"engine unavailable: {reason}"))

    def _client_gone(self) -> bool:
        """Whether the client closed its connection: the socket reads as ended (a client sends
        nothing more after its request, so a readable socket with no byte is a hang-up)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:  # reset by the peer
            return True


ROUTES = ("/v1/completions", "/v1/chat/completions")  # POST
GET_ROUTES = ("/health", "/v1/models", "/metrics")


def _allowed(path: str) -> str:
    """The methods ``path`` answers (a 405's ``Allow`` header)."""
    return "POST" if path in ROUTES else "GET, HEAD"
