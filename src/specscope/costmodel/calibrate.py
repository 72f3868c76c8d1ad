"""Fit the linear cost model to a black-box engine from what an OpenAI-API sweep observes.

**What the fit needs from any server** (the engine-agnostic contract): streamed completions
with one chunk per engine step (vLLM's and SGLang's default ``--stream-interval 1``), a final
usage chunk (``stream_options.include_usage``: prompt and output lengths), and, for SD cells,
the draft-token counter (vLLM's ``vllm:spec_decode_num_draft_tokens``; ``specscope serve``
exports the same). Token ids per chunk (``specscope serve`` always, vLLM with
``return_token_ids``) sharpen the cache lengths and the batching check; without them each
chunk is taken to carry the request's mean. SGLang exports no draft-token counter: its cells
are taken to verify k + 1 tokens per step. ``specscope sweep`` records all of it per cell
(:mod:`specscope.backends.openai.sweep`, ``timeline``), and
:mod:`specscope.backends.openai.calibration` reads a sweep into :class:`CellRun` and validates
the fit on held-out cells.

**Derivation.** In steady state the gap between two chunks of one request is one engine step.
Its midpoint ``m`` fixes the step's load, from every request of the cell (times relative to the
run's start): the running requests are those whose first chunk came before ``m`` and whose last
came at or after it (``n``); each verifies ``w`` tokens, so the forward covers ``n·w`` tokens
over the cached ``Σ (prompt + tokens received by m)`` (``n`` × the longest where the engine
pads: its attention reads every row's cache padded to the longest). The requests it prefilled
(:func:`_prefilled`: first chunk within half a gap of its end, sent before it began, once per
running request; gaps the timing cannot tell left out) add one more forward: ``n_p`` prompts over
``P`` positions — their tokens, or ``n_p`` × the longest where the engine pads, as ``specscope
serve`` does. This reads a server that admits every waiting request at its next step — its batch
limit, vLLM's ``--max-num-seqs``, at or above the sweep's concurrency, as ``specscope sweep``
launches its servers; a request that waited for a free slot would be priced in no gap. A cell
whose server ran fewer of its requests at once than the sweep kept in flight while one waited
through several steps of another for its first chunk is refused (:func:`_check_batch_limit`: a
batch limit below the concurrency, or a server that starts fewer prompts per step).
``w`` = 1 without SD; with SD ``1 + draft tokens / decode steps`` from the counters (the mean
proposal, so n-gram steps that found nothing count), at most k + 1 (a tree: nodes + 1). A
request running alone verifies more than one token only on the steps it proposed (n-gram found
nothing on about half the steps of the bundled code workload), and its own chunk tells which
did: one of several tokens had a draft accepted, so its step proposed; of the chunks of one
token, the share ``(drafts − chunks of several tokens) / chunks of one token`` did (the
drafts counter: vLLM's ``vllm:spec_decode_num_drafts``, which ``specscope serve`` exports too).
Each such gap counts as a multi-token forward with that chance and verifies 1 + the mean
proposal of a step that proposed times it (:func:`_proposed`); without token ids, every gap
the cell's share of proposing steps, and without the counter, always. (The cell's share alone
is the same at every k, so it could not tell a multi-token forward's cost from n-gram's own on
every step: on three sweeps of ``specscope serve`` that read c_multi at +42 … +192 % of the
engine's own step records; per chunk, +32 … +70 % or below the 5 % of a step compared.) An
engine that pads (``specscope serve``: the cell's engine was launched as specscope) verifies every
row at the batch's widest proposal: ``n·(1 + d·(1 − (1 − p)^n))`` tokens, ``d`` the drafts of a row
that proposes and ``p`` the share of rows' steps that propose (``n·w`` where every row proposes).
Then

    gap = forward(n·w, cached, n + n_p) + prefill(P)  [prefill(P) only when P > 0]
          + drafting_method(w, n, P)

A request that started alone — sent while no other request of its cell was in flight, and no
other sent before its first chunk (at batch 1, every request) — adds one more observation: its
time to first chunk is the server's work on the arriving request outside the engine's steps
(parsing, tokenizing: ``admit_s``, which only an idle engine waits for) and then a step that only
prefills it (no decode forward runs in it):

    first chunk = admit_s + prefill(P) + forward's per-sequence and multi-token terms for the one
                  prompt + drafting prefill(P)

On ``specscope serve`` (bundled models, batch 1) the first chunk came 2.6 ms after the engine's
own prefill step; without this term the fit fell 1–3 % short of every batch-1 cell's duration.

In both, forward = ``c_fixed + c_tok·tokens + c_kv·cached + c_req·sequences + c_multi·[tokens > 1]
+ c_batch·([n > 1] + [n_p > 1])`` (``c_batch`` once for each forward over several sequences — the
verification of ``n`` rows, the prefill of ``n_p`` prompts: see :mod:`~specscope.costmodel.linear`;
``c_fixed`` only where a decode forward ran) and prefill = ``c_prompt_fixed + c_prompt·P +
c_prompt_kv·Q``, ``Q`` the query–key pairs of its attention among the prompts' positions (Σ
prompt², ``n_p`` × the longest² where the engine pads; a step record's ``prefill_requests ×
prefill_width²``) (a
prefill forward's own fixed cost: on ``specscope serve`` a prompt prefilled alone took 6.8 ms +
0.061 ms a position in the server's step records beside a decode forward's 3.1–3.5 ms; priced at
``c_fixed`` — the first chunk read as a decode forward plus its prefill — the held-out worst error of
three sweeps was 14–17 %, 9–13 % with its own term, docs/calibration.md; and a prompt's position has its own price, as a prefill runs other
kernels than a verification of a few tokens a row: on ``specscope serve`` 0.042–0.052 ms a
position, where a first chunk seen from outside grew by 0.041–0.044 ms per prompt token, against
0–0.058 ms per verified token; :class:`~specscope.costmodel.linear.LinearCostModel`; engine overhead per step is part of
``c_fixed``, so ``overhead_s`` = 0) and drafting = ``c_fixed + c_tok·(w − 1) + c_req·n +
c_prefill·P + c_batched·n·(w − 1)`` — per proposed token (a drafter's k passes; a tree cell's
drafter makes ``depth`` passes, priced by ``c_tok``, over Σ ``draft_pass_widths`` tokens a row —
fewer than the ``nodes`` it verifies — priced by ``c_batched``, plus ``c_tree`` on each of its
steps, as the simulator prices a tree step: so trees in a sweep tell a verified token's cost apart
from a drafter's per row and draft, which a chain's ``n·(w − 1)`` and ``n·w`` cannot; and in step
records, ``c_confidence·(w − 1)`` on the steps whose drafter read each pass's draft probabilities to
stop rows at a confidence, the record's ``confidence``), each term ≥ 0,
written in the model's ``k + 1`` form (whose ``c_fixed`` and ``c_req`` may then lie below 0; in
that form, with its terms ≥ 0, a drafter's cost at k = 0 could not be below its cost per pass, and
the fit priced the bundled draft model's k = 1 steps 0.13 ms high and k = 4 low) — the last term
the batch's draft tokens, for a drafter whose passes cost more with every row they carry
(:class:`~specscope.costmodel.base.LinearDrafting`; its fixed cost only on steps that decode).
The forward, ``admit_s`` and every method's drafting are fitted together, as one non-negative
least-squares problem (:func:`~specscope.costmodel.fit.nonnegative_least_squares`; on timelines
made by an exact linear engine it recovers the coefficients), every error relative to the mean gap of its cell: cells of small and
large steps weigh alike, and within a cell the fit matches the mean gap — what throughput
depends on. (Weighing each gap by itself instead fits the typical gap of a right-skewed cell and
underestimated the mean one by 15–20 % at batch 4 and 8 on ``specscope serve``. Fitting the
forward and the drafting alternately, as this module once did, crawls along the valley where the
forward's per-token term and a drafter's per-batched-token term trade places: on such exact
timelines it stopped at twice the true per-token cost.)

**Machine speed, per pair.** A shared machine's speed wanders by ±15 % over seconds, so cells
measured minutes apart saw different machines. A ``none`` cell and the SD cell measured beside
it (paired or interleaved baselines: same ``pair``) saw the same one, and the ``none`` cell
tells how fast it was: its mean gap over the fitted forward's prediction, relative to the
median of that ratio over the pairs of its batch size (:func:`pair_speeds`). Both cells' gaps
are divided by it and the model refitted, :data:`DRIFT_ROUNDS` times at most. On the 27-cell
sweep of ``benchmarks/bench_calibration.py`` (interleaved) this took the leave-one-out error
from a median of 5.5 % and a worst of 31.6 % to 3.9 % and 11.7 %: the ``none`` cells' mean gaps
at one batch size had spread ±20 % around the fit, which the drafting terms had absorbed.
The first chunk (queueing and prefill) is not a gap; it is an observation only where the request
started alone. A chunk the client read together with another (arrivals closer than 0.2× the
cell's median gap: it was sent before the client caught up) arrived late, so gaps count only
between two chunks each read alone. Gaps over 3× their cell's median (for steps with or without
a prefill apart; gaps that prefill, and first chunks, against a line through their prefilled
positions) are stalls of the shared machine and left out. (Judged against the median alone,
every gap over seven prompts that arrived together was one: the fit never saw a large prefill,
priced a position at 0.033 ms where the engine took 0.054 ms per position of its padded
seven-prompt prefills, and predicted the batch-8 cells 16–24 % short.)

**Servers that batch several steps per chunk** (``--stream-interval N > 1``) are detected and
refused, not divided: a cell where over 5 % of the decode chunks carry more than ``w_max`` =
k + 1 tokens (nodes + 1; 1 without SD), or, without token ids, whose mean tokens per chunk exceed
``w_max``, is an error naming the cell. Dividing a gap by an unknown step count would guess.
Without token ids a chunk of two steps that accepted little still carries fewer than ``w_max``;
an SD cell's counters tell (:func:`_check_counters`): a chunk a step gives at most one proposing
step and k draft tokens a decode chunk, and its output tokens are at most one a chunk plus the
drafts accepted (merging the chunks of a bundled n-gram k = 4 sweep in pairs left 3.4 draft
tokens a decode chunk, below k, but 92 tokens beyond one a chunk against 85 accepted drafts).
Counters that contradict one another are refused too. An SD cell without a draft-token counter
is taken to verify k + 1 tokens a step, and one without the drafts counter to propose on every
step; :func:`counter_assumptions` words the warning that says so.

**Cross-check.** Where the server exports vLLM's ``vllm:iteration_tokens_total`` and
``vllm:inter_token_latency_seconds`` histograms, their run means are printed beside the fit's
reconstruction for every cell: the mean gap over the chunk gaps, and the tokens per step two
ways — verified and prefilled (the load the forward is priced on: rejected drafts included), and
emitted and prefilled, which is how vLLM counts an iteration's tokens (the tokens its requests
generated plus the prompts of those it prefilled; a review found the first set beside vLLM's,
which reads lower on SD cells by the rejected drafts). ``specscope serve`` exports both
histograms too, counted as vLLM counts them (:mod:`specscope.serve.histogram`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from specscope.costmodel.base import LinearDrafting
from specscope.costmodel.fit import (draft_rows, measured_extent, nonnegative_least_squares, pairs_fitted, records_of,
                                     repeats, unseparated, with_policy_work, within_batch_size)
from specscope.costmodel.linear import (TARGET_TERMS, FittedCell, FittedSweep,  # TARGET_TERMS: Gaps.target_features' columns
                                        LinearCostModel)
from specscope.costmodel.steps import MeasuredStep
from specscope.errors import SpecscopeError
from specscope.methods import LEARNED, NO_SD, method as method_named, proposal_label
from specscope.trees import TreeShape
from specscope.version import code_version

DRIFT_ROUNDS = 3  # refits, each after re-estimating every pair's speed
CONVERGED = 1e-5  # ... stopping once no pair's speed moves by more than this (relative)
STALL = 3.0  # a gap over STALL × the typical gap of its kind is a stall, left out (see _not_stalled)
FITTED_STALL = 2.0  # ... and one over FITTED_STALL × its price in a first fit (see _without_stalls)
STALL_SHARE = 0.05  # ... unless more than this share of the gaps are over it
NEAR = 0.2  # chunks of one request closer than NEAR × the cell's median gap were read together
DRAFTING_TERMS = ("c_fixed", "c_tok", "c_req", "c_prefill", "c_batched", "c_tree",  # of Gaps.drafting_features: a
                  "c_confidence")  # drafter's fit
BATCHED_SHARE = 0.05  # above this share of over-full chunks, a cell's server batches steps
WAITED = 3  # steps of another request one waited through for its first chunk: it waited for a free slot


@dataclass
class CellRun:
    """One measured cell of a sweep: its labels, figures, and per-request chunk timeline."""

    cell_id: str
    method: str
    k: int  # drafts per step (a tree's node count)
    tree: TreeShape | None
    batch_size: int
    workload: str
    throughput: float
    num_draft_tokens: int | None
    timeline: list[dict]
    server_means: dict[str, float | None]  # HISTOGRAMS fields of the row
    baseline_for: str | None = None  # a paired none cell: the SD server it was run for
    pair: str | None = None  # shared by a none cell and the SD cell it was measured beside (paired, interleaved)
    num_drafts: int | None = None  # request-steps that proposed (vLLM's spec_decode_num_drafts; None: not exported)
    num_accepted_tokens: int | None = None  # drafts accepted (vLLM's spec_decode_num_accepted_tokens; None: not exported)
    metrics_error: str | None = None  # why the sweep could not scrape the server's counters (None: it could)
    pads: bool = False  # the engine runs rectangular batches (specscope serve; vLLM and SGLang do not)
    engine: str = ""  # the sweep's name for the engine that served it
    checkpoints: dict[str, str] = field(default_factory=dict)  # "model", "draft": fingerprints of the engine's local dirs

    @property
    def proposal(self) -> str:
        """What it proposes: ``ngram k=3``, ``eagle tree=2x1x1``, ``none``."""
        return proposal_label(self.method, self.k, self.tree.name if self.tree is not None else None)

    @property
    def label(self) -> str:
        """How messages name it: its file in the sweep, ``cells/ID.json (ngram k=3, B=8)``."""
        return f"cells/{self.cell_id}.json ({self.proposal}, B={self.batch_size})"


@dataclass
class Gaps:
    """Observed step times (arrays [gaps]) and the load of the step each spans: chunk gaps, first
    chunks of requests that started alone, or an engine's step records (:func:`step_gaps`)."""

    seconds: np.ndarray
    tokens: np.ndarray  # n·w: the tokens the step verifies
    cached: np.ndarray
    sequences: np.ndarray  # n + n_p
    decodes: np.ndarray  # 1 where a decode forward ran (0: a request's first chunk from an idle engine)
    prefills: np.ndarray  # 1 where a prefill forward ran
    multi: np.ndarray  # forwards of more than one token
    width: np.ndarray  # w
    passes: np.ndarray  # the drafter's passes: w − 1 on a chain, depth on a tree
    drafted: np.ndarray  # tokens a running row's drafter passes read: w − 1 on a chain, Σ pass widths on a tree
    tree: np.ndarray  # 1 on a step that drafted and verified a token tree
    reads: np.ndarray  # 1 on a step whose drafter read each pass's draft probabilities to stop rows at a confidence
    running: np.ndarray  # n
    prefill: np.ndarray  # P: the positions it prefills
    pairs: np.ndarray  # the query–key pairs its prefill's attention computes (costmodel.base)
    idle: np.ndarray  # 1 for a request's first chunk from an idle engine (its arrival's work: admit_s)
    method: np.ndarray  # [gaps] str
    scale: np.ndarray  # the mean gap of its cell: errors are weighed relative to it

    def target_features(self) -> np.ndarray:
        batches = 1.0 * (self.running > 1) + ((self.sequences - self.running) > 1)  # forwards of several sequences
        return np.column_stack([self.decodes, self.tokens, self.cached, self.sequences, self.multi, self.prefill,
                                batches, self.idle, self.prefills, self.pairs])

    def drafting_features(self) -> np.ndarray:
        passes, drafted = (np.where(self.running > 0, a, 0.0) for a in (self.passes, self.drafted))
        return np.column_stack([self.running > 0, passes, self.running, self.prefill, self.running * drafted,
                                self.tree * (self.running > 0), self.reads * passes])

    def select(self, mask: np.ndarray) -> "Gaps":
        return Gaps(**{name: value[mask] for name, value in vars(self).items()})


