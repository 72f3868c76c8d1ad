"""The decoder's configuration, read once from a Hugging Face ``config.json``.

Supported ``model_type`` values: ``llama`` (Llama 2/3/3.1, incl. ``llama3`` RoPE scaling),
``mistral``, ``qwen2`` (Qwen2 / Qwen2.5: biases on the q/k/v projections) and ``qwen3``
(RMSNorm over each head's queries and keys). All are the same pre-norm decoder: GQA attention
with RoPE, a SwiGLU MLP and RMSNorm, optionally an LM head tied to the embedding.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from specscope import validate
from specscope.costmodel.presets import projection_biases, slides
from specscope.errors import SpecscopeError
from specscope.fingerprint import file_sha256
from specscope.reading import read_json_object

if TYPE_CHECKING:
    import torch

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3")
MAX_SIZE = (1 << 31) - 1  # a config's sizes (vocabulary, widths, positions): beyond, a typo, not a model


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding: ``theta`` and an optional scaling rule (``rope_type``).

    ``linear`` divides every frequency by ``factor``; ``llama3`` (Llama 3.1) keeps the high
    frequencies, divides the low ones by ``factor`` and interpolates in between, using
    ``low_freq_factor``, ``high_freq_factor`` and ``original_max_position_embeddings``.
    """

    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def inv_freq(self, head_dim: int) -> "torch.Tensor":
        """Per-pair angular frequencies, float32 [head_dim // 2]."""
        import torch

        base = 1.0 / self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
        if self.rope_type == "linear":
            return base / self.factor
        if self.rope_type == "llama3":
            old = self.original_max_position_embeddings
            wavelen = 2 * math.pi / base
            smooth = (old / wavelen - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor
            )
            between = (1 - smooth) * base / self.factor + smooth * base
            scaled = torch.where(wavelen > old / self.low_freq_factor, base / self.factor, base)
            middle = (wavelen >= old / self.high_freq_factor) & (wavelen <= old / self.low_freq_factor)
            return torch.where(middle, between, scaled)
        return base


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of one decoder (names follow the HF config keys where they can)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = RopeConfig()
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    max_position_embeddings: int | None = None  # the longest sequence the model is made for

    @classmethod
    def from_hf(cls, data: dict, source: str = "config.json") -> "ModelConfig":
        """Build from a parsed HF ``config.json`` (``source`` names it in error messages): sizes
        are positive integers, ``rms_norm_eps`` and the RoPE numbers positive, flags true or false."""
        read = _Reader(data, source)
        model_type = data.get("model_type")
        if model_type not in MODEL_TYPES:
            raise SpecscopeError(
                f"{source}: field 'model_type': expected one of {', '.join(MODEL_TYPES)}, "
                f"got {model_type!r}"
            )
        if data.get("hidden_act", "silu") not in ("silu", "swish"):  # transformers' two names of one function
            raise SpecscopeError(f"{source}: field 'hidden_act': expected 'silu' (or 'swish'), got "
                                 f"{data.get('hidden_act')!r}")
        hidden = read.size("hidden_size")
        heads = read.size("num_attention_heads")
        head_dim = read.size("head_dim", default=0)
        if not head_dim:
            if hidden % heads:
                raise SpecscopeError(f"{source}: field 'num_attention_heads': expected a divisor of hidden_size "
                                     f"({hidden}) where no head_dim is given, got {heads}")
            head_dim = hidden // heads
        kv_heads = read.size("num_key_value_heads", default=heads)
        if heads % kv_heads:
            raise SpecscopeError(
                f"{source}: field 'num_key_value_heads': expected a positive divisor of "
                f"num_attention_heads ({heads}), got {kv_heads!r}"
            )
        read.flag("use_sliding_window")  # checked: a switch of the window (slides)
        window = (read.size("sliding_window", default=0) or None) if slides(data) else None
        qkv_bias, o_bias = projection_biases(model_type, read.flag("attention_bias"))
        return cls(
            model_type=model_type,
            vocab_size=read.size("vocab_size"),
            hidden_size=hidden,
            intermediate_size=read.size("intermediate_size"),
            num_layers=read.size("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=read.positive("rms_norm_eps", 1e-6),
            rope=_rope_from_hf(data, source),
            tie_word_embeddings=read.flag("tie_word_embeddings"),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=read.flag("mlp_bias"),
            qk_norm=model_type == "qwen3",
            sliding_window=window,
            max_position_embeddings=read.size("max_position_embeddings", default=0) or None,
        )

    @classmethod
    def from_dir(cls, model_dir: Path) -> "ModelConfig":
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise SpecscopeError(
                f"{model_dir}: expected a Hugging Face model directory with config.json"
            )
        return cls.from_hf(read_json_object(path), str(path))


def check_max_tokens(model_dir: Path, requests: Sequence, max_tokens: int, option: str = "--max-tokens") -> None:
    """Refuse ``--max-tokens`` (``option``: how the user set it) where the longest of
    ``requests`` (objects with ``id`` and ``prompt_token_ids``, and maybe the ``source`` of a
    workload's line) and ``max_tokens`` outputs would not fit the model's positions
    (``max_position_embeddings``), before any model is loaded; the error names that request."""
    limit = ModelConfig.from_dir(model_dir).max_position_embeddings
    if limit is None or not requests:
        return
    longest = max(requests, key=lambda request: len(request.prompt_token_ids))
    size = len(longest.prompt_token_ids)
    if size >= limit:  # no --max-tokens would do: the prompt is the problem
        source = getattr(longest, "source", "")
        raise SpecscopeError(f"{source + ': ' if source else ''}request {str(longest.id)!r}: its prompt ({size} "
                             "tokens) leaves no room for an output "
                             f"in the {limit} positions of {model_dir} (max_position_embeddings): shorten it, or leave "
                             "it out")
    if size + max_tokens > limit:
        raise SpecscopeError(f"{option} {max_tokens}: the longest prompt (request {str(longest.id)!r}, {size} "
                             f"tokens) and {max_tokens} output tokens exceed the {limit} positions of {model_dir} "
                             f"(max_position_embeddings); at most {limit - size}")


def _rope_from_hf(data: dict, source: str) -> RopeConfig:
    """Read RoPE settings from ``rope_parameters`` (transformers 5) or ``rope_theta`` +
    ``rope_scaling`` (older files, and most checkpoints on the hub)."""
    for key in ("rope_parameters", "rope_scaling"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise SpecscopeError(f"{source}: field {key!r}: expected an object, got {data[key]!r}")
    scaling, parameters = data.get("rope_scaling") or {}, data.get("rope_parameters") or {}
    clash = next((key for key in scaling.keys() & parameters.keys() if scaling[key] != parameters[key]), None)
    if clash is not None:  # transformers lets rope_scaling win, older readers rope_parameters: ambiguous
        raise SpecscopeError(f"{source}: fields 'rope_scaling' and 'rope_parameters' disagree on {clash!r} "
                             f"({scaling[clash]!r} against {parameters[clash]!r}): keep one of them")
    params = {**scaling, **parameters}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise SpecscopeError(
            f"{source}: field 'rope_scaling': rope type {rope_type!r} is not supported "
            f"(expected one of {', '.join(ROPE_TYPES)})"
        )
    defaults = RopeConfig()
    inside = "rope_parameters" if data.get("rope_parameters") else "rope_scaling"  # where params came from
    needed = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                                 "original_max_position_embeddings")}.get(rope_type, ())
    missing = [key for key in needed if params.get(key) is None]
    if missing:  # transformers refuses them too: a default would compute another model
        raise SpecscopeError(f"{source}: field '{inside}.{missing[0]}': missing (rope type {rope_type!r} needs "
                             f"{', '.join(needed)})")
    read = _Reader({"rope_theta": data.get("rope_theta"), **params}, source, f"{inside}.",
                   top=() if "rope_theta" in params else ("rope_theta",))
    return RopeConfig(
        theta=read.positive("rope_theta", defaults.theta),
        rope_type=rope_type,
        factor=read.positive("factor", defaults.factor),
        low_freq_factor=read.positive("low_freq_factor", defaults.low_freq_factor),
        high_freq_factor=read.positive("high_freq_factor", defaults.high_freq_factor),
        original_max_position_embeddings=read.size("original_max_position_embeddings",
                                                    default=defaults.original_max_position_embeddings),
    )


