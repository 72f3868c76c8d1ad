"""`specscope serve` over real loopback HTTP: validation answers 4xx and the server stays up;
streamed and unstreamed answers agree; SD answers equal no-SD answers (greedy)."""

from __future__ import annotations

import http.client
import io
import json
import re
import socket
import threading
import time
import urllib.parse

import pytest
from serving_helpers import VOCAB, RunningServer, start_server, write_chat_model

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


def test_neutral_values_of_unsupported_fields_are_taken(servers):
    """n 1, echo false, logprobs false (chat's neutral value; it was refused), penalties 0 and 0.0."""
    code, _ = post(servers[0].url, {"prompt": PROMPT, "max_tokens": 2, "n": 1, "echo": False, "logprobs": False,
                                    "presence_penalty": 0, "frequency_penalty": 0.0})
    assert code == 200
    # whole numbers written as floats, as vLLM reads its integer fields (a review: refused)
    code, data = post(servers[0].url, {"prompt": PROMPT, "max_tokens": 2, "n": 1.0, "best_of": 1.0, "top_logprobs": 0.0})
    assert code == 200, data
    # the empty defaults some clients always send (they were refused)
    code, data = post(servers[0].url, {"prompt": PROMPT, "max_tokens": 2, "logit_bias": {}, "tools": [],
                                       "top_logprobs": 0, "suffix": "", "tool_choice": "none"})
    assert code == 200, data


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
        ({"prompt": PROMPT, "max_tokens": 60}, None, 400, "exceeds the maximum sequence length (max_model_len) 64"),
        ({"prompt": list(range(2, 62)) * 2, "max_tokens": 1}, None, 400, "leaves no room for an output"),
        ({"prompt": list(range(2, 62)) * 2, "max_tokens": None}, None, 400,  # it quoted a max_tokens of -56
         "prompt (120 tokens) leaves no room for an output in the maximum sequence length (max_model_len) 64"),
        ({"prompt": PROMPT, "n": True}, None, 400, "'n' is not supported"),  # true == 1 in Python: of its type
        ({"prompt": PROMPT, "echo": 0}, None, 400, "'echo' is not supported"),
        ({"prompt": PROMPT, "model": 5}, None, 400, "'model': expected a model name"),
        ({"prompt": PROMPT, "temperature": -1}, None, 400, "'temperature'"),
        ({"prompt": PROMPT, "top_p": 0}, None, 400, "'top_p'"),
        ({"prompt": PROMPT, "top_k": 1.5}, None, 400, "'top_k'"),
        ({"prompt": PROMPT, "seed": "x"}, None, 400, "'seed'"),
        ({"prompt": PROMPT, "stream": "yes"}, None, 400, "'stream'"),
        ({"prompt": PROMPT, "n": 2}, None, 400, "'n' is not supported"),
        ({"prompt": PROMPT, "use_beam_search": True}, None, 400, "'use_beam_search' is not supported"),
        # vLLM's extensions that change the output were answered 200 as if absent
        ({"prompt": PROMPT, "allowed_token_ids": [5]}, None, 400, "'allowed_token_ids' is not supported"),
        ({"prompt": PROMPT, "truncate_prompt_tokens": 2}, None, 400, "'truncate_prompt_tokens' is not supported"),
        ({"prompt": PROMPT, "skip_special_tokens": False}, None, 400, "'skip_special_tokens' is not supported"),
        ({"prompt": PROMPT, "guided_choice": ["yes", "no"]}, None, 400, "'guided_choice' is not supported"),
        ({"prompt": PROMPT, "stop": ["\n"]}, None, 400, "'stop': stop strings need the model's tokenizer.json"),
        ({"prompt": PROMPT, "response_format": {"type": "json_object"}}, None, 400, "'response_format'"),
        ({"prompt": PROMPT, "stop_token_ids": [VOCAB]}, None, 400, "'stop_token_ids'"),
        ({"prompt": "hello"}, None, 400, "no tokenizer.json"),
        ({"prompt": PROMPT, "model": "gpt-4"}, None, 404, "does not exist"),
        ({"prompt": PROMPT, "stream_options": {"include_usage": True}}, None, 400,  # ignored unsaid
         "'stream_options': only with \"stream\": true"),
    ],
)
def test_bad_requests_get_4xx_and_the_server_stays_up(servers, body, raw, status, message):
    url = servers[0].url
    code, data = post(url, body, raw)
    assert code == status
    assert message in json.loads(data)["error"]["message"]
    assert get(url, "/health")[0] == 200