def chunk_counts(request: dict) -> np.ndarray:
    """[chunks] the tokens each streamed chunk of a timeline's ``request`` carried: its recorded
    counts, or, from a server that sent no token ids, the request's mean per chunk."""
    counts = request.get("chunk_tokens")
    if counts is None:
        counts = [request["output_tokens"] / len(request["chunk_ms"])] * len(request["chunk_ms"])
    return np.asarray(counts, dtype=float)


def cell_gaps(cell: CellRun) -> Gaps:
    """The steady-state chunk gaps of one cell and the load of each (module docstring)."""
    width_max = 1 if cell.method == NO_SD else cell.k + 1
    times, tokens, prompts = [], [], []
    for request in cell.timeline:
        chunk_ms = np.asarray(request["chunk_ms"], dtype=float)  # ≥ 1 chunk, and a prompt length: read_sweep's check
        counts = chunk_counts(request)
        if request.get("chunk_tokens") is None and counts[0] > width_max + 1e-9:
            raise SpecscopeError(f"{cell.label}: {counts[0]:.2f} tokens per chunk, above {width_max} per step: "
                                 "the server streams several steps per chunk; calibrate with one chunk per "
                                 "step (--stream-interval 1)")
        times.append((request["sent_ms"] + chunk_ms) / 1e3)
        tokens.append(np.cumsum(counts))
        prompts.append(request["prompt_tokens"])
    if sum(len(t) - 1 for t in times) == 0:
        raise SpecscopeError(f"{cell.label}: no request streamed more than one chunk: no step to fit "
                             "(the fit reads the gaps between a request's chunks)")
    first = np.array([t[0] for t in times])
    last = np.array([t[-1] for t in times])
    sent = np.array([r["sent_ms"] / 1e3 for r in cell.timeline])
    _check_batch_limit(cell, times, first, last, sent)
    decode = np.concatenate([np.diff(np.concatenate([[0.0], t]))[1:] for t in tokens])
    if decode.size and np.mean(decode > width_max + 1e-9) > BATCHED_SHARE:
        raise SpecscopeError(f"{cell.label}: {100 * np.mean(decode > width_max):.0f} % of chunks carry more than "
                             f"{width_max} tokens: the server streams several steps per chunk; calibrate with "
                             "one chunk per step (--stream-interval 1)")
    width, proposing = 1.0, 0.0  # tokens verified per running request; share of its steps that proposed
    if cell.method != NO_SD:
        steps = sum(len(t) - 1 for t in times)
        _check_counters(cell, steps, sum(len(t) for t in times))
        drafts = cell.k if cell.num_draft_tokens is None else min(cell.num_draft_tokens / steps, cell.k)
        width = 1.0 + drafts
        proposing = 1.0 if cell.num_drafts is None else min(cell.num_drafts / steps, 1.0)
    chance = _proposed(cell, decode, proposing, all(r.get("chunk_tokens") is not None for r in cell.timeline))
    prompt = np.array(prompts, dtype=float)
    start = np.concatenate([t[:-1] for t in times])
    end = np.concatenate([t[1:] for t in times])
    together = NEAR * np.median(end - start)  # chunks closer than this were read together
    alone = np.concatenate([read[:-1] & read[1:] for read in (_alone(t, together) for t in times)])  # [gaps]
    if not alone.any():
        raise SpecscopeError(f"{cell.label}: every chunk arrived with another (within {NEAR} of the median gap): "
                             "no gap between two chunks read alone to fit")
    owner = np.repeat(np.arange(len(times)), [len(t) - 1 for t in times])  # [gaps] whose chunks bound each
    prefilled, unsure = _prefilled(start, end, owner, sent, first, np.concatenate(times), np.median(end - start),
                                   together)
    alone &= ~unsure
    if not alone.any():
        raise SpecscopeError(f"{cell.label}: no gap between two chunks read alone whose prefills the timeline tells")
    prefilled = prefilled[alone]
    start, end = start[alone], end[alone]
    mid = (start + end) / 2
    running = (first[None, :] < mid[:, None]) & (last[None, :] >= mid[:, None])  # [gaps, requests]
    received = np.column_stack([np.concatenate([[0.0], c])[np.searchsorted(t, mid, side="right")]
                                for t, c in zip(times, tokens)])  # [gaps, requests]
    cache = running * (prompt[None, :] + received)  # [gaps, requests] each running request's cached tokens
    n = running.sum(axis=1).astype(float)
    n_p = prefilled.sum(axis=1).astype(float)
    # a request running alone: its own chunk tells whether its step proposed (widths and multi-token forwards per gap)
    alone_width = 1.0 + (width - 1.0) / proposing * chance[alone] if proposing > 0 else np.ones(len(n))
    per_row = np.where(n == 1, alone_width, width)
    longest = np.where(prefilled, prompt[None, :], 0.0).max(axis=1, initial=0.0)
    p_tokens = n_p * longest if cell.pads else prefilled.astype(float) @ prompt  # a rectangle pads to the longest
    pairs = n_p * longest ** 2 if cell.pads else prefilled.astype(float) @ prompt ** 2
    has_prefill = p_tokens > 0
    gaps = Gaps(seconds=end - start,
                tokens=np.where(n == 1, per_row, n * (_widest(width, proposing, n) if cell.pads else width)),
                cached=n * cache.max(axis=1, initial=0.0) if cell.pads else cache.sum(axis=1), sequences=n + n_p, decodes=np.ones_like(n),
                prefills=1.0 * has_prefill,
                multi=np.where(n > 1, 1.0, n * chance[alone]) + (p_tokens > 1), width=per_row,
                passes=np.full(len(n), float(cell.tree.depth)) if cell.tree else per_row - 1,
                drafted=np.full(len(n), float(sum(cell.tree.draft_pass_widths))) if cell.tree else per_row - 1,
                tree=np.full(len(n), 1.0 * (cell.tree is not None)), reads=np.zeros(len(n)), running=n,
                prefill=p_tokens, pairs=pairs, idle=np.zeros(len(n)), method=np.full(len(n), cell.method, dtype=object),
                scale=np.zeros(len(n)))
    gaps = _concat([gaps, _first_chunks(cell, times, prompt)])
    kind = np.concatenate([1 * has_prefill, np.full(len(gaps.seconds) - len(n), 2)])  # decode, +prefill, alone
    gaps = gaps.select(_not_stalled(gaps.seconds, kind, gaps.prefill))
    gaps.scale[:] = gaps.seconds.mean() if len(gaps.seconds) else 0.0
    return gaps


