"""Verification rules: exact tables for accept/reject, and distribution tests for sampling."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from specscope.engine.sampling import (
    BatchSampling,
    SamplingParams,
    verify_greedy,
    verify_sampled,
)

# False alarms: each chi-square test below rejects at p < 1e-3, so a correct implementation
# fails one run in a thousand per test; all generators are seeded, so a run is reproducible.
ALPHA = 1e-3


def onehot_logits(rows: list[list[int]], vocab: int = 6) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(rows), vocab).float() * 5  # [batch, m+1, vocab]


def test_verify_greedy_table():
    # target argmax per position; drafts; draft_len -> (accepted, bonus or recovered)
    target = onehot_logits([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 5, 3, 4], [1, 2, 3, 4]])
    drafts = torch.tensor([[1, 2, 3], [1, 0, 3], [0, 2, 3], [1, 2, 3], [1, 2, 3]])
    draft_len = torch.tensor([3, 3, 3, 3, 1])
    accepted, token = verify_greedy(target, drafts, draft_len)
    assert accepted.tolist() == [3, 1, 0, 1, 1]
    assert token.tolist() == [4, 2, 1, 5, 2]  # bonus, recovered, recovered, recovered, bonus


def _batch(n: int, params: SamplingParams, seed: int = 0) -> BatchSampling:
    gen = torch.Generator().manual_seed(seed)
    return BatchSampling([params] * n, [gen] * n, torch.device("cpu"))


def test_verify_sampled_with_point_masses_is_greedy():
    target = onehot_logits([[1, 2, 3, 4], [1, 0, 3, 4]])
    sampling = _batch(2, SamplingParams())
    probs = sampling.probs(target)
    drafts = torch.tensor([[1, 2, 3], [1, 2, 3]])
    accepted, token = verify_sampled(probs, None, drafts, torch.tensor([3, 3]), sampling)
    assert accepted.tolist() == [3, 1] and token.tolist() == [4, 0]


@pytest.mark.parametrize("deterministic", [False, True])
def test_first_emitted_token_follows_the_target(deterministic):
    """One position: whatever q is, the emitted token (accepted draft or recovered) ~ p."""
    vocab, n = 6, 20000
    gen = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(vocab, generator=gen) * 1.5, -1)
    q = torch.softmax(torch.randn(vocab, generator=gen) * 1.5, -1)
    sampling = _batch(n, SamplingParams(temperature=1.0), seed=8)
    drafts = torch.multinomial(q, n, replacement=True, generator=gen)[:, None]  # [n, 1]
    if deterministic:  # an n-gram-like proposer: the same token every time, q = point mass
        drafts = torch.full((n, 1), 2)
    target_probs = p.expand(n, 2, vocab)
    draft_probs = None if deterministic else q.expand(n, 1, vocab)
    accepted, recovered = verify_sampled(
        target_probs, draft_probs, drafts, torch.ones(n, dtype=torch.long), sampling
    )
    first = torch.where(accepted > 0, drafts[:, 0], recovered)
    counts = torch.bincount(first, minlength=vocab).double()
    assert chisquare(counts.numpy(), (p.double() * n).numpy()).pvalue > ALPHA
    rate = accepted.float().mean().item()
    expected_rate = p[2].item() if deterministic else torch.minimum(p, q).sum().item()
    assert abs(rate - expected_rate) < 0.02


def test_top_k_and_top_p_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top_k = _batch(1, SamplingParams(temperature=1.0, top_k=2)).probs(logits)
    torch.testing.assert_close(top_k, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    top_p = _batch(1, SamplingParams(temperature=1.0, top_p=0.85)).probs(logits)  # 0.5+0.3 < 0.85
    torch.testing.assert_close(top_p, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    greedy = _batch(1, SamplingParams()).probs(logits)
    assert greedy.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_a_vanishing_top_p_keeps_the_top_token_and_an_infinite_logit_gives_no_nan():
    """top_p = 1e-46 is 0 in float32: every token was dropped and the row's probabilities NaN
    (HTTP 500); a repetition_penalty of 1e-40 divides a logit to +inf, with the same result."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    tiny = _batch(1, SamplingParams(temperature=1.0, top_p=1e-46)).probs(logits)
    assert tiny.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    infinite = _batch(1, SamplingParams(temperature=1.0)).probs(torch.tensor([[float("inf"), 0.0, float("inf"), -1.0]]))
    assert torch.isfinite(infinite).all() and infinite.tolist() == [[0.5, 0.0, 0.5, 0.0]]


def test_verify_greedy_equals_a_plain_loop():
    gen = torch.Generator().manual_seed(11)
    batch, m, vocab = 64, 5, 4
    logits = torch.randn(batch, m + 1, vocab, generator=gen)
    drafts = torch.randint(0, vocab, (batch, m), generator=gen)
    draft_len = torch.randint(0, m + 1, (batch,), generator=gen)
    accepted, token = verify_greedy(logits, drafts, draft_len)
    best = logits.argmax(-1).tolist()
    for row in range(batch):
        a = 0
        while a < int(draft_len[row]) and int(drafts[row, a]) == best[row][a]:
            a += 1
        assert (int(accepted[row]), int(token[row])) == (a, best[row][a])
