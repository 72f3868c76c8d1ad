"""An engine whose steps cost exactly a linear model, streaming a closed loop of requests: the
chunk timelines a calibration reads, made without a server (the calibration tests and the
catalogue of refused sweep records share it)."""

from __future__ import annotations

from specscope.costmodel.calibrate import CellRun

FORWARD = dict(c_fixed=2e-3, c_tok=1e-4, c_kv=2e-6, c_req=3e-4, c_prompt=6e-5,  # c_prompt: a prefill's position
               c_prompt_fixed=3.5e-3,  # c_prompt_fixed: a prefill forward's own fixed cost (not c_fixed's)
               c_batch=4e-4)  # c_batch: a forward over more than one sequence
DRAFT = dict(c_fixed=5e-4, c_tok=4e-4, c_batched=1e-4)
ADMIT = 1.5e-3  # a request's arrival holds up an idle engine this long (parsing, tokenizing)


def simulated_cell(method: str, k: int, batch: int, requests: int = 12, output: int = 20, prompt: int = 30,
                   pads: bool = False, lengths: list[int] | None = None, prompt_step: int = 10,
                   draft: dict[str, float] = DRAFT) -> CellRun:
    """A closed loop on an engine whose steps cost exactly FORWARD (+ DRAFT): every step emits
    k + 1 tokens per request; a step that admits requests prefills them in a second forward (its
fixed cost c_prompt_fixed), after
    ADMIT when the engine was idle. A request is sent when a slot frees (at the end of the step
    that finished the one before it). Output lengths vary around ``output`` (request i:
    output + 3·(i mod 3)), so requests are admitted while others decode; prompt lengths too
    (prompt + prompt_step·(i mod 4)), so a prefill's positions vary apart from its prompts. ``pads``: the
    engine prefills the prompts it admits together right-padded to the longest (as ``specscope
    serve`` does; the cell says so). ``lengths``: the output lengths instead; ``draft``: the
    drafting's coefficients instead of DRAFT's."""
    w = 1 if method == "none" else k + 1
    lengths = lengths or [output + 3 * (i % 3) for i in range(requests)]
    requests = len(lengths)
    prompts = [prompt + prompt_step * (i % 4) for i in range(requests)]
    slots: list[dict] = []
    waiting = list(range(requests))
    timeline = [{"id": f"r{i}", "sent_ms": 0.0, "prompt_tokens": prompts[i], "output_tokens": lengths[i],
                 "chunk_ms": [], "chunk_tokens": []} for i in range(requests)]
    now = 0.0
    while waiting or slots:
        admitted = []
        while waiting and len(slots) + len(admitted) < batch:
            admitted.append({"r": waiting.pop(0), "done": 0})
        n = len(slots)
        cached = sum(prompts[s["r"]] + s["done"] for s in slots)
        step = 0.0
        if n:
            step += (FORWARD["c_fixed"] + FORWARD["c_tok"] * n * w + FORWARD["c_kv"] * cached + FORWARD["c_req"] * n
                     + FORWARD["c_batch"] * (n > 1))
            if method != "none":
                step += draft["c_fixed"] + draft["c_tok"] * w + draft["c_batched"] * n * w
        if admitted:
            positions = (len(admitted) * max(prompts[s["r"]] for s in admitted) if pads
                         else sum(prompts[s["r"]] for s in admitted))
            step += (FORWARD["c_prompt_fixed"] + FORWARD["c_prompt"] * positions + FORWARD["c_req"] * len(admitted)
                     + FORWARD["c_batch"] * (len(admitted) > 1))
            step += ADMIT if not n else 0.0
        sent, now = now, now + step
        for s in slots:
            emit = min(w, lengths[s["r"]] - s["done"])
            s["done"] += emit
            timeline[s["r"]]["chunk_ms"].append(round(1e3 * now, 4))
            timeline[s["r"]]["chunk_tokens"].append(emit)
        for s in admitted:
            s["done"] = 1
            timeline[s["r"]]["chunk_ms"].append(round(1e3 * now, 4))
            timeline[s["r"]]["chunk_tokens"].append(1)
            timeline[s["r"]]["sent_ms"] = round(1e3 * sent, 4)
        slots = [s for s in slots if s["done"] < lengths[s["r"]]] + admitted  # the finished: replaced next step
    for request in timeline:  # chunk times after the request was sent
        request["chunk_ms"] = [t - request["sent_ms"] for t in request["chunk_ms"]]
    draft_tokens = None if method == "none" else k * sum(len(r["chunk_ms"]) - 1 for r in timeline)
    return CellRun(f"{method}{k}b{batch}", method, k, None, batch, "w.jsonl", 1.0, draft_tokens, timeline, {},
                   pads=pads)