def _check_counters(cell: CellRun, steps: int, chunks: int) -> None:
    """Refuse an SD cell whose spec-decode counters contradict one another, or its timeline's
    ``chunks`` (``steps`` of them after a request's first: its decode chunks) at one chunk a
    step (module docstring). A request-step verifies at most k drafts (a tree: its nodes), and
    emits its accepted drafts + 1 (fewer where the output ends inside it); a request's first
    chunk, its prefill's, emits one. So ``drafts ≤ draft tokens ≤ k · drafts``, ``accepted ≤
    draft tokens``, ``drafts ≤ steps``, ``draft tokens ≤ k · steps`` and ``output tokens ≤
    chunks + accepted``. The counters are scraped before and after each part of the cell, once
    its requests have all ended, and vLLM and ``specscope serve`` count a step before they
    stream its chunks: they cover the cell's steps exactly, so only :data:`BATCHED_SHARE` of the
    steps is allowed over."""
    drafts, offered, accepted = cell.num_drafts, cell.num_draft_tokens, cell.num_accepted_tokens
    said = ", ".join(f"{name} {value}" for name, value in (("drafts", drafts), ("draft tokens", offered),
                                                           ("accepted", accepted)) if value is not None)
    if offered is not None and ((drafts is not None and not drafts <= offered <= cell.k * drafts)
                                or (accepted is not None and accepted > offered)):
        raise SpecscopeError(f"{cell.label}: its spec-decode counters contradict one another ({said}; at k = {cell.k}, "
                             f"expected drafts <= draft tokens <= {cell.k} x drafts and accepted <= draft tokens): "
                             "they are not one run's (remove the record to measure the cell again)")
    several = ("the server streams several steps per chunk, or its counters counted other steps than the cell's; "
               "calibrate with one chunk per step (--stream-interval 1) and the counters of this server alone")
    allowed = 1 + BATCHED_SHARE
    for count, most, what in ((drafts, steps, "request-steps that proposed"), (offered, cell.k * steps, "draft tokens")):
        if count is not None and count > allowed * most:
            raise SpecscopeError(f"{cell.label}: its counters count {count} {what}, {count / steps:.2f} a decode chunk "
                                 f"(of {steps}), where a chunk of one step has at most {most // steps}: {several}")
    output = sum(request["output_tokens"] for request in cell.timeline)
    if accepted is not None and output - chunks - accepted > BATCHED_SHARE * steps:
        raise SpecscopeError(f"{cell.label}: its requests emitted {output} tokens in {chunks} chunks, "
                             f"{output - chunks} beyond one a chunk, where the counters accepted {accepted} drafts: "
                             f"{several}")


