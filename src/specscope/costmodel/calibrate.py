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
over the cached ``Σ (prompt + tokens received by m)``; requests whose first chunk arrives
within half a gap of the step's end were prefilled in it (``P`` prompt tokens, ``n_p`` prompts:
one more forward). ``w`` = 1 without SD; with SD ``1 + draft tokens / decode steps`` from the
counters (the mean proposal, so n-gram steps that found nothing count), at most k + 1 (a tree:
nodes + 1). Then

    gap = forward(n·w + P, cached, n + n_p)  [+ a second forward's fixed cost when P > 0]
          + drafting_method(w, n, P)

with forward = ``c_fixed + c_tok·tokens + c_kv·cached + c_req·sequences + c_multi·[tokens > 1]``
(:class:`~specscope.costmodel.linear.LinearCostModel`; engine overhead per step is part of
``c_fixed``, so ``overhead_s`` = 0) and drafting = ``c_fixed + c_tok·w + c_req·n + c_prefill·P``
(:class:`~specscope.costmodel.base.LinearDrafting`). The two are fitted alternately
(until converged, at most :data:`ROUNDS` times; the first target fit uses the no-SD cells
alone; on timelines made by an exact linear engine it recovers the coefficients) with
:func:`~specscope.costmodel.fit.nonnegative_relative_fit`, every error relative to the mean gap
of its cell: cells of small and large steps weigh alike, and within a cell the fit matches the
mean gap — what throughput depends on. (Weighing each gap by itself instead fits the typical gap
of a right-skewed cell and underestimated the mean one by 15–20 % at batch 4 and 8 on
``specscope serve``.)
The first chunk (queueing and prefill) is not a gap. A chunk the client read together with
another (arrivals closer than 0.2× the cell's median gap: it was sent before the client caught
up) arrived late, so gaps count only between two chunks each read alone. Gaps over 3× their cell's median (for steps
with or without a prefill apart) are stalls of the shared machine and left out.

**Servers that batch several steps per chunk** (``--stream-interval N > 1``) are detected and
refused, not divided: a cell where over 5 % of the decode chunks carry more than ``w_max`` =
k + 1 tokens (nodes + 1; 1 without SD), or, without token ids, whose mean tokens per chunk exceed
``w_max``, is an error naming the cell. Dividing a gap by an unknown step count would guess.

**Cross-check.** Where the server exports vLLM's ``vllm:iteration_tokens_total`` and
``vllm:inter_token_latency_seconds`` histograms, their run means are printed beside the fit's
reconstruction (mean tokens per step, mean gap) for every cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specscope.costmodel.base import LinearDrafting
from specscope.costmodel.fit import nonnegative_relative_fit
from specscope.costmodel.linear import FittedCell, LinearCostModel
from specscope.errors import SpecscopeError
from specscope.methods import NO_SD
from specscope.trees import TreeShape

ROUNDS = 200  # at most this many alternating target / drafting fits
CONVERGED = 1e-5  # ... stopping once no forward coefficient moves by more than this (relative)
STALL = 3.0  # a gap over STALL × its cell's median is a stall, left out
NEAR = 0.2  # chunks of one request closer than NEAR × the cell's median gap were read together
BATCHED_SHARE = 0.05  # above this share of over-full chunks, a cell's server batches steps


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


@dataclass
class Gaps:
    """The chunk gaps of cells (arrays [gaps]): seconds, and the load of the step each spans."""

    seconds: np.ndarray
    tokens: np.ndarray  # n·w + P
    cached: np.ndarray
    sequences: np.ndarray  # n + n_p
    forwards: np.ndarray  # 1, or 2 with a prefill
    multi: np.ndarray  # forwards of more than one token
    width: np.ndarray  # w
    running: np.ndarray  # n
    prefill: np.ndarray  # P
    method: np.ndarray  # [gaps] str
    scale: np.ndarray  # the mean gap of its cell: errors are weighed relative to it

    def target_features(self) -> np.ndarray:
        return np.column_stack([self.forwards, self.tokens, self.cached, self.sequences, self.multi])

    def drafting_features(self) -> np.ndarray:
        return np.column_stack([np.ones_like(self.width), self.width, self.running, self.prefill])

    def select(self, mask: np.ndarray) -> "Gaps":
        return Gaps(**{name: value[mask] for name, value in vars(self).items()})


