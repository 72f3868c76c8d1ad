"""Speed of the n-gram tracer: acc_len at every position of a 32k-token output (goal ≤ 1 s).

    python benchmarks/bench_tracer.py [--repeats 5]

Two outputs: a repetitive one (long matches, the worst case for the comparison loop) and a
random one (few matches). Prints the median of repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from specscope.tracing.ngram import ngram_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--length", type=int, default=32_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 32_000, 500).tolist()
    outputs = {
        "repetitive": (rng.integers(0, 32_000, 300).tolist() * (args.length // 300 + 1))[: args.length],
        "random": rng.integers(0, 32_000, args.length).tolist(),
    }
    for name, output in outputs.items():
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            ngram_trace(prompt, output, k_max=20)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(f"{name:10s} output of {args.length} tokens: {median:.3f} s (median of {args.repeats}; "
              f"goal ≤ 1 s: {'met' if median <= 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