def counter_assumptions(cells: Sequence[CellRun]) -> list[str]:
    """One line per assumption the fit makes for SD cells without a spec-decode counter, naming
    them and why it is missing — the sweep's scrape failed (``metrics_error``), or the server
    exports none (SGLang): without the draft-token counter each step is taken to verify k + 1
    tokens (a tree: nodes + 1), without the drafts counter each step to have proposed."""
    missing: dict[str, list[str]] = {}
    for cell in cells:
        if cell.method == NO_SD or (cell.num_draft_tokens is not None and cell.num_drafts is not None):
            continue
        why = f"metrics_error: {cell.metrics_error}" if cell.metrics_error else "the server exports none"
        if cell.num_draft_tokens is None:
            missing.setdefault(f"no draft-token counter ({why}): taken to verify k + 1 tokens (a tree: nodes + 1) "
                               "every step", []).append(cell.label)
        if cell.num_drafts is None:
            missing.setdefault(f"no drafts counter ({why}): taken to propose on every step", []).append(cell.label)
    return [f"{', '.join(labels)}: {what}" for what, labels in missing.items()]


def _check_batch_limit(cell: CellRun, times: list[np.ndarray], first: np.ndarray, last: np.ndarray,
                       sent: np.ndarray) -> None:
    """Refuse a cell whose server ran fewer requests at once than the sweep kept in flight
    (``batch_size``, or its requests if fewer) while a request waited through :data:`WAITED`
    or more chunks of another for its first: the server did not start a request in the step after
    it arrived — a batch limit below the sweep's concurrency, or a limit on the prompts it
    prefills per step, its KV cache's room, preemption — and a request waiting is priced in no
    gap (module docstring). ``times`` [requests][chunks]: each request's chunk arrivals, in seconds
    from the run's start; ``first``, ``last`` and ``sent`` [requests]: its first and last chunk's
    and when it was sent. Either sign alone misleads: on ``specscope serve``, whose limit is the
    sweep's, stalls and chunks read in bursts made requests wait through 4–11 chunks of another
    while every cell ran its concurrency at once; and a cell of short outputs may never run all of
    its requests at once, none of them waiting."""
    chunks = np.concatenate(times)
    # streaming at each chunk's arrival: first chunk by then, last not before (first ≤ last)
    most = int((np.searchsorted(np.sort(first), chunks, side="right")
                - np.searchsorted(np.sort(last), chunks, side="left")).max())
    flight = min(cell.batch_size, len(times))
    if most >= flight:
        return
    # per request, the most chunks of any one other request that arrived after it was sent, before its first
    waited = np.max([np.searchsorted(t, first, side="left") - np.searchsorted(t, sent, side="right") for t in times],
                    axis=0)
    longest = int(waited.argmax())
    if waited[longest] >= WAITED:
        raise SpecscopeError(
            f"{cell.label}: the server ran at most {most} of the {flight} requests the sweep kept in flight at once, "
            f"and request {cell.timeline[longest].get('id', longest)!s} waited through {waited[longest]} steps of "
            "another for its first chunk: the server did not start requests as they came (a batch limit below the "
            "sweep's concurrency, or a limit on the prompts it prefills per step, its KV cache's room, preemption), "
            f"and a request waiting is priced in no step; relaunch it with a batch limit of at least {flight} (vLLM "
            "--max-num-seqs, SGLang --max-running-requests, specscope serve --max-batch-size) and room for that many, "
            f"or sweep at a concurrency of at most {most}")


