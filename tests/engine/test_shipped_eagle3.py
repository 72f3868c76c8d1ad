"""The shipped EAGLE-3 head, trained on the bundled target, accepts drafts: its accept paths
(the fused target states and the head's own output fed back after an accepted token, chains and
trees, rows joining mid-batch) give the target's own greedy output."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specscope.assemble import load_engine
from specscope.methods import NO_SD
from specscope.trees import TreeShape
from specscope.zoo.evaluate import decode_all, task_prompts
from specscope.zoo.shipped import model_dir


@pytest.fixture(scope="module")
def prompts_and_expected():
    """Five bundled prompts of two tasks and their greedy no-SD outputs (24 tokens)."""
    target = model_dir("target")
    plain, tokenizer = load_engine(target, NO_SD, max_batch_size=8, max_seq_len=512)
    prompts = {**task_prompts(target, tokenizer, "code", 3)[0], **task_prompts(target, tokenizer, "chat", 2)[0]}
    return prompts, decode_all(plain, prompts, 24)


@pytest.mark.parametrize("k, tree", [(1, None), (3, None), (6, None), (0, "2x1x1"), (0, "3x2x1x1")])
def test_greedy_output_is_the_targets_with_drafts_accepted(prompts_and_expected, k, tree):
    prompts, expected = prompts_and_expected
    shape = TreeShape.parse(tree) if tree else None
    # a batch limit of 2 over 5 requests: rows finish and others join while a row is mid-output
    engine, _ = load_engine(model_dir("target"), "eagle3", model_dir("eagle3"), k=max(k, 1), max_batch_size=2,
                            max_seq_len=512, tree=shape)
    assert decode_all(engine, prompts, 24) == expected
    accepted = engine.stats.num_accepted_tokens_per_pos  # per draft position
    assert accepted[0] > 0.2 * engine.stats.num_drafts  # the accept paths ran
    assert k == 1 or accepted[1] > 0  # and a second draft, read from the head's own output fed back
