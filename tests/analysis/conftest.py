"""A small factory for hand-written trace records."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.trace.schema import ProposerTrace, TraceRecord


def make_record(id: str, dataset: str, prompt: list[int], output: list[int] | None = None,
                k_max: int | None = 20, **acc: list[int]) -> TraceRecord:
    """A record whose proposers are the keyword arguments (name=acc_len list)."""
    length = len(next(iter(acc.values())))
    output = list(range(100, 100 + length)) if output is None else output
    return TraceRecord(
        id=id, dataset=dataset, k_max=k_max,
        prompt_token_ids=np.array(prompt, dtype=np.int64),
        output_token_ids=np.array(output, dtype=np.int64),
        proposers={name: ProposerTrace(np.array(values, dtype=np.int32)) for name, values in acc.items()},
    )


@pytest.fixture
def record():
    return make_record