class _Reader:
    """Fields of a ``config.json`` object, each checked; an error names ``source`` and the field."""

    def __init__(self, data: dict, source: str, prefix: str = "", top: tuple[str, ...] = ()) -> None:
        self.data, self.source, self.prefix, self.top = data, source, prefix, top  # top: keys without the prefix

    def _label(self, key: str) -> str:
        return f"{self.source}: field '{'' if key in self.top else self.prefix}{key}'"

    def size(self, key: str, default: int | None = None) -> int:
        """A positive integer; ``default`` where absent or null (``None``: required)."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise SpecscopeError(f"{self._label(key)}: missing")
            return default
        if isinstance(value, str):  # a size written as text is a typo, not a number
            raise SpecscopeError(f"{self._label(key)}: expected a positive integer, got {value!r}")
        return validate.check(self._label(key), validate.integer, value, low=1, high=MAX_SIZE)

    def positive(self, key: str, default: float) -> float:
        """A finite number > 0; ``default`` where absent or null."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, str):
            raise SpecscopeError(f"{self._label(key)}: expected a positive number, got {value!r}")
        return validate.check(self._label(key), validate.number, value, low=0.0, low_open=True)

    def flag(self, key: str) -> bool:
        """true or false; false where absent or null."""
        value = self.data.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise SpecscopeError(f"{self._label(key)}: expected true or false, got {value!r}")
        return value


WEIGHT_SUFFIXES = (".safetensors", ".bin")


def model_fingerprint(model_dir: Path) -> str:
    """SHA-256 of ``config.json`` and the names and contents of the weight files of ``model_dir``
    (a model retrained into the same folder, its files the same size, is another model; a large
    file's content by samples, :func:`~specscope.fingerprint.file_sha256`)."""
    try:
        digest = hashlib.sha256((model_dir / "config.json").read_bytes())
    except OSError as error:
        raise SpecscopeError(f"{model_dir}: cannot read config.json ({error.strerror}; expected a Hugging Face "
                             "model directory)") from None
    for path in sorted(p for p in model_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES):
        digest.update(f"\n{path.name} {file_sha256(path, sampled=True)}".encode())
    return digest.hexdigest()


def check_context(config: ModelConfig, max_seq_len: int, what: str, positions: bool = True) -> None:
    """Refuse sequences of ``max_seq_len`` positions that ``config`` (of ``what``: the target, a
    draft model, a head) is not exact for: past its sliding window, which the engine does not
    implement (full attention past it computes another model), and, with ``positions``, past its
    ``max_position_embeddings`` (a drafter's few draft positions beyond the target's last are
    checked by the target's verification, not here)."""
    limit = config.max_position_embeddings
    if positions and limit is not None and max_seq_len > limit:
        raise SpecscopeError(f"engine: max_seq_len {max_seq_len} exceeds {what}'s max_position_embeddings ({limit})")
    window = config.sliding_window
    if window is not None and max_seq_len > window:
        raise SpecscopeError(f"engine: max_seq_len {max_seq_len} exceeds {what}'s sliding window ({window}); "
                             "sliding-window attention is not implemented, so only shorter sequences are exact")
