"""Tree verification: lossless greedy tree SD (draft model and heads, batch 1/4/8), full-depth
acceptance with self-draft, KV compaction against a plain forward, multi-draft rejection
sampling (exact unit check and an end-to-end chi-square test), and refusals."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from test_engine import generate, reference  # noqa: F401  (reference is a fixture)
from test_heads import BATCHES, K, MAX_SEQ_LEN, KINDS, prompts_of, repeat_heads, target, target_dir  # noqa: F401
from test_sampling_engine import PROMPT, exact_joint, tiny_vocab  # noqa: F401

from specscope.assemble import load_engine
from specscope.engine.kv_cache import KVCache
from specscope.engine.runner import Engine, SamplingParams
from specscope.engine.sampling import BatchSampling, verify_tree_sampled
from specscope.errors import SpecscopeError
from specscope.proposers import ProposerConfig, create_proposer
from specscope.trees import TreeShape

ALPHA = 1e-3  # false-alarm rate of each chi-square test
TREES = ["2x2x1", "3x1", "[(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]"]


@pytest.mark.parametrize("batch_size", [1, 4, 8])
@pytest.mark.parametrize("shape", TREES)
def test_greedy_tree_sd_equals_plain_greedy(llama_dir, draft_dir, reference, shape, batch_size):
    tree = TreeShape.parse(shape)
    engine, _ = load_engine(llama_dir, "draft", draft_dir, max_batch_size=batch_size, max_seq_len=128, tree=tree)
    assert engine.k == tree.depth
    assert generate(engine, batch_size) == reference
    stats = engine.stats
    assert stats.num_draft_tokens == tree.nodes * stats.num_drafts  # every node counts as offered
    assert 0 < stats.num_accepted_tokens < stats.num_drafts * tree.depth  # ragged acceptance
    assert {r.tokens_verified for r in engine.step_records if r.batch_size == 1 and not r.prefill_requests} \
        <= {tree.nodes + 1}


def head_engine(kind: str, head_dir, target, tree: TreeShape, batch: int) -> Engine:
    config = ProposerConfig(kind, tree.depth, batch, Engine.cache_capacity(MAX_SEQ_LEN, K, tree), head_dir)
    return Engine(target, create_proposer(config, target), tree.depth, batch, MAX_SEQ_LEN, tree=tree)


def run(engine: Engine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, max_tokens, ignore_eos=True)
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    return [outputs[str(i)] for i in range(len(prompts))]


@pytest.mark.parametrize("shape", [TREES[0], TREES[2]])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_tree_sd_with_heads_equals_plain_greedy(kind, batch, shape, target, repeat_heads):
    prompts = prompts_of(BATCHES[batch], seed=4)
    plain = run(Engine(target, None, K, len(prompts), MAX_SEQ_LEN), prompts, 30)
    engine = head_engine(kind, repeat_heads[kind], target, TreeShape.parse(shape), len(prompts))
    assert run(engine, prompts, 30) == plain
    stats = engine.stats
    assert stats.num_accepted_tokens_per_pos[0] > 0  # the heads' trees are (partly) accepted
    assert stats.num_accepted_tokens < stats.num_drafts * engine.k


def test_self_draft_tree_accepts_the_full_depth(llama_dir):
    tree = TreeShape.parse("2x2x1")
    engine, _ = load_engine(llama_dir, "draft", llama_dir, max_batch_size=4, max_seq_len=128, tree=tree)
    outputs = generate(engine, 4)
    stats = engine.stats
    after_prefill = [len(tokens) - 1 for tokens in outputs.values()]  # the prefill emits the first token
    assert stats.num_emitted_tokens == sum(after_prefill)  # τ counts what the requests kept: the last step
    assert stats.num_request_steps == sum(-(-n // (tree.depth + 1)) for n in after_prefill)  # is cut short
    assert stats.num_accepted_tokens_per_pos == [stats.num_drafts] * tree.depth
    assert stats.num_draft_tokens == stats.num_drafts * tree.nodes


def test_kv_cache_holds_exactly_the_committed_tokens(llama_dir, draft_dir):
    """After tree steps (accepted paths through later rows included), each slot's cache equals
    a plain forward's keys/values over the sequence's committed tokens."""
    engine, _ = load_engine(llama_dir, "draft", draft_dir, max_batch_size=3, max_seq_len=128,
                            tree=TreeShape.parse("2x2x1"))
    prompts = [[5, 9, 14, 3, 22], [7] * 3 + [40, 41, 42] * 4, [11, 12]]
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, 60, ignore_eos=True)
    histories = {str(i): list(p) for i, p in enumerate(prompts)}
    for _ in range(8):
        for out in engine.step():
            histories[out.request_id] += out.new_token_ids
    assert engine.stats.num_accepted_tokens_per_pos[1] > 0  # some paths needed moving
    target = engine.target
    for seq in engine._running:
        history = histories[seq.request_id]
        n = len(history) - 1
        assert engine.cache.lengths[seq.slot] == n
        plain = KVCache(target.config, 1, n, target.dtype, target.device)
        with torch.no_grad():
            target(torch.tensor([history[:n]]), torch.arange(n)[None], plain, [0], kv_len=n)
        torch.testing.assert_close(engine.cache.k[:, seq.slot, :n], plain.k[:, 0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(engine.cache.v[:, seq.slot, :n], plain.v[:, 0], rtol=1e-4, atol=1e-5)


def test_multi_draft_rejection_emits_the_target_distribution():
    """One node with target p and two point-mass children: the first emitted token follows p
    (children accepted with probability p(t) each, the rest drawn from the residual)."""
    p = torch.tensor([0.1, 0.4, 0.2, 0.3])
    tree = TreeShape.parse("2")
    probs = torch.stack([p, torch.full((4,), 0.25), torch.full((4,), 0.25)])[None]  # [1, 3, 4]
    drafts = torch.tensor([[1, 3]])  # rank 0 -> token 1, rank 1 -> token 3
    sampling = BatchSampling([SamplingParams(temperature=1.0)], [torch.Generator().manual_seed(5)],
                             torch.device("cpu"))
    n, counts, path_counts = 20000, torch.zeros(4), torch.zeros(3)
    for _ in range(n):
        path, token = verify_tree_sampled(probs, drafts, tree, sampling)
        first = drafts[0, path[0][0] - 1] if path[0] else token[0]
        counts[int(first)] += 1
        path_counts[path[0][0] if path[0] else 0] += 1
    assert chisquare(counts.numpy(), (p * n).numpy()).pvalue > ALPHA
    # row 1 (token 1) is accepted with p(1) = 0.4, row 2 (token 3) with p(3) = 0.3
    assert chisquare(path_counts.numpy(), (torch.tensor([0.3, 0.4, 0.3]) * n).numpy()).pvalue > ALPHA


def test_tree_sampling_matches_target_distribution(tiny_vocab):
    """End to end: (t2, t3), emitted by a 2x2 tree step, follows the target's joint."""
    tree = TreeShape.parse("2x2")
    engine, _ = load_engine(tiny_vocab / "target", "draft", tiny_vocab / "draft", max_batch_size=8,
                            max_seq_len=16, tree=tree)
    n, vocab = 1600, engine.target.config.vocab_size
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    params = SamplingParams(temperature=1.0)
    for wave in range(0, n, 8):
        outputs: dict[str, list[int]] = {}
        for i in range(wave, wave + 8):
            engine.add_request(str(i), PROMPT, 3, SamplingParams(temperature=1.0, seed=i), ignore_eos=True)
        while engine.num_running():
            for out in engine.step():
                outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
        for tokens in outputs.values():
            counts[tokens[1], tokens[2]] += 1
    per_pos = engine.stats.num_accepted_tokens_per_pos
    assert per_pos[0] > 0 and per_pos[1] > 0 and engine.stats.acceptance_rate() < 0.5
    expected = exact_joint(engine, params).flatten() * n
    observed = counts.flatten()
    keep = expected >= 5  # pool sparse cells so the chi-square approximation holds
    obs = torch.cat([observed[keep], observed[~keep].sum()[None]])
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]])
    assert chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue > ALPHA


