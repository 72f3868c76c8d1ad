"""Train the bundled models ("zoo") from scratch on the synthetic tasks, reproducibly.

Five checkpoints, all in Hugging Face layouts that :mod:`specscope.engine` and the proposers
load (written as float16 safetensors, ``torch_dtype: float16``):

- ``target``: a Llama decoder (tied embedding) trained on the answers of :mod:`specscope.workloads.tasks`;
- ``draft``: a smaller Llama decoder with the same tokenizer, trained the same way;
- ``eagle``: an EAGLE-1 head (``fc`` 2h→h + one decoder layer without input norm, the target's
  LM head) trained on the frozen target's final hidden states;
- ``mtp``: a DeepSeek-V3-style MTP module (``enorm``/``hnorm``/``eh_proj``/one block/
  ``shared_head.norm``, the target's LM head), trained the same way;
- ``eagle3``: an EAGLE-3 head (``fc`` 3h→h over three of the target's hidden states, a midlayer
  over [embedding; hidden], its own norm and LM head over the target's vocabulary), trained the
  same way.

The models are trained with the engine's own :class:`~specscope.engine.model.Transformer` and
head modules (their parameter names are the published ones), so what is trained is exactly
what is loaded. Loss: cross-entropy on answer tokens only (prompt and padding masked). Heads
learn the target's greedy token (its argmax, what greedy verification accepts); the EAGLE head
also regresses the target's next hidden state (smooth L1, as EAGLE-1 does). Each head step
runs a second, "training-time test" pass in which the head reads its own previous output
instead of the target's hidden state, as it does when drafting token 2..k.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text, refuse_foreign_folder
from specscope.fingerprint import file_sha256
from specscope.reading import read_json_object
from specscope.engine.config import ModelConfig
from specscope.engine.loading import save_weights
from specscope.engine.model import Transformer
from specscope.progress import LazyProgress
from specscope.proposers.eagle import EagleHead
from specscope.proposers.eagle3 import Eagle3Head
from specscope.proposers.heads import Head, one_layer, save_head
from specscope.proposers.mtp import MtpHead, published_name
from specscope.workloads import tasks
from specscope.zoo.config import Shape, TrainConfig
from specscope.zoo.shipped import WEIGHTS
from specscope.zoo.stream import IGNORE, Stream
from specscope.zoo.tokenizer import END, PAD, save_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


def hf_config(shape: Shape, vocab_size: int, end_id: int, pad_id: int, **extra) -> dict:
    """A transformers ``LlamaConfig`` dictionary for ``shape``."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size,
        "hidden_size": shape.hidden, "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads, "head_dim": shape.hidden // shape.heads,
        "hidden_act": "silu", "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "attention_bias": False,
        "mlp_bias": False, "eos_token_id": end_id, "pad_token_id": pad_id,
        "torch_dtype": "float16", **extra,
    }


def init_weights_(module: torch.nn.Module, num_layers: int, seed: int) -> None:
    """GPT-2-style init: N(0, 0.02) matrices, residual projections scaled by 1/√(2·layers),
    norms at 1, biases at 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            if param.dim() == 1:
                param.fill_(0.0 if name.endswith("bias") else 1.0)
                continue
            std = 0.02 / math.sqrt(2 * num_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            param.copy_(torch.randn(param.shape, generator=generator) * std)


def _schedule(step: int, steps: int, warmup: int) -> float:
    """Learning-rate factor: linear warm-up, then cosine decay to 10 %."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def _optimize(params, lr: float, steps: int, warmup: int, loss_of_batch, batch_iter, label: str) -> float:
    """AdamW over ``batch_iter``; returns the mean loss of the last 10 % of steps."""
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    tail: list[float] = []
    with LazyProgress(f"training {label}", steps) as bar:
        for step, batch in enumerate(batch_iter):
            _step(optimizer, params, lr * _schedule(step, steps, warmup), loss_of_batch, batch, step, steps, label, tail)
            bar.advance()
    return sum(tail) / max(1, len(tail))