def test_the_neutral_values_of_refused_fields_pass(servers):
    """Clients that send the defaults of vLLM's output-changing extensions are served as without them."""
    url = servers[0].url
    plain = json.loads(post(url, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0})[1])["choices"][0]["token_ids"]
    code, data = post(url, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "allowed_token_ids": [], "skip_special_tokens": True,
                            "chat_template_kwargs": {}, "guided_json": None})
    assert code == 200 and json.loads(data)["choices"][0]["token_ids"] == plain


def test_body_limits_and_routes(servers):
    url = servers[0].url
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 411 " in sock.recv(4096).split(b"\r\n")[0] + b" "
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert b"413" in sock.recv(4096).split(b"\r\n")[0]
    assert post(url, {}, path="/v1/nope")[0] == 404
    assert get(url, "/nope")[0] == 404
    status, data = get(url, "/v1/models")
    assert status == 200 and json.loads(data)["data"][0]["id"] == "tiny"
    assert json.loads(data)["data"][0]["max_model_len"] == 64
    status, data = get(url, "/v1/models/tiny")
    assert status == 200 and json.loads(data)["id"] == "tiny"
    assert get(url, "/v1/models/gpt-4")[0] == 404
    assert get(url, "/health")[0] == 200


def test_http_framing_methods_and_request_targets(servers):
    """A route's other method is 405 (naming the methods it answers), not 404; HEAD answers as GET
    without a body (it was 405); two different
    Content-Lengths, or one int() reads but is no decimal number, are 400 (the first was taken,
    '4_9' read as 49); a target in absolute form is its path (it was 404)."""
    url = servers[0].url
    parts = urllib.parse.urlsplit(url)
    assert get(url, "/v1/completions")[0] == 405 and post(url, {}, path="/health")[0] == 405
    assert post(url, {}, path="/v1/models")[0] == 405

    def raw(request: bytes) -> bytes:
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            sock.sendall(request)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    head = raw(b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # GET's headers, no body
    length = len(json.dumps({"object": "list", "data": [json.loads(get(url, "/v1/models")[1])["data"][0]]}).encode())
    assert b" 200 " in head.split(b"\r\n")[0] and head.endswith(b"\r\n\r\n") and b"Content-Length: %d" % length in head
    for request, allow in ((b"PUT /health", b"GET, HEAD"), (b"HEAD /v1/completions", b"POST"),
                           (b"DELETE /v1/models/tiny", b"GET, HEAD")):  # a 405 names what the route answers
        answer = raw(request + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        assert b" 405 " in answer.split(b"\r\n")[0] and b"\r\nAllow: " + allow + b"\r\n" in answer, answer
    body = json.dumps({"prompt": PROMPT, "max_tokens": 2}).encode()
    two = raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))
    assert b" 400 " in two.split(b"\r\n")[0] and b"Content-Length given 2 times" in two
    underscored = raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n%s"
                      % (f"{len(body) // 10}_{len(body) % 10}".encode(), body))
    assert b" 400 " in underscored.split(b"\r\n")[0] and b"expected decimal digits" in underscored
    absolute = raw(b"POST %s/v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                   % (url.encode(), len(body), body))
    assert b" 200 " in absolute.split(b"\r\n")[0]


def test_a_body_that_does_not_arrive_is_408_not_500(tiny_model, monkeypatch):
    """A client announcing 33 bytes and sending 10: after the handler's timeout the answer was a
    500 "internal error: TimeoutError" and a logged traceback."""
    from specscope.serve.server import CompletionHandler

    monkeypatch.setattr(CompletionHandler, "timeout", 0.5)
    running = start_server(tiny_model, "none", max_batch_size=2, max_seq_len=64)
    try:
        parts = urllib.parse.urlsplit(running.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 33\r\n\r\n{\"prompt\":")
            answer = b"".join(iter(lambda: sock.recv(65536), b""))
        assert b" 408 " in answer.split(b"\r\n")[0] and b"did not arrive within 0.5 s" in answer
        assert get(running.url, "/health")[0] == 200
    finally:
        running.close()


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
    options = {"include_usage": True, "continuous_usage_stats": True}  # vLLM's: the usage so far on every chunk
    events = stream_events(ngram.url, {**body, "max_tokens": 24.0, "stream_options": options})  # 24.0: vLLM's 24
    counted = [sum(len(e["choices"][0]["token_ids"]) for e in events[: i + 1]) for i in range(len(events) - 2)]
    assert [e["usage"]["completion_tokens"] for e in events[:-2]] == counted and counted[-1] == 24
    assert events[-2]["usage"]["total_tokens"] == 34


def test_max_tokens_absent_is_16_and_null_is_the_rest_of_max_model_len(servers):
    """Completions: no max_tokens generates OpenAI's 16; an explicit null, vLLM's reading, the
    rest of max_model_len (64) after the prompt's 10 tokens."""
    plain = servers[0]
    body = {"prompt": PROMPT, "temperature": 0, "ignore_eos": True}
    for extra, expected in (({}, 16), ({"max_tokens": None}, 64 - len(PROMPT))):
        status, data = post(plain.url, {**body, **extra})
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == expected, extra


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
    # EOS listed in stop_token_ids too: as vLLM, EOS stops it first and gives no stop_reason (a review: it gave
    # the token); ignored, the listed token stops it and is its reason
    plain.engine.eos_token_ids = frozenset({eos})
    try:
        listed = json.loads(post(plain.url, {**body, "stop_token_ids": [eos]})[1])["choices"][0]
        ignored = json.loads(post(plain.url, {**body, "stop_token_ids": [eos], "ignore_eos": True})[1])["choices"][0]
    finally:
        plain.engine.eos_token_ids = saved
    assert (listed["finish_reason"], listed["stop_reason"]) == ("stop", None)
    assert (ignored["finish_reason"], ignored["stop_reason"]) == ("stop", eos)


def test_seeded_sampling_is_reproducible(servers):
    plain = servers[0]
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "top_p": 0.9, "top_k": 20, "seed": 7}
    first = json.loads(post(plain.url, body)[1])["choices"][0]["token_ids"]
    second = json.loads(post(plain.url, body)[1])["choices"][0]["token_ids"]
    assert first == second and len(first) == 12


def test_a_negative_seed_is_the_apis_signed_64_bits(servers):
    """The OpenAI API's seed is a signed 64-bit integer: -1 was refused with a 400. It is taken
    modulo 2^64, the same generator as 2^64 - 1."""
    plain = servers[0]
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "ignore_eos": True}
    signed = json.loads(post(plain.url, {**body, "seed": -1})[1])["choices"][0]["token_ids"]
    assert signed == json.loads(post(plain.url, {**body, "seed": 2**64 - 1})[1])["choices"][0]["token_ids"]
    assert post(plain.url, {**body, "seed": -(2**63)})[0] == 200


