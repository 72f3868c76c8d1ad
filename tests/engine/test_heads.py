"""EAGLE-1, EAGLE-3 and MTP heads: published layouts, shapes, cache mechanics and lossless SD.

Targets and heads are tiny random checkpoints written to tmp dirs (no downloads). Random heads
almost never agree with the target, so the lossless tests also use "repeat" heads: weights set
so that the head predicts the target's own last prediction again (its drafts are accepted
exactly where the target repeats a token), which gives ragged acceptance across rows and steps.
The head's cache bookkeeping is checked against drafts recomputed from scratch, and sampled SD
against the target's exact distribution (chi-square).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file
from scipy.stats import chisquare
from tiny_heads import write_random_eagle, write_random_eagle3, write_random_mtp
from tiny_checkpoints import llama_config, qwen3_config, write_checkpoint

from specscope.costmodel.memory import eagle3_params, eagle_params, mtp_params
from specscope.costmodel.presets import ModelShape
from specscope.engine.kv_cache import KVCache
from specscope.engine.loading import load_model
from specscope.engine.runner import Engine, SamplingParams
from specscope.errors import SpecscopeError
from specscope.proposers import PROPOSERS, ProposerConfig, create_proposer

VOCAB, HIDDEN, LAYERS, DRAFT_VOCAB = 24, 32, 4, 18
K, MAX_SEQ_LEN = 3, 96
KINDS = ("eagle", "eagle3", "mtp")


def write_head(kind: str, target_dir: Path, out_dir: Path, seed: int = 0) -> Path:
    if kind == "eagle":
        return write_random_eagle(target_dir, out_dir, seed)
    if kind == "eagle3":
        return write_random_eagle3(target_dir, out_dir, DRAFT_VOCAB, seed)
    return write_random_mtp(target_dir, out_dir, seed)


def make_repeat_head(kind: str, head_dir: Path, target_dir: Path, mix: float = 0.0) -> Path:
    """Rewrite a random head so that it reads the target's final hidden state and its MLP
    output is zero. With ``mix == 0`` its attention output is zero and the token embedding is
    ignored: the head predicts the target's own last prediction again and again (a repeated
    token). ``mix > 0`` keeps the random attention and embedding weights scaled by ``mix``."""
    path = head_dir / "model.safetensors"
    tensors = load_file(str(path))
    eye = torch.eye(HIDDEN)
    for name in list(tensors):
        if name.endswith("down_proj.weight"):
            tensors[name] = torch.zeros_like(tensors[name])
        if name.endswith("o_proj.weight"):
            tensors[name] = mix * tensors[name]
    if kind == "eagle":  # fc: [embedding | hidden] halves; the target's LM head reads the output
        tensors["fc.weight"] = torch.cat((mix * tensors["fc.weight"][:, :HIDDEN], eye), 1)
        tensors["fc.bias"] = torch.zeros(HIDDEN)
    elif kind == "eagle3":  # fuse the final state (index L) three times, keep the first copy
        config = json.loads((head_dir / "config.json").read_text())
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [LAYERS] * 3}
        (head_dir / "config.json").write_text(json.dumps(config))
        tensors["fc.weight"] = torch.cat((eye, torch.zeros(HIDDEN, 2 * HIDDEN)), 1)
        tensors["norm.weight"] = torch.ones(HIDDEN)
        target_head = load_file(str(target_dir / "model.safetensors"))["lm_head.weight"]
        tensors["lm_head.weight"] = target_head[torch.arange(DRAFT_VOCAB) + tensors["d2t"]].clone()
    else:  # eh_proj: [enorm(embedding) | hnorm(hidden)]; unit norms keep the state's direction
        prefix = f"model.layers.{LAYERS}."
        proj = tensors[prefix + "eh_proj.weight"]
        tensors[prefix + "eh_proj.weight"] = torch.cat((mix * proj[:, :HIDDEN], eye), 1)
        tensors[prefix + "hnorm.weight"] = torch.ones(HIDDEN)
        tensors[prefix + "shared_head.norm.weight"] = torch.ones(HIDDEN)
    save_file(tensors, str(path))
    return head_dir


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and do not slow down on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("target")
    write_checkpoint(
        directory,
        llama_config(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=64,
            num_hidden_layers=LAYERS,
        ),
        seed=3,
    )
    return directory


@pytest.fixture(scope="module")
def target(target_dir):
    return load_model(target_dir)


@pytest.fixture(scope="module")
def random_heads(tmp_path_factory, target_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heads")
    return {kind: write_head(kind, target_dir, root / kind, seed=i) for i, kind in enumerate(KINDS)}


@pytest.fixture(scope="module")
def repeat_heads(tmp_path_factory, target_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("repeat")
    return {
        kind: make_repeat_head(kind, write_head(kind, target_dir, root / kind), target_dir)
        for kind in KINDS
    }


def proposer_for(kind: str, head_dir: Path, target, max_batch_size: int = 4):
    config = ProposerConfig(
        kind, K, max_batch_size, Engine.cache_capacity(MAX_SEQ_LEN, K), head_dir
    )
    return create_proposer(config, target)


def generate(
    target,
    proposer,
    prompts: list[list[int]],
    max_tokens: int,
    sampling: SamplingParams | None = None,
):
    """Run every prompt to ``max_tokens`` in one batch (greedy unless ``sampling``); returns
    the outputs and the engine."""
    sampling = sampling or SamplingParams()
    engine = Engine(target, proposer, K, len(prompts), MAX_SEQ_LEN)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, max_tokens, sampling, ignore_eos=True)
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    return [outputs[str(i)] for i in range(len(prompts))], engine


def prompts_of(lengths: tuple[int, ...], seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def layer_names(prefix: str, input_norm: bool = True) -> set[str]:
    """Tensor names of one Llama decoder layer under ``prefix``."""
    names = {f"{prefix}self_attn.{p}_proj.weight" for p in "qkvo"}
    names |= {f"{prefix}mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    names.add(f"{prefix}post_attention_layernorm.weight")
    if input_norm:
        names.add(f"{prefix}input_layernorm.weight")
    return names


PUBLISHED_NAMES = {
    "eagle": {"fc.weight", "fc.bias"} | layer_names("layers.0.", input_norm=False),
    "eagle3": {
        "fc.weight",
        "norm.weight",
        "lm_head.weight",
        "d2t",
        "t2d",
        "midlayer.hidden_norm.weight",
    }
    | layer_names("midlayer."),
    "mtp": {
        f"model.layers.{LAYERS}.{name}"
        for name in {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"}
        | layer_names("")
    },
}


def reference_drafts(head, target, history: list[int]) -> list[int]:
    """Greedy drafts recomputed from scratch: the target without a cache over the committed
    tokens, then the head over the whole sequence at once on a fresh cache."""
    n = len(history) - 1  # position of the newest token
    tokens = torch.tensor([history])  # [1, n+1]
    _, states = target(tokens[:, :n], torch.arange(n)[None], hidden_layers=head.target_layers)
    cache = KVCache(head.config, 1, n + K, target.dtype, target.device)
    out = head(tokens[:, 1:], head.fuse(states), torch.arange(n)[None], cache, [0], n)  # [1, n, h]
    state, drafts = out[:, -1], []
    for i in range(K):
        token = head.logits(state).argmax(-1)  # [1]
        drafts.append(int(token))
        state = head(
            token[:, None], state[:, None], torch.tensor([[n + i]]), cache, [0], n + i + 1
        )[:, 0]
    return drafts


def test_registered():
    assert set(KINDS) <= set(PROPOSERS)


BATCHES = {"batch1": (7,), "batch4": (5, 11, 2, 8), "batch8": (5, 11, 2, 8, 3, 13, 6, 9)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", BATCHES)
def test_greedy_sd_equals_plain_greedy(kind, batch, target, repeat_heads, random_heads):
    prompts = prompts_of(BATCHES[batch], seed=4)
    plain, _ = generate(target, None, prompts, max_tokens=30)
    outputs, _ = generate(
        target, proposer_for(kind, random_heads[kind], target, len(prompts)), prompts, 30
    )
    assert outputs == plain
    outputs, engine = generate(
        target, proposer_for(kind, repeat_heads[kind], target, len(prompts)), prompts, 30
    )
    assert outputs == plain
    # ragged acceptance: some drafts at every position accepted, but not all of them
    stats = engine.stats
    assert min(stats.num_accepted_tokens_per_pos) > 0
    assert stats.num_accepted_tokens < stats.num_draft_tokens


@pytest.mark.parametrize("kind", KINDS)
def test_drafts_equal_recomputation_from_scratch(kind, tmp_path, target_dir, target):
    """Across steps (ragged chunks, stale cache entries of rejected drafts, a finished request's
    slot reused while others decode, rows in non-consecutive slots) every proposal equals the
    drafts recomputed from scratch."""
    head_dir = make_repeat_head(
        kind, write_head(kind, target_dir, tmp_path / kind, seed=5), target_dir, mix=0.3
    )
    proposer = proposer_for(kind, head_dir, target, max_batch_size=3)
    calls, propose = [], proposer.propose

    def recording(request):
        proposal = propose(request)
        calls.append(
            (request.slots, [list(h) for h in request.histories], proposal.tokens.tolist())
        )
        return proposal

    proposer.propose = recording
    engine = Engine(target, proposer, K, 3, MAX_SEQ_LEN)
    prompts = prompts_of((6, 10, 3, 5), seed=4)
    for i, max_tokens in enumerate((4, 16, 10)):
        engine.add_request(str(i), prompts[i], max_tokens, ignore_eos=True)
    while engine.num_running():
        engine.step()
        if engine.has_capacity() and engine.num_running() == 2 and len(calls) < 4:
            engine.add_request("3", prompts[3], 12, ignore_eos=True)  # takes the freed slot 0
    assert engine.stats.num_accepted_tokens > 0  # some chunks longer than one position
    assert any(slots == [1, 2, 0] for slots, _, _ in calls)
    head = proposer.head
    for _, histories, drafts in calls:
        assert [reference_drafts(head, target, h) for h in histories] == drafts


@pytest.mark.parametrize("kind", KINDS)
def shard(head_dir: Path, out_dir: Path) -> Path:
    """The same head saved as two safetensors shards with a ``model.safetensors.index.json``."""
    out_dir.mkdir()
    tensors = load_file(str(head_dir / "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        save_file({name: tensors[name] for name in part}, str(out_dir / f"model-{i}.safetensors"))
        weight_map.update(dict.fromkeys(part, f"model-{i}.safetensors"))
    (out_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (out_dir / "config.json").write_text((head_dir / "config.json").read_text())
    return out_dir


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_published_layout_round_trips(kind, sharded, tmp_path, target, random_heads):
    files = load_file(str(random_heads[kind] / "model.safetensors"))
    assert set(files) == PUBLISHED_NAMES[kind]
    head_dir = shard(random_heads[kind], tmp_path / "sharded") if sharded else random_heads[kind]
    loaded = proposer_for(kind, head_dir, target).head.state_dict()
    prefix = f"model.layers.{LAYERS}." if kind == "mtp" else ""
    for name, tensor in files.items():
        if name == "t2d":
            continue
        module = name.removeprefix(prefix)
        module = module if module in loaded else f"mtp_block.{module}"
        assert torch.equal(loaded[module], tensor), name
    assert len(loaded) == len(files) - (kind == "eagle3")  # t2d is checked, not kept


def test_head_shapes(target, random_heads):
    h, heads, kv_heads, d = HIDDEN, 4, 2, HIDDEN // 4
    eagle = proposer_for("eagle", random_heads["eagle"], target).head
    assert eagle.fc.weight.shape == (h, 2 * h) and eagle.fc.bias.shape == (h,)
    assert not hasattr(eagle.layers[0].input_layernorm, "weight")
    assert eagle.target_layers == (LAYERS,)
    eagle3 = proposer_for("eagle3", random_heads["eagle3"], target).head
    assert eagle3.target_layers == (2, LAYERS // 2, LAYERS - 3)
    assert eagle3.fc.weight.shape == (h, 3 * h)
    attn = eagle3.midlayer.self_attn
    assert attn.q_proj.weight.shape == (heads * d, 2 * h)
    assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (kv_heads * d, 2 * h)
    assert attn.o_proj.weight.shape == (h, heads * d)
    assert eagle3.lm_head.weight.shape == (DRAFT_VOCAB, h) and eagle3.d2t.shape == (DRAFT_VOCAB,)
    mtp = proposer_for("mtp", random_heads["mtp"], target).head
    assert mtp.eh_proj.weight.shape == (h, 2 * h) and mtp.target_layers == (LAYERS,)
    for head in (eagle, eagle3, mtp):
        assert head.config.num_layers == 1
        out = torch.randn(2, 5, h)
        assert head.logits(out).shape == (2, 5, VOCAB)
    draft_ids = torch.arange(DRAFT_VOCAB) + eagle3.d2t
    logits = eagle3.logits(torch.randn(3, h))  # [3, vocab]
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[draft_ids] = False
    assert torch.isinf(logits[:, outside]).all() and torch.isfinite(logits[:, draft_ids]).all()


def test_parameter_counts_match_memory_model(target_dir, target, random_heads):
    config = json.loads((target_dir / "config.json").read_text())
    shape = ModelShape.from_hf_config(config)

    def own_params(kind):
        return sum(
            p.numel() for p in proposer_for(kind, random_heads[kind], target).head.parameters()
        )

    assert own_params("eagle") == eagle_params(shape)
    assert own_params("eagle3") == eagle3_params(shape, DRAFT_VOCAB)
    assert own_params("mtp") == mtp_params(shape)


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_proposals(kind, target, random_heads):
    """In a sampling batch a head returns the distributions it drew from (EAGLE-3: no mass
    outside its draft vocabulary), and decoding runs to the end."""
    proposer = proposer_for(kind, random_heads[kind], target)
    seen, propose = [], proposer.propose

    def recording(request):
        proposal = propose(request)
        seen.append(proposal)
        return proposal

    proposer.propose = recording
    sampling = SamplingParams(temperature=0.8, top_p=0.95, seed=1)
    outputs, _ = generate(
        target, proposer, prompts_of((4, 9), seed=1), max_tokens=10, sampling=sampling
    )
    assert [len(o) for o in outputs] == [10, 10]
    head = proposer.head
    for proposal in seen:
        rows = proposal.tokens.shape[0]  # a row that finished early leaves the batch
        assert proposal.probs.shape == (rows, K, VOCAB)
        assert torch.allclose(proposal.probs.sum(-1), torch.ones(rows, K))
        assert (proposal.probs.gather(-1, proposal.tokens[..., None]) > 0).all()
        if kind == "eagle3":
            outside = torch.ones(VOCAB, dtype=torch.bool)
            outside[torch.arange(DRAFT_VOCAB) + head.d2t] = False
            assert (proposal.probs[..., outside] == 0).all()


ALPHA = 1e-3  # false-alarm rate of the chi-square test: a correct engine fails one seed in 1000


@pytest.mark.parametrize("kind", KINDS)
def test_sampled_sd_matches_target_distribution(kind, target, repeat_heads):
    """The first token an SD step emits (the second of the output) follows the target's own
    distribution, here with a head that is often accepted and whose distribution differs from
    the target's (EAGLE-3: zero outside its draft vocabulary, so recovered tokens are needed)."""
    prompt, batch, waves = [5, 9, 2, 7], 32, 50
    params = SamplingParams(temperature=1.0)
    proposer = proposer_for(kind, repeat_heads[kind], target, batch)
    engine = Engine(target, proposer, K, batch, MAX_SEQ_LEN, seed=11)
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    for wave in range(waves):
        for row in range(batch):
            engine.add_request(f"{wave}.{row}", prompt, 2, params, ignore_eos=True)
        prefilled = engine.step()  # the prefill: token 1 alone
        outputs = engine.step()  # one SD step: token 2 onwards
        assert all(len(out.new_token_ids) == 1 and not out.finished for out in prefilled)
        assert all(out.finished for out in outputs)
        for out in outputs:
            counts[out.new_token_ids[0]] += 1
    assert 0.3 < engine.stats.acceptance_rate() < 0.95  # both accepted and recovered tokens
    with torch.no_grad():  # P(t2) = sum over t1 of p(t1 | prompt) p(t2 | prompt, t1), exactly
        first = target.logits(target(torch.tensor([prompt]), torch.arange(4)[None])[0][0, -1])
        tokens = torch.tensor([prompt + [t] for t in range(VOCAB)])  # [VOCAB, 5]
        hidden = target(tokens, torch.arange(5).expand_as(tokens))[0][:, -1]
        second = target.logits(hidden).softmax(-1)  # [t1, t2]
        expected = (first.softmax(-1).double() @ second.double()) * counts.sum()  # [VOCAB]
    keep = expected >= 5  # pool sparse cells so that the chi-square approximation holds
    observed = torch.cat([counts[keep], counts[~keep].sum()[None]])
    expected = torch.cat([expected[keep], expected[~keep].sum()[None]])
    cells = expected > 0  # (the pooled cell is empty when no cell is sparse)
    observed, expected = observed[cells], expected[cells] * counts.sum() / expected.sum()
    assert chisquare(observed.numpy(), expected.numpy()).pvalue > ALPHA


