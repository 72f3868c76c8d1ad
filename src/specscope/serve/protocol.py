"""The OpenAI API subset that ``specscope serve`` speaks: request validation, one place for
every route, and the answers' shapes.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /v1/models/{id}``. A body is one JSON object (no ``NaN``/``Infinity`` literals, no lone
surrogates); unknown fields are ignored, except those that would change the output (below). Values are checked with :mod:`specscope.validate`;
a bad one gets 400 naming the field (``'temperature': expected a finite number ...``).

Fields of both POST routes:

- ``model``: this server's model id, or absent (another id: 404).
- ``max_tokens`` (chat also ``max_completion_tokens``): >= 1. Absent: 16 for completions, as
  OpenAI's; for chat the rest of ``max_model_len`` after the prompt, as vLLM's. ``null``: the
  rest of ``max_model_len`` on both routes (vLLM's reading). Prompt + ``max_tokens`` may not
  exceed ``max_model_len`` (400).
- ``temperature`` (default 1.0): finite, >= 0; below 1e-5 is greedy, other values below 0.01
  are raised to 0.01 (vLLM's rule). ``top_p`` in (0, 1]; ``top_k`` (0 or -1: off);
  ``min_p`` in [0, 1]; ``seed`` in [-2^63, 2^64) (the API's signed 64 bits, or unsigned; a negative
  one taken modulo 2^64): the request's own generator, so its output does
  not depend on other requests in flight — except under ``serve --policy``, whose rows of one
  step choose method and k together: the draws a step takes then depend on the batch it shares,
  and a seeded request's output on the requests beside it (its distribution does not change).
- ``stop``: a string or a list of strings; the output ends before the first one, which is not
  returned (``finish_reason`` "stop", ``stop_reason`` the string). ``stop_token_ids``: tokens
  that end the output (the id returned among the tokens, its text not, as vLLM).
  ``min_tokens``: stop and end-of-sequence tokens are suppressed until that many tokens are out,
  and stop strings until after them. ``ignore_eos``. ``repetition_penalty`` (> 0, 1 = off; vLLM's:
  over prompt and output tokens). ``response_format``: only ``{"type": "text"}``.
- ``stream``, ``stream_options.include_usage`` (a last chunk with the usage) and
  ``stream_options.continuous_usage_stats`` (with ``include_usage``: every chunk carries the usage so
  far, as vLLM's) — ``stream_options`` only with ``stream`` true.
- Integer fields take a whole number written as a float (``5.0``), as vLLM's do; an assistant
  message's ``content`` may be null (read as empty).
- Refused with 400 when set to anything but their neutral value (1, false, 0, empty, "none": they would change the
  output and are not implemented): ``n``, ``best_of``, ``logprobs``, ``top_logprobs``,
  ``echo``, ``suffix``, ``presence_penalty``, ``frequency_penalty``, ``logit_bias``,
  ``tools``, ``tool_choice``, ``functions``, ``function_call``, ``response_format`` other than
  text, and vLLM's extensions ``use_beam_search``, ``include_stop_str_in_output``,
  ``allowed_token_ids``, ``bad_words``, ``logits_processors``, ``truncate_prompt_tokens``,
  ``prompt_logprobs``, ``skip_special_tokens`` (the text skips them), the ``guided_*`` fields,
  ``structured_outputs``, and chat's ``continue_final_message``, ``add_generation_prompt`` (true:
  the template opens the assistant's turn), ``chat_template`` and ``chat_template_kwargs``. Other
  unknown fields are ignored.

Completions: ``prompt`` is text, a list of token ids, or a one-element list of either. Chat:
``messages``, a non-empty list of ``{"role", "content"}`` (roles system, developer, user,
assistant, tool; content text or a list of ``{"type": "text", "text"}`` parts), rendered with
the model's chat template (:mod:`specscope.workloads.chat`). Every choice carries ``token_ids``
besides the text (as vLLM's ``return_token_ids``). Errors are
``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from specscope import validate

DEFAULT_PORT = 8000  # vLLM's and specscope serve's
DEFAULT_MAX_TOKENS = 16  # completions without the field (OpenAI's); chat, and null, take the rest of max_model_len
DEFAULT_TEMPERATURE = 1.0
UNSUPPORTED = {  # a field → its neutral values (null too): anything else is refused
    "n": (1,),
    "best_of": (1,),
    "logprobs": (False,),  # chat's is a boolean, completions' a count
    "top_logprobs": (0,),
    "echo": (False,),
    "suffix": ("",),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logit_bias": ({},),  # clients that always send the empty defaults were refused
    "tools": ([],),
    "tool_choice": ("none",),
    "functions": ([],),  # the deprecated form of tools
    "function_call": ("none",),
    "use_beam_search": (False,),  # vLLM's extensions that change the output (only null is neutral where none is listed)
    "include_stop_str_in_output": (False,),
    "allowed_token_ids": ([],),
    "bad_words": ([],),
    "logits_processors": ([],),
    "truncate_prompt_tokens": (),
    "prompt_logprobs": (),
    "skip_special_tokens": (True,),  # the text is decoded without special tokens
    "guided_json": (),
    "guided_regex": (),
    "guided_choice": (),
    "guided_grammar": (),
    "structured_outputs": (),
    "continue_final_message": (False,),  # chat: the template's rendering, as the server does it
    "add_generation_prompt": (True,),
    "chat_template": (),
    "chat_template_kwargs": ({},),
}
ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """An HTTP error answer: ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def body(self) -> bytes:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return json.dumps({"error": {"message": self.message, "type": kind, "code": self.status}}).encode()


