"""Workload files: JSON Lines, one request a line.

Each line is an object with ``id`` (string or integer) and either ``prompt`` (text, tokenised
with the model directory's ``tokenizer.json``; no chat template is applied) or
``prompt_token_ids`` (a non-empty list of non-negative integers), and optionally what
``workload make`` and the bundled workloads add: ``reference`` and ``answer`` (not read here).
Any other field is refused: a request's own ``max_tokens`` or ``temperature``, or a misspelt
``prompt_ids``, would be ignored unsaid. Blank lines are skipped; anything else that is wrong
stops the read with ``file:line: field: what was expected``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specscope.errors import SpecscopeError, where
from specscope.reading import read_jsonl
from specscope.trace.fields import Fields


FIELDS = ("id", "prompt", "prompt_token_ids", "reference", "answer")  # a workload line's


@dataclass(frozen=True)
class WorkloadRequest:
    id: str
    prompt_token_ids: list[int]
    source: str = ""  # where its prompt stands: ``file:line: field 'prompt'`` (errors about it name it)


@dataclass(frozen=True)
class Prompt:
    """One validated workload line: ``text`` or ``token_ids`` (exactly one is set)."""

    id: str
    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    line: int = 0  # where it stood in the file, for error messages

    @property
    def payload(self) -> str | list[int]:
        """What an OpenAI-compatible completions request sends as ``prompt``."""
        return self.text if self.text is not None else list(self.token_ids or ())


def read_prompts(path: str | Path) -> list[Prompt]:
    """Validate ``path`` line by line, keeping text prompts as text."""
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for prompt in read_jsonl(path, _parse):
        if prompt.id in seen:
            raise SpecscopeError(f"{where(path, prompt.line, 'id')}: {prompt.id!r} already used on line {seen[prompt.id]}")
        seen[prompt.id] = prompt.line
        prompts.append(prompt)
    if not prompts:
        raise SpecscopeError(f"{path}: no requests")
    return prompts


def read_workload(path: str | Path, tokenizer=None, vocab_size: int | None = None) -> list[WorkloadRequest]:
    """Read ``path`` as token ids; ``tokenizer`` (a ``tokenizers.Tokenizer``) is needed for
    text prompts. With ``vocab_size`` (the model's), a token id at or above it is refused at its
    line, before any model runs."""
    requests = []
    for prompt in read_prompts(path):
        request = _tokenize(prompt, Path(path), tokenizer)
        largest = max(request.prompt_token_ids)
        if vocab_size is not None and largest >= vocab_size:
            field = "prompt_token_ids" if prompt.token_ids is not None else "prompt"
            raise SpecscopeError(f"{where(Path(path), prompt.line, field)}: token id {largest} is not below the "
                                 f"model's vocabulary size {vocab_size}")
        requests.append(request)
    return requests


def _parse(obj: object, path: Path, line: int) -> Prompt:
    """One workload line (see the module docstring)."""
    fields = Fields(obj, path, line)
    fields.only(FIELDS)
    rid = fields.text("id")
    if fields.has("prompt") == fields.has("prompt_token_ids"):
        raise fields.error(None, "expected exactly one of 'prompt' and 'prompt_token_ids'")
    if fields.has("prompt_token_ids"):
        ids = fields.int_array("prompt_token_ids", low=0)
        if not ids.size:
            raise fields.error("prompt_token_ids", "expected a non-empty list of non-negative integers")
        return Prompt(rid, token_ids=tuple(ids.tolist()), line=line)
    text = fields.text("prompt")
    if not isinstance(fields.get("prompt"), str):
        raise fields.error("prompt", "expected non-empty text")
    return Prompt(rid, text=text, line=line)


def _tokenize(prompt: Prompt, path: Path, tokenizer) -> WorkloadRequest:
    if prompt.token_ids is not None:
        return WorkloadRequest(prompt.id, list(prompt.token_ids), where(path, prompt.line, "prompt_token_ids"))
    if tokenizer is None:
        raise SpecscopeError(
            f"{where(path, prompt.line, 'prompt')}: text prompts need the model directory's tokenizer.json "
            "(none found); give 'prompt_token_ids' instead"
        )
    ids = tokenizer.encode(prompt.text).ids
    if not ids:
        raise SpecscopeError(f"{where(path, prompt.line, 'prompt')}: tokenises to no tokens")
    return WorkloadRequest(prompt.id, ids, where(path, prompt.line, "prompt"))