@pytest.mark.parametrize("kind", ["eagle", "mtp"])
def test_checkpoint_copies_of_shared_tensors_are_used(
    kind, tmp_path, target_dir, target, repeat_heads
):
    """Published heads may carry copies of the target's embedding (and MTP its LM head): they
    are loaded as the head's own and, being copies, give the same drafts."""
    head_dir = tmp_path / kind
    head_dir.mkdir()
    (head_dir / "config.json").write_text((repeat_heads[kind] / "config.json").read_text())
    tensors = load_file(str(repeat_heads[kind] / "model.safetensors"))
    target_tensors = load_file(str(target_dir / "model.safetensors"))
    if kind == "eagle":
        tensors["embed_tokens.weight"] = target_tensors["model.embed_tokens.weight"].clone()
    else:  # DeepSeek-V3 style: the MTP module inside the target's own checkpoint, with copies
        prefix = f"model.layers.{LAYERS}."
        tensors[prefix + "embed_tokens.weight"] = target_tensors[
            "model.embed_tokens.weight"
        ].clone()
        tensors[prefix + "shared_head.head.weight"] = target_tensors["lm_head.weight"].clone()
        tensors.update(target_tensors)
    save_file(tensors, str(head_dir / "model.safetensors"))
    head = proposer_for(kind, head_dir, target).head
    assert "embed_tokens" in head._modules
    prompts = prompts_of((7, 4), seed=4)
    shared, _ = generate(target, proposer_for(kind, repeat_heads[kind], target), prompts, 20)
    copied, engine = generate(target, proposer_for(kind, head_dir, target), prompts, 20)
    assert copied == shared and engine.stats.num_accepted_tokens > 0


