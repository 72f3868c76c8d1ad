"""Workload files: JSON Lines, one request a line.

Each line is an object with ``id`` (string or integer) and either ``prompt`` (text, tokenised
with the model directory's ``tokenizer.json``; no chat template is applied) or
``prompt_token_ids`` (a non-empty list of non-negative integers). Blank lines are skipped;
anything else that is wrong stops the read with ``file:line: field: what was expected``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specscope.errors import SpecscopeError, where


@dataclass(frozen=True)
class WorkloadRequest:
    id: str
    prompt_token_ids: list[int]


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
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise SpecscopeError(f"{path}: cannot read workload ({error})") from None
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SpecscopeError(f"{where(path, number)}: not valid JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise SpecscopeError(f"{where(path, number)}: expected a JSON object")
        prompt = _parse(row, path, number)
        if prompt.id in seen:
            raise SpecscopeError(f"{where(path, number, 'id')}: {prompt.id!r} already used on line {seen[prompt.id]}")
        seen[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise SpecscopeError(f"{path}: no requests")
    return prompts


def read_workload(path: str | Path, tokenizer=None) -> list[WorkloadRequest]:
    """Read ``path`` as token ids; ``tokenizer`` (a ``tokenizers.Tokenizer``) is needed for
    text prompts."""
    return [_tokenize(prompt, Path(path), tokenizer) for prompt in read_prompts(path)]


def _parse(row: dict, path: Path, number: int) -> Prompt:
    rid = row.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        raise SpecscopeError(f"{where(path, number, 'id')}: expected a non-empty string or an integer")
    has_text, has_ids = "prompt" in row, "prompt_token_ids" in row
    if has_text == has_ids:
        raise SpecscopeError(f"{where(path, number)}: expected exactly one of 'prompt' and 'prompt_token_ids'")
    if has_ids:
        ids = row["prompt_token_ids"]
        if not isinstance(ids, list) or not ids or any(
            isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids
        ):
            raise SpecscopeError(
                f"{where(path, number, 'prompt_token_ids')}: expected a non-empty list of non-negative integers"
            )
        return Prompt(str(rid), token_ids=tuple(ids), line=number)
    text = row["prompt"]
    if not isinstance(text, str) or not text:
        raise SpecscopeError(f"{where(path, number, 'prompt')}: expected non-empty text")
    return Prompt(str(rid), text=text, line=number)


def _tokenize(prompt: Prompt, path: Path, tokenizer) -> WorkloadRequest:
    if prompt.token_ids is not None:
        return WorkloadRequest(prompt.id, list(prompt.token_ids))
    if tokenizer is None:
        raise SpecscopeError(
            f"{where(path, prompt.line, 'prompt')}: text prompts need the model directory's tokenizer.json "
            "(none found); give 'prompt_token_ids' instead"
        )
    ids = tokenizer.encode(prompt.text).ids
    if not ids:
        raise SpecscopeError(f"{where(path, prompt.line, 'prompt')}: tokenises to no tokens")
    return WorkloadRequest(prompt.id, ids)
