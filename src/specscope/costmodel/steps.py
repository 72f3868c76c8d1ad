"""Step records: what one engine step did and how long each phase took.

The engine writes one :class:`StepRecord` per step (:mod:`specscope.engine.runner`), as one JSON
line in a bench's ``--records`` file; the cost-model fit (:mod:`specscope.costmodel.fit`) and the
measured time split (:mod:`specscope.analysis.timesplit`) read them back as
:class:`MeasuredStep`, a record plus the run it came from. They live here, below the engine, so
that the fit can name the type it fits.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from specscope.methods import NO_SD

__all__ = ["NO_SD", "StepRecord", "MeasuredStep"]


@dataclass
class StepRecord:
    """One engine step. ``k``: the deepest draft it was configured to propose — a chain's k; a tree
    step's, the tree's depth (its drafter's passes; its nodes are in ``tree`` and
    ``tokens_proposed``, where a bench's row and table name the tree's k by its node count);
    ``kv_tokens``: tokens in the KV cache of the running sequences at the
    start of the step (Σ over the rows it decoded); ``kv_longest``: the longest of those rows'
    caches (0 in a record from before the field); ``tokens_verified``: positions the target scored in verification
    (batch × (max draft_len + 1); a tree step: batch × (nodes + 1)); ``tokens_emitted``: per
    request, in batch order (prefill's first token included); ``overhead_s`` = step wall time −
    the four measured phases (in ``specscope serve``, plus the serving loop's own time before
    the step: see :mod:`specscope.serve.engine_loop`); ``tree``: the static tree the step drafted and verified
    (:class:`specscope.trees.TreeShape` name, ``None`` for a chain of ``k``); ``policy_s``: the
    part of ``draft_s`` that was a policy's own work — an engine running a policy file
    (``method`` :data:`~specscope.methods.LEARNED`): its observations, decision and bookkeeping,
    beyond what its proposers drafted and looked up (0 for every other method);
    ``tokens_proposed``: the draft tokens its rows proposed, Σ draft_len (``None`` in records from
    before the field: then every row is taken at the widest, :attr:`batched_tokens`);
    ``choices``: where a policy chose per row (method :data:`~specscope.methods.LEARNED`, whose
    ``k`` is the deepest it may propose), each running request's ``[method, k]`` in batch order
    (``["none", 0]``: it drafted nothing; ``None`` for a request the step prefilled), else ``None``;
    ``confidence``: p of a chain whose drafter ended each row at its first draft below p (``k`` at
    most; ``bench --confidence``), else ``None``; ``policy_rows``: the rows a policy decided at the
    step, the others committed to a chain by its admission gate (``None``: no policy ran, or a
    record from before the field, where it decided every decoding row)."""

    step: int
    method: str
    k: int
    batch_size: int
    tokens_verified: int
    tokens_emitted: list[int]
    draft_s: float
    verify_s: float
    sample_s: float
    overhead_s: float
    kv_tokens: int
    prefill_tokens: int
    prefill_s: float
    prefill_requests: int = 0  # prompts the step prefilled (``prefill_tokens`` in all)
    tree: str | None = None
    policy_s: float = 0.0
    prefill_width: int = 0  # the longest prompt it prefilled (0: none, or a record from before the field)
    tokens_proposed: int | None = None
    choices: list[list | None] | None = None  # [batch_size]: [method, k] per request (a policy's), None if prefilled
    kv_longest: int = 0  # the longest cache among the rows it decoded (0: none, or a record from before the field)
    confidence: float | None = None  # p where the drafter stopped each row at its first draft below p
    policy_rows: int | None = None  # rows a policy decided (None: every decoding row)

    @property
    def decode_s(self) -> float:
        """The step's time beyond its prefill: drafting, verification, sampling and overhead."""
        return self.draft_s + self.verify_s + self.sample_s + self.overhead_s

    @property
    def seconds(self) -> float:
        """The step's whole time: its prefill and :attr:`decode_s`."""
        return self.prefill_s + self.decode_s

    @property
    def decoded(self) -> int:
        """Requests the step drafted for and verified: those running less those it prefilled
        (a fresh request gets its first token from the prefill alone)."""
        return self.batch_size - self.prefill_requests

    @property
    def batched_tokens(self) -> int:
        """Σ (k + 1) over the rows it decoded, each at the k it proposed (the simulator's
        :attr:`~specscope.costmodel.base.StepLoad.batched_tokens`, what a drafting is priced by);
        ``tokens_verified``, every row at the widest, in a record without ``tokens_proposed``."""
        return self.tokens_verified if self.tokens_proposed is None else self.tokens_proposed + self.decoded

    @property
    def drafter_tokens(self) -> int:
        """Σ (k + 1) over the rows it decoded as the drafter's passes serve them: each row at the k
        it proposed (:attr:`batched_tokens`), or, where the drafter stopped rows at its confidence
        (``confidence``), every row at the deepest (``tokens_verified``): its passes run for every row
        until the last has ended, as the simulator prices them
        (:class:`~specscope.sim.pricing.DeepestPasses`)."""
        return self.batched_tokens if self.confidence is None else self.tokens_verified

    @property
    def prefill_positions(self) -> int:
        """Positions the prefill forward covered: its prompts right-padded to the longest
        (``prefill_requests × prefill_width``), as the reference engine batches them; the prompt
        tokens themselves in a record without a width."""
        return self.prefill_requests * self.prefill_width if self.prefill_width else self.prefill_tokens

    @property
    def prefill_pairs(self) -> int:
        """Query–key pairs its prefill's attention computed among the prompts' positions: every
        prompt right-padded to the longest, ``prefill_requests × prefill_width²``, as the reference
        engine batches them; the prompt tokens squared in a record without a width (exact for one
        prompt)."""
        return self.prefill_requests * self.prefill_width ** 2 if self.prefill_width else self.prefill_tokens ** 2

    @property
    def kv_read(self) -> int:
        """Cached tokens its attention read: every row it decoded padded to the longest cache
        (``decoded × kv_longest``), as the reference engine batches them (its keys form one
        rectangle); ``kv_tokens``, the cached tokens themselves, in a record without the longest."""
        return self.decoded * self.kv_longest if self.kv_longest else self.kv_tokens

    def to_json(self) -> str:
        """The record as one JSON line (no newline)."""
        return json.dumps(asdict(self))


@dataclass
class MeasuredStep(StepRecord):
    """A :class:`StepRecord` read back from a file, plus ``run``: which run of the file it
    belongs to (a run starts at the top of each file and wherever ``step`` does not increase or
    ``method``/``k`` change; see :func:`specscope.analysis.timesplit.read_steps`), and ``source``:
    the file it was read from."""

    run: int = 0
    source: str = ""
