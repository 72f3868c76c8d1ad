"""Fit a learned causal policy (:mod:`specscope.policy.learned`) from traces under a cost model.

Data. Every record is walked as a causal policy would walk it; at each step the observation's
features (:mod:`specscope.policy.observation`) are kept with each method's true acc_len there (the
trace's, which the policy never sees). The walk's actions are those of the oracle-switch with
probability :data:`FOLLOW`, random ones otherwise (so the data holds the states that other
actions lead to: a random action is kept for a run of :data:`RUN` steps on average, so that the
histories of a policy that keeps one choice are seen); a second round walks with the first model
(half its steps) and refits on both.

Model. For every method m: scikit-learn's logistic regression of the hazard [acc_len_m ≥ j]
given acc_len_m ≥ j − 1, on the standardised features and a one-hot of j (one row per draft
token judged: :func:`hazard_rows`), and the acceptance of each draft-token depth over those
rows (the reference of the request-level shift). Per batch size B: T_B(m, k), the price of one
step at B copies (paper mode: verify B·(k + 1) tokens over B·kv cached, m's drafting when k > 0,
overhead, and the catch-up of a model drafter the step leaves idle) at the training steps'
median kv, with a model drafter's drafting split into its part per row and the part F_B the batch
pays once (:func:`step_seconds`).

The drafter's confidence. Where the training traces keep every model drafter's probability of
each draft as deep as the policy proposes (``trace --draft-probs``), each batch size's rule also
gets a p (:func:`choose_confidence`): a model drafter the policy takes then proposes until its
first draft of probability below p instead of the chosen k — the one thing a step knows of its
acceptance that no feature before it carries. p is the best of :data:`CONFIDENCE_GRID` and none
for the training datasets' throughput, walked in mixed mode at that batch size (distinct rows
stop at different drafts while the drafter's passes run to the deepest: at larger batch sizes
none tends to win).

The admission gate. Last, each batch size's rule gets a gate (:mod:`specscope.sim.fit_gate`)
that commits a request, from its prompt, to one method's chain where the training data says a
chain serves such requests better than keeping the switch open — kept only where it pays.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np
import scipy.special

from specscope.costmodel.base import CostModel, StepLoad
from specscope.errors import SpecscopeError
from specscope.methods import method as method_named
from specscope.policy.chooser import Chooser
from specscope.policy.features import feature_names, features
from specscope.policy.gate import CARRIED, GATE_KEPT
from specscope.policy.learned import MAX_STEP_S, SCHEMA, LearnedPolicy, choosers_from_json
from specscope.policy.observation import NONE
from specscope.sim.fit_gate import fit_gates
from specscope.sim.observe import Observer
from specscope.sim.plan import dataset_depths
from specscope.sim.pricing import price_steps
from specscope.sim.mixed import predict_mixed
from specscope.sim.switching import SwitchDrafting, causal_plan, catch_up_time, common_length, on_common_positions
from specscope.trace.schema import TraceRecord, by_dataset
from specscope.version import code_version

J_MAX = 20  # the longest proposal a learned policy makes
FOLLOW = 0.5  # share of first-round steps that follow the oracle-switch
RUN = 4  # mean steps an exploring random action is kept for (so runs of one action are seen)
ROUNDS = 2
FEW_STEPS = 200  # below this many training steps a policy is said to be learned from too few (~27 features weighed)
MAX_ROWS = 60_000  # training rows per regression (a uniform sample beyond)
CONFIDENCE_GRID = (0.3, 0.5, 0.7, 0.9)  # the p a fit weighs at each batch size, beside none
CONFIDENCE_REQUESTS = 64  # requests of each training dataset walked to weigh them, at least (twice B if more)


def collect(records: Sequence[TraceRecord], methods: tuple[str, ...], depths: dict[str, int],
            rng: np.random.Generator, chooser: Chooser | None
            ) -> tuple[list[list[float]], list[list[int]], list[int], list[int]]:
    """Walk every record (see the module docstring), proposing no deeper than its dataset's
    ``depths`` entry (the policy's depth, or less where the dataset's traces tell less): features,
    acc_len per method, kv (prompt + position) and that depth, of every step."""
    xs, accs, kvs, caps = [], [], [], []
    for record in records:
        g, k_max = common_length(record, methods), depths[record.dataset or "trace"]
        acc = [record.acc_len(m)[:g].tolist() for m in methods]
        observer = Observer(record, methods, g, k_max)
        p, run = 1, (NONE, 0, 0)  # run: an exploring action and how many more steps it lasts
        while p < g:
            obs = observer.observe(p)
            x = features(obs, methods)
            truth = [a[p - 1] for a in acc]
            xs.append(x)
            accs.append(truth)
            kvs.append(record.prompt_len + p)
            caps.append(k_max)
            draw = rng.random()
            if chooser is not None and draw < 0.5:
                m, k = chooser.choose(x, obs.ngram_offer, chooser.shift_for(obs))
                k = min(k, k_max)
            elif draw < FOLLOW:
                m = int(np.argmax(truth))
                k = min(truth[m] - 1, k_max)
            else:
                if run[2] == 0:
                    run = (int(rng.integers(len(methods))), int(rng.integers(0, k_max + 1)), int(rng.geometric(1 / RUN)))
                m, k, left = run
                run = (m, k, left - 1)
            offer = observer.offer(m, p)
            k = k if offer is None else min(k, offer)
            p += observer.step(p, m if k > 0 else NONE, k)
    return xs, accs, kvs, caps


def step_seconds(cost: CostModel, methods: tuple[str, ...], depth: int, kv: float,
                 batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds [M, depth + 1], fixed [M, depth + 1], verify [depth + 1]) of a step of each method
    proposing k = 0 … depth at ``batch_size`` copies with ``kv`` cached tokens each (k = 0: no
    drafting); ``verify`` is the verification part of ``seconds``, the same for every method.
    A step that leaves a model drafter among ``methods`` idle (no drafting, or a lookup's) is
    charged that drafter's catch-up on its k + 1 tokens, which its next step pays (at what they add
    to its forward, :func:`~specscope.sim.switching.catch_up_time`, as the simulator prices them). A model drafter's drafting D_k(n) of n rows at k splits into
    what a row adds, D_k(B + 1) − D_k(B), per row (in ``seconds``), and the rest, F_B(k) =
    D_k(B) − B·(D_k(B + 1) − D_k(B)) ≥ 0 (``fixed``), which the batch pays once whichever rows
    draft: a fitted model's c_fixed + c_tok·(k + 1) and its read of the first draft's probability
    (``c_confidence``, the policy's next feature; the passes a confidence rule reads besides are
    weighed where its p is chosen, :func:`choose_confidence`, not here), a roofline's weight reads."""
    k = np.arange(depth + 1, dtype=float)

    def copies(rows: float) -> StepLoad:  # a model drafter's step reads its first draft's probability (the
        tokens = rows * (k + 1)  # policy's feature), one pass's read a step, as the simulator prices it
        return StepLoad(batched_tokens=tokens, kv_tokens=np.full_like(k, rows * kv), num_running=np.full_like(k, rows),
                        num_proposing=rows * (k > 0), padded_tokens=tokens, reads_confidence=1.0 * (k > 0))

    b = float(batch_size)
    load = copies(b)
    models = [m for m in methods if method_named(m).kind != "lookup"]
    catch_up = {d: catch_up_time(cost.drafting_for(d), load.padded_tokens) for d in models}
    idle = sum(catch_up.values(), np.zeros_like(k))  # a step proposing nothing leaves every model drafter
    rows, fixed = [], []
    for m in methods:
        drafting = cost.drafting_for(m)
        priced = price_steps(cost, drafting, load)
        shared = np.zeros_like(k)
        if m in catch_up:
            more = price_steps(cost, drafting, copies(b + 1)).drafting
            shared = np.clip(priced.drafting - b * (more - priced.drafting), 0.0, priced.drafting)
        left = idle - catch_up.get(m, 0.0)  # a step of m (k > 0) leaves the others
        rows.append(priced.verification + priced.overhead
                    + np.where(k > 0, priced.drafting - shared + left, idle))
        fixed.append(np.where(k > 0, shared, 0.0))
    return np.stack(rows), np.stack(fixed), priced.verification