@dataclass(frozen=True)
class GenerationRequest:
    """A validated request of either route: exactly one of ``prompt_text``,
    ``prompt_token_ids`` and ``messages`` is set. ``max_tokens`` ``None``: the rest of
    ``max_model_len``."""

    prompt_text: str | None
    prompt_token_ids: tuple[int, ...] | None
    messages: tuple[dict[str, str], ...] | None
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int | None
    repetition_penalty: float
    min_tokens: int
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool  # every streamed chunk carries the usage so far


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_body(raw: bytes) -> dict:
    """The request body as a JSON object; 400 for anything else."""
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"request body is not valid JSON ({str(error)[:200]})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "request body holds a lone surrogate (\\ud800-\\udfff): not valid Unicode") from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    return body


def _field(body: dict, name: str, check: Callable[[object], object], default: object) -> object:
    """``check(body[name])`` (``default`` when absent or null); 400 naming ``name``."""
    value = body.get(name)
    if value is None:
        return default
    try:
        return check(value)
    except validate.Invalid as error:
        raise ApiError(400, f"'{name}': {error}") from None


def _request_seed(value: object) -> int:
    """A request's ``seed``: the OpenAI API's signed 64-bit integer, or an unsigned one (torch's
    generators take [0, 2^64)); a negative seed is taken modulo 2^64, its two's-complement bits."""
    return validate.integer(value, low=-(2**63), high=validate.SEED_MAX) % 2**64


