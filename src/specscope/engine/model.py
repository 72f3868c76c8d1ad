"""The decoder: Llama 2/3/3.1, Mistral, Qwen2/2.5 and Qwen3 in one module tree.

Module and parameter names equal the Hugging Face ones (``model.layers.0.self_attn.q_proj``,
...), so a checkpoint's state dict loads as it is. Every call gives explicit positions, so one
batch may hold sequences at different lengths; with a :class:`KVCache` each row reads and
writes its own cache slot.

Hidden-state indices follow transformers' ``output_hidden_states``: index ``i < num_layers``
is the residual stream entering layer ``i`` (``0`` = the token embeddings), index
``num_layers`` is the final, normed hidden state the LM head reads. EAGLE-1 and MTP heads take
index ``num_layers``; EAGLE-3 takes three indices such as ``(2, L // 2, L - 3)``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from specscope.engine.config import ModelConfig
from specscope.engine.kv_cache import KVCache, as_rows
from specscope.trees import TreeShape


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x²) + eps)``, computed in float32 as transformers does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE in the HF layout (first and second halves of each head pair up).
    ``x``: [batch, T, heads, head_dim]; ``cos``, ``sin``: [batch, T, 1, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """GQA attention; query heads ``h`` use key/value head ``h // (heads // kv_heads)``."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.layer, self.heads, self.kv_heads, self.head_dim = (
            layer,
            config.num_heads,
            config.num_kv_heads,
            d,
        )
        self.q_proj = nn.Linear(h, self.heads * d, bias=config.qkv_bias)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=config.qkv_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.heads * d, h, bias=config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(d, config.rms_norm_eps)
            self.k_norm = RMSNorm(d, config.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], ctx: "AttentionContext"
    ) -> torch.Tensor:
        batch, t, _ = x.shape
        q = self.q_proj(x).view(batch, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(batch, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(batch, t, self.kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotate(q, *rope), rotate(k, *rope)
        if ctx.cache is not None:
            k, v = ctx.cache.update(self.layer, ctx.rows, ctx.positions, k, v, ctx.kv_len)
        # Fold each KV head's query group into the query axis, so no key/value copy is made:
        # q [batch, kv_heads, group * T, head_dim] against k, v [batch, kv_heads, S, head_dim].
        group = self.heads // self.kv_heads
        q = q.view(batch, t, self.kv_heads, group, self.head_dim).permute(0, 2, 3, 1, 4)
        q = q.reshape(batch, self.kv_heads, group * t, self.head_dim)
        out = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), attn_mask=ctx.mask)
        out = out.view(batch, self.kv_heads, group, t, self.head_dim).permute(0, 3, 1, 2, 4)
        return self.o_proj(out.reshape(batch, t, self.heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, m, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(h, m, bias=bias)
        self.up_proj = nn.Linear(h, m, bias=bias)
        self.down_proj = nn.Linear(m, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], ctx: "AttentionContext"
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class AttentionContext:
    """What every layer of one forward pass shares: cache rows, positions, attention mask."""

    def __init__(
        self, cache: KVCache | None, rows, positions: torch.Tensor, kv_len: int, mask: torch.Tensor
    ) -> None:
        self.cache, self.rows, self.positions, self.kv_len, self.mask = cache, rows, positions, kv_len, mask

    @classmethod
    def build(
        cls,
        config: ModelConfig,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        slots: list[int] | None = None,
        kv_len: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> "AttentionContext":
        """The context for ``positions`` [batch, T]. With a ``cache``, row ``b`` uses slot
        ``slots[b]`` and attends to that slot's positions ``0..positions[b, t]`` (``kv_len``
        bounds the keys read); without one, rows attend only among their own tokens. The mask
        is additive (0 or −inf, in ``dtype``), built once per forward rather than per layer."""
        if cache is None:
            t = positions.shape[1]
            key_positions = positions[:, None, :]  # [batch, 1, T]
            rows, kv_len = None, t
        else:
            slots = list(range(positions.shape[0])) if slots is None else slots
            kv_len = int(positions.max()) + 1 if kv_len is None else kv_len
            key_positions = torch.arange(kv_len, device=positions.device)[None, None, :]  # [1, 1, S]
            rows = as_rows(slots, positions.device)
        visible = key_positions <= positions[:, :, None]  # [batch, T, S]
        return cls.from_visible(config, visible, cache, rows, positions, kv_len, dtype)

    @classmethod
    def from_visible(
        cls,
        config: ModelConfig,
        visible: torch.Tensor,
        cache: KVCache | None,
        rows,
        positions: torch.Tensor,
        kv_len: int,
        dtype: torch.dtype,
    ) -> "AttentionContext":
        """The context for any attention pattern: ``visible`` [batch, T, S] (bool) says which
        of the ``kv_len`` keys each query reads; with a ``cache``, ``positions`` [batch, T] are
        where the queries' keys and values are written (the rows' cache indices)."""
        batch, t, _ = visible.shape
        group = config.num_heads // config.num_kv_heads
        mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))
        mask = mask[:, None, None].expand(-1, -1, group, -1, -1).reshape(batch, 1, group * t, -1)
        return cls(cache, rows, positions, kv_len, mask)


    @classmethod
    def for_tree(
        cls,
        config: ModelConfig,
        tree: TreeShape,
        rows: range,
        base: list[int],
        cache: KVCache,
        slots: list[int],
        dtype: torch.dtype,
    ) -> tuple[torch.Tensor, "AttentionContext"]:
        """Tree attention over a static token tree (rows: 0 = root, i = ``tree.paths[i - 1]``).
        The queries are tree ``rows`` of every sequence: row i of sequence b sits at RoPE
        position ``base[b] + depth(i)``, writes its key/value at cache index ``base[b] + i``,
        and reads the committed keys below ``base[b]`` and the tree rows on its own root path
        (itself included). Returns the RoPE positions [batch, W] and the context."""
        device = cache.k.device
        ancestors, depths = _tree_tables(tree, device)
        kv_len = max(base) + rows.stop
        base_t = torch.tensor(base, device=device)  # [batch]
        relative = torch.arange(kv_len, device=device)[None, :] - base_t[:, None]  # [batch, S]
        queries = torch.arange(rows.start, rows.stop, device=device)  # [W]
        on_path = ancestors[queries][:, relative.clamp(0, tree.nodes)].transpose(0, 1)  # [batch, W, S]
        in_tree = (relative >= 0) & (relative <= tree.nodes)
        visible = (relative < 0)[:, None, :] | (in_tree[:, None, :] & on_path)
        write = base_t[:, None] + queries  # [batch, W]
        ctx = cls.from_visible(config, visible, cache, as_rows(slots, device), write, kv_len, dtype)
        return base_t[:, None] + depths[queries], ctx


@functools.lru_cache(maxsize=32)
def _tree_tables(tree: TreeShape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``tree.ancestors`` (bool) and ``tree.depths`` (long) as tensors on ``device``, made once."""
    return torch.from_numpy(tree.ancestors).to(device), torch.from_numpy(tree.depths).to(device)


class RotaryTables:
    """cos/sin tables of rotary embeddings for any positions, with the inverse frequencies
    kept per device."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [batch, T] -> (cos, sin), each [batch, T, 1, head_dim]."""
        device = positions.device
        if device not in self._inv_freq:
            self._inv_freq[device] = self.config.rope.inv_freq(self.config.head_dim).to(device)
        freqs = positions[..., None].float() * self._inv_freq[device]  # [batch, T, head_dim / 2]
        angles = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)


class Transformer(nn.Module):
    """A decoder-only transformer with an LM head (tied to the embedding when configured)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()
        self.rotary = RotaryTables(config)

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        slots: list[int] | None = None,
        kv_len: int | None = None,
        hidden_layers: tuple[int, ...] = (),
        ctx: AttentionContext | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run ``tokens`` [batch, T] at ``positions`` [batch, T].

        With a ``cache``, row ``b`` uses cache slot ``slots[b]`` and attends to that slot's
        positions ``0..positions[b, t]``; ``kv_len`` (host int, at least ``positions.max() + 1``)
        bounds the keys read. Without a cache the rows attend only among their own tokens.
        A prebuilt ``ctx`` (any attention pattern, e.g. :mod:`specscope.proposers.rollout`'s
        tree) replaces the one built from ``cache``/``slots``/``kv_len``; ``positions`` then
        only place the rotary embedding.
        Returns the final normed hidden state [batch, T, hidden] and the hidden states at
        ``hidden_layers`` (indices as in the module docstring), each [batch, T, hidden].
        """
        if ctx is None:
            ctx = AttentionContext.build(self.config, positions, cache, slots, kv_len, self.dtype)
        rope = self.rotary(positions, self.dtype)
        x = self.model.embed_tokens(tokens)
        wanted = set(hidden_layers)
        captured: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            if i in wanted:
                captured[i] = x
            x = layer(x, rope, ctx)
        x = self.model.norm(x)
        captured[self.config.num_layers] = x
        bad = [i for i in hidden_layers if i not in captured]
        if bad:
            raise ValueError(f"hidden layer indices {bad} outside 0..{self.config.num_layers}")
        return x, [captured[i] for i in hidden_layers]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head: [..., hidden] -> float32 logits [..., vocab]."""
        return self.lm_head(hidden).float()
