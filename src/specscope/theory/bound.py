"""The closed-form speedup of SD under i.i.d. acceptance, and its inputs α and c.

If every draft token is accepted independently with probability α (stopping at the first
rejection), a step that proposes k tokens emits on average (1 − α^(k+1)) / (1 − α) tokens and
costs k drafter forwards plus one target forward, i.e. (k·c + 1) target-forward times, where
c = time of one draft forward / time of one target forward. Hence

    E[speedup](α, k, c) = (1 − α^(k+1)) / ((1 − α)(k·c + 1)),   → (k + 1)/(k·c + 1) as α → 1.

It ignores that verifying k + 1 tokens costs more than one (true at small batch, false at
large batch) and any engine overhead: it is an upper bound of the i.i.d. model, not of reality.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specscope import validate
from specscope.costmodel.base import CostModel, StepLoad


def expected_tokens(alpha: float | np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Mean tokens one step emits: Σ_{j=0..k} α^j = (1 − α^(k+1)) / (1 − α), k + 1 at α = 1;
    1 − α^(k+1) taken as −expm1((k+1)·log α), exact near α = 1 too (a closeness test gave k + 1
    for α = 0.99999: 65 where 64.98 is due at k = 64)."""
    alpha = np.asarray(alpha, dtype=float)
    k = np.asarray(k, dtype=float)
    one = alpha == 1.0
    safe = np.where(one | (alpha <= 0.0), 0.5, alpha)  # α = 0: Σ = 1, from the power form below
    ratio = -np.expm1((k + 1.0) * np.log(safe)) / (1.0 - safe)
    return np.where(one, k + 1.0, np.where(alpha <= 0.0, 1.0, ratio))


def expected_speedup(alpha: float | np.ndarray, k: int | np.ndarray, c: float | np.ndarray) -> np.ndarray:
    """E[speedup](α, k, c) = (1 − α^(k+1)) / ((1 − α)(k·c + 1)); 0 where k·c overflows a float."""
    with np.errstate(over="ignore"):  # k·c = ∞: a speedup of 0, as the limit is
        return expected_tokens(alpha, k) / (np.asarray(k, dtype=float) * np.asarray(c, dtype=float) + 1.0)


def optimal_k(alpha: float, c: float | Sequence[float], k_max: int = 20) -> tuple[int, float]:
    """The k in 0..k_max that maximises E[speedup] (k = 0 means no SD: speedup 1); ``c`` one
    ratio for every k, or c(k) for k = 1 … (at least k_max of them: a cost model's drafting is
    rarely linear in k). Of values equal to 1e-9 (a curve flat in floating point), the smallest k."""
    validate.check("alpha", validate.probability, alpha)
    validate.check("k_max", validate.integer, k_max, low=0, high=validate.K_MAX_LIMIT)
    ks = np.arange(0, k_max + 1)
    if np.isscalar(c):
        validate.check("c", validate.number, c, low=0.0)
        per_k = np.full(k_max + 1, float(c))
    else:
        per_k = np.concatenate([[0.0], np.asarray(c, dtype=float)[:k_max]])
        if len(per_k) < k_max + 1 or not np.all(per_k >= 0):
            raise ValueError(f"c: expected {k_max} ratios >= 0 (k = 1 … {k_max})")
    values = expected_speedup(alpha, ks, per_k)
    best = int(np.flatnonzero(values >= values.max() - 1e-9)[0])
    return int(ks[best]), float(values[best])


def estimate_alpha(acc_lens: Sequence[np.ndarray], k_max: int | Sequence[int],
                   draft_lens: Sequence[np.ndarray | None] | None = None) -> float:
    """Maximum-likelihood α from teacher-forced acc_len traces under the i.i.d. model.

    At position i of an array of G a = acc_len − 1 drafts were accepted out of at most
    cap = min(k_max, G − 1 − i, draft_len[i]) (k_max one for all the arrays, or each array's own;
    past the output's end nothing is there to accept; draft_len where the trace records what the
    proposer offered — a position it offered nothing has no draft to judge); under i.i.d.
    acceptance that is a geometric count truncated at cap: min(a, cap) successes (an array a few
    entries longer than its output, as the paper's are, records acceptance past it), plus one
    failure when a < cap. The MLE is α = Σ a / (Σ a + #{a < cap}) — a drafter accepted to the output's end,
    or to the end of its offer, was cut off, not rejected. NaN where no position had a draft to
    accept (every cap 0: outputs of one token, or nothing offered): the traces say nothing of α.
    """
    limits = [k_max] * len(acc_lens) if np.isscalar(k_max) else list(k_max)
    offers = [None] * len(acc_lens) if draft_lens is None else list(draft_lens)
    accepted = np.concatenate([np.asarray(a, dtype=np.int64) - 1 for a in acc_lens])
    caps = []
    for a, limit, offer in zip(acc_lens, limits, offers):
        cap = np.minimum(limit, np.arange(len(a) - 1, -1, -1, dtype=np.int64))  # [G] within k_max and the output
        caps.append(cap if offer is None else np.minimum(cap, np.asarray(offer, dtype=np.int64)))
    caps = np.concatenate(caps)
    accepted = np.minimum(accepted, caps)  # an array past its output (or its offer) judged no draft there
    failures = int(np.count_nonzero(accepted < caps))
    total = int(accepted.sum())
    return total / (total + failures) if total + failures else float("nan")


def estimate_c(cost: CostModel, proposer: str, k: int, batch_size: int, context_len: float) -> float:
    """c from a cost model: a step's drafting time / (k × one plain decode forward).

    The step has ``batch_size`` requests, each with ``context_len`` cached tokens, each
    proposing ``k`` tokens; the plain forward decodes one token per request.
    """
    validate.check("batch_size", validate.integer, batch_size, low=1)
    validate.check("k", validate.integer, k, low=1, high=validate.K_MAX_LIMIT)
    validate.check("context_len", validate.number, context_len, low=0.0)
    b = float(batch_size)
    kv = np.array([b * context_len])
    load = StepLoad(batched_tokens=np.array([b * (k + 1)]), kv_tokens=kv, num_running=np.array([b]),
                    num_proposing=np.array([b]), padded_tokens=np.array([b * (k + 1)]))
    verify = cost.forward_time(load.batched_tokens, kv, load.num_running)
    drafting = cost.drafting_for(proposer).time(load, verify)
    plain = cost.forward_time(np.array([b]), kv, np.array([b]))
    return float(drafting[0] / (max(k, 1) * plain[0]))


def c_by_k(cost: CostModel, proposer: str, k_max: int, batch_size: int, context_len: float) -> np.ndarray:
    """[k_max] :func:`estimate_c` at k = 1 … ``k_max``: the c each k pays (a drafting with a cost
    per step, as EAGLE's in the paper's fit, makes c at k = 1 several times c at k = 10)."""
    return np.array([estimate_c(cost, proposer, k, batch_size, context_len) for k in range(1, k_max + 1)])