def _numeric(check: Callable[..., object], **bounds: object) -> Callable[[object], object]:
    """``check`` for a JSON number: text such as ``"8"`` (which the CLI's rules accept) is not one;
    a whole float such as ``5.0`` is taken as the integer."""

    def run(value: object) -> object:
        if isinstance(value, str):
            raise validate.Invalid(f"expected a number, got {value!r:.40}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # a whole number written as a float: an integer to vLLM's (pydantic's) rules
        return check(value, **bounds)

    return run


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise validate.Invalid(f"expected true or false, got {value!r:.40}")
    return value


def _stop(value: object) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise validate.Invalid(f"expected a non-empty string or a list of them, got {value!r:.40}")
    return tuple(items)


def _token_ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise validate.Invalid(f"expected a list of token ids, got {value!r:.40}")
    token_id = _numeric(validate.integer, low=0)
    return tuple(token_id(t) for t in value)


def _response_format(value: object) -> None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind != "text":
        raise validate.Invalid(f"only {{\"type\": \"text\"}} is supported, got {value!r:.60}")


def _kind(value: object) -> type:
    """A JSON value's kind for a neutral value's match: a number whether written 1 or 1.0 (as vLLM
    reads integer fields), a boolean apart from the numbers it equals in Python."""
    return float if type(value) in (int, float) else type(value)


def _common(body: dict, served_model: str) -> dict:
    """The fields shared by every route, checked."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"'model': expected a model name (text), got {model!r:.40}")
    if model and model != served_model:  # as vLLM, an empty name is the served model
        raise ApiError(404, f"model {str(model)[:80]!r} does not exist; this server serves {served_model!r}")
    for name, neutral in UNSUPPORTED.items():  # of its kind: true is no n = 1, 0 no echo = false; 1.0 is n = 1
        if body.get(name) is not None and not any(_kind(body[name]) is _kind(n) and body[name] == n for n in neutral):
            raise ApiError(400, f"'{name}' is not supported by specscope serve (got {body[name]!r:.40})")
    _field(body, "response_format", _response_format, None)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options': expected an object")
    if options is not None and body.get("stream") is not True:  # as vLLM: it would be ignored unsaid
        raise ApiError(400, "'stream_options': only with \"stream\": true")
    return {
        "temperature": _field(body, "temperature", _numeric(validate.temperature), DEFAULT_TEMPERATURE),
        "top_p": _field(body, "top_p", _numeric(validate.number, low=0.0, high=1.0, low_open=True), 1.0),
        "top_k": max(_field(body, "top_k", _numeric(validate.integer, low=-1), 0), 0),
        "min_p": _field(body, "min_p", _numeric(validate.probability), 0.0),
        "seed": _field(body, "seed", _numeric(_request_seed), None),
        "repetition_penalty": _field(
            body, "repetition_penalty", _numeric(validate.number, low=0.0, low_open=True), 1.0
        ),
        "min_tokens": _field(body, "min_tokens", _numeric(validate.integer, low=0), 0),
        "stop": _field(body, "stop", _stop, ()),
        "stop_token_ids": _field(body, "stop_token_ids", _token_ids, ()),
        "ignore_eos": _field(body, "ignore_eos", _flag, False),
        "stream": _field(body, "stream", _flag, False),
        "include_usage": _field(options or {}, "include_usage", _flag, False),
        "continuous_usage": _field(options or {}, "include_usage", _flag, False)
        and _field(options or {}, "continuous_usage_stats", _flag, False),
    }


def _max_tokens(body: dict, name: str, default: int | None) -> int | None:
    return _field(body, name, _numeric(validate.integer, low=1), default)


def parse_completion_request(raw: bytes, served_model: str) -> GenerationRequest:
    """Validate a ``/v1/completions`` body; raises :class:`ApiError` (400/404) naming the field."""
    body = parse_body(raw)
    common = _common(body, served_model)
    if "prompt" not in body:
        raise ApiError(400, "missing field 'prompt'")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    text, ids = None, None
    if isinstance(prompt, str) and prompt:
        text = prompt
    elif isinstance(prompt, list) and prompt and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt
    ):
        ids = tuple(prompt)
    else:
        raise ApiError(
            400,
            "'prompt': expected non-empty text or a non-empty list of non-negative token ids "
            "(one prompt per request)",
        )
    unlimited = "max_tokens" in body and body["max_tokens"] is None  # null: the rest of max_model_len
    max_tokens = _max_tokens(body, "max_tokens", None if unlimited else DEFAULT_MAX_TOKENS)
    return GenerationRequest(text, ids, None, max_tokens, **common)


def _message(index: int, message: object) -> dict[str, str]:
    where = f"'messages[{index}]'"
    if not isinstance(message, dict):
        raise ApiError(400, f"{where}: expected an object with 'role' and 'content'")
    role, content = message.get("role"), message.get("content")
    if role not in ROLES:
        raise ApiError(400, f"{where}: 'role' must be one of {', '.join(ROLES)}, got {role!r:.40}")
    if content is None and role == "assistant":  # an assistant turn that only called tools, to vLLM
        content = ""
    if isinstance(content, list):
        texts = [p.get("text") if isinstance(p, dict) and p.get("type") == "text" else None for p in content]
        if not all(isinstance(t, str) for t in texts):
            raise ApiError(400, f"{where}: 'content' parts must be {{\"type\": \"text\", \"text\": ...}}")
        content = "\n".join(texts)
    if not isinstance(content, str):
        raise ApiError(400, f"{where}: 'content' must be text, got {content!r:.40}")
    name = message.get("name")  # the speaker's name, which a chat template may show (vLLM passes it on)
    if name is not None and not isinstance(name, str):
        raise ApiError(400, f"{where}: 'name' must be text, got {name!r:.40}")
    return {"role": role, "content": content, **({"name": name} if name is not None else {})}


def parse_chat_request(raw: bytes, served_model: str) -> GenerationRequest:
    """Validate a ``/v1/chat/completions`` body; raises :class:`ApiError` naming the field."""
    body = parse_body(raw)
    common = _common(body, served_model)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages': expected a non-empty list of {\"role\", \"content\"} objects")
    parsed = tuple(_message(i, m) for i, m in enumerate(messages))
    completion, legacy = _max_tokens(body, "max_completion_tokens", None), _max_tokens(body, "max_tokens", None)
    max_tokens = completion if completion is not None else legacy  # each checked (a bad one was hidden)
    return GenerationRequest(None, None, parsed, max_tokens, **common)


def new_id(prefix: str) -> str:
    """A response id such as ``cmpl-<hex>`` or ``chatcmpl-<hex>``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def model_object(model: str, max_model_len: int) -> dict:
    return {
        "id": model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "specscope",
        "max_model_len": max_model_len,
    }


def completion_object(
    cid: str, created: int, model: str, choices: list[dict], usage: dict | None = None, kind: str = "text_completion"
) -> dict:
    """A response or streamed chunk; ``kind``: ``text_completion``, ``chat.completion`` or
    ``chat.completion.chunk``; ``created``: when its request was taken (Unix seconds), the same on
    every chunk of a stream, as the API says."""
    payload = {"id": cid, "object": kind, "created": created, "model": model, "choices": choices}
    if usage is not None:
        payload["usage"] = usage
    return payload


def choice(
    text: str, token_ids: list[int], finish_reason: str | None, stop_reason: str | int | None = None
) -> dict:
    """A completions choice."""
    return {
        "index": 0,
        "text": text,
        "token_ids": token_ids,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


def chat_choice(
    text: str,
    token_ids: list[int],
    finish_reason: str | None,
    stop_reason: str | int | None = None,
    delta: dict | None = None,
) -> dict:
    """A chat choice: the whole ``message``, or (streaming) the ``delta`` given."""
    body = {"delta": delta} if delta is not None else {"message": {"role": "assistant", "content": text}}
    return {
        "index": 0,
        **body,
        "token_ids": token_ids,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
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
