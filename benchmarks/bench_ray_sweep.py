"""Scaling of ``specscope sweep --ray``: a 16-cell sweep on a local Ray instance with 2 CPU
workers against 1 worker (goal: ≥ 1.6× on a 2-core machine with CPU-bound cells).

    python benchmarks/bench_ray_sweep.py [--max-tokens 48] [--num-requests 8]

The cells: the bundled target model served by ``specscope serve --threads 1`` (CPU-bound),
methods none and ngram (k = 2) × batch sizes 1, 2, 4, 8 × two bundled workloads: 8 groups of
2 cells, each group one Ray actor holding one CPU and launching its own server. Each run
starts from an empty output folder; launching servers is part of the work being scaled.
Prints both wall times and their ratio; other load on the machine lowers the ratio.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import ray

from specscope.backends.openai.sweep import run_sweep
from specscope.backends.openai.sweep_config import load_sweep_config, plan_cells
from specscope.distributed.sweep import ray_group_runner

DATA = Path(__file__).resolve().parents[1] / "src" / "specscope" / "data"


def write_config(folder: Path, max_tokens: int, num_requests: int) -> Path:
    path = folder / "sweep.toml"
    path.write_text(
        f'output = "out"\nworkloads = ["{DATA / "workloads" / "chat.jsonl"}", "{DATA / "workloads" / "code.jsonl"}"]\n'
        f'methods = ["none", "ngram"]\nk = [2]\nbatch_sizes = [1, 2, 4, 8]\nmax_tokens = {max_tokens}\n'
        f"ignore_eos = true\nnum_requests = {num_requests}\nlaunch_timeout_s = 300\n"
        f'\n[[engines]]\nname = "ref"\nlaunch = "specscope"\nmodel = "{DATA / "zoo" / "target"}"\n'
        'args = ["--threads", "1"]\n'
    )
    return path


def sweep_seconds(workers: int, max_tokens: int, num_requests: int) -> float:
    """Wall time of the whole sweep on a fresh local Ray instance with ``workers`` CPUs."""
    with tempfile.TemporaryDirectory() as folder:
        config = load_sweep_config(write_config(Path(folder), max_tokens, num_requests))
        assert len(plan_cells(config)) == 16
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        try:
            start = time.perf_counter()
            outcome = run_sweep(config, run_groups=ray_group_runner("local"))
            seconds = time.perf_counter() - start
        finally:
            ray.shutdown()
        if outcome.failed:
            raise SystemExit(f"{outcome.failed} cells failed: {[r['reason'] for r in outcome.rows if r['reason']]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--num-requests", type=int, default=8)  # at least the largest batch size
    args = parser.parse_args()
    one = sweep_seconds(1, args.max_tokens, args.num_requests)
    two = sweep_seconds(2, args.max_tokens, args.num_requests)
    print(f"16-cell sweep: 1 worker {one:.1f} s, 2 workers {two:.1f} s, ratio {one / two:.2f}x (goal >= 1.6x)")


if __name__ == "__main__":
    main()
