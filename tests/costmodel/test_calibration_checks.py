"""What the sweep's fit reads from a cell's counters and timeline, on cells small enough to
compute by hand: the cross-check's columns, the counters' checks against the chunks, and the
warning where a counter is missing."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specscope.backends.openai.calibration import read_sweep
from specscope.backends.openai.sweep_config import key_id
from specscope.costmodel.calibrate import CellRun, cell_gaps, counter_assumptions, cross_check
from specscope.errors import SpecscopeError

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # the simulated engine's timelines
from calibration_helpers import simulated_cell  # noqa: E402


def request(rid: str, sent_ms: float, prompt: int, tokens: list[int]) -> dict:
    """A request whose chunks came 5, 7, 9, … ms after it was sent, carrying ``tokens`` each."""
    return {"id": rid, "sent_ms": sent_ms, "prompt_tokens": prompt, "output_tokens": sum(tokens),
            "chunk_ms": [5.0 + 2 * i for i in range(len(tokens))], "chunk_tokens": tokens}


def cell(method: str, k: int, timeline: list[dict], **counters) -> CellRun:
    return CellRun("c", method, k, None, 1, "w.jsonl", 1.0, counters.pop("num_draft_tokens", None), timeline, {},
                   **counters)


def test_the_cross_checks_token_columns_average_the_same_steps():
    """A review: verified_per_step was averaged over the chunk gaps, emitted_per_step over those and
    the first chunks from an idle engine (at B = 1 every prefill), so a none cell read 1 against
    5.25 and n-gram's emitted tokens exceeded its verified ones. Both now average the same steps.

    No SD, two requests alone (prompts of 10 and 20, three chunks each): four gaps verifying 1
    token, two first chunks prefilling 10 and 20 → verified (4 + 30) / 6; emitted the same plus
    each prefill's first token → (4 + 32) / 6. N-gram k = 2, one request (chunks of 1, 3, 1
    tokens; 4 draft tokens over 2 proposing steps: each gap verifies 3): verified (3 + 3 + 10) /
    3; emitted 2 a gap (the cell's 4 tokens over 2 decode chunks) and 11 → 15 / 3. The gaps are
    2 ms, the first chunks (no inter-token latency) left out of gap_ms."""
    plain = cell("none", 0, [request("a", 0.0, 10, [1, 1, 1]), request("b", 20.0, 20, [1, 1, 1])])
    ngram = cell("ngram", 2, [request("a", 0.0, 10, [1, 3, 1])], num_draft_tokens=4, num_drafts=2)
    rows = cross_check([plain, ngram])
    assert rows[0]["verified_per_step"] == pytest.approx(34 / 6)
    assert rows[0]["emitted_per_step"] == pytest.approx(36 / 6)
    assert rows[1]["verified_per_step"] == pytest.approx(16 / 3)
    assert rows[1]["emitted_per_step"] == pytest.approx(15 / 3)
    assert [row["gap_ms"] for row in rows] == pytest.approx([2.0, 2.0])


def chunked(tokens: list[int]) -> dict:
    """One request alone, its chunks 4 ms apart, carrying ``tokens`` each."""
    return {"id": "a", "sent_ms": 0.0, "prompt_tokens": 10, "output_tokens": sum(tokens),
            "chunk_ms": [5.0 + 4 * i for i in range(len(tokens))], "chunk_tokens": tokens}


def without_ids(request: dict) -> dict:
    return {**request, "chunk_tokens": None}


def test_counters_that_say_a_chunk_spans_several_steps_are_refused():
    """A review: without token ids only the mean tokens per chunk was held against k + 1, so a
    server streaming two steps per chunk whose steps accept little was fitted as if each chunk
    were one step. The counters tell.

    A drafter proposing k = 4 on each of 8 decode steps, none accepted: 9 chunks of one token,
    8 drafts, 32 draft tokens. Streamed two steps a chunk (the first alone): 5 chunks of 1.8
    tokens on average (below 5), but 8 proposing steps over 4 decode chunks. An n-gram k = 4
    whose 4 proposing steps accepted 2, 2, 0, 0 (chunks of 1, 3, 1, 1, 3, 1, 1, 1, 1: 13 tokens in
    9 chunks, 4 beyond one a chunk = the 4 accepted): in pairs, 5 chunks, 8 beyond one a chunk
    against 4 accepted, while 4 drafts and 16 draft tokens fit 4 decode chunks."""
    draft = dict(num_draft_tokens=32, num_drafts=8, num_accepted_tokens=0)
    cell_gaps(cell("draft", 4, [without_ids(chunked([1] * 9))], **draft))  # one step a chunk: fitted
    with pytest.raises(SpecscopeError, match=r"^cells/c.json \(draft k=4, B=1\): its counters count 8 request-steps "
                                             r"that proposed, 2.00 a decode chunk \(of 4\), where a chunk of one "
                                             r"step has at most 1: the server streams several steps per chunk"):
        cell_gaps(cell("draft", 4, [without_ids(chunked([1, 2, 2, 2, 2]))], **draft))
    ngram = dict(num_draft_tokens=16, num_drafts=4, num_accepted_tokens=4)
    cell_gaps(cell("ngram", 4, [without_ids(chunked([1, 3, 1, 1, 3, 1, 1, 1, 1]))], **ngram))
    with pytest.raises(SpecscopeError, match=r"^cells/c.json \(ngram k=4, B=1\): its requests emitted 13 tokens in 5 "
                                             r"chunks, 8 beyond one a chunk, where the counters accepted 4 drafts: "
                                             r"the server streams several steps per chunk"):
        cell_gaps(cell("ngram", 4, [without_ids(chunked([1, 4, 4, 2, 2]))], **ngram))


def test_counters_that_contradict_one_another_are_refused():
    """A review: counters of 0 drafts beside chunks of 2–3 tokens were fitted as steps verifying
    one token, unsaid. Accepted drafts beyond those proposed, or draft tokens beyond k a proposing
    step, are no one run's counts: refused, naming the cell."""
    request = chunked([1, 3, 1, 1, 3, 1, 1, 1, 1])
    for counters in (dict(num_draft_tokens=0, num_drafts=0, num_accepted_tokens=4),
                     dict(num_draft_tokens=16, num_drafts=3, num_accepted_tokens=4)):
        with pytest.raises(SpecscopeError, match=r"^cells/c.json \(ngram k=4, B=1\): its spec-decode counters "
                                                 r"contradict one another .*expected drafts <= draft tokens <= 4 x "
                                                 r"drafts and accepted <= draft tokens"):
            cell_gaps(cell("ngram", 4, [request], **counters))


def test_cells_without_counters_are_named_with_what_the_fit_takes(tmp_path, caplog):
    """A review: where /metrics failed the sweep stored metrics_error and no counters, and the fit
    took every step to verify k + 1 tokens, unsaid. One warning line per assumption names the
    cells and why their counters are missing; read_sweep gives it."""
    cells = [simulated_cell("none", 0, 1), replace(simulated_cell("ngram", 2, 1), num_draft_tokens=None, num_drafts=None),
             replace(simulated_cell("ngram", 2, 2), num_draft_tokens=None, num_drafts=None),
             replace(simulated_cell("draft", 2, 2), num_drafts=None)]
    errors = [None, "GET /metrics: HTTP 404: no route", None, None]
    for run, error in zip(cells, errors):
        key = {"engine": {"name": "ref"}, "method": run.method, "k": run.k, "batch_size": run.batch_size,
               "workload": "w.jsonl"}
        span = max(r["sent_ms"] + r["chunk_ms"][-1] for r in run.timeline) / 1000
        tokens = sum(r["output_tokens"] for r in run.timeline)
        result = {"output_tokens": tokens, "duration_s": span, "throughput": tokens / span,
                  "num_draft_tokens": run.num_draft_tokens,
                  "num_drafts": run.num_drafts, "num_accepted_tokens": run.num_accepted_tokens, "metrics_error": error}
        record = {"cell_id": key_id(key), "key": key, "status": "ok", "reason": None, "started_at": 0.0,
                  "finished_at": 1.0, "result": result, "timeline": run.timeline}
        (tmp_path / "cells").mkdir(exist_ok=True)
        (tmp_path / "cells" / f"{key_id(key)}.json").write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING):
        runs = read_sweep(tmp_path)
    label = {(r.method, r.batch_size): r.label for r in runs}
    said = counter_assumptions(runs)
    assert sorted(said) == sorted([
        f"{label['ngram', 1]}: no draft-token counter (metrics_error: GET /metrics: HTTP 404: no route): taken to "
        "verify k + 1 tokens (a tree: nodes + 1) every step",
        f"{label['ngram', 1]}: no drafts counter (metrics_error: GET /metrics: HTTP 404: no route): taken to "
        "propose on every step",  # a cell without either counter: both assumptions said (the second was not)
        f"{label['ngram', 2]}: no draft-token counter (the server exports none): taken to verify k + 1 tokens (a "
        "tree: nodes + 1) every step",
        f"{label['ngram', 2]}, {label['draft', 2]}: no drafts counter (the server exports none): taken to propose on "
        "every step"])
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all(any(line in message for message in warned) for line in said)