def _prefilled(start: np.ndarray, end: np.ndarray, owner: np.ndarray, sent: np.ndarray, first: np.ndarray,
               chunks: np.ndarray, typical: float, together: float) -> tuple[np.ndarray, np.ndarray]:
    """Which prompt each gap prefilled, and which gaps cannot be told.

    A gap runs from ``start`` to ``end`` between two chunks of request ``owner``. It spans the step
    that prefilled request ``q`` (the first array, [gaps, requests]) when:

    - q's first chunk came after the gap's midpoint and within half a gap after its end;
    - q was sent before the gap began (within ``together``, the client's reading jitter);
    - q was sent no earlier than a ``typical`` gap before the owner's prefill began — an engine
      admits every request waiting when a step starts, so one waiting well before then was
      prefilled with the owner or before it (requests sent a few ms apart may arrive in either
      order). The owner's prefill began at the last chunk of the cell read a ``typical`` gap or
      more before its own first chunk (a step's end), or when it was sent, whichever is later;
    - q was not waiting then with its first chunk read within a ``typical`` gap of the owner's
      (prefilled beside it and read late);
    - the gap is the owner's earliest that qualifies (a prompt is prefilled once).

    The second array, [gaps], marks the gaps the timing cannot tell (left out of the fit): where
    only the last rule keeps q out, q was either read late beside the owner or prefilled one short
    step after it. Before these rules, on a sweep with prompts of 50–750 tokens, a gap that
    prefilled seven long prompts also claimed requests sent after it, and a request's 6 ms first
    gap the prompts read late beside it: 3 of 16 such gaps at B = 8 were priced 30× what they
    took, and the fit priced a prompt's query–key pairs a fifth of what the engine's own step
    records show."""
    mid, half = (start + end) / 2, (end - start) / 2
    chunks = np.sort(chunks)
    before = np.searchsorted(chunks, first - typical, side="left")  # [requests] chunks read a step before its first
    began = np.maximum(sent, np.where(before > 0, chunks[np.maximum(before - 1, 0)], -np.inf))  # [requests]
    waiting = sent[None, :] <= began[owner][:, None] + together  # [gaps, requests] q there when the owner's began
    beside = waiting & (first[None, :] < first[owner][:, None] + typical + together)  # ... and its first chunk
    timed = ((first[None, :] > mid[:, None]) & (first[None, :] <= (end + half)[:, None])  # read with the owner's
             & (sent[None, :] <= start[:, None] + together) & (sent[None, :] > began[owner][:, None] - typical))
    claims = timed & ~beside
    counted = np.cumsum(claims, axis=0)  # [gaps, requests] claims so far, over every owner's gaps in order
    earlier = np.concatenate([np.zeros((1, claims.shape[1]), dtype=counted.dtype), counted[:-1]])
    opening = np.concatenate([[True], owner[1:] != owner[:-1]])  # [gaps] the first gap of its owner
    base = earlier[np.maximum.accumulate(np.where(opening, np.arange(len(owner)), 0))]  # claims before its owner's
    return claims & (counted - base == 1), (timed & beside).any(axis=1)


def _proposed(cell: CellRun, chunk_tokens: np.ndarray, proposing: float, known: bool) -> np.ndarray:
    """[chunks] the chance that the step behind each decode chunk (``chunk_tokens``: the tokens each
    carried) proposed, for its request's row: 1 where the chunk carries more than one token (a draft
    was accepted); for a chunk of one token, the share of such chunks whose step proposed and had
    nothing accepted, ``(drafts − chunks of several tokens) / chunks of one token`` by the drafts
    counter (vLLM's ``spec_decode_num_drafts``). Without the counter or token ids, every chunk
    gets the cell's share of proposing steps, ``proposing``. A row alone in its step is a forward
    of several tokens only when it proposed: on ``specscope serve`` at batch 1, n-gram's steps that
    proposed took 0.2–0.7 ms longer than those that found nothing (k = 1 … 4), which the cell's
    share alone could not tell from n-gram's own cost (it does not change with k)."""
    if cell.num_drafts is None or not known or not 0 < proposing < 1:
        return np.full(len(chunk_tokens), proposing)
    several = chunk_tokens > 1 + 1e-9
    single = max(int((~several).sum()), 1)
    silent = float(np.clip((cell.num_drafts - several.sum()) / single, 0.0, 1.0))
    return np.where(several, 1.0, silent)


def _widest(width: float, proposing: float, rows: np.ndarray) -> np.ndarray:
    """[gaps] the expected widest row of a step of ``rows`` running requests, each verifying
    ``width`` tokens on average and proposing on a share ``proposing`` of its steps (an engine
    that pads verifies every row at the widest): ``1 + d·(1 − (1 − p)^n)`` with ``d`` the drafts of
    a row that proposes — ``width`` itself where every row proposes (a model drafter) or runs
    alone."""
    if proposing <= 0 or proposing >= 1:
        return np.full_like(rows, width)
    return 1.0 + (width - 1.0) / proposing * (1.0 - (1.0 - proposing) ** rows)


def _not_stalled(seconds: np.ndarray, kind: np.ndarray, size: np.ndarray) -> np.ndarray:
    """[gaps] False for a stall: over :data:`STALL` × what is typical of its ``kind`` — the median,
    or where the prefilled positions ``size`` vary within the kind, a line through them fitted
    twice (the second time without the first one's stalls): a gap that prefills seven prompts, or
    one long prompt, is no stall, nor one that prefills a short prompt."""
    keep = np.ones(len(seconds), dtype=bool)
    for value in np.unique(kind):
        group = kind == value
        typical = np.full(int(group.sum()), np.median(seconds[group]))
        if np.ptp(size[group]) > 0:
            mine = np.ones(int(group.sum()), dtype=bool)
            for _ in range(2):
                slope, intercept = np.polyfit(size[group][mine], seconds[group][mine], 1) if mine.sum() > 2 else (0, 0)
                line = intercept + slope * size[group]
                if slope < 0 or (line <= 0).any():
                    break
                typical, mine = line, seconds[group] <= STALL * line
        keep[group] = seconds[group] <= STALL * typical
    return keep


def step_gaps(steps: Sequence[MeasuredStep], label: str = "costmodel fit --whole-steps") -> tuple[Gaps, np.ndarray]:
    """An engine's own step records as the observations a sweep makes from outside: each step's
    whole time (prefill, drafting, verification, sampling, overhead: what a chunk gap spans) and
    its exact load — ``n`` = the rows that decoded (``batch_size − prefill_requests``), verifying
    ``tokens_verified`` together, each having proposed ``w − 1`` on average
    (:attr:`~specscope.costmodel.steps.StepRecord.batched_tokens` / ``n``, as a sweep reads a
    cell's mean proposal from the draft-token counter); stalls left out as from a cell, every error weighed
    relative to the mean step of its run, and each step counted as often as a sweep sees it: once
    per request it decodes a chunk for (``n``; a prefill-only step once). Counted once each, a run at batch 1 had eight
    times the weight of one at batch 8 over the same tokens, and where the linear model cannot fit
    every batch size alike the two fits split the costs apart (on one sweep: per token +292 %, the
    drafters' per batched token −44 and −56 % against the sweep's fit; counted as a sweep counts,
    +3 %, +9 % and +3 %). Returned with [gaps] the run of each (the records' ``run``)."""
    decoding = [s for s in steps if s.batch_size > 0]
    if not decoding:
        raise SpecscopeError(f"{label}: no step with a running request")

    def column(read) -> np.ndarray:
        return np.array([read(s) for s in decoding], dtype=float)

    n = column(lambda s: s.decoded)
    verified, prefill = column(lambda s: s.tokens_verified), column(lambda s: s.prefill_positions)
    width = np.divide(column(lambda s: s.batched_tokens), n, out=np.zeros_like(n), where=n > 0)
    passes, read = draft_rows(decoding)  # each plus one, as the simulator prices a step's drafting
    tree = column(lambda s: bool(s.tree))
    gaps = Gaps(seconds=column(lambda s: s.seconds),
                tokens=verified, cached=column(lambda s: s.kv_read), sequences=column(lambda s: s.batch_size),
                decodes=1.0 * (n > 0), prefills=1.0 * (prefill > 0), multi=1.0 * (verified > 1) + (prefill > 1), width=width,
                passes=passes - 1, drafted=read - 1, tree=tree, reads=column(lambda s: s.confidence is not None),
                running=n, prefill=prefill, pairs=column(lambda s: s.prefill_pairs), idle=np.zeros(len(n)),
                method=np.array([s.method for s in decoding], dtype=object), scale=np.zeros(len(n)))
    run = column(lambda s: s.run)
    keep = _not_stalled(gaps.seconds, 3 * run + (prefill > 0) + (n == 0), prefill)
    gaps, run = gaps.select(keep), run[keep]
    for value in np.unique(run):
        mine = run == value
        gaps.scale[mine] = gaps.seconds[mine].mean() / np.sqrt(np.maximum(gaps.running[mine], 1))  # once a row
        if gaps.scale[mine][0] <= 0:
            raise SpecscopeError(f"step records: every step of run {int(value) + 1} took 0 s (prefill_s and the "
                                 "decode phases): nothing to fit")
    return gaps, run.astype(int)


