"""A learned policy's decision rule at one batch size: :class:`Chooser`.

The acceptance model (fitted by :mod:`specscope.sim.fit`) is a discrete-time hazard model: for
every method m, one logistic regression over the standardised features
(:func:`~specscope.policy.features.feature_names`)
gives the probability that m's draft token j − 1 is accepted once the tokens before it were,
h_m,j = σ(w_m · x + b_m,j), j = 2 … J + 1 — slopes shared by every j, an offset per j — so that
P(acc_len_m ≥ j) = Π_{i=2}^{j} h_m,i. Evidence that raises one token's odds raises every later
one's, so the model reaches long accepted runs (a repetition loop's n-gram drafts) that few
training steps show at each single j. A step of m proposing k then emits in expectation
E[e] = 1 + Σ_{j=2}^{k+1} P(acc_len_m ≥ j) (n-gram: k at most what it offers now).
The request's own record shifts every hazard logit of m by one offset (:meth:`Chooser.shift_for`): the
log-odds of the draft tokens it accepted against those the training data's acceptance per depth
expects of the same tokens, weighted by how many it has — a request-level random effect, so a
workload whose acceptance the training data never showed (a repetition loop, a drafter better or
worse than in training) is followed within a few steps.
The decision at batch size B is the (method, k) of the best predicted ratio E[e] / T_B(method, k),
where T_B is the step's price under the cost model at B copies of a request of the training data's
median length so far (a step that leaves a model drafter idle is charged the catch-up its next
step pays); k = 0 (no drafting) emits 1 at T_B(none), the ratio any drafting must beat. A model
drafter's drafting splits into a part per row and a part F_B(m, k) the batch pays once, whichever
rows draft (an EAGLE head's k passes: its weights read once per pass). A request alone (batch 1,
or the simulator's paper mode: B copies of it) pays both; the requests of one engine iteration
are decided **together** (:meth:`Chooser.choose_group`), each row's actions scored
E[e] − θ·T at θ = its own best ratio (so that its best action scores 0 and every other one what
it loses against it): the drafter runs for the iteration, to depth k_d, only if what the rows that
take it gain pays F_B(m, k_d) at the rows' rate — Σ_rows (E[e] − θ·T) − Σ_rows θ · F_B (the rows
present: a batch's last few rows do not pay at the full batch's rate) — otherwise no row drafts
with it. On an engine that pads its forwards (the cost model's ``pads_verification``), every row
verifies the batch's widest proposal w: the group weighs each w, its verification priced once at
the rows' θ, and the rows keep k ≤ w. Rows an admission gate committed to chains run beside the
decided ones and wait as long as the step: each is counted at the decided rows' mean θ, and what
they run already — a drafter to their k, a width of their widest proposal — costs the decided
rows nothing more.
(θ is Dinkelbach's parameter for maximising the ratio Σe / ΣT. An earlier rule set it to the
request's own ratio so far, starting at the no-SD rate, and took longer k than the steps' ratio
paid for: docs/learned-policy-log.md, "The best ratio replaces θ", has the measurements.)

The slope term w_m · x is held within its span over the training steps (``span``): a feature far
outside what training showed (a 100k-token prompt after prompts of 1000) cannot push a
prediction past the most confident one the data supported.

The file (``"schema": "specscope.policy/7"``) holds ``methods``, ``features`` (name →
definition), ``cost_model``, ``mean``/``scale`` [F], ``coef`` [M][F], ``intercept`` [M][J]
(b_m,j), ``base_rate`` [M][J] (the training data's acceptance of draft token j), ``span``
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from specscope.policy.gate import Gate
from specscope.policy.observation import NONE, Observation

PLAIN_ROWS = 16  # a group of at most this many rows decides in plain Python (array code's fixed cost dominates)
PRIOR_TOKENS = 16  # a request's own acceptance record weighs as much as the model's after this many tokens judged


@dataclass(frozen=True)
class Chooser:
    """One batch size's decision rule over the shared acceptance model (see the module docstring)."""

    weights: np.ndarray  # [M, F] hazard slopes, standardisation folded in
    bias: np.ndarray  # [M, J] hazard offsets b_m,j, standardisation folded in
    seconds: np.ndarray  # [M, J + 1] step seconds per row of method m proposing k = 0 … J (k = 0: none)
    ngram: int  # index of n-gram among the methods (its k is capped at its offer); NONE if absent
    base_rate: np.ndarray  # [M, J] each method's acceptance of draft tokens at depth j over the training data
    fixed: np.ndarray  # [M, J + 1] F_B: the drafting a batch pays once when m drafts to depth k (0: lookups, k = 0)
    batch_size: int = 1  # B of the prices
    verify: np.ndarray | None = None  # [J + 1] the step's verification at B copies proposing k (part of seconds)
    pads: bool = False  # the engine verifies every row at the batch's widest proposal (needs verify)
    span: np.ndarray | None = None  # [M, 2] least and greatest w_m · x over the training steps (None: unbounded)
    confidence: float | None = None  # p: a model drafter taken proposes to its first draft below p (None: k)
    gate: Gate | None = None  # commits a request to one chain from its prompt (None: every request decided per step)

    def __post_init__(self) -> None:  # constants of every decision, computed once
        depth = self.seconds.shape[1]  # J + 1
        beyond = np.zeros((depth, *self.seconds.shape))  # [J + 1 offers, M, J + 1]: 0, or −∞ where not offered
        if self.ngram != NONE:  # n-gram proposing more than it offers would propose just its offer
            beyond[:, self.ngram][np.arange(depth)[None, :] > np.arange(depth)[:, None]] = -np.inf
        alone = self.seconds + self.fixed  # a request that drafts alone pays the batch's part too
        object.__setattr__(self, "_per_second", 1.0 / alone)  # [M, J + 1] (every price > 0: the file's check)
        object.__setattr__(self, "_weights_t", np.ascontiguousarray(self.weights.T))  # [F, M]
        object.__setattr__(self, "_base", 1.0 + beyond)  # the score of any k before acceptance and time
        object.__setattr__(self, "_drafters", np.flatnonzero(self.fixed.any(axis=1)).tolist())
        object.__setattr__(self, "_others", np.flatnonzero(~self.fixed.any(axis=1)).tolist())  # lookups: no batch part
        # plain lists for what a request alone pays per step (choose, shift): at this
        # size an array operation's fixed cost exceeds its arithmetic many times over
        span = np.tile([-math.inf, math.inf], (len(self.weights), 1)) if self.span is None else self.span
        object.__setattr__(self, "_low", span[:, 0])
        object.__setattr__(self, "_high", span[:, 1])
        object.__setattr__(self, "_spans", span.tolist())
        object.__setattr__(self, "_rows", list(zip(self.weights.tolist(), self.bias.tolist())))
        own = self.seconds - self.verify if self.pads else self.seconds  # padded: the batch's width is priced apart
        object.__setattr__(self, "_fixed_rows", self.fixed.tolist())
        object.__setattr__(self, "_verify", None if self.verify is None else self.verify.tolist())
        object.__setattr__(self, "_alone_rates", self._per_second.tolist())
        object.__setattr__(self, "_own", own)  # [M, J + 1]
        object.__setattr__(self, "_batch_prices", own.tolist())
        object.__setattr__(self, "_base_rows", self.base_rate.tolist())

    def shift_for(self, obs: Observation) -> list[float]:
        """[M] offsets of the hazard logits from ``obs``'s own acceptance record (the draft
        tokens judged and accepted per method and depth,
        :class:`~specscope.policy.observation.History`): the log-odds of its A accepted of T
        judged less that of the E the training data's rates per depth expect of the same tokens,
        (· + ½) / (T + 1) each, weighted T / (T + :data:`PRIOR_TOKENS`) — the model's prediction
        until the request has a record, its own rate once it has a long one (a request-level
        random effect). A walk shallower than the policy records fewer depths."""
        offsets = []
        for judged, accepted, rates in zip(obs.judged, obs.accepted, self._base_rows):
            total, hits = sum(judged), sum(accepted)
            expected = sum(map(operator.mul, judged, rates))
            odds = (hits + 0.5) * (total + 0.5 - expected) / ((total + 0.5 - hits) * (expected + 0.5))
            offsets.append(total / (total + PRIOR_TOKENS) * math.log(odds))
        return offsets

    def _gain(self, logits: np.ndarray) -> np.ndarray:
        """Hazard logits [..., M, J] → Σ_{j ≤ k+1} P(acc_len ≥ j) [..., M, J + 1] (column 0: 0):
        P(acc_len ≥ j) = Π_{i ≤ j} σ(logit_i), σ(z) = 1 / (1 + e^−z) with z floored at −700 (as
        :meth:`_lines`)."""
        survive = np.exp(-np.maximum(logits, -700.0))
        survive += 1.0
        np.cumprod(np.reciprocal(survive, out=survive), axis=-1, out=survive)
        gain = np.zeros((*logits.shape[:-1], logits.shape[-1] + 1))
        np.cumsum(survive, axis=-1, out=gain[..., 1:])
        return gain

    def gains(self, x: np.ndarray, offer: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """x [B, F], offer [B] (at most J), shift [B, M] → E[e] [B, M, J + 1] of (method, k) (k = 0:
        none) = 1 + Σ_{j ≤ k+1} P(acc_len ≥ j); n-gram proposing more than it offers: −∞ (it would
        propose just its offer, a candidate already)."""
        slope = np.minimum(np.maximum(x @ self._weights_t, self._low), self._high)  # np.clip: the same, slower
        gain = self._gain((slope + shift)[:, :, None] + self.bias)
        gain += self._base[offer]
        return gain

    def choose_group(self, x: Sequence[Sequence[float]], offer: Sequence[int], shift: Sequence[Sequence[float]],
                     committed: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
        """The rows of one iteration decided together (x [B][F], offer [B], shift [B][M]; each row's
        θ its own best ratio E[e] / T_B alone): (method or NONE, k) per row. Each model drafter d
        runs to a depth k_d (0: not at all) for
        the whole batch, paying F_B(d, k_d) once at the rows' summed θ; each row then takes its best
        (method, k) with k ≤ k_d of each drafter. On an engine that pads (``pads``) the batch also
        verifies every row at its widest proposal w, priced once at the rows' θ: each w is weighed
        and the rows keep k ≤ w. The iteration's rows committed to chains (``committed``: each
        one's (method or NONE, k) this step) wait for both as well, each counted at the decided
        rows' mean θ (a committed row is not observed: its own ratio is unknown here); a drafter
        runs at least to the deepest k of the rows committed to it, and the batch is at least as
        wide as their widest proposal, at no further price. Up to :data:`PLAIN_ROWS` rows in plain Python
        (:meth:`_choose_rows`), more rows vectorised (:meth:`_choose_arrays`): the same rule."""
        if len(x) <= PLAIN_ROWS:
            gains = [self.row_gains(row, o, sh) for row, o, sh in zip(x, offer, shift)]
            theta = [max(map(max, self._ratios(table))) for table in gains]
            tables = [[[g - t * p for g, p in zip(line, price)] for line, price in zip(table, self._batch_prices)]
                      for table, t in zip(gains, theta)]
            return self._choose_rows(tables, sum(theta) / len(theta), committed)
        return self._choose_arrays(*map(np.asarray, (x, offer, shift)), committed)

    def _floors(self, committed: Sequence[tuple[int, int]]) -> tuple[int, list[int]]:
        """What the committed rows run anyway: the batch's width (their widest proposal; 0 on an
        engine that does not pad) and each drafter's depth (the deepest k of the rows committed to
        it), each at most the deepest k."""
        top = self.seconds.shape[1] - 1
        width = min(max((k for _, k in committed), default=0), top) if self.pads else 0
        return width, [min(max((k for m, k in committed if m == d), default=0), top) for d in self._drafters]

    def _choose_arrays(self, x: np.ndarray, offer: np.ndarray, shift: np.ndarray,
                       committed: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
        """:meth:`choose_group` over arrays: the value of every batch width w (an engine that pads;
        else only the deepest k) and combination of the drafters' depths k_d ≤ w at once, in the
        order :meth:`_choose_rows` weighs them (first of equals)."""
        depth, rows = self.seconds.shape[1], len(x)
        gain = self.gains(x, np.minimum(offer, depth - 1), shift)  # [B, M, J + 1]
        theta = (gain * self._per_second).reshape(rows, -1).max(axis=1)  # each row's best ratio alone
        score = gain - theta[:, None, None] * self._own  # E[e] − θ·T (padded: T less the width's)
        rate = float(theta.sum()) * (rows + len(committed)) / rows  # every row's tokens per second of batch time
        widths = np.arange(depth) if self.pads else np.array([depth - 1])
        # per row and k: its best needing no drafter with k ≤ w (none: any method's column 0), and
        # each drafter's best with k ≤ k_d (−∞ at k_d = 0: it does not run)
        zero = score[:, :, :1].max(axis=1)  # [B, 1]
        free = np.maximum.accumulate(np.maximum(score[:, self._others].max(axis=1), zero), axis=1) if self._others \
            else np.broadcast_to(zero, (rows, depth))
        free = free[:, widths]  # [B, W]
        drafters = len(self._drafters)  # every combination of their depths at once: drafter d's k_d on axis d
        best = free.reshape(rows, len(widths), *(1,) * drafters)  # [B, W, k_d of each drafter]: each row's best
        paid, deepest = np.zeros((1,) * drafters), np.zeros((1,) * drafters, dtype=int)  # F_B summed; the largest k_d
        for d, m in enumerate(self._drafters):
            axis = tuple(depth if a == d else 1 for a in range(drafters))
            reach = np.full((rows, depth), -np.inf)  # its best k ≤ k_d (k_d = 0: it does not run)
            reach[:, 1:] = np.maximum.accumulate(score[:, m, 1:], axis=1)
            best = np.maximum(best, reach.reshape(rows, 1, *axis))
            paid = paid + self.fixed[m].reshape(axis)
            deepest = np.maximum(deepest, np.arange(depth).reshape(axis))
        value = best.sum(axis=0) - rate * paid  # [W, k_d of each drafter]
        value[widths.reshape(-1, *(1,) * drafters) < deepest] = -np.inf  # a drafter runs no deeper than the width
        if committed:  # ... and no shallower than its committed rows run it, the batch no narrower than
            least, floors = self._floors(committed)  # their widest proposal (what they pay for anyway)
            value[widths < least] = -np.inf
            for d, floor in enumerate(floors):
                value[(slice(None), *(slice(0, floor) if a == d else slice(None) for a in range(drafters)))] = -np.inf
        if self.pads:
            value -= (rate * self.verify).reshape(-1, *(1,) * drafters)  # every row waits for the widest
        w, *depths = np.unravel_index(int(value.argmax()), value.shape)
        w = int(widths[w])
        score = score[:, :, : w + 1]  # a view: the rows keep k ≤ w
        for d, k_d in zip(self._drafters, depths):
            score[:, d, k_d + 1:] = -np.inf  # beyond the depth its drafter runs to
        method, k = np.divmod(score.reshape(rows, -1).argmax(axis=1), w + 1)
        return list(zip(np.where(k > 0, method, NONE).tolist(), k.tolist()))

    def row_gains(self, x: Sequence[float], offer: int, shift: Sequence[float]) -> list[list[float]]:
        """One row's expected tokens E[e] = 1 + Σ_{j ≤ k+1} P(acc_len ≥ j) of every (method, k),
        [M][J + 1] (:meth:`gains` in plain Python; n-gram beyond its offer: −∞)."""
        depth = self.seconds.shape[1] - 1  # J
        return [line + [-math.inf] * (depth + 1 - len(line)) for line in self._lines(x, offer, shift)]

    def _lines(self, x: Sequence[float], offer: int, shift: Sequence[float]) -> Iterator[list[float]]:
        """Per method, E[e] of k = 0 … its top (J; n-gram: its offer) — :meth:`row_gains` unpadded.
        σ(z) = 1 / (1 + e^−z), z floored at −700 (σ < 1e-304 there; e^700 is still a float)."""
        depth, exp = self.seconds.shape[1] - 1, math.exp
        for m, (weights, bias) in enumerate(self._rows):
            low, high = self._spans[m]
            logit = min(max(sum(map(operator.mul, weights, x)), low), high) + shift[m]
            line, survive, gain = [1.0], 1.0, 1.0  # P(acc_len ≥ j + 1), 1 + Σ of them
            for b in bias[:min(offer, depth) if m == self.ngram else depth]:
                z = logit + b
                survive /= 1.0 + exp(-z if z > -700.0 else 700.0)
                gain += survive
                line.append(gain)
            yield line

    def choose(self, x: Sequence[float], offer: int, shift: Sequence[float]) -> tuple[int, int]:
        """(method index, k) for a request alone: the best ratio E[e] / T_B of its
        :meth:`row_gains`, the batch's part of the drafting in its price (first of equals, in
        (method, k) order). Plain Python: an engine at batch 1 pays this every step."""
        return _best([list(map(operator.mul, line, rates)) for line, rates in zip(self._lines(x, offer, shift),
                                                                                   self._alone_rates)])

    def _ratios(self, gains: list[list[float]]) -> list[list[float]]:
        """[M][J + 1] E[e] / T_B of every (method, k) at its price alone."""
        return [[g * r for g, r in zip(line, rates)] for line, rates in zip(gains, self._alone_rates)]

    def _choose_rows(self, tables: list[list[list[float]]], theta: float,
                     committed: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
        """:meth:`choose_group` in plain Python over the rows' tables of E[e] − θ·T [M][J + 1]
        (each row at its own θ; ``theta``: their mean; ``committed``: the rows beside them, each at
        that mean, the width and drafters' depths they run no floor lower): every batch width w (an
        engine that pads;
        else the deepest k) and combination of the drafters' depths k_d ≤ w, each row taking its
        best within them — the best of what needs no drafter, or a drafter's best k ≤ k_d."""
        drafters, depth = self._drafters, self.seconds.shape[1]
        others = [m for m in range(len(self._fixed_rows)) if m not in drafters]
        rate, best, limits = (len(tables) + len(committed)) * theta, -math.inf, (depth - 1, ())
        least, floors = self._floors(committed)
        free_upto, reach_rows = [], []  # per row, whatever the width: [J + 1] each
        for t in tables:
            zero = max(line[0] for line in t)  # none (every method's column 0)
            free = [zero, *(max(t[m][k] for m in others) for k in range(1, depth))] if others else [zero] * depth
            free_upto.append(list(itertools.accumulate(free, max)))  # its best needing no drafter, k ≤ w
            reach_rows.append([[-math.inf, *itertools.accumulate(t[d][1:], max)] for d in drafters])  # best k ≤ k_d
        reach = [list(zip(*(row[i] for row in reach_rows))) for i in range(len(drafters))]  # [D][J + 1][B]
        for w in range(least, depth) if self.pads else [depth - 1]:
            free = [upto[w] for upto in free_upto]
            width = rate * self._verify[w] if self.pads else 0.0  # every row waits for it
            for depths in itertools.product(*(range(floor, w + 1) for floor in floors)):
                gained = sum(map(max, free, free, *(columns[k_d] for columns, k_d in zip(reach, depths))))  # free twice: max of ≥ 2
                value = gained - width - rate * sum(self._fixed_rows[d][k_d] for d, k_d in zip(drafters, depths))
                if value > best:
                    best, limits = value, (w, depths)
        w, depths = limits
        caps = dict(zip(drafters, depths))
        return [_best([line[: caps.get(m, w) + 1] for m, line in enumerate(t)]) for t in tables]


def _best(table: list[list[float]]) -> tuple[int, int]:
    """(method or NONE, k) of the largest score of ``table`` [M][≤ J + 1] (first of equals, in
    (method, k) order; k = 0: none)."""
    best, pick = -math.inf, (NONE, 0)
    for m, line in enumerate(table):
        top = max(line)
        if top > best:
            best, pick = top, (m, line.index(top))
    return (pick[0] if pick[1] > 0 else NONE), pick[1]