def test_constraints_follow_each_node_path(llama_dir, draft_dir):
    """Repetition penalty and min_tokens apply per tree node (its own root path): still lossless."""
    params = SamplingParams(repetition_penalty=1.3, min_tokens=12, stop_token_ids=(5, 17))
    plain, _ = load_engine(llama_dir, "none", max_batch_size=4, max_seq_len=128)
    engine, _ = load_engine(llama_dir, "draft", draft_dir, max_batch_size=4, max_seq_len=128,
                            tree=TreeShape.parse("2x2x1"))
    assert generate(engine, 4, sampling=params) == generate(plain, 4, sampling=params)
    assert engine.stats.num_accepted_tokens > 0


@pytest.mark.parametrize("method, draft, shape, message", [
    ("ngram", False, "2x2", r"--tree: the 'ngram' method drafts chains only .*not implemented"),
    ("none", False, "2x2", r"--tree: tree 2x2 needs an SD method"),
    ("draft", True, "[(0,), (200,)]", r"--tree: child rank 200 needs more than the vocabulary's 96"),
])
def test_unsupported_trees_are_refused(llama_dir, method, draft, shape, message):
    with pytest.raises(SpecscopeError, match=message):
        load_engine(llama_dir, method, llama_dir if draft else None, max_batch_size=1, max_seq_len=32,
                    tree=TreeShape.parse(shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_trees_children_are_drafted_in_the_traces_rank_order(dtype):
    """A node of rank r is the token ``rank_of`` calls rank r, ties by the smaller id: topk put the
    larger of two tied ids first in bfloat16 on a CPU (scores 11, 10.5, 10.5 of ids 652, 646,
    408: rank 1 drafted 646 where the trace's rank 1 was 408), and the replay credited a tree
    with acceptances the engine never had. Zeros of either sign, and infinities, ordered too."""
    from specscope.proposers.rollout import rank_of, ranked

    scores = torch.zeros(1, 1, 1024, dtype=dtype)
    scores[0, 0, [652, 646, 408]] = torch.tensor([11.0, 10.5, 10.5], dtype=dtype)
    assert ranked(scores, 3).tolist() == [[[652, 408, 646]]]
    generator = torch.Generator().manual_seed(0)
    many = (torch.randn(3, 5, 300, generator=generator) * 3).round().to(dtype)  # many ties
    many[0, 0, :5], many[0, 0, 5:9], many[1, 1, :3] = -0.0, 0.0, float("-inf")
    order = ranked(many, 40)
    assert all((rank_of(many, order[..., r]) == r).all() for r in range(40))