def _first_chunks(cell: CellRun, times: list[np.ndarray], prompt: np.ndarray) -> Gaps:
    """The time to first chunk of the requests that started alone — sent while no other request
    of the cell was in flight, and none sent before their first chunk (at batch 1, all): the
    server's work on the request before its first step, then a step that only prefills it."""
    sent = np.array([r["sent_ms"] / 1e3 for r in cell.timeline])
    first = np.array([t[0] for t in times])
    last = np.array([t[-1] for t in times])
    # [r, q]: request q in flight while r started (sent before r's first chunk, done after r was sent)
    overlaps = (sent[None, :] <= first[:, None]) & (last[None, :] >= sent[:, None])
    np.fill_diagonal(overlaps, False)
    alone = ~overlaps.any(axis=1)
    count = int(alone.sum())
    zero, one = np.zeros(count), np.ones(count)
    return Gaps(seconds=(first - sent)[alone], tokens=zero, cached=zero, sequences=one, decodes=zero, prefills=one,
                multi=1.0 * (prompt[alone] > 1), width=zero, passes=zero, drafted=zero, tree=zero, reads=zero, running=zero,
                prefill=prompt[alone],
                pairs=prompt[alone] ** 2, idle=one,
                method=np.full(count, cell.method, dtype=object), scale=zero.copy())


def _alone(times: np.ndarray, together: float) -> np.ndarray:
    """[chunks] whether each chunk was read alone: no neighbour within ``together`` seconds."""
    same = np.diff(times) <= together
    return ~np.concatenate([[False], same]) & ~np.concatenate([same, [False]])


def _concat(parts: Sequence[Gaps]) -> Gaps:
    return Gaps(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in vars(parts[0])})


def fit_cells(cells: Sequence[CellRun], name: str = "calibrated", sweep: FittedSweep | None = None) -> LinearCostModel:
    """Fit the forward and every method's drafting to ``cells`` (module docstring), the gaps of
    each pair of cells measured side by side divided by the pair's speed (:func:`pair_speeds`),
    of one engine: the model names it, and the ``sweep`` they came from where given."""
    engines = sorted({c.engine for c in cells})
    if len(engines) > 1:
        raise SpecscopeError(f"calibration: cells of engines {', '.join(map(repr, engines))}; a cost model "
                             "describes one")
    if not any(c.method == NO_SD for c in cells):
        raise SpecscopeError("calibration: no successful 'none' cell (the sweep needs baselines to fit the forward; "
                             "servers already running are one engine when their url engines share a name, one of "
                             "them serving 'none')")
    parts = [cell_gaps(c) for c in cells]
    sizes = [len(g.seconds) for g in parts]
    (target, drafting, untold, _), _ = _fit_drift_free(
        _concat(parts), lambda target: np.repeat(pair_speeds(cells, parts, target), sizes))
    fitted = tuple(FittedCell(c.method, c.k, c.batch_size, c.workload, c.tree.name if c.tree else None) for c in cells)
    model = _model(name, target, drafting, untold, any(c.pads for c in cells), any(g.prefill.any() for g in parts),
                   fitted)
    return replace(model, engine=engines[0], sweep=sweep)


POOR_WHOLE_STEP = 0.3  # a whole-step fit missing its median step by more is reported as poor (the runs in
# docs/calibration.md and docs/study.md: 5.6–21.7 %)


@dataclass
class WholeStepQuality:
    """How a whole-step fit (:func:`fit_whole_steps`) met its steps: those fitted, the stalls left
    out (over :data:`STALL` × their run's typical step, and over :data:`FITTED_STALL` × a first
    fit's price), and its median and 90th-percentile error relative to each step."""

    points: int  # the steps past the first stall check
    stalls: int  # ... and the steps it left out: over STALL × their run's typical step
    over: int  # ... and of the points, those over FITTED_STALL × a first fit's price
    median_rel_error: float
    p90_rel_error: float
    slowest_repeat: float = 1.0  # time factor of the slowest repeat, relative to the median one of its batch size
    fastest_repeat: float = 1.0

    def summary(self) -> str:
        """One line for the user."""
        return (f"whole-step fit over {self.points - self.over} steps ({self.stalls} stalls over {STALL:g}× their "
                f"run's typical step and {self.over} over {FITTED_STALL:g}× a first fit's price left out): median "
                f"relative error {100 * self.median_rel_error:.1f} %, 90th percentile {100 * self.p90_rel_error:.1f} % "
                f"(over every step but the first stalls; drift: " + (
                    f"repeats took {self.fastest_repeat:.2f}–{self.slowest_repeat:.2f}× the median repeat's time; "
                    "normalised)" if self.slowest_repeat != self.fastest_repeat else
                    "none told, no two repeats of one batch size with a no-SD run)"))

    def warning(self) -> str | None:
        """A line where the fit misses its median step by more than :data:`POOR_WHOLE_STEP` (a
        whole step's own spread is in its error), else None."""
        if self.median_rel_error <= POOR_WHOLE_STEP:
            return None
        return (f"the whole-step fit misses its median step by {100 * self.median_rel_error:.0f} % (above "
                f"{100 * POOR_WHOLE_STEP:.0f} %): the steps vary beyond what its terms explain (other load on the "
                "machine, or costs its linear terms do not hold), and what it predicts may mislead")


def fit_steps(steps: Sequence[MeasuredStep], name: str = "fitted",
              label: str = "costmodel fit --whole-steps") -> tuple[LinearCostModel, str]:
    """:func:`fit_whole_steps`, its quality as one line for the user."""
    model, quality = fit_whole_steps(steps, name, label)
    return model, quality.summary()


def fit_whole_steps(steps: Sequence[MeasuredStep], name: str = "fitted",
                    label: str = "costmodel fit --whole-steps") -> tuple[LinearCostModel, WholeStepQuality]:
    """The model :func:`fit_cells` fits, fitted to an engine's own step records, whole steps
    (:func:`step_gaps`): what the sweep's fit should find for the engine that wrote them, term by
    term (``admit_s``, which step records do not see, stays 0); and how well it fits
    (:class:`WholeStepQuality`). Steps of an engine running a policy file (method ``learned``) give only the
    policy's own work (:func:`~specscope.costmodel.fit.with_policy_work`, as in the phase fit): the
    rest of their drafting is their proposers', fitted from those proposers' own runs. Drift is
    taken out as the phase fit (:mod:`specscope.costmodel.fit`) and a sweep's fit do: each repeat's
    times divided by its speed (:func:`repeat_speeds`, from its no-SD run, which ran in lockstep
    with its SD run), refitted until no speed moves; its error is measured on the raw times (a
    study's records of 2026-12-06, fitted without it: chains of k = 3 54 of 60 within 10 % of their
    measured speedups, of k = 1 9 of 12; with it 57 of 60 and 12 of 12). ``label`` starts its
    errors (what the user ran)."""
    fitted = [s for s in steps if s.method != LEARNED]
    if steps and not fitted:
        raise SpecscopeError(f"{label}: every step ran a policy file (method learned): give the "
                             "step records of runs without one too (no SD, and each of the policy's proposers)")
    gaps, run = step_gaps(fitted, label)
    repeat_of = dict(zip((s.run for s in steps), repeats(steps).tolist()))  # a policy's runs among them
    repeat = np.array([repeat_of[r] for r in run.tolist()])
    (target, drafting, untold, over), speed = _fit_drift_free(
        gaps, lambda target: repeat_speeds(gaps, repeat, target), label, "give more step records")
    predicted = gaps.target_features() @ target
    for method, coef in drafting.items():
        mine = gaps.method == method
        predicted[mine] += gaps.drafting_features()[mine] @ coef
    error = np.abs(predicted - gaps.seconds) / gaps.seconds
    stalls = sum(s.batch_size > 0 for s in fitted) - len(gaps.seconds)
    quality = WholeStepQuality(len(gaps.seconds), stalls, over, float(np.median(error)),
                               float(np.percentile(error, 90)), float(speed.max(initial=1.0)), float(speed.min(initial=1.0)))
    model = _model(name, target, drafting, tuple(term for term in untold if term != "admit_s"),  # never seen here
                   True, bool(gaps.prefill.any()))
    model = replace(model, measured=measured_extent([s for s in steps if s.decoded > 0]),
                    step_records=records_of(steps))
    return with_policy_work(model, steps), quality