def test_qwen3_target(tmp_path):
    """Heads for a Qwen3 target (q/k norms, head_dim != hidden / heads, tied embeddings)."""
    target_dir = tmp_path / "qwen3"
    write_checkpoint(target_dir, qwen3_config(num_hidden_layers=3), seed=2)
    target = load_model(target_dir)
    prompts = prompts_of((6, 3), seed=0)
    plain, _ = generate(target, None, prompts, 12)
    for kind in KINDS:
        if kind == "eagle3":
            head_dir = write_random_eagle3(target_dir, tmp_path / kind, draft_vocab_size=40)
        else:
            head_dir = write_head(kind, target_dir, tmp_path / kind)
        outputs, _ = generate(target, proposer_for(kind, head_dir, target), prompts, 12)
        assert outputs == plain, kind


def rewrite(head_dir: Path, out_dir: Path, edit) -> Path:
    """Copy a head directory, applying ``edit(tensors, config)`` (in place) on the way."""
    out_dir.mkdir()
    tensors = load_file(str(head_dir / "model.safetensors"))
    config = json.loads((head_dir / "config.json").read_text())
    edit(tensors, config)
    save_file(tensors, str(out_dir / "model.safetensors"))
    (out_dir / "config.json").write_text(json.dumps(config))
    return out_dir


