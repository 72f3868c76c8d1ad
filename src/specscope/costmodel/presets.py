"""Hardware and model presets: GPU peaks and transformer shapes, from names or HF config.json.

A :class:`ModelShape` holds what a roofline or memory estimate needs: layer count, widths and
vocabulary. ``ModelShape.resolve("llama3.1-8b")`` takes a preset name; a path to a directory
or a ``config.json`` file takes a Hugging Face config instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specscope.errors import SpecscopeError
from specscope.reading import read_json_object
from specscope.trace.fields import Fields

MAX_SIZE = 1 << 24  # any size of a config.json (hidden, layers, heads, vocab): beyond it a typo whose bytes overflow
UNPRICED = {  # config.json fields of layers a ModelShape cannot price → what they declare
    "num_local_experts": "a mixture of experts",  # Mixtral
    "num_experts": "a mixture of experts",  # Qwen2-MoE, Qwen3-MoE
    "n_routed_experts": "a mixture of experts",  # DeepSeek-V2/V3
    "moe_num_experts": "a mixture of experts",  # ERNIE-4.5
    "kv_lora_rank": "latent attention (a compressed KV cache)",  # DeepSeek-V2/V3
    "hybrid_override_pattern": "state-space (Mamba) layers beside attention",  # Nemotron-H
    "ssm_state_size": "state-space (Mamba) layers",  # Mamba, Jamba, Nemotron-H
    "mamba_d_state": "state-space (Mamba) layers",  # Falcon-H1
}
BF16_BYTES = 2  # bytes of a 16-bit value (BF16/FP16): a weight's by default, a cached value's
WIDE_DTYPES = ("bfloat16", "float16", "float32")  # a config's torch_dtype served in 16 bits (vLLM's --dtype auto)
PRICED_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "granite", "gemma", "gemma2", "gemma3", "gemma3_text")
# decoders whose layers this shape prices (attention, a gated MLP of three matrices, RMS norms); a config without
# model_type is taken as Llama's. GPT-NeoX/Pythia, Phi-1/2, GPT-2, Falcon and the like have a two-matrix MLP (3·h·f
# would price Pythia-6.9B at 9.0 B parameters, not 6.9 B), vision-language models a tower beside: both refused
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "gemma3_text")  # model types whose config omits tie_word_embeddings
# when they tie (transformers' default for them is true; for Llama, Qwen, Mistral, Phi it is false)


@dataclass(frozen=True)
class Hardware:
    """One accelerator: dense BF16 peak FLOP/s, HBM bandwidth (bytes/s) and memory (bytes)."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float


HARDWARE: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware("h100", 989e12, 3.35e12, 81559 * 2**20),  # memory as nvidia-smi counts it: "80 GB", 81559 MiB
        Hardware("h200", 989e12, 4.8e12, 143771 * 2**20),  # "141 GB": 143771 MiB
        Hardware("a100", 312e12, 2.04e12, 81920 * 2**20),  # "80 GB": 81920 MiB
    )
}


def slides(config: dict) -> bool:
    """Whether some attention layer of a ``config.json`` reads only the last ``sliding_window``
    positions: a window is set and not switched off (``use_sliding_window`` false, transformers'
    default for Qwen2 and Qwen3), and, where ``layer_types`` lists the layers, one of them is
    ``sliding_attention`` (Gemma 2 and 3 interleave them with full attention). A window no shorter
    than ``max_position_embeddings`` never slides (Phi-3-mini-128k's 262144 over 131072 positions)."""
    window, positions = config.get("sliding_window"), config.get("max_position_embeddings")
    if not window:
        return False
    if isinstance(window, int) and isinstance(positions, int) and window >= positions:
        return False
    if not config.get("use_sliding_window", config.get("model_type") not in ("qwen2", "qwen3")):
        return False
    types = config.get("layer_types")
    return not isinstance(types, list) or "sliding_attention" in types


