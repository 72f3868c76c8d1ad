"""Plans that switch proposer per step, and what their drafting costs.

A switching plan records, per step, the proposer that ran (``Plan.method``: an index into
``Plan.methods``, :data:`~specscope.policy.observation.NONE` when the step proposes nothing).

- ``oracle-switch:a+b`` (:func:`oracle_switch_plan`): at every step the proposer with the longer
  acc_len there proposes exactly acc_len − 1, also at the last step, where what it emits stops at the
  output's end, as ``oracle`` and ``oracle-combined`` do (ties: a lookup such as n-gram before a model
  drafter, then the first named; acc_len = 1 for both: none). Its drafting is charged, unlike
  ``oracle-combined``'s: the realistic ceiling of a causal policy — a ceiling of tokens per step,
  not a bound on speed: it never weighs a step's price, so where a model drafter's step costs
  more than its extra tokens are worth, a policy that weighs prices can beat it.
- a causal policy (:func:`causal_plan`): the simulator walks the trace, hands the policy an
  :class:`~specscope.policy.observation.Observation` before every step and applies its (method, k);
  in mixed mode the requests of one iteration are walked in lockstep and decided together.

Pricing (:class:`SwitchDrafting`): each proposer drafts for the requests that chose it in an
iteration, priced by its own drafting model over just those requests (the lookup model's share
of the verify time is that of its proposing requests among all running ones). A causal policy
(``causal``) is priced as the engine runs it: the lookup runs for every running request the
policy decides, at every step, whatever was chosen — its offer is a feature; a row that took another proposer (or none)
searched and read none of its drafts: a fitted lookup charges it one pass (k = 0), not the k + 1
of the step it took (the reference engine's fit measures every search); the paper's fraction model
charges n-gram's search its share of the verify time where it found drafts to offer, and nothing
where it found none, as it charges an n-gram chain's step that proposes nothing (``Plan.offered``;
another lookup's search, whose finds the walk does not record, at every step) — and a model
drafter drafts its rows to the deepest k among them, as the engine batches its passes. The oracles keep the cost model's price
of the mean k, as if each row's drafting stopped at its own k: optimistic, as a ceiling
should be (priced at the deepest k, gsm8k's oracle-switch at roofline B = 8 fell below EAGLE
k = 3: 1.51× against 1.58×) — the mean over every running row of an iteration where the drafter
drafts, the rows that chose another proposer counted as proposing 0, as a one-proposer
``oracle`` counts its rows that propose 0 (over its own rows only, oracle-switch taking exactly
EAGLE's oracle steps was priced 7 % below that oracle at roofline B = 8). An iteration where no
row drafts with a model drafter (every row proposes 0, or takes another proposer) does not run
it, as a causal policy's engine does not, and its rows catch up at its next step; a one-proposer
``oracle`` keeps the paper's price, its drafter paid at every step, k = 0 too. So a switch taking
exactly one proposer's oracle steps costs what that oracle does where every iteration drafts,
and less by the drafter's iterations that propose nothing (a request alone of acc_len 3, 1, 2,
1, 1, 1 under the paper's fit: 1.39× against the oracle's 1.22×). A model drafter
keeps a state (an EAGLE head reads the target's hidden state at every position): before its next
step it **catches up** the positions emitted by other proposers' steps since its last one,
catch-up = pos − (the position after the request's previous step with that drafter; 1 when
none: its prefill covered the prompt and the first token). The engine feeds them to the drafter
in the first forward of its next step, beside the tokens that step reads anyway, so an
iteration's catch-up tokens (all its requests together) are priced at what they add to a
drafter forward (:func:`catch_up_time`: a fitted model's per-prompt-token drafter cost, zero in
the paper's models, which charge no drafter prefill; a roofline's compute and activations over
them, its weights being read by that forward anyway — priced as a forward of their own, with its
weights, a switch taking exactly EAGLE's oracle steps fell 5 % below that oracle at roofline
B = 8, 2.20× against 2.30×). Every model drafter among the methods pays its prefill on every prompt
but those its admission gate commits to another proposer (a
drafter that read a prompt only at its first draft, measured on the reference engine, lost
more than it saved: that first read pads every row of the drafter's forward to the prompt's
width). On an engine that pads the rows of one forward (the cost model's
``pads_verification``: specscope's reference engine), a causal policy's rows catch up in one
chunk as wide as the longest catch-up among them: rows × the longest; elsewhere, and for the
oracles, the sum. There, too, a drafter's attention reads the cache of every row it drafts for
padded to the longest among them (the oracles' over every running row), as the target's does
(:meth:`~specscope.costmodel.base.StepLoad.cached_read`).

A causal policy's own work (observations, decision, bookkeeping: what an engine spends on the
policy beyond its proposers) is charged on every step for every running request it decides where
the cost model has a ``learned`` drafting entry — fitted from an engine's step records
(:func:`~specscope.costmodel.fit.fit_policy_work`); the paper's model and the rooflines have
none, and charge nothing for it.

A request the policy's admission gate commits at admission (``Plan.committed``:
:mod:`specscope.policy.gate`) runs as that method's plain chain and is priced as one: no other
proposer reads its prompt, follows its steps or searches its tokens, and the policy does no work
for it (a lookup-committed row is priced as a lookup chain's row).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from specscope.costmodel.base import CostModel, Drafting, StepLoad
from specscope.errors import SpecscopeError
from specscope.methods import LEARNED, method as method_named
from specscope.policy.gate import Gate
from specscope.policy.observation import NONE, Decide
from specscope.sim.observe import Observer
from specscope.sim.plan import (READS_EVERY, READS_FIRST, READS_NONE, Plan, accepted_drafts, concat_steps, passes_read,
                                visit)
from specscope.sim.pricing import DeepestPasses
from specscope.trace.schema import TraceRecord

def common_length(record: TraceRecord, methods: Sequence[str]) -> int:
    """Positions every method's acc_len and the output cover (oracle-combined's rule, which
    reads the acc_len arrays only, plus the output: observations read its tokens)."""
    return min(record.output_len, *(len(record.acc_len(m)) for m in methods))


def on_common_positions(records: Sequence[TraceRecord], methods: Sequence[str]) -> list[TraceRecord]:
    """``records``, each cut to :func:`common_length` over ``methods``: the positions a switching
    walk replays (a fit, a judgement and a report read the same ones)."""
    return [record.truncated(common_length(record, methods)) for record in records]


def oracle_switch_plan(records: Sequence[TraceRecord], methods: tuple[str, ...]) -> Plan:
    """Walk every request under oracle-switch (see the module docstring)."""
    preference = sorted(range(len(methods)), key=lambda i: method_named(methods[i]).kind != "lookup")

    def choose(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ranked = acc[preference]  # [M, G], the cheaper first: ties go to it
        return np.asarray(preference)[ranked.argmax(axis=0)], ranked.max(axis=0) - 1

    return _positional_plan(records, methods, choose)


def lookup_known_plan(records: Sequence[TraceRecord], methods: tuple[str, str], at_least: int, k: int) -> Plan:
    """Walk every request under the lookup-known yardstick of a lookup and a model drafter
    (:func:`specscope.sim.evaluate.lookup_known`): where the lookup's acc_len at the step is at
    least ``at_least`` (≥ 2) it proposes exactly acc_len − 1, as an oracle; elsewhere the model
    drafter proposes ``k``. It knows the lookup's next step and nothing of the drafter's. With
    k = 0 the drafter never runs: the plan is over the lookup alone (no drafter to prefill or
    catch up), proposing nothing elsewhere."""
    lookup = next(i for i, m in enumerate(methods) if method_named(m).kind == "lookup")
    if k == 0:
        methods, lookup = (methods[lookup],), 0

    def choose(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        known = acc[lookup] >= at_least
        return np.where(known, lookup, 1 - lookup if k else lookup), np.where(known, acc[lookup] - 1, k)

    return _positional_plan(records, methods, choose)


def _positional_plan(records: Sequence[TraceRecord], methods: tuple[str, ...],
                     choose: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> Plan:
    """Walk every request under a rule that reads the trace at each position: ``choose`` maps the
    methods' acc_len [M, G] to the proposer [G] and k [G] of a step at each position; a step emits
    min(its proposer's acc_len, k + 1), not past the output's end, and proposes k to the last
    step, as every oracle does (k = 0: none)."""
    parts = []
    for record in records:
        g = common_length(record, methods)
        acc = np.stack([record.acc_len(m)[:g] for m in methods])  # [M, G]
        chosen, k = choose(acc)
        reach = np.minimum(acc[chosen, np.arange(g)], k + 1)
        pos = np.asarray(visit(reach.tolist()), dtype=np.int64)
        acc_at, proposed = acc[chosen[pos - 1], pos - 1], k[pos - 1].astype(np.int64)
        emitted = np.minimum(reach[pos - 1], g - pos).astype(np.int64)  # not past the output, as every walk
        parts.append((pos, proposed, emitted, accepted_drafts(acc_at, proposed),
                      np.where(proposed > 0, chosen[pos - 1], NONE)))
    return _switch_plan(parts, records, methods)


class _Walk:
    """One request under a causal policy: its observer, position, the steps taken and the chain
    its admission gate committed it to (None: decided per step)."""

    def __init__(self, record: TraceRecord, methods: tuple[str, ...], k_max: int, gate: Gate | None) -> None:
        self.length = common_length(record, methods)
        self.observer = Observer(record, methods, self.length, k_max)
        self.k_max, self.pos, self.steps = k_max, 1, []
        self.models = [method_named(m).kind != "lookup" for m in methods]  # [M] the model drafters among them
        self.committed = None if gate is None else gate.commit(record.prompt_token_ids.tolist())
        self.left = 0  # a committed request: its steps not yet run in a lockstep walk
        if self.committed:  # a chain depends on no decision: every step at once, nothing observed
            while self.pos < self.length:
                self.take(*self.committed, record_outcome=False)
            self.left = len(self.steps)

    @property
    def done(self) -> bool:
        return self.left == 0 if self.committed else self.pos >= self.length

    def observe(self):
        return self.observer.observe(self.pos)

    def take(self, method: int, k: int, stop_below: float | None = None, record_outcome: bool = True) -> None:
        """Apply a decision: k capped at the deepest k and at what n-gram offers (0: none); with
        ``stop_below`` p, a model drafter taken proposes to its first draft below p instead, at most
        the deepest k (:meth:`~specscope.sim.observe.Observer.confident_k`)."""
        k, reads = min(max(int(k), 0), self.k_max), READS_NONE
        if method != NONE:
            offer = self.observer.offer(method, self.pos)
            k = k if offer is None else min(k, offer)
            if self.models[method] and k > 0 and record_outcome:  # a model drafter a decided row took: the policy
                reads = READS_FIRST  # reads its first draft's probability (a feature of its next decision)
            if stop_below is not None and k > 0:
                confident = self.observer.confident_k(method, self.pos, stop_below, self.k_max)
                k, reads = (k, reads) if confident is None else (confident, READS_EVERY)  # None: no probabilities
        method = method if k > 0 else NONE
        offered = self.observer.lookup_offer(self.pos) > 0
        emitted = (self.observer.step if record_outcome else self.observer.emitted)(self.pos, method, k)
        self.steps.append((self.pos, k, emitted, self.observer.accepted(self.pos, method, k), method, reads, offered))
        self.pos += emitted


def causal_plan(records: Sequence[TraceRecord], methods: tuple[str, ...], decide_for: Callable[[int], Decide],
                k_max: int, batch_size: int = 1, together: bool = False,
                confidence_for: Callable[[int], float | None] | None = None, gate: Gate | None = None) -> Plan:
    """Walk every request asking the policy's decision before each step. Alone (``together``
    false: batch 1, or paper mode's B copies of each request): each request by itself, decided at
    ``batch_size``. Together (mixed mode): the requests run in ``batch_size`` slots as
    :mod:`specscope.sim.mixed` schedules them (in order; a finished request's slot is taken at the
    next iteration, where it is prefilled, and it decodes from the one after) and each iteration's
    decoding requests are decided together at their count, as an engine's policy decides its batch
    (told the chains its gate committed the others to: they pay as long as the decided rows' step).
    ``confidence_for(b)``: the p at which a model drafter taken at that count stops (None: k).
    ``gate`` (the policy's at ``batch_size``, :mod:`specscope.policy.gate`): a request it commits
    takes its chain's (method, k) at every step and is left out of the decisions."""
    walks = [_Walk(record, methods, k_max, gate) for record in records]

    def decide(observed: list, committed: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return decide_for(len(observed))(observed, committed=committed)

    def stop_below(count: int) -> float | None:
        return None if confidence_for is None else confidence_for(count)

    if not together:
        p = stop_below(batch_size)
        for walk in walks:
            while not walk.done and not walk.committed:  # a committed one walked its chain already
                walk.take(*decide([walk.observe()] * batch_size, [])[0], p)  # B copies of it
    else:
        waiting, running, fresh = iter(walks), [], []
        while True:
            running = [w for w in running + fresh if not w.done]  # last iteration's prefills decode from now
            fresh = []
            while len(running) + len(fresh) < batch_size and (walk := next(waiting, None)) is not None:
                fresh.append(walk)  # prefilled in this iteration, its slot taken (a one-token output's too)
            if not running and not fresh:
                break
            if running:
                p = stop_below(len(running))
                committed = []  # the (method, k) of the committed rows' steps in this iteration
                for walk in running:
                    if walk.committed:  # its chain's next step, walked already
                        _, k, _, _, method, _, _ = walk.steps[len(walk.steps) - walk.left]
                        committed.append((method, k))
                        walk.left -= 1
                deciding = [w for w in running if not w.committed]
                if deciding:
                    for walk, choice in zip(deciding, decide([w.observe() for w in deciding], committed)):
                        walk.take(*choice, p)
    parts = [tuple(np.asarray(w.steps, dtype=np.int64).reshape(-1, 7).T) for w in walks]
    plan = _switch_plan(parts, records, methods)
    reads = np.concatenate([p[5] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    plan.reads_confidence = reads if reads.any() else None
    plan.offered = np.concatenate([p[6] for p in parts]).astype(bool) if parts else np.zeros(0, dtype=bool)
    plan.committed = np.asarray([NONE if w.committed is None else w.committed[0] for w in walks], dtype=np.int64)
    return plan


def _switch_plan(parts, records: Sequence[TraceRecord], methods: tuple[str, ...]) -> Plan:
    """One plan from per-request (pos, proposed, emitted, accepted, method) arrays."""
    plan = concat_steps([p[:4] for p in parts], [r.prompt_len for r in records],
                        [common_length(r, methods) for r in records])
    plan.method = np.concatenate([p[4] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    plan.methods = methods
    return plan


def catch_up(plan: Plan, method: int) -> np.ndarray:
    """[S] positions the drafter ``method`` reads beyond k + 1 at each of its steps (0 elsewhere)."""
    out = np.zeros(len(plan.pos), dtype=np.int64)
    for r in range(len(plan.prompt_len)):
        lo, hi = plan.offsets[r], plan.offsets[r + 1]
        mine = np.flatnonzero(plan.method[lo:hi] == method) + lo
        if mine.size == 0:
            continue
        seen = np.concatenate([[1], plan.pos[mine[:-1]] + plan.emitted[mine[:-1]]])
        out[mine] = plan.pos[mine] - seen
    return out


def catch_up_time(drafting: Drafting, tokens: np.ndarray) -> np.ndarray:
    """Seconds ``tokens`` [L] of catch-up add to the forward of a drafter that runs anyway: its
    prefill over them plus one token, less its prefill over one (0 where there are none)."""
    tokens = np.asarray(tokens, dtype=float)
    one = np.ones_like(tokens)
    return np.where(tokens > 0, drafting.prefill_time(tokens + one) - drafting.prefill_time(one), 0.0)


@dataclass(frozen=True)
class SwitchDrafting:
    """The drafting of a switching plan's proposers (``draftings`` in ``methods`` order)."""

    methods: tuple[str, ...]
    draftings: tuple[Drafting, ...]
    causal: bool = False  # priced as the engine runs a causal policy (module docstring)
    pads: bool = False  # the engine pads the rows of one forward (the cost model's pads_verification)
    policy: Drafting | None = None  # a causal policy's own work per step (None: not priced)

    @classmethod
    def of(cls, cost: CostModel, methods: tuple[str, ...], causal: bool = False) -> "SwitchDrafting":
        """``methods``' drafting under ``cost``; ``causal``: as the engine runs a causal policy, a
        model drafter's passes run to the deepest k among its rows (:class:`DeepestPasses`), and,
        on an engine that pads its forwards, its catch-up to the widest among them."""
        draftings = tuple(DeepestPasses(cost.drafting_for(m)) if causal and method_named(m).kind != "lookup"
                          else cost.drafting_for(m) for m in methods)
        policy = None
        if causal:
            with contextlib.suppress(SpecscopeError):  # a cost model that does not know the policy's work
                policy = cost.drafting_for(LEARNED)
        return cls(methods, draftings, causal, cost.pads_verification, policy)

    def stateful(self, index: int) -> bool:
        """Whether the proposer keeps a state that must follow every position (a model)."""
        return method_named(self.methods[index]).kind != "lookup"

    def bind(self, plan: Plan, aggregate: Callable[[np.ndarray | None], np.ndarray],
             deepest: Callable[[np.ndarray], np.ndarray],
             prompts: Callable[[np.ndarray], np.ndarray] | None = None) -> "BoundSwitch":
        """This drafting for ``plan``, with ``aggregate`` turning per-step values [S] into the
        pricing mode's per-load values (None: count the steps) and ``deepest`` into their maximum
        per load: each proposer's load pads its rows to the deepest k + 1 among them, which a model
        drafter's passes run to (:class:`~specscope.sim.pricing.DeepestPasses`). A causal plan's
        requests committed to one chain at admission (``plan.committed``) run as that chain: no
        other proposer reads their prompts or searches their tokens, and the policy does no work
        for them; ``prompts`` maps which requests [R] (bool) a drafter prefills to the prompt tokens
        its prefill reads where the mode prices prefills (needed where some request is committed)."""
        if plan.methods != self.methods:
            raise SpecscopeError(f"a plan switching between {plan.methods} priced with {self.methods}")
        loads, caught_up, prefills = [], [], []
        every, kv = aggregate(None), (plan.prompt_len[plan.request_of_step] + plan.pos).astype(float)
        committed = np.full(len(plan.prompt_len), NONE) if plan.committed is None else plan.committed  # [R]
        step_committed = committed[plan.request_of_step]  # [S]
        decided = step_committed == NONE  # [S] rows the policy decides per step
        if prompts is None and not decided.all():
            raise SpecscopeError("a plan with committed requests priced without its drafters' prefill per request")

        def cached(rows: np.ndarray, mine: np.ndarray) -> np.ndarray:  # what a drafter's attention reads
            return rows * deepest(np.where(mine, kv, 0.0)) if self.pads else aggregate(np.where(mine, kv, 0.0))

        for index in range(len(self.methods)):
            mine = plan.method == index
            proposing = mine & (plan.proposed > 0)
            tokens = np.where(mine, plan.verify_tokens, 0).astype(float)
            if self.causal and not self.stateful(index):  # it looks up for every request decided per step, each
                own = step_committed == index  # a search: a row that took another proposer (or none) read no
                tokens = np.where(mine | own, plan.verify_tokens, np.where(decided, 1.0, 0.0))  # draft of it: one
                found = decided  # pass (k = 0), proposing where n-gram's search found drafts (another lookup's
                if plan.offered is not None and self.methods[index] == "ngram":  # finds are not recorded: all)
                    found = decided & plan.offered
                proposing = found | ((mine | own) & (plan.proposed > 0))  # its own steps and chain: as they ran
                mine = decided | own
            rows = aggregate(mine.astype(float))
            reads = None  # a lookup's rows read no probabilities; a drafter's call reads them as its rows ask
            if self.stateful(index) and plan.reads_confidence is not None:
                reads = passes_read(np.where(mine, plan.reads_confidence, READS_NONE), np.where(mine, plan.proposed, 0),
                                    deepest)
            load = StepLoad(batched_tokens=aggregate(tokens), kv_tokens=cached(rows, mine),
                            num_running=rows, num_proposing=aggregate(proposing.astype(float)),
                            padded_tokens=rows * deepest(tokens), reads_confidence=reads)
            if self.stateful(index):
                behind = catch_up(plan, index).astype(float)
                caught_up.append(rows * deepest(behind) if self.causal and self.pads else aggregate(behind))
                if not self.causal:  # an oracle: its mean k over every running row, as a one-proposer oracle's
                    load = _over_every_row(load, every, cached(every, np.ones_like(mine)))
            else:
                caught_up.append(None)
            loads.append(load)
            elsewhere = (committed != NONE) & (committed != index)  # [R] committed to another proposer
            prefills.append(prompts(~elsewhere) if elsewhere.any() else None)
        policy_load = None
        if not decided.all():  # the policy's work over the rows it decides
            rows = aggregate(decided.astype(float))
            policy_load = StepLoad(batched_tokens=aggregate(np.where(decided, plan.verify_tokens, 0).astype(float)),
                                   kv_tokens=cached(rows, decided), num_running=rows,
                                   num_proposing=aggregate((decided & (plan.proposed > 0)).astype(float)),
                                   padded_tokens=rows * deepest(np.where(decided, plan.verify_tokens, 0).astype(float)))
        return BoundSwitch(self, loads, caught_up, prefills, policy_load)

    def to_json(self) -> dict:
        policy = {} if self.policy is None else {LEARNED: self.policy.to_json()}
        return {"kind": "switch", **{m: d.to_json() for m, d in zip(self.methods, self.draftings)}, **policy}


def _over_every_row(load: StepLoad, every: np.ndarray, kv: np.ndarray) -> StepLoad:
    """A drafter's ``load`` (its own rows) where it drafts, spread over ``every`` row running
    there (their cache ``kv``), the others as rows proposing 0: an oracle's drafting priced as a
    one-proposer oracle's (the cost model's mean k over all running rows), so that a switch
    taking one proposer's steps costs what that proposer's oracle does at every iteration where
    the drafter runs (where it does not, nothing: the module docstring)."""
    drafts = load.num_running > 0
    return StepLoad(batched_tokens=np.where(drafts, load.batched_tokens + every - load.num_running, 0.0),
                    kv_tokens=np.where(drafts, kv, 0.0), num_running=np.where(drafts, every, 0.0),
                    num_proposing=load.num_proposing, padded_tokens=load.padded_tokens)


@dataclass(frozen=True)
class BoundSwitch:
    """A :class:`SwitchDrafting` bound to one plan's per-method loads (a ``Drafting``)."""

    switch: SwitchDrafting
    loads: list[StepLoad]  # per method: the steps that ran it
    caught_up: list[np.ndarray | None]  # per method: catch-up tokens (None: a lookup, no state)
    prefills: list[np.ndarray | None]  # per method: the prompt tokens its prefill reads (None: every prompt's)
    policy_load: StepLoad | None = None  # the rows the policy decides (None: every running row)

    def time(self, load: StepLoad, verify_time: np.ndarray) -> np.ndarray:
        total = np.zeros_like(verify_time)
        for drafting, mine, tokens in zip(self.switch.draftings, self.loads, self.caught_up):
            share = np.divide(mine.num_running, load.num_running, out=np.zeros_like(verify_time),
                              where=load.num_running > 0)
            total = total + drafting.time(mine, verify_time * share)
            if tokens is not None:
                total = total + catch_up_time(drafting, tokens)
        if self.switch.policy is not None:
            total = total + self.switch.policy.time(load if self.policy_load is None else self.policy_load,
                                                    verify_time)
        return total

    def prefill_time(self, prompt_tokens: np.ndarray) -> np.ndarray:
        return sum((d.prefill_time(prompt_tokens if own is None else own)
                    for d, own in zip(self.switch.draftings, self.prefills)),
                   np.zeros_like(np.asarray(prompt_tokens, dtype=float)))

    def to_json(self) -> dict:
        return self.switch.to_json()
