"""Paper mode: the method of the paper's simulator (shared/paper/README.md).

"Batch size B" means B identical copies of one request decoding together, so every step of a
request is priced with B× its tokens and cache. Per request: latency = prefill of B·P tokens +
one overhead + Σ over its steps (verify + drafting + overhead); throughput = B·G / latency.
The speedup is mean over requests of SD throughput / mean over requests of no-SD throughput.
"""

from __future__ import annotations

import numpy as np

from specscope.costmodel.base import CostModel, Drafting, StepLoad
from specscope.sim.plan import Plan, passes_read
from specscope.sim.pricing import Prediction, prefill_time, price_steps
from specscope.sim.switching import SwitchDrafting


def predict_paper(plan: Plan, cost: CostModel, drafting: Drafting | SwitchDrafting | None,
                  batch_size: int) -> Prediction:
    """Price ``plan`` at ``batch_size`` replicas of each request."""
    b = float(batch_size)
    request = plan.request_of_step
    steps = len(plan.pos)
    if isinstance(drafting, SwitchDrafting):
        drafting = drafting.bind(plan, lambda weights: b * (np.ones(steps) if weights is None else weights),
                                 lambda values: values, lambda prefilled: b * plan.prompt_len * prefilled)
    load = StepLoad(
        batched_tokens=b * plan.verify_tokens,
        kv_tokens=b * (plan.prompt_len[request] + plan.pos),
        num_running=np.full(steps, b),
        num_proposing=b * (plan.proposed > 0),
        padded_tokens=b * plan.verify_tokens,  # the copies propose alike: nothing to pad
        draft_widths=plan.draft_widths,
        reads_confidence=None if plan.reads_confidence is None else passes_read(plan.reads_confidence, plan.proposed,
                                                                                 lambda values: values),
    )
    priced = price_steps(cost, drafting, load)
    n = len(plan.prompt_len)
    prefill = prefill_time(cost, drafting, b * plan.prompt_len, np.full(len(plan.prompt_len), b),
                           np.ones(len(plan.prompt_len), dtype=bool),  # [R]: each batch of copies starts alone
                           b * plan.prompt_len.astype(float) ** 2)  # b copies of one prompt: nothing to pad
    per_request = {
        "drafting": np.bincount(request, priced.drafting, minlength=n),
        "verification": np.bincount(request, priced.verification, minlength=n),
        "overhead": np.bincount(request, priced.overhead, minlength=n) + cost.overhead_s,  # the prefill's step's too
    }
    latency = prefill + sum(per_request.values())  # [R]
    throughput = b * plan.output_len / latency  # [R]
    split = {"prefill": float(prefill.sum()), **{k: float(v.sum()) for k, v in per_request.items()}}
    return Prediction(
        throughput=float(throughput.mean()),
        steady_throughput=float(throughput.mean()),
        peak_kv_tokens=max(load.peak_cached(), float(b * plan.prompt_len.max(initial=0))),  # a prefill alone too
        latency_per_token=float(np.mean(latency / plan.output_len)),
        time_split=split,
        request_throughput=throughput,
    )
