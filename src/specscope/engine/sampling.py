"""Token selection: greedy, temperature / min-p / top-k / top-p, and verification of draft tokens.

Terms (used everywhere in specscope). One SD step offers ``draft_len`` (0..k) draft tokens
``d_1..d_draft_len`` per sequence and the target scores all of them in one forward pass.

- **accepted** tokens: the longest prefix of the drafts that passes verification. Greedy: ``d_i``
  equals the target's argmax at that position. Sampling: ``d_i`` is kept with probability
  ``min(1, p(d_i) / q(d_i))`` (``p`` target, ``q`` draft distribution, both after the same
  temperature / min-p / top-k / top-p processing), drawing one uniform per position.
- **recovered** token: emitted at the first rejected position, drawn from the residual
  ``normalise(max(0, p - q))`` (greedy: the target's argmax there).
- **bonus** token: emitted when all ``draft_len`` drafts were accepted, drawn from ``p`` at the
  position after the last draft (greedy: its argmax).

A step therefore emits ``acc_len = accepted + 1`` tokens. This rule leaves the output
distribution exactly the target's (Leviathan et al. 2023; Chen et al. 2023). A deterministic
proposer (n-gram) has ``q`` = a point mass on its token, so the rule keeps ``d_i`` with
probability ``p(d_i)`` and otherwise samples from ``p`` without ``d_i``. A greedy request is
the limit where ``p`` and ``q`` are point masses on the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specscope import validate
from specscope.engine.constraints import RowConstraints, apply_constraints
from specscope.errors import SpecscopeError
from specscope.trees import TreeShape


GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a temperature below it is greedy
MIN_TEMPERATURE = 0.01  # vLLM's _MAX_TEMP: a smaller positive temperature is raised to it


@dataclass
class SamplingParams:
    """Per-request sampling, checked with :mod:`specscope.validate` (a ``SpecscopeError`` names
    the field).

    ``temperature`` below 1e-5 is greedy (stored as 0) and other temperatures below 0.01 are
    raised to 0.01, as vLLM does (dividing logits by a tiny temperature overflows). ``top_k``
    0 and ``top_p`` 1 disable those filters; ``min_p`` drops tokens whose probability is below
    ``min_p`` times the most likely one's. ``seed`` seeds the request's own random generator:
    every random draw for the request comes from it, so its output does not depend on the
    other requests in the batch. Target-only constraints (:mod:`specscope.engine.constraints`):
    ``repetition_penalty`` (> 0; 1 = off), ``min_tokens`` (stop tokens are suppressed until
    that many tokens are out) and ``stop_token_ids`` (extra tokens that end the request).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        checks = {
            "temperature": validate.temperature,
            "top_p": lambda v: validate.number(v, low=0.0, high=1.0, low_open=True),
            "top_k": lambda v: validate.integer(v, low=0),
            "seed": lambda v: v if v is None else validate.seed(v),
            "min_p": validate.probability,
            "repetition_penalty": lambda v: validate.number(v, low=0.0, low_open=True),
            "min_tokens": lambda v: validate.integer(v, low=0),
            "stop_token_ids": lambda v: tuple(validate.integer(t, low=0) for t in v),
        }
        for name, check in checks.items():
            try:
                setattr(self, name, check(getattr(self, name)))
            except validate.Invalid as error:
                raise SpecscopeError(f"{name}: {error}") from None
        if self.temperature < GREEDY_BELOW:
            self.temperature = 0.0
        elif self.temperature < MIN_TEMPERATURE:
            self.temperature = MIN_TEMPERATURE

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class BatchSampling:
    """The sampling parameters, random generators and target-only constraints
    (:class:`~specscope.engine.constraints.RowConstraints`, ``None``: none) of one batch."""

    def __init__(
        self,
        params: list[SamplingParams],
        generators: list[torch.Generator],
        device: torch.device,
        constraints: list[RowConstraints] | None = None,
    ) -> None:
        self.params, self.generators, self.device = params, generators, device
        self.constraints = constraints
        self.all_greedy = all(p.greedy for p in params)
        self._greedy = torch.tensor([p.greedy for p in params], device=device)
        self._temperature = torch.tensor([p.temperature or 1.0 for p in params], device=device)
        self._top_k = [p.top_k for p in params]
        self._top_p = torch.tensor([p.top_p for p in params], device=device)
        self._min_p = torch.tensor([p.min_p for p in params], device=device)

    def rows(self, index: list[int]) -> "BatchSampling":
        """The sampling of the rows ``index`` of this batch, in that order."""
        constraints = None if self.constraints is None else [self.constraints[i] for i in index]
        return BatchSampling([self.params[i] for i in index], [self.generators[i] for i in index], self.device,
                             constraints)

    def constrain(
        self, logits: torch.Tensor, drafts: torch.Tensor | None = None, tree: TreeShape | None = None
    ) -> torch.Tensor:
        """The target's logits [batch, m+1, vocab] (or [batch, vocab] at prefill) with the
        rows' constraints applied; ``drafts`` [batch, m] are the tokens scored after the first
        (with a ``tree``: its nodes, see :func:`~specscope.engine.constraints.apply_constraints`)."""
        if self.constraints is None:
            return logits
        return apply_constraints(logits, self.constraints, drafts, tree)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Processed distributions: logits [batch, ..., vocab] -> float32 probs, same shape.
        Greedy rows get a point mass on the argmax."""
        logits = logits.float()
        shape = (-1,) + (1,) * (logits.dim() - 1)
        logits = logits / self._temperature.view(shape)
        # a tiny repetition_penalty or temperature overflows a logit to +inf: softmax would give NaN
        logits = logits.nan_to_num(nan=float("-inf"), posinf=torch.finfo(logits.dtype).max)
        vocab = logits.shape[-1]
        if bool((self._min_p > 0).any()):
            probs = logits.softmax(-1)
            floor = probs.amax(-1, keepdim=True) * self._min_p.view(shape)
            logits = logits.masked_fill(probs < floor, float("-inf"))
        if any(0 < k < vocab for k in self._top_k):
            k_row = torch.tensor(
                [k if 0 < k < vocab else vocab for k in self._top_k], device=logits.device
            )
            kth = logits.sort(dim=-1, descending=True).values.gather(
                -1, (k_row.view(shape) - 1).expand(*logits.shape[:-1], 1)
            )
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if bool((self._top_p < 1).any()):
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            sorted_probs = sorted_logits.softmax(-1)
            mass_before = sorted_probs.cumsum(-1) - sorted_probs  # mass of strictly better tokens
            drop_sorted = mass_before >= self._top_p.view(shape)
            drop_sorted[..., 0] = False  # the top token stays, whatever top_p (1e-46 is 0 in float32), as in vLLM
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        probs = logits.softmax(-1)
        if bool(self._greedy.any()):
            onehot = torch.zeros_like(probs).scatter(-1, logits.argmax(-1, keepdim=True), 1.0)
            probs = torch.where(self._greedy.view(shape), onehot, probs)
        return probs

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """One token per row from probs [batch, vocab] -> [batch] (greedy rows: argmax)."""
        if self.all_greedy:
            return probs.argmax(-1)
        out = []
        for row, (params, gen) in enumerate(zip(self.params, self.generators)):
            if params.greedy:
                out.append(probs[row].argmax(-1, keepdim=True))
            else:
                out.append(torch.multinomial(probs[row], 1, generator=gen))
        return torch.cat(out)

    def uniforms(self, counts: list[int], width: int) -> torch.Tensor:
        """[batch, width] uniforms in [0, 1): row r draws ``counts[r]`` from its own generator
        (how many its own drafts need, whatever the other rows offer) and is padded with 1."""
        rows = []
        for count, gen in zip(counts, self.generators):
            drawn = torch.rand(count, generator=gen, device=self.device)
            rows.append(torch.cat((drawn, torch.ones(width - count, device=self.device))))
        return torch.stack(rows) if rows else torch.ones(0, width, device=self.device)


def verify_greedy(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor, draft_len: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification.

    ``target_logits`` [batch, m+1, vocab] score the last token and ``m`` drafts
    (``draft_tokens`` [batch, m], of which the first ``draft_len`` [batch] are real).
    Returns (accepted [batch], next_token [batch]): the bonus or recovered token.
    """
    best = target_logits.argmax(-1)  # [batch, m+1]
    m = draft_tokens.shape[1]
    offered = torch.arange(m, device=best.device)[None, :] < draft_len[:, None]  # [batch, m]
    agree = (draft_tokens == best[:, :m]) & offered
    accepted = agree.long().cumprod(1).sum(1)  # [batch]
    return accepted, best.gather(1, accepted[:, None]).squeeze(1)


