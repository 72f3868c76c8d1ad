"""The one interface every proposer implements (the registry that names them is
:mod:`specscope.proposers.registry`).

A proposer offers up to ``k`` draft tokens per sequence per step; the engine verifies them with
one target forward pass (see :mod:`specscope.engine.step`). The engine talks to a proposer
only through :class:`Proposer`:

1. ``observe(TargetPass)`` after every target forward (the prefill of new sequences, and each
   verification). It says which tokens the target just processed in which cache slots, how many
   of them are now committed to the sequence (prefill: the prompt; verification: the last token
   plus the accepted drafts), and carries the target's hidden states at those positions for
   the indices the proposer asked for in ``hidden_layers`` (index convention:
   :mod:`specscope.engine.model` — ``num_layers`` = final normed state, as EAGLE-1 and MTP
   use; EAGLE-3 asks for three, e.g. ``(2, L // 2, L - 3)``). A model proposer updates its own
   KV cache (or notes which of its entries stay valid) here.
2. ``propose(ProposeInput) -> Proposal`` once per step, before verification. The input gives,
   per running sequence, its cache slot, its newest token (emitted by the last step, not yet
   in the target's cache) and that token's position, the whole token history, ``k`` and the
   batch's sampling. The output has ``tokens`` [batch, k], ``draft_len`` [batch] (0..k; rows
   with fewer tokens are padded) and, for a stochastic proposer in a sampling batch,
   ``probs`` [batch, k, target vocab]: the distribution each draft token was drawn from, made
   with ``ProposeInput.sampling.probs`` so that draft and target are processed alike.
   ``probs=None`` means point masses on ``tokens`` (deterministic proposers, or all-greedy
   batches).
3. ``release(slot)`` when the sequence in ``slot`` finished, so the slot can be reused.

Model proposers may also implement :class:`TreeDrafting`: ``propose_tree(ProposeInput,
TreeShape) -> TreeProposal`` drafts a static token tree instead of a chain (the engine's tree
step, :mod:`specscope.engine.tree_step`, calls it in place of ``propose``; ``k`` is then the
tree's depth). The ``observe`` that follows reports the accepted root path as if it had been a
chain: ``tokens`` = the newest token and the accepted drafts, with the target's hidden states
along that path.

Model proposers may also implement :class:`PositionRollout`: greedy drafts at every output
position of requests whose output is already known, computed all at once (the tracer uses it;
a proposer without it is traced through the three calls above, one position at a time).

Rows of every call are in the same order within a step but slots may be any subset of
``0..max_batch_size-1``. A sequence's prefill ``observe`` comes in the engine step that
prefills it, its first ``propose`` in the next (a fresh request gets its first token from the
prefill alone). A ``propose`` may raise after reading a row's state; an engine may then ask again
for that row alone, and the proposer must answer as if the failed call had not happened. Time spent in ``observe`` counts as prefill after a prefill pass and as
drafting after a verification.

The contract belongs to the engine, which calls it; proposers implement it and import it from
here, so the engine never imports a proposer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import torch

    from specscope.engine.sampling import BatchSampling
    from specscope.trees import TreeShape


NGRAM_MIN_N, NGRAM_MAX_N = 3, 7  # prompt lookup matches n-grams of 3 to 7 tokens, as the paper did


def agreeing_prefix(proposal: Sequence[int], truth: Sequence[int]) -> int:
    """How many leading tokens of ``proposal`` equal ``truth``."""
    count = 0
    for drafted, true in zip(proposal, truth):
        if drafted != true:
            break
        count += 1
    return count


@dataclass(frozen=True)
class ProposerConfig:
    """Everything a factory may need. ``max_seq_len`` is the per-sequence KV capacity the
    engine uses (positions ``0..max_seq_len-1``); ``draft_dir`` is the draft model or head
    checkpoint; ``min_n``/``max_n`` bound the n-gram proposer's match length."""

    method: str
    k: int
    max_batch_size: int
    max_seq_len: int
    draft_dir: Path | None = None
    min_n: int = NGRAM_MIN_N
    max_n: int = NGRAM_MAX_N

    @property
    def sequence_len(self) -> int:
        """The longest sequence the engine runs: ``max_seq_len`` less the ``k + 1`` positions of
        scratch a chain's cache holds past it (:meth:`specscope.engine.runner.Engine.cache_capacity`;
        a tree's holds ``nodes + 1``, so for a tree this is an upper bound)."""
        return max(1, self.max_seq_len - self.k - 1)


@dataclass
class TargetPass:
    """One target forward pass, as proposers see it.

    ``tokens`` [batch, T] were processed at positions ``start[b] + 0..T-1`` (right-padded);
    the first ``num_committed[b]`` of row ``b`` are now part of its sequence. ``hidden[j]``
    [batch, T, hidden_size] is the target's hidden state at index ``hidden_layers[j]``.
    ``prefill`` tells a prompt pass from a verification pass.
    """

    slots: list[int]
    tokens: "torch.Tensor"
    start: list[int]
    num_committed: list[int]
    hidden: list["torch.Tensor"]
    prefill: bool


