"""`specscope policy fit`: learn a causal policy choosing proposer and k per step from traces;
`specscope policy explain`: which features a policy file weighs, and example decisions."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np

from specscope import validate
from specscope.cli._common import (
    add_table_output,
    add_trace_options,
    batch_size_list,
    print_table,
    read_trace_args,
    str_list,
    to_stdout,
    write_rows,
)
from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text, check_json_output
from specscope.policy.gate import CARRIED, GATE_KEPT

EXAMPLE_STEPS = 4  # explain: decisions shown along the first record's steps
FEW_JUDGED = 30  # explain: an AUC over fewer first drafts than this is not shown


def add_policy_options(parser: argparse.ArgumentParser, cost_help: str) -> None:
    """The options ``fit`` and ``evaluate`` share: the proposers, the cost model, the batch sizes."""
    parser.add_argument("--acc", type=str_list, default=["ngram", "eagle"],
                        help="proposers the policy chooses between (default: ngram,eagle)")
    parser.add_argument("--cost-model", default=DEFAULT_COST_MODEL, help=cost_help)
    parser.add_argument("--batch-sizes", type=batch_size_list, default=[1, 8, 64],
                        help="one model per batch size (default: 1,8,64)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("policy", help="learn a policy choosing proposer and k per step, evaluate it on held-out datasets, or explain one")
    verbs = parser.add_subparsers(dest="policy_verb", metavar="ACTION", required=True)
    fit = verbs.add_parser(
        "fit", help="fit a causal per-step policy (method and k) to traces under a cost model",
        description="Walk the traces as a causal policy would (over the positions the output and every "
                    "--acc proposer's acc_len cover: a record's longer arrays are cut there), fit per proposer a logistic model of "
                    "each draft token's acceptance from what an engine knows before the step, and price "
                    "every (proposer, k) under the cost model at each batch size; the policy then picks "
                    "the step with the most expected tokens for its time (see specscope.sim.fit and "
                    "specscope.policy.learned). Where the traces keep every model drafter's probability of each "
                    "draft (draft_prob) as deep as the policy proposes, each batch size's rule also gets the "
                    "p (or none) at which a model drafter it takes stops at its first unconfident draft. With "
                    "two or more datasets, each batch size may get an admission gate that commits a request, "
                    "from its prompt, to one method's chain (kept only where the datasets, each walked with "
                    "the gate fitted on the others, gain: specscope.sim.fit_gate). Use the "
                    "file with `simulate --policies learned:FILE`.")
    add_trace_options(fit, choice=False)  # the walk itself keeps to the positions its proposers cover
    add_policy_options(fit, "preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    fit.add_argument("--seed", type=validate.arg(validate.seed), default=0, help="the walk's draws (n-gram's guessed no-match steps)")
    fit.add_argument("--gate", choices=GATE_KEPT, default=CARRIED,
                     help="how each batch size's admission gate is kept: carried (default) where the datasets, each "
                          "walked with the gate fitted on the others, gain (none from one dataset); fitted where the "
                          "datasets gain in sample (a policy run on the workloads it was fitted on); none")
    fit.add_argument("--max-k", type=validate.arg(validate.integer, low=1, high=validate.K_MAX_LIMIT),
                     help="the longest proposal the policy may make (default: the deepest k every dataset's "
                          "traces can replay with each method — their k_max, and no deeper than the most drafts each "
                          "accepted —, at most 20, the most it may be; deeper than some dataset's, each is walked within its own; the "
                          "cost model is not consulted: give the longest k a fitted cost model was measured at, to "
                          "keep its choices off extrapolated drafting costs)")
    fit.add_argument("-o", "--output", required=True, type=check_json_output,
                     help="write the policy (JSON) here (- for standard output)")
    fit.set_defaults(run=run_fit)
    evaluate = verbs.add_parser(
        "evaluate", help="leave one dataset out: fit on the others, judge on it, for every dataset",
        description="For every dataset in the traces and every cost model (--cost-model, then each "
                    "--view), fit a policy on the other datasets under that cost model and simulate the "
                    "held-out one under it: best fixed policy (k in hindsight), adaptive, learned, "
                    "oracles, oracle-switch, oracle-combined, and the gap closed = (learned - best fixed) "
                    "/ (oracle-switch - best fixed), every policy replaying the positions the output and each "
                    "method's acc_len cover (a record's longer arrays are cut there); "
                    "beside it, a policy fitted on every dataset, the held-out "
                    "one included (learned_seen, gap_closed_seen): what not having seen the workload costs; "
                    "and, for a lookup and a model drafter, a yardstick (lookup_known, gap_closed_known): the "
                    "lookup's next step known exactly (it proposes exactly its acc_len - 1 where that reaches a "
                    "threshold), the drafter at one fixed k elsewhere or none, chosen in hindsight — what knowing "
                    "the lookup is worth, the rest of the gap needing the drafter's next step.")
    add_trace_options(evaluate, choice=False)
    add_policy_options(evaluate, "the cost model fitted for and judged by")
    evaluate.add_argument("--view", type=str_list, default=[],
                          help="more cost models, each fitted for and judged by in turn (a policy is fitted "
                               "for the engine it runs on)")
    evaluate.add_argument("--mode", choices=("paper", "mixed"), default="mixed",
                          help="paper: B copies of one request; mixed: B distinct requests, continuously batched")
    evaluate.add_argument("--throughput", choices=("run", "steady"), default="run",
                          help="mixed mode's speedups judged: run, each dataset's requests run once, start to end "
                               "(tokens over the makespan, the batch's fill and drain included); steady, over the "
                               "iterations where every slot decodes (a server under constant load)")
    add_table_output(evaluate, "one line per cost model × dataset × batch size")
    evaluate.set_defaults(run=run_evaluate)
    explain = verbs.add_parser("explain", help="the features a policy weighs most, and example decisions")
    explain.add_argument("policy", help="a policy file made by `specscope policy fit`")
    explain.add_argument("--traces", nargs="+", default=(), metavar="TRACE",
                         help="show the decisions along the first steps of these traces' first record, and how "
                              "well the features tell an accepted first draft from a rejected one (AUC per method)")
    explain.set_defaults(run=run_explain)


def need_scikit_learn() -> None:
    """Fitting or judging a policy needs scikit-learn (the ``policy`` extra): a one-line error without it."""
    import importlib.util

    if importlib.util.find_spec("sklearn") is None:
        raise SpecscopeError("policy: fitting and judging a policy needs scikit-learn: pip install 'specscope[policy]'")


def check_proposers(acc: list[str], count: int | None = None) -> None:
    """``--acc`` as a policy's proposers: known methods, distinct, none of them the traces'
    ``combined`` series, and ``count`` of them where the verb needs that many."""
    from specscope.methods import method as method_named

    if "combined" in acc:
        raise SpecscopeError("--acc: 'combined' is the traces' best-of series, not a proposer a policy can run")
    for name in acc:
        try:
            method_named(name)
        except SpecscopeError as error:
            raise SpecscopeError(f"--acc: {error}") from None
    if len(set(acc)) != len(acc):
        raise SpecscopeError(f"--acc: expected distinct proposer names, got {','.join(acc)}")
    if count is not None and len(acc) != count:
        raise SpecscopeError(f"--acc: expected {count} proposers (the ceiling oracle-switch:A+B chooses between two), "
                             f"got {','.join(acc)}")


def check_prices(option: str, name: str, cost, acc: list[str]) -> None:
    """Refuse a cost model (given as ``option name``) that prices no drafting of a proposer of ``acc``."""
    for proposer in acc:
        try:
            cost.drafting_for(proposer)
        except SpecscopeError as error:
            raise SpecscopeError(f"{option} {name}: {error}") from None


def run_fit(args: argparse.Namespace) -> int:
    from specscope.costmodel.registry import cost_label, resolve_cost_model
    from specscope.methods import method as method_named
    from specscope.costmodel.linear import LinearCostModel
    from specscope.sim.fit import FEW_STEPS, J_MAX, depth_caps, fit_policy
    from specscope.sim.observe import offer_notes
    from specscope.sim.plan import dataset_depths
    from specscope.sim.switching import on_common_positions
    from specscope.tracing.settings import traced_checkpoints
    from specscope.validate import K_MAX_LIMIT

    check_proposers(args.acc)
    if args.max_k is not None and args.max_k > J_MAX:
        raise SpecscopeError(f"--max-k {args.max_k}: a learned policy proposes at most k = {J_MAX}")
    need_scikit_learn()
    cost = resolve_cost_model(args.cost_model)
    check_prices("--cost-model", args.cost_model, cost, args.acc)
    records = read_trace_args(args, walked=args.acc)
    notes: list[str] = []
    document = fit_policy(records, tuple(args.acc), cost, args.batch_sizes, args.seed, args.traces, args.max_k,
                          cost_label=cost_label(args.cost_model, cost), notes=notes,
                          checkpoints=[traced_checkpoints(Path(source))[1] for source in args.traces], gate=args.gate)
    atomic_write_text(args.output, json.dumps(document, indent=1) + "\n")
    depth, training = len(document["intercept"][0]), document["training"]
    for note in [*offer_notes(records), *notes]:
        print(f"note: {note}", file=sys.stderr)
    replayed = on_common_positions(records, args.acc)  # the positions the policy's walks read
    bound, measured, traced = depth_caps(records, args.acc, args.max_k)  # as fit_policy weighed them
    depths = {m: dataset_depths(replayed, [m]) for m in args.acc}  # each method's depth per dataset
    own = {m: min(per.values()) for m, per in depths.items()}
    shallow = min(own, key=own.get)
    if measured < bound:  # the traces' acceptance, not their depth, caps k
        print(f"note: {accepted_note(measured, args.acc)}", file=sys.stderr)
    elif args.max_k is not None and args.max_k > depth:
        print(f"note: --max-k {args.max_k}: the policy proposes at most k = {depth}, the deepest k the deepest "
              f"dataset's traces can replay with each of {', '.join(args.acc)} (their k_max, and no deeper than the "
              "most drafts each accepted there: its acc_len never told what a further draft would give; at most "
              f"{J_MAX})", file=sys.stderr)
    elif args.max_k is None and own[shallow] == depth < min(J_MAX, max(own.values())):
        where = min(depths[shallow], key=depths[shallow].get)
        print(f"note: the policy proposes at most k = {depth} with every method: {shallow}'s traces of dataset "
              f"{where!r} reach no deeper (a policy switching between proposers replays each within the shallowest), where "
              + ", ".join(f"{m}'s reach {own[m]}" if own[m] < K_MAX_LIMIT else
                          f"{m}'s traces bound no k (they declare no k_max and accept none of its drafts)"
                          for m in args.acc if own[m] > depth)
              + "; --max-k K fits deeper, walking each dataset within its own depth", file=sys.stderr)
    elif args.max_k is None and depth < min(J_MAX, max(traced.values())):
        where = min(traced, key=traced.get)
        print(f"note: the policy proposes at most k = {depth}, as deep as the traces of dataset {where!r} reach (the "
              "shallowest: by default a policy replays on every dataset it was fitted on), where "
              + ", ".join(f"{name!r} reaches {reach}" for name, reach in traced.items() if reach > depth)
              + "; --max-k K fits deeper, walking each dataset within its own depth", file=sys.stderr)
    elif depth == J_MAX < min(traced.values()):
        print(f"note: the policy proposes at most k = {J_MAX}, the deepest a learned policy proposes; the traces "
              f"reach k = {min(traced.values())}", file=sys.stderr)
    walked = {name: reach for name, reach in traced.items() if reach < depth}
    if walked:
        print(f"note: the policy proposes up to k = {depth}; "
              + ", ".join(f"dataset {name!r} (k <= {reach})" for name, reach in walked.items())
              + " taught it within its own depth, and cannot replay its deeper proposals (a simulation there is "
              "refused)", file=sys.stderr)
    past = cost.beyond_measured(range(1, depth + 1), args.batch_sizes, args.acc) if isinstance(cost, LinearCostModel) \
        else None
    if past:
        print(f"note: {past}; the policy may propose up to k = {depth} (--max-k keeps it within what was measured)",
              file=sys.stderr)
    drafters = [m for m in args.acc if method_named(m).kind != "lookup"]
    if len(drafters) > 2:
        print(f"specscope: warning: a policy over {len(drafters)} model drafters ({', '.join(drafters)}): each "
              f"iteration of a batch weighs every combination of their depths ({depth + 1}^{len(drafters)} = "
              f"{(depth + 1) ** len(drafters)}), so mixed-mode simulation is slow; the engine runs one model drafter "
              "beside n-gram", file=sys.stderr)
    if training["steps"] < FEW_STEPS:
        print(f"specscope: warning: the policy learned from {training['steps']} steps of {training['requests']} "
              f"requests, too few to weigh {len(document['features'])} features: trace more requests",
              file=sys.stderr)
    if not to_stdout(args.output):
        models = len(document["models"])
        print(f"wrote {args.output}: {models} model{'s' * (models != 1)} ({','.join(map(str, document['batch_sizes']))}) "
              f"over {len(document['features'])} features, from {training['steps']} steps of "
              f"{training['requests']} requests in {training['seconds']} s")
    return 0


def accepted_note(measured: int, acc: list[str]) -> str:
    """Why the policy proposes at most k = ``measured`` (at least 1) where the traces' acceptance
    caps it: no step accepted more drafts (:func:`~specscope.sim.fit.measured_depth`)."""
    what = "any draft" if measured == 0 else f"more than {measured} draft{'s' * (measured != 1)}"
    return (f"the policy proposes at most k = {max(1, measured)}: no step of the traces accepted {what} of "
            f"{' or '.join(acc)}, so they tell nothing of a deeper one, whatever k they were traced at "
            "(--max-k fits no deeper)")


def judgeable(records: list, acc: list[str]) -> list[str]:
    """Refuse a dataset with no step to judge (every output one token or shorter once cut to the
    positions the walks of ``acc`` replay: each policy would read its prefill alone) or whose
    every request another dataset also holds (the same prompt and output: held out, it would be
    judged on what its policy was fitted on); a note for each dataset that shares some of its
    requests so."""
    from specscope.sim.switching import common_length
    from specscope.trace.schema import by_dataset

    datasets = by_dataset(records)
    keys = {name: [(r.prompt_token_ids.tobytes(), r.output_token_ids.tobytes()) for r in group]
            for name, group in datasets.items()}
    notes = []
    for name, group in datasets.items():
        if all(common_length(r, acc) <= 1 for r in group):
            raise SpecscopeError(f"dataset {name!r}: no request decodes past its first token within the positions its "
                                 f"output and the acc_len arrays of {', '.join(acc)} cover: nothing to judge")
        others = {key for other, listed in keys.items() if other != name for key in listed}
        shared = sum(key in others for key in keys[name])
        if shared == len(group):
            raise SpecscopeError(f"dataset {name!r}: every one of its {shared} requests is also in another dataset "
                                 "(same prompt and output): held out, it would be judged on its own training data")
        if shared:
            notes.append(f"dataset {name!r}: {shared} of its {len(group)} requests are also in another dataset (same "
                         "prompt and output): held out, those are judged on data its policy was fitted on")
    return notes


def run_evaluate(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from specscope.costmodel.registry import cost_label, resolve_cost_model
    from specscope.sim.evaluate import leave_one_out
    from specscope.sim.grid import SimConfig, no_match_notes, oversize_notes, sample_notes
    from specscope.sim.observe import offer_notes

    check_proposers(args.acc, count=2)
    if args.throughput == "steady" and args.mode == "paper":
        raise SpecscopeError("--throughput steady: paper mode's B copies of a request run alike from start to end, "
                             "their steady throughput is the run's (steady is mixed mode's: --mode mixed)")
    need_scikit_learn()
    views = [resolve_cost_model(name) for name in (args.cost_model, *args.view)]
    for option, name, cost in zip(("--cost-model", *["--view"] * len(args.view)), (args.cost_model, *args.view), views):
        check_prices(option, name, cost, args.acc)
    prices = [json.dumps({key: value for key, value in cost.describe().items() if key != "name"}, sort_keys=True)
              for cost in views]
    twice = validate.first_repeat(prices)
    if twice is not None:  # one model under two spellings (a preset and its file): judged twice, said as two
        first = prices.index(twice)
        names = (args.cost_model, *args.view)
        raise SpecscopeError(f"--view {names[prices.index(twice, first + 1)]}: prices every step as {names[first]} "
                             "does (it would be judged twice)")
    records = read_trace_args(args, walked=args.acc)
    sizes = collections.Counter(record.dataset or "trace" for record in records)  # requests per dataset
    if len(sizes) < 2:
        raise SpecscopeError(f"leave-one-out needs at least two datasets; the traces hold {len(sizes)}")
    shared = judgeable(records, args.acc)
    if args.mode == "mixed" and min(args.batch_sizes) > max(sizes.values()):
        raise SpecscopeError(f"--batch-sizes: mixed mode runs B distinct requests at once; the largest dataset "
                             f"holds {max(sizes.values())}, fewer than every batch size given")
    config = SimConfig(mode=args.mode, batch_sizes=tuple(args.batch_sizes), oversize="said",
                       combined=tuple(args.acc) if len(args.acc) == 2 else None)
    notes = [*oversize_notes(records, config), *sample_notes(records, config, option=False),
             *no_match_notes(records, args.acc, config, option=False), *offer_notes(records), *shared]
    with tempfile.TemporaryDirectory() as folder:
        table = leave_one_out(records, tuple(args.acc), views, config, Path(folder), notes=notes,
                              labels=[cost_label(name, cost) for name, cost in zip((args.cost_model, *args.view), views)],
                              steady=args.throughput == "steady",
                              on_fold=lambda line: print(f"evaluate: {line}", file=sys.stderr, flush=True))
    if args.output:
        write_rows(args.output, table)
    out = sys.stderr if to_stdout(args.output) else sys.stdout  # stdout holding the table's rows: the rest to stderr
    for note in notes:
        print(f"note: {note}", file=out)
    known = ["lookup_known", "gap_closed_known"] if any("lookup_known" in line for line in table) else []
    columns = ["best_fixed_speedup", "adaptive", "learned", *[f"oracle_{m}" for m in args.acc], "oracle_switch",
               "oracle_combined", "gap_closed", "learned_seen", "gap_closed_seen", *known]
    print_table(f"leave one dataset out ({args.mode} mode): " + ("steady-state " if args.throughput == "steady" else "")
                + "speedups on the held-out dataset (no gap: oracle-switch beats the best "
                "fixed k by less than 1 %; below: oracle-switch is below it"
                + ("; lookup_known: the lookup's next step known exactly, the drafter at one fixed k or none — a "
                   "yardstick, not a ceiling; its rule in the table written with -o" if known else "") + ")",
                ["cost model", "held out", "B", "best fixed", *columns],
                [[line["cost_model"], line["dataset"], str(line["batch_size"]), line["best_fixed"],
                  *[_evaluated(line, c) for c in columns]] for line in table], file=out)
    folds = {line["dataset"]: line["fitted_on"] for line in table}
    print("each held-out dataset's policy was fitted on the others: "
          + "; ".join(f"{held} on {fitted}" for held, fitted in folds.items()), file=out)
    for view in dict.fromkeys(line["cost_model"] for line in table):
        print(_verdict(view + (" (steady state)" if args.throughput == "steady" else ""),
                       [line for line in table if line["cost_model"] == view]), file=out)
    return 0


def _verdict(view: str, lines: list[dict]) -> str:
    """The goal's two figures under one cost model: the cells where the held-out learned policy
    is at or above the best fixed k, and the share of the gap to oracle-switch it closes, pooled
    (Σ (learned − best fixed) / Σ (oracle-switch − best fixed) over the cells that have a gap: a
    mean of per-cell ratios is swayed by one cell whose gap is barely above the guard); then
    what the lookup-known yardstick gains of that gap, pooled, and the learned policy's share of
    the yardstick's gain: which part of the gap needs the model drafter's next step."""
    from specscope.sim.evaluate import MIN_ROOM, ceiling_of

    at = sum(line["learned"] >= line["best_fixed_speedup"] for line in lines)
    gapped = [line for line in lines if not np.isnan(line.get("gap_closed", np.nan))]
    text = f"{view}: learned at or above the best fixed k in {at} of {len(lines)} cells"
    if gapped:
        closed = sum(line["learned"] - line["best_fixed_speedup"] for line in gapped)
        room = sum(ceiling_of(line) - line["best_fixed_speedup"] for line in gapped)
        text += (f"; {100 * closed / room:.1f} % of the gap to oracle-switch closed, pooled over the "
                 f"{len(gapped)} cells that have one (median of the cells' own: "
                 f"{100 * float(np.median([line['gap_closed'] for line in gapped])):.1f} %)")
        known = sum(line.get("lookup_known", np.nan) - line["best_fixed_speedup"] for line in gapped)
        enough = known > MIN_ROOM * sum(line["best_fixed_speedup"] for line in gapped)  # NaN (a cell lacks it): no
        if enough and known < room:
            text += (f". Knowing the lookup's next step exactly (lookup_known: the drafter at one fixed k, or not "
                     f"run) gains {100 * known / room:.1f} % of that gap; the learned policy gains "
                     f"{100 * closed / known:.1f} % of what it gains; the rest of the gap needs the drafter's "
                     "acceptance at each step")
        elif enough:
            text += (f". Knowing the lookup's next step exactly (lookup_known) gains more than oracle-switch "
                     f"({100 * known / room:.1f} % of its gap): here knowing the lookup is worth more than the "
                     "drafter's longer steps, which oracle-switch pays for with the drafter's prefill and catch-up")
    return text


def _evaluated(line: dict, column: str) -> str | None:
    """One cell of the evaluate table: 2 decimals, why (``no gap``, ``below``) for an undefined gap
    closed — against oracle-switch, or for ``gap_closed_known`` against the lookup-known yardstick."""
    from specscope.sim.evaluate import no_gap_reason

    if column not in line:
        return None
    if column == "adaptive":
        return f"{line[column]:.2f} {line['adaptive_acc']}"
    if np.isnan(line[column]):  # the yardstick is never below the best fixed policy: within 1 % of it
        return "no gap" if column == "gap_closed_known" else no_gap_reason(line)
    return f"{line[column]:.2f}"


def run_explain(args: argparse.Namespace) -> int:
    from specscope.methods import method as method_named
    from specscope.policy.chooser import PRIOR_TOKENS
    from specscope.policy.learned import load_policy

    policy = load_policy(args.policy)
    document = policy.document
    traces = read_traces_for(policy, args) if args.traces else None
    training = document["training"]
    sources = ", ".join(map(str, training["sources"])) or "unnamed traces"
    counted = f" ({training['steps']} steps of {training['requests']} requests)" \
        if {"steps", "requests"} <= set(training) else ""
    made = f" by {training['made_by']}" if isinstance(training.get("made_by"), str) else ""
    priced = training.get("cost_model", document["cost_model"]["name"])  # its file too, where fit was given one
    print(f"{policy.label}: fitted for cost model {priced!r} at batch sizes "
          f"{', '.join(map(str, sorted(policy.choosers)))}, on {sources}{counted}{made}; it proposes at most "
          f"k = {policy.depth}")
    names = list(document["features"])
    weights = np.abs(np.asarray(document["coef"], dtype=float))  # [M, F] hazard slopes on standardised features
    order = np.argsort(-weights.sum(axis=0))
    print_table(f"{policy.path}: features by weight (|slope| of each method's hazard model, standardised "
                "features)", ["feature", *policy.methods, "definition"],
                [[names[f], *[f"{weights[m, f]:.2f}" for m in range(len(policy.methods))], document["features"][names[f]]]
                 for f in order[:10]])
    ks = sorted({1, max(1, policy.depth // 2), policy.depth})  # the shortest, a middle and the deepest k
    rates = np.asarray(document["base_rate"], dtype=float)  # [M, J]
    print_table(f"acceptance of draft token j in training: a request's own record shifts its hazards against "
                f"it, weighing half after {PRIOR_TOKENS} tokens judged",
                ["method", *[f"j={k}" for k in ks]], [[m, *[f"{rates[i, k - 1]:.2f}" for k in ks]]
                                                     for i, m in enumerate(policy.methods)])
    drafters = [i for i, m in enumerate(policy.methods) if method_named(m).kind != "lookup"]
    print_table(f"per batch size, priced by {priced!r}: step seconds per row (ms) at the "
                "median kv, and the drafting a batch pays once when a model drafter drafts (ms); a step takes the best "
                "expected tokens per second of its price (alone: the row's and the batch's once-paid part)",
                ["B", "none", *[f"{m} k={'/'.join(map(str, ks))}" for m in policy.methods],
                 *[f"{policy.methods[i]} once" for i in drafters]],
                [[str(m["batch_size"]), f"{1e3 * m['seconds'][0][0]:.2f}",
                  *["/".join(f"{1e3 * row[k]:.2f}" for k in ks) for row in [*m["seconds"], *(m["fixed"][i] for i in drafters)]]]
                 for m in document["models"]])
    stops = {b: chooser.confidence for b, chooser in sorted(policy.choosers.items())}
    if drafters and any(p is not None for p in stops.values()):
        print(f"the drafter's confidence within the step: where a step takes {', '.join(policy.methods[i] for i in drafters)}"
              ", it drafts to its first draft of probability below p (at most k = "
              f"{policy.depth}) in place of the k chosen — "
              + ", ".join(f"B={b}: " + ("the k chosen" if p is None else f"p = {p:g}") for b, p in stops.items()))
    show_gates(policy, traces)
    if traces is not None:
        from specscope.sim.switching import common_length

        stepped = next((r for r in traces if common_length(r, policy.methods) > 1), None)  # a step after the first token
        if stepped is None:
            print("no decisions to show: every record's output is one token (a step decodes after the first)")
        else:
            show_decisions(policy, stepped)
        show_discrimination(policy, traces)
    return 0


def read_traces_for(policy, args: argparse.Namespace) -> list:
    """``args.traces`` read (each proposer's acc_len whole) before anything is printed; an error
    naming the first record that lacks one of the policy's methods."""
    need_scikit_learn()
    args.lengths = "own"
    records = read_trace_args(args)
    for record in records:
        missing = [m for m in policy.methods if m not in record.proposers]
        if missing:
            raise SpecscopeError(f"--traces: record {record.id!r} of dataset {record.dataset!r} has no {missing[0]!r} "
                                 f"trace (the policy chooses between {', '.join(policy.methods)})")
    from specscope.sim.checks import check_k_by_dataset, check_learned_confidence
    from specscope.sim.observe import offer_notes
    from specscope.sim.policies import parse_policy
    from specscope.trace.schema import by_dataset

    walked = parse_policy(f"learned:{policy.path}")
    check_k_by_dataset(records, policy.methods[0], walked)  # its walk goes no deeper
    for dataset, members in by_dataset(records).items():  # its decisions (B copies) and the AUCs' walk (B = 1)
        check_learned_confidence(members, walked, dataset, sorted({1, *policy.choosers}), "paper")
    for note in offer_notes(records):
        print(f"note: {note}", file=sys.stderr)
    return records


def show_discrimination(policy, records: list) -> None:
    """How well the policy's features tell an accepted first draft from a rejected one on
    ``records`` (:func:`~specscope.sim.evaluate.discrimination`)."""
    from specscope.sim.evaluate import discrimination

    rows = discrimination(records, policy)
    print_table("first draft accepted, predicted along the policy's own walk (B = 1) against the traces: "
                f"AUC 0.5 = its features know nothing of the next step, 1 = everything; not shown below {FEW_JUDGED} steps; "
                "beside it, the same steps told by the drafter's own probability of its first draft, known only "
                "once it drafts (the traces' draft_prob, over the steps whose records keep it; - where they keep none)",
                ["method", "steps", "predicted", "observed", "AUC", "drafter's own AUC"],
                [[r["method"], str(r["steps"]), *(_figure(r[c]) for c in ("predicted", "observed")),
                  _figure(r["auc"]) if r["steps"] >= FEW_JUDGED else None, _own_auc(r)] for r in rows])


def _own_auc(row: dict) -> str | None:
    """The drafter's own AUC, with the steps it was told over where records kept fewer than all."""
    if row["confidence_steps"] < FEW_JUDGED or np.isnan(row["confidence_auc"]):
        return None
    told = _figure(row["confidence_auc"])
    return told if row["confidence_steps"] == row["steps"] else f"{told} ({row['confidence_steps']} steps)"


def _figure(value: float) -> str | None:
    """A share or an AUC to 3 decimals; None (shown as -) where there was nothing to measure."""
    return None if np.isnan(value) else f"{value:.3f}"


def show_gates(policy, traces: list | None) -> None:
    """Each batch size's admission gate (:mod:`specscope.policy.gate`): its kinds of prompts (the
    leaves of its tree, each as the range of the training prompts that reached it, outside which a
    request is decided per step), each one's predicted gain per chain and the chain it commits to,
    and, given traces, how many of each dataset's requests it commits to each."""
    from specscope.policy.gate import ADMISSION_FEATURES
    from specscope.trace.schema import by_dataset

    gates = {b: chooser.gate for b, chooser in sorted(policy.choosers.items())}
    kept = {"carried": "kept where the training datasets, each walked with the gate fitted on the others, gained",
            "fitted": "kept where the training datasets gained in sample: for the workloads it was fitted on",
            "none": "none asked for", None: "the file predates admission gates"}[
        policy.document["training"].get("gate")]
    if all(gate is None for gate in gates.values()):
        print(f"admission gate: none at any batch size ({kept}): every request is decided per step")
        return

    def chain(option: tuple[int, int]) -> str:
        return f"{policy.methods[option[0]]} k={option[1]}"

    rows = []
    for b, gate in gates.items():
        if gate is None:
            rows.append([str(b), "none: every request decided per step", "", ""])
            continue
        for leaf in gate.leaves():
            gains = gate.value[leaf]
            best = max(range(len(gains)), key=gains.__getitem__)
            rows.append([str(b), ", ".join(f"{lo:.0f} … {hi:.0f} {name}" if name == "prompt_tokens" else
                                           f"{lo:.3g} … {hi:.3g} {name}" for lo, hi, name in
                                           zip(gate.low[leaf], gate.high[leaf], ADMISSION_FEATURES)),
                         ", ".join(f"{chain(o)} {g:+.3f}" for o, g in zip(gate.options, gains)),
                         chain(gate.options[best]) if gains[best] > 0 else "decided per step"])
    print_table(f"admission gate ({kept}): from its prompt alone (the features {', '.join(ADMISSION_FEATURES)}), a request "
                "reaches one kind of prompt (a leaf of a regression tree, shown by the range of the training prompts that "
                "reached it) that holds each chain's predicted gain g (the log ratio of its tokens per second to the "
                "per-step rule's); it is committed to the chain of the greatest g where that is above 0, else decided per "
                "step; a prompt outside its leaf's range, per step",
                ["B", "prompts", "g per chain", "commits to"], rows)
    if traces is None:
        return
    rows = []
    for dataset, group in by_dataset(traces).items():
        for b, gate in gates.items():
            if gate is not None:
                counts = collections.Counter(gate.commit(r.prompt_token_ids.tolist()) for r in group)
                rows.append([dataset, str(b), str(counts.pop(None, 0)),
                             ", ".join(f"{chain(o)}: {n}" for o, n in sorted(counts.items())) or "-"])
    print_table("requests the gate commits, per dataset of --traces", ["dataset", "B", "decided per step",
                                                                       "committed"], rows)


def show_decisions(policy, record) -> None:
    """The policy's first choices along ``record`` (within its methods' common length, at least 2)
    per batch size, walked as the simulator's paper mode walks it (B copies of the record), the
    drafter's confidence included where the policy stops it at p."""
    from specscope.policy.observation import NONE
    from specscope.sim.switching import causal_plan

    rows = []
    for b in policy.choosers:
        offers, decide = [], policy.decide_for(b)

        def spy(observed, committed=()):
            offers.append(str(observed[0].ngram_offer))
            return decide(observed, committed)

        plan = causal_plan([record], policy.methods, lambda count: spy, policy.depth, b,
                           confidence_for=policy.confidence_for, gate=policy.gate_for(b))
        if plan.committed[0] != NONE:  # a chain from admission: nothing observed, nothing decided
            offers = ["(committed)"] * len(plan.pos)
        for p, offer, m, k, emitted in list(zip(plan.pos.tolist(), offers, plan.method.tolist(), plan.proposed.tolist(),
                                                plan.emitted.tolist()))[:EXAMPLE_STEPS]:
            rows.append([str(b), str(p), str(offer), "none" if m == NONE else policy.methods[m], str(k), str(emitted)])
    print_table(f"decisions along record {record.id!r}", ["B", "pos", "n-gram offer", "method", "k", "emitted"], rows)
