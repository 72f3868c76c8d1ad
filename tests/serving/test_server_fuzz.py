"""Hostile requests against a live `specscope serve`: each gets the 4xx it deserves (never a
500), and after each one the server still answers a normal request with 200."""

from __future__ import annotations

import json
import socket

import pytest
from serving_helpers import VOCAB, start_server, write_chat_model

pytestmark = pytest.mark.slow  # a live server taking 87 hostile requests

NORMAL = {"prompt": [5, 6, 7, 8, 5, 6], "max_tokens": 4, "temperature": 0, "ignore_eos": True}
CHAT = "/v1/chat/completions"
MAX_MODEL_LEN = 64


def http(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    """A raw HTTP/1.1 request; ``Content-Length`` is the body's unless ``headers`` say otherwise."""
    fields = {"Host": "x", "Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v is not None)
    return f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode() + body


def completion(body: object, path: str = "/v1/completions") -> bytes:
    return http("POST", path, json.dumps(body).encode())


def chunked(body: bytes, headers: dict[str, str | None] | None = None) -> bytes:
    """A POST /v1/completions whose body is sent as ``Transfer-Encoding: chunked``: ``body`` is
    the chunked encoding itself."""
    return http("POST", "/v1/completions", body, {"Content-Length": None, "Transfer-Encoding": "chunked", **(headers or {})})


def raw(text: bytes, path: str = "/v1/completions") -> bytes:
    return http("POST", path, text)


def nested(depth: int) -> bytes:
    return b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}"


def chat(messages: object, **fields: object) -> bytes:
    return completion({"messages": messages, "max_tokens": 4, **fields}, CHAT)


USER = [{"role": "user", "content": "w5 w6"}]
# (id, request bytes, expected status)
CASES = [
    ("not-json", raw(b"{not json"), 400),
    ("empty-body", raw(b""), 400),
    ("nested-100k-lists", raw(nested(100_000)), 400),
    ("nested-100k-objects", raw(b'{"a":' * 100_000 + b"1" + b"}" * 100_000), 400),
    ("lone-surrogate-prompt", raw(b'{"prompt": "w5 \\ud800", "max_tokens": 2}'), 400),
    ("lone-surrogate-chat", raw(b'{"messages": [{"role": "user", "content": "\\udfff"}]}', CHAT), 400),
    ("lone-surrogate-stop", raw(b'{"prompt": [5], "stop": ["\\ud83d"]}'), 400),
    ("invalid-utf8", raw(b'{"prompt": "\xff\xfe\xfd"}'), 400),
    ("nan-literal", raw(b'{"prompt": [5], "temperature": NaN}'), 400),
    ("infinity-literal", raw(b'{"prompt": [5], "top_p": Infinity}'), 400),
    ("minus-infinity", raw(b'{"prompt": [5], "min_p": -Infinity}'), 400),
    ("overflowing-float", raw(b'{"prompt": [5], "temperature": 1e400}'), 400),
    ("temperature-text", completion({**NORMAL, "temperature": "hot"}), 400),
    ("temperature-negative", completion({**NORMAL, "temperature": -0.5}), 400),
    ("temperature-bool", completion({**NORMAL, "temperature": True}), 400),
    ("top-p-zero", completion({**NORMAL, "top_p": 0}), 400),
    ("top-p-above-one", completion({**NORMAL, "top_p": 1.5}), 400),
    ("top-k-fraction", completion({**NORMAL, "top_k": 2.5}), 400),
    ("top-k-below-minus-one", completion({**NORMAL, "top_k": -2}), 400),
    ("seed-2-to-80", completion({**NORMAL, "seed": 2**80}), 400),
    ("seed-below-int64", completion({**NORMAL, "seed": -(2**63) - 1}), 400),
    ("seed-text", completion({**NORMAL, "seed": "7"}), 400),
    ("max-tokens-negative", completion({**NORMAL, "max_tokens": -5}), 400),
    ("max-tokens-zero", completion({**NORMAL, "max_tokens": 0}), 400),
    ("max-tokens-huge", completion({**NORMAL, "max_tokens": 10**30}), 400),
    ("max-completion-tokens-negative", chat(USER, max_completion_tokens=-1), 400),
    ("int-of-5000-digits", raw(b'{"prompt": [5], "seed": ' + b"9" * 5000 + b"}"), 400),
    ("prompt-past-max-model-len", completion({**NORMAL, "prompt": [5] * MAX_MODEL_LEN}), 400),
    ("prompt-empty-text", completion({**NORMAL, "prompt": ""}), 400),
    ("prompt-empty-list", completion({**NORMAL, "prompt": []}), 400),
    ("prompt-negative-id", completion({**NORMAL, "prompt": [5, -1]}), 400),
    ("prompt-id-past-vocab", completion({**NORMAL, "prompt": [5, VOCAB]}), 400),
    ("prompt-huge-id", completion({**NORMAL, "prompt": [10**30]}), 400),
    ("prompt-batch", completion({**NORMAL, "prompt": [[5, 6], [7]]}), 400),
    ("prompt-object", completion({**NORMAL, "prompt": {"text": "w5"}}), 400),
    ("prompt-bools", completion({**NORMAL, "prompt": [True, False]}), 400),
    ("prompt-missing", completion({"max_tokens": 4}), 400),
    ("unknown-model", completion({**NORMAL, "model": "gpt-4"}), 404),
    ("empty-model-name", completion({**NORMAL, "model": ""}), 200),  # as vLLM: the served model
    ("max-tokens-whole-float", completion({**NORMAL, "max_tokens": 4.0}), 200),  # as vLLM (pydantic)
    ("max-tokens-fraction", completion({**NORMAL, "max_tokens": 4.5}), 400),
    ("assistant-content-null", chat([{"role": "user", "content": "w5"}, {"role": "assistant", "content": None},
                                     {"role": "user", "content": "w6"}]), 200),
    ("user-content-null", chat([{"role": "user", "content": None}]), 400),
    ("messages-empty", chat([]), 400),
    ("messages-not-list", chat("hello"), 400),
    ("messages-missing", completion({"max_tokens": 4}, CHAT), 400),
    ("message-bad-role", chat([{"role": "wizard", "content": "w5"}]), 400),
    ("message-content-number", chat([{"role": "user", "content": 5}]), 400),
    ("message-image-part", chat([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]), 400),
    ("message-not-object", chat(["w5"]), 400),
    ("chat-prompt-past-max-model-len", chat([{"role": "user", "content": "w5 " * 70}]), 400),
    ("n-two", completion({**NORMAL, "n": 2}), 400),
    ("logprobs", completion({**NORMAL, "logprobs": 5}), 400),
    ("echo", completion({**NORMAL, "echo": True}), 400),
    ("tools", chat(USER, tools=[{"type": "function"}]), 400),
    ("response-format-json", completion({**NORMAL, "response_format": {"type": "json_object"}}), 400),
    ("response-format-schema", chat(USER, response_format={"type": "json_schema", "json_schema": {}}), 400),
    ("response-format-text-string", completion({**NORMAL, "response_format": "text"}), 400),
    ("stop-number", completion({**NORMAL, "stop": 5}), 400),
    ("stop-empty-string", completion({**NORMAL, "stop": [""]}), 400),
    ("stop-token-ids-negative", completion({**NORMAL, "stop_token_ids": [-1]}), 400),
    ("stop-token-ids-past-vocab", completion({**NORMAL, "stop_token_ids": [VOCAB]}), 400),
    ("stop-token-ids-text", completion({**NORMAL, "stop_token_ids": "w1"}), 400),
    ("min-tokens-negative", completion({**NORMAL, "min_tokens": -1}), 400),
    ("min-tokens-above-max-tokens", completion({**NORMAL, "min_tokens": 5}), 400),
    ("repetition-penalty-zero", completion({**NORMAL, "repetition_penalty": 0}), 400),
    ("min-p-above-one", completion({**NORMAL, "min_p": 2}), 400),
    ("stream-text", completion({**NORMAL, "stream": "yes"}), 400),
    ("stream-options-text", completion({**NORMAL, "stream_options": "x"}), 400),
    ("include-usage-number", completion({**NORMAL, "stream_options": {"include_usage": 1}}), 400),
    ("ignore-eos-text", completion({**NORMAL, "ignore_eos": "no"}), 400),
    ("body-array", completion([NORMAL]), 400),
    ("body-null", raw(b"null"), 400),
    ("content-length-longer-than-body", http("POST", "/v1/completions", b"{}", {"Content-Length": "500"}), 400),
    ("content-length-negative", http("POST", "/v1/completions", b"{}", {"Content-Length": "-3"}), 400),
    ("content-length-text", http("POST", "/v1/completions", b"{}", {"Content-Length": "ten"}), 400),
    ("content-length-missing", http("POST", "/v1/completions", b"{}", {"Content-Length": None}), 411),
    ("content-length-huge", http("POST", "/v1/completions", b"", {"Content-Length": str(10**12)}), 413),
    ("chunked-body-without-prompt", chunked(b"2\r\n{}\r\n0\r\n\r\n"), 400),
    ("chunked-size-not-hex", chunked(b"zz\r\n{}\r\n0\r\n\r\n"), 400),
    ("chunked-size-signed", chunked(b"+2\r\n{}\r\n0\r\n\r\n"), 400),
    ("chunked-size-huge", chunked(b"fffffffffff\r\n{}\r\n0\r\n\r\n"), 413),
    ("chunked-chunk-without-crlf", chunked(b"2\r\n{}xx0\r\n\r\n"), 400),
    ("chunked-ends-early", chunked(b"10\r\n{}"), 400),
    ("chunked-no-last-chunk", chunked(b"2\r\n{}\r\n"), 400),
    ("chunked-and-content-length", chunked(b"2\r\n{}\r\n0\r\n\r\n", {"Content-Length": "2"}), 400),
    ("transfer-encoding-gzip", chunked(b"{}", {"Transfer-Encoding": "gzip", "Content-Length": "2"}), 501),
    ("method-put", http("PUT", "/v1/completions", b"{}"), 405),
    ("method-delete", http("DELETE", "/v1/models"), 405),
    ("method-patch", http("PATCH", CHAT, b"{}"), 405),
    ("method-unknown", http("BREW", "/v1/completions", b"{}"), 405),
    ("unknown-post-path", completion(NORMAL, "/v1/embeddings"), 404),
    ("unknown-get-path", http("GET", "/admin"), 404),
    ("unknown-model-id", http("GET", "/v1/models/gpt-4"), 404),
    ("garbage-request-line", b"GARBAGE\r\n\r\n", 400),
    ("request-line-too-long", b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    ("too-many-headers", http("GET", "/health", b"", {f"X-{i}": "y" for i in range(120)}), 431),
    # values that used to stop the engine: now served (vLLM's temperature rule, a 64-bit seed)
    ("temperature-1e-300", completion({**NORMAL, "temperature": 1e-300}), 200),
    ("seed-2-to-64-minus-1", completion({**NORMAL, "temperature": 1.0, "seed": 2**64 - 1}), 200),
]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    model = write_chat_model(tiny_model, tmp_path_factory.mktemp("fuzz") / "m")
    running = start_server(model, "ngram", k=3, max_batch_size=4, max_seq_len=MAX_MODEL_LEN)
    yield running
    running.close()


def exchange(url: str, request: bytes, hang_up: bool = True) -> tuple[int, bytes]:
    """Send ``request``, close the sending side (``hang_up``: so that the server sees where a
    hostile request ends), read the whole answer: (status, body). A request that generates is sent
    without hanging up: a server aborts a request whose client closed its side before the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        try:
            sock.sendall(request)
            if hang_up:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (and closed) before reading it all
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_there_are_enough_hostile_requests():
    assert len(CASES) >= 40 and len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("name, request_bytes, expected", CASES, ids=[case[0] for case in CASES])
def test_hostile_request_then_the_server_still_serves(server, name, request_bytes, expected):
    status, body = exchange(server.url, request_bytes, hang_up=expected != 200)  # a 200 generates
    assert status == expected, body[:300]
    if 400 <= status < 500 and body:
        assert json.loads(body)["error"]["code"] == status
    status, body = exchange(server.url, completion(NORMAL), hang_up=False)
    assert status == 200 and len(json.loads(body)["choices"][0]["token_ids"]) == 4
    assert exchange(server.url, http("GET", "/health"))[0] == 200


def test_a_chunked_request_body_is_read_like_a_sized_one(server):
    """A body sent in chunks (a chunk extension and a trailer included) generates what the same
    body with a Content-Length does."""
    body = json.dumps(NORMAL).encode()
    parts = [body[:7], body[7:20], body[20:]]
    encoded = b"".join(b"%x;note=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\nX-Trailer: y\r\n\r\n"
    status, answer = exchange(server.url, chunked(encoded), hang_up=False)
    assert status == 200, answer[:300]
    status, sized = exchange(server.url, completion(NORMAL), hang_up=False)
    assert status == 200
    assert json.loads(answer)["choices"][0]["token_ids"] == json.loads(sized)["choices"][0]["token_ids"]
    assert len(json.loads(answer)["choices"][0]["token_ids"]) == 4
