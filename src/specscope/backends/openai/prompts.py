"""Workload prompts for the OpenAI client: JSON Lines of ``{"id", "prompt"}`` (text, sent as
text: the server tokenises it) or ``{"id", "prompt_token_ids"}`` (sent as token ids), the
same file format as :mod:`specscope.workloads.jsonl` reads for the reference engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specscope.errors import SpecscopeError, where


@dataclass(frozen=True)
class Prompt:
    """One workload request: ``text`` or ``token_ids`` (exactly one is set)."""

    id: str
    text: str | None = None
    token_ids: tuple[int, ...] | None = None

    @property
    def payload(self) -> str | list[int]:
        return self.text if self.text is not None else list(self.token_ids or ())


def read_prompts(path: str | Path) -> list[Prompt]:
    """Read a workload (JSON Lines of ``{"id", "prompt"}`` or ``{"id", "prompt_token_ids"}``),
    keeping text prompts as text: the server tokenises them."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise SpecscopeError(f"{path}: cannot read workload ({error})") from None
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SpecscopeError(f"{where(path, number)}: not valid JSON ({error.msg})") from None
        if (
            not isinstance(row, dict)
            or isinstance(row.get("id"), bool)
            or not isinstance(row.get("id"), (str, int))
        ):
            raise SpecscopeError(
                f"{where(path, number, 'id')}: expected an object with a string or integer id"
            )
        rid = str(row["id"])
        if rid in seen:
            raise SpecscopeError(f"{where(path, number, 'id')}: {rid!r} used twice")
        seen.add(rid)
        text, ids = row.get("prompt"), row.get("prompt_token_ids")
        if (text is None) == (ids is None):
            raise SpecscopeError(
                f"{where(path, number)}: expected exactly one of 'prompt' and 'prompt_token_ids'"
            )
        if text is not None and (not isinstance(text, str) or not text):
            raise SpecscopeError(f"{where(path, number, 'prompt')}: expected non-empty text")
        if ids is not None and (
            not isinstance(ids, list)
            or not ids
            or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids)
        ):
            raise SpecscopeError(
                f"{where(path, number, 'prompt_token_ids')}: expected a non-empty list of non-negative integers"
            )
        prompts.append(Prompt(rid, text=text, token_ids=tuple(ids) if ids is not None else None))
    if not prompts:
        raise SpecscopeError(f"{path}: no requests")
    return prompts


def select_prompts(prompts: list[Prompt], num_requests: int | None) -> list[Prompt]:
    """The first ``num_requests`` prompts, cycling through the workload when it is shorter
    (repeats get ids ``id#1``, ``id#2``, …)."""
    count = len(prompts) if num_requests is None else num_requests
    return [
        prompts[i % len(prompts)]
        if i < len(prompts)
        else Prompt(
            f"{prompts[i % len(prompts)].id}#{i // len(prompts)}",
            prompts[i % len(prompts)].text,
            prompts[i % len(prompts)].token_ids,
        )
        for i in range(count)
    ]