def verify_sampled(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    draft_len: torch.Tensor,
    sampling: BatchSampling,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection-sampling verification (rule in the module docstring).

    ``target_probs`` [batch, m+1, vocab]; ``draft_probs`` [batch, m, vocab] or ``None`` for a
    deterministic proposer (point masses on ``draft_tokens`` [batch, m]); ``draft_len`` [batch].
    Returns (accepted [batch], next_token [batch]).
    """
    batch, m = draft_tokens.shape
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs[:, :m]).scatter(-1, draft_tokens[..., None], 1.0)
    p_x = target_probs[:, :m].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [batch, m]
    q_x = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [batch, m]
    offered = torch.arange(m, device=p_x.device)[None, :] < draft_len[:, None]
    uniforms = sampling.uniforms(draft_len.tolist(), m)  # [batch, m]
    keep = (uniforms * q_x < p_x) & offered  # u < p/q, as u·q < p
    accepted = keep.long().cumprod(1).sum(1)  # [batch]
    rows = torch.arange(batch, device=p_x.device)
    p_next = target_probs[rows, accepted]  # [batch, vocab]
    rejected = (accepted < draft_len)[:, None]
    q_next = draft_probs[rows, accepted.clamp(max=max(m - 1, 0))] if m else torch.zeros_like(p_next)
    residual = torch.where(rejected, (p_next - q_next).clamp(min=0), p_next)
    total = residual.sum(-1, keepdim=True)
    residual = torch.where(total > 0, residual / total.clamp(min=1e-30), p_next)
    return accepted, sampling.sample(residual)


def verify_tree_greedy(
    target_logits: torch.Tensor, node_tokens: torch.Tensor, tree: TreeShape
) -> tuple[list[list[int]], list[int]]:
    """Greedy verification of a token tree: from the root, step to the child whose token is the
    target's argmax, while there is one.

    ``target_logits`` [batch, nodes+1, vocab] score tree rows 0..nodes (0 = root, i =
    ``tree.paths[i - 1]``); ``node_tokens`` [batch, nodes]. Returns per row the accepted path
    (tree rows, root excluded) and the bonus token (the argmax at the path's last row).
    """
    best, tokens = target_logits.argmax(-1).tolist(), node_tokens.tolist()
    paths, next_tokens = [], []
    for row_best, row_tokens in zip(best, tokens):
        path, node = [], 0
        while True:
            kids = [c for c in tree.children[node] if c > 0 and row_tokens[c - 1] == row_best[node]]
            if not kids:
                break
            node = int(kids[0])
            path.append(node)
        paths.append(path)
        next_tokens.append(row_best[node])
    return paths, next_tokens


def verify_tree_sampled(
    target_probs: torch.Tensor, node_tokens: torch.Tensor, tree: TreeShape, sampling: BatchSampling
) -> tuple[list[list[int]], list[int]]:
    """Multi-draft rejection sampling of a token tree whose children are point masses (SpecInfer,
    EAGLE-2). At a node with target distribution ``p``, start with the residual ``r = p`` and
    try its children in rank order: child token ``t`` is accepted with probability
    ``r(t) / sum(r)`` (then the walk moves to it); on rejection ``r(t) = 0``. When every child
    is rejected, or the node has none, the next token is drawn from ``r / sum(r)``. Each child
    is then emitted with probability ``p(t)`` and the rest follows ``p`` too: the output
    distribution is the target's. Arguments and result as in :func:`verify_tree_greedy`, with
    ``target_probs`` [batch, nodes+1, vocab]; each row draws from its own generator.
    """
    tokens = node_tokens.tolist()
    paths, next_tokens = [], []
    for row, (row_tokens, gen) in enumerate(zip(tokens, sampling.generators)):
        path, node = [], 0
        while True:
            residual = target_probs[row, node].clone()  # [vocab]
            accepted = 0
            for child in (int(c) for c in tree.children[node] if c > 0):
                token = row_tokens[child - 1]
                u = torch.rand((), generator=gen, device=residual.device)
                if bool(u * residual.sum() < residual[token]):
                    accepted = child
                    break
                residual[token] = 0.0
            if not accepted:
                break
            node = accepted
            path.append(node)
        total = residual.sum()
        residual = residual / total if bool(total > 0) else target_probs[row, node]
        paths.append(path)
        next_tokens.append(int(torch.multinomial(residual, 1, generator=gen)))
    return paths, next_tokens
