"""`specscope serve` over real loopback HTTP: validation answers 4xx and the server stays up;
streamed and unstreamed answers agree; SD answers equal no-SD answers (greedy)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.parse

import pytest
from serving_helpers import VOCAB, start_server

PROMPT = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]


def post(
    url: str, body: object, raw: bytes | None = None, path: str = "/v1/completions"
) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(
            "POST",
            path,
            body=raw if raw is not None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def get(url: str, path: str) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def stream_events(url: str, body: dict) -> list[object]:
    status, data = post(url, {**body, "stream": True})
    assert status == 200, data
    events = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: ")
            payload = block[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


@pytest.fixture(scope="module")
def servers(tiny_model):
    model = tiny_model
    plain = start_server(model, "none", max_batch_size=4, max_seq_len=64)
    ngram = start_server(model, "ngram", k=3, max_batch_size=4, max_seq_len=64)
    yield plain, ngram
    plain.close()
    ngram.close()


@pytest.mark.parametrize(
    "body, raw, status, message",
    [
        (None, b"{not json", 400, "not valid JSON"),
        ([1, 2], None, 400, "JSON object"),
        ({"max_tokens": 4}, None, 400, "missing field 'prompt'"),
        ({"prompt": [], "max_tokens": 4}, None, 400, "'prompt'"),
        ({"prompt": [1, -2], "max_tokens": 4}, None, 400, "'prompt'"),
        ({"prompt": [VOCAB + 5], "max_tokens": 4}, None, 400, "vocabulary size"),
        ({"prompt": PROMPT, "max_tokens": 0}, None, 400, "'max_tokens'"),
        ({"prompt": PROMPT, "max_tokens": "8"}, None, 400, "'max_tokens'"),
        ({"prompt": PROMPT, "max_tokens": 60}, None, 400, "exceeds the maximum sequence length 64"),
        ({"prompt": list(range(2, 62)) * 2, "max_tokens": 1}, None, 400, "exceeds"),
        ({"prompt": PROMPT, "temperature": -1}, None, 400, "'temperature'"),
        ({"prompt": PROMPT, "top_p": 0}, None, 400, "'top_p'"),
        ({"prompt": PROMPT, "top_k": 1.5}, None, 400, "'top_k'"),
        ({"prompt": PROMPT, "seed": "x"}, None, 400, "'seed'"),
        ({"prompt": PROMPT, "stream": "yes"}, None, 400, "'stream'"),
        ({"prompt": PROMPT, "n": 2}, None, 400, "'n' is not supported"),
        ({"prompt": PROMPT, "stop": ["\n"]}, None, 400, "'stop' is not supported"),
        ({"prompt": "hello"}, None, 400, "no tokenizer.json"),
        ({"prompt": PROMPT, "model": "gpt-4"}, None, 404, "does not exist"),
    ],
)
def test_bad_requests_get_4xx_and_the_server_stays_up(servers, body, raw, status, message):
    url = servers[0].url
    code, data = post(url, body, raw)
    assert code == status
    assert message in json.loads(data)["error"]["message"]
    assert get(url, "/health")[0] == 200


def test_body_limits_and_routes(servers):
    url = servers[0].url
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 411 " in sock.recv(4096).split(b"\r\n")[0] + b" "
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert b"413" in sock.recv(4096).split(b"\r\n")[0]
    assert post(url, {}, path="/v1/chat/completions")[0] == 404
    assert get(url, "/nope")[0] == 404
    status, data = get(url, "/v1/models")
    assert status == 200 and json.loads(data)["data"][0]["id"] == "tiny"
    assert get(url, "/health")[0] == 200


def test_stream_matches_non_stream_and_sd_matches_no_sd(servers):
    plain, ngram = servers
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    status, data = post(plain.url, body)
    assert status == 200
    answer = json.loads(data)
    tokens = answer["choices"][0]["token_ids"]
    assert len(tokens) == 24 and answer["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 24,
        "total_tokens": 34,
    }
    events = stream_events(plain.url, {**body, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 24
    streamed = [t for e in events[:-2] for t in e["choices"][0]["token_ids"]]
    assert streamed == tokens
    assert [e["choices"][0]["finish_reason"] for e in events[:-2]][-1] == "length"
    sd_events = stream_events(ngram.url, body)
    assert sd_events[-1] == "[DONE]" and all("usage" not in e for e in sd_events[:-1])
    assert [t for e in sd_events[:-1] for t in e["choices"][0]["token_ids"]] == tokens


def test_eos_stops_unless_ignored(servers):
    plain = servers[0]
    body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 0}
    tokens = json.loads(post(plain.url, {**body, "ignore_eos": True})[1])["choices"][0]["token_ids"]
    eos = tokens[5]  # make a token this model emits the end-of-sequence token
    saved, plain.engine.eos_token_ids = plain.engine.eos_token_ids, frozenset({eos})
    try:
        short = json.loads(post(plain.url, body)[1])["choices"][0]
        ignored = json.loads(post(plain.url, {**body, "ignore_eos": True})[1])["choices"][0]
    finally:
        plain.engine.eos_token_ids = saved
    assert short["token_ids"] == tokens[: tokens.index(eos) + 1] and short["finish_reason"] == "stop"
    assert ignored["token_ids"] == tokens and ignored["finish_reason"] == "length"


def test_seeded_sampling_is_reproducible(servers):
    plain = servers[0]
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "top_p": 0.9, "top_k": 20, "seed": 7}
    first = json.loads(post(plain.url, body)[1])["choices"][0]["token_ids"]
    second = json.loads(post(plain.url, body)[1])["choices"][0]["token_ids"]
    assert first == second and len(first) == 12


def test_metrics_endpoint_names(servers):
    plain, ngram = servers
    text = get(ngram.url, "/metrics")[1].decode()
    for name in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:generation_tokens_total",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="2"}',
    ):
        assert name in text
    assert "spec_decode" not in get(plain.url, "/metrics")[1].decode()


def test_engine_failure_fails_requests_and_health(tiny_model):
    running = start_server(tiny_model, "none", max_batch_size=2, max_seq_len=64)
    try:

        def broken_step():
            raise RuntimeError("device lost")

        running.engine.step = broken_step
        status, data = post(running.url, {"prompt": PROMPT, "max_tokens": 4})
        assert status == 500 and "device lost" in json.loads(data)["error"]["message"]
        assert get(running.url, "/health")[0] == 503
        assert post(running.url, {"prompt": PROMPT, "max_tokens": 4})[0] == 503
    finally:
        running.close()


def test_client_that_goes_away_is_aborted(tiny_model):
    """A streaming client that hangs up mid-answer frees its batch slot: the engine aborts the
    request long before its max_tokens, and /metrics counts it as finished by "abort"."""
    import struct
    import time

    running = start_server(tiny_model, max_seq_len=512)
    try:
        loop = running.server.loop
        parts = urllib.parse.urlsplit(running.url)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "temperature": 0, "ignore_eos": True,
                           "stream": True}).encode()
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        received = b""
        while b"data: " not in received:  # the headers may come alone: wait for the first event
            chunk = sock.recv(4096)
            assert chunk, received
            received += chunk
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # hang up: RST
        sock.close()
        deadline = time.monotonic() + 30
        while loop.snapshot["num_running"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.snapshot["num_running"] == 0 and loop.snapshot["success_abort"] == 1
        assert loop.snapshot["generation_tokens"] < 480
        metrics = get(running.url, "/metrics")[1].decode()
        assert re.search(r'vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} 1\.0', metrics), metrics
    finally:
        running.close()
