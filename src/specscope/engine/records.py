"""Per-step records and aggregate speculative-decoding statistics.

Statistics are kept apart from exporters: :class:`StepRecord` (defined in
:mod:`specscope.costmodel.steps`, which the cost-model fit reads) is one record per engine step,
:class:`SpecDecodeStats` counts drafts and acceptances with vLLM's names. Definitions (terms as in
:mod:`specscope.engine.sampling`):

- ``num_drafts``: request-steps that offered at least one draft token (draft_len > 0);
- ``num_draft_tokens``: draft tokens offered; ``num_accepted_tokens``: drafts accepted;
- ``num_accepted_tokens_per_pos[i]``: drafts accepted at position ``i`` (0-based) of a proposal;
- ``num_request_steps``: request-steps, including those that offered nothing;
- ``num_emitted_tokens``: tokens the steps emitted (accepted + one bonus/recovered each) that
  the requests kept: a step that reached EOS or ``max_tokens`` counts the tokens up to it (its
  drafts accepted beyond it still count in ``num_accepted_tokens``, as verification accepted
  them), as a trace's acc_len stops at the output's end and a client counts what it received.

α (acceptance rate) = num_accepted_tokens / num_draft_tokens; τ (mean acceptance length) =
num_emitted_tokens / num_request_steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specscope.costmodel.steps import StepRecord

__all__ = ["SpecDecodeStats", "StepRecord"]


@dataclass
class SpecDecodeStats:
    k: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_request_steps: int = 0
    num_emitted_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.num_accepted_tokens_per_pos:
            self.num_accepted_tokens_per_pos = [0] * self.k

    def observe(self, draft_len: int, accepted: int, kept: int) -> None:
        """Count one request-step that offered ``draft_len`` drafts, accepted ``accepted`` and
        emitted ``kept`` tokens to its request (at most ``accepted`` + 1)."""
        self.num_request_steps += 1
        self.num_emitted_tokens += kept
        if draft_len:
            self.num_drafts += 1
            self.num_draft_tokens += draft_len
            self.num_accepted_tokens += accepted
            for pos in range(accepted):
                self.num_accepted_tokens_per_pos[pos] += 1

    def acceptance_rate(self) -> float | None:
        """α; ``None`` when nothing was proposed."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    def mean_acceptance_length(self) -> float | None:
        """τ; ``None`` before the first step."""
        return self.num_emitted_tokens / self.num_request_steps if self.num_request_steps else None