def _where(cell: CellRun) -> str:
    label = cell.tree.name if cell.tree is not None else f"k={cell.k}"
    return f"cell {cell.cell_id} ({cell.method} {label} B={cell.batch_size})"


def cell_gaps(cell: CellRun) -> Gaps:
    """The steady-state chunk gaps of one cell and the load of each (module docstring)."""
    width_max = 1 if cell.method == NO_SD else cell.k + 1
    times, tokens, prompts = [], [], []
    for request in cell.timeline:
        chunk_ms = np.asarray(request["chunk_ms"], dtype=float)
        if len(chunk_ms) == 0 or request["prompt_tokens"] is None:
            raise SpecscopeError(f"{_where(cell)}: request {request['id']} has no chunks or no prompt length")
        counts = request["chunk_tokens"]
        if counts is None:
            mean = request["output_tokens"] / len(chunk_ms)
            if mean > width_max + 1e-9:
                raise SpecscopeError(f"{_where(cell)}: {mean:.2f} tokens per chunk, above {width_max} per step: "
                                     "the server streams several steps per chunk; calibrate with one chunk per "
                                     "step (--stream-interval 1)")
            counts = [mean] * len(chunk_ms)
        times.append((request["sent_ms"] + chunk_ms) / 1e3)
        tokens.append(np.cumsum(counts))
        prompts.append(request["prompt_tokens"])
    decode = np.concatenate([np.diff(np.concatenate([[0.0], t]))[1:] for t in tokens])
    if decode.size and np.mean(decode > width_max + 1e-9) > BATCHED_SHARE:
        raise SpecscopeError(f"{_where(cell)}: {100 * np.mean(decode > width_max):.0f} % of chunks carry more than "
                             f"{width_max} tokens: the server streams several steps per chunk; calibrate with "
                             "one chunk per step (--stream-interval 1)")
    width = 1.0
    if cell.method != NO_SD:
        steps = sum(len(t) - 1 for t in times)
        drafts = cell.k if cell.num_draft_tokens is None or steps == 0 else min(cell.num_draft_tokens / steps, cell.k)
        width = 1.0 + drafts
    first = np.array([t[0] for t in times])
    last = np.array([t[-1] for t in times])
    prompt = np.array(prompts, dtype=float)
    start = np.concatenate([t[:-1] for t in times])
    end = np.concatenate([t[1:] for t in times])
    together = NEAR * np.median(end - start)  # chunks closer than this were read together
    alone = np.concatenate([_alone(t, together)[:-1] & _alone(t, together)[1:] for t in times])  # [gaps]
    start, end = start[alone], end[alone]
    mid, half = (start + end) / 2, (end - start) / 2
    running = (first[None, :] < mid[:, None]) & (last[None, :] >= mid[:, None])  # [gaps, requests]
    received = np.column_stack([np.concatenate([[0.0], c])[np.searchsorted(t, mid, side="right")]
                                for t, c in zip(times, tokens)])  # [gaps, requests]
    prefilled = (first[None, :] > mid[:, None]) & (first[None, :] <= (end + half)[:, None])
    n = running.sum(axis=1).astype(float)
    p_tokens = prefilled.astype(float) @ prompt
    has_prefill = p_tokens > 0
    gaps = Gaps(seconds=end - start, tokens=n * width + p_tokens, cached=(running * (prompt[None, :] + received)).sum(1),
                sequences=n + prefilled.sum(axis=1), forwards=1.0 + has_prefill,
                multi=(n * width > 1).astype(float) + (p_tokens > 1), width=np.full_like(n, width), running=n,
                prefill=p_tokens, method=np.full(len(n), cell.method, dtype=object), scale=np.zeros(len(n)))
    keep = np.ones(len(n), dtype=bool)
    for flag in (False, True):
        group = has_prefill == flag
        if group.any():
            keep &= ~group | (gaps.seconds <= STALL * np.median(gaps.seconds[group]))
    gaps = gaps.select(keep)
    gaps.scale[:] = gaps.seconds.mean() if len(gaps.seconds) else 0.0
    return gaps


