"""Rolling out every position at once gives the same traces as the engine's protocol, one
position at a time: same acc_len and draft_len, same drafter probabilities (which also pins
the drafted tokens), for the draft model and the three heads, over ragged prompts and outputs
and several windows."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tiny_heads import write_random_eagle, write_random_eagle3, write_random_mtp
from tiny_checkpoints import llama_config, write_checkpoint

from specscope.engine.loading import load_model
from specscope.engine.runner import Engine
from specscope.proposers import ProposerConfig, create_proposer
from specscope.tracing.model import rollout_traces, stepwise_traces

K = 4
PROMPTS = [[5, 9, 3, 7, 2], [4, 8], [6, 6, 6, 10, 11, 12, 13, 3], [2, 30, 40]]


@pytest.fixture(scope="module")
def drafters(tmp_path_factory):
    root = tmp_path_factory.mktemp("rollout")
    config = llama_config(num_hidden_layers=4)
    write_checkpoint(root / "target", config)
    write_checkpoint(root / "draft", config, seed=0, noise=0.01)
    return root / "target", {
        "draft": root / "draft",
        "eagle": write_random_eagle(root / "target", root / "eagle", seed=1),
        "eagle3": write_random_eagle3(root / "target", root / "eagle3", 64, seed=2),
        "mtp": write_random_mtp(root / "target", root / "mtp", seed=3),
    }


@pytest.mark.parametrize("method", ["draft", "eagle", "eagle3", "mtp"])
def test_rollout_equals_stepwise(drafters, method):
    target_dir, dirs = drafters
    target = load_model(target_dir, torch.float32, torch.device("cpu"))
    engine = Engine(target, None, 1, len(PROMPTS), 64, [])
    generated = engine.generate([(str(i), p) for i, p in enumerate(PROMPTS)], 20)
    outputs = [generated[str(i)][: 7 + 4 * i] for i in range(len(PROMPTS))]  # ragged lengths
    capacity = Engine.cache_capacity(max(len(p) + len(o) for p, o in zip(PROMPTS, outputs)), K)
    proposer = create_proposer(ProposerConfig(method, K, len(PROMPTS), capacity, dirs[method]), target)
    fast = rollout_traces(target, proposer, PROMPTS, outputs, K, window=5)
    slow = stepwise_traces(target, proposer, PROMPTS, outputs, K)
    for f, s, output in zip(fast, slow, outputs):
        assert len(f.acc_len) == len(output)
        np.testing.assert_array_equal(f.acc_len, s.acc_len)
        np.testing.assert_array_equal(f.draft_len, s.draft_len)
        np.testing.assert_allclose(f.draft_prob, s.draft_prob, atol=1e-5)
    if method == "draft":  # a near copy of the target: the comparison covers accepted runs
        assert max(int(f.acc_len.max()) for f in fast) == K + 1


@pytest.mark.parametrize("method", ["draft", "mtp"])
def test_rollout_with_empty_and_one_token_outputs(drafters, method):
    """Rows without output (even the longest one) and outputs of one token trace as the
    protocol path does; a batch of empty outputs gives empty traces."""
    target_dir, dirs = drafters
    target = load_model(target_dir, torch.float32, torch.device("cpu"))
    prompts, outputs = [[5, 9, 3, 4, 5, 6], [4], [7, 7]], [[], [1, 2, 3], [9]]
    proposer = create_proposer(ProposerConfig(method, K, 3, 32, dirs[method]), target)
    fast = rollout_traces(target, proposer, prompts, outputs, K, window=2)
    assert [len(t.acc_len) for t in fast] == [0, 3, 1]
    slow = stepwise_traces(target, proposer, prompts[1:], outputs[1:], K)
    for f, s in zip(fast[1:], slow):
        np.testing.assert_array_equal(f.acc_len, s.acc_len)
        np.testing.assert_allclose(f.draft_prob, s.draft_prob, atol=1e-5)
    assert [len(t.acc_len) for t in rollout_traces(target, proposer, prompts[:2], [[], []], K)] == [0, 0]


@pytest.mark.parametrize("method", ["draft", "eagle", "eagle3", "mtp"])
def test_tree_ranks_agree_with_the_greedy_chain(drafters, method):
    """Teacher-forced ranks: at every position the greedy chain's acc_len is 1 + the number of
    leading zero ranks (capped at k); unknown (-1) exactly past the output's end."""
    target_dir, dirs = drafters
    target = load_model(target_dir, torch.float32, torch.device("cpu"))
    engine = Engine(target, None, 1, len(PROMPTS), 64, [])
    generated = engine.generate([(str(i), p) for i, p in enumerate(PROMPTS)], 20)
    outputs = [generated[str(i)][: 7 + 4 * i] for i in range(len(PROMPTS))]
    proposer = create_proposer(ProposerConfig(method, K, len(PROMPTS), 128, dirs[method]), target)
    traces = rollout_traces(target, proposer, PROMPTS, outputs, K, window=5, tree_depth=K + 1)
    for trace, output in zip(traces, outputs):
        ranks = trace.tree_rank  # [n, K + 1]
        assert ranks.shape == (len(output), K + 1)
        leading = np.cumprod(ranks == 0, axis=1).sum(axis=1)
        np.testing.assert_array_equal(trace.acc_len, 1 + np.minimum(leading, K))
        n = len(output)
        unknown = np.arange(n)[:, None] + np.arange(K + 1)[None, :] >= n - 1  # output[i + 1 + d] absent
        np.testing.assert_array_equal(ranks < 0, unknown)
        assert ranks.max() <= 63
    if method == "draft":  # near copy of the target: long leading runs are exercised
        assert max(int(np.cumprod(t.tree_rank == 0, axis=1).sum(axis=1).max()) for t in traces) == K + 1
