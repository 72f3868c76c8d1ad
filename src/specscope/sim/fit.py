"""Fit a learned causal policy (:mod:`specscope.policy.learned`) from traces under a cost model.

Data. Every record is walked as a causal policy would walk it; at each step the observation's
features (:mod:`specscope.policy.observation`) are kept with each method's true acc_len there (the
trace's, which the policy never sees). The walk's actions are those of the oracle-switch with
probability :data:`FOLLOW`, random ones otherwise (so the data holds the states that other
actions lead to); a second round walks with the first model (half its steps) and refits on both.

Model. For every method m and j = 2 … J + 1: scikit-learn's logistic regression of
[acc_len_m ≥ j] on the standardised features. Per batch size B: T_B(m, k), the price of one
step at B copies (paper mode: verify B·(k + 1) tokens over B·kv cached, m's drafting when k > 0,
overhead) at the training steps' median kv, and θ_B from three Dinkelbach rounds over the
training steps (θ ← Σ E[e] / Σ T of the actions chosen with the previous θ, from θ = 0).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from specscope.costmodel.base import CostModel, StepLoad
from specscope.errors import SpecscopeError
from specscope.policy.learned import SCHEMA, Chooser, choosers_from_json, feature_names, features
from specscope.policy.observation import NONE
from specscope.sim.observe import Observer
from specscope.sim.pricing import price_steps
from specscope.sim.switching import common_length
from specscope.trace.schema import TraceRecord

J_MAX = 16  # the longest proposal a learned policy makes
FOLLOW = 0.5  # share of first-round steps that follow the oracle-switch
ROUNDS = 2
MAX_ROWS = 60_000  # training rows per regression (a uniform sample beyond)


def collect(records: Sequence[TraceRecord], methods: tuple[str, ...], k_max: int, rng: np.random.Generator,
            chooser: Chooser | None) -> tuple[list[list[float]], list[list[int]], list[int]]:
    """Walk every record (see the module docstring): features, acc_len per method, and kv
    (prompt + position) of every step."""
    xs, accs, kvs = [], [], []
    for record in records:
        g = common_length(record, methods)
        acc = [record.acc_len(m)[:g].tolist() for m in methods]
        observer = Observer(record, methods, g, k_max)
        p = 1
        while p < g:
            obs = observer.observe(p)
            x = features(obs, methods)
            truth = [a[p - 1] for a in acc]
            xs.append(x)
            accs.append(truth)
            kvs.append(record.prompt_len + p)
            draw = rng.random()
            if chooser is not None and draw < 0.5:
                m, k = chooser.choose(x, obs.ngram_offer)
            elif draw < FOLLOW:
                m = int(np.argmax(truth))
                k = truth[m] - 1
            else:
                m, k = int(rng.integers(len(methods))), int(rng.integers(0, k_max + 1))
            offer = observer.offer(m, p)
            k = k if offer is None else min(k, offer)
            p += observer.step(p, m if k > 0 else NONE, k)
    return xs, accs, kvs


def step_seconds(cost: CostModel, methods: tuple[str, ...], depth: int, kv: float, batch_size: int) -> np.ndarray:
    """[M, depth + 1] seconds of a step of each method proposing k = 0 … depth at ``batch_size``
    copies with ``kv`` cached tokens each (k = 0: no drafting)."""
    b = float(batch_size)
    k = np.arange(depth + 1, dtype=float)
    tokens = b * (k + 1)
    load = StepLoad(batched_tokens=tokens, kv_tokens=np.full_like(k, b * kv), num_running=np.full_like(k, b),
                    num_proposing=b * (k > 0), padded_tokens=tokens)
    rows = []
    for m in methods:
        priced = price_steps(cost, cost.drafting_for(m), load)
        rows.append(priced.verification + priced.overhead + np.where(k > 0, priced.drafting, 0.0))
    return np.stack(rows)


def fit_acceptance(xs: np.ndarray, accs: np.ndarray, depth: int, rng: np.random.Generator) -> dict:
    """mean, scale, coef [M][J][F], intercept [M][J] of P(acc_len_m ≥ j), j = 2 … depth + 1."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    if len(xs) > MAX_ROWS:
        keep = rng.choice(len(xs), MAX_ROWS, replace=False)
        xs, accs = xs[keep], accs[keep]
    mean, scale = xs.mean(axis=0), xs.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    z = (xs - mean) / scale
    coef = np.zeros((accs.shape[1], depth, xs.shape[1]))
    intercept = np.zeros((accs.shape[1], depth))
    for m in range(accs.shape[1]):
        for j in range(depth):
            y = accs[:, m] >= j + 2
            share = y.mean()
            if share in (0.0, 1.0):  # never (always) reached: a constant, clipped off ±∞
                intercept[m, j] = 20.0 if share else -20.0
                continue
            model = LogisticRegression(C=1.0, max_iter=200)
            with threadpool_limits(1):  # BLAS threads on these small matrices only contend
                model.fit(z, y)
            coef[m, j], intercept[m, j] = model.coef_[0], model.intercept_[0]
    return {"mean": mean.tolist(), "scale": scale.tolist(), "coef": coef.tolist(), "intercept": intercept.tolist()}


