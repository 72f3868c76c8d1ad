"""Every way a server can fail ends a request with a reason, within its timeouts."""

from __future__ import annotations

import time

import pytest
from serving_helpers import refused_url

from specscope.backends.openai.client import ClientConfig, run_load, stream_completion
from specscope.backends.openai.measure import MeasureError, measure
from specscope.backends.openai.prompts import Prompt

pytestmark = pytest.mark.slow  # fake servers that hang and trickle

PROMPT = Prompt("p", token_ids=(3, 4, 5))


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("http500", "HTTP 500: engine exploded"),
        ("malformed", "malformed stream: expected 'data: ...'"),
        ("no_usage", "no usage chunk"),
        ("badjson", "malformed stream: chunk is not JSON"),
        ("badchoices", "'choices' is not a list"),
        ("truncated", "closed before 'data: [DONE]'"),
        ("negative_usage", "usage.completion_tokens = -50, expected an integer from the 0 tokens streamed"),
        ("bool_usage", "usage.completion_tokens = True"),
        ("huge_usage", "usage.completion_tokens = 1000000000000000000000000000000"),
    ],
)
def test_broken_servers(fake_server, mode, reason):
    result = stream_completion(ClientConfig(fake_server(mode).url, "fake", idle_timeout_s=5), PROMPT)
    assert reason in result.error


def test_good_fake_server(fake_server):
    result = stream_completion(ClientConfig(fake_server("ok").url, "fake"), PROMPT)
    assert result.error is None and result.output_tokens == 8 and len(result.itl_s) == 3
    assert result.finish_reason == "length"


def test_connection_refused():
    result = stream_completion(ClientConfig(refused_url(), "m", idle_timeout_s=2), PROMPT)
    assert result.error == "connection refused"


def test_hanging_server_times_out(fake_server):
    url = fake_server("hang").url
    start = time.monotonic()
    result = stream_completion(ClientConfig(url, "fake", idle_timeout_s=0.5), PROMPT)
    assert result.error == "timeout" and time.monotonic() - start < 3


def test_slow_trickle_hits_the_request_deadline(fake_server):
    url = fake_server("ok", delay_s=0.4).url  # each chunk within the idle timeout, the whole too slow
    start = time.monotonic()
    result = stream_completion(ClientConfig(url, "fake", idle_timeout_s=2, request_timeout_s=0.6), PROMPT)
    assert "timeout" in result.error and time.monotonic() - start < 3


def test_load_records_each_failure_and_measure_refuses_partial_runs(fake_server):
    url = fake_server("http500").url
    load = run_load(ClientConfig(url, "fake"), [PROMPT] * 5, concurrency=2)
    assert len(load.failed) == 5 and load.summary()["num_failed"] == 5
    with pytest.raises(MeasureError, match="warm-up request failed: HTTP 500"):
        measure(ClientConfig(url), [PROMPT], 1)
    with pytest.raises(MeasureError, match="connection refused"):
        measure(ClientConfig(refused_url()), [PROMPT], 1)


def test_an_interrupted_load_sends_no_more_requests(monkeypatch):
    """Probe: Ctrl-C during a sweep's cell left its workers sending every remaining request (4 more
    requests of 600 tokens, 8.7 s) before the interrupt went on. Interrupted, the load takes no
    next request: those in flight end, and the interrupt goes on."""
    from specscope.backends.openai import client

    sent = []

    def slow(config, prompt):
        sent.append(prompt)
        if len(sent) == 1:
            raise KeyboardInterrupt
        time.sleep(0.05)
        return None

    monkeypatch.setattr(client, "stream_completion", slow)
    with pytest.raises(KeyboardInterrupt):
        run_load(ClientConfig("http://127.0.0.1:9", "fake"), [PROMPT] * 40, concurrency=2)
    assert len(sent) <= 3  # the interrupted one, and at most one more from each other worker


def test_a_server_running_fewer_requests_than_the_batch_is_said():
    """Probe: a url engine whose server ran at most 4 requests at once was recorded at batch size 8
    (the other 4 waited in its queue), unsaid. Each row keeps the most requests that streamed at
    once, and the sweep says where it is below the batch size — a note, not a refusal: a server
    that prefills long prompts one at a time beside short outputs looks the same (a review)."""
    from specscope.backends.openai.client import LoadResult, RequestResult
    from specscope.backends.openai.measure import _Measurement
    from specscope.cli.sweep import crowded_cells

    results = [RequestResult(f"r{i}", output_tokens=3, sent_s=0.0, chunk_s=[t, t + 0.5, t + 1.0], chunk_tokens=[1] * 3)
               for i, t in enumerate([1.0] * 4 + [3.0] * 4)]
    load = LoadResult(8, 5.0, results)
    assert load.peak_streaming() == (4, 8, 1.0)
    run = object.__new__(_Measurement)
    run.config, run.concurrency, run.loads, run.spans = ClientConfig("http://x", "m"), 8, [load], []
    run.metrics_error = "not scraped"
    row = run.finish()[0]
    assert row["peak_streaming"] == 4
    assert crowded_cells([{**row, "status": "ok", "method": "ngram", "k": 3}]) == ["ngram k=3 B=8 (at most 4)"]
    instant = LoadResult(2, 0.1, [RequestResult(f"r{i}", output_tokens=2, chunk_s=[0.001 * i, 0.001 * i + 0.001],
                                                chunk_tokens=[1, 1]) for i in range(2)])
    run.loads, run.concurrency = [instant], 2
    assert run.finish()[0]["peak_streaming"] is None  # spans of a millisecond tell nothing