def overhead_apart(model: LinearCostModel, steps: Sequence[MeasuredStep]) -> LinearCostModel:
    """A whole-step ``model`` (:func:`fit_steps`) with the engine's own work per step — sampling
    and overhead, the median over the decode steps of ``steps`` of what their records time —
    priced as ``overhead_s`` and taken out of the forward's fixed costs (a decode forward's
    ``c_fixed``, a prefill's ``c_prompt_fixed``), so that every step keeps its price (a fixed cost
    never below 0: at most that much is moved) and a predicted time split shows that work as the
    records do. Not in :func:`fit_steps` itself: set beside a sweep's fit, whose chunk gaps
    cannot tell it apart, its terms are compared as they are."""
    decode = [s for s in steps if s.decoded > 0 and s.prefill_tokens == 0 and s.method != LEARNED]
    if not decode:
        return model
    prefill = model.prompt_fixed
    moved = min(float(np.median([s.sample_s + s.overhead_s for s in decode])), model.c_fixed, prefill)
    return replace(model, overhead_s=model.overhead_s + moved, c_fixed=model.c_fixed - moved,
                   c_prompt_fixed=prefill - moved)


def _model(name: str, target: np.ndarray, drafting: dict[str, np.ndarray], untold: tuple[str, ...], pads: bool,
           prefilled: bool, fitted: tuple[FittedCell, ...] = ()) -> LinearCostModel:
    """The cost model of :func:`_fit`'s coefficients (``pads``: of an engine that runs rectangular
    batches; ``prefilled``: whether the fit saw a prefill — without one a prompt's position is
    priced as a verified token; with one at its fitted price, even where it could not be told
    apart from other terms, which then carry the rest of its cost)."""
    forward = dict(zip(TARGET_TERMS, map(float, target)))
    terms = {m: dict(zip(DRAFTING_TERMS, map(float, d))) for m, d in drafting.items()}
    return LinearCostModel(
        name, forward["c_fixed"], forward["c_tok"], forward["c_kv"], 0.0, c_req=forward["c_req"],
        c_multi=forward["c_multi"], admit_s=forward["admit_s"], pads_verification=pads,
        c_prompt=forward["c_prompt"] if prefilled else None, c_batch=forward["c_batch"],
        c_prompt_fixed=forward["c_prompt_fixed"] if prefilled else None, c_prompt_kv=forward["c_prompt_kv"],
        drafting={m: LinearDrafting.per_proposed_token(d["c_fixed"], d["c_tok"], d["c_req"], d["c_batched"], c_kv=0.0,
                                                       c_prefill=d["c_prefill"], c_tree=d["c_tree"],
                                                       c_confidence=d["c_confidence"])
                  for m, d in terms.items()},
        fitted_cells=fitted, not_separated=untold, made_by=code_version(),
    )


def pair_speeds(cells: Sequence[CellRun], parts: Sequence[Gaps], target: np.ndarray) -> np.ndarray:
    """[cells] how slow the machine was for each pair of cells measured side by side (a ``none``
    cell and its SD cell: same ``pair``): the ``none`` cell's mean gap over what the forward
    ``target`` predicts for it, relative to the median of that ratio over the pairs of its batch
    size (a ratio relative to every pair could absorb how cost grows with the batch); 1 for a
    cell measured apart (:func:`~specscope.costmodel.fit.within_batch_size`)."""
    ratio = {c.pair: g.seconds.mean() / (g.target_features() @ target).mean()
             for c, g in zip(cells, parts) if c.method == NO_SD and c.pair is not None and len(g.seconds)}
    relative = within_batch_size(ratio, {c.pair: c.batch_size for c in cells if c.pair in ratio})
    return np.array([relative.get(c.pair, 1.0) for c in cells])


def repeat_speeds(gaps: Gaps, repeat: np.ndarray, target: np.ndarray) -> np.ndarray:
    """[gaps] how slow the machine was for each repeat of step records (a no-SD run and the SD run
    it ran in lockstep with: :func:`~specscope.costmodel.fit.repeats`), as :func:`pair_speeds` has
    it for a sweep's pairs: the no-SD run's mean step over what the forward ``target`` predicts for
    it, relative to the median of that ratio over the repeats of its batch size; 1 for a repeat
    without a no-SD run."""
    ids, of = np.unique(repeat, return_inverse=True)  # of: [gaps] each gap's index among the repeats
    none = gaps.method == NO_SD
    measured = np.bincount(of, weights=gaps.seconds * none, minlength=len(ids))  # [repeats] Σ over no-SD gaps
    priced = np.bincount(of, weights=(gaps.target_features() @ target) * none, minlength=len(ids))
    size = np.zeros(len(ids))
    np.maximum.at(size, of, gaps.sequences)  # [repeats] its batch size: the most rows a gap of it ran
    told = np.flatnonzero(np.bincount(of, weights=none, minlength=len(ids)) > 0)  # repeats with a no-SD gap
    relative = within_batch_size({i: measured[i] / priced[i] for i in told.tolist()},
                                 {i: int(size[i]) for i in told.tolist()})
    return np.array([relative.get(i, 1.0) for i in range(len(ids))])[of]


def _fit_drift_free(gaps: Gaps, speeds: Callable[[np.ndarray], np.ndarray], what: str = "calibration",
                    more: str = "measure more requests") -> tuple[tuple, np.ndarray]:
    """:func:`_fit` of ``gaps`` each divided by how slow the machine ran for it — ``speeds`` [gaps]
    of a fit's forward coefficients: :func:`pair_speeds` for a sweep's cells, :func:`repeat_speeds`
    for step records — estimated again from each fit until none moves (:data:`DRIFT_ROUNDS`
    refits at most); the last fit, and the speeds it gives."""
    speed = np.ones(len(gaps.seconds))
    for _ in range(DRIFT_ROUNDS + 1):
        fitted = _fit(_slowed(gaps, 1 / speed), what, more)
        previous, speed = speed, speeds(fitted[0])
        if np.allclose(speed, previous, rtol=CONVERGED):
            break
    return fitted, speed


def _slowed(gaps: Gaps, factor: float | np.ndarray) -> Gaps:
    """``gaps`` with their seconds (and the scale they are weighed by) times ``factor`` (one, or one a gap)."""
    return replace(gaps, seconds=gaps.seconds * factor, scale=gaps.scale * factor)