def fit_theta(chooser: Chooser, xs: np.ndarray, offers: np.ndarray) -> float:
    """θ after three Dinkelbach rounds over the training steps (see the module docstring)."""
    theta, rows = 0.0, np.arange(len(xs))
    offers = np.minimum(offers, chooser.seconds.shape[1] - 1)  # an offer beyond J proposes J
    for _ in range(3):
        rule = Chooser(chooser.weights, chooser.bias, chooser.methods, chooser.seconds, theta, chooser.ngram)
        score = rule.scores(xs, offers)  # [N, M, J + 1]
        flat = score.reshape(len(xs), -1).argmax(axis=1)
        seconds = np.broadcast_to(chooser.seconds, score.shape).reshape(len(xs), -1)[rows, flat]
        gain = score.reshape(len(xs), -1)[rows, flat] + theta * seconds  # E[e] of the chosen action
        theta = float(gain.sum() / seconds.sum())
    return theta


def fit_policy(records: Sequence[TraceRecord], methods: tuple[str, ...], cost: CostModel,
               batch_sizes: Sequence[int], seed: int = 0, sources: Sequence[str] = (),
               max_k: int | None = None) -> dict:
    """The policy file's JSON object (:mod:`specscope.policy.learned`) fitted on ``records``;
    it proposes at most ``max_k`` (default: what the traces recorded, at most :data:`J_MAX`) —
    set it to the longest k the cost model was measured at, so that no choice rests on a
    drafting cost extrapolated past it."""
    for m in methods:
        missing = [r.id for r in records if m not in r.proposers]
        if missing:
            raise SpecscopeError(f"--acc: proposer {m!r} missing from {len(missing)} records (first id {missing[0]!r})")
        cost.drafting_for(m)
    started = time.perf_counter()
    declared = [r.k_max for r in records if r.k_max is not None]
    measured = max(int(r.acc_len(m).max()) for r in records for m in methods) - 1
    depth = max(1, min([J_MAX, measured, *declared, *([max_k] if max_k is not None else [])]))
    rng = np.random.default_rng(seed)
    document: dict = {"schema": SCHEMA, "methods": list(methods), "features": feature_names(methods),
                      "cost_model": cost.describe(), "batch_sizes": list(batch_sizes)}
    xs, accs, kvs, chooser = [], [], [], None
    for _ in range(ROUNDS):
        more = collect(records, methods, depth, rng, chooser)
        xs, accs, kvs = xs + more[0], accs + more[1], kvs + more[2]
        x, acc = np.asarray(xs), np.asarray(accs)
        document.update(fit_acceptance(x, acc, depth, rng))
        kv = float(np.median(kvs))
        document["models"] = [{"batch_size": b, "theta": 0.0, "seconds": step_seconds(cost, methods, depth, kv, b).tolist()}
                              for b in batch_sizes]
        choosers = choosers_from_json(document, methods)
        offers = x[:, list(feature_names(methods)).index("ngram_offer")].astype(np.int64)
        for model in document["models"]:
            model["theta"] = fit_theta(choosers[model["batch_size"]], x, offers)
        chooser = choosers_from_json(document, methods)[batch_sizes[0]]
    document["training"] = {"sources": list(sources), "requests": len(records), "steps": len(xs), "median_kv": kv,
                            "seconds": round(time.perf_counter() - started, 1), "seed": seed}
    return document