def _prefixed_without_maps(tensors: dict, config: dict) -> None:
    """Every tensor renamed ``model.*``, no d2t (a draft vocabulary the target's may leave it out):
    the maps' check read 'fc.weight' before the layout's and raised a KeyError (a review)."""
    renamed = {f"model.{name}": t for name, t in tensors.items() if name not in ("d2t", "t2d")}
    tensors.clear()
    tensors.update(renamed)
    config.update(draft_vocab_size=VOCAB)


BAD_HEADS = [
    ("eagle", lambda t, c: t.pop("fc.weight"), "missing ['fc.weight']"),
    ("eagle", lambda t, c: t.update(extra=torch.zeros(1)), "unexpected ['extra']"),
    (
        "eagle",
        lambda t, c: t.update({"fc.weight": torch.zeros(HIDDEN, HIDDEN)}),
        "'fc.weight' has shape",
    ),
    ("eagle", lambda t, c: c.update(num_hidden_layers=2), "'num_hidden_layers': expected 1"),
    ("eagle", lambda t, c: c.update(hidden_size=16), "'hidden_size': 16 differs"),
    ("eagle3", lambda t, c: t.update(t2d=~t["t2d"]), "'t2d' and 'd2t' disagree"),
    ("eagle3", lambda t, c: t.pop("d2t"), "'d2t' missing"),
    ("eagle3", _prefixed_without_maps, "tensors do not match the Eagle3Head layout: missing ['fc.weight'"),
    (
        "eagle3",
        lambda t, c: t.update(d2t=torch.zeros(DRAFT_VOCAB, dtype=torch.long) + VOCAB),
        "distinct ids",
    ),
    ("eagle3", lambda t, c: c.update(draft_vocab_size=VOCAB + 1), "'draft_vocab_size'"),
    ("eagle3", lambda t, c: c.update(draft_vocab_size=0), "'draft_vocab_size': expected an integer in 1..24, got 0"),
    (
        "eagle3",
        lambda t, c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2]}),
        "three indices",
    ),
    ("mtp", lambda t, c: c.pop("num_nextn_predict_layers"), "'num_nextn_predict_layers'"),
    ("mtp", lambda t, c: c.update(num_hidden_layers=LAYERS + 1), "no tensors named"),
    (  # named as the file stores it, in the file that holds it (it named the folder and the head's own name)
        "mtp",
        lambda t, c: t.update({f"model.layers.{LAYERS}.eh_proj.weight": torch.zeros(HIDDEN, HIDDEN)}),
        f"model.safetensors: tensor 'model.layers.{LAYERS}.eh_proj.weight' has shape",
    ),
]