@dataclass
class ProposeInput:
    """``last_tokens`` [batch] at ``positions`` [batch] (= number of tokens before it);
    ``histories[b]`` = prompt + output of row ``b`` so far, ending with its last token (the
    engine's own lists: read them, never modify them). ``want_confidence`` asks model proposers
    for :attr:`Proposal.confidence` (the tracer does; the engine does not, so its steps pay
    nothing for it); ``first_confidence`` for the first draft's alone ([batch, 1]: a switching
    engine's policy reads it, and no pass after the first pays for it). ``stop_below`` p
    (``confidence:p``; one p for every row, or a p per row, None where a row drafts its k): a
    model proposer ends a row's proposal at its first draft whose probability (as
    :attr:`Proposal.confidence`) is below p, that draft included. ``row_k`` [batch]
    (each ≤ k): each row's own k, where rows of one call draft to different depths (a switching
    engine's, :mod:`specscope.proposers.switching`). A model proposer stops drafting once every
    row has ended — its passes run to the deepest row, k at most; ``tokens`` may then hold fewer
    than k columns (``draft_len`` says each row's)."""

    slots: list[int]
    last_tokens: "torch.Tensor"
    positions: "torch.Tensor"
    histories: list[list[int]]
    k: int
    sampling: "BatchSampling"
    want_confidence: bool = False
    first_confidence: bool = False
    stop_below: float | Sequence[float | None] | None = None
    row_k: Sequence[int] | None = None


@dataclass
class Proposal:
    """``tokens`` [batch, k] (long), ``draft_len`` [batch] (long, 0..k), ``probs``
    [batch, k, vocab] float32 or ``None`` (point masses on ``tokens``), and, when asked for,
    ``confidence`` [batch, k] float32 ([batch, 1]: the first draft's alone, ``first_confidence``):
    the drafter's softmax probability (temperature 1) of each token it proposed — the signal a
    ``confidence:p`` policy reads (``None`` for proposers without a distribution, such as n-gram)."""

    tokens: "torch.Tensor"
    draft_len: "torch.Tensor"
    probs: "torch.Tensor | None" = None
    confidence: "torch.Tensor | None" = None


@dataclass
class TreeProposal:
    """``tokens`` [batch, nodes] (long): the token of every tree node, in ``TreeShape.paths``
    order. A node of rank r is the drafter's (r+1)-th most likely token after its parent, so
    siblings differ and each draft is a point mass (sampling verifies them as such)."""

    tokens: "torch.Tensor"


@dataclass
class RolloutInput:
    """Requests whose whole output is known (teacher forcing). ``tokens`` [batch, T] = prompt
    + output, right-padded; ``prompt_lengths`` and ``lengths`` (host lists) = P and P + n per
    row; ``hidden[j]`` [batch, T, hidden] = the target's hidden state at index
    ``hidden_layers[j]`` over ``tokens``; ``k`` drafts per position; positions are rolled out
    ``window`` at a time (see :mod:`specscope.proposers.rollout`). ``ranks``: feed the true
    tokens at every depth and return the drafter's rank of each true token instead of drafts."""

    tokens: "torch.Tensor"
    prompt_lengths: list[int]
    lengths: list[int]
    hidden: list["torch.Tensor"]
    k: int
    window: int
    ranks: bool = False


@runtime_checkable
class PositionRollout(Protocol):
    """Optional for model proposers. ``rollout`` returns draft tokens [batch, n, k] and their
    probabilities [batch, n, k] (float32), n = the longest output: at output position i (the
    newest token is output[i], at position P + i) the k drafts that ``propose`` would return
    there under greedy decoding, and the drafter's probability of each. With
    ``RolloutInput.ranks``: the drafter's rank [batch, n, k] of the true token output[i + 1 + j]
    at depth j + 1 along the true path (-1 past the output's end), and its probability."""

    def rollout(self, batch: RolloutInput) -> tuple["torch.Tensor", "torch.Tensor"]: ...


@runtime_checkable
class TreeDrafting(Protocol):
    """Optional for model proposers: draft every node of ``tree`` for each row of ``request``
    (``request.k`` = ``tree.depth``), expanding the top-ranked tokens one depth at a time."""

    def propose_tree(self, request: ProposeInput, tree: "TreeShape") -> TreeProposal: ...


def token_probability(logits: "torch.Tensor", tokens: "torch.Tensor") -> "torch.Tensor":
    """softmax(logits) [batch, vocab] at ``tokens`` [batch] -> [batch] float32."""
    return logits.float().softmax(-1).gather(-1, tokens[:, None])[:, 0]


