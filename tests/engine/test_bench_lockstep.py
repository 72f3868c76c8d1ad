"""The reference bench's lockstep runs its engines by blocks: each steps on until it leads the
others by BLOCK_TOKENS emitted tokens (stepping by turns let one engine's steps run on the caches
the other had filled: no-SD beside a large tree measured 15 % slower than alone)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from specscope.backends import reference


class FakeEngine:
    """What _lockstep reads of an engine: a clock, its records and stats, and the batch size it
    serves at."""

    def __init__(self, name: str, order: list[str]) -> None:
        self.name, self.order = name, order
        self.clock = type("Clock", (), {"now": staticmethod(lambda: 0.0)})()
        self.step_records, self.stats = [], None

    def reset_stats(self) -> None:
        pass

    def serve_at(self, batch_size: int) -> None:
        self.served_at = batch_size


def lockstep(monkeypatch, per_step: dict[str, int], totals: dict[str, int], requests: int, max_tokens: int,
             batch_size: int) -> tuple[list, list[str]]:
    """_lockstep over two fake engines emitting ``per_step`` tokens a step up to ``totals``, for a
    run of ``requests`` × ``max_tokens`` planned: the runs and the order their steps ran in."""
    order: list[str] = []

    def steps(engine, requests, batch_size, config, sampling, outputs):
        assert engine.served_at == batch_size  # a policy's gate commits by the batch size a run serves at
        for done in range(0, totals[engine.name], per_step[engine.name]):
            order.append(engine.name)
            emitted = min(per_step[engine.name], totals[engine.name] - done)
            outputs.setdefault("r", []).extend([1] * emitted)
            yield emitted

    monkeypatch.setattr(reference, "_steps", steps)
    config = SimpleNamespace(batching="distinct", max_tokens=max_tokens)
    return reference._lockstep([FakeEngine("base", order), FakeEngine("sd", order)], [None] * requests, batch_size,
                               config, None), order


def test_engines_take_blocks_and_stay_within_one_of_each_other(monkeypatch):
    per_step = {"base": 8, "sd": 30}
    runs, order = lockstep(monkeypatch, per_step, {"base": 2000, "sd": 2010}, 20, 100, 8)
    assert [run.generated for run in runs] == [2000, 2010]  # every step ran
    blocks = [(name, len(list(group))) for name, group in itertools.groupby(order)]
    assert blocks[0] == ("base", reference.BLOCK_TOKENS // 8) and len(blocks) >= 8  # blocks, not turns, and still interleaved
    emitted = {"base": 0, "sd": 0}
    for name in order:  # an engine starts a block only from behind, and ends it at most a step past the lead
        emitted[name] += per_step[name]
        assert emitted[name] - min(emitted.values()) <= reference.BLOCK_TOKENS + per_step[name]


def test_a_short_run_still_interleaves(monkeypatch):
    """8 requests of 32 tokens at batch 1 (256 tokens an engine): a lead as long as the run would
    run no-SD whole before SD; a lead of at most a quarter of the run's tokens gives each engine
    several turns — and never fewer than 8 steps of every row (at batch 4, 32 tokens)."""
    runs, order = lockstep(monkeypatch, {"base": 1, "sd": 3}, {"base": 256, "sd": 256}, 8, 32, 1)
    blocks = [(name, len(list(group))) for name, group in itertools.groupby(order)]
    assert blocks[0] == ("base", 64) and sum(name == "base" for name, _ in blocks) >= 3
    assert reference.block_tokens(256, 4) == 64 and reference.block_tokens(64, 4) == 32
    assert reference.block_tokens(128, 1) == 32  # a quarter of the run, under BLOCK_TOKENS
    assert reference.block_tokens(10_000, 8) == reference.BLOCK_TOKENS
