"""`specscope overlap`: prompt/output BLEU-4 and n-gram's relative speedup over EAGLE per BLEU bin."""

from __future__ import annotations

import argparse
import math

from specscope.analysis.overlap import OverlapConfig
from specscope.cli._common import (
    add_table_output,
    add_trace_options,
    human_stream,
    read_trace_args,
    trace_provenance,
    batch_size_list,
    print_table,
    str_list,
    to_stdout,
    write_rows,
)
from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.errors import SpecscopeError
from specscope.sim.checks import check_k
from specscope.sim.grid import SimConfig, no_match_notes
from specscope.sim.policies import parse_policy

DEFAULTS = OverlapConfig()
SIM = SimConfig()


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "overlap", help="BLEU-4 prompt vs output, and n-gram's speedup over EAGLE per BLEU bin",
        description="BLEU-4 of each output against its prompt (sacrebleu, on token ids); then per "
                    "dataset × BLEU bin × batch size, the simulated speedup of the lookup proposer "
                    "relative to the reference proposer, with the number of requests per bin.",
    )
    add_trace_options(parser)
    parser.add_argument("--lookup", default=DEFAULTS.lookup, help=f"lookup proposer (default {DEFAULTS.lookup})")
    parser.add_argument("--lookup-policies", type=str_list, default=list(DEFAULTS.lookup_policies),
                        help=f"its policies (default {','.join(DEFAULTS.lookup_policies)})")
    parser.add_argument("--reference", default=DEFAULTS.reference,
                        help="reference proposer (default, per dataset: the model proposer other than --lookup "
                             "whose oracle emits the most tokens per step, among those the cost model prices that "
                             "every record holds, as a bare oracle-combined pairs it with n-gram)")
    parser.add_argument("--reference-policy", default=DEFAULTS.reference_policy,
                        help=f"its policy (default {DEFAULTS.reference_policy})")
    parser.add_argument("--batch-sizes", type=batch_size_list, default=list(SIM.batch_sizes))
    parser.add_argument("--cost-model", default=DEFAULT_COST_MODEL,
                        help="preset, roofline:GPU:MODEL[:DRAFT], or a JSON/TOML file")
    parser.add_argument("--mode", choices=("paper", "mixed"), default=OverlapConfig.mode,
                        help="simulator mode (default paper, unlike simulate and report: a BLEU bin holds a few "
                             "requests, and paper mode replays each as B copies of itself, so every bin fills every "
                             "batch size; mixed runs a bin's distinct requests together)")
    add_table_output(parser, "the bin × batch size rows")
    add_table_output(parser, "each request's BLEU-4", "--bleu-output")
    parser.set_defaults(run=run)


def _holding_both(records: list, lookup: str, references: dict[str, str], out) -> list:
    """The records that hold the lookup's trace and their dataset's reference's (``references``);
    the others left out, said in a note; none is an error."""
    def reference(r) -> str:
        return references[r.dataset or "trace"]

    held = [r for r in records if lookup in r.proposers and reference(r) in r.proposers]
    named = " or ".join(dict.fromkeys(references.values()))
    if not held:
        present = sorted({name for r in records for name in r.proposers})
        raise SpecscopeError(f"--lookup {lookup} --reference {named}: no record holds both traces (the traces "
                             f"hold {', '.join(present)})")
    if len(held) < len(records):
        print(f"note: {len(records) - len(held)} of {len(records)} records left out: they hold no {lookup} or no "
              f"{named} trace", file=out)
    return held