def projection_biases(model_type: str, attention_bias: bool) -> tuple[bool, bool]:
    """Whether a config's (q/k/v, o) projections carry biases: Qwen2's q/k/v always and its o
    never, whatever ``attention_bias`` says (as Hugging Face builds it); else all four as
    ``attention_bias`` says (Llama's)."""
    return model_type == "qwen2" or attention_bias, model_type != "qwen2" and attention_bias


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer (Llama / Qwen family).

    ``num_heads`` query heads and ``num_kv_heads`` key/value heads of ``head_dim`` each (GQA);
    a SwiGLU MLP of width ``intermediate_size``; the LM head shares the embedding when
    ``tie_word_embeddings``; ``qk_norm`` adds RMSNorms over each query and key head (Qwen3);
    ``qkv_bias``, ``o_bias`` and ``mlp_bias`` add the projections' biases (Qwen2: q, k and v;
    ``attention_bias``: all four; ``mlp_bias``: the MLP's three).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qk_norm: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    weight_dtype_bytes: int = BF16_BYTES  # bytes per weight as the checkpoint stores them: 2 (BF16/FP16), 1 (FP8)

    def layer_params(self) -> int:
        """Parameters of one decoder layer: attention projections (and q/k norms), SwiGLU MLP,
        two RMSNorms, and the biases the shape has."""
        h, d, f = self.hidden_size, self.head_dim, self.intermediate_size
        qkv = self.num_heads * d + 2 * self.num_kv_heads * d  # output features of q, k and v
        attention = h * qkv + self.num_heads * d * h
        biases = (qkv if self.qkv_bias else 0) + (h if self.o_bias else 0) + (2 * f + h if self.mlp_bias else 0)
        return attention + (2 * d if self.qk_norm else 0) + 3 * h * f + 2 * h + biases

    def params(self) -> int:
        """All parameters: embedding, layers, final norm and (untied) LM head."""
        embedding = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embedding
        return embedding + self.num_layers * self.layer_params() + self.hidden_size + lm_head

    def matmul_params(self) -> int:
        """Parameters that take part in a matmul per token (the embedding lookup does not)."""
        return self.num_layers * self.layer_params() + self.vocab_size * self.hidden_size

    def weight_bytes(self, bytes_per_param: int | None = None) -> int:
        """Bytes of all weights at ``bytes_per_param``; by default as the checkpoint stores them —
        its layers at :attr:`weight_dtype_bytes`, its embedding and LM head in 16 bits (an FP8
        checkpoint keeps them so)."""
        if bytes_per_param is not None:
            return self.params() * bytes_per_param
        vocab = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)  # embedding (+ LM head)
        return (self.params() - vocab) * self.weight_dtype_bytes + vocab * BF16_BYTES

    def kv_bytes_per_token(self, bytes_per_value: int = BF16_BYTES) -> int:
        """Bytes of K and V cached for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_value

    @classmethod
    def from_hf_config(cls, config: dict, name: str = "hf-config") -> "ModelShape":
        """Build a shape from a Hugging Face ``config.json`` dictionary (``name``: where it came
        from, for errors). Sizes are positive integers; the query heads split evenly into the
        KV heads; without ``head_dim``, hidden_size splits evenly into the heads. A mixture of
        experts or latent attention (:data:`UNPRICED`), a model type outside :data:`PRICED_TYPES`
        and a multimodal model's config are refused."""
        spec = Fields(config, name)
        model_type = spec.text("model_type", optional=True) or ""
        if "vision_config" in config or "text_config" in config:
            raise spec.error("vision_config" if "vision_config" in config else "text_config",
                             "a multimodal model: its vision tower is not priced (and its weights would be "
                             "under-counted); give the language model's own config.json")
        for key, what in UNPRICED.items():  # named before the model type: the reason (Mixtral: its experts)
            value = config.get(key)
            if value is not None and not isinstance(value, bool) and value != 0 and value != 1:
                raise spec.error(key, f"{what} (got {value!r}): this shape prices dense layers and multi-head "
                                      "attention only, so its weight and KV bytes would be wrong")
        if model_type and model_type not in PRICED_TYPES:
            raise spec.error("model_type", f"{model_type!r}: this shape prices decoders with a gated MLP of three "
                                           f"matrices and RMS norms ({', '.join(PRICED_TYPES)}); other layers' "
                                           "weights would be mispriced")
        spec.boolean("use_sliding_window", False)  # checked: a switch of the window (slides)
        if slides(config):
            raise spec.error("sliding_window", f"sliding-window attention (a window of {config['sliding_window']!r} "
                                               "positions): this shape prices full attention, every cached token read "
                                               "and kept, so past the window its KV reads and bytes would be wrong")
        size = {key: spec.integer(key, minimum=1, maximum=MAX_SIZE) for key in
                ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size")}
        heads = size["num_attention_heads"]
        kv_heads = spec.integer("num_key_value_heads", optional=True, minimum=1, maximum=MAX_SIZE) or heads
        if heads % kv_heads:
            raise spec.error("num_key_value_heads", f"expected a divisor of num_attention_heads = {heads}, got {kv_heads}")
        head_dim = spec.integer("head_dim", optional=True, minimum=1, maximum=MAX_SIZE)
        if head_dim is None:
            if size["hidden_size"] % heads:
                raise spec.error("num_attention_heads", f"expected a divisor of hidden_size = {size['hidden_size']} "
                                                        f"(no head_dim given), got {heads}")
            head_dim = size["hidden_size"] // heads
        qkv_bias, o_bias = projection_biases(model_type, spec.boolean("attention_bias", False))
        return cls(
            name=name,
            num_layers=size["num_hidden_layers"],
            hidden_size=size["hidden_size"],
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=size["intermediate_size"],
            vocab_size=size["vocab_size"],
            tie_word_embeddings=spec.boolean("tie_word_embeddings", model_type in TIED_BY_DEFAULT),
            qk_norm=model_type.startswith("qwen3"),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=spec.boolean("mlp_bias", False),
            weight_dtype_bytes=_weight_bytes(spec),
        )

    @classmethod
    def resolve(cls, name_or_path: str | Path) -> "ModelShape":
        """A preset by name, or a HF ``config.json`` (or a directory holding one)."""
        key = str(name_or_path)
        if key in MODELS:
            return MODELS[key]
        path = Path(name_or_path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise SpecscopeError(
                f"{key}: not a model preset ({', '.join(MODELS)}) nor a config.json file"
            )
        return cls.from_hf_config(read_json_object(path), name=str(path.resolve()))  # read from anywhere



MODELS: dict[str, ModelShape] = {
    shape.name: shape
    for shape in (
        ModelShape("llama3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, False),
        ModelShape("llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256, False),
        ModelShape("llama3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, True),
        ModelShape("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, False, qk_norm=True),
        ModelShape("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, True, qk_norm=True),
    )
}


def hardware(name: str) -> Hardware:
    """A GPU preset by (case-insensitive) name."""
    try:
        return HARDWARE[name.lower()]
    except KeyError:
        raise SpecscopeError(f"unknown GPU {name!r}; expected one of {', '.join(HARDWARE)}") from None


def _weight_bytes(spec: Fields) -> int:
    """Bytes per weight of a checkpoint's ``config.json``: 1 where it is FP8 (``torch_dtype`` or
    ``dtype`` float8_*, a quantization_config of ``fp8`` or ``fbgemm_fp8``, or ``compressed-tensors``
    whose weights are 8-bit floats), else 2 — a float32 checkpoint too, which vLLM's ``--dtype auto``
    serves in 16 bits; a dtype of another name, or another quantization (int4 GPTQ, AWQ, …), is
    refused: its packed weights and scales are not priced. (FP8 matmuls are priced at the GPU's
    16-bit peak.)"""
    quantization = spec.obj.get("quantization_config")
    if isinstance(quantization, dict):
        method = quantization.get("quant_method")
        groups = quantization.get("config_groups") if isinstance(quantization.get("config_groups"), dict) else {}
        weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)]
        fp8 = method in ("fp8", "fbgemm_fp8") or method == "compressed-tensors" and bool(weights) and all(
            isinstance(w, dict) and w.get("num_bits") == 8 and w.get("type") == "float" for w in weights)
        if not fp8:
            raise spec.error("quantization_config", f"{method!r} quantized weights: this shape prices FP8 and 16-bit "
                                                    "weights only, so its weight bytes would be wrong")
        return 1
    key = "torch_dtype" if "torch_dtype" in spec.obj else "dtype"
    dtype = spec.obj.get(key)
    if dtype is not None and not (isinstance(dtype, str) and (dtype.startswith("float8_") or dtype in WIDE_DTYPES)):
        raise spec.error(key, f"expected a float8_* type or one of {', '.join(WIDE_DTYPES)}, got {dtype!r}")
    return 1 if isinstance(dtype, str) and dtype.startswith("float8") else BF16_BYTES
