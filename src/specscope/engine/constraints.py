"""Request constraints on the target's logits (vLLM's logits processors): ``min_tokens`` and
``repetition_penalty``.

They are applied to the target's logits only, position by position, before verification (and
to the prefill's logits). That keeps SD lossless: verification accepts a draft token by the
constrained target distribution ``p`` whatever distribution ``q`` the drafts came from, so
SD's output follows the constrained target exactly, as plain decoding's does.

- **min_tokens**: while fewer than ``min_tokens`` output tokens exist, the request's stop
  tokens (its ``stop_token_ids`` and, unless ``ignore_eos``, the end-of-sequence ids) get
  logit -inf.
- **repetition_penalty** ``r``: the logit ``x`` of every token already in the prompt or output
  (drafts before the scored position included) becomes ``x / r`` if ``x > 0`` else ``x * r``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specscope.trees import TreeShape


@dataclass(frozen=True)
class RowConstraints:
    """One row's constraints at the first scored position. ``num_output``: output tokens
    before it; ``history``: prompt + output tokens so far."""

    repetition_penalty: float
    min_tokens: int
    stop_ids: tuple[int, ...]
    num_output: int
    history: list[int]

    @property
    def active(self) -> bool:
        return self.repetition_penalty != 1.0 or (self.num_output < self.min_tokens and bool(self.stop_ids))


def apply_constraints(
    logits: torch.Tensor,
    rows: list[RowConstraints],
    drafts: torch.Tensor | None,
    tree: TreeShape | None = None,
) -> torch.Tensor:
    """``logits`` [batch, m+1, vocab] (position j scores output token ``num_output + j``, after
    ``drafts`` [batch, m][:j]) or [batch, vocab] (one position, no drafts); same shape back.
    With a ``tree``, position j is tree row j (0 = root; ``drafts`` [batch, nodes] in
    ``tree.paths`` order): it scores output token ``num_output + depth(j)``, after the drafts
    on its root path."""
    if not any(row.active for row in rows):
        return logits
    flat = logits.dim() == 2
    scores = (logits[:, None] if flat else logits).float().clone()  # [batch, m+1, vocab]
    width, vocab, device = scores.shape[1], scores.shape[2], scores.device
    if tree is None:  # after[j, i]: position j comes after the token at position i
        after = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        depth = list(range(width))
    else:
        after = torch.from_numpy(tree.ancestors).to(device)
        depth = tree.depths.tolist()
    for r, row in enumerate(rows):
        if row.repetition_penalty != 1.0:
            seen = torch.zeros(width, vocab, dtype=torch.bool, device=device)  # [m+1, vocab]
            seen[:, row.history] = True
            later = drafts[r].tolist() if drafts is not None else []
            for i, token in enumerate(later, start=1):  # padding past draft_len: never used
                if 0 <= token < vocab:
                    seen[after[:, i], token] = True
            x = scores[r]
            scores[r] = torch.where(
                seen, torch.where(x > 0, x / row.repetition_penalty, x * row.repetition_penalty), x
            )
        short = [j for j in range(width) if row.num_output + depth[j] < row.min_tokens]  # before min_tokens
        if short and row.stop_ids:
            early = torch.tensor(short, device=device)[:, None]  # [positions, 1]
            scores[r, early, torch.tensor(row.stop_ids, device=device)] = float("-inf")
    return scores[:, 0] if flat else scores
