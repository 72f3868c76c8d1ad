"""What every cost model answers: the time of a target forward, of drafting, and of overhead.

The simulator aggregates each step of a batch into a :class:`StepLoad` (arrays over steps) and
asks the cost model for

- ``forward_time(batched_tokens, kv_tokens, num_running)``: one target forward that processes
  ``batched_tokens`` new tokens of ``num_running`` sequences while ``kv_tokens`` tokens sit in
  the KV cache (all running sequences together);
- ``prefill_forward_time(prompt_tokens, num_prompts, prompt_pairs)``: one target forward over
  ``num_prompts`` new prompts of ``prompt_tokens`` positions in all, with an empty cache, whose
  attention computes ``prompt_pairs`` query–key pairs among them — Σ over the prompts of their
  length², each at the longest on an engine that pads (a causal kernel computes about half of each
  square; a fitted price per pair carries the half) — a fitted model may price a prompt's
  positions apart from verified tokens, and those pairs;
- ``drafting_time(proposer, load, verify_time)``: the proposer's drafting for that step;
- ``overhead_s``: engine overhead per step (scheduling, sampling, bookkeeping);
- ``admit_s``: a server's work on arriving requests outside its engine's steps (parsing the HTTP
  request, tokenizing the prompt) where the engine waits for it: in an iteration that admits
  requests into an idle engine (every request at batch 1; a busy engine's steps overlap it).
  0 in the paper's fit, the rooflines and fits to step records, which do not see it;
- ``pads_verification``: whether the engine runs rectangular batches, as specscope's reference
  engine does: it verifies every request padded to the longest proposal instead of Σ (k + 1)
  tokens, its attention reads every request's cache padded to the longest
  (:meth:`StepLoad.cached_read`), and it prefills the prompts that arrive together padded to the
  longest (prompts × the longest, instead of their sum).

Drafting models, one per proposer:

- :class:`FractionDrafting` — a CPU lookup (n-gram, suffix): a fixed fraction of the step's
  verify time, charged in proportion to the share of running requests that propose something.
- :class:`LinearDrafting` — a model drafter (EAGLE, draft model, MTP) run once per step for the
  whole batch, on every step: ``c_fixed + c_tok · (k + 1) + c_kv · kv_tokens`` where ``k + 1``
  is per request (the mean over running requests when they differ) and ``kv_tokens`` counts
  the whole batch's cache — the form of the paper's fitted EAGLE model.

Drafting is priced per **pass**: a model drafter runs sequential passes, each over a given
width (tokens per sequence). A chain of k is k passes of width 1 (``StepLoad.draft_widths`` is
then ``()`` and k comes from ``batched_tokens``); a static tree's step makes ``depth`` passes of
widths :attr:`specscope.trees.TreeShape.draft_pass_widths` (``draft_widths``), while its
verification covers ``nodes + 1`` tokens per sequence. :func:`draft_passes` counts a step's
passes plus one, :func:`draft_tokens_per_sequence` the tokens they read per sequence plus one: a
chain's k + 1 both, a tree's ``depth + 1`` and ``Σ widths + 1`` (3x2x1x1: 4 passes over
1 + 3 + 6 + 6 = 16 tokens a row).

A drafter with its own KV cache also reads every new prompt once (its prefill):
``prefill_time(prompt_tokens)``, added to the target's prefill (zero for
:class:`FractionDrafting` and in the paper's models, which do not charge it; a fitted model
charges whatever a method's measured prefills cost beyond the target's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class StepLoad:
    """The work of each step of a simulated run (all arrays [steps], float64)."""

    batched_tokens: np.ndarray  # tokens the target verifies: Σ over running requests of (k+1)
    kv_tokens: np.ndarray  # tokens in the KV cache of the running requests
    num_running: np.ndarray  # requests taking part in the step
    num_proposing: np.ndarray  # requests that proposed at least one draft token
    padded_tokens: np.ndarray  # num_running × max (k+1): what an engine that pads the batch verifies
    draft_widths: tuple[int, ...] = ()  # a tree step's drafter pass widths per sequence; () = chains
    longest_cached: np.ndarray | None = None  # the longest cache among the running requests (None: all alike)
    reads_confidence: np.ndarray | None = None  # the drafter's passes whose drafts' probabilities it reads: each
    # to stop rows at a confidence (``confidence:p``, a policy's rule), or the first, a policy's feature (None: none)

    def cached_read(self, pads: bool) -> np.ndarray:
        """[steps] the cached tokens a step's attention reads: ``kv_tokens``, or on an engine that
        pads (``pads``) every running request's cache padded to the longest, ``num_running ×
        longest_cached`` (the same where every request's cache is alike)."""
        if not pads or self.longest_cached is None:
            return self.kv_tokens
        return self.num_running * self.longest_cached

    def peak_cached(self, prefilled: np.ndarray | float = 0.0) -> float:
        """The most tokens the KV cache holds in any step: its cached tokens, those it verifies, and
        the prompts prefilled beside them (``prefilled``: per step, or one number)."""
        return float(np.max(self.kv_tokens + self.batched_tokens + prefilled, initial=0.0))


def draft_passes(load: StepLoad) -> np.ndarray:
    """[steps] the drafter's sequential passes in a step, plus one: the mean ``k + 1`` of a chain
    (``batched_tokens / num_running``), ``depth + 1`` of a tree step (``len(draft_widths) + 1``)."""
    if load.draft_widths:
        return np.full(np.shape(load.num_running), float(len(load.draft_widths) + 1))
    return load.batched_tokens / np.maximum(load.num_running, 1)


def draft_tokens_per_sequence(load: StepLoad) -> np.ndarray:
    """[steps] tokens per running sequence the drafter reads over a step's passes, plus one:
    the mean ``k + 1`` of a chain (``batched_tokens / num_running``), ``Σ draft_widths + 1`` of
    a tree step."""
    if load.draft_widths:
        return np.full(np.shape(load.num_running), float(sum(load.draft_widths) + 1))
    return load.batched_tokens / np.maximum(load.num_running, 1)


class Drafting(Protocol):
    """Drafting time of one proposer per step."""

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray: ...

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray: ...

    def to_json(self) -> dict: ...


@dataclass(frozen=True)
class FractionDrafting:
    """Lookup drafting: ``ratio`` × verify time × (proposing / running requests)."""

    ratio: float

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray:
        share = np.divide(load.num_proposing, load.num_running, out=np.zeros_like(verify_time),
                          where=load.num_running > 0)
        return self.ratio * verify_time * share

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray:
        return np.zeros_like(np.asarray(prompt_tokens, dtype=float))

    def to_json(self) -> dict:
        return {"kind": "fraction", "ratio": self.ratio}


@dataclass(frozen=True)
class LinearDrafting:
    """Model drafting, once per step:
    ``c_fixed + c_tok·passes + c_kv·kv_tokens + c_req·num_running + c_multi·[num_running > 1]
    + c_tree·[tree step] + c_batched·num_running·tokens + c_confidence·reads`` seconds
    (``passes``: the step's
    sequential passes plus one, :func:`draft_passes`; ``tokens``: the tokens they read per
    sequence plus one, :func:`draft_tokens_per_sequence` — on a chain both its mean ``k + 1``;
    ``c_multi``: the drafter's
    forwards batch more than one sequence, see :mod:`specscope.costmodel.linear`; ``c_tree``: what
    a tree step adds whatever its size — top-b expansion, tree masks, compaction of the accepted
    path; ``c_batched``: per token a row's passes read, over the batch's rows — a drafter whose
    passes each cost more with every row they carry, as on a CPU, where one pass over n rows costs
    a + b·n; ``c_confidence``: per pass whose drafts' probabilities are read, ``reads`` =
    :attr:`StepLoad.reads_confidence` — on the reference engine a softmax, a copy to the host and,
    to stop rows at a confidence, a rule per row), and
    ``c_prefill·prompt_tokens`` for the drafter's prefill. The paper's fitted EAGLE model has only the first three terms.
    A pass costs ``c_tok`` however wide, and each row-token it reads ``c_batched``: on ``specscope
    serve`` the draft model's 3x2x1x1 tree steps (4 passes over 16 tokens a row) took 4.3 ms at
    batch 1 against 2.8 ms for a chain's 4 passes of one token; priced per token read, a fit to
    chains put them at 11 ms (2026-12-05, docs/calibration.md).

    ``c_fixed`` and ``c_req`` may lie below 0, down to ``−c_tok`` and ``−c_batched``: drafting at
    k proposed tokens is ``(c_fixed + c_tok) + c_tok·k`` (and per row ``(c_req + c_batched) +
    c_batched·k``), and it is the parts at k = 0 that cannot be negative. A drafter that runs k
    passes costs a pass per proposed token plus a little: on the bundled draft model at batch 1,
    0.88, 1.45 and 2.55 ms at k = 1, 2, 4 — 0.56 ms a pass and 0.32 ms besides, which in the
    ``k + 1`` form is a ``c_fixed`` of −0.24 ms."""

    c_fixed: float
    c_tok: float
    c_kv: float
    c_req: float = 0.0
    c_prefill: float = 0.0
    c_multi: float = 0.0
    c_tree: float = 0.0
    c_batched: float = 0.0
    c_confidence: float = 0.0

    @classmethod
    def per_proposed_token(cls, c_fixed: float, c_tok: float, c_req: float, c_batched: float,
                           **terms: float) -> "LinearDrafting":
        """The drafting whose cost at k proposed tokens is ``c_fixed + c_tok·k + (c_req +
        c_batched·k)·rows`` (+ ``terms``), written in the ``k + 1`` form."""
        return cls(c_fixed=c_fixed - c_tok, c_tok=c_tok, c_req=c_req - c_batched, c_batched=c_batched, **terms)

    def at_no_proposal(self) -> dict[str, float]:
        """``c_fixed`` and ``c_req`` per proposed token: what a step and a row cost at k = 0."""
        return {"c_fixed": self.c_fixed + self.c_tok, "c_req": self.c_req + self.c_batched}

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray:
        running = load.num_running > 0
        per_request = draft_tokens_per_sequence(load)  # mean k + 1 on a chain
        seconds = (self.c_fixed + self.c_tok * draft_passes(load) + self.c_kv * load.kv_tokens
                   + self.c_req * load.num_running + self.c_multi * (load.num_running > 1)
                   + self.c_tree * bool(load.draft_widths) + self.c_batched * load.num_running * per_request)
        if self.c_confidence and load.reads_confidence is not None:
            seconds = seconds + self.c_confidence * load.reads_confidence
        return np.where(running, seconds, 0.0)

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray:
        return self.c_prefill * np.asarray(prompt_tokens, dtype=float)

    def to_json(self) -> dict:
        return {"kind": "linear", "c_fixed": self.c_fixed, "c_tok": self.c_tok, "c_kv": self.c_kv,
                "c_req": self.c_req, "c_prefill": self.c_prefill, "c_multi": self.c_multi, "c_tree": self.c_tree,
                "c_batched": self.c_batched, "c_confidence": self.c_confidence}


class CostModel(Protocol):
    """Predicts step times (seconds) for the simulator."""

    name: str
    overhead_s: float
    admit_s: float
    pads_verification: bool

    def forward_time(self, batched_tokens: np.ndarray, kv_tokens: np.ndarray,
                     num_running: np.ndarray) -> np.ndarray: ...

    def prefill_forward_time(self, prompt_tokens: np.ndarray, num_prompts: np.ndarray,
                             prompt_pairs: np.ndarray | float = 0.0) -> np.ndarray: ...

    def drafting_for(self, proposer: str) -> Drafting: ...

    def describe(self) -> dict: ...