@pytest.mark.parametrize("kind, edit, message", BAD_HEADS)
def test_bad_head_is_one_clear_error(kind, edit, message, tmp_path, target, random_heads):
    head_dir = rewrite(random_heads[kind], tmp_path / "bad", edit)
    with pytest.raises(SpecscopeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        proposer_for(kind, head_dir, target)


def test_pickle_heads_and_missing_directory_are_refused(tmp_path, target, random_heads):
    head_dir = tmp_path / "pickled"
    head_dir.mkdir()
    (head_dir / "config.json").write_text((random_heads["eagle"] / "config.json").read_text())
    (head_dir / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(SpecscopeError, match="pickle"):
        proposer_for("eagle", head_dir, target)
    for kind in KINDS:
        with pytest.raises(SpecscopeError, match="--draft"):
            proposer_for(kind, None, target)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_proposal_keeps_the_states_a_retry_needs(kind, target, repeat_heads):
    """One transient failure inside the head's forward (an out-of-memory, say) had already dropped
    every row's pending hidden states: the engine's retry of each row alone then failed for all
    ('propose for slot N before any target pass'). Kept until a proposal succeeds, the retries
    answer, and the output stays the target's."""
    prompts = prompts_of((5, 11, 2), seed=4)
    plain, _ = generate(target, None, prompts, max_tokens=12)
    engine = Engine(target, proposer_for(kind, repeat_heads[kind], target, len(prompts)), K, len(prompts), MAX_SEQ_LEN)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, 12, SamplingParams(), ignore_eos=True)
    outputs = {str(i): [] for i in range(len(prompts))}
    for _ in range(2):
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    head, calls = engine.proposer.head, []
    forward = head.forward

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        return forward(*args, **kwargs)

    head.forward = flaky
    with pytest.raises(RuntimeError, match="transient"):
        engine.step()
    for request_id in list(outputs):  # as serve retries a failed step: each row alone
        for out in engine.step(only={request_id}):
            outputs[out.request_id] += out.new_token_ids
    while engine.num_running():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
    assert [outputs[str(i)] for i in range(len(prompts))] == plain
