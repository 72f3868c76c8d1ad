"""Workload prompts for the OpenAI client: the workload files of :mod:`specscope.workloads.jsonl`,
with text prompts kept as text (the server tokenises them) and token ids sent as ids."""

from __future__ import annotations

from specscope.workloads.jsonl import Prompt, read_prompts

__all__ = ["Prompt", "read_prompts", "select_prompts", "warmup_prompt"]


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


def warmup_prompt(prompts: list[Prompt], num_requests: int | None) -> tuple[Prompt, bool]:
    """The prompt to warm a server up with, and whether it is also measured: the first prompt
    of the workload that :func:`select_prompts` does not measure, else the first one."""
    if num_requests is not None and num_requests < len(prompts):
        return prompts[num_requests], False
    return prompts[0], True
