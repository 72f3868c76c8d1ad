"""The OpenAI completions protocol subset that ``specscope serve`` speaks.

Requests (``POST /v1/completions``, a JSON object): ``prompt`` (text, a list of token ids, or
a one-element list of either), ``max_tokens`` (default 16, as OpenAI's), ``temperature``
(default 1.0, as OpenAI's; 0 = greedy), ``top_p``, ``top_k`` (0 or -1 = off), ``seed``,
``stream``, ``stream_options.include_usage``, ``ignore_eos`` (vLLM's extension), ``model``.
Fields that would change the output and are not implemented (``n`` or ``best_of`` > 1,
``stop``, ``logprobs``, ``echo``, ``suffix``, penalties) are refused with 400 rather than
silently ignored. Every response choice carries ``token_ids`` besides ``text`` (as vLLM's
``return_token_ids``). Errors are ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

DEFAULT_PORT = 8000  # vLLM's and specscope serve's
DEFAULT_MAX_TOKENS = 16
DEFAULT_TEMPERATURE = 1.0
UNSUPPORTED = {
    "n": 1,
    "best_of": 1,
    "stop": None,
    "logprobs": None,
    "echo": False,
    "suffix": None,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "logit_bias": None,
}


class ApiError(Exception):
    """An HTTP error answer: ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def body(self) -> bytes:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return json.dumps({"error": {"message": self.message, "type": kind, "code": self.status}}).encode()


@dataclass(frozen=True)
class CompletionRequest:
    """A validated request. ``prompt_text`` is ``None`` when token ids were sent."""

    prompt_text: str | None
    prompt_token_ids: tuple[int, ...] | None
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"'{name}': expected a number, got {value!r}")
    return float(value)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}': expected true or false, got {value!r}")
    return value


def parse_completion_request(raw: bytes, served_model: str) -> CompletionRequest:
    """Validate a request body; raises :class:`ApiError` (400/404) naming the bad field."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"request body is not valid JSON ({error})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"model {model!r} does not exist; this server serves {served_model!r}")
    for name, neutral in UNSUPPORTED.items():
        if name in body and body[name] not in (neutral, None):
            raise ApiError(400, f"'{name}' is not supported by specscope serve (got {body[name]!r})")
    if "prompt" not in body:
        raise ApiError(400, "missing field 'prompt'")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    text, ids = None, None
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError(400, "'prompt': expected non-empty text")
        text = prompt
    elif isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        ids = tuple(prompt)
    else:
        raise ApiError(
            400,
            "'prompt': expected text or a non-empty list of non-negative token ids (one prompt per request)",
        )
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not _is_int(max_tokens) or max_tokens < 1:
        raise ApiError(400, f"'max_tokens': expected a positive integer, got {max_tokens!r}")
    temperature = _number(body, "temperature", DEFAULT_TEMPERATURE)
    top_p = _number(body, "top_p", 1.0)
    top_k = body.get("top_k", 0)
    if top_k is None:
        top_k = 0
    if not _is_int(top_k) or top_k < -1:
        raise ApiError(400, f"'top_k': expected an integer >= -1, got {top_k!r}")
    if temperature < 0:
        raise ApiError(400, f"'temperature': expected >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ApiError(400, f"'top_p': expected 0 < top_p <= 1, got {top_p}")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise ApiError(400, f"'seed': expected an integer, got {seed!r}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options': expected an object")
    return CompletionRequest(
        prompt_text=text,
        prompt_token_ids=ids,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=max(top_k, 0),
        seed=seed,
        stream=_flag(body, "stream"),
        include_usage=_flag(options, "include_usage"),
        ignore_eos=_flag(body, "ignore_eos"),
    )


def new_completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def completion_object(cid: str, model: str, choices: list[dict], usage: dict | None = None) -> dict:
    payload = {
        "id": cid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


def choice(text: str, token_ids: list[int], finish_reason: str | None) -> dict:
    return {
        "index": 0,
        "text": text,
        "token_ids": token_ids,
        "logprobs": None,
        "finish_reason": finish_reason,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def sse(payload: dict | str) -> bytes:
    """One server-sent event: ``data: <json>\\n\\n`` (or ``data: [DONE]``)."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()
