"""Fit a learned policy's admission gates (:mod:`specscope.policy.gate`), one per batch size.

At batch size B, each method m's chain is the k of the best throughput over the training
datasets (each walked as a committed request is — the policy's switching engine serving that
chain alone — in mixed mode at B, at most :data:`~specscope.sim.fit.CONFIDENCE_REQUESTS` requests of
each dataset or twice B, summed log throughput). Every training request is then priced in paper
mode (B copies of it) under the per-step rule and committed to each chain: the gate's targets
are the log ratios of each chain's tokens per second to the rule's, fitted by a ridge regression
(scikit-learn) on the standardised admission features. The gate is kept only where the training
datasets' walk in mixed mode at B, with it, beats the walk without it (summed log throughput,
as the confidence rule is chosen): otherwise that batch size has none.
"""

from __future__ import annotations

import math
import numpy as np

from specscope.costmodel.base import CostModel
from specscope.policy.gate import Gate, admission_features
from specscope.policy.learned import LearnedPolicy
from specscope.sim.mixed import predict_mixed
from specscope.sim.paper import predict_paper
from specscope.sim.switching import SwitchDrafting, causal_plan
from specscope.trace.schema import TraceRecord

RIDGE_ALPHA = 1.0  # the ridge penalty on the standardised features' weights


def fit_gates(datasets: dict[str, list[TraceRecord]], walked: dict[int, dict[str, list[TraceRecord]]],
              policy: LearnedPolicy, cost: CostModel, depths: dict[str, int]) -> dict[int, Gate | None]:
    """The gate per batch size of ``policy`` (None where none pays): fitted on ``datasets``'
    requests (each walked within its own ``depths`` entry), kept or dropped by the walk of
    ``walked[B]`` (the requests of each dataset the mixed-mode walks at B read)."""
    from sklearn.linear_model import Ridge
    from threadpoolctl import threadpool_limits

    methods, drafting = policy.methods, SwitchDrafting.of(cost, policy.methods, causal=True)
    chain_depth = min(depths.values())  # a chain replays on every dataset within its depth
    features = np.asarray([admission_features(r.prompt_token_ids.tolist()) for group in datasets.values()
                           for r in group])  # [R, F]
    gates: dict[int, Gate | None] = {}
    for b in sorted(policy.choosers):
        def plan(group: list[TraceRecord], name: str, gate: Gate | None, together: bool):
            return causal_plan(group, methods, policy.decide_for, depths[name], b, together=together,
                               confidence_for=policy.confidence_for, gate=gate)

        def score(gate: Gate | None) -> float:  # the training datasets' walk in mixed mode at B
            return sum(math.log(predict_mixed(plan(group, name, gate, True), cost, drafting, b).throughput)
                       for name, group in walked[b].items())

        def per_request(gate: Gate | None) -> np.ndarray:  # [R] paper mode's tokens per second
            return np.concatenate([predict_paper(plan(group, name, gate, False), cost, drafting, b).request_throughput
                                   for name, group in datasets.items()])

        options = tuple((m, max(range(1, chain_depth + 1), key=lambda k: score(Gate.always((m, k)))))
                        for m in range(len(methods)))
        gains = np.log(np.stack([per_request(Gate.always(o)) for o in options], axis=1)) \
            - np.log(per_request(None))[:, None]  # [R, O]
        mean, scale = features.mean(axis=0), features.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        model = Ridge(alpha=RIDGE_ALPHA)
        with threadpool_limits(1):
            model.fit((features - mean) / scale, gains)
        gate = Gate(options, mean, scale, features.min(axis=0), features.max(axis=0),
                    np.atleast_2d(model.coef_), np.atleast_1d(model.intercept_))
        gates[b] = gate if score(gate) > score(None) else None
    return gates

