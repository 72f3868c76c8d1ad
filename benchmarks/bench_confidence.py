"""What reading a drafter's confidence, and stopping at it, adds to a chain's drafting on CPU.

A learned policy's decided rows ask the model drafter for its first draft's probability and stop
each row at its first draft below p (``confidence:p``); ``bench --confidence`` stops every row so.
:func:`~specscope.proposers.chain_draft.draft_chain` then reads each pass's draft probabilities
(:func:`~specscope.engine.proposer_api.token_probability`) and counts each row's drafts
(:class:`~specscope.engine.proposer_api.ConfidentDrafts`). This times that bookkeeping alone: the
drafter's forward is left out (its state fed back as it is), its logits one matmul into the bundled
target's vocabulary, so what is timed beyond the plain chain is what the rule costs. Four ways,
alternated round by round in one process, one thread, medians: the plain chain of k, the chain
reading its first draft's probability alone (a switching engine's policy feature, where no row stops
at a p), the chain reading every draft's, the chain stopped at p = 0 (every row drafts its k: the same
passes). Greedy drafting only: a sampled chain's own draws are not timed here.

    python benchmarks/bench_confidence.py [--k 3] [--batch-sizes 1,8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specscope.engine.proposer_api import ProposeInput
from specscope.engine.runner import SamplingParams
from specscope.engine.sampling import BatchSampling
from specscope.proposers.chain_draft import draft_chain

TARGET = Path(__file__).resolve().parent.parent / "src" / "specscope" / "data" / "zoo" / "target" / "config.json"


def timed(request: ProposeInput, state: torch.Tensor, head: torch.Tensor, calls: int) -> float:
    """Median seconds of one :func:`draft_chain` of ``request`` over ``calls`` calls."""
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        draft_chain(request, state, lambda s: s @ head, lambda token, i, s: s)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = json.loads(TARGET.read_text())
    head = torch.randn(config["hidden_size"], config["vocab_size"])  # [h, vocab]
    for batch in map(int, args.batch_sizes.split(",")):
        sampling = BatchSampling([SamplingParams()] * batch, [torch.Generator() for _ in range(batch)],
                                 torch.device("cpu"))

        def request(**rule) -> ProposeInput:
            return ProposeInput(list(range(batch)), torch.zeros(batch, dtype=torch.long),
                                torch.zeros(batch, dtype=torch.long), [[1]] * batch, args.k, sampling, **rule)

        ways = {"plain chain": request(), "first draft read": request(first_confidence=True),
                "every draft read": request(want_confidence=True),
                "stopped at p = 0": request(want_confidence=True, stop_below=0.0)}
        state = torch.randn(batch, config["hidden_size"])
        medians: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, req in ways.items():
                medians[name].append(timed(req, state, head, args.calls))
        plain = statistics.median(medians["plain chain"])
        print(f"B = {batch}, k = {args.k} (logits [{batch}, {config['vocab_size']}], medians of {args.rounds} rounds "
              f"of {args.calls} calls):")
        for name, values in medians.items():
            value = statistics.median(values)
            extra = "" if name == "plain chain" else f"  (+{1e6 * (value - plain):.1f} µs over the plain chain)"
            print(f"  {name:18s} {1e6 * value:8.1f} µs a proposal{extra}")


if __name__ == "__main__":
    main()
