"""Load a Hugging Face model directory: ``config.json`` + ``*.safetensors`` (sharded too).

Pickle checkpoints (``*.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``) are refused: unpickling runs
arbitrary code. Convert them once: a model with transformers' ``save_pretrained(safe_serialization=True)``,
a drafting head (whose tensors transformers would rename) with ``safetensors.torch.save_file``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from specscope.fileio import usual_mode
from specscope.reading import read_json, read_json_object
from specscope.engine.config import ModelConfig
from specscope.engine.model import Transformer
from specscope.errors import SpecscopeError

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
IGNORED_KEYS = ("rotary_emb.inv_freq",)


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise SpecscopeError(f"--dtype: expected one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


def parse_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N`` as a device (whether this machine has it: :func:`resolve_device`)."""
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda") or (device.type == "cpu" and device.index not in (None, 0)):
        raise SpecscopeError(f"--device: expected cpu or cuda[:N], got {name!r}")
    return device


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N`` as a device, checking that CUDA is there when asked."""
    device = parse_device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SpecscopeError(f"--device {name}: no CUDA device is available")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise SpecscopeError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA devices (cuda:0 …)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def weight_files(model_dir: Path) -> list[Path]:
    """The safetensors files of ``model_dir``, from the shard index when there is one."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = read_json(index)["weight_map"]
        except (KeyError, TypeError) as error:
            raise SpecscopeError(
                f"{index}: expected a JSON object with 'weight_map' ({error})"
            ) from None
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) and f for f in weight_map.values()):
            raise SpecscopeError(f"{index}: field 'weight_map': expected an object of tensor name → shard file name")
        names = {os.path.normpath(name) for name in weight_map.values()}  # ./a.safetensors is a.safetensors
        files = [model_dir / name for name in sorted(names)]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise SpecscopeError(f"{index}: shard files missing: {', '.join(missing)}")
        single = model_dir / "model.safetensors"
        if single.is_file() and single not in files:  # transformers reads the single file, this index's shards
            raise SpecscopeError(f"{model_dir}: holds model.safetensors beside a shard index that does not list it "
                                 f"({index.name}): two sets of weights; remove one")
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        return files
    pickles = sorted(p.name for p in model_dir.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise SpecscopeError(
            f"{model_dir}: only pickle checkpoints found ({', '.join(pickles)}); they are refused "
            "because loading them can run arbitrary code. Convert once: a model with transformers, "
            "model.save_pretrained(dir, safe_serialization=True); a drafting head as its authors publish it (EAGLE, "
            "EAGLE-3, MTP: transformers would rename or drop its tensors) with safetensors, "
            "safetensors.torch.save_file(torch.load(FILE, weights_only=True), DIR + '/model.safetensors')"
        )
    raise SpecscopeError(f"{model_dir}: no *.safetensors weights found")


def load_state_dict(
    model_dir: Path, device: torch.device | str, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    found: dict[str, Path] = {}  # tensor name → the file that held it
    for path in weight_files(model_dir):
        try:
            tensors = load_file(str(path), device=str(device))
        except (SafetensorError, OSError) as error:
            raise SpecscopeError(f"{path}: not a readable safetensors file ({error})") from None
        for name, tensor in tensors.items():
            if name.endswith(IGNORED_KEYS):
                continue
            if name in found:  # one would silently replace the other
                raise SpecscopeError(f"{path}: weight {name!r} is also in {found[name].name}: expected each "
                                     "weight in one file (a stray copy in the folder?)")
            found[name] = path
            state[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
            if state[name].is_floating_point() and not bool(torch.isfinite(state[name]).all()):  # its logits: NaN
                raise SpecscopeError(f"{path}: weight {name!r} holds values that are not finite in {dtype} (NaN or "
                                     "±inf: a corrupted or diverged checkpoint, or one too large for this dtype)")
    return state


def save_weights(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to the safetensors file ``path``, readable as any new file under the
    umask (safetensors' ``save_file`` makes it 0600: a checkpoint others could not load)."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    os.chmod(path, usual_mode())


def name_mismatch(expected: set[str], got: set[str]) -> str:
    """The tensor names ``got`` lacks from ``expected`` and those it adds, the first five of each
    ("missing [...], unexpected [...]"); empty where they agree."""
    missing, unexpected = sorted(expected - got), sorted(got - expected)
    if not missing and not unexpected:
        return ""
    return (f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")


def holding_file(model_dir: Path, name: str) -> Path:
    """The weight file of ``model_dir`` that holds tensor ``name`` (its headers read), for an error
    to name the shard at fault; ``model_dir`` itself where none holds it under that name."""
    from safetensors import safe_open

    for path in weight_files(model_dir):
        with safe_open(str(path), "pt") as weights:
            if name in weights.keys():
                return path
    return Path(model_dir)


def _predicts_next_n(model_dir: Path) -> bool:
    """Whether ``model_dir``'s config declares an MTP module (``num_nextn_predict_layers`` >= 1)."""
    count = read_json(Path(model_dir) / "config.json").get("num_nextn_predict_layers")
    return type(count) is int and count >= 1


HEAD_WEIGHTS = ("fc.", "midlayer.", "eh_proj.", "enorm.", "hnorm.")  # an EAGLE, EAGLE-3 or MTP head's own modules


def _head_hint(state: dict) -> str:
    """What to say where a whole model's weights were expected and ``state`` looks like a drafting
    head's (a head's fusing modules, and no second decoder layer)."""
    if any(f".{part}" in f".{name}" for name in state for part in HEAD_WEIGHTS) \
            and not any(".layers.1." in name for name in state):
        return ("; the weights look like an EAGLE, EAGLE-3 or MTP head, not a whole model: a head is given with "
                "--draft beside --method eagle, eagle3 or mtp (study: --eagle, --eagle3, --mtp)")
    return ""


def load_model(
    model_dir: Path, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> Transformer:
    """Build the :class:`Transformer` described by ``model_dir/config.json`` with its weights."""
    config = ModelConfig.from_dir(model_dir)
    state = whole = load_state_dict(model_dir, device, dtype)
    module = f"model.layers.{config.num_layers}."  # a DeepSeek-style MTP module stored after the layers: the mtp proposer's
    if any(name.startswith(module) for name in state) and _predicts_next_n(model_dir):
        state = {name: tensor for name, tensor in state.items() if not name.startswith(module)}
    with torch.device("meta"):
        model = Transformer(config)
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        head, embedding = state.pop("lm_head.weight", None), state.get("model.embed_tokens.weight")
        if head is not None and embedding is None:
            raise SpecscopeError(f"{model_dir}: config.json ties the LM head to the embeddings (tie_word_embeddings), "
                                 "and the weights hold lm_head.weight but no model.embed_tokens.weight to tie it to"
                                 + _head_hint(whole))
        if head is not None and (head.shape != embedding.shape or not torch.equal(head, embedding)):
            raise SpecscopeError(f"{model_dir}: config.json ties the LM head to the embeddings (tie_word_embeddings), "
                                 "but the weights hold another lm_head.weight, which tying would drop: set "
                                 "tie_word_embeddings to false to use it, or remove it to tie")
        expected.discard("lm_head.weight")
    mismatch = name_mismatch(expected, set(state))
    if mismatch:
        raise SpecscopeError(f"{model_dir}: weights do not match config.json ({config.model_type}): {mismatch}"
                             + _head_hint(whole))
    for name, tensor in state.items():
        want = model.get_parameter(name).shape
        if not tensor.is_floating_point():
            raise SpecscopeError(f"{holding_file(model_dir, name)}: weight {name!r} is {tensor.dtype}: expected a "
                                 "floating-point tensor")
        if tensor.shape != want:
            raise SpecscopeError(
                f"{holding_file(model_dir, name)}: weight {name!r} has shape {tuple(tensor.shape)}, "
                f"config implies {tuple(want)}"
            )
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    log.info(
        "loaded %s (%s, %d layers) on %s as %s",
        model_dir,
        config.model_type,
        config.num_layers,
        device,
        dtype,
    )
    return model.eval().requires_grad_(False)


def load_eos_token_ids(model_dir: Path) -> list[int]:
    """End-of-sequence ids from ``generation_config.json``, else ``config.json`` (int or list),
    each a token of the model's vocabulary (``config.json``'s ``vocab_size``): an id past it is
    never sampled, and every output would run to its token limit."""
    config = Path(model_dir) / "config.json"
    vocab = read_json_object(config).get("vocab_size") if config.is_file() else None
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None
    for name in ("generation_config.json", "config.json"):
        path = Path(model_dir) / name
        if path.is_file():
            value = read_json_object(path).get("eos_token_id")
            if value is None:
                continue
            ids = value if isinstance(value, list) else [value]
            if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise SpecscopeError(f"{path}: field 'eos_token_id': expected a token id or a list of token ids "
                                     f"(integers >= 0), got {value!r}")
            outside = [i for i in ids if vocab is not None and i >= vocab]
            if outside:
                raise SpecscopeError(f"{path}: field 'eos_token_id': {outside[0]} is no token of the model "
                                     f"(vocab_size {vocab} in {config})")
            return ids
    return []


def load_tokenizer(model_dir: Path):
    """The ``tokenizers.Tokenizer`` of ``model_dir/tokenizer.json``, or ``None`` without one."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # the tokenizers library raises a bare Exception on bad files
        raise SpecscopeError(f"{path}: not a readable tokenizer ({error})") from None


def check_same_tokenizer(target_dir: Path, draft_dir: Path) -> None:
    """Refuse a drafter whose ``tokenizer.json`` gives a token another id than the target's, or an
    id another token (where both have one): its drafts would be other tokens than it means. Ids
    and tokens only one of them has (added or padding tokens) are no conflict."""
    target, draft = load_tokenizer(target_dir), load_tokenizer(draft_dir)
    if target is None or draft is None:
        return
    ours, theirs = target.get_vocab(), draft.get_vocab()
    meaning = {index: token for token, index in theirs.items()}  # the draft's id → token
    moved = [token for token, index in ours.items()
             if theirs.get(token, index) != index or meaning.get(index, token) != token]
    if moved:
        raise SpecscopeError(f"{Path(draft_dir) / 'tokenizer.json'}: {len(moved)} tokens differ in id or meaning from "
                             f"{Path(target_dir) / 'tokenizer.json'} (e.g. {moved[0]!r}): a drafter must share the "
                             "target's tokenizer")
