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


def test_each_row_stops_at_its_own_p_and_its_own_k():
    """Per row: p 0.5, none, 0.8, 0.8 and k 4, 2, 3, 4 (passes to 4), probabilities by pass
    0.9 0.1 0.9 0.9, 0.6 0.1 0.9 0.7, 0.4 nan 0.85 0.9: row 0 ends at the 0.4 (3 drafts, by its p), row 1
    at its k (2; no p, so its low and NaN probabilities stop nothing), row 2 at its k (3, its drafts
    confident), row 3 at the 0.7 (2, by its p); after the third pass no row drafts. Rows given
    their p as numpy and torch scalars stop alike; lists of the wrong length are refused. A
    caps-only call reads no probability."""
    import numpy as np

    def request(p, k):
        return ProposeInput([0, 1, 2, 3], torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long),
                            [[1]] * 4, 4, None, stop_below=p, row_k=k)

    passes = torch.tensor([[0.9, 0.1, 0.9, 0.9], [0.6, 0.1, 0.9, 0.7], [0.4, float("nan"), 0.85, 0.9]])
    for p in ([0.5, None, 0.8, 0.8], [np.float32(0.5), None, torch.tensor(0.8), 0.8]):
        rows = ConfidentDrafts(request(p, [4, 2, 3, 4]), torch.device("cpu"))
        assert rows.reads
        assert [rows.add(p) for p in passes] == [True, True, False]
        assert rows.lengths.tolist() == [3, 2, 3, 2]
    scalar = ConfidentDrafts(request(np.float64(0.5), None), torch.device("cpu"))  # one p, as numpy gives it
    assert [scalar.add(p) for p in passes] == [True, True, True] and scalar.lengths.tolist() == [3, 1, 3, 3]
    nan = ConfidentDrafts(request([None, 0.05, None, None], None), torch.device("cpu"))  # a NaN stops a row with a p
    assert [nan.add(p) for p in passes] == [True, True, True] and nan.live == [True, False, True, True]
    # p in float32, as the drafts' probabilities are and the simulator compares them: a probability of
    # exactly float32(0.7) reaches p = 0.7 (as a float64, 0.7 lies above it)
    edge = ConfidentDrafts(request([0.7] * 4, None), torch.device("cpu"))
    assert edge.add(torch.full((4,), 0.7, dtype=torch.float32)) and edge.live == [True] * 4
    for p, k in (([0.5], None), (None, [1, 2])):
        with pytest.raises(ValueError, match="one value per row"):
            ConfidentDrafts(request(p, k), torch.device("cpu"))
    capped = ConfidentDrafts(request(None, [1, 3, 0, 9]), torch.device("cpu"))  # k 0 drafts none; 9: k = 4 at most
    assert not capped.reads
    assert [capped.add(None) for _ in range(4)] == [True, True, True, False]
    assert capped.lengths.tolist() == [1, 3, 0, 4]


class _PerRowRules:
    """Wraps a model proposer: every step, each row drafts to its own k (1 … k) and its own p (or
    none), drawn from a seeded generator, in one call; records each call."""

    def __init__(self, inner, k: int) -> None:
        self.inner, self.k, self.calls = inner, k, []
        self.name, self.hidden_layers = inner.name, inner.hidden_layers
        self.rng = torch.Generator().manual_seed(0)
        self.observe, self.release = inner.observe, inner.release

    def propose(self, request: ProposeInput):
        from dataclasses import replace

        batch = len(request.slots)
        row_k = (torch.randint(1, self.k + 1, (batch,), generator=self.rng)).tolist()
        stop = [None if u < 0.3 else round(float(u), 2) for u in torch.rand(batch, generator=self.rng)]
        asked = replace(request, k=max(row_k), row_k=row_k, stop_below=stop, want_confidence=True)
        proposal = self.inner.propose(asked)
        self.calls.append((row_k, stop, proposal.confidence.tolist(), proposal.draft_len.tolist(),
                           proposal.tokens.shape[1]))
        return proposal


@pytest.mark.parametrize("kind", (*KINDS, "draft"))
def test_one_call_drafts_each_row_to_its_own_p_and_k_and_stays_lossless(kind, target, repeat_heads, llama_dir,
                                                                       draft_dir, reference):
    """Rows of one call with their own k and p (a switching engine's committed and decided rows):
    each row's length is min(its first draft below its p, that one included; its k), the passes
    the deepest row's, and greedy output stays the target's."""
    if kind == "draft":
        engine, _ = load_engine(llama_dir, "draft", draft_dir, k=4, max_batch_size=4, max_seq_len=128)
        rules = engine.proposer = _PerRowRules(engine.proposer, 4)
        assert generate(engine, 4) == reference
    else:
        config = ProposerConfig(kind, 4, 4, Engine.cache_capacity(MAX_SEQ_LEN, 4), repeat_heads[kind])
        engine = Engine(target, create_proposer(config, target), 4, 4, MAX_SEQ_LEN)
        rules = engine.proposer = _PerRowRules(engine.proposer, 4)
        prompts = prompts_of(BATCHES["batch4"], seed=4)
        assert run(engine, prompts, 30) == run(Engine(target, None, 4, 4, MAX_SEQ_LEN), prompts, 30)
    assert rules.calls
    for row_k, stop, confidence, lengths, passes in rules.calls:
        for k, p, row, length in zip(row_k, stop, confidence, lengths):
            below = [j for j, value in enumerate(row) if p is not None and value < p]
            assert length == min(below[0] + 1 if below else k, k)
        assert passes == max(lengths)
    assert len({length for *_, lengths, _ in rules.calls for length in lengths}) > 2


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