def hazard_rows(acc: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hazard model's rows of one method: for every step s and j = 2 … min(acc_s, limit_s) + 1,
    the row (s, j, [acc_s ≥ j]) — token j − 1 reached and judged; beyond ``limit_s`` (the deepest k,
    or what n-gram offered) nothing is observed. Returns (step [N], j − 2 [N], accepted [N])."""
    last = np.minimum(acc, limit + 1) - 1  # rows per step: j − 2 = 0 … last − 1 (a rejection at acc + 1 included)
    count = np.where(acc <= limit, last + 1, last)
    step = np.repeat(np.arange(len(acc)), count)
    j = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    return step, j, (j + 2 <= acc[step])


def fit_acceptance(xs: np.ndarray, accs: np.ndarray, limits: np.ndarray, depth: int,
                   rng: np.random.Generator) -> dict:
    """mean, scale [F], coef [M][F], intercept [M][J], base_rate [M][J] and span [M][2] of the
    hazard model (module docstring of :mod:`specscope.policy.chooser`): per method, one logistic
    regression of [acc_len ≥ j] on the standardised features and a one-hot of j over the rows of
    :func:`hazard_rows` (``limits`` [N, M]: the deepest k each method could have proposed at each
    step); a method whose judged tokens were all accepted (or none) gets no slopes and the
    log-odds of its smoothed rate per depth."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    if len(xs) > MAX_ROWS:
        keep = rng.choice(len(xs), MAX_ROWS, replace=False)
        xs, accs, limits = xs[keep], accs[keep], limits[keep]
    mean, scale = xs.mean(axis=0), xs.std(axis=0)
    scale = np.where(np.ptp(xs, axis=0) > 0, scale, 1.0)  # a constant feature (its std: rounding, ~1e-16) stays 0
    z = (xs - mean) / scale
    methods = accs.shape[1]
    coef, intercept, base = np.zeros((methods, xs.shape[1])), np.zeros((methods, depth)), np.zeros((methods, depth))
    for m in range(methods):
        step, j, y = hazard_rows(accs[:, m], limits[:, m])
        base[m] = (np.bincount(j, y, minlength=depth) + 0.5) / (np.bincount(j, minlength=depth) + 1.0)
        if y.all() or not y.any():  # every (no) judged token accepted: the smoothed rate's log-odds, which
            intercept[m] = scipy.special.logit(base[m])  # a request's own record can move (±20 it could not)
        else:
            rows = np.hstack([z[step], np.eye(depth)[j]])
            model = LogisticRegression(C=1.0, max_iter=300, fit_intercept=False)
            with threadpool_limits(1):  # BLAS threads on these small matrices only contend
                model.fit(rows, y)
            coef[m], intercept[m] = model.coef_[0, : xs.shape[1]], model.coef_[0, xs.shape[1]:]
        unseen = np.bincount(j, minlength=depth) == 0  # a j no step reached keeps the deepest seen offset
        if unseen.any() and not unseen.all():
            intercept[m, unseen] = intercept[m, np.flatnonzero(~unseen).max()]
    slopes = z @ coef.T  # [N, M]: coef_m · z of every step
    return {"mean": mean.tolist(), "scale": scale.tolist(), "coef": coef.tolist(), "intercept": intercept.tolist(),
            "base_rate": base.tolist(), "span": np.stack([slopes.min(axis=0), slopes.max(axis=0)], axis=1).tolist()}


def require_methods(records: Sequence[TraceRecord], methods: Sequence[str]) -> None:
    """Refuse records that lack a trace of one of ``methods`` (a policy walks every one of them)."""
    for m in methods:
        missing = [r for r in records if m not in r.proposers]
        if missing:
            raise SpecscopeError(f"--acc: proposer {m!r} missing from {len(missing)} records (first id {missing[0].id!r} "
                                 f"of dataset {missing[0].dataset!r})")


def measured_depth(records: Sequence[TraceRecord], methods: Sequence[str]) -> int:
    """The most drafts of ``methods`` any step of ``records`` accepted (0: none): a policy fitted
    on them proposes no deeper (at least k = 1), a deeper draft's acceptance never observed."""
    return max(int(r.acc_len(m).max()) for r in records for m in methods) - 1


def depth_caps(records: Sequence[TraceRecord], methods: Sequence[str],
               max_k: int | None) -> tuple[int, int, dict[str, int]]:
    """What caps a policy's depth, ``(bound, measured, traced)``: the depth its traces' reach and
    ``max_k`` allow (the shallowest dataset's, or ``max_k`` up to the deepest's; at most
    :data:`J_MAX`), the most drafts any step accepted (:func:`measured_depth`), and each dataset's
    depth over the positions its walks read. The policy proposes max(1, min(bound, measured))."""
    traced = dataset_depths(on_common_positions(records, methods), methods)
    bound = min(J_MAX, *([min(max_k, max(traced.values()))] if max_k is not None else traced.values()))
    return bound, measured_depth(records, methods), traced


def fit_policy(records: Sequence[TraceRecord], methods: tuple[str, ...], cost: CostModel,
               batch_sizes: Sequence[int], seed: int = 0, sources: Sequence[str] = (),
               max_k: int | None = None, cost_label: str | None = None, notes: list[str] | None = None,
               checkpoints: Sequence[dict[str, str]] | None = None, gate: str = CARRIED) -> dict:
    """The policy file's JSON object (:mod:`specscope.policy.learned`) fitted on ``records``;
    it proposes at most ``max_k`` (default: the depth every dataset among ``records`` was traced to,
    so that it replays on each of them, at most :data:`J_MAX`) — set it to the longest k the cost
    model was measured at, so that no choice rests on a drafting cost extrapolated past it. A
    ``max_k`` deeper than some dataset's traces reach (at most the deepest dataset's) is fitted
    on every dataset within its own depth: its walks propose no deeper, and its draft tokens past
    that depth are unobserved. ``cost_label``: what the training record names the cost model by
    (its file too, where that is not its name); ``notes`` gets why no confidence rule was weighed and
    why a gate may be missing or commit to fewer methods;
    ``checkpoints``: per source, what its traces say produced them (method → fingerprint, ``model``
    the target; {} where they say nothing), which an engine running the policy checks its own against;
    ``gate``: how each batch size's admission gate is kept (:func:`~specscope.sim.fit_gate.fit_gates`)."""
    require_methods(records, methods)
    for m in methods:
        cost.drafting_for(m)
    batch_sizes = sorted(batch_sizes)  # the file lists them in order; the second round walks by the smallest's rule
    started = time.perf_counter()
    # replayable on every dataset it saw (within the positions its walks read), no deeper than any step reached
    bound, measured, traced = depth_caps(records, methods, max_k)
    depth = max(1, min(bound, measured))
    depths = {name: min(depth, reach) for name, reach in traced.items()}  # each dataset walked within its own
    rng = np.random.default_rng(seed)
    document: dict = {"schema": SCHEMA, "methods": list(methods), "features": feature_names(methods),
                      "cost_model": cost.describe(), "batch_sizes": list(batch_sizes),
                      "pads": bool(cost.pads_verification)}
    xs, accs, kvs, caps, chooser = [], [], [], [], None
    walked = 0  # the steps of one walk of every record: what the policy learned from (the rounds walk them again)
    for _ in range(ROUNDS):
        more = collect(records, methods, depths, rng, chooser)
        walked = walked or len(more[0])
        xs, accs, kvs, caps = xs + more[0], accs + more[1], kvs + more[2], caps + more[3]
        if not xs:
            raise SpecscopeError(f"policy fit: no step to learn from in {len(records)} records (a step decodes "
                                 "after the first output token; every output here, cut to the positions its "
                                 f"acc_len arrays of {', '.join(methods)} cover, is one token or shorter)")
        x, acc = np.asarray(xs), np.asarray(accs)
        offers = x[:, list(feature_names(methods)).index("ngram_offer")].astype(np.int64)
        cap = np.asarray(caps)  # [N] the depth each step's dataset tells
        limits = np.array([np.minimum(offers, cap) if m == "ngram" else cap for m in methods]).T
        document.update(fit_acceptance(x, acc, limits, depth, rng))
        kv = float(np.median(kvs))
        document["models"] = []
        for b in batch_sizes:
            seconds, fixed, verify = step_seconds(cost, methods, depth, kv, b)
            if not np.all(seconds + fixed <= MAX_STEP_S):  # NaN too: a policy file holds none of them
                raise SpecscopeError(f"policy fit: cost model {cost.name!r} prices a step at batch size {b} at "
                                     f"{np.nanmax(seconds + fixed):.4g} s, beyond the {MAX_STEP_S:g} s a policy "
                                     "file holds: check its coefficients")
            document["models"].append({"batch_size": b, "seconds": seconds.tolist(), "fixed": fixed.tolist(),
                                       "verify": verify.tolist()})
        chooser = choosers_from_json(document, methods)[batch_sizes[0]]
    unweighed = choose_confidence(records, methods, document, cost, depths, rng)
    if unweighed and notes is not None and unweighed not in notes:
        notes.append(unweighed)
    datasets = by_dataset(on_common_positions(records, methods))
    if gate not in GATE_KEPT:
        raise SpecscopeError(f"policy fit: gate {gate!r}: expected one of {', '.join(GATE_KEPT)}")
    alone = ("no admission gate for a policy fitted on one dataset: nothing tells how a gate carries to another "
             "workload (fit on two or more to weigh one, or keep it in sample: --gate fitted)")
    if gate == CARRIED and len(datasets) < 2 and notes is not None and alone not in notes:
        notes.append(alone)
    gates = fit_gates(datasets, {b: walked_sample(datasets, b, rng) for b in batch_sizes},
                      LearnedPolicy("fit", methods, choosers_from_json(document, methods), document), cost, depths,
                      gate)
    for model in document["models"]:
        kept = gates[model["batch_size"]]
        model["gate"] = None if kept is None else kept.to_json()
    document["training"] = {"sources": list(sources), "requests": len(records), "steps": walked, "median_kv": kv,
                            "seconds": round(time.perf_counter() - started, 1), "seed": seed,
                            "cost_model": cost_label or cost.name, "made_by": code_version(), "gate": gate}
    if checkpoints is not None:
        document["training"]["checkpoints"] = list(checkpoints)
    return document


def walked_sample(datasets: dict[str, list[TraceRecord]], batch_size: int,
                  rng: np.random.Generator) -> dict[str, list[TraceRecord]]:
    """The requests of each dataset a fit's mixed-mode walks at ``batch_size`` read: at most
    :data:`CONFIDENCE_REQUESTS` or twice the batch size (enough to fill B rows and drain them),
    drawn with ``rng``, in their order."""
    size = max(CONFIDENCE_REQUESTS, 2 * batch_size)
    return {name: group if len(group) <= size else [group[i] for i in sorted(rng.choice(len(group), size, replace=False))]
            for name, group in datasets.items()}


def choose_confidence(records: Sequence[TraceRecord], methods: tuple[str, ...], document: dict, cost: CostModel,
                      depths: dict[str, int], rng: np.random.Generator) -> str | None:
    """Set each model's ``confidence`` in ``document`` (see the module docstring), the smallest batch
    size first: the p of :data:`CONFIDENCE_GRID`, or none (first among equals), whose walk of every
    training dataset (at most :data:`CONFIDENCE_REQUESTS` of its requests or twice the batch size,
    drawn with ``rng``; each within its own depth, ``depths``) in mixed mode at that batch size has
    the greatest summed log
    throughput — its iterations of fewer rows deciding by their own rule's p, as the policy will.
    Left none where a model drafter among ``methods`` keeps ``draft_prob`` shallower than a
    dataset's walk in some record (n-gram alone: nothing to stop); where some record keeps it,
    but too shallow, returns why, naming the shallowest."""
    drafters = [m for m in methods if method_named(m).kind != "lookup"]
    datasets = by_dataset(on_common_positions(records, methods))
    for model in document["models"]:
        model["confidence"] = None
    kept = {(name, m): min(0 if r.proposers[m].draft_prob is None else r.proposers[m].draft_prob.shape[1]
                           for r in group) for name, group in datasets.items() for m in drafters}
    short = {key: drafts for key, drafts in kept.items() if drafts < depths[key[0]]}
    if short and any(kept.values()):  # some records keep a drafter's probabilities, too shallow
        (name, m), drafts = min(short.items(), key=lambda item: item[1])
        if drafts == 0:
            return (f"no confidence rule weighed: {m}'s draft_prob is missing from some records of dataset {name!r}; "
                    f"trace them with --draft-probs {depths[name]}")
        return (f"no confidence rule weighed: {m}'s draft_prob is kept {drafts} drafts deep in some records of dataset "
                f"{name!r}, which the policy walks to k = {depths[name]}; fit with --max-k {drafts}, or trace with "
                f"--draft-probs {depths[name]}")
    if not drafters or short:
        return None
    policy = LearnedPolicy("fit", methods, choosers_from_json(document, methods), document)
    drafting = SwitchDrafting.of(cost, methods, causal=True)
    chosen: dict[int, float | None] = {}
    for model in sorted(document["models"], key=lambda m: m["batch_size"]):
        b = model["batch_size"]
        walked = walked_sample(datasets, b, rng)

        def score(p: float | None) -> float:
            def stop(count: int) -> float | None:  # this batch size's rule weighs p; a smaller one's, its own
                rule = policy.chooser(count).batch_size
                return p if rule == b else chosen.get(rule)

            return sum(math.log(predict_mixed(causal_plan(group, methods, policy.decide_for, depths[name], b,
                                                          together=True, confidence_for=stop),
                                              cost, drafting, b).throughput)
                       for name, group in walked.items())

        scores = {p: score(p) for p in (None, *CONFIDENCE_GRID)}
        model["confidence"] = chosen[b] = max(scores, key=scores.get)