def _step(optimizer, params, lr: float, loss_of_batch, batch, step: int, steps: int, label: str,
          tail: list[float]) -> None:
    """One optimiser step; the losses of the last 10 % of steps are appended to ``tail``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss = loss_of_batch(*batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    if step >= steps - max(1, steps // 10):
        tail.append(loss.item())
    if step % 100 == 0:
        log.info("%s step %d/%d loss %.4f", label, step, steps, loss.item())


def positions_for(tokens: torch.Tensor) -> torch.Tensor:
    return torch.arange(tokens.shape[1])[None, :].expand_as(tokens)  # [batch, T]


def train_lm(model: Transformer, stream: Stream, steps: int, config: TrainConfig, seed: int) -> float:
    """Train ``model`` (in place) on answer tokens; returns the final loss."""
    model.train().requires_grad_(True)

    def loss_of(tokens, labels):
        hidden, _ = model(tokens, positions_for(tokens))
        return F.cross_entropy(model.logits(hidden).flatten(0, 1), labels.flatten(), ignore_index=IGNORE)

    loss = _optimize(list(model.parameters()), config.lr, steps, config.warmup, loss_of,
                     stream.batches(steps, seed), f"lm{model.config.hidden_size}")
    model.eval().requires_grad_(False)
    return loss


def train_head(head: Head, target: Transformer, stream: Stream, steps: int,
               config: TrainConfig, seed: int, feature_weight: float) -> float:
    """Train ``head`` on the frozen target (see the module docstring); returns the final loss."""
    head.train()
    trainable = [p for p in head.parameters() if p.requires_grad]

    def loss_of(tokens, labels):
        with torch.no_grad():
            hidden, read = target(tokens, positions_for(tokens), hidden_layers=head.target_layers)  # [B, T, h]
            greedy = target.logits(hidden).argmax(-1)  # [B, T]: the target's next token
        # Entry p pairs token x[p+1] with h[p] (the head's fusion of the target states it reads:
        # EAGLE's and MTP's the final one as it is, EAGLE-3's three through its trained fc); its
        # output stands in for h[p+1] and predicts the target's token after x[p+1], i.e.
        # greedy[p+1]; kept where the target answers.
        inputs, states = tokens[:, 1:], head.fuse([state[:, :-1] for state in read])  # [B, T-1], [B, T-1, h]
        wanted = labels[:, 1:] != IGNORE  # [B, T-1]
        goal = greedy[:, 1:][wanted]
        positions = positions_for(inputs)
        slots = list(range(tokens.shape[0]))
        out = head(inputs, states, positions, None, slots, inputs.shape[1])  # [B, T-1, h]
        loss = F.cross_entropy(head.logits(out[wanted]), goal)
        if feature_weight:
            loss = loss + feature_weight * F.smooth_l1_loss(out[wanted], hidden[:, 1:][wanted])
        # Training-time test: read the head's own previous output instead of h[p].
        fed = torch.cat((states[:, :1], out[:, :-1]), dim=1)
        again = head(inputs, fed, positions, None, slots, inputs.shape[1])
        return loss + F.cross_entropy(head.logits(again[wanted]), goal)

    loss = _optimize(trainable, config.head_lr, steps, config.warmup, loss_of,
                     stream.batches(steps, seed), type(head).__name__)
    head.eval().requires_grad_(False)
    return loss


def eagle3_layers(num_layers: int) -> tuple[int, int, int]:
    """The target hidden-state indices the zoo's EAGLE-3 head fuses: low, middle and high, as the
    published default ``(2, L // 2, L - 3)`` picks them in a deep model (in the zoo's 4-layer
    target that default would read index 1 after index 2)."""
    return (1, num_layers // 2, num_layers - 1)


def _new_head(name: str, config: ModelConfig, target_hf: dict, layers: int) -> tuple[Head, dict]:
    """An untrained head of zoo stage ``name`` for a target of ``layers`` layers, and the
    ``config.json`` it is saved with (its published layout)."""
    if name == "eagle":
        return (EagleHead(config, layers, fc_bias=True, own_embedding=False),
                {**target_hf, "num_hidden_layers": 1, "architectures": ["EagleLlamaForCausalLM"]})
    if name == "mtp":
        return (MtpHead(config, layers, own_embedding=False, own_head=False),
                {**target_hf, "num_nextn_predict_layers": 1})
    aux = eagle3_layers(layers)  # the target's vocabulary: a d2t of zeros
    return (Eagle3Head(config, aux, config.vocab_size, norm_before_residual=False, own_embedding=False),
            {**target_hf, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLMEagle3"],
             "draft_vocab_size": config.vocab_size, "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux)}})


def save_model(model: Transformer, hf: dict, out_dir: Path, tokenizer) -> None:
    """``config.json``, ``generation_config.json``, float16 ``model.safetensors`` and the
    tokenizer files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {n: t.detach().to(torch.float16).contiguous() for n, t in model.state_dict().items()
             if n != "lm_head.weight"}  # tied to model.embed_tokens.weight
    save_weights(out_dir / WEIGHTS, state, metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(hf, indent=1) + "\n", encoding="utf-8")
    generation = {"eos_token_id": hf["eos_token_id"], "pad_token_id": hf["pad_token_id"]}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=1) + "\n", encoding="utf-8")
    save_tokenizer(tokenizer, out_dir)