def _fit(gaps: Gaps, what: str = "calibration", more: str = "measure more requests"
         ) -> tuple[np.ndarray, dict[str, np.ndarray], tuple[str, ...], int]:
    """The forward's coefficients [5], ``c_prompt``, ``c_batch``, ``admit_s``, ``c_prompt_fixed`` and ``c_prompt_kv`` [1 each], and each
    method's drafting [:data:`DRAFTING_TERMS`, per proposed token], fitted together to ``gaps`` (module docstring): one non-negative
    least-squares problem over the forward's columns (every gap), the probabilities' read per pass
    (``c_confidence``, where some gap read them: one price for every model drafter — a softmax and a
    copy to the host, the engine's work whatever the drafter; fitted per drafter on a study of
    2026-12-06, noise put MTP's at 0 and EAGLE-3's at 84 µs a pass) and each method's drafting columns
    (its gaps, 0 elsewhere), every error relative to its ``scale`` (its cell's mean gap; a step
    record's, its run's mean step over √ its rows); and the terms (``TERM``, ``METHOD.TERM``) the gaps
    cannot tell apart (:func:`~specscope.costmodel.fit.unseparated`; a prefill's query–key pairs
    among them are left out — priced at 0 — rather than blur the terms a sweep does pin), of which the first ones
    (the forward's before a drafter's, in the order of the columns) carry their joint cost and
    the later ones are 0 wherever that fits as well: a fixed cost rather than none and one per
    cached token over prompts of one length. A fit that puts the whole forward on the cached
    tokens (a forward over an empty cache free, a model no simulation can use: a sweep at one
    batch size over caches of about one length, where the two trade) is refit without them. Last,
    how many gaps it left out as stalls against a first fit (:func:`_without_stalls`)."""
    methods = sorted(set(gaps.method.tolist()) - {NO_SD})
    forward, drafting = gaps.target_features(), gaps.drafting_features()
    drafting, read = drafting[:, :-1], drafting[:, -1:]  # each method's own terms; the probabilities' read
    shared = bool(read.any())  # ... priced once for every model drafter: the engine's work, not the drafter's
    blocks = [forward]
    for m in methods:
        mine = gaps.method == m
        if mine.sum() < drafting.shape[1]:
            raise SpecscopeError(f"{what}: drafting of {m!r}: {int(mine.sum())} observed steps for "
                                 f"{drafting.shape[1]} coefficients ({more} of {m})")
        blocks.append(drafting * mine[:, None])
    if shared:  # last: where the gaps cannot tell it from a drafter's own terms, those carry the cost (a
        blocks.append(read)  # drafter measured only stopped at a confidence), not every drafter's read
    a = np.hstack(blocks) / gaps.scale[:, None]
    if len(a) < a.shape[1]:
        raise SpecscopeError(f"{what}: {len(a)} observed steps for {a.shape[1]} coefficients (the forward's "
                             f"and each method's drafting: {more})")
    names = [*TARGET_TERMS, *(f"{m}.{term}" for m in methods for term in DRAFTING_TERMS[:-1]),
             *(["c_confidence"] if shared else [])]
    pairs, prompt = TARGET_TERMS.index("c_prompt_kv"), [TARGET_TERMS.index(t) for t in ("c_prompt_fixed", "c_prompt", "c_req")]
    if not pairs_fitted(a, names, gaps.prefill, gaps.pairs):
        a[:, pairs] = 0.0
    coef, over = _without_stalls(a, gaps.seconds / gaps.scale)
    if coef[pairs] > 0 and not coef[prompt].any():  # a prefill wholly per pair: a one-token prompt free (a review:
        a[:, pairs] = 0.0  # the README's small sweep, 1 fit in 3): priced per position and prompt alone
        coef, over = _without_stalls(a, gaps.seconds / gaps.scale)
    kv, free = TARGET_TERMS.index("c_kv"), [TARGET_TERMS.index(t) for t in ("c_fixed", "c_tok", "c_req")]
    if coef[kv] > 0 and not coef[free].any():  # the whole forward per cached token: one over an empty cache free
        a[:, kv] = 0.0  # over the caches measured (one batch size, prompts alike) the two trade: the fixed cost it is
        coef, over = _without_stalls(a, gaps.seconds / gaps.scale)
    start, width = forward.shape[1], drafting.shape[1]
    c_confidence = float(coef[-1]) if shared else 0.0
    models = [m for m in methods if method_named(m).kind != "lookup"]  # each priced the shared read
    chains = {f"{m}.c_tree" for m in methods if not gaps.tree[gaps.method == m].any()}  # a term they never had
    untold = [name for name in unseparated(a, names) if (name != "c_prompt_kv" or a[:, pairs].any()) and name not in chains]
    untold = [told for name in untold for told in ([f"{m}.c_confidence" for m in models] if name == "c_confidence"
                                                   else [name])]
    return (coef[:start],
            {m: np.append(coef[start + width * i: start + width * (i + 1)], c_confidence if m in models else 0.0)
             for i, m in enumerate(methods)}, tuple(untold), over)


def _without_stalls(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`~specscope.costmodel.fit.nonnegative_least_squares` of ``a`` [gaps, terms] to ``b``
    [gaps], fitted again without the gaps over :data:`FITTED_STALL` × what the first fit prices
    them at — a stall the filter against what is typical of a gap's kind let through (on
    ``specscope serve`` beside nine other servers, a prefill of seven long prompts taking 2–4× its
    price now and then), whose squared error would outweigh a thousand steps' own — and how many
    were left out. Where more than :data:`STALL_SHARE` of the gaps are over, they are no stalls but
    what the model cannot fit: the first fit stands, every gap in it."""
    coef = nonnegative_least_squares(a, b)
    keep = b <= FITTED_STALL * (a @ coef)
    if keep.all() or np.mean(~keep) > STALL_SHARE:
        return coef, 0
    return nonnegative_least_squares(a[keep], b[keep]), int((~keep).sum())


def cross_check(cells: Sequence[CellRun]) -> list[dict[str, object]]:
    """Per cell (its workload, method, k, tree and batch size): the fit's mean load per step — the
    tokens it verifies and prefills (``verified_per_step``, what the forward is priced on), and
    those counted as vLLM's ``vllm:iteration_tokens_total`` counts an iteration's, the tokens each
    running request emitted plus the prompts prefilled and their first tokens
    (``emitted_per_step``: the running rows × the cell's tokens per decode chunk; an engine that
    pads counts its padded prompts here) — and the mean gap (``gap_ms``: over the chunk gaps
    alone, as the server's inter-token latency leaves out a request's first token), beside the
    server's histograms. The two token columns are means over the same steps, those the fit
    reads: at batch 1 every step, a request's first chunk from an idle engine (a step that only
    prefills it) among them; above it fewer of the steps that prefill (a new request's first
    chunk often comes with another's and is left out), so the server's mean runs higher (on
    ``specscope serve`` at B = 2 it did: 15.8 and 9.7 against the fit's 9.5 and 3.6); the
    latencies agreed within 2 %."""
    rows = []
    for cell in cells:
        gaps = cell_gaps(cell)  # the steps the fit reads: chunk gaps, and first chunks from an idle engine
        chunks = [chunk_counts(request) for request in cell.timeline]
        decoded = sum(c[1:].sum() for c in chunks) / max(sum(len(c) - 1 for c in chunks), 1)  # per decode chunk
        prefilled = gaps.sequences - gaps.running  # the prompts each step prefilled, each emitting its first token
        rows.append({"workload": cell.workload, "method": cell.method, "k": cell.k,
                     "tree": cell.tree.name if cell.tree is not None else "-", "batch_size": cell.batch_size,
                     "verified_per_step": float(np.mean(gaps.tokens + gaps.prefill)),
                     "emitted_per_step": float(np.mean(gaps.running * decoded + prefilled + gaps.prefill)),
                     "server_tokens_per_step": cell.server_means.get("server_iteration_tokens_mean"),
                     "gap_ms": 1e3 * float(np.mean(gaps.seconds[gaps.idle == 0])),
                     "server_itl_ms": None if cell.server_means.get("server_inter_token_latency_mean_s") is None
                     else 1e3 * cell.server_means["server_inter_token_latency_mean_s"]})
    return rows
