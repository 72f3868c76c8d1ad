"""``confidence:p`` in the engine: a model drafter ends each row's proposal at its first draft whose
probability is below p, that draft included, and its passes stop once every row has ended."""

from __future__ import annotations

import pytest
import torch
from test_engine import generate, reference  # noqa: F401  (reference is a fixture)
from test_heads import BATCHES, KINDS, MAX_SEQ_LEN, prompts_of, repeat_heads, target, target_dir  # noqa: F401
from test_tree import run

from specscope.assemble import load_engine
from specscope.engine.proposer_api import ConfidentDrafts, ProposeInput
from specscope.engine.runner import Engine
from specscope.errors import SpecscopeError
from specscope.proposers import ProposerConfig, create_proposer
from specscope.trees import TreeShape


def test_each_row_ends_at_its_first_unconfident_draft_and_the_passes_at_the_last_row():
    """p = 0.5, k = 4, three rows whose drafts' probabilities are (by pass) 0.9 0.6 0.4 …, 0.3 …,
    0.8 0.7 0.9 0.2: lengths 3 (the 0.4 included), 1, 4; after the third pass one row (the last)
    drafts on, after the fourth none."""
    request = ProposeInput([0, 1, 2], torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long),
                           [[1], [1], [1]], 4, None, stop_below=0.5)
    rows = ConfidentDrafts(request, torch.device("cpu"))
    passes = torch.tensor([[0.9, 0.3, 0.8], [0.6, 0.1, 0.7], [0.4, 0.9, 0.9], [0.9, 0.9, 0.2]])
    assert [rows.add(p) for p in passes] == [True, True, True, False]
    assert rows.lengths.tolist() == [3, 1, 4]
    fixed = ConfidentDrafts(ProposeInput([0], request.last_tokens[:1], request.positions[:1], [[1]], 4, None),
                            torch.device("cpu"))
    assert fixed.add(None) and fixed.lengths.tolist() == [4]  # without p: every row drafts k


@pytest.mark.parametrize("batch_size", [1, 4])
def test_greedy_output_is_no_sds_and_proposals_shorten_as_p_rises(llama_dir, draft_dir, reference, batch_size):
    """Draft model, k = 4: at p = 1e-9 every draft is confident (the fixed chain's steps, record for
    record); at p = 1 a row ends at its first draft (one draft a row, one pass a step); between
    (p = 0.05: the tiny random drafter's probabilities are of that order), between, and the drafts it
    keeps are accepted more often. Greedy output equals no SD's at every p."""
    proposed, alpha = {}, {}
    for p in (None, 1e-9, 0.05, 1.0):
        engine, _ = load_engine(llama_dir, "draft", draft_dir, k=4, max_batch_size=batch_size, max_seq_len=128,
                                confidence=p)
        assert generate(engine, batch_size) == reference
        steps = [r for r in engine.step_records if r.tokens_verified]
        proposed[p], alpha[p] = [r.tokens_proposed for r in steps], engine.stats.acceptance_rate()
        if p == 1.0:
            assert all(r.tokens_proposed == r.batch_size - r.prefill_requests for r in steps)
    assert proposed[1e-9] == proposed[None]
    assert sum(proposed[1.0]) < sum(proposed[0.05]) < sum(proposed[None])
    assert alpha[None] < alpha[0.05]


@pytest.mark.parametrize("kind", KINDS)
def test_heads_stop_alike_and_stay_lossless(kind, target, repeat_heads):
    prompts = prompts_of(BATCHES["batch4"], seed=4)
    plain = run(Engine(target, None, 4, len(prompts), MAX_SEQ_LEN), prompts, 30)
    config = ProposerConfig(kind, 4, len(prompts), Engine.cache_capacity(MAX_SEQ_LEN, 4), repeat_heads[kind])
    engine = Engine(target, create_proposer(config, target), 4, len(prompts), MAX_SEQ_LEN, confidence=0.6)
    assert run(engine, prompts, 30) == plain
    lengths = {r.tokens_proposed for r in engine.step_records if r.tokens_verified}
    assert len(lengths) > 1  # rows end at different drafts


@pytest.mark.parametrize("method, p, tree, message", [
    ("ngram", 0.5, None, "needs a model drafter"),
    ("none", 0.5, None, "got none"),
    ("draft", 0.0, None, "0 < p <= 1"),
    ("draft", 1.5, None, "0 < p <= 1"),
    ("draft", 0.5, "2x1", "not tree 2x1"),
])
def test_what_cannot_stop_by_confidence_is_refused(llama_dir, draft_dir, method, p, tree, message):
    with pytest.raises(SpecscopeError, match=message):
        load_engine(llama_dir, method, draft_dir if method == "draft" else None, k=2, max_seq_len=128,
                    confidence=p, tree=None if tree is None else TreeShape.parse(tree))


def test_step_records_say_the_confidence_and_its_passes_are_priced_at_the_deepest_row(llama_dir, draft_dir, tmp_path):
    """A confidence run's records carry p; read back, they start a run of their own, the measured
    split names them apart from the fixed chain, and the drafter's passes a step are its deepest
    row's (tokens_verified / decoded), not the rows' mean proposal (batched_tokens)."""
    from specscope.analysis.timesplit import measured_split, read_steps
    from specscope.costmodel.fit import draft_rows

    lines = []
    for p in (None, 0.05):
        engine, _ = load_engine(llama_dir, "draft", draft_dir, k=4, max_batch_size=4, max_seq_len=128, confidence=p)
        generate(engine, 4)
        assert {r.confidence for r in engine.step_records} == {p}
        lines += [r.to_json() for r in engine.step_records]
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(lines) + "\n")
    steps = read_steps([path])
    assert {(s.run, s.confidence) for s in steps} == {(0, None), (1, 0.05)}
    assert [row["method"] for row in measured_split(steps)] == ["draft", "draft confidence:0.05"]
    stopped = [s for s in steps if s.confidence and s.decoded > 1 and s.tokens_proposed < 4 * s.decoded]
    assert stopped, "some step stopped rows sooner than k"
    passes, read = draft_rows(stopped)
    assert passes.tolist() == read.tolist() == [s.tokens_verified / s.decoded for s in stopped]
    assert any(s.batched_tokens < s.tokens_verified for s in stopped)


@pytest.mark.parametrize("kind", KINDS)
def test_a_seeded_request_drafts_alike_alone_and_among_rows_that_stop_elsewhere(kind, target, repeat_heads):
    """Sampled, p = 0.1: a row that has ended draws no more from its generator while the others
    draft on, so a seeded request's output is the same alone and in a batch."""
    from specscope.engine.runner import SamplingParams

    config = ProposerConfig(kind, 4, 4, Engine.cache_capacity(MAX_SEQ_LEN, 4), repeat_heads[kind])
    engine = Engine(target, create_proposer(config, target), 4, 4, MAX_SEQ_LEN, confidence=0.1)
    prompts = prompts_of(BATCHES["batch4"], seed=4)

    def run_seeded(rows):
        for i in rows:
            engine.add_request(str(i), prompts[i], 16, SamplingParams(temperature=1.0, seed=i), ignore_eos=True)
        out = {str(i): [] for i in rows}
        while engine.num_running():
            for step in engine.step():
                out[step.request_id] += step.new_token_ids
        return out

    assert run_seeded([1])["1"] == run_seeded([0, 1, 2, 3])["1"]
