"""Speed of the trace-driven simulator on the paper's traces.

Goal: the whole paper-mode grid over both shared datasets × {ngram, eagle, combined}
× their policies × 6 batch sizes in ≤ 3 s, the same grid in mixed mode in ≤ 60 s. Prints the
median of repeats (load included) for each mode, and the grid's size.

    python benchmarks/bench_sim.py [--traces-dir ../shared/paper] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from specscope.costmodel.linear import H100_LLAMA31_8B
from specscope.sim.grid import SimConfig, simulate
from specscope.trace import load_traces

POLICIES = ["fixed:1", "fixed:3", "fixed:5", "oracle", "oracle-combined:ngram+eagle"]
GOALS = {"paper": 3.0, "mixed": 60.0}


def one_run(files: list[Path], mode: str) -> tuple[float, int, int]:
    start = time.perf_counter()
    records, _ = load_traces(files, lengths="own")
    rows = simulate(records, ["ngram", "eagle", "combined"], POLICIES, H100_LLAMA31_8B,
                    SimConfig(mode=mode, combined=("ngram", "eagle")))
    return time.perf_counter() - start, len(rows), sum(r.output_len for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces-dir", default=os.environ.get("SPECSCOPE_PAPER_DIR", "../shared/paper"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = sorted(Path(args.traces_dir).glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no traces in {args.traces_dir}; set --traces-dir or SPECSCOPE_PAPER_DIR")
    one_run(files, "paper")  # warm-up (imports, caches)
    for mode, goal in GOALS.items():
        times = []
        for _ in range(args.repeats):
            seconds, cells, positions = one_run(files, mode)
            times.append(seconds)
        median = statistics.median(times)
        print(f"{mode:5s} mode: {cells} cells over {positions} positions in {median:.2f} s "
              f"(median of {args.repeats}; goal ≤ {goal:.0f} s: {'met' if median <= goal else 'MISSED'})")


if __name__ == "__main__":
    main()
