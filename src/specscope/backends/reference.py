"""The reference backend: specscope's own PyTorch engine (:mod:`specscope.engine`).

For each batch size B it runs the workload without SD and with SD on the same target weights,
the two in lockstep by blocks (whichever has emitted fewer tokens steps on until it leads by
:data:`BLOCK_TOKENS`, so drifts of the machine's speed hit both alike), ``repeats`` times, and
reports the repeat with the median speedup as one row: ``method``, ``k``, the ``tree`` (its ``tree``, ``tree_nodes``, ``tree_depth`` when
the SD engine drafts a static tree), ``batch_size``, ``batching``, ``num_requests``,
``generated_tokens``, ``throughput`` and ``baseline_throughput`` (generated tokens per second
of the run's own steps, prefill included), ``speedup`` = their ratio, ``acceptance_rate`` (α),
``mean_acceptance_length`` (τ), vLLM's counters, the SD run's summed time split
(``prefill_s``, ``draft_s``, ``verify_s``, ``sample_s``, ``overhead_s``) and, under greedy
decoding, ``greedy_match`` (SD output == no-SD output for every request) with the number of
``mismatched_requests`` (``None`` when sampling). ``--method none`` runs no-SD only: its rows
have ``speedup`` 1 and no comparison. With ``config.tree`` every SD step drafts and verifies
that tree (:mod:`specscope.engine.tree_step`); its rows count ``tree_nodes`` draft tokens per
request-step. With ``config.policy`` (a learned policy file) the SD engine switches proposer and
k per step and sequence (:mod:`specscope.proposers.switching`); its rows say ``method``
``learned``, ``k`` = the policy's deepest k, and ``policy`` = the file and the methods it chose
between; with ``config.beside_k`` a chain of that k of each of the policy's methods runs in the
same lockstep, each its own row with ``beside`` = the policy, taken from the policy's repeat of
median speedup: every row of a batch size one repeat, against one no-SD run, so that the policy
and the chains compare as measured side by side (each chain's own median repeat, against another
no-SD run, had set the very same computation 7 % apart: code at B = 4, the policy committing every
request to the n-gram chain beside it, 1.42× against 1.53×, at 1880 and 1761 tokens per second).
Each such row also says how the policy and that chain compared in every repeat, paired
(:mod:`specscope.analysis.paired`): ``learned_over_chain`` is the median over the repeats of the
policy's tokens per second over the chain's in the same repeat, ``learned_over_chain_low``/``_high``
the interval that holds the true median with ``learned_over_chain_confidence`` (at least 90 %; for 5
repeats the least and the greatest ratio; ``None`` below 5 repeats), and
``learned_over_chain_verdict`` ``faster``, ``slower`` or ``no difference resolved`` (``too few
repeats`` below 5: the default ``--repeats 3`` gives no verdict). Every row
lists its engine's speedup in each repeat, in order: ``speedup_repeats``.
With ``config.confidence`` p the model drafter ends each row's proposal at its first draft of
probability below p, k at most (``confidence:p:k``, :class:`~specscope.engine.runner.Engine`); its
rows say ``confidence`` = p.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specscope.analysis.paired import Paired
from specscope.backends import BATCHING, BenchConfig, BenchResult, BenchRow, fill_batch_sizes
from specscope.engine.config import check_max_tokens
from specscope.engine.records import SpecDecodeStats, StepRecord
from specscope.engine.runner import Engine, SamplingParams
from specscope.errors import SpecscopeError
from specscope.methods import LEARNED, NO_SD, check_confidence
from specscope.progress import LazyProgress
from specscope.workloads.jsonl import WorkloadRequest, read_workload

if TYPE_CHECKING:
    from specscope.policy.learned import LearnedPolicy

log = logging.getLogger(__name__)
WARMUP_TOKENS = 8


@dataclass
class _Run:
    """One engine's pass over the workload: outputs, tokens generated, seconds (the sum of its
    own steps), its step records and counters."""

    outputs: dict[str, list[int]]
    generated: int
    seconds: float
    records: list[StepRecord]
    stats: SpecDecodeStats


def _steps(
    engine: Engine,
    requests: list[WorkloadRequest],
    batch_size: int,
    config: BenchConfig,
    sampling: SamplingParams,
    outputs: dict[str, list[int]],
) -> Iterator[int]:
    """Decode ``requests`` with at most ``batch_size`` running, one engine step per iteration;
    yields the tokens each step emitted and collects every request's output in ``outputs``."""
    if config.batching == "replicate":
        waves = [[(f"{r.id}#{j}", r.prompt_token_ids) for j in range(batch_size)] for r in requests]
    else:
        waves = [[(r.id, r.prompt_token_ids) for r in requests]]
    for wave in waves:
        for step in engine.decode(wave, config.max_tokens, batch_size, sampling, config.ignore_eos):
            for out in step:
                outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
            yield sum(len(out.new_token_ids) for out in step)


