"""What the sweep's fit reads from a cell's counters and timeline, on cells small enough to
compute by hand: the cross-check's columns."""

from __future__ import annotations

import pytest

from specscope.costmodel.calibrate import CellRun, cross_check


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
