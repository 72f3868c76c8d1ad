"""Helpers for the serving tests: a tiny checkpoint, token-id workloads, the real server run
in-process, and a fake OpenAI-compatible server that can be told to misbehave."""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VOCAB = 64


def write_tiny_model(directory: Path) -> Path:
    """A 2-layer Llama (vocab 64, hidden 32) saved as safetensors, eos id 1."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=1,
        bos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger weights than the default init: peaked logits, repetitive output
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.3)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


CHAT_TEMPLATE = (
    "{{ bos_token }} {% for m in messages %}{{ 'w2' if m['role'] == 'user' else 'w3' }} {{ m['content'] }} "
    "{% endfor %}{% if add_generation_prompt %}w4{% endif %}"
)


def write_chat_model(tiny_model: Path, directory: Path, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """A copy of the tiny model with a word-level tokenizer (``w0``..``w63`` are ids 0..63,
    separated by spaces) and a tokenizer_config.json holding ``chat_template`` (none: ``None``):
    user turns start with ``w2``, others with ``w3``, the assistant's turn with ``w4``."""
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers

    shutil.copytree(tiny_model, directory)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "w0", "eos_token": "w1"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def write_workload(path: Path, count: int, seed: int = 0, length: int = 12) -> Path:
    """``count`` token-id prompts built from repeated 4-token motifs (n-gram drafting matches)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        motif = [rng.randrange(2, VOCAB) for _ in range(4)]
        ids = (motif * (length // 4 + 1))[:length]
        ids[rng.randrange(length)] = rng.randrange(2, VOCAB)
        rows.append({"id": f"r{i}", "prompt_token_ids": ids})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class RunningServer:
    """A :class:`~specscope.serve.server.CompletionServer` serving on a background thread."""

    def __init__(self, server) -> None:
        self.server = server
        self.thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def engine(self):
        return self.server.loop.engine

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def start_server(
    model_dir: Path,
    method: str = "none",
    k: int = 3,
    max_batch_size: int = 8,
    max_seq_len: int = 256,
    draft_dir: Path | None = None,
    step_records=None,
) -> RunningServer:
    from specscope.assemble import load_engine
    from specscope.workloads.chat import load_chat_template
    from specscope.serve.server import create_server

    engine, tokenizer = load_engine(
        model_dir,
        method=method,
        draft_dir=draft_dir,
        k=k,
        max_batch_size=max_batch_size,
        max_seq_len=max_seq_len,
    )
    chat = load_chat_template(model_dir)
    return RunningServer(create_server(engine, tokenizer, "tiny", "127.0.0.1", 0, chat_template=chat,
                                       step_records=step_records))


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client that gave up mid-stream (the tests make them) is expected here


class FakeServer:
    """An OpenAI-compatible fake on a loopback port. ``mode``: ``ok`` (4 chunks of 2 tokens,
    ``delay_s`` apart, usage, ``[DONE]``), ``http500``, ``malformed`` (a non-SSE line),
    ``no_usage``, ``badjson`` (a chunk that is not JSON), ``badchoices`` (``choices`` not a
    list), ``truncated`` (closes before ``[DONE]``) or ``hang`` (never answers until closed).
    ``metrics``: ``vllm`` (k = 3; per completed request: 3 drafts, 6 draft tokens, 4 accepted,
    accepted per position 2, 1, 1),
    ``sglang`` (gauges: accept length 2.5, rate 0.75) or ``none`` (``/metrics`` answers 404).
    ``prompts`` records each completion request's arrival and prompt; ``refuse(prompt)`` true: the
    request is answered 400, as a server refuses a prompt past its context."""

    def __init__(self, mode: str = "ok", delay_s: float = 0.0, metrics: str = "vllm", refuse=None) -> None:
        self.mode, self.delay_s, self.metrics, self.refuse = mode, delay_s, metrics, refuse
        self.completions = 0
        self.prompts: list[tuple[float, object]] = []  # (arrival, prompt) of every completion request
        self.active = 0  # POST handlers still running
        self.lock = threading.Lock()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _json(self, status: int, payload: object) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(200, {"data": [{"id": "fake"}]})
                elif self.path == "/health":
                    self._json(200, {})
                elif self.path == "/metrics" and fake.metrics != "none":
                    n = fake.completions
                    if fake.metrics == "sglang":
                        text = 'sglang:spec_accept_length{tp_rank="0"} 2.5\nsglang:spec_accept_rate{tp_rank="0"} 0.75\n'
                    else:
                        text = "".join(
                            f'vllm:spec_decode_num_{name}_total{{model_name="fake"}} {per * n}\n'
                            for name, per in (("drafts", 3), ("draft_tokens", 6), ("accepted_tokens", 4))
                        ) + "".join(
                            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="fake",position="{i}"}} '
                            f"{per * n}\n"
                            for i, per in enumerate((2, 1, 1))
                        )
                    body = text.encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self._json(404, {"error": {"message": "no route"}})

            def do_POST(self) -> None:
                with fake.lock:
                    fake.active += 1
                try:
                    self._completion()
                finally:
                    with fake.lock:
                        fake.active -= 1

            def _completion(self) -> None:
                prompt = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}").get("prompt")
                with fake.lock:
                    fake.prompts.append((time.monotonic(), prompt))
                if fake.refuse is not None and fake.refuse(prompt):
                    self._json(400, {"error": {"message": "prompt too long for this model's context"}})
                    return
                if fake.mode == "hang":
                    fake.release.wait(60)
                    return
                if fake.mode == "http500":
                    self._json(500, {"error": {"message": "engine exploded"}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i in range(4):
                    time.sleep(fake.delay_s)
                    chunk = {
                        "choices": [{"index": 0, "text": "ab", "finish_reason": "length" if i == 3 else None}]
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    if fake.mode == "malformed" and i == 1:
                        self.wfile.write(b"this is not an event\n\n")
                        return
                    if fake.mode in ("badjson", "badchoices") and i == 1:
                        bad = b"{not json" if fake.mode == "badjson" else b'{"choices": "abc"}'
                        self.wfile.write(b"data: " + bad + b"\n\n")
                        return
                    if fake.mode == "truncated" and i == 1:
                        return
                if fake.mode != "no_usage":
                    usage = {
                        "choices": [],
                        "usage": {"prompt_tokens": 3, "total_tokens": 11,
                                  "completion_tokens": {"negative_usage": -50, "bool_usage": True,
                                                        "huge_usage": 10**30}.get(fake.mode, 8)},
                    }
                    self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                with fake.lock:  # counted before [DONE], so a scrape after the response sees it
                    fake.completions += 1
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Wait until no completion handler is running (e.g. after killing a client)."""
        deadline = time.monotonic() + timeout_s
        while self.active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not self.active, "fake server handlers still running"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def refused_url() -> str:
    """A loopback URL with nothing listening (a port just released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