def test_interleaved_replicas_take_the_segments_in_turn(fake_server):
    """Run A on two processes, run B on one; 8 requests in 4 segments of 2: A's replica 0 serves
    segments 0 and 2, replica 1 segments 1 and 3 (each: 2 warm-ups — a short one, then one as
    long as the longest prompt per request the run keeps in flight — + 4 requests), B's one all
    eight (+ 2); A's counters are its own requests' only, summed over both processes (3 drafts
    each: 24), though each process counts its warm-up too."""
    from specscope.backends.openai.measure import measure_interleaved

    a0, a1, b0 = fake_server(), fake_server(), fake_server()
    (row_a, load_a), (row_b, _) = measure_interleaved(
        [[ClientConfig(a0.url, "fake"), ClientConfig(a1.url, "fake")], [ClientConfig(b0.url, "fake")]],
        [PROMPT] * 8, [1, 1], 4)
    assert (a0.completions, a1.completions, b0.completions) == (6, 6, 10)
    assert load_a.segment_of == (0, 0, 1, 1, 2, 2, 3, 3)
    assert row_a["num_drafts"] == 24 and row_b["num_drafts"] == 24 and row_a["num_failed"] == 0


@pytest.mark.parametrize(
    "style, source, alpha, tau",
    [
        ("vllm", "vllm counters, delta over the run", 4 / 6, 1 + 4 / 3),
        ("sglang", "sglang gauges, last logging interval", 0.75, 2.5),
        ("none", None, None, None),
    ],
)
def test_acceptance_sources(fake_server, style, source, alpha, tau):
    row = measure(ClientConfig(fake_server("ok", metrics=style).url), [PROMPT] * 3, 2)
    assert row["acceptance_source"] == source and row["num_failed"] == 0 and row["output_tokens"] == 24
    assert row["acceptance_rate"] == (pytest.approx(alpha) if alpha else None)
    assert row["drafting_acceptance_length"] == (pytest.approx(tau) if tau else None)
    assert row["mean_acceptance_length"] >= 1  # τ, from the stream whatever the server's counters
    assert (row["metrics_error"] is not None) == (style == "none")
    if style == "vllm":
        assert (row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"]) == (9, 18, 12)


def test_an_error_page_is_named_on_one_line():
    """A server that is not an OpenAI one answers with an HTML page: its text, on one line."""
    from specscope.backends.openai.client import _error_message

    page = b"<!DOCTYPE HTML>\n<html>\n  <head><title>Error response</title></head>\n  <body>404</body>\n</html>\n"
    message = _error_message(404, page)
    assert message.startswith("HTTP 404: <!DOCTYPE HTML> <html> <head>") and "\n" not in message
    assert _error_message(400, b'{"error": {"message": "bad k"}}') == "HTTP 400: bad k"


def test_a_server_is_warmed_up_at_the_runs_largest_step(fake_server, caplog):
    """Before a run is timed its server gets a short request, then as many requests at once as the
    run keeps in flight, each as long as its longest prompt yet none of its prompts (the warm-up
    prompt repeated: a server caching prefixes would serve a measured prompt from its cache); a
    server that refuses those (past its context) is warmed by the short one, and the log says so."""
    from specscope.backends.openai.measure import measure_load, stretched

    warm = Prompt("w", text="abc")
    assert stretched(warm, [Prompt("long", text="x" * 8), Prompt("s", text="y")]).text == "abcabcab"
    assert stretched(Prompt("w", token_ids=(7, 8)), [Prompt("long", token_ids=(1,) * 5)]).token_ids == (7, 8, 7, 8, 7)
    assert stretched(warm, [Prompt("ids", token_ids=(1, 2))]) == warm  # no text prompt to take the length of
    server = fake_server(delay_s=0.05)
    prompts = [Prompt(f"p{i}", token_ids=(3,) * (i + 1)) for i in range(5)]
    measure_load(ClientConfig(server.url, "fake"), prompts, 3, PROMPT)
    short, *burst = server.prompts[:4]
    assert short[1] == [3, 4, 5] and [p for _, p in burst] == [[3, 4, 5, 3, 4]] * 3  # PROMPT stretched to 5 ids
    assert max(t for t, _ in burst) - min(t for t, _ in burst) < 0.1  # at once: each streams for 0.2 s
    assert len(server.prompts) == 1 + 3 + 5
    refusing = fake_server(refuse=lambda prompt: prompt[:3] == [3, 4, 5] and len(prompt) > 3)  # the stretched ones
    measure_load(ClientConfig(refusing.url, "fake"), prompts[3:], 8, PROMPT)  # two in flight at most
    assert len(refusing.prompts) == 1 + 2 + 2 and "warmed up by one short request" in caplog.text
