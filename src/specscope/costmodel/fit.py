"""Fit the linear cost model to measured per-step records of an engine run.

From every step record (:class:`~specscope.costmodel.steps.MeasuredStep`):

- target forward: ``verify_s ≈ c_fixed + c_tok·tokens_verified + c_kv·kv_tokens +
  c_req·decoded + c_multi·[tokens_verified > 1]`` (``decoded``: the requests it verified, the
  running ones less those the step prefilled, which get their first token alone), plus one point
  ``prefill_s ≈ c_fixed + c_tok·positions + c_req·prefill_requests + c_multi + c_prompt_kv·pairs``
  per no-SD step that prefilled, ``positions`` = its prompts right-padded to the longest, as the
  engine batches them (``prefill_requests × prefill_width``; the prompt tokens in records without a
  width), ``pairs`` its attention's query–key pairs among them
  (:attr:`~specscope.costmodel.steps.StepRecord.prefill_pairs`: ``prefill_requests × prefill_width²``);
- overhead per step: the mean of ``sample_s + overhead_s`` over the steps without SD (the
  simulator's overhead covers sampling and bookkeeping);
- drafting per method, n-gram included: everything an SD step costs beyond its verify forward
  and that plain-step overhead — ``draft_s`` plus the extra sampling and bookkeeping of
  checking drafts — as ``c_fixed + c_tok·(k + 1) + c_kv·kv_tokens + c_req·decoded +
  c_multi·[decoded > 1] + c_batched·decoded·(k + 1)`` on a chain (the last: a drafter's passes
  cost more with every row they carry; a tree step's below), fitted per proposed token (``k``, each term ≥ 0: a drafter
  of k passes costs a pass per token and a little besides, which the ``k + 1`` form writes with
  a ``c_fixed`` and ``c_req`` below 0), charged on every step: the reference engine runs its lookup or
  drafter for every request on every step, matched or not (the paper's n-gram fraction
  describes vLLM, not this engine). ``k + 1`` is what the simulator prices
  (:func:`~specscope.costmodel.base.draft_passes` for ``c_tok``,
  :func:`~specscope.costmodel.base.draft_tokens_per_sequence` for ``c_batched``): the rows' mean ``k + 1`` for
  a chain (:attr:`~specscope.costmodel.steps.StepRecord.drafter_tokens` / ``decoded``: each row
  at the k it proposed — an n-gram row that found nothing at 1 — where the verification pads
  every row to the widest; a drafter stopped at its confidence, every row at the deepest, as its
  passes run); for a tree step (its record names the tree) ``c_tok`` counts its
  ``depth`` drafter passes plus one (:func:`~specscope.costmodel.base.draft_passes`) and
  ``c_batched`` the tokens they read per sequence plus one, Σ ``draft_pass_widths`` + 1 — a tree
  step verifies ``nodes + 1`` tokens per sequence, which the forward's per-token term prices;
  and where some of a method's steps stopped each row at its confidence (the record's
  ``confidence``: ``bench --confidence``), ``c_confidence`` per pass on those steps (their deepest
  row's drafts) — what reading each pass's draft probabilities and stopping rows costs beyond the
  plain chain's passes;
- the drafter's prefill per method: what an SD run's prefill costs beyond the fitted target
  forward over the same positions, as ``c_prefill·positions``;
- a policy's own work (the steps of an engine running a policy file, method ``learned``): its
  ``policy_s`` as ``c_fixed + c_req·rows`` (the rows it decided: ``policy_rows``) (:func:`fit_policy_work`; the drafting entry
  ``learned``, which the simulator charges a causal policy on every step beside its proposers'
  drafting, :class:`~specscope.sim.switching.SwitchDrafting`). The rest of such a step's drafting
  is its proposers', priced from their own runs;
- the engine verifies a rectangular batch (every request padded to the longest proposal, its
  attention reading every row's cache padded to the longest: ``kv_tokens`` above is the record's
  :attr:`~specscope.costmodel.steps.StepRecord.kv_read`) and prefills one (every prompt padded
  to the longest), so the fitted model has ``pads_verification=True``.

Shared machines drift: the same step can run 1.5× slower for seconds at a time. The reference
engine runs no-SD and SD in lockstep (:mod:`specscope.backends.reference`), so a no-SD run and
the SD run after it (one *repeat*; records with a ``run`` index, as
:func:`specscope.analysis.timesplit.read_steps` gives them) saw the same machine. The fit
therefore estimates one speed factor per repeat — the median of measured / predicted verify
time over its steps, relative to the median repeat *of the same batch size* (a bench runs each
repeat at one batch size, so a factor relative to all repeats could absorb how cost grows with
the batch) — divides that repeat's times by it, and refits until no repeat's factor moves
(:data:`DRIFT_CONVERGED`; :data:`DRIFT_FITS` fits at most): shapes
are compared within a repeat, not across slowdowns. The reported fit error is measured on the
raw times.

Each linear fit minimises the squared error *relative to the mean time of the step's run*
(times span orders of magnitude across batch sizes and prefills; within a run the fit then
matches the mean step, which throughput depends on) with non-negative coefficients
(:func:`nonnegative_least_squares`). Relative to each step's own time instead, it matched a
right-skewed run's typical step: the reference engine's SD steps were priced 5–11 % under their
measured total, its no-SD steps 3–6 % (a review, 2026-12-04; the whole-step fit,
:func:`~specscope.costmodel.calibrate.fit_steps`, weighs by the run's mean too). A drafting
cost is measured relative to its run's mean whole step, not to itself: the extra cost of a step
can be near zero or, by timer noise, negative, and must not weigh more for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import scipy.optimize

from specscope.costmodel.base import Drafting, LinearDrafting, StepLoad, draft_passes, draft_tokens_per_sequence
from specscope.costmodel.linear import FORWARD_TERMS, FittedRecords, LinearCostModel
from specscope.costmodel.steps import NO_SD, MeasuredStep
from specscope.errors import SpecscopeError
from specscope.methods import LEARNED
from specscope.trees import TreeShape
from specscope.version import code_version

DRIFT_FITS = 30  # fits at most: the first on raw times, each later one after re-estimating every repeat's speed,
DRIFT_CONVERGED = 1e-5  # ... until no repeat's speed moves by more than this (relative)
SQUARE_SPAN = 2.0  # a prefill's price per query-key pair fitted where its prompts' lengths span this ratio
DRAFTING_COLUMNS = ("c_fixed", "c_tok", "c_kv", "c_req", "c_multi", "c_batched")  # _fit_once's, in order
# (then ``c_tree`` where some step drafted a tree, ``c_confidence`` where some read its drafts' probabilities)


@dataclass
class FitQuality:
    """Median and 90th-percentile relative error of the fitted forward time over its points, and
    per drafting method the median error of its fitted drafting time as a share of its steps'
    time (a drafting that fits badly would pass unseen behind a forward that fits well)."""

    points: int
    median_rel_error: float
    p90_rel_error: float
    slowest_repeat: float = 1.0  # time factor of the slowest repeat, relative to the median one
    fastest_repeat: float = 1.0
    drafting: dict[str, float] = field(default_factory=dict)  # method → median |error| / step time

    @property
    def worst_drafting(self) -> tuple[str, float] | None:
        """The drafting method that fits worst, and its median error (None: no drafting fitted)."""
        return max(self.drafting.items(), key=lambda item: item[1], default=None)

    def summary(self) -> str:
        """One line for the user."""
        drafting = "; drafting, median error as a share of its steps' time: " + ", ".join(
            f"{m} {100 * e:.1f} %" for m, e in self.drafting.items()) if self.drafting else ""
        return (f"forward fit over {self.points} points: median relative error {100 * self.median_rel_error:.1f} %, "
                f"90th percentile {100 * self.p90_rel_error:.1f} % (drift: repeats took "
                f"{self.fastest_repeat:.2f}–{self.slowest_repeat:.2f}× the median repeat's time; normalised)"
                + drafting)


SEPARABLE = 1e-9  # singular values below this share of the largest (columns scaled to norm 1): a dependence


def square_told(positions: np.ndarray, pairs: np.ndarray) -> bool:
    """Whether prefills over ``positions`` computing ``pairs`` query–key pairs (arrays [n]; 0 where
    none) had prompts whose lengths (pairs / positions: each prompt's, padded where the engine
    pads) span :data:`SQUARE_SPAN`: over narrower lengths a square is nearly a line, and a price per
    pair fitted there would price a long prompt by an extrapolated square (a README sweep of
    50–60-token prompts put a prefill's whole per-position cost on it)."""
    lengths = pairs[positions > 0] / positions[positions > 0]
    return bool(lengths.size) and lengths.max() >= SQUARE_SPAN * lengths.min()


def pairs_fitted(features: np.ndarray, names: Sequence[str], positions: np.ndarray, pairs: np.ndarray) -> bool:
    """Whether a fit over ``features`` (columns ``names``, ``c_prompt_kv`` among them) prices a
    prefill's query–key pairs: its prompts span :data:`SQUARE_SPAN` (:func:`square_told`) and the
    points tell the pairs' column apart from the others. Else the pairs are priced at 0 — not a
    split of a joint cost, so not named as one."""
    return square_told(positions, pairs) and "c_prompt_kv" not in unseparated(features, names)


def unseparated(features: np.ndarray, names: Sequence[str]) -> list[str]:
    """The ``names`` of the columns of ``features`` [n, len(names)] the points cannot tell apart
    from the others: a column of zeros, or one in a linear dependence among the columns (every
    step at batch size 1 makes the cost per sequence a copy of the fixed cost). A fit can put
    their joint cost on any of them: their split says nothing."""
    norm = np.linalg.norm(features, axis=0)
    seen = norm > 0
    involved = ~seen
    if seen.any():
        _, values, vectors = np.linalg.svd(features[:, seen] / norm[seen], full_matrices=False)
        null = vectors[values < SEPARABLE * values.max()]
        involved[np.flatnonzero(seen)] = (np.abs(null) > 1e-6).any(axis=0)
    return [name for name, untold in zip(names, involved) if untold]


def nonnegative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Coefficients ≥ 0 minimising |a @ coef − b|² (a [n, m], b [n]; scipy's NNLS on columns
    scaled to norm 1). Among the columns the points cannot tell apart (:func:`unseparated`) the
    first ones carry their joint cost and the later ones are 0 wherever that fits as well (a
    fixed cost rather than none; least squares over all of them would split it evenly)."""
    norm = np.linalg.norm(a, axis=0)
    norm[norm == 0] = 1.0  # a column that is 0 everywhere keeps a coefficient of 0

    def solve(use: np.ndarray) -> tuple[np.ndarray, float]:
        coef = np.zeros(a.shape[1])
        coef[use], residual = scipy.optimize.nnls(a[:, use] / norm[use], b, maxiter=50 * a.shape[1])
        return coef / norm, residual

    use = np.ones(a.shape[1], dtype=bool)
    coef, residual = solve(use)
    for column in reversed(unseparated(a, range(a.shape[1]))):
        trial = use.copy()
        trial[column] = False
        if not trial.any():
            break
        fewer, left = solve(trial)
        if left <= residual * (1 + 1e-9) + 1e-12:
            use, coef, residual = trial, fewer, left
    return coef


def nonnegative_relative_fit(features: np.ndarray, times: np.ndarray, what: str,
                             scale: np.ndarray | None = None) -> np.ndarray:
    """Coefficients ≥ 0 minimising Σ ((features @ coef − t) / s)²; features [n, m], times [n],
    scale s [n] (default: the times themselves), by :func:`nonnegative_least_squares`. Fewer
    points than coefficients (n < m) would fit exactly and report no error: refused, naming
    ``what`` is fitted."""
    if len(times) < features.shape[1]:
        raise SpecscopeError(f"cost-model fit: {what}: {len(times)} measured points for {features.shape[1]} "
                             f"coefficients (expected at least {features.shape[1]})")
    weights = 1.0 / np.maximum(times if scale is None else scale, 1e-12)
    return nonnegative_least_squares(features * weights[:, None], times * weights)


def _design(batched: np.ndarray, kv: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(batched, dtype=float), batched.astype(float), kv.astype(float)])


def _drafter_prefill(steps: Sequence[MeasuredStep], target: LinearCostModel) -> float:
    """Seconds per prompt token that an SD run's prefill adds to the ``target`` forward's (≥ 0;
    0 without prefill steps)."""
    if not steps:
        return 0.0
    tokens = np.array([s.prefill_positions for s in steps], dtype=float)
    prompts = np.array([max(s.prefill_requests, 1) for s in steps], dtype=float)
    pairs = np.array([s.prefill_pairs for s in steps], dtype=float)
    times = np.array([s.prefill_s for s in steps])
    extra = times - target.prefill_forward_time(tokens, prompts, pairs)
    return float(nonnegative_relative_fit(tokens[:, None], extra, "the drafter's prefill", run_means(steps, times))[0])


def run_means(steps: Sequence[MeasuredStep], times: np.ndarray) -> np.ndarray:
    """[n] each point's scale in a fit: the mean of ``times`` over the points of its step's run
    (module docstring: a fit relative to it matches each run's mean step)."""
    runs = np.array([s.run for s in steps])
    means = {run: float(times[runs == run].mean()) for run in np.unique(runs).tolist()}
    return np.array([means[run] for run in runs.tolist()])


def fit_linear(steps: Sequence[MeasuredStep], name: str = "fitted") -> tuple[LinearCostModel, FitQuality]:
    """Fit a :class:`LinearCostModel` to measured steps (their ``run`` normalises drift; see the
    module docstring)."""
    repeat = repeats(steps)
    factors = np.ones(len(steps))
    model, drafting = _fit_once(steps, name)
    for _ in range(DRIFT_FITS - 1):
        previous, factors = factors, _speed_factors(steps, repeat, model)
        if np.allclose(factors, previous, rtol=DRIFT_CONVERGED, atol=0.0):
            break  # the last fit was made at these speeds (three fits left a slow repeat's cost 11 % off)
        model, drafting = _fit_once([_slowed(s, 1.0 / f) for s, f in zip(steps, factors)], name)
    decode, prefill = _decode_and_prefill(steps)
    model = replace(model, measured=measured_extent(decode), step_records=records_of(steps))
    batched, kv, rows, pairs, times, _ = _forward_points(decode, prefill)
    rel = np.abs(model.forward_time(batched, kv, rows) + model.c_prompt_kv * pairs - times) / times
    quality = FitQuality(len(times), float(np.median(rel)), float(np.percentile(rel, 90)),
                         float(factors.max(initial=1.0)), float(factors.min(initial=1.0)), drafting)
    return model, quality


def measured_extent(decode: Sequence[MeasuredStep]) -> tuple[int, int]:
    """The largest k of the SD steps among ``decode`` (steps that verified) and the most rows any
    of them decoded: how far a model fitted to them has seen (``LinearCostModel.measured``)."""
    return (max((s.k for s in decode if s.method != NO_SD), default=0), max((s.decoded for s in decode), default=1))


def records_of(steps: Sequence[MeasuredStep]) -> tuple[FittedRecords, ...]:
    """The files ``steps`` were read from (their ``source``; none for steps made in memory), as a
    model fitted to them names them (``LinearCostModel.step_records``)."""
    return tuple(FittedRecords.of(source) for source in dict.fromkeys(s.source for s in steps if s.source))


def _slowed(step: MeasuredStep, factor: float) -> MeasuredStep:
    """``step`` with every measured time multiplied by ``factor``."""
    return replace(step, draft_s=step.draft_s * factor, verify_s=step.verify_s * factor,
                   sample_s=step.sample_s * factor, overhead_s=step.overhead_s * factor,
                   prefill_s=step.prefill_s * factor, policy_s=step.policy_s * factor)


def repeats(steps: Sequence[MeasuredStep]) -> np.ndarray:
    """[steps] the repeat of each step: a no-SD run and the runs after it in its file up to the next
    no-SD run — the SD run it ran in lockstep with, or a policy's and the chains' beside it — share
    one; a run with no no-SD run before it in its file is a repeat of its own."""
    first: dict[int, MeasuredStep] = {}
    for s in steps:
        first.setdefault(s.run, s)
    repeat_of: dict[int, int] = {}
    latest: MeasuredStep | None = None  # the file's latest no-SD run so far
    for run in sorted(first):
        head = first[run]
        if head.method == NO_SD or (latest is not None and latest.source != head.source):
            latest = head if head.method == NO_SD else None
        repeat_of[run] = run if latest is None else latest.run
    return np.array([repeat_of[s.run] for s in steps])


def _speed_factors(steps: Sequence[MeasuredStep], repeat: np.ndarray, model: LinearCostModel) -> np.ndarray:
    """[steps] measured / predicted verify time, median over each repeat, over the median of the
    repeats with the same batch size (a repeat's largest ``batch_size``)."""
    decode = np.array([s.decoded > 0 and s.verify_s > 0 and s.prefill_tokens == 0 for s in steps])
    measured = np.array([s.verify_s for s in steps])
    shapes = np.array([[s.tokens_verified, s.kv_read, s.decoded] for s in steps], dtype=float).reshape(-1, 3)
    ratio = measured / np.maximum(model.forward_time(*shapes.T), 1e-12)
    size: dict[int, int] = {}
    for r, s in zip(repeat.tolist(), steps):
        size[r] = max(size.get(r, 0), s.batch_size)
    per_repeat = {r: float(np.median(ratio[decode & (repeat == r)])) for r in np.unique(repeat[decode]).tolist()}
    relative = within_batch_size(per_repeat, size)
    return np.array([relative.get(r, 1.0) for r in repeat.tolist()])


def within_batch_size(ratio: dict, batch_size: dict) -> dict:
    """Each group's measured / predicted ``ratio`` over the median ratio of the groups of its
    ``batch_size`` (group → batch size): how slow the machine ran for it. Relative to every group
    alike, it could absorb how cost grows with the batch."""
    typical = {b: float(np.median([r for g, r in ratio.items() if batch_size[g] == b]))
               for b in {batch_size[g] for g in ratio}}
    return {g: r / typical[batch_size[g]] for g, r in ratio.items()}


def _decode_and_prefill(steps: Sequence[MeasuredStep]) -> tuple[list[MeasuredStep], list[MeasuredStep]]:
    """The steps with a verify forward, and the steps that prefilled."""
    return ([s for s in steps if s.decoded > 0 and s.verify_s > 0],
            [s for s in steps if s.prefill_tokens > 0 and s.prefill_s > 0])


def _forward_points(decode: Sequence[MeasuredStep], prefill: Sequence[MeasuredStep]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The target-forward points: batched tokens, cached tokens, sequences, a prefill's query–key
    pairs (0 for a verification), seconds and each point's scale [n] (every verify forward, and
    the prefills of no-SD runs, each scaled by the mean of its run's points of its kind: see the
    module docstring)."""
    target_prefill = [s for s in prefill if s.method == NO_SD] or prefill  # SD prefills add the drafter's
    batched = np.array([s.tokens_verified for s in decode] + [s.prefill_positions for s in target_prefill])
    kv = np.array([s.kv_read for s in decode] + [0] * len(target_prefill))
    rows = np.array([s.decoded for s in decode] + [max(s.prefill_requests, 1) for s in target_prefill],
                    dtype=float)
    pairs = np.array([0] * len(decode) + [s.prefill_pairs for s in target_prefill], dtype=float)
    verify, prefilled = np.array([s.verify_s for s in decode]), np.array([s.prefill_s for s in target_prefill])
    scale = np.concatenate([run_means(decode, verify), run_means(target_prefill, prefilled)])
    return batched, kv, rows, pairs, np.concatenate([verify, prefilled]), scale


def draft_rows(steps: Sequence[MeasuredStep]) -> tuple[np.ndarray, np.ndarray]:
    """[steps] the drafter's passes in each step and the tokens per sequence they read, each plus
    one, as the simulator prices them (:func:`~specscope.costmodel.base.draft_passes`,
    :func:`~specscope.costmodel.base.draft_tokens_per_sequence`) given the step's tree (its pass
    widths) or chain (``drafter_tokens / decoded``: both; a drafter stopped at its confidence serves
    every row to the deepest)."""
    passes, out = np.zeros(len(steps)), np.zeros(len(steps))
    trees = np.array([s.tree or "" for s in steps])
    for tree in dict.fromkeys(trees.tolist()):
        at = trees == tree
        batched = np.array([s.drafter_tokens for s, here in zip(steps, at) if here], dtype=float)
        running = np.array([s.decoded for s, here in zip(steps, at) if here], dtype=float)
        widths = TreeShape.parse(tree).draft_pass_widths if tree else ()
        load = StepLoad(batched, np.zeros_like(batched), running, running, batched, widths)
        passes[at], out[at] = draft_passes(load), draft_tokens_per_sequence(load)
    return passes, out


def _step_seconds(steps: Sequence[MeasuredStep]) -> np.ndarray:
    """[steps] each decode step's whole time: what a drafting's error is measured against."""
    return np.array([s.decode_s for s in steps])


def with_policy_work(model: LinearCostModel, steps: Sequence[MeasuredStep]) -> LinearCostModel:
    """``model`` with the drafting entry ``learned``: a policy's own work, fitted from the decode
    steps among ``steps`` of an engine running a policy file where it decided some row (a step
    whose rows its admission gate all committed to chains did no policy work, and the simulator
    charges none there), their files added to the model's ``step_records`` (``model`` as it is
    without any)."""
    learned = [s for s in _decode_and_prefill(steps)[0] if s.method == LEARNED and s.policy_rows != 0]
    if not learned:
        return model
    return replace(model, drafting={**model.drafting, LEARNED: fit_policy_work(learned)},
                   step_records=tuple(dict.fromkeys((*model.step_records, *records_of(learned)))))


def fit_policy_work(steps: Sequence[MeasuredStep]) -> LinearDrafting:
    """A policy's own work per step, ``policy_s ≈ c_fixed + c_req·rows`` (≥ 0; errors relative to
    its run's mean whole step, as a drafting's), from the steps of an engine running it: ``rows``
    the rows it decided (``policy_rows``; every decoding row where a record does not say)."""
    running = np.array([s.decoded if s.policy_rows is None else s.policy_rows for s in steps], dtype=float)
    work = np.array([s.policy_s for s in steps])
    c_fixed, c_req = nonnegative_relative_fit(np.column_stack([np.ones_like(running), running]), work,
                                              "a policy's own work", run_means(steps, _step_seconds(steps)))
    return LinearDrafting(float(c_fixed), 0.0, 0.0, c_req=float(c_req))


def _fit_once(steps: Sequence[MeasuredStep], name: str) -> tuple[LinearCostModel, dict[str, float]]:
    """One fit of every coefficient (see the module docstring), on times as given; and per
    drafting method the median |error| of its fitted drafting time over its steps' time."""
    decode, prefill = _decode_and_prefill(steps)
    batched, kv, rows, pairs, times, scale = _forward_points(decode, prefill)
    features = np.column_stack([_design(batched, kv), rows, batched > 1, pairs])
    if not pairs_fitted(features, (*FORWARD_TERMS, "c_prompt_kv"), np.where(pairs > 0, batched, 0), pairs):
        features = features[:, :-1]
    c_fixed, c_tok, c_kv, c_req, c_multi, *pair = map(
        float, nonnegative_relative_fit(features, times, "target forward", scale))
    c_prompt_kv = pair[0] if pair else 0.0
    untold = unseparated(features, FORWARD_TERMS)
    forward = LinearCostModel(name, c_fixed, c_tok, c_kv, 0.0, pads_verification=True, c_req=c_req,
                              c_multi=c_multi, c_prompt_kv=c_prompt_kv, made_by=code_version())
    plain = [s for s in decode if s.method == NO_SD] or decode
    overhead = float(np.mean([s.sample_s + s.overhead_s for s in plain])) if plain else 0.0
    drafting: dict[str, Drafting] = {}
    errors: dict[str, float] = {}
    for method in sorted({s.method for s in decode} - {NO_SD, LEARNED}):
        mine = [s for s in decode if s.method == method]
        passes, per_request = draft_rows(mine)
        draft_kv = np.array([s.kv_read for s in mine])
        running = np.array([s.decoded for s in mine], dtype=float)
        tree = np.array([bool(s.tree) for s in mine], dtype=float)
        reads = np.array([s.confidence is not None for s in mine], dtype=float)  # passes that read probabilities
        extra = np.array([s.draft_s + s.sample_s + s.overhead_s - overhead for s in mine])
        read = per_request - 1  # tokens a row's passes read (a chain's k): each term >= 0 per pass and token
        optional = {"c_tree": tree, "c_confidence": (passes - 1) * reads}  # columns only where some step has them
        optional = {name: column for name, column in optional.items() if column.any()}
        design = np.column_stack([_design(passes - 1, draft_kv), running, running > 1, running * read,
                                  *optional.values()])
        seconds = _step_seconds(mine)
        coef = nonnegative_relative_fit(design, extra, f"drafting of {method!r}", run_means(mine, seconds))
        errors[method] = float(np.median(np.abs(design @ coef - extra) / seconds))
        untold += [f"{method}.{term}" for term in unseparated(design, (*DRAFTING_COLUMNS, *optional))]
        c_fixed, c_tok, c_kv, c_req, c_multi, c_batched = map(float, coef[:6])
        terms = dict(zip(optional, map(float, coef[6:])))
        drafting[method] = LinearDrafting.per_proposed_token(
            c_fixed, c_tok, c_req, c_batched, c_kv=c_kv, c_multi=c_multi, **terms,
            c_prefill=_drafter_prefill([s for s in prefill if s.method == method], forward))
    return with_policy_work(replace(forward, overhead_s=overhead, drafting=drafting, not_separated=tuple(untold)),
                            decode), errors
