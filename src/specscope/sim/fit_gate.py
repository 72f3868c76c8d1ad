"""Fit a learned policy's admission gates (:mod:`specscope.policy.gate`), one per batch size.

A gate fitted on some datasets: at batch size B, each method m's chain is the k of the greatest
gain over the per-step rule on the datasets where that chain gains (:func:`chain_score`), each
walked as a committed request is (the policy's switching engine serving that chain alone) in
mixed mode at B — at most :data:`~specscope.sim.fit.CONFIDENCE_REQUESTS` requests of each dataset
or twice B, log throughput, k searched upward from 1 until two ks in a row fall short of the
best. (Summed over every dataset, the k had been the one that loses least where the chain is
never committed: the study of 2026-12-05 committed code and summary at B = 8 to n-gram k = 1,
simulated 0.94× on code against its k = 3 chain's 1.14×.) Every request
of those datasets is priced in paper mode (B copies of it) under the per-step rule and committed
to each chain: the gate's targets are the log ratios of each chain's tokens per second to the
rule's, each dataset's shifted to the log ratio of its mixed-mode walks (:func:`leveled`), fitted
by one regression tree over every option (scikit-learn's, at most :data:`TREE_DEPTH` deep, at
least :data:`LEAF_REQUESTS` requests a leaf) on the admission features, each leaf bounded, in
each feature its path splits on, by the requests that reached it. (A ridge regression on the
prompt's log length and its square, before 2026-12-06, could not follow gains that are levels of
kinds of prompts: in the study's in-sample fit it put math's prompts, 31–32 tokens, at a 6.4 % loss
for MTP's chain (1.9 % with almost no penalty) where the walks set a 2.5 % gain, between chat's
+3.1 % and code's −23 %, and left them to the per-step rule.)

Kept only where it carries to workloads it did not see (``carried``, the default): the training
datasets, each walked in mixed mode at B with the gate fitted — chains and tree — on the others,
beat their walks without a gate (summed log throughput over the datasets, as the confidence rule
is chosen). With one training dataset nothing tells that, and no batch size has a gate: fitted on
one workload, a gate commits another workload's requests to the first one's chain (fitted on
gsm8k, it committed ShareGPT's requests at B = 64 to EAGLE: 1.36× against n-gram k = 4's 1.82×,
roofline H100). A policy run on the very workloads it was fitted on (``specscope study``) may keep
its gates in sample instead (``fitted``: the training datasets walked with the gate fitted on all
of them must gain), as its per-step rule is fitted in sample.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import numpy as np

from specscope.costmodel.base import CostModel
from specscope.policy.gate import CARRIED, LEAF, NO_GATE, Gate, admission_features
from specscope.policy.learned import LearnedPolicy
from specscope.sim.mixed import predict_mixed
from specscope.sim.paper import predict_paper
from specscope.sim.switching import SwitchDrafting, causal_plan
from specscope.trace.schema import TraceRecord

TREE_DEPTH = 3  # a gate's tree: at most 2 ** 3 kinds of prompts
LEAF_REQUESTS = 8  # ... each of at least this many training requests (a leaf's gains are their mean)
PAST_BEST = 2  # a chain's k search stops this many k past its best so far (throughput rises, then falls, in k)


def best_k(score: Callable[[int], float | tuple[float, ...]], depth: int) -> int:
    """The k in 1 … ``depth`` of the greatest ``score``, searched upward until :data:`PAST_BEST`
    ks in a row fall short of the best so far (the first of equals)."""
    best, best_score = 1, score(1)
    for k in range(2, depth + 1):
        if k > best + PAST_BEST:
            break
        value = score(k)
        if value > best_score:
            best, best_score = k, value
    return best


def chain_score(committed: Sequence[float], decided: Sequence[float]) -> tuple[float, float]:
    """How well a chain of one k serves datasets whose walks' log throughput is ``committed`` with
    every request committed to it and ``decided`` with none: first its gain summed over the
    datasets where it gains (those a gate commits to it), then its log throughput summed over all
    (what tells the ks apart where it gains on none). Compared as a tuple, by :func:`best_k`."""
    return sum(max(c - d, 0.0) for c, d in zip(committed, decided)), sum(committed)


def leveled(gains: np.ndarray, source: np.ndarray, level: dict[str, np.ndarray]) -> np.ndarray:
    """``gains`` [R, O] (paper mode's log ratio of each request's tokens per second committed to
    each option to the per-step rule's; ``source`` [R] its dataset) shifted per dataset so that
    their mean is that dataset's ``level`` [O] (the log ratio of its mixed-mode walks' throughput,
    committed and not). Paper mode tells a dataset's requests apart, each alone with its B copies;
    the mixed-mode walk says what the batch gains, its distinct rows deciding together: at B = 4
    the study of 2026-12-05 had math's requests gain by paper mode under the per-step rule, and
    the rule ran its batches at 1.05× simulated where MTP's chain ran them at 1.26×."""
    out = gains.copy()
    for name, target in level.items():
        rows = source == name
        out[rows] += target - gains[rows].mean(axis=0)
    return out