def _alone(times: np.ndarray, together: float) -> np.ndarray:
    """[chunks] whether each chunk was read alone: no neighbour within ``together`` seconds."""
    same = np.diff(times) <= together
    return ~np.concatenate([[False], same]) & ~np.concatenate([same, [False]])


def _concat(parts: Sequence[Gaps]) -> Gaps:
    return Gaps(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in vars(parts[0])})


def fit_cells(cells: Sequence[CellRun], name: str = "calibrated") -> LinearCostModel:
    """Fit the forward and every method's drafting to ``cells`` (module docstring)."""
    if not any(c.method == NO_SD for c in cells):
        raise SpecscopeError("calibration: no successful 'none' cell (the sweep needs baselines to fit the forward)")
    gaps = _concat([cell_gaps(c) for c in cells])
    methods = sorted(set(gaps.method.tolist()) - {NO_SD})
    plain = gaps.method == NO_SD
    target = nonnegative_relative_fit(gaps.select(plain).target_features(), gaps.seconds[plain], "target forward",
                                      gaps.scale[plain])
    drafting = {m: np.zeros(4) for m in methods}
    for _ in range(ROUNDS):
        forward = gaps.target_features() @ target
        for m in methods:
            mine = gaps.method == m
            drafting[m] = nonnegative_relative_fit(gaps.select(mine).drafting_features(),
                                                   gaps.seconds[mine] - forward[mine], f"drafting of {m!r}",
                                                   gaps.scale[mine])
        drafted = np.zeros_like(gaps.seconds)
        for m in methods:
            mine = gaps.method == m
            drafted[mine] = gaps.select(mine).drafting_features() @ drafting[m]
        previous, target = target, nonnegative_relative_fit(gaps.target_features(), gaps.seconds - drafted,
                                                            "target forward", gaps.scale)
        if np.all(np.abs(target - previous) <= CONVERGED * np.maximum(np.abs(target), 1e-12)):
            break
    c_fixed, c_tok, c_kv, c_req, c_multi = map(float, target)
    return LinearCostModel(
        name, c_fixed, c_tok, c_kv, 0.0, c_req=c_req, c_multi=c_multi,
        drafting={m: LinearDrafting(c_fixed=float(d[0]), c_tok=float(d[1]), c_kv=0.0, c_req=float(d[2]),
                                    c_prefill=float(d[3])) for m, d in drafting.items()},
        fitted_cells=tuple(FittedCell(c.method, c.k, c.batch_size, c.workload, c.tree.name if c.tree else None)
                           for c in cells),
    )


def cross_check(cells: Sequence[CellRun]) -> list[dict[str, object]]:
    """Per cell: the fit's mean tokens per step and mean gap beside the server's histograms."""
    rows = []
    for cell in cells:
        gaps = cell_gaps(cell)
        rows.append({"method": cell.method, "k": cell.k, "batch_size": cell.batch_size,
                     "tokens_per_step": float(np.mean(gaps.tokens)),
                     "server_tokens_per_step": cell.server_means.get("server_iteration_tokens_mean"),
                     "gap_ms": 1e3 * float(np.mean(gaps.seconds)),
                     "server_itl_ms": None if cell.server_means.get("server_inter_token_latency_mean_s") is None
                     else 1e3 * cell.server_means["server_inter_token_latency_mean_s"]})
    return rows