BLOCK_TOKENS = 64  # an engine steps on until it leads the others by this many emitted tokens (see _lockstep)
MIN_TURNS = 4  # a run too short for BLOCK_TOKENS to interleave leads by a share of it: each engine takes this many turns
MIN_TURN_STEPS = 8  # ... but a turn runs at least this many steps' worth of tokens at its batch size


def block_tokens(planned: int, batch_size: int) -> int:
    """The lead an engine's turn runs to over a run of ``planned`` tokens per engine: at most
    :data:`BLOCK_TOKENS`, and at most 1 / :data:`MIN_TURNS` of the run (a run of 8 requests of 32
    tokens ran one engine whole before the other: beside a load that came and went, EAGLE k = 3 at
    batch 1 read 1.03–1.38×, in turns 1.15–1.20×, quiet 1.21–1.29×), at least
    :data:`MIN_TURN_STEPS` one-token steps of every row (a turn of single steps runs on the caches
    the other engine filled: see :func:`_lockstep`)."""
    return max(MIN_TURN_STEPS * batch_size, min(BLOCK_TOKENS, planned // MIN_TURNS))


def _lockstep(
    engines: list[Engine],
    requests: list[WorkloadRequest],
    batch_size: int,
    config: BenchConfig,
    sampling: SamplingParams,
) -> list[_Run]:
    """Run every engine over ``requests`` together, in lockstep by blocks: the engine that has
    emitted the fewest tokens steps next, and keeps stepping until it leads the others by
    :data:`BLOCK_TOKENS` (:func:`block_tokens` for a short run; after the first, a turn spans
    about twice that: it starts as far behind), so the engines stay within a turn of one another
    over the workload and a drift of the machine's speed (seconds-long slowdowns are common on
    shared CPUs) hits them alike. Turns, not single steps: a step right after another engine's runs on caches that engine
    filled — alternating step by step, no-SD at batch 8 ran 15 % slower beside a 3x2x1x1 tree
    than alone (5 % beside EAGLE or MTP k = 3), which raised the measured speedups by 4.7–12.5 %;
    in turns to a 256-token lead each engine ran within 0.6–3.7 % of its speed alone and the
    speedups within 1.4 % of the engines' alone. Turns to 64 tokens (2026-12-06) keep that and
    narrow the spread between repeats: against each engine run alone, nine repeats of the three
    ways interleaved on the bundled target, the 3x2x1x1 tree at code B = 8 read 0.530× (alone
    0.528×, turns to 256 0.529×; each engine within 0.7 % of its speed alone), MTP k = 3 at code
    B = 8 1.183× (alone 1.183×, 256: 1.163×) and at math B = 1 1.464× (alone 1.455×, 256: 1.463×),
    with standard deviations of 0.004, 0.015 and 0.026 (256: 0.007, 0.030, 0.036; alone: 0.008,
    0.065, 0.162; one computation run twice: :func:`paired_details`). A run's seconds are the sum of
    its own steps, and its step records sum to them: what a step's clock did not see (its records and outputs made,
    finished requests released, the decode loop's own work) is added to its ``overhead_s``."""
    for engine in engines:
        engine.reset_stats()
        engine.serve_at(batch_size)  # a policy's gate commits requests by this batch size's rule
    outputs: list[dict[str, list[int]]] = [{} for _ in engines]
    steps = [_steps(e, requests, batch_size, config, sampling, out) for e, out in zip(engines, outputs)]
    emitted, seconds = [0] * len(engines), [0.0] * len(engines)
    copies = batch_size if config.batching == "replicate" else 1
    block = block_tokens(len(requests) * copies * config.max_tokens, batch_size)
    live = list(range(len(engines)))
    firsts = [len(e.step_records) for e in engines]  # records of this run start here
    i = 0
    while live:
        if i not in live or emitted[i] >= min(emitted[j] for j in live) + block:  # its block is done
            i = min(live, key=emitted.__getitem__)
        start, records = engines[i].clock.now(), engines[i].step_records
        before = len(records)
        try:
            emitted[i] += next(steps[i])
        except StopIteration:
            live.remove(i)
        elapsed = engines[i].clock.now() - start
        seconds[i] += elapsed
        if len(records) > firsts[i]:  # the step's own bookkeeping after its clock stopped, the decode loop's, and
            # at the end the loop's last work, with no step of its own, to the run's last step
            records[-1].overhead_s += max(0.0, elapsed - sum(r.seconds for r in records[before:]))
    runs = []
    for engine, out, sec in zip(engines, outputs, seconds):
        runs.append(_Run(out, sum(len(t) for t in out.values()), sec, engine.step_records, engine.stats))
    return runs


def run_bench(config: BenchConfig, into: BenchResult | None = None) -> BenchResult:
    """No-SD and SD (``config.method``; only no-SD for :data:`~specscope.methods.NO_SD`) at
    each batch size; each batch size's row and step records added to ``into`` (when given) as
    it finishes, so that an interrupted run still has them."""
    from specscope.engine.loading import (
        check_same_tokenizer,
        load_eos_token_ids,
        load_model,
        load_tokenizer,
        parse_dtype,
        resolve_device,
    )
    from specscope.assemble import drafting_engine
    from specscope.policy.learned import load_policy

    if config.batching not in BATCHING:
        raise SpecscopeError(f"--batching: expected distinct or replicate, got {config.batching!r}")
    if config.repeats % 2 == 0:  # of an even count, no repeat is the median: the upper one was the row
        raise SpecscopeError(f"--repeats: expected an odd count: the row is the run of median speedup, got "
                             f"{config.repeats}")
    if config.tree is not None and config.method == NO_SD:
        raise SpecscopeError(f"--tree: tree {config.tree.name} needs an SD method, got --method {NO_SD}")
    if config.confidence is not None:
        check_confidence(config.confidence, config.method, config.tree and config.tree.name)
    if config.beside_k is not None and (config.policy is None or config.method != LEARNED):
        raise SpecscopeError("--beside: only with --policy (the chains of the methods a policy chooses between run "
                             "beside it)")
    if config.draft_dir is not None:
        check_same_tokenizer(config.model_dir, config.draft_dir)
    target = load_model(config.model_dir, parse_dtype(config.dtype), resolve_device(config.device))
    requests = read_workload(config.workload, load_tokenizer(config.model_dir), target.config.vocab_size)
    if config.batching == "distinct":
        config = fill_batch_sizes(config, len(requests), f"the {len(requests)} distinct requests of {config.workload}; "
                                  "--batching replicate runs B copies of each")
    max_seq_len = max(len(r.prompt_token_ids) for r in requests) + config.max_tokens
    check_max_tokens(config.model_dir, requests, config.max_tokens)
    slots = max(config.batch_sizes)
    eos = load_eos_token_ids(config.model_dir)
    seed = 0 if config.seed is None else config.seed  # each request draws its own seed from it, both engines alike:
    baseline = Engine(target, None, config.k, slots, max_seq_len, eos, seed=seed)  # copies of one request sample apart
    engine = baseline
    policy = load_policy(config.policy) if config.policy is not None else None
    if config.method != NO_SD:
        engine = drafting_engine(target, config.method, config.k, slots, max_seq_len, eos, config.draft_dir, policy,
                                 config.tree, config.confidence, seed)
    beside = [] if config.beside_k is None else [
        (method, drafting_engine(target, method, config.beside_k, slots, max_seq_len, eos,
                                 config.draft_dir if method == policy.drafter(config.draft_dir) else None, seed=seed))
        for method in policy.methods]
    sampling = SamplingParams(config.temperature, config.top_p, config.top_k)
    engines = ([baseline] if engine is baseline else [baseline, engine]) + [e for _, e in beside]
    warmup = replace(config, max_tokens=min(WARMUP_TOKENS, config.max_tokens), batching="distinct")
    longest, widest = max(requests, key=lambda r: len(r.prompt_token_ids)), max(config.batch_sizes)
    # the largest step first (the longest prompt at the largest batch size), untimed: a process's first
    # prefill of a size runs slower than the same prefill later (bundled target, seven prompts of 520
    # tokens: 0.25 s, then 0.21 s; docs/calibration.md)
    _lockstep(engines, [WorkloadRequest(f"warmup#{i}", longest.prompt_token_ids) for i in range(widest)], widest,
              warmup, sampling)
    result = into if into is not None else BenchResult([])
    with LazyProgress("bench: runs (batch sizes × repeats)", len(config.batch_sizes) * config.repeats) as bar:
        for batch_size in config.batch_sizes:
            repeats, records = [], []
            for _ in range(config.repeats):
                runs = _lockstep(engines, requests, batch_size, config, sampling)
                records += [r for run in runs for r in run.records]
                repeats.append(runs)
                bar.advance(description=f"bench: B={batch_size}")
            result.records.extend(records)
            sd = 0 if engine is baseline else 1  # --method none: no-SD alone, its row's speedup 1
            runs = _median_repeat(repeats, sd)
            row = _row(config, batch_size, len(requests), runs[0], runs[sd], engine is not baseline, policy)
            policy_repeats = row.details["speedup_repeats"] = [speedup(repeat[sd], repeat[0]) for repeat in repeats]
            result.rows.append(row)
            for j, ((method, _), chain) in enumerate(zip(beside, runs[2:]), start=2):  # the same repeat: its rows
                row = _row(replace(config, method=method, k=config.beside_k, policy=None), batch_size,  # side by side
                           len(requests), runs[0], chain, True)
                chain_repeats = [speedup(repeat[j], repeat[0]) for repeat in repeats]
                row.details.update(beside=policy.label, **paired_details(Paired.of(policy_repeats, chain_repeats)),
                                   speedup_repeats=chain_repeats)
                result.rows.append(row)
    return result


def speedup(sd: _Run, base: _Run) -> float:
    """``sd``'s tokens per second over ``base``'s (two runs of one repeat)."""
    return (sd.generated / sd.seconds) / (base.generated / base.seconds)


def paired_details(paired: Paired) -> dict:
    """A chain's row fields of the policy's speed over it, repeat by repeat (module docstring). On
    the bundled target, chat at B = 8, a policy committing every request to the MTP k = 3 chain
    beside it — one computation run twice — read 0.84–1.26× that chain over the repeats of three
    runs of 7–9 repeats in turns to a 256-token lead (medians 0.94–1.01×), 0.89–1.04× in four runs in
    turns to 64 tokens (medians 0.985–0.991×)."""
    low, high, held = paired.bounds
    return {"learned_over_chain": paired.median, "learned_over_chain_low": low, "learned_over_chain_high": high,
            "learned_over_chain_confidence": held, "learned_over_chain_verdict": paired.verdict}


def _median_repeat(repeats: list[list[_Run]], sd: int) -> list[_Run]:
    """The repeat (each engine's run of it, no-SD first) of the median speedup of engine ``sd``
    over no-SD (of an odd count: :func:`run_bench` refuses an even one)."""
    return sorted(repeats, key=lambda runs: speedup(runs[sd], runs[0]))[len(repeats) // 2]


def _row(
    config: BenchConfig,
    batch_size: int,
    num_requests: int,
    base: _Run,
    sd: _Run,
    compare: bool,
    policy: "LearnedPolicy | None" = None,
) -> BenchRow:
    """One row (fields in the module docstring) from the two runs at ``batch_size``."""
    greedy = config.temperature == 0 and compare
    mismatched = [rid for rid in base.outputs if base.outputs[rid] != sd.outputs.get(rid)]  # every copy compared
    if config.batching == "replicate":  # a request counted once, whichever of its copies differ
        mismatched = list(dict.fromkeys(rid.rsplit("#", 1)[0] for rid in mismatched))
    if greedy and mismatched:
        log.warning(
            "batch %d: SD output differs from no-SD output for %d requests (%s)",
            batch_size,
            len(mismatched),
            ", ".join(mismatched[:5]),
        )
    stats = sd.stats
    split = {
        f"{phase}_s": sum(getattr(r, f"{phase}_s") for r in sd.records)
        for phase in ("prefill", "draft", "verify", "sample", "overhead")
    }
    return BenchRow(
        method=config.method,
        # what a step proposes: nothing; a tree's nodes (as a sweep's tree cell counts it); a chain's k
        k=0 if config.method == NO_SD else config.tree.nodes if config.tree is not None else config.k,
        batch_size=batch_size,
        throughput=sd.generated / sd.seconds,
        baseline_throughput=base.generated / base.seconds,
        acceptance_rate=stats.acceptance_rate(),
        mean_acceptance_length=stats.mean_acceptance_length(),
        details={
            "batching": config.batching,
            "num_requests": num_requests,
            "generated_tokens": sd.generated,
            "num_drafts": stats.num_drafts,
            "num_draft_tokens": stats.num_draft_tokens,
            "num_accepted_tokens": stats.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(stats.num_accepted_tokens_per_pos),
            "wall_s": sd.seconds,
            "baseline_wall_s": base.seconds,
            **split,
            "greedy_match": (not mismatched) if greedy else None,
            "mismatched_requests": len(mismatched) if greedy else None,
            **({"policy": policy.label} if policy is not None else {}),
            "policy_sha256": None if policy is None else policy.sha256,  # the content that ran (its rows' stamp)
            **({"confidence": config.confidence} if config.confidence is not None else {}),
        },
        tree=config.tree,
    )
