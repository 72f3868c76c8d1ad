"""Mixed mode: B distinct requests decode together under continuous batching.

Requests are admitted in order into ``B`` slots; when one finishes, the next waiting request
takes its slot at the next iteration. As in an engine's step (the reference engine's, vLLM's),
an iteration prefills the requests admitted in it — one forward over their prompts with an empty
cache (on an engine that pads, the cost model's ``pads_verification``, over each prompt
right-padded to the longest), which gives each its first output token — and runs one SD step for
every request admitted before it: the verify forward covers each request's k + 1 tokens (1 when
it proposes nothing) with all their cached tokens, drafting is charged per the proposer's model;
one overhead per iteration. A request thus holds its slot for its prefill's iteration and then
its steps. Because a request's steps do not depend on its batch-mates (greedy decoding),
request r runs exactly its plan's ``n_r`` steps in the ``n_r`` iterations after its admission.

Throughput = Σ G / makespan. Per-token latency = mean over requests of (finish − admission) / G.
Steady throughput = tokens emitted / time over the iterations where all B slots decode, each
request's prefill (its share of its iteration's prefill, and of that iteration's overhead where
nothing else ran; its first token) spread evenly over its steps (a one-token output, which takes
no step, counted at the share of the run's steps that were steady): a server under constant load
pays a prefill per request, but a closed run starts with B prefills at once and ends with a drain
in which the few longest requests decode almost alone, which the plain throughput counts and such
a server never sees. (With identical requests it is the whole run's throughput.)
"""

from __future__ import annotations

import heapq

import numpy as np

from specscope.costmodel.base import CostModel, Drafting, StepLoad
from specscope.sim.plan import Plan, passes_read
from specscope.sim.pricing import Prediction, prefill_time, price_steps
from specscope.sim.switching import SwitchDrafting


def admission_iterations(steps_per_request: np.ndarray, batch_size: int) -> np.ndarray:
    """[R] the iteration at which each request is admitted (FIFO into ``batch_size`` slots); a
    request holds its slot for its prefill's iteration and its steps after it (an output of one
    token, the prefill's, takes no step)."""
    free = [0] * min(batch_size, max(len(steps_per_request), 1))
    heapq.heapify(free)
    admit = np.empty(len(steps_per_request), dtype=np.int64)
    for r, n in enumerate(steps_per_request.tolist()):
        start = heapq.heappop(free)
        admit[r] = start
        heapq.heappush(free, start + n + 1)
    return admit


def predict_mixed(plan: Plan, cost: CostModel, drafting: Drafting | SwitchDrafting | None,
                  batch_size: int) -> Prediction:
    """Price ``plan`` with ``batch_size`` slots of continuous batching."""
    n_steps = plan.steps_per_request  # [R]
    admit = admission_iterations(n_steps, batch_size)  # [R]
    request = plan.request_of_step  # [S]
    iteration = admit[request] + 1 + (np.arange(len(plan.pos)) - plan.offsets[request])  # [S]: after its prefill
    horizon = int(max(iteration.max(initial=-1), admit.max(initial=0))) + 1

    def per_iteration(weights: np.ndarray | None, index: np.ndarray = iteration) -> np.ndarray:
        return np.bincount(index, weights, minlength=horizon).astype(float)

    def deepest(values: np.ndarray, index: np.ndarray = iteration) -> np.ndarray:
        out = np.zeros(horizon)
        np.maximum.at(out, index, values)
        return out

    def prompts(prefilled: np.ndarray) -> np.ndarray:  # [R] bool → [T] the prompt tokens their prefills read
        lengths = np.where(prefilled, plan.prompt_len, 0)
        if cost.pads_verification:  # the prompts admitted together, right-padded to the longest
            return per_iteration(prefilled.astype(float), admit) * deepest(lengths, admit)
        return per_iteration(lengths, admit)

    if isinstance(drafting, SwitchDrafting):
        drafting = drafting.bind(plan, per_iteration, deepest, prompts)
    longest = deepest(plan.verify_tokens)  # [T] max (k+1) over running requests
    running = per_iteration(None)
    cached = (plan.prompt_len[request] + plan.pos).astype(float)  # [S] each step's request's cache
    load = StepLoad(
        batched_tokens=per_iteration(plan.verify_tokens),
        kv_tokens=per_iteration(cached),
        num_running=running,
        num_proposing=per_iteration(plan.proposed > 0),
        padded_tokens=running * longest,
        draft_widths=plan.draft_widths,
        longest_cached=deepest(cached),
        reads_confidence=None if plan.reads_confidence is None else passes_read(plan.reads_confidence, plan.proposed,
                                                                                 deepest),
    )
    priced = price_steps(cost, drafting, load)
    admitted = per_iteration(None, admit)  # [T]
    prompt_tokens = prompts(np.ones(len(plan.prompt_len), dtype=bool))
    if cost.pads_verification:
        pairs = admitted * deepest(plan.prompt_len, admit) ** 2
    else:
        pairs = per_iteration(plan.prompt_len.astype(float) ** 2, admit)
    prefill = prefill_time(cost, drafting, prompt_tokens, admitted, running == 0, pairs)  # [T]: idle but for them
    lone = np.where((running == 0) & (admitted > 0), cost.overhead_s, 0.0)  # [T] an iteration that only prefills
    admission = prefill + lone  # [T] what the iteration's admissions cost beyond its steps
    total = admission + priced.total  # [T] (one overhead an iteration)
    ends = np.cumsum(total)
    starts = ends - total
    latency = ends[admit + n_steps] - starts[admit]  # [R]: from its prefill to its last step
    share = admission[admit] / admitted[admit] / np.maximum(n_steps, 1)  # [R] per step of the request
    full = running >= min(batch_size, len(n_steps))  # [T] every slot decoding
    tokens = per_iteration(plan.emitted + 1.0 / n_steps[request])  # [T] its first token spread too
    seconds = priced.total + per_iteration(share[request])  # [T]
    # A one-token output takes no step to spread its prefill over: it counts in the steady state at
    # the share of the run's steps that were steady (all of them at batch 1).
    lone_requests = n_steps == 0  # [R]
    steady_share = float(full[iteration].mean()) if len(iteration) else 0.0
    one_tokens = steady_share * float(lone_requests.sum())
    one_seconds = steady_share * float((admission[admit] / admitted[admit])[lone_requests].sum())
    steady = (tokens[full].sum() + one_tokens) / (seconds[full].sum() + one_seconds) if full.any() else float("nan")
    return Prediction(
        throughput=float(plan.output_len.sum() / ends[-1]),
        steady_throughput=float(steady),
        peak_kv_tokens=load.peak_cached(per_iteration(plan.prompt_len, admit)),  # admitted prompts held too
        latency_per_token=float(np.mean(latency / plan.output_len)),
        time_split={
            "prefill": float(prefill.sum()),
            "drafting": float(priced.drafting.sum()),
            "verification": float(priced.verification.sum()),
            "overhead": float((priced.overhead + lone).sum()),
        },
    )