def test_every_chunk_of_a_stream_says_when_its_request_was_created(servers, monkeypatch):
    """``created`` is the request's, the same on every chunk (it was read again for each, and moved
    from second to second over a long stream)."""
    import itertools
    import time
    import types

    from specscope.serve import protocol, server

    ticks = itertools.count(1_700_000_000)  # the server's every read of the wall clock a second later
    clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.time = lambda: next(ticks)
    for module in (protocol, server):
        monkeypatch.setattr(module, "time", clock)
    events = stream_events(servers[0].url, {"prompt": PROMPT, "max_tokens": 8, "stream": True, "ignore_eos": True})
    assert len({e["created"] for e in events[:-1]}) == 1


def test_first_streamed_chunk_carries_the_prefill_token_alone(tiny_model):
    """Time to first token is one prefill: the first event holds one token, not an SD step.
    (The target drafting for itself: every SD step emits k + 1 = 4 tokens.)"""
    running = start_server(tiny_model, "draft", k=3, max_seq_len=64, draft_dir=tiny_model)
    try:
        body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        events = stream_events(running.url, body)[:-1]
    finally:
        running.close()
    assert [len(e["choices"][0]["token_ids"]) for e in events] == [1, 4, 4, 4, 3]


def test_step_records_are_appended_as_steps_end(tiny_model, tmp_path):
    """``serve --step-records``: one StepRecord line per engine step, appended (what was in
    the file stays), read back by the cost-model fit's reader; the steps emit every token."""
    from specscope.analysis.timesplit import read_steps
    from specscope.fileio import open_appended

    path = tmp_path / "steps.jsonl"
    path.write_text("")
    with open_appended(path, "--step-records") as sink:
        running = start_server(tiny_model, "draft", k=3, max_seq_len=64, draft_dir=tiny_model, step_records=sink)
        try:
            for _ in range(2):
                status, _ = post(running.url, {"prompt": PROMPT, "max_tokens": 16, "temperature": 0,
                                               "ignore_eos": True})
                assert status == 200
                lines = len(path.read_text().splitlines())
                assert lines == len(running.engine.step_records)  # written as each step ended
        finally:
            running.close()
    steps = read_steps([path])
    assert {s.method for s in steps} == {"draft"} and all(s.k == 3 for s in steps)
    assert sum(sum(s.tokens_emitted) for s in steps) == 32
    assert [s.step for s in steps] == list(range(len(steps)))


class SlowSink(io.StringIO):
    """A step-records file whose every write takes ``WRITE_S`` seconds."""

    WRITE_S = 0.05

    def write(self, text: str) -> int:
        time.sleep(self.WRITE_S)
        return super().write(text)


