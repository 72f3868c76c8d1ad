"""Which streamed chunks the client records as a step's: a vLLM stream without token ids (an EOS
step's chunk has empty text), a final choice of a finish_reason alone, a usage-only chunk."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from serving_helpers import _QuietServer

from specscope.backends.openai.client import ClientConfig, run_load, stream_completion
from specscope.backends.openai.prompts import Prompt
from specscope.costmodel.calibrate import CellRun, cell_gaps, chunk_counts


class ScriptedServer:
    """Answers every completion with the choices ``script(prompt)`` gives, one chunk each
    ``delay_s`` apart, then a usage-only chunk counting ``tokens`` and ``[DONE]``."""

    def __init__(self, script, delay_s: float = 0.0) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                choices, tokens = script(body["prompt"])
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for choice in choices:
                    time.sleep(delay_s)
                    self._event({"id": "c", "object": "text_completion", "choices": [{"index": 0, **choice}]})
                self._event({"id": "c", "object": "text_completion", "choices": [],
                             "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": tokens,
                                       "total_tokens": len(body["prompt"]) + tokens}})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, payload: dict) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def scripted():
    made = []

    def make(script, delay_s: float = 0.0) -> ScriptedServer:
        made.append(ScriptedServer(script, delay_s))
        return made[-1]

    yield make
    for server in made:
        server.close()


PROMPT = Prompt("p", token_ids=(3, 4, 5))
EOS = {"text": "", "finish_reason": "stop"}  # vLLM's chunk of the step that generated EOS, without token ids


@pytest.mark.parametrize("choices, tokens, chunk_tokens", [
    ([{"text": " a"}, {"text": " b"}, EOS], 3, [None] * 3),  # text only: every step's chunk, the EOS one too
    ([EOS], 1, [None]),  # EOS the only token: one chunk
    ([{"text": ""}, {"text": "\u00e9"}, {"text": " a", "finish_reason": "length"}], 3, [None] * 3),  # UTF-8
    ([{"text": "ab", "token_ids": [5, 6]}, {"text": "", "token_ids": [1]}, {"finish_reason": "stop"}], 3, [2, 1]),
    ([{"text": "ab", "token_ids": [5, 6]}, {"text": "", "token_ids": [], "finish_reason": "length"}], 2, [2]),
])
def test_a_chunk_is_recorded_for_each_step_that_streamed_one(scripted, choices, tokens, chunk_tokens):
    """A review: chunks of empty text were never recorded (vLLM streams one at the step that
    generates EOS, and at a step whose character is still incomplete), so output tokens exceeded
    the chunks and the fit refused an ordinary vLLM sweep as one streaming several steps per chunk.
    A choice of a finish_reason alone, or of no token ids, and the usage-only chunk are no step's."""
    result = stream_completion(ClientConfig(scripted(lambda _: (choices, tokens)).url, "fake"), PROMPT)
    assert result.error is None and result.output_tokens == tokens
    assert result.chunk_tokens == chunk_tokens and len(result.chunk_s) == len(chunk_tokens)
    assert result.ttft_s == result.chunk_s[0] and len(result.itl_s) == len(chunk_tokens) - 1
    assert result.finish_reason == choices[-1]["finish_reason"]


def test_tokens_without_a_chunk_that_streamed_them_fail_the_request(scripted):
    result = stream_completion(ClientConfig(scripted(lambda _: ([{"finish_reason": "stop"}], 2)).url, "fake"), PROMPT)
    assert result.error == "malformed stream: usage.completion_tokens = 2, but no chunk carried text or token_ids"


def test_a_vllm_sweep_without_token_ids_is_fitted_one_step_a_chunk(scripted):
    """The reviewer's repro, without a sweep: a vLLM-like server streaming text only, one chunk a
    step, every request ending on EOS (a chunk of empty text), one whose only token is EOS. Its
    none cell's timeline has a chunk per output token, each taken to carry one, and is fitted;
    before, it was refused (1.11 tokens per chunk, "several steps per chunk")."""
    def script(prompt: list[int]) -> tuple[list[dict], int]:
        steps = 1 if prompt[0] == 0 else 9
        return [{"text": " a"}] * (steps - 1) + [EOS], steps

    prompts = [Prompt(f"r{i}", token_ids=(i, 5, 6)) for i in range(6)]
    load = run_load(ClientConfig(scripted(script, delay_s=0.003).url, "fake"), prompts, 1)
    timeline = load.timeline()
    assert [len(r["chunk_ms"]) for r in timeline] == [1] + [9] * 5 == [r["output_tokens"] for r in timeline]
    assert all(chunk_counts(r).tolist() == [1.0] * len(r["chunk_ms"]) for r in timeline)
    cell = CellRun("c", "none", 0, None, 1, "w.jsonl", 1.0, None, timeline, {})
    assert (cell_gaps(cell).tokens[cell_gaps(cell).idle == 0] == 1).all()
