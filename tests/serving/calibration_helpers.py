"""An engine whose steps cost exactly a linear model, streaming a closed loop of requests: the
chunk timelines a calibration reads, made without a server (the calibration tests and the
catalogue of refused sweep records share it)."""

from __future__ import annotations

from specscope.costmodel.calibrate import CellRun
from specscope.trees import TreeShape

FORWARD = dict(c_fixed=2e-3, c_tok=1e-4, c_kv=2e-6, c_req=3e-4, c_prompt=6e-5,  # c_prompt: a prefill's position
               c_prompt_fixed=3.5e-3,  # c_prompt_fixed: a prefill forward's own fixed cost (not c_fixed's)
               c_batch=4e-4)  # c_batch: a forward over more than one sequence
DRAFT = dict(c_fixed=5e-4, c_tok=4e-4, c_batched=1e-4)
ADMIT = 1.5e-3  # a request's arrival holds up an idle engine this long (parsing, tokenizing)


def simulated_cell(method: str, k: int, batch: int, requests: int = 12, output: int = 20, prompt: int = 30,
                   pads: bool = False, lengths: list[int] | None = None, prompt_step: int = 10,
                   draft: dict[str, float] = DRAFT, proposing_every: int = 1, multi: float = 0.0,
                   limit: int | None = None, tree: str | None = None) -> CellRun:
    """A closed loop on an engine whose steps cost exactly FORWARD (+ DRAFT): every step emits
    k + 1 tokens per request; a step that admits requests prefills them in a second forward (its
fixed cost c_prompt_fixed), after
    ADMIT when the engine was idle. A request is sent when a slot frees (at the end of the step
    that finished the one before it). Output lengths vary around ``output`` (request i:
    output + 3·(i mod 3)), so requests are admitted while others decode; prompt lengths too
    (prompt + prompt_step·(i mod 4)), so a prefill's positions vary apart from its prompts. ``pads``: the
    engine prefills the prompts it admits together right-padded to the longest and its attention
    reads every row's cache padded to the longest (as ``specscope serve`` does; the cell says so). ``lengths``: the output lengths instead; ``draft``: the
    drafting's coefficients instead of DRAFT's. ``proposing_every`` p > 1: an n-gram-like drafter
    whose row proposes k only on every p-th of its steps, emitting 2, …, k + 1, 2, … tokens on
    those in turn (1 on the others, whose drafting costs its fixed cost alone), the draft counters
    counting what it proposed and accepted (past the output's end too, as vLLM's); ``multi``: a forward of more than one token (a prefill too) costs this
    more; ``limit``: the engine runs at most this many requests at once (default ``batch``), the
    client's others waiting in its queue for a slot; ``tree``: a static tree instead of a chain
    (k its nodes): a step verifies ``nodes + 1`` tokens a row, its drafter reads Σ pass widths a
    row over ``depth`` passes (``draft``'s ``c_tok`` a pass, ``c_batched`` a row's token read,
    plus its ``c_tree``) and the accepted path emits ``depth + 1``."""
    shape = TreeShape.parse(tree) if tree else None
    k = shape.nodes if shape else k
    w = 1 if method == "none" else k + 1
    passes = shape.depth + 1 if shape else w  # the drafter's passes, plus one
    read = sum(shape.draft_pass_widths) + 1 if shape else w  # the tokens they read a row, plus one
    limit = limit or batch
    lengths = lengths or [output + 3 * (i % 3) for i in range(requests)]
    requests = len(lengths)
    prompts = [prompt + prompt_step * (i % 4) for i in range(requests)]
    slots: list[dict] = []
    waiting = list(range(requests))
    queue: list[int] = []  # sent, not yet admitted
    timeline = [{"id": f"r{i}", "sent_ms": 0.0, "prompt_tokens": prompts[i], "output_tokens": lengths[i],
                 "chunk_ms": [], "chunk_tokens": []} for i in range(requests)]
    now, drafts, accepted = 0.0, 0, 0
    while waiting or queue or slots:
        while waiting and len(slots) + len(queue) < batch:  # the client keeps `batch` requests in flight
            queue.append(waiting.pop(0))
            timeline[queue[-1]]["sent_ms"] = round(1e3 * now, 4)
        admitted = []
        while queue and len(slots) + len(admitted) < limit:
            admitted.append({"r": queue.pop(0), "done": 0, "steps": 0})
        n = len(slots)
        caches = [prompts[s["r"]] + s["done"] for s in slots]
        cached = n * max(caches, default=0) if pads else sum(caches)  # a rectangle's keys: every row at the longest
        proposes = [s["steps"] % proposing_every == 0 for s in slots]
        step = 0.0
        if n:
            verified = n * w if proposing_every == 1 else sum(w if p else 1 for p in proposes)
            step += (FORWARD["c_fixed"] + FORWARD["c_tok"] * verified + FORWARD["c_kv"] * cached
                     + FORWARD["c_req"] * n + FORWARD["c_batch"] * (n > 1) + multi * (verified > 1))
            if method != "none" and proposing_every == 1:
                step += draft["c_fixed"] + draft["c_tok"] * passes + draft["c_batched"] * n * read
                step += draft.get("c_tree", 0.0) if shape else 0.0
            elif method != "none":  # per proposed token, the fit's own form
                step += draft["c_fixed"] + (draft["c_tok"] + draft["c_batched"] * n) * (verified - n) / n
        if admitted:
            positions = (len(admitted) * max(prompts[s["r"]] for s in admitted) if pads
                         else sum(prompts[s["r"]] for s in admitted))
            step += (FORWARD["c_prompt_fixed"] + FORWARD["c_prompt"] * positions + FORWARD["c_req"] * len(admitted)
                     + FORWARD["c_batch"] * (len(admitted) > 1) + multi * (positions > 1))
            step += ADMIT if not n else 0.0
        now += step
        for s, proposed in zip(slots, proposes):
            emit = (shape.depth + 1 if shape else w) if proposing_every == 1 else \
                2 + (s["steps"] // proposing_every) % k if proposed else 1
            accepted += emit - 1 if method != "none" else 0  # those past the output's end too, as vLLM counts
            emit = min(emit, lengths[s["r"]] - s["done"])
            drafts += k * proposed if method != "none" else 0
            s["steps"] += 1
            s["done"] += emit
            timeline[s["r"]]["chunk_ms"].append(round(1e3 * now, 4))
            timeline[s["r"]]["chunk_tokens"].append(emit)
        for s in admitted:
            s["done"] = 1
            timeline[s["r"]]["chunk_ms"].append(round(1e3 * now, 4))
            timeline[s["r"]]["chunk_tokens"].append(1)
        slots = [s for s in slots if s["done"] < lengths[s["r"]]] + admitted  # the finished: replaced next step
    for request in timeline:  # chunk times after the request was sent
        request["chunk_ms"] = [t - request["sent_ms"] for t in request["chunk_ms"]]
    return CellRun(f"{method}{k}b{batch}", method, k, shape, batch, "w.jsonl", 1.0, None if method == "none" else drafts,
                   timeline, {}, pads=pads, num_drafts=None if method == "none" else drafts // max(k, 1),
                   num_accepted_tokens=None if method == "none" else accepted)
