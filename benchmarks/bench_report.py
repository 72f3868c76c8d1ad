"""Time ``specscope report`` over both shared trace files (about 610 requests, 275k positions).

Goal: the full report with the default batch sizes in <= 60 s on the 2-core dev
machine. Runs one warm-up (imports, matplotlib's font cache), then ``--repeats`` timed builds
per mode, and prints the median wall time and CPU time (CPU time shows how much of the wall
time was waiting for a shared machine). Usage:
``python benchmarks/bench_report.py [--paper-dir ../shared/paper] [--repeats 3] [--modes mixed,paper]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from specscope.report.build import build_report
from specscope.report.config import ReportConfig
from specscope.sim.grid import SimConfig

GOAL_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = os.environ.get("SPECSCOPE_PAPER_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "paper"))
    parser.add_argument("--paper-dir", default=default_dir)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="mixed,paper")
    args = parser.parse_args()
    traces = sorted(Path(args.paper_dir).glob("llama3.1-8b_*.jsonl"))
    if not traces:
        raise SystemExit(f"no llama3.1-8b_*.jsonl traces in {args.paper_dir}: set --paper-dir or SPECSCOPE_PAPER_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        build_report(traces, Path(tmp) / "warmup", ReportConfig())
        print(f"report over {', '.join(t.name for t in traces)}; default batch sizes {SimConfig().batch_sizes}")
        for mode in args.modes.split(","):
            walls, cpus = [], []
            for i in range(args.repeats):
                wall, cpu = time.perf_counter(), time.process_time()
                result = build_report(traces, Path(tmp) / f"{mode}{i}", ReportConfig(sim=SimConfig(mode=mode)))
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
            size = result.index.stat().st_size / 1e6
            wall = statistics.median(walls)
            print(f"{mode:>5} mode: median wall {wall:5.1f} s (CPU {statistics.median(cpus):5.1f} s) over "
                  f"{args.repeats} runs; index.html {size:.1f} MB; goal <= {GOAL_S:.0f} s: "
                  f"{'met' if wall <= GOAL_S else 'MISSED'}")


if __name__ == "__main__":
    main()
