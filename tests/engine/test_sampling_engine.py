"""With sampling, SD's output distribution equals the target's (end to end, chi-square)."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from tiny_checkpoints import llama_config, write_checkpoint

from specscope.engine.runner import SamplingParams
from specscope.assemble import load_engine
from specscope.engine.sampling import BatchSampling

ALPHA = 1e-3  # false-alarm rate of the test: a correct engine fails one seed in a thousand
VOCAB = 8
PROMPT = [3, 5, 2, 7]


@pytest.fixture(scope="module")
def tiny_vocab(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab8")
    write_checkpoint(root / "target", llama_config(vocab_size=VOCAB), seed=0)
    write_checkpoint(root / "draft", llama_config(vocab_size=VOCAB), seed=0, noise=0.08)
    return root


def exact_joint(engine, params: SamplingParams) -> torch.Tensor:
    """P(t2, t3) under the target alone, t1 marginalised: [VOCAB, VOCAB]."""
    target = engine.target
    sampling = BatchSampling([params], [torch.Generator()], torch.device("cpu"))

    def next_probs(prefixes: list[list[int]]) -> torch.Tensor:  # [len(prefixes), VOCAB]
        tokens = torch.tensor(prefixes)
        logits = target.logits(target(tokens, torch.arange(tokens.shape[1]).expand_as(tokens))[0][:, -1])
        return torch.cat([sampling.probs(row[None]) for row in logits])

    with torch.no_grad():
        p1 = next_probs([PROMPT])[0]
        p2 = next_probs([PROMPT + [a] for a in range(VOCAB)])  # [t1, t2]
        p3 = next_probs([PROMPT + [a, b] for a in range(VOCAB) for b in range(VOCAB)]).view(
            VOCAB, VOCAB, VOCAB
        )
    return torch.einsum("a,ab,abc->bc", p1.double(), p2.double(), p3.double())


@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=5, top_p=0.9)]
)
def test_sd_sampling_matches_target_distribution(tiny_vocab, params):
    engine, _ = load_engine(
        tiny_vocab / "target", "draft", tiny_vocab / "draft", k=2, max_batch_size=8, max_seq_len=16
    )
    n = 1600
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for wave in range(0, n, 8):
        outputs = {}
        for i in range(wave, wave + 8):
            seeded = SamplingParams(params.temperature, params.top_p, params.top_k, seed=i)
            engine.add_request(str(i), PROMPT, 3, seeded, ignore_eos=True)
        while engine.num_running():
            for out in engine.step():
                outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
        for tokens in outputs.values():
            counts[tokens[1], tokens[2]] += 1
    rate = engine.stats.acceptance_rate()
    assert 0.2 < rate < 0.95  # rejections (recovered tokens) and acceptances both happen
    expected = exact_joint(engine, params).flatten() * n
    observed = counts.flatten()
    keep = expected >= 5  # pool sparse cells so the chi-square approximation holds
    obs = torch.cat([observed[keep], observed[~keep].sum()[None]])
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]])
    assert chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue > ALPHA
