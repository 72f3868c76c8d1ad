"""`specscope sweep`: serving engines × methods × k × batch sizes × workloads, resumable."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specscope.cli._common import print_table
from specscope.distributed.cluster import ray_address
from specscope.errors import SpecscopeError
from specscope.methods import NO_SD


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="benchmark serving engines over a grid of methods, k, batch sizes and workloads",
        description=(
            "Run every cell (engine × method × k or tree × batch size × workload) of CONFIG.toml against "
            "OpenAI-compatible servers, launched (vllm, sglang, specscope) or already running. "
            "Each cell's result is written as soon as it finishes; rerun the same command after an "
            "interruption and only the missing cells run. Failures are recorded per cell with a "
            "reason, and the command then exits with status 1. Results: OUTPUT/results.csv, "
            "results.json, winners.csv. See specscope.backends.openai.sweep_config for the file format."
        ),
    )
    parser.add_argument("config", type=Path, metavar="CONFIG.toml")
    parser.add_argument("--retry-failed", action="store_true", help="also rerun cells recorded as failed")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and their state; run nothing")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--ray", metavar="ADDRESS", type=ray_address,
                        help="run each group of cells sharing a server as a Ray actor on the cluster at ADDRESS "
                             "(local: a Ray instance for this run; auto; HOST:PORT or ray://HOST:PORT); "
                             "this process still writes every result")
    parser.set_defaults(run=run, resumes=True)


def run(args: argparse.Namespace) -> int:
    from specscope.backends.openai.sweep import check_lengths, pending_cells, read_cells, run_sweep
    from specscope.backends.openai.sweep_config import INTERLEAVED_ALL, load_sweep_config, plan_cells

    config = load_sweep_config(args.config)
    if config.baselines != "shared":  # what an interrupt keeps, said then (cli._interrupted)
        args.resumes = ("finished cells are kept; a workload's cells, measured together, are measured again whole"
                        if config.baselines == INTERLEAVED_ALL else
                        "finished cells are kept; a pair with a half missing is measured again whole")
    fixed = [engine.name for engine in config.engines if engine.launch is not None and engine.port is not None]
    if args.ray and fixed:  # two groups on one node would launch there at once, one server answering for both
        raise SpecscopeError(f"{config.path}: engine {fixed[0]!r}: a fixed port with --ray (groups that share a node "
                             "run at once, and one's server would answer the other's cells); leave 'port' out")
    if args.ray and config.baselines == "paired" and any(engine.launch is not None for engine in config.engines):
        raise SpecscopeError(f"{config.path}: baselines = \"paired\" with --ray: a pair's no-SD and SD cells are two "
                             "groups, which Ray runs at once wherever they fit, not one right after the other, so "
                             "each would be measured beside the other; use \"interleaved\" (a pair's two servers up "
                             "together, taking turns) or \"shared\"")
    if args.dry_run:
        if args.ray:
            print("note: --ray: a dry run does not reach the cluster; its resources, and the engines' Ray settings, "
                  "are checked when the sweep runs", file=sys.stderr)
        recorded = read_cells(config.output) if (config.output / "cells").is_dir() else {}
        cells = plan_cells(config)
        pending = pending_cells(config, cells, recorded, args.retry_failed)
        check_lengths(config, pending)  # what the run refuses before any server starts
        again = {id(c) for c in pending}
        rows = [{"cell_id": cid, **c.labels(), "state": _state(recorded.get(cid), id(c) in again)}
                for c, cid in ((c, c.cell_id(config)) for c in cells)]
    else:
        if args.ray:
            from specscope.distributed.sweep import ray_group_runner

            outcome = run_sweep(config, retry_failed=args.retry_failed, run_groups=ray_group_runner(args.ray, config))
        else:
            outcome = run_sweep(config, retry_failed=args.retry_failed)
        rows = outcome.rows
        print(
            f"specscope sweep: {outcome.total} cells, {outcome.skipped} already done, {outcome.ran} run, "
            f"{outcome.failed} failed{'' if not outcome.failed or args.retry_failed else ' (kept as failed: rerun with --retry-failed to measure them again)'}"
            f"; results in {config.output}",
            file=sys.stderr,
        )
    if args.format == "json":
        print(json.dumps(rows, indent=1, default=str))
    else:
        _print_table(rows, args.dry_run)
    crowded = crowded_cells(rows)
    if crowded:
        print(f"note: fewer requests streamed at once than were sent in {', '.join(crowded)}: a server whose "
              "largest batch is smaller queues the rest (vLLM's max_num_seqs), and these cells measured that batch, "
              "not theirs; or its prefills, long beside short outputs, spread them (peak_streaming in results.csv)",
              file=sys.stderr)
    idle = idle_cells(rows)
    if idle:
        print(f"note: SD proposed no draft in {', '.join(idle)} (no n-gram match, or every output ended at its "
              "first token): their speedup measures running SD for nothing", file=sys.stderr)
    return 1 if not args.dry_run and any(r.get("status") == "failed" for r in rows) else 0


def _state(record: dict | None, pending: bool) -> str:
    """A cell's state in a dry run: ``pending``, its recorded status, or that status and
    ``measured again`` where the run will measure it anew (a failed cell with --retry-failed; a
    recorded cell measured together with a pending one)."""
    if record is None:
        return "pending"
    return f"{record['status']}, measured again" if pending else record["status"]


def crowded_cells(rows: list[dict]) -> list[str]:
    """The measured cells in which fewer requests streamed at once than their batch size
    (``peak_streaming``; unknown: not listed)."""
    return [f"{_cell(r)} (at most {r['peak_streaming']})" for r in rows
            if r.get("status") == "ok" and r.get("peak_streaming") is not None and r["peak_streaming"] < r["batch_size"]]


def idle_cells(rows: list[dict]) -> list[str]:
    """The measured SD cells whose server counted no draft (``num_drafts`` 0; unknown: not listed)."""
    return [_cell(r) for r in rows
            if r.get("status") == "ok" and r.get("method") != NO_SD and r.get("num_drafts") == 0]


def _cell(row: dict) -> str:
    """A result row as a note names its cell: ``ngram k=3 B=8``."""
    return f"{row['method']} k={row['k']} B={row['batch_size']}"


def _print_table(rows: list[dict], dry_run: bool) -> None:
    columns = (
        ["engine", "method", "k", "tree", "batch_size", "workload", "state"]
        if dry_run
        else ["engine", "method", "k", "tree", "batch_size", "workload", "status", "throughput", "speedup",
              "acceptance_rate", "mean_acceptance_length", "reason"]
    )
    if any(row.get("baseline_for") for row in rows):  # paired none cells: which SD server each is measured beside
        columns.insert(columns.index("workload") + 1, "baseline_for")
    print_table("sweep cells" + (" (dry run)" if dry_run else ""), columns,
                [[row.get(name) for name in columns] for row in rows])
    learned = [row["cell_id"] for row in rows if row.get("learns_across_requests")]
    if learned:
        print(f"note: {len(learned)} cells have learns_across_requests: their method learns from earlier "
              "requests on a server that was not fresh (a url engine); acceptance and speedup may be inflated")