def test_the_loops_own_time_is_charged_to_the_next_step_not_idle_time(tiny_model):
    """The serving loop's time between two steps (here: writing the last step's record, made
    slow) lands in the next step's ``overhead_s``, so records cover every chunk gap; the first
    step after the loop sat idle (between two requests) is not charged the idle time."""
    sink = SlowSink()
    running = start_server(tiny_model, "ngram", k=2, max_seq_len=64, step_records=sink)
    try:
        for _ in range(2):
            assert post(running.url, {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True})[0] == 200
            time.sleep(0.2)  # idle between the requests
    finally:
        running.close()
    steps = [json.loads(line) for line in sink.getvalue().splitlines()]
    firsts = [i for i, s in enumerate(steps) if s["prefill_tokens"] > 0]
    assert len(firsts) == 2 and len(steps) > 4
    for i, step in enumerate(steps):
        if i in firsts:
            assert step["overhead_s"] < SlowSink.WRITE_S  # after idle: nothing of the wait
        else:
            assert step["overhead_s"] >= SlowSink.WRITE_S  # the previous record's slow write


@pytest.mark.parametrize(
    "extra",
    [{"temperature": 1e-300}, {"temperature": 1e-6}, {"seed": 2**64 - 1, "temperature": 0.5}],
)
def test_extreme_but_valid_values_are_served(servers, extra):
    body = {"prompt": PROMPT, "max_tokens": 8, "ignore_eos": True, **extra}
    for running in servers:
        status, data = post(running.url, body)
        assert status == 200 and len(json.loads(data)["choices"][0]["token_ids"]) == 8
        assert get(running.url, "/health")[0] == 200


@pytest.fixture(scope="module")
def chat_server(tiny_model, tmp_path_factory):
    running = start_server(write_chat_model(tiny_model, tmp_path_factory.mktemp("chat") / "m"), "ngram")
    yield running
    running.close()


