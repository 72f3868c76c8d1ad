"""Workload prompts for the OpenAI client: the workload files of :mod:`specscope.workloads.jsonl`,
with text prompts kept as text (the server tokenises them) and token ids sent as ids."""

from __future__ import annotations

from pathlib import Path
from typing import Container

from specscope.errors import SpecscopeError, where
from specscope.workloads.jsonl import Prompt, read_prompts

__all__ = ["Prompt", "read_prompts", "select_prompts", "warmup_prompt", "workload_id"]


def select_prompts(prompts: list[Prompt], num_requests: int | None, source: Path) -> list[Prompt]:
    """The first ``num_requests`` prompts of the workload file ``source``, cycling through it when
    it is shorter (repeats get ids ``id#1``, ``id#2``, …; a workload id that is already such a
    name is refused: a calibration maps a repeat back to its prompt by it, :func:`workload_id`)."""
    count = len(prompts) if num_requests is None else num_requests
    held = {prompt.id: prompt for prompt in prompts}
    chosen = []
    for i in range(count):
        prompt, cycle = prompts[i % len(prompts)], i // len(prompts)
        if cycle:
            name = f"{prompt.id}#{cycle}"
            if name in held:
                raise SpecscopeError(f"{where(source, held[name].line, 'id')}: {name!r} is the name a sweep gives repeat "
                                     f"{cycle} of {prompt.id!r} (line {prompt.line}) when it cycles through the "
                                     "workload: rename it")
            prompt = Prompt(name, prompt.text, prompt.token_ids)
        chosen.append(prompt)
    return chosen


def workload_id(request_id: str, held: Container[str]) -> str:
    """The workload id of a measured request named ``request_id``: itself where ``held`` (the
    workload's ids) has it, else the prompt a repeat ``id#n`` (:func:`select_prompts`) repeats."""
    base, mark, cycle = request_id.rpartition("#")
    return base if request_id not in held and mark and cycle.isdigit() else request_id


def warmup_prompt(prompts: list[Prompt], num_requests: int | None) -> tuple[Prompt, bool]:
    """The prompt to warm a server up with, and whether it is also measured: the first prompt
    of the workload that :func:`select_prompts` does not measure, else the first one."""
    if num_requests is not None and num_requests < len(prompts):
        return prompts[num_requests], False
    return prompts[0], True
