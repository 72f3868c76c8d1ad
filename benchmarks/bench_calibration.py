"""Calibration of the cost model to a black-box server: a sweep of ``specscope serve`` on
loopback, fitted from outside (chunk timelines, ``costmodel fit --from-sweep``) and from inside
(the same servers' own step records, ``serve --step-records``), side by side.

    python benchmarks/bench_calibration.py [--out DIR] [--device D] [--num-requests N] [--max-tokens N] [--context C]
                                           [--context-by request|segment] [--trees T] [--segments S]
                                           [--replicas R] [--refit]

The cells: the bundled target, ``--threads 1``, on the bundled code-editing workload; methods
ngram, draft and eagle × k ∈ {1, 2, 4} × batch sizes {1, 4, 8} (27 SD cells), the model drafters'
one-level tree of 8 (``--trees 8``, the default: 6 SD cells more) and no SD at each batch size.
Two choices make the terms that a sweep of chains leaves nearly dependent tell apart
(docs/calibration.md, stop 60):

- **the tree of 8**: its drafter runs one pass over one token a row, as a chain of 1 does, and its
  target verifies 9 tokens a row; on a chain both grow together (k passes, k + 1 tokens), so the
  cost of a verified token could trade with a cost per row and with the drafters' cost per row and
  draft, by run-to-run noise (−100 … +292 % against the engine's own records in the runs of
  docs/calibration.md before stop 60; with the tree −11.6 … +2.3 % in stop 60's seven runs);
- **prompts alike within a segment** (``--context 3``, ``--context-by segment``, the defaults): the
  requests of segment s follow each their prompt with the prompts of the (s // R) mod 4 requests
  before it (R: ``--replicas``) (1–4× the usual length, 50–260 tokens), so that at every batch size a step's cached tokens
  vary apart from its rows (with lengths mixed within a segment, ``--context-by request`` — request
  i its own i mod 4, as every run before stop 60 — the longest of 4 or 8 rows, which an engine that
  pads reads, is nearly always the longest length, and the cached token's cost traded with the
  request's: +19.5 and +39.3 % in two runs). The segments' speedups then differ by their prompts,
  and ``measured_se_pct`` (their spread) overstates the noise of a cell.

All the cells take turns over 20 segments of the 200 requests on the servers up at once, one per
method and k or tree serving every batch size (``baselines = "interleaved-all"``): this machine's
speed wanders by ±15 % over seconds and more over minutes, which cells measured at different times
would carry into their speedups and into one another's fit. With ``--replicas R`` every server
runs as R processes taking the segments in turn (``replicas = R``): processes of one engine keep
speeds a few per cent apart for as long as they live, and one ``none`` process's offset enters
every speedup of its workload.
Prints:

- leave-one-out validation (``--validate``): every SD cell predicted from a fit without it,
  from its requests' traces; median and worst |error| (goals: ≤ 5 % and ≤ 10 %), over every cell
  and over the chains and the trees apart (a tree cell held out leaves its drafter's tree term to
  the other two batch sizes: the worst cell of three of stop 60's seven runs), beside the measured
  speedups' own standard errors (``measured_se_pct``: the spread of their segments);
- the coefficients of both fits and their relative differences (goal: within 15 %: met term by
  term in stop 60's three runs of the defaults, 200 requests in 20 segments, 20–21 min each; with
  100 in 10, the drafters' smaller terms missed it by up to 34 % in four runs), beside the
  sweep's own standard error of each (the jackknife over the held-out fits,
  ``SWEEP_DIR/coefficients.csv``: a term the sweep cannot pin down cannot agree by more than
  luck), and each
  part's terms summed at the mean step (the forward; each method's drafting). Inside is the
  same model fitted to the records' whole steps (``costmodel fit --whole-steps``), not the
  phase-by-phase fit of ``costmodel fit`` alone: the work on each step's chunks (the server's
  HTTP threads, the client beside it on this 2-core machine) runs beside whichever phase comes
  first and slows it (over the same minutes, a 16-token verification at batch 8 took 4.2 ms in the
  draft model's servers and 5.7 ms in n-gram's; a server's no-SD step at batch 4 took 1.28–1.38×
  the engine's own alone, three paired runs, while its engine thread held the Python GIL 94 % of
  the 14 % of the time anyone did), so per-phase coefficients differ from any whole-step fit by
  construction.
  A coefficient is compared where it carries at least :data:`MATERIAL` of the mean step in
  either fit (a term worth less is within timer noise and left out, said so in the output).

Then the "what if" of the README: a model fitted from the sub-sweep k ∈ {2, 4}, B ∈ {1, 8}
alone (those cells' files, copied into ``OUT/sweep-small``: the same measurements; no tree among
them, so a tree step's own cost is priced at 0, as the fit's note says) predicts every k, the
trees 2x1x1, 3x2x1x1 and 8 and a learned policy for B = 1 … 64 (``specscope report``), and the
predicted winner is set against the measured one at B = 4, which the small fit never saw
(``OUT/report/whatif.csv``).

Rerunning with the same ``--out`` resumes the sweep and the traces. Run it on an idle machine:
other load stretches some steps and not others.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from specscope.analysis.timesplit import read_steps
from specscope.backends.openai.calibration import terms
from specscope.backends.openai.sweep_config import SweepConfig
from specscope.cli import main as specscope
from specscope.costmodel.calibrate import fit_steps
from specscope.costmodel.linear import LinearCostModel, linear_from_json
from specscope.costmodel.fit import draft_rows
from specscope.costmodel.steps import MeasuredStep
from specscope.workloads.bundled import bundled_records
from specscope.zoo.shipped import model_dir

METHODS = ("ngram", "draft", "eagle")
TREES = "2x1x1,3x2x1x1,8"
SMALL_K, SMALL_B = (2, 4), (1, 8)  # the what-if fit's cells, and the none cells paired with them
MATERIAL = 0.05  # a term compared when it carries this share of the mean step in either fit
BLOCKS, BLOCK_STEPS = 10, 300  # the inside fit's jackknife: runs of this many step records, dealt into this many groups


def write_workload(out: Path, num_requests: int, context: int, segments: int, replicas: int, by_segment: bool) -> Path:
    """The first ``num_requests`` requests of the bundled code-editing workload (``code.jsonl``:
    the traces' dataset is the file's stem, as the sweep's workload); beyond the 100 it ships,
    generated on by its own generator (the first 100 are the shipped ones). With ``context`` c,
    the requests of the sweep's segment s (its ``segments`` consecutive parts) follow each its
    own prompt with the prompts of the (s // ``replicas``) mod (c + 1) requests before it: prompts
    of 1 … c + 1 times the usual length, alike within a segment, so that the cached tokens of a
    step vary apart from the number of requests in it at every batch size (else a cost per cached
    token and one per request trade places), and every process of a server (segment s runs on
    process s mod ``replicas``) serving every length, its own speed not set beside one length. An
    engine that pads reads every row's cache at the longest; with lengths mixed within a segment
    (``by_segment`` false: request i its own i mod (c + 1)) the longest of 4 or 8 rows is nearly
    always the longest length, and only batch 1 moved the cached tokens apart."""
    path = out / "code.jsonl"
    records = bundled_records("code", num_requests)
    prompts = [record["prompt"] for record in records]  # as shipped, before any gets context
    turn = [s // replicas for s in range(segments)
            for _ in range(s * num_requests // segments, (s + 1) * num_requests // segments)]  # as the sweep cuts them
    for i, record in enumerate(records):
        before = [prompts[(i - j) % len(prompts)] for j in range((turn[i] if by_segment else i) % (context + 1), 0, -1)]
        record["prompt"] = "\n\n".join(before + [prompts[i]])
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def write_config(out: Path, workload: Path, max_tokens: int, segments: int, replicas: int, device: str,
                 trees: str) -> Path:
    drafts = ", ".join(f'{m} = "{model_dir(m)}"' for m in METHODS if m != "ngram")
    tree_line = f"trees = {json.dumps(trees.split(','))}\n" if trees else ""  # the model drafters' (n-gram drafts none)
    path = out / "sweep.toml"
    path.write_text(
        f'output = "sweep"\nworkloads = ["{workload}"]\nmethods = ["none", {", ".join(map(json.dumps, METHODS))}]\n'
        f"k = [1, 2, 4]\n{tree_line}batch_sizes = [1, 4, 8]\nmax_tokens = {max_tokens}\nignore_eos = false\n"
        f'baselines = "interleaved-all"\nsegments = {segments}\nreplicas = {replicas}\n'
        "launch_timeout_s = 300\n"
        f'\n[[engines]]\nname = "ref"\nlaunch = "specscope"\nmodel = "{model_dir("target")}"\n'
        f"drafts = {{ {drafts} }}\n"
        f'args = ["--threads", "1", "--device", "{device}", "--step-records", "{out / "steps.jsonl"}"]\n'
    )
    return path


def mean_terms(model: LinearCostModel, steps: list[MeasuredStep]) -> dict[str, float]:
    """Each coefficient's contribution to the mean step of ``steps`` (seconds): the forward's
    terms over the decode steps, each drafting's over its method's steps, and ``c_prompt`` and
    ``c_prompt_fixed`` the prefills' positions and forwards spread over the decode steps, ``c_prompt_kv`` their
    attention's query–key pairs (a drafting's ``c_prefill`` its method's over its method's)."""
    decode = [s for s in steps if s.batch_size > 0 and s.prefill_tokens == 0]
    verified = np.array([s.tokens_verified for s in decode], dtype=float)
    spent = {"c_fixed": model.c_fixed, "c_tok": model.c_tok * verified.mean(),
             "c_kv": model.c_kv * np.mean([s.kv_read for s in decode]),
             "c_req": model.c_req * np.mean([s.batch_size for s in decode]),
             "c_multi": model.c_multi * np.mean(verified > 1),
             "c_batch": model.c_batch * np.mean([s.batch_size > 1 for s in decode]),
             "c_prompt": model.prompt_price * sum(s.prefill_positions for s in steps) / len(decode),
             "c_prompt_fixed": terms(model)["c_prompt_fixed"] * sum(s.prefill_tokens > 0 for s in steps) / len(decode),
             "c_prompt_kv": model.c_prompt_kv * sum(s.prefill_pairs for s in steps) / len(decode)}
    for method, drafting in model.drafting.items():  # per proposed token, as fitted (see coefficient)
        mine = [s for s in decode if s.method == method]
        passes, drafted = (a - 1 for a in draft_rows(mine))  # a chain's k both; a tree's depth, its widths' sum
        rows = np.array([s.decoded for s in mine], dtype=float)
        prompts = sum(s.prefill_positions for s in steps if s.method == method)
        start = drafting.at_no_proposal()
        spent.update({f"{method}.c_fixed": start["c_fixed"], f"{method}.c_tok": drafting.c_tok * passes.mean(),
                      f"{method}.c_req": start["c_req"] * rows.mean(),
                      f"{method}.c_batched": drafting.c_batched * np.mean(rows * drafted),
                      f"{method}.c_prefill": drafting.c_prefill * prompts / len(mine)})
        if any(s.tree for s in mine):
            spent[f"{method}.c_tree"] = drafting.c_tree * np.mean([bool(s.tree) for s in mine])
    return spent


def inside_spread(steps: list[MeasuredStep], names: list[str]) -> dict[str, float]:
    """Each term's standard error in the fit to the step records (``costmodel fit --whole-steps``):
    the delete-a-group jackknife, the records cut into runs of :data:`BLOCK_STEPS` in the order
    the servers wrote them and dealt into :data:`BLOCKS` groups (a group's runs lie minutes apart,
    as the machine's speed wanders). The inside fit is a measurement too: a term it cannot pin
    cannot be agreed with by more than its spread."""
    values = np.array([[coefficient(fit_steps(kept)[0], name) for name in names]
                       for kept in ([s for i, s in enumerate(steps) if (i // BLOCK_STEPS) % BLOCKS != g]
                                    for g in range(BLOCKS))])
    return dict(zip(names, np.sqrt((BLOCKS - 1) / BLOCKS * ((values - values.mean(0)) ** 2).sum(0))))


def coefficient(model: LinearCostModel, name: str) -> float:
    """A term's value as ``coefficients.csv`` gives it (:func:`terms`): a drafting's as fitted, per
    proposed token (its ``c_fixed`` and ``c_req`` at k = 0)."""
    return terms(model).get(name, float("nan"))  # a tree's term, of a fit that priced none: unmeasured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("specscope-calibration"))
    parser.add_argument("--num-requests", type=int, default=200,
                        help="requests per cell (the bundled workload ships 100; more are generated): a cell of 16 "
                             "lasts 0.5-2 s, short enough for this machine's bursts to move its throughput by a "
                             "third; each measured speedup's standard error shrinks as 1/sqrt(requests)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--segments", type=int, default=20,
                        help="turns the cells take over the requests (more: each cell's no-SD "
                             "segment nearer in time to its own; keep requests / segments >= the largest batch)")
    parser.add_argument("--replicas", type=int, default=SweepConfig.replicas,
                        help="processes per server, taking the segments in turn (their speed offsets averaged)")
    parser.add_argument("--device", default="cpu",
                        help="where the servers and the tracer run (cpu, cuda, cuda:N): a GPU is another engine, "
                             "its steps priced by kernel launches more than by arithmetic")
    parser.add_argument("--context", type=int, default=3,
                        help="prompts of 1 … this + 1 times the usual length (earlier requests' prompts before "
                             "each): cached tokens that vary apart from the batch; by segment, it needs --segments "
                             "of at least (this + 1) × --replicas")
    parser.add_argument("--context-by", choices=("request", "segment"), default="segment",
                        help="lengths alike within each segment of the sweep (cached tokens that vary apart from "
                             "the batch at every batch size), or mixed within it (request i its own, as before "
                             "stop 60)")
    parser.add_argument("--trees", default="8",
                        help="token trees swept beside the chains by the model drafters (comma-separated, among "
                             f"the traced {TREES}): a tree's drafter reads fewer tokens a row than its target "
                             "verifies, which a chain's do not, so a verified token's cost is told apart from a "
                             "drafter's per row and draft; empty: chains alone")
    parser.add_argument("--refit", action="store_true",
                        help="fit and compare again the sweep, step records and traces already in --out (this "
                             "code's fits over an earlier run's measurements; nothing is measured, and the options "
                             "that shape a sweep — --context, --context-by, --trees, --segments — are not read)")
    args = parser.parse_args()
    if not args.refit and args.context_by == "segment" and args.segments < (args.context + 1) * args.replicas:
        raise SystemExit(f"--context-by segment: {args.segments} segments over {args.replicas} process(es) a server give "
                         f"fewer than the {args.context + 1} prompt lengths of --context {args.context} to each; give "
                         f"--segments {(args.context + 1) * args.replicas} or more, or --context-by request")
    out = args.out.resolve()
    trace = out / "code.trace.jsonl"
    if args.refit:
        missing = [p.name for p in (out / "sweep", out / "steps.jsonl", trace) if not p.exists()]
        if missing:
            raise SystemExit(f"--refit: {out} has no {', '.join(missing)} (run the benchmark there first)")
    else:
        measure(out, trace, args)
    outside, inside = out / "engine-from-sweep.json", out / "engine-from-steps.json"
    for command in (["costmodel", "fit", "--from-sweep", str(out / "sweep"), "--traces", str(trace), "--validate",
                     "-o", str(outside)],
                    ["costmodel", "fit", str(out / "steps.jsonl"), "--whole-steps", "-o", str(inside)]):
        if specscope(command) != 0:
            raise SystemExit(f"specscope {' '.join(command)} failed")
    with open(out / "sweep" / "calibration.csv") as handle:
        rows = list(csv.DictReader(handle))
    errors = np.array([abs(float(r["error_pct"])) for r in rows])
    noise = [(abs(float(r["error_pct"])), float(r["measured_se_pct"])) for r in rows if r["measured_se_pct"]]
    spread_note = (f"median {np.median([se for _, se in noise]):.1f} %, {sum(e <= 2 * se for e, se in noise)} of "
                   f"{len(noise)} errors within two" if noise else "none measured (a cell of one segment has none)")
    print(f"\nleave-one-out over {len(errors)} SD cells: median |error| {np.median(errors):.1f} % (goal ≤ 5), "
          f"worst {errors.max():.1f} % (goal ≤ 10); the measured speedups' own standard errors (their segments' "
          f"spread): {spread_note}")
    tree = np.array([bool(r["tree"]) for r in rows])  # calibration.csv leaves a chain's tree empty
    print("  " + "; ".join(f"the {len(part)} {what}: median {np.median(part):.1f} %, worst {part.max():.1f} %"
                           for part, what in ((errors[~tree], "chains (methods × k × batch sizes)"),
                                              (errors[tree], "trees")) if len(part)))
    models = [linear_from_json(json.loads(p.read_text()), p.name) for p in (outside, inside)]
    steps = read_steps([out / "steps.jsonl"])
    step_mean = float(np.mean([s.decode_s for s in steps if s.batch_size > 0 and s.prefill_tokens == 0]))
    contributions = [mean_terms(m, steps) for m in models]
    with open(out / "sweep" / "coefficients.csv") as handle:
        spread = {row["term"]: float(row["jackknife_se"] or "nan") for row in csv.DictReader(handle)}  # nan: unseparated
    inside_se = inside_spread(steps, list(contributions[1]))
    print(f"\ncoefficients (a drafting's as fitted, per proposed token: its c_fixed and c_req at k = 0): "
          f"from the sweep (outside, ± its jackknife standard error over the held-out fits) vs "
          f"from the engine's step records, whole steps (inside, ± its jackknife over {BLOCKS} groups of runs of "
          f"{BLOCK_STEPS} records); mean step {1e3 * step_mean:.2f} ms\n"
          f"{'term':<16}{'outside':>12}{'± se':>10}{'inside':>12}{'± se':>10}{'share':>8}{'difference':>12}")
    differences = []
    for name in contributions[1]:
        values = [coefficient(m, name) for m in models]
        share = max(abs(c.get(name, 0.0)) for c in contributions) / step_mean
        if share < MATERIAL:
            verdict = "immaterial"
        else:
            both = np.hypot(spread[name], inside_se[name])
            pinned = values[1] != 0 and max(spread[name], inside_se[name]) <= 0.075 * abs(values[1])
            differences.append((abs(values[0] - values[1]) / abs(values[1]) if values[1] else float("inf"),
                                abs(values[0] - values[1]) <= 2 * spread[name],
                                abs(values[0] - values[1]) <= 2 * both, pinned))
            verdict = f"{100 * (values[0] - values[1]) / abs(values[1]):+.1f} %" if values[1] else "inside 0"
        print(f"{name:<16}{values[0]:>12.3g}{spread[name]:>10.2g}{values[1]:>12.3g}{inside_se[name]:>10.2g}"
              f"{100 * share:>7.1f}%{verdict:>12}")
    pinned = [d for d in differences if d[3]]
    print(f"material coefficients within 15 %: {sum(d[0] <= 0.15 for d in differences)}/{len(differences)}; "
          f"within two of the sweep's own standard errors: {sum(d[1] for d in differences)}/{len(differences)}; "
          f"within two of both fits' standard errors together: {sum(d[2] for d in differences)}/{len(differences)}; "
          f"of the terms both fits pin to 7.5 % (one standard error), within 15 %: "
          f"{sum(d[0] <= 0.15 for d in pinned)}/{len(pinned)}")
    print(f"admit_s (outside only: a request's arrival holding up an idle engine, which step records do not "
          f"see): {1e3 * models[0].admit_s:.2f} ms")
    groups = {"forward": lambda name: "." not in name}
    groups.update({m: (lambda name, m=m: name.startswith(f"{m}.")) for m in models[1].drafting})
    sums = {group: [sum(v for name, v in c.items() if member(name)) for c in contributions]
            for group, member in groups.items()}
    print("at the mean step, each part's terms together (outside vs inside): " + ", ".join(
        f"{group} {1e3 * a:.2f} vs {1e3 * b:.2f} ms ({f'{100 * (a - b) / b:+.1f} %' if b else 'inside 0'})"
        for group, (a, b) in sums.items()))
    whatif(out, trace)


def measure(out: Path, trace: Path, args: argparse.Namespace) -> None:
    """The sweep (its servers writing their step records) into ``out``, and the traces of its workload into ``trace``."""
    out.mkdir(parents=True, exist_ok=True)
    workload = write_workload(out, args.num_requests, args.context, args.segments, args.replicas,
                              args.context_by == "segment")
    config = write_config(out, workload, args.max_tokens, args.segments, args.replicas, args.device, args.trees)
    if specscope(["sweep", str(config), "--retry-failed"]) != 0:
        raise SystemExit("the sweep had failed cells (see its output); rerun to retry them with --retry-failed")
    proposers = ",".join(m if m == "ngram" else f"{m}={model_dir(m)}" for m in METHODS)
    if specscope(["trace", "--model", str(model_dir("target")), "--proposers", proposers, "--workload",
                  str(workload), "--max-tokens", str(args.max_tokens), "--k-max", "8",
                  "--trees", TREES, "--threads", "2", "--device", args.device, "-o", str(trace)]) != 0:
        raise SystemExit("tracing failed")


def whatif(out: Path, trace: Path) -> None:
    """Fit from the small sub-sweep, predict B = 1 … 64, check against the measured B = 4."""
    small = out / "sweep-small" / "cells"
    small.mkdir(parents=True, exist_ok=True)
    for path in sorted((out / "sweep" / "cells").glob("*.json")):
        key = json.loads(path.read_text())["key"]
        if (key["method"] == "none" or key["k"] in SMALL_K and not key.get("tree")) and key["batch_size"] in SMALL_B:
            (small / path.name).write_text(path.read_text())
    model, policy = out / "whatif.json", out / "policy.json"
    for command in (["costmodel", "fit", "--from-sweep", str(small.parent), "-o", str(model)],
                    ["policy", "fit", str(trace), "--acc", "ngram,eagle", "--cost-model", str(model),
                     "--batch-sizes", "1,8,64", "-o", str(policy)],
                    ["report", str(trace), "--cost-model", str(model), "--batch-sizes", "1,2,4,8,16,32,64",
                     "--measured", str(out / "sweep" / "measured.json"), "--policy", str(policy),
                     "--trees", TREES, "-o", str(out / "report")]):
        if specscope(command) != 0:
            raise SystemExit(f"specscope {' '.join(command)} failed")
    with open(out / "report" / "whatif.csv") as handle:
        rows = list(csv.DictReader(handle))
    print("\nwhat if (fit: k ∈ {2, 4}, B ∈ {1, 8}): predicted best per batch size; measured check where measured")
    for row in rows:
        check = "" if not row["measured_best"] else (
            f"  measured best {row['measured_best']} ({float(row['measured_speedup']):.2f}), predicted among "
            f"measured {row['predicted_among_measured']}: "
            f"{ {'True': 'agree', 'False': 'DISAGREE'}.get(row['agree'], 'not checked (its winner not simulated)')}"
            + (f", which measured {float(row['pick_measured_speedup']):.2f} ({float(row['lost_pct']):.1f} % lost)"
               if row["agree"] == "False" else ""))
        print(f"B={row['batch_size']:>3} {'(in fit)' if row['in_fit'] == 'True' else '        '} "
              f"{row['predicted_best']:<22} {float(row['predicted_speedup']):.2f}{check}")


if __name__ == "__main__":
    main()