def test_chat_renders_the_template_and_streams_the_same_answer(chat_server):
    url = chat_server.url
    messages = [{"role": "system", "content": "w9"}, {"role": "user", "content": [{"type": "text", "text": "w5 w6"}]}]
    body = {"messages": messages, "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    status, data = post(url, body, path="/v1/chat/completions")
    assert status == 200, data
    answer = json.loads(data)
    message = answer["choices"][0]["message"]
    assert answer["object"] == "chat.completion" and message["role"] == "assistant"
    # the template: bos w0, "w3 w9 " (system), "w2 w5 w6 " (user), then the assistant's w4
    prompt = [0, 3, 9, 2, 5, 6, 4]
    completion = json.loads(post(url, {**body, "prompt": prompt, "messages": None})[1])["choices"][0]
    assert answer["usage"]["prompt_tokens"] == len(prompt)
    assert message["content"] == completion["text"] and answer["choices"][0]["token_ids"] == completion["token_ids"]
    status, raw = post(url, {**body, "stream": True}, path="/v1/chat/completions")
    chunks = [json.loads(b[6:]) for b in raw.decode().split("\n\n") if b.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == message["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and raw.endswith(b"data: [DONE]\n\n")


def test_a_prompt_too_long_for_any_tokenisation_is_refused_untokenised(chat_server):
    """More characters than max_model_len tokens of the longest token could hold: refused before
    tokenising (a 6 MB prompt held every other request, /health too, for 8 s); chat's
    max_completion_tokens does not hide a bad max_tokens beside it."""
    server = chat_server.server
    limit = 4 * server.token_chars * server.max_model_len
    started = time.monotonic()
    status, data = post(chat_server.url, {"prompt": "a" * (limit + 1), "max_tokens": 1})
    assert status == 400 and f"{limit + 1} characters are more than" in json.loads(data)["error"]["message"]
    assert time.monotonic() - started < 5
    status, data = post(chat_server.url, {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3,
                                          "max_tokens": -5}, path="/v1/chat/completions")
    assert status == 400 and "'max_tokens'" in json.loads(data)["error"]["message"]


def test_a_stopping_server_ends_every_request_under_way_with_503(tiny_model):
    """Requests running and queued when the server stops: each gets a 503 "server shutting down"
    (a stream: an error event and [DONE]); they were cut off without a word, or got an empty reply."""
    import threading

    running = start_server(tiny_model, "none", max_batch_size=1, max_seq_len=64)
    answers: dict[int, tuple[int, bytes]] = {}

    def ask(i: int) -> None:
        answers[i] = post(running.url, {"prompt": PROMPT, "max_tokens": 50, "ignore_eos": True, "stream": i % 2 == 1})

    askers = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for asker in askers:
        asker.start()
    deadline = time.monotonic() + 10
    while running.server.loop.snapshot["num_waiting"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # one running, the other three queued (one not yet received would meet a closed socket)
    running.close()
    for asker in askers:
        asker.join(10)
    assert len(answers) == 4
    for i, (status, data) in answers.items():
        if i % 2 == 0 and status != 200:  # not streamed: a JSON error
            assert status == 503 and "server shutting down" in json.loads(data)["error"]["message"]
        elif i % 2 == 1 and status == 200 and b"shutting down" in data:  # streamed: the error, then [DONE]
            assert data.rstrip().endswith(b"data: [DONE]")
        elif status == 503:  # queued streams fail before their headers
            assert b"shutting down" in data
    assert any(b"shutting down" in data for _, data in answers.values())


def test_chat_without_a_template_is_refused(servers):
    status, data = post(servers[0].url, {"messages": [{"role": "user", "content": "hi"}]}, path="/v1/chat/completions")
    assert status == 400 and "no chat template" in json.loads(data)["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_end_the_output_before_them(chat_server, stream):
    url = chat_server.url
    body = {"prompt": "w5 w6 w7 w8 w5 w6", "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    full = json.loads(post(url, body)[1])["choices"][0]
    words = full["text"].split()
    stop = f"{words[3]} {words[4]}"  # two words the output reaches
    cut = full["text"].index(stop)
    tokens_needed = next(n for n in range(1, 21) if stop in " ".join(f"w{t}" for t in full["token_ids"][:n]))
    request = {**body, "stop": ["never-there", stop]}
    loop = chat_server.server.loop
    before = loop.snapshot["success_stop"]
    if stream:
        events = stream_events(url, request)[:-1]
        text = "".join(e["choices"][0]["text"] for e in events)
        tokens = [t for e in events for t in e["choices"][0]["token_ids"]]
        last = events[-1]["choices"][0]
    else:
        last = json.loads(post(url, request)[1])["choices"][0]
        text, tokens = last["text"], last["token_ids"]
    assert text == full["text"][:cut] and tokens == full["token_ids"][:tokens_needed]
    assert last["finish_reason"] == "stop" and last["stop_reason"] == stop
    assert loop.snapshot["success_stop"] == before + 1  # counted once its client has the answer (probe: it
    # was counted only when the engine aborted it, after one more step, so /metrics read then lacked it)
    deadline = time.monotonic() + 30  # the engine aborts the request at its next iteration
    while loop.snapshot["num_running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loop.snapshot["success_stop"] == before + 1 and loop.snapshot["num_running"] == 0  # and once only


def test_a_stop_string_in_the_last_tokens_never_takes_a_count_back(chat_server):
    """A review: a stop string completed by the last token max_tokens allows. The engine finished
    the job (length) and the loop counted it; its handler found the stop string and moved the
    count to stop — a /metrics read between saw success_length fall, which a counter never does.
    A job with stop strings is counted once its handler has read its last tokens."""
    url = chat_server.url
    body = {"prompt": "w5 w6 w7 w8 w5 w6", "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    full = json.loads(post(url, body)[1])["choices"][0]
    words = full["text"].split()
    stop = " ".join(words[-2:])  # completed by the last token
    needed = next(n for n in range(1, 21) if stop in " ".join(f"w{t}" for t in full["token_ids"][:n]))
    loop, seen = chat_server.server.loop, []
    before = dict(loop.snapshot)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append((loop.snapshot["success_length"], loop.snapshot["success_stop"]))
            time.sleep(0.0002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        last = json.loads(post(url, {**body, "max_tokens": needed, "stop": [stop]})[1])["choices"][0]
    finally:
        done.set()
        watcher.join()
    assert last["finish_reason"] == "stop" and last["stop_reason"] == stop
    assert all(length == before["success_length"] for length, _ in seen)  # never counted as length
    assert (loop.snapshot["success_length"], loop.snapshot["success_stop"]) == (before["success_length"],
                                                                               before["success_stop"] + 1)


def test_stop_token_ids_and_min_tokens(servers):
    url = servers[1].url
    body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    full = json.loads(post(url, body)[1])["choices"][0]["token_ids"]
    stop = full[2]
    first = full.index(stop)
    choice = json.loads(post(url, {**body, "stop_token_ids": [stop]})[1])["choices"][0]
    assert choice["token_ids"] == full[: first + 1]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    before = json.loads(post(url, {**body, "max_tokens": first})[1])["choices"][0]["text"]
    assert choice["text"] == before  # as vLLM: the stop token's text left out (it was returned)
    later = json.loads(post(url, {**body, "stop_token_ids": [stop], "min_tokens": 8})[1])["choices"][0]
    assert stop not in later["token_ids"][:8] and len(later["token_ids"]) > 8
    plain = json.loads(post(servers[0].url, {**body, "stop_token_ids": [stop], "min_tokens": 8})[1])
    assert plain["choices"][0]["token_ids"] == later["token_ids"]  # SD stays lossless


def test_max_model_len_defaults_to_max_position_embeddings(tiny_model):
    from specscope.assemble import load_engine
    from specscope.serve.server import create_server

    engine, tokenizer = load_engine(tiny_model, "none", max_batch_size=1)
    running = RunningServer(create_server(engine, tokenizer, "tiny", "127.0.0.1", 0))
    try:
        assert json.loads(get(running.url, "/v1/models")[1])["data"][0]["max_model_len"] == 512
        status, data = post(running.url, {"prompt": PROMPT, "max_tokens": 503})
        assert status == 400 and "max_model_len" in json.loads(data)["error"]["message"]
        assert post(running.url, {"prompt": PROMPT, "max_tokens": 502, "temperature": 0})[0] == 200
    finally:
        running.close()


def test_metrics_endpoint_names(servers):
    plain, ngram = servers
    for _ in range(2):
        assert post(ngram.url, {"prompt": PROMPT, "max_tokens": 8, "temperature": 0})[0] == 200
    text = get(ngram.url, "/metrics")[1].decode()
    for name in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:generation_tokens_total",
        # vLLM's labels on every series, engine included (a review: dashboards group by it)
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"}',
        'vllm:num_requests_running{engine="0",model_name="tiny"}',
    ):
        assert name in text
    assert "spec_decode" not in get(plain.url, "/metrics")[1].decode()
    # vLLM's two histograms, counted as vLLM counts them (a review: the calibration's cross-check had
    # none to read from specscope serve): an iteration's tokens are those its requests emitted plus
    # the prompts of those it gave their first token; a request's latencies come after its first
    from specscope.backends.openai.metrics import parse_metrics

    def counter(name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))

    snap = parse_metrics(text)
    tokens_sum, steps = snap.histograms["vllm:iteration_tokens_total"]
    assert tokens_sum == counter("vllm:prompt_tokens_total") + counter("vllm:generation_tokens_total") and steps > 0
    assert 'vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="tiny"}' in text
    latency_sum, latencies = snap.histograms["vllm:inter_token_latency_seconds"]
    assert latencies > 0 and 0 < latency_sum / latencies < 10


def beside_a_bad_request(url: str, body: dict) -> dict[str, tuple[int, bytes]]:
    """``body`` and the same request with a prompt starting with token 63 (the one a poisoned step
    fails), posted at once: each one's (status, data), by "good" and "bad"."""
    import threading

    answers = {}
    threads = [threading.Thread(target=lambda name=name, b=b: answers.__setitem__(name, post(url, b)))
               for name, b in (("bad", {**body, "prompt": [63, 5, 6]}), ("good", body))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def test_a_failing_request_ends_alone_and_the_server_keeps_serving(tiny_model, servers):
    """A step that raises for one request (here: any step holding a prompt that starts with
    token 63) ends that request with 500; the request beside it gets its exact greedy answer."""
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    expected = json.loads(post(servers[0].url, body)[1])["choices"][0]["token_ids"]
    running = start_server(tiny_model, "ngram", max_batch_size=4, max_seq_len=64)
    try:
        engine, step = running.engine, running.engine.step

        def poisoned_step(only=None):
            if any(s.history[0] == 63 and (only is None or s.request_id in only) for s in engine._running):
                raise RuntimeError("device assert in this row")
            return step(only=only)

        engine.step = poisoned_step
        answers = beside_a_bad_request(running.url, body)
        status, data = answers["bad"]
        assert status == 500 and "device assert in this row" in json.loads(data)["error"]["message"]
        status, data = answers["good"]
        assert status == 200 and json.loads(data)["choices"][0]["token_ids"] == expected
        assert get(running.url, "/health")[0] == 200
        assert json.loads(post(running.url, body)[1])["choices"][0]["token_ids"] == expected
    finally:
        running.close()


def test_a_failed_batch_step_leaves_a_seeded_requests_draws_as_they_were(tiny_model, servers):
    """A batch step that draws from every row's generator and then fails (for its bad row) is
    retried row by row; a seeded sampled request beside the bad one still gets the answer it gets
    alone (2–5 of 16 differed: the failed step's draws had moved their generators)."""
    import torch

    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "seed": 7, "ignore_eos": True}
    expected = json.loads(post(servers[0].url, body)[1])["choices"][0]["token_ids"]
    running = start_server(tiny_model, "ngram", max_batch_size=4, max_seq_len=64)
    try:
        engine, step = running.engine, running.engine.step

        def poisoned_step(only=None):
            rows = [s for s in engine._running if only is None or s.request_id in only]
            if any(s.history[0] == 63 for s in rows):
                for s in rows:  # the failed step drew before it failed
                    torch.rand(3, generator=s.generator)
                raise RuntimeError("device assert in this row")
            return step(only=only)

        engine.step = poisoned_step
        answers = beside_a_bad_request(running.url, body)
        assert answers["bad"][0] == 500
        status, data = answers["good"]
        assert status == 200 and json.loads(data)["choices"][0]["token_ids"] == expected
    finally:
        running.close()


def test_a_broken_engine_fails_requests_and_health(tiny_model):
    """When the engine cannot even abort a failed request, its state is lost: 500, then 503."""
    running = start_server(tiny_model, "none", max_batch_size=2, max_seq_len=64)
    try:

        def broken(*args, **kwargs):
            raise RuntimeError("device lost")

        running.engine.step = running.engine.abort_request = broken
        status, data = post(running.url, {"prompt": PROMPT, "max_tokens": 4})
        assert status == 500 and "device lost" in json.loads(data)["error"]["message"]
        assert get(running.url, "/health")[0] == 503
        assert post(running.url, {"prompt": PROMPT, "max_tokens": 4})[0] == 503
    finally:
        running.close()


def test_a_client_that_leaves_before_its_whole_answer_is_aborted(tiny_model):
    """Without streaming nothing is written before the end, yet a client that hangs up is noticed
    within a moment: the engine aborts the request long before its max_tokens ("abort")."""
    running = start_server(tiny_model, max_seq_len=512)
    try:
        loop = running.server.loop
        parts = urllib.parse.urlsplit(running.url)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "temperature": 0, "ignore_eos": True}).encode()
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 30
        while not loop.snapshot["generation_tokens"] and time.monotonic() < deadline:  # it runs
            time.sleep(0.005)
        sock.close()
        while loop.snapshot["num_running"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.snapshot["num_running"] == 0 and loop.snapshot["success_abort"] == 1
        assert loop.snapshot["generation_tokens"] < 480
    finally:
        running.close()


def test_client_that_goes_away_is_aborted(tiny_model):
    """A streaming client that hangs up mid-answer frees its batch slot: the engine aborts the
    request long before its max_tokens, and /metrics counts it as finished by "abort"."""
    import struct

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


def test_a_streaming_client_that_leaves_while_queued_leaves_the_queue(tiny_model):
    """Probe: a streamed request whose client hung up while it waited for a batch slot was noticed
    only once admitted (writes notice a stream's client, and none came before its first tokens):
    it took a slot and ran a step or two. Now it leaves the queue within a moment, as a plain
    request does, while the request ahead of it runs on."""
    running = start_server(tiny_model, max_seq_len=512, max_batch_size=1)
    parts = urllib.parse.urlsplit(running.url)

    def send(stream):
        body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "temperature": 0, "ignore_eos": True,
                           "stream": stream}).encode()
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return sock

    try:
        loop = running.server.loop
        ahead = send(stream=False)
        deadline = time.monotonic() + 30
        while not loop.snapshot["generation_tokens"] and time.monotonic() < deadline:  # it runs, the slot taken
            time.sleep(0.005)
        queued = send(stream=True)
        while not loop.snapshot["num_waiting"] and time.monotonic() < deadline:
            time.sleep(0.005)
        queued.close()
        while loop.snapshot["num_waiting"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.snapshot["num_waiting"] == 0 and loop.snapshot["success_abort"] == 1
        assert loop.snapshot["num_running"] == 1  # the request ahead runs on
        ahead.close()
    finally:
        running.close()


def test_a_port_in_use_is_a_one_line_error(tiny_model):
    import os
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "specscope", "serve", "--model", str(tiny_model), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"specscope: error: --port: 127.0.0.1:{port} is already in use; choose another port (0: any free port)"
    ]


def test_tree_sd_server_answers_like_no_sd(tiny_model, servers):
    """A server whose engine verifies a 2x2x1 tree (self-draft) answers greedy requests exactly
    as the no-SD server does, every step accepting the full depth."""
    from serving_helpers import RunningServer

    from specscope.assemble import load_engine
    from specscope.serve.server import create_server
    from specscope.trees import TreeShape

    engine, tokenizer = load_engine(tiny_model, "draft", tiny_model, max_batch_size=2, max_seq_len=64,
                                    tree=TreeShape.parse("2x2x1"))
    tree_server = RunningServer(create_server(engine, tokenizer, "tiny", "127.0.0.1", 0))
    try:
        body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "ignore_eos": True}
        answers = [json.loads(post(server.url, body)[1])["choices"][0]["token_ids"]
                   for server in (servers[0], tree_server)]
        assert answers[0] == answers[1] and len(answers[0]) == 20
        assert engine.stats.mean_acceptance_length() == 19 / 5  # 20 tokens: 1 from the prefill, 4 + 4 + 4 + 4 + 3
    finally:
        tree_server.close()


def test_a_chat_messages_name_reaches_the_template_as_vllm_passes_it():
    from specscope.serve.protocol import ApiError, parse_chat_request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi", "name": "ann"}]}
    (message,) = parse_chat_request(json.dumps(body).encode(), "m").messages
    assert message == {"role": "user", "content": "hi", "name": "ann"}
    body["messages"][0]["name"] = 7
    with pytest.raises(ApiError, match=r"'messages\[0\]': 'name' must be text"):
        parse_chat_request(json.dumps(body).encode(), "m")


def test_step_records_cut_off_mid_line_lose_only_that_line(tmp_path, capsys):
    """Probe: a server stopped while writing a record left a half line; the next server's first
    record was glued to it and `costmodel fit` refused the whole file. The half line is dropped,
    said, before anything is appended."""
    from specscope.cli.serve import _refuse_foreign

    path = tmp_path / "steps.jsonl"
    whole = '{"step": 0, "tokens_verified": 2, "tokens_emitted": 1}\n'
    path.write_text(whole * 3 + '{"step": 3, "tokens_ver')
    _refuse_foreign(path)
    assert path.read_text() == whole * 3 and "dropped its half-written last line (23 bytes)" in capsys.readouterr().err
    _refuse_foreign(path)  # whole lines: nothing to drop
    assert path.read_text() == whole * 3
    path.write_text(whole * 2 + whole.strip())  # a whole record that lacks only its newline: kept, given one
    _refuse_foreign(path)
    assert path.read_text() == whole * 3


def test_jobs_waiting_for_free_slots_are_not_counted_as_queued():
    """--max-waiting counts jobs queued beyond the batch's free slots: a burst of four at an idle
    server of eight slots (max_waiting 1) was answered 200, 200, 503, 503 before the loop's turn."""
    from types import SimpleNamespace

    from specscope.engine.records import SpecDecodeStats
    from specscope.engine.sampling import SamplingParams
    from specscope.serve.engine_loop import EngineLoop, Job
    from specscope.serve.protocol import ApiError

    engine = SimpleNamespace(stats=SpecDecodeStats(k=1), slots=8)
    engine.free_slots = lambda: engine.slots
    loop = EngineLoop(engine, max_waiting=1)  # not started: every job stays waiting
    jobs = [Job(f"r{i}", [1, 2], 4, SamplingParams(), False) for i in range(9)]
    for job in jobs:
        loop.submit(job)  # eight into free slots, one queued beyond them
    with pytest.raises(ApiError, match="server busy: 1 requests already waiting"):
        loop.submit(Job("r9", [1, 2], 4, SamplingParams(), False))
    engine.slots = 0  # a full batch: the first waiting job is already one too many
    busy = EngineLoop(engine, max_waiting=1)
    busy.submit(jobs[0])
    with pytest.raises(ApiError):
        busy.submit(jobs[1])


@pytest.mark.parametrize("stop_strings", [False, True])
def test_a_job_whose_client_left_during_its_last_step_is_counted(stop_strings):
    """A review: a job with stop strings waits for its handler to read its last tokens before it is
    counted; when its client left during the step that finished it, no handler came, and it was
    never counted. A job whose handler is gone is counted when the engine finishes it."""
    import threading
    from types import SimpleNamespace

    from specscope.engine.records import SpecDecodeStats
    from specscope.engine.runner import StepOutput
    from specscope.engine.sampling import SamplingParams
    from specscope.serve.engine_loop import EngineLoop, Job

    stepping, finish, ids = threading.Event(), threading.Event(), []

    def step(only=None):
        stepping.set()
        finish.wait(10)
        return [StepOutput(rid, [7], True, "length") for rid in ids]

    engine = SimpleNamespace(stats=SpecDecodeStats(k=1), step_records=[], free_slots=lambda: 4,
                             has_capacity=lambda: True, add_request=lambda rid, *a, **k: ids.append(rid),
                             abort_request=lambda rid: None, step=step, generator_states=lambda: None)
    loop = EngineLoop(engine)
    loop.start()
    try:
        job = Job("r1", [1, 2, 3], 1, SamplingParams(), False, stop_strings=stop_strings)
        loop.submit(job)
        assert stepping.wait(10)
        loop.cancel(job)  # its client left (the handler's except), during the step that finishes it
        finish.set()
        deadline = time.monotonic() + 10
        while not job.counted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert job.counted and loop.snapshot["success_length"] == 1 and loop.snapshot["num_running"] == 0
    finally:
        loop.stop(1)