class ConfidentDrafts:
    """A proposal's rows under ``stop_below`` and ``row_k`` (:class:`ProposeInput`): each row's
    length, and whether any row still drafts. Without either every row drafts k. The count is kept
    on the host, a few Python values a row, the drafts' probabilities read once a pass. Kept in
    tensors (an operation per rule and pass), a chain of k = 3 stopped at p had cost 136–206 µs a
    proposal more than the plain chain at B = 1 and 232 µs at B = 8; on the host 39–63 and 85–102 µs,
    most of it the probabilities' read (36–55 and 61 µs) (``benchmarks/bench_confidence.py``,
    2026-12-06)."""

    def __init__(self, request: ProposeInput, device: "torch.device") -> None:
        batch, p, row_k = len(request.slots), request.stop_below, request.row_k
        per_row = list(p) if isinstance(p, Sequence) else [p] * batch
        if len(per_row) != batch or (row_k is not None and len(row_k) != batch):
            raise ValueError(f"stop_below and row_k: expected one value per row ({batch}), got "
                             f"{len(per_row)} and {batch if row_k is None else len(row_k)}")
        # [batch] each row's p, in float32 as the probabilities are (and the simulator compares them)
        self.threshold = [None if value is None else float(np.float32(value)) for value in per_row]
        self.stopped = any(value is not None for value in self.threshold)  # some row stops at its p
        self.stops = row_k is not None or self.stopped
        self.reads = request.want_confidence or self.stopped  # every draft's probability is read
        self.first = request.first_confidence  # ... or the first draft's
        self.cap = [request.k] * batch if row_k is None else [min(int(c), request.k) for c in row_k]  # each row's k
        self.count = [0] * batch  # drafts counted as they come, where a rule stops rows
        self.live = [c > 0 for c in self.cap]  # rows still drafting
        self.k, self.device = request.k, device

    @property
    def lengths(self) -> "torch.Tensor":
        """[batch] long: each row's drafts (k for every row without a rule, made on the device: a
        plain chain's proposal waits for no copy from the host)."""
        import torch

        if not self.stops:
            return torch.full((len(self.count),), self.k, dtype=torch.long, device=self.device)
        return torch.tensor(self.count, dtype=torch.long, device=self.device)

    def probability(self, logits: "torch.Tensor", tokens: "torch.Tensor", first: bool) -> "torch.Tensor | None":
        """:func:`token_probability` of this pass's drafts [batch] where it is read (asked for, or
        stopped at; ``first``: the first pass, where the first draft's alone is asked for), else
        ``None``: an engine that reads none pays nothing for it."""
        return token_probability(logits, tokens) if self.reads or (self.first and first) else None

    def sample(self, sampling: "BatchSampling", probs: "torch.Tensor") -> "torch.Tensor":
        """One draft per row from ``probs`` [batch, vocab] (:meth:`BatchSampling.sample`), drawn only
        for the rows still drafting: a row that has ended takes no more from its generator (its
        later drafts, argmax, are never proposed), so a seeded request drafts alike whatever its
        neighbours."""
        if not self.stops or all(self.live):
            return sampling.sample(probs)
        token = probs.argmax(-1)
        live = [row for row, drafting in enumerate(self.live) if drafting]
        if live:
            token[live] = sampling.rows(live).sample(probs[live])
        return token

    def add(self, probability: "torch.Tensor | None") -> bool:
        """Count one more draft, of ``probability`` [batch] (read where some row stops at a p), for
        the rows still drafting; whether another pass is wanted (some row still drafts: its draft
        reached its p and its length is below its k; always, without either)."""
        if not self.stops:
            return True
        told = probability.tolist() if self.stopped else None
        for row, drafting in enumerate(self.live):
            if drafting:
                self.count[row] += 1
                p = self.threshold[row]  # a row without a p is never stopped by it (not even a NaN)
                self.live[row] = self.count[row] < self.cap[row] and (p is None or told[row] >= p)
        return any(self.live)


class Proposer(Protocol):
    """What the engine calls; see the module docstring for the contract."""

    name: str
    hidden_layers: tuple[int, ...]

    def observe(self, target_pass: TargetPass) -> None: ...

    def propose(self, request: ProposeInput) -> Proposal: ...

    def release(self, slot: int) -> None: ...


@runtime_checkable
class PolicyTimed(Protocol):
    """A proposer that runs a policy over other proposers and tells which part of its time was
    the policy's own work (the step record's ``policy_s``), how many rows it decided
    (``policy_rows``), and what it chose for each row (its ``choices``)."""

    def take_policy_seconds(self) -> float:
        """Seconds of the policy's own work since the last call (then restarts from 0)."""
        ...

    def serve_at(self, batch_size: int) -> None:
        """The batch size its requests run at from now: its admission gate's."""
        ...

    def take_policy_rows(self) -> int:
        """Rows the policy decided since the last call (the step record's ``policy_rows``; then
        restarts from 0): those its admission gate did not commit to a chain."""
        ...

    def take_choices(self) -> dict[int, tuple[str, int]]:
        """Slot → (method, k) of each row at its last proposal since the last call (then
        forgotten): ``("none", 0)`` where it drafted nothing."""
        ...
