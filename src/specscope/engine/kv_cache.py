"""A static, position-indexed KV cache with one slot (and one length) per sequence.

Keys and values of slot ``s`` at position ``p`` live at ``k[layer, s, p]`` / ``v[layer, s, p]``
(``[layers, slots, capacity, kv_heads, head_dim]``). A forward pass writes the positions it
processes before attending, and a query at position ``p`` attends to positions ``0..p`` only.
So entries written for rejected draft tokens need no rollback: they sit beyond the sequence's
length, are never attended, and are overwritten when the sequence reaches those positions.
"""

from __future__ import annotations

import torch

from specscope.engine.config import ModelConfig
from specscope.errors import SpecscopeError


class KVCache:
    """``slots`` sequences of up to ``capacity`` positions each; ``lengths[s]`` = tokens cached."""

    def __init__(
        self,
        config: ModelConfig,
        slots: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (config.num_layers, slots, capacity, config.num_kv_heads, config.head_dim)
        try:
            self.k = torch.zeros(shape, dtype=dtype, device=device)
            self.v = torch.zeros(shape, dtype=dtype, device=device)
        except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
            size = 2 * torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
            raise SpecscopeError(
                f"KV cache for {slots} sequences x {capacity} positions ({size / 2**30:.1f} GiB) "
                f"could not be allocated on {device}: lower the batch size or the sequence length "
                f"({str(error).splitlines()[0][:80]})"
            ) from None
        self.capacity = capacity
        self.lengths = [0] * slots  # host-side: tokens of slot s whose keys/values are valid

    def update(
        self,
        layer: int,
        rows: slice | torch.Tensor,
        positions: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_len: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``/``v`` (``[batch, T, kv_heads, head_dim]``) at ``positions``
        (``[batch, T]``) of the slots ``rows`` and return the first ``kv_len`` positions of
        those slots (``[batch, kv_len, kv_heads, head_dim]``; views when ``rows`` is a slice)."""
        k_layer, v_layer = self.k[layer], self.v[layer]
        if isinstance(rows, slice):
            k_rows, v_rows = k_layer[rows], v_layer[rows]
            index = torch.arange(k.shape[0], device=k.device)[:, None]
            k_rows[index, positions] = k
            v_rows[index, positions] = v
            return k_rows[:, :kv_len], v_rows[:, :kv_len]
        k_layer[rows[:, None], positions] = k
        v_layer[rows[:, None], positions] = v
        return k_layer[rows, :kv_len], v_layer[rows, :kv_len]

    def move(self, slots: list[int], source: list[int], dest: list[int]) -> None:
        """Copy the keys/values of every layer at position ``source[i]`` of slot ``slots[i]`` to
        position ``dest[i]`` of the same slot (all read before any is written)."""
        if not slots:
            return
        device = self.k.device
        rows, src, dst = (torch.tensor(x, dtype=torch.long, device=device) for x in (slots, source, dest))
        self.k[:, rows, dst] = self.k[:, rows, src]
        self.v[:, rows, dst] = self.v[:, rows, src]


def as_rows(slots: list[int], device: torch.device | str) -> slice | torch.Tensor:
    """Cache rows for ``slots``: a slice when they are consecutive (no copy), else an index."""
    if slots == list(range(slots[0], slots[0] + len(slots))):
        return slice(slots[0], slots[0] + len(slots))
    return torch.tensor(slots, dtype=torch.long, device=device)
