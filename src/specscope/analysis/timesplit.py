"""Where step time goes: drafting, verification, overhead (and prefill), predicted and measured.

Predicted: the simulator's :attr:`SimRow.time_split` (seconds per phase summed over the run).
Measured: per-step records of an engine run, JSON Lines, one step a line::

    {"step": 0, "method": "eagle", "k": 3, "batch_size": 8, "tokens_verified": 32,
     "tokens_emitted": [2, 4, 1, ...], "draft_s": 0.002, "verify_s": 0.011, "sample_s": 0.0004,
     "overhead_s": 0.0011, "kv_tokens": 5120, "prefill_tokens": 0, "prefill_s": 0.0,
     "prefill_requests": 0}

(``prefill_requests``, the prompts a step prefilled, may be missing: it is then taken as 1 for
a step that prefilled and 0 otherwise. ``tokens_proposed``, the draft tokens its rows proposed,
may be missing too: every row is then taken at the widest, ``tokens_verified``; and so may
``kv_longest``, the longest cache among the rows a step decoded: its attention is then taken to
read the cached tokens themselves, ``kv_tokens``, not every row padded to the longest.)

A step's ``batch_size`` is the number of requests running in that step, which varies as
requests finish and are admitted. So the reader cuts the records into runs — a run starts at
the top of each file and wherever ``step`` does not increase or ``method``/``k`` (or the tree,
or the confidence p) change — and
labels each run with its peak ``batch_size`` (the batch size it was configured with, when it
had enough requests). The measured split sums, per method × k × peak batch size over all
matching runs: ``prefill`` = prefill_s, ``drafting`` = draft_s, ``verification`` = verify_s,
``overhead`` = sample_s + overhead_s (the simulator's overhead covers sampling too);
``sampling`` is also kept apart, and so is ``policy`` (policy_s: the part of drafting that was
a learned policy's own work, 0 for every other method). Shares are phase / total. Runs without SD (method
:data:`NO_SD`) are listed with k = 0.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from specscope.costmodel.steps import NO_SD, MeasuredStep, StepRecord
from specscope.methods import LEARNED, names as method_names, run_label
from specscope.errors import SpecscopeError
from specscope.reading import read_jsonl
from specscope.sim.grid import SimRow
from specscope.sim.pricing import PHASES
from specscope.trace.fields import Fields
from specscope.trees import parse_tree
from specscope.validate import K_MAX_LIMIT, MAX_BATCH_SIZE, MAX_CONTEXT

_INT_FIELDS = ("step", "k", "batch_size", "tokens_verified", "kv_tokens", "prefill_tokens")
_TIME_FIELDS = ("draft_s", "verify_s", "sample_s", "overhead_s", "prefill_s")
_MOST = {"k": K_MAX_LIMIT, "batch_size": MAX_BATCH_SIZE, **dict.fromkeys(("tokens_verified", "kv_tokens", "prefill_tokens"),
                                                       MAX_BATCH_SIZE * MAX_CONTEXT)}  # a step's counts at most
STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord))  # a record's, as an engine writes them
MOST_S = 3600.0  # a phase of one step at most an hour: beyond it a typo, whose sums overflow a fit


def parse_step(obj: object, path: Path, line: int) -> MeasuredStep:
    """One step record of a JSON Lines file (``run`` still 0); errors name ``path:line: field``."""
    fields = Fields(obj, path, line)
    fields.only(STEP_FIELDS)  # a misspelt optional field (tokens_propsed) would be read as absent
    method = fields.text("method")
    if method not in (NO_SD, LEARNED, *method_names(baseline=False)):  # else a drafting under a name nothing prices
        raise fields.error("method", f"expected {NO_SD}, {LEARNED} or a proposer ({', '.join(method_names(baseline=False))}), "
                                     f"got {method!r}")
    values: dict = {name: fields.integer(name, maximum=_MOST.get(name)) for name in _INT_FIELDS}
    values.update({name: fields.number(name, low=0.0, high=MOST_S) for name in _TIME_FIELDS})
    prompts = fields.integer("prefill_requests", optional=True)
    width = fields.integer("prefill_width", optional=True)  # absent in records before it existed
    tree = fields.text("tree", optional=True)
    shape = None if tree is None else fields.check("tree", parse_tree, tree)
    policy = fields.number("policy_s", default=0.0, low=0.0, high=MOST_S)  # absent in records before it existed
    proposed = fields.integer("tokens_proposed", optional=True)  # absent in records before it existed
    longest = fields.integer("kv_longest", optional=True, maximum=MAX_CONTEXT)  # absent in records before it existed
    confidence = fields.number("confidence", optional=True, low=0.0, low_open=True, high=1.0)
    policy_rows = fields.integer("policy_rows", optional=True)
    tokens = values["prefill_tokens"]
    prompts = (1 if tokens else 0) if prompts is None else prompts
    if not 0 <= prompts <= values["batch_size"]:
        raise fields.error("prefill_requests", f"expected 0 … batch_size ({values['batch_size']}): the requests "
                           f"prefilled are among the step's, got {prompts}")
    if width is not None and not (tokens == width == 0 or width <= tokens <= prompts * width):  # the longest prompt
        raise fields.error("prefill_width", f"expected the longest of the prompts of prefill_tokens ({tokens}), "
                           f"got {width}")
    if policy_rows is not None:  # the rows a policy decided: among those the step decoded, and its work theirs
        if method != LEARNED:
            raise fields.error("policy_rows", f"expected none on a step of method {method!r}: only a policy "
                                              f"({LEARNED}) decides rows")
        if policy_rows > values["batch_size"] - prompts:
            raise fields.error("policy_rows", f"expected at most the rows the step decoded (batch_size "
                                              f"{values['batch_size']} less {prompts} prefilled), got {policy_rows}")
        if policy_rows == 0 and policy > 0:
            raise fields.error("policy_rows", f"expected rows the policy decided where its work took {policy} s "
                                              "(policy_s), got 0")
    if policy > values["draft_s"]:
        raise fields.error("policy_s", f"expected at most draft_s ({values['draft_s']}): it is a part of it")
    if tree is not None and method == NO_SD:
        raise fields.error("tree", "expected none on a step without SD (method none)")
    if confidence is not None and (method in (NO_SD, LEARNED) or tree is not None):
        raise fields.error("confidence", "expected none but on a chain of a model drafter (a step without SD, a "
                                         "policy's or a tree's stops no drafter at its confidence)")
    drafted = next((name for name in ("k", "draft_s", "tokens_proposed") if fields.obj.get(name)), None)
    if method == NO_SD and drafted:  # no SD drafts nothing (its k is 0 as an engine writes it)
        raise fields.error(drafted, f"expected 0 on a step without SD (method none), got {fields.obj[drafted]}")
    widest = 1 + (values["k"] if shape is None else shape.nodes)  # a row's tokens verified at most
    step = MeasuredStep(method=method, policy_s=policy, tokens_proposed=proposed, choices=_choices(fields, method),
                        tokens_emitted=fields.int_array("tokens_emitted", low=1, high=widest,
                                                        note=f" (each request emits 1 … {'nodes' if shape else 'k'} + 1 "
                                                             "tokens in a step)").tolist(),
                        prefill_requests=prompts, prefill_width=0 if width is None else width,
                        kv_longest=0 if longest is None else longest, confidence=confidence, policy_rows=policy_rows,
                        tree=None if shape is None else shape.name, **values)
    _check_consistent(fields, step, widest)
    return step


def _choices(fields: Fields, method: str) -> list[list | None] | None:
    """A policy step's ``choices`` (:class:`StepRecord`): per request null or [method, k], a
    method the policy can choose (or none) and k >= 0; a record without them (another method, or
    from before the field) has none."""
    choices = fields.obj.get("choices")
    if choices is None:
        return None
    if method != LEARNED:
        raise fields.error("choices", f"expected none on a step of method {method!r}: only a policy ({LEARNED}) "
                                      "chooses per request")
    names = (NO_SD, *method_names(baseline=False))
    if not isinstance(choices, list) or not all(
            c is None or (isinstance(c, list) and len(c) == 2 and c[0] in names and type(c[1]) is int and c[1] >= 0
                          and (c[1] == 0) == (c[0] == NO_SD)) for c in choices):
        raise fields.error("choices", f"expected per request null or [method, k] ({', '.join(names)}; k >= 1, "
                                      f"none with 0), got {json.dumps(choices)[:60]}")
    return choices


def _check_consistent(fields: Fields, step: MeasuredStep, width: int) -> None:
    """A step's work and times go together: each request it decoded (:attr:`MeasuredStep.decoded`,
    not those it prefilled) verifies at least one token and at most ``width`` (k + 1; a tree step's
    nodes + 1) and a verification takes time; a prefill reads prompts and takes time; one emitted
    count per running request."""
    if len(step.tokens_emitted) != step.batch_size:
        raise fields.error("tokens_emitted", f"expected one count per running request (batch_size "
                                             f"{step.batch_size}), got {len(step.tokens_emitted)}")
    if step.choices is not None and len(step.choices) != step.batch_size:
        raise fields.error("choices", f"expected one per running request (batch_size {step.batch_size}), got "
                                      f"{len(step.choices)}")
    if not step.decoded and step.tokens_verified:
        raise fields.error("tokens_verified", f"expected 0: every running request was prefilled in this step "
                                              f"(prefill_requests = batch_size = {step.prefill_requests}), none verified")
    if step.tokens_verified > step.decoded * width:  # a row verifies at most its drafts (k, a tree's nodes) and one
        raise fields.error("tokens_verified", f"expected at most {'nodes' if step.tree else 'k'} + 1 per request it "
                                              f"decoded ({step.decoded} × {width}), got {step.tokens_verified}")
    if step.tokens_verified < step.decoded:
        raise fields.error("tokens_verified", f"expected at least one per request it decoded ({step.decoded}: batch_size "
                                              f"less prefill_requests), got {step.tokens_verified}")
    if step.tokens_proposed is not None and not 0 <= step.tokens_proposed <= step.tokens_verified - step.decoded:
        raise fields.error("tokens_proposed", f"expected 0 … {step.tokens_verified - step.decoded}: at most "
                                              f"tokens_verified less one per request decoded, got {step.tokens_proposed}")
    if fields.obj.get("kv_longest") is not None and not step.kv_longest <= step.kv_tokens <= step.decoded * step.kv_longest:
        least = -(-step.kv_tokens // max(step.decoded, 1))
        raise fields.error("kv_longest", f"expected the longest cache of the {step.decoded} requests it decoded, whose "
                                         f"caches hold kv_tokens ({step.kv_tokens}): {least} … {step.kv_tokens}, got "
                                         f"{step.kv_longest}")
    if bool(step.prefill_requests) != bool(step.prefill_tokens):
        raise fields.error("prefill_requests", f"expected requests exactly where prefill_tokens > 0, got "
                                               f"{step.prefill_requests} with prefill_tokens {step.prefill_tokens}")
    for work, time in (("tokens_verified", "verify_s"), ("prefill_tokens", "prefill_s")):
        if bool(getattr(step, work)) != bool(getattr(step, time)):
            raise fields.error(time, f"expected a time > 0 exactly where {work} > 0, got {getattr(step, time):g} "
                                     f"with {work} {getattr(step, work)}")


def read_steps(paths: Iterable[str | Path]) -> list[MeasuredStep]:
    """Every step of every file (blank lines skipped), each labelled with its run (see the
    module docstring); errors name file:line and field. A file given twice is refused (its steps
    would count twice), and so is a line repeating the one before it (a copy would start a run of
    its own: the fits' per-run drift and stall checks then see runs of one or two steps)."""
    steps: list[MeasuredStep] = []
    seen: list[Path] = []
    for path in map(Path, paths):
        twice = next((other for other in seen if path.is_file() and os.path.samefile(path, other)), None)
        if twice is not None:
            raise SpecscopeError(f"{path}: given twice (as {twice}): its steps would count twice")
        seen.append(path)
        before = len(steps)
        for line, step in read_jsonl(path, lambda obj, at, number: (number, parse_step(obj, at, number))):
            previous = steps[-1] if len(steps) > before else None
            if previous is not None and dataclasses.replace(step, run=previous.run, source=previous.source) == previous:
                raise SpecscopeError(f"{path}:{line}: the same step record as the line before it (step {step.step}): "
                                     "an engine writes each step once; remove the copy (it would cut its run in two)")
            run = steps[-1].run if steps else -1
            new_run = previous is None or step.step <= previous.step or \
                (step.method, step.k, step.tree, step.confidence) != \
                (previous.method, previous.k, previous.tree, previous.confidence)
            step.run, step.source = run + 1 if new_run else run, str(path)
            steps.append(step)
        if len(steps) == before:
            raise SpecscopeError(f"{path}: no step records found")
    return steps


def _shares(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(seconds[p] for p in PHASES)
    return {f"{p}_share": (seconds[p] / total if total else 0.0) for p in PHASES}


def predicted_split(rows: Sequence[SimRow]) -> list[dict]:
    """One row per simulated cell: seconds and share of each phase."""
    out = []
    for row in rows:
        seconds = {p: float(row.time_split.get(p, 0.0)) for p in PHASES}
        out.append({"source": "predicted", "dataset": row.dataset, "method": row.acc,
                    "policy": row.policy, "batch_size": row.batch_size,
                    **{f"{p}_s": v for p, v in seconds.items()}, **_shares(seconds)})
    return out


def measured_split(steps: Sequence[MeasuredStep]) -> list[dict]:
    """One row per file × method × k × peak batch size, in order of first appearance (a tree's
    runs as method ``METHOD tree:SHAPE``, a drafter stopped at its confidence as ``METHOD
    confidence:p``; ``steps_file`` the file: runs of two files — two engines, two machines — are
    not pooled into one row)."""
    runs: dict[int, list[MeasuredStep]] = {}
    for s in steps:
        runs.setdefault(s.run, []).append(s)
    groups: dict[tuple[str, int, int], dict[str, float]] = {}
    for members in runs.values():
        first = members[0]
        method, k = run_label(first.method, first.tree, first.confidence), first.k
        key = (first.source, method, 0 if method == NO_SD else k, max(s.batch_size for s in members))
        g = groups.setdefault(key, {**{p: 0.0 for p in PHASES}, "sampling": 0.0, "policy": 0.0, "runs": 0, "steps": 0,
                                    "tokens": 0})
        g["runs"] += 1
        for s in members:
            g["prefill"] += s.prefill_s
            g["drafting"] += s.draft_s
            g["verification"] += s.verify_s
            g["overhead"] += s.sample_s + s.overhead_s
            g["sampling"] += s.sample_s
            g["policy"] += s.policy_s
            g["steps"] += 1
            g["tokens"] += sum(s.tokens_emitted)
    out = []
    for (source, method, k, batch_size), g in groups.items():
        total = sum(g[p] for p in PHASES)
        out.append({"source": "measured", "steps_file": source, "method": method, "k": k, "batch_size": batch_size,
                    "runs": int(g["runs"]), "steps": int(g["steps"]), "tokens_emitted": int(g["tokens"]),
                    "tokens_per_s": g["tokens"] / total if total else 0.0,
                    **{f"{p}_s": g[p] for p in PHASES}, "sampling_s": g["sampling"], "policy_s": g["policy"],
                    **_shares(g)})
    return out
