"""The reference bench's lockstep runs its engines by blocks: each steps on until it leads the
others by BLOCK_TOKENS emitted tokens (stepping by turns let one engine's steps run on the caches
the other had filled: no-SD beside a large tree measured 15 % slower than alone)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("torch")

from specscope.backends import reference


class FakeEngine:
    """What _lockstep reads of an engine: a clock, its records and stats."""

    def __init__(self, name: str, order: list[str]) -> None:
        self.name, self.order = name, order
        self.clock = type("Clock", (), {"now": staticmethod(lambda: 0.0)})()
        self.step_records, self.stats = [], None

    def reset_stats(self) -> None:
        pass


def test_engines_take_blocks_and_stay_within_one_of_each_other(monkeypatch):
    order: list[str] = []
    per_step = {"base": 8, "sd": 30}
    totals = {"base": 2000, "sd": 2010}

    def steps(engine, requests, batch_size, config, sampling, outputs):
        for done in range(0, totals[engine.name], per_step[engine.name]):
            order.append(engine.name)
            emitted = min(per_step[engine.name], totals[engine.name] - done)
            outputs.setdefault("r", []).extend([1] * emitted)
            yield emitted

    monkeypatch.setattr(reference, "_steps", steps)
    runs = reference._lockstep([FakeEngine("base", order), FakeEngine("sd", order)], [], 8, None, None)
    assert [run.generated for run in runs] == [2000, 2010]  # every step ran
    blocks = [(name, len(list(group))) for name, group in itertools.groupby(order)]
    assert blocks[0] == ("base", 256 // 8) and len(blocks) >= 8  # blocks, not turns, and still interleaved
    emitted = {"base": 0, "sd": 0}
    for name in order:  # an engine starts a block only from behind, and ends it at most a step past the lead
        emitted[name] += per_step[name]
        assert emitted[name] - min(emitted.values()) <= reference.BLOCK_TOKENS + per_step[name]