def run(args: argparse.Namespace) -> int:
    from specscope.analysis.overlap import bleu_scores, default_references, overlap_by_reference, request_bleu
    from specscope.trace.schema import by_dataset
    from specscope.costmodel.registry import cost_label, priced, resolve_cost_model

    if args.lookup == args.reference:  # n-gram's speedup over itself: 1 in every bin, a comparison of nothing
        raise SpecscopeError(f"--reference {args.reference}: the same proposer as --lookup; name another to compare "
                             "with")
    out = human_stream(args.output, args.bleu_output)
    cost = resolve_cost_model(args.cost_model)
    records = read_trace_args(args)
    if not any(args.lookup in r.proposers for r in records):  # nothing to set against anything
        raise SpecscopeError(f"--lookup {args.lookup}: no record holds it (the traces hold "
                             f"{', '.join(sorted({n for r in records for n in r.proposers}))})")
    if not priced(cost, [args.lookup])[0]:  # its speedup could not be simulated: said before any reference
        raise SpecscopeError(f"--lookup {args.lookup}: cost model {cost_label(args.cost_model, cost)!r} prices no "
                             "drafting of it")
    chosen = default_references(records, args.lookup, cost, args.reference)  # each dataset its own
    several = len(by_dataset(records)) > 1
    if args.reference is None:
        for dataset, (reference, why) in chosen.items():
            print(f"note: --reference not given: {f'dataset {dataset!r}: ' if several else ''}{args.lookup} is set "
                  f"against {reference}, {why}", file=out)
        left = [dataset for dataset in by_dataset(records) if dataset not in chosen]
        if left:
            print(f"note: {', '.join(left)} left out: no model proposer the cost model prices that every record "
                  f"there holds, to set {args.lookup} against", file=out)
            records = [r for r in records if (r.dataset or "trace") in chosen]
    references = {dataset: reference for dataset, (reference, _) in chosen.items()}
    config = OverlapConfig(lookup=args.lookup, lookup_policies=tuple(args.lookup_policies),
                           reference=args.reference, reference_policy=args.reference_policy, mode=args.mode)
    sim = SimConfig(batch_sizes=tuple(args.batch_sizes))  # overlap_speedups sets config.mode
    records = _holding_both(records, args.lookup, references, out)
    scores = bleu_scores(records)
    for option, policies in (("--lookup-policies", args.lookup_policies),
                             ("--reference-policy", [args.reference_policy])):
        for policy in policies:  # a default k deeper than the traces: name the option that sets it
            try:
                parsed = parse_policy(policy)
                if parsed.combined or parsed.switch:
                    raise SpecscopeError(f"{policy} replays several proposers; overlap sets one proposer's policy "
                                         "against another's (fixed:k, adaptive, oracle)")
                for dataset, group in by_dataset(records).items():
                    check_k(group, args.lookup if option == "--lookup-policies" else references[dataset], parsed,
                            dataset)
            except SpecscopeError as error:
                raise SpecscopeError(f"{option}: {error}") from None
    notes = no_match_notes(records, [args.lookup, *dict.fromkeys(references.values())], sim, option=False)
    rows = overlap_by_reference(records, cost, sim, config, references, scores, notes=notes)
    for note in notes:
        print(f"note: {note}", file=out)
    lines: dict[tuple[str, str, int, str], dict[int, float]] = {}
    for row in rows:
        lines.setdefault((row.dataset, row.bin, row.requests, row.policy), {})[row.batch_size] = row.relative_speedup
    against = {dataset: references[dataset] for dataset in by_dataset(records)}
    over = next(iter(against.values())) if len(set(against.values())) == 1 else \
        ", ".join(f"{reference} ({dataset})" for dataset, reference in against.items())
    print_table(
        f"relative speedup of {args.lookup} over {over} {args.reference_policy} "
        f"per BLEU-4 bin ({args.mode} mode, cost model {cost_label(args.cost_model, cost)})",
        ["dataset", "BLEU-4", "requests", "policy", *[f"B={b}" for b in args.batch_sizes]],
        [[d, b, str(n), p, *["–" if math.isnan(v[s]) else f"{round(v[s], 3) or 0.0:+.1%}" for s in args.batch_sizes]]
         for (d, b, n, p), v in lines.items()],
        file=out,
    )
    made = trace_provenance(args) if args.output or args.bleu_output else {}  # the traces hashed only to write
    if args.output:  # the seed and the guess draw the lookup's steps a trace left without draft_len
        settings = {"cost_model": cost_label(args.cost_model, cost), "seed": sim.seed,
                    "guess_no_match": sim.guess_no_match, **made}
        write_rows(args.output, [{**r.flat(), **settings} for r in rows])
        if not to_stdout(args.output):
            print(f"wrote {len(rows)} rows to {args.output}", file=out)
    if args.bleu_output:
        write_rows(args.bleu_output, [{**r.flat(), **made} for r in request_bleu(records, scores, config.edges)])
        if not to_stdout(args.bleu_output):
            print(f"wrote {len(records)} rows to {args.bleu_output}", file=out)
    return 0