def fit_gates(datasets: dict[str, list[TraceRecord]], walked: dict[int, dict[str, list[TraceRecord]]],
              policy: LearnedPolicy, cost: CostModel, depths: dict[str, int],
              kept: str = CARRIED) -> dict[int, Gate | None]:
    """The gate per batch size of ``policy`` (None where none pays): fitted on ``datasets``'
    requests (each walked within its own ``depths`` entry), kept or dropped by the walks of
    ``walked[B]`` (the requests of each dataset the mixed-mode walks at B read). ``kept``
    (:data:`~specscope.policy.gate.GATE_KEPT`): ``carried``, each dataset walked with the gate
    fitted without it (none at every batch size where ``datasets`` holds fewer than two: nothing
    then tells how a gate carries to another workload); ``fitted``, every dataset walked with the
    gate fitted on all (for a policy run on the workloads it was fitted on); ``none``, none."""
    from sklearn.tree import DecisionTreeRegressor

    if kept == NO_GATE or (kept == CARRIED and len(datasets) < 2):
        return {b: None for b in policy.choosers}
    methods, drafting = policy.methods, SwitchDrafting.of(cost, policy.methods, causal=True)
    chain_depth = min(depths.values())  # a chain replays on every dataset within its depth
    features = np.asarray([admission_features(r.prompt_token_ids.tolist()) for group in datasets.values()
                           for r in group])  # [R, F]
    source = np.concatenate([[name] * len(group) for name, group in datasets.items()])  # [R] each request's dataset

    def fitted(gains: np.ndarray, options: tuple[tuple[int, int], ...], rows: np.ndarray) -> Gate:
        """The gate of a regression tree of ``gains`` [R, O] on the features of ``rows`` [R] (bool),
        each node bounded, in each feature its path splits on, by the training prompts that reached
        it, and in the others by all of them."""
        x = features[rows]
        model = DecisionTreeRegressor(max_depth=TREE_DEPTH, min_samples_leaf=LEAF_REQUESTS, random_state=0)
        model.fit(x, gains[rows])
        tree, reached = model.tree_, model.decision_path(x).T.tocsr()  # [N, R]: the prompts through each node
        split = tree.children_left != LEAF  # sklearn marks a leaf's feature -2, its children -1
        low, high = np.tile(x.min(axis=0), (tree.node_count, 1)), np.tile(x.max(axis=0), (tree.node_count, 1))  # [N, F]
        on_path = np.zeros((tree.node_count, x.shape[1]), dtype=bool)  # [N, F] the features a node's path splits on
        for node in range(tree.node_count):  # children come after their node
            if split[node]:
                for child in (tree.children_left[node], tree.children_right[node]):
                    on_path[child] = on_path[node]
                    on_path[child, tree.feature[node]] = True
            here = x[reached[node].indices]
            low[node, on_path[node]] = here.min(axis=0)[on_path[node]]
            high[node, on_path[node]] = here.max(axis=0)[on_path[node]]
        return Gate(options, tuple(map(tuple, low.tolist())), tuple(map(tuple, high.tolist())),
                    tuple(np.where(split, tree.feature, LEAF).tolist()), tuple(np.where(split, tree.threshold, 0.0).tolist()),
                    tuple(tree.children_left.tolist()), tuple(tree.children_right.tolist()),
                    tuple(map(tuple, tree.value.reshape(tree.node_count, len(options)).tolist())))

    gates: dict[int, Gate | None] = {}
    for b in sorted(policy.choosers):
        def plan(group: list[TraceRecord], name: str, gate: Gate | None, together: bool):
            return causal_plan(group, methods, policy.decide_for, depths[name], b, together=together,
                               confidence_for=policy.confidence_for, gate=gate)

        def score(gate: Gate | None, names: Sequence[str]) -> float:
            """The summed log throughput of the walks of ``names`` in mixed mode at B under ``gate``."""
            return sum(math.log(predict_mixed(plan(walked[b][n], n, gate, True), cost, drafting, b).throughput)
                       for n in names)

        @functools.cache
        def walk(name: str, option: tuple[int, int] | None) -> float:
            """:func:`score` of dataset ``name`` with every request committed to ``option`` (None: no
            gate), once per option: the chains' k searches of every fold read it."""
            return score(None if option is None else Gate.always(option), [name])

        @functools.cache
        def per_request(option: tuple[int, int] | None) -> np.ndarray:  # [R] paper mode's tokens per second
            gate = None if option is None else Gate.always(option)
            return np.concatenate([predict_paper(plan(group, name, gate, False), cost, drafting, b).request_throughput
                                   for name, group in datasets.items()])

        def gate_of(names: Sequence[str]) -> Gate:
            """The gate fitted on the datasets ``names`` alone: each method's chain k the best over
            their walks, the tree over their requests."""
            options = tuple((m, best_k(lambda k: chain_score([walk(n, (m, k)) for n in names],
                                                             [walk(n, None) for n in names]), chain_depth))
                            for m in range(len(methods)))
            gains = np.log(np.stack([per_request(o) for o in options], axis=1)) - np.log(per_request(None))[:, None]
            level = {n: np.array([walk(n, o) - walk(n, None) for o in options]) for n in names}
            return fitted(leveled(gains, source, level), options, np.isin(source, names))

        gate = gate_of(list(datasets))
        names = list(walked[b])
        judged = sum(score(gate_of([n for n in datasets if n != name]), [name]) for name in datasets) \
            if kept == CARRIED else score(gate, names)
        gates[b] = gate if judged > sum(walk(n, None) for n in names) else None
    return gates