def half(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Floating-point tensors as float16 (how the zoo ships); integer ones (EAGLE-3's ``d2t``) as they are."""
    return {n: t.detach().to(torch.float16) if t.is_floating_point() else t.detach() for n, t in state.items()}


HEADS = ("eagle", "mtp", "eagle3")  # the stages that learn from the trained target


def stage_keys(config: TrainConfig) -> dict[str, dict]:
    """What each stage's result depends on besides its inputs' files: a finished stage whose key is
    unchanged is kept when training resumes (every stage is seeded, so keeping it equals
    retraining it at the same thread count; another count moves the weights' last bits)."""
    shared = {k: getattr(config, k) for k in ("vocab_size", "tokenizer_corpus", "batch_size", "lr",
                                              "warmup", "seed", "tasks")}
    target = {**shared, "shape": asdict(config.target), "steps": config.target_steps}
    heads = {"target": target, "steps": config.head_steps, "lr": config.head_lr,
             "feature_weight": config.eagle_feature_weight}
    keys = {"target": target, "draft": {**shared, "shape": asdict(config.draft), "steps": config.draft_steps},
            "eagle": heads, "mtp": heads, "eagle3": heads}
    return json.loads(json.dumps(keys))  # as training.json holds them (tuples become lists)


def _finished_stages(record_path: Path) -> dict[str, dict]:
    """The stages ``training.json`` records as finished (none without the file); a file that is
    not one (hand-edited, or of something else) is a one-line error naming it."""
    if not record_path.is_file():
        return {}
    stages = read_json_object(record_path, "a zoo's training record (an object)").get("stages")
    if not isinstance(stages, dict) or not all(isinstance(stage, dict) for stage in stages.values()):
        raise SpecscopeError(f"{record_path}: field 'stages': expected the finished stages, an object of objects "
                             "(remove the file to train every stage again)")
    return stages


def train_zoo(out_dir: Path, config: TrainConfig, held_out: set[str]) -> dict[str, float]:
    """Train and write ``out_dir/{target,draft,eagle,mtp,eagle3}``; returns each stage's seconds and
    final loss (``NAME_seconds``, ``NAME_loss``, as recorded where kept) and whether it was kept
    (``NAME_kept``).

    Resumable: ``out_dir/training.json`` records each finished stage with its key
    (:func:`stage_keys`); a rerun keeps those. Heads train on the target as saved (float16,
    reloaded), i.e. exactly the target they will serve."""
    from specscope.engine.loading import load_model
    from specscope.zoo.tokenizer import SPECIAL_TOKENS

    torch.set_num_threads(config.threads)
    out_dir = Path(out_dir)
    record_path = out_dir / "training.json"
    refuse_foreign_folder(out_dir, record_path.name, "zoo")
    done = _finished_stages(record_path)
    keys = stage_keys(config)
    corpus = [text for task in config.tasks for ex in tasks.generate(task, config.tokenizer_corpus, config.seed + 1)
              for text in (ex.prompt, ex.reference)]
    tokenizer = train_tokenizer(corpus, config.vocab_size)
    vocab = tokenizer.get_vocab_size()
    end_id, pad_id = tokenizer.token_to_id(END), tokenizer.token_to_id(PAD)
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    stream = Stream(config, tokenizer, held_out)
    target_hf = hf_config(config.target, vocab, end_id, pad_id)
    layers = config.target.layers

    def finish(name: str, loss: float, started: float, **more: object) -> None:
        done[name] = {"key": keys[name], "loss": loss, "seconds": time.monotonic() - started,
                      "files_sha256": {p.name: file_sha256(p) for p in sorted((out_dir / name).iterdir()) if p.is_file()},
                      **more}
        atomic_write_text(record_path, json.dumps({"config": asdict(config), "stages": done}, indent=1) + "\n")

    def kept(name: str) -> bool:
        """A finished stage of this configuration whose files are still those it wrote (a folder
        removed, or a file of it changed or removed since — its tokenizer, its config — is trained
        again; a record from before the files were kept names the weights alone, or nothing). A
        head is kept only on the target it learned from: not once the target is trained again,
        nor where it records another target's weights."""
        stage, folder = done.get(name, {}), out_dir / name
        recorded = stage.get("files_sha256", {WEIGHTS: stage.get("weights_sha256"), "config.json": None})
        if name in HEADS and ("target" in trained or stage.get("target_sha256") not in (None, target_digest())):
            return False
        return stage.get("key") == keys[name] and isinstance(recorded, dict) and all(
            (folder / str(file)).is_file() and (digest is None or digest == file_sha256(folder / str(file)))
            for file, digest in recorded.items())

    def target_digest() -> str | None:
        return file_sha256(out_dir / "target" / WEIGHTS)

    trained: set[str] = set()  # the stages this run trains (the others kept)

    for name, shape, steps, seed in (("target", config.target, config.target_steps, config.seed),
                                     ("draft", config.draft, config.draft_steps, config.seed + 1)):
        if kept(name):
            log.info("%s: kept from %s", name, record_path)
            continue
        started = time.monotonic()
        torch.manual_seed(seed)
        hf = hf_config(shape, vocab, end_id, pad_id)
        model = Transformer(ModelConfig.from_hf(hf))
        init_weights_(model, shape.layers, seed)
        loss = train_lm(model, stream, steps, config, seed)
        save_model(model, hf, out_dir / name, tokenizer)
        finish(name, loss, started)
        trained.add(name)
    target = load_model(out_dir / "target")
    head_config = one_layer(ModelConfig.from_hf(target_hf))
    for name in HEADS:
        if kept(name):
            log.info("%s: kept from %s", name, record_path)
            continue
        started = time.monotonic()
        torch.manual_seed(config.seed + 2)
        head, hf = _new_head(name, head_config, target_hf, layers)
        init_weights_(head, 1, config.seed + 2)
        head.bind(target)
        loss = train_head(head, target, stream, config.head_steps, config, config.seed + 2,
                          feature_weight=config.eagle_feature_weight if name == "eagle" else 0.0)
        state = head.state_dict()
        if name == "mtp":
            state = {published_name(n, layers): t for n, t in state.items()}
        save_head(out_dir / name, hf, half(state))
        finish(name, loss, started, target_sha256=target_digest())
        trained.add(name)
    return {**{f"{name}_{field}": stage[field] for name, stage in done.items() for field in ("loss", "seconds")},
            **{f"{name}_kept": name not in trained for name in done}}
