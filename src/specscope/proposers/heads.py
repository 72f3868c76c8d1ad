"""What the EAGLE-1, EAGLE-3 and MTP heads share: the head base class, checkpoint I/O and the
proposer that drives any of them.

A head is one decoder layer that reads the target's hidden states. Its entry at position ``p``
combines the token ``x[p+1]`` with the target's hidden state ``h[p]`` (the state that predicted
``x[p+1]``); its output ``f[p]`` stands in for ``h[p+1]``, so the logits of ``f[p]`` predict
``x[p+2]``. Drafting after a target pass therefore runs:

1. one forward over the chunk of newly committed positions ``start..n-1`` (tokens
   ``x[start+1..n]``, where ``x[n]`` is the newest token, with the target's hidden states),
   whose last output gives draft ``d_1``;
2. ``k - 1`` single-token forwards: position ``n + i`` pairs ``d_{i+1}`` with the head's own
   previous output, giving ``d_{i+2}`` (the head reused autoregressively, as vLLM does).

After a prompt's prefill the chunk would be the whole prompt; the entries ``0..P-2`` only need
prompt tokens, so they are run right away when the prefill is observed (the head's own
prefill, timed as prefill as the draft model's is) and only entry ``P-1``, which pairs the first
generated token, waits for the first proposal.

The head keeps a one-layer KV cache indexed by position, like the target's: entries written for
drafts that are later rejected lie at positions the next chunk overwrites.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from specscope.engine.config import ModelConfig, check_context
from specscope.engine.kv_cache import KVCache
from specscope.engine.loading import holding_file, load_state_dict, name_mismatch, save_weights
from specscope.engine.model import AttentionContext, RotaryTables, Transformer
from specscope.errors import SpecscopeError
from specscope.reading import read_json_object
from specscope.engine.proposer_api import (
    Proposal,
    ProposeInput,
    ProposerConfig,
    RolloutInput,
    TargetPass,
    TreeProposal,
)
from specscope.proposers.chain_draft import draft_chain
from specscope.proposers.rollout import RolloutTree, roll_out
from specscope.proposers.tree_draft import draft_tree
from specscope.trees import TreeShape


class Head(nn.Module, ABC):
    """One decoder layer over [token embedding; target hidden state], with shared target parts.

    ``config`` describes the head's layer (``num_layers == 1``: it sizes the head's KV cache).
    The target's embedding is used unless the head registers its own ``embed_tokens`` (from a
    checkpoint that carries a copy of it).
    Subclasses define :meth:`run_layer` and :meth:`logits` (and :meth:`fuse` when the head reads
    several target layers); :meth:`forward` builds the RoPE tables and attention context once.
    """

    def __init__(self, config: ModelConfig, target_layers: tuple[int, ...]) -> None:
        super().__init__()
        self.config = config
        self.target_layers = target_layers  # target hidden-state indices the head reads
        self._target: tuple[Transformer, ...] = ()  # a tuple: the target is not a submodule
        self.rotary = RotaryTables(config)

    def bind(self, target: Transformer) -> Head:
        """Attach the target whose embedding (and LM head) the head shares."""
        self._target = (target,)
        return self

    @property
    def target(self) -> Transformer:
        if not self._target:
            raise RuntimeError(f"{type(self).__name__} is not bound to a target")
        return self._target[0]

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """[batch, T] -> [batch, T, hidden], with the head's own embedding if it has one."""
        own = self._modules.get("embed_tokens")
        return (own if own is not None else self.target.model.embed_tokens)(tokens)

    def fuse(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        """The target's hidden states (one per ``target_layers`` index) -> the head's input
        hidden state [batch, T, hidden]. Default: the single state as it is."""
        return hidden[0]

    def forward(
        self,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None,
        slots: list[int],
        kv_len: int,
        ctx: AttentionContext | None = None,
    ) -> torch.Tensor:
        """``tokens`` [batch, T] with ``hidden`` [batch, T, hidden] at ``positions`` [batch, T]
        -> the output [batch, T, hidden] that is fed back as the next hidden state. Cache
        conventions as in :meth:`Transformer.forward`, ``ctx`` included."""
        if ctx is None:
            ctx = AttentionContext.build(self.config, positions, cache, slots, kv_len, self.dtype)
        return self.run_layer(tokens, hidden, positions, self.rotary(positions, self.dtype), ctx)

    @abstractmethod
    def run_layer(
        self,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        ctx: AttentionContext,
    ) -> torch.Tensor:
        """The head's own layer on one forward's inputs (see :meth:`forward`), with the RoPE
        tables and attention context already made."""

    @abstractmethod
    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Head output [..., hidden] -> float32 logits over the target vocabulary [..., vocab]."""


def one_layer(config: ModelConfig) -> ModelConfig:
    """The head's layer configuration: the same shapes with ``num_layers == 1``."""
    return replace(config, num_layers=1)


def read_config(head_dir: Path) -> dict:
    """The raw ``config.json`` of a head directory."""
    path = Path(head_dir) / "config.json"
    if not path.is_file():
        raise SpecscopeError(f"{head_dir}: expected a head directory with config.json")
    return read_json_object(path)


def layer_config(head_dir: Path, data: dict, target: Transformer) -> ModelConfig:
    """Parse a head's ``config.json`` (a Llama / Qwen config) into its one-layer configuration,
    checking that it reads the target's hidden states and speaks its vocabulary."""
    config = ModelConfig.from_hf(data, f"{head_dir}/config.json")
    check_compatible(head_dir, config, target)
    return one_layer(config)


def check_compatible(head_dir: Path, config: ModelConfig, target: Transformer) -> None:
    """A head must read the target's hidden states and speak its vocabulary."""
    if config.hidden_size != target.config.hidden_size:
        raise SpecscopeError(
            f"{head_dir}/config.json: field 'hidden_size': {config.hidden_size} differs from the "
            f"target's {target.config.hidden_size}"
        )
    if config.vocab_size != target.config.vocab_size:
        raise SpecscopeError(
            f"{head_dir}/config.json: field 'vocab_size': {config.vocab_size} differs from the "
            f"target's {target.config.vocab_size}"
        )


def load_weights(head: Head, state: dict[str, torch.Tensor], source: Path,
                 stored: Callable[[str], str] = lambda name: name) -> None:
    """Assign ``state`` (names as in ``head.state_dict()``) to ``head``, checking names and
    shapes; a mismatch is one clear error naming the file and the tensor as ``source`` stores it
    (``stored``: a head's name → the file's, where the head renames what it reads)."""
    expected = head.state_dict()
    mismatch = name_mismatch(set(expected), set(state))
    if mismatch:
        raise SpecscopeError(f"{source}: tensors do not match the {type(head).__name__} layout: {mismatch}")
    for name, tensor in state.items():
        want = expected[name]
        if tensor.shape != want.shape:
            problem = f"has shape {tuple(tensor.shape)}, the config implies {tuple(want.shape)}"
        elif want.is_floating_point() and not tensor.is_floating_point():  # d2t/t2d maps are integers
            problem = f"is {tensor.dtype}: expected a floating-point tensor"
        else:
            continue
        # the file that holds it is looked up only now (its headers read)
        raise SpecscopeError(f"{holding_file(source, stored(name))}: tensor {stored(name)!r} {problem}")
    head.load_state_dict(state, assign=True)


def read_weights(head_dir: Path, target: Transformer) -> dict[str, torch.Tensor]:
    """All tensors of ``head_dir`` (safetensors, sharded or not; pickle refused), floats cast
    to the target's dtype, on the target's device."""
    return load_state_dict(Path(head_dir), target.device, target.dtype)


def save_head(out_dir: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (the published layout) to ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    save_weights(out_dir / "model.safetensors", {name: t.detach().contiguous() for name, t in tensors.items()})
    return out_dir


class HeadProposer:
    """Drives a :class:`Head` through the proposer protocol (see the module docstring).

    ``pending[slot] = (start, [hidden, …])``: the fused target hidden states (pieces of
    [n_i, hidden], one per target pass) of the committed positions from ``start`` on that the head
    has not consumed yet. They accumulate over the verification passes of steps the head did not
    draft for (a learned policy chose another proposer there), and its next ``propose`` joins
    them and runs them all in its first forward: the head catches up.
    """

    def __init__(self, name: str, head: Head, config: ProposerConfig, target: Transformer) -> None:
        check_context(head.config, config.sequence_len, f"the {name} head {config.draft_dir}", positions=False)
        self.name = name
        self.head = head
        self.hidden_layers = head.target_layers
        self.capacity = config.max_seq_len
        self.cache = KVCache(
            head.config, config.max_batch_size, config.max_seq_len, target.dtype, target.device
        )
        self.pending: dict[int, tuple[int, list[torch.Tensor]]] = {}
        self._read: set[int] = set()  # slots whose pending states a proposal read: dropped at their next target pass

    @torch.no_grad()
    def observe(self, target_pass: TargetPass) -> None:
        fused = self.head.fuse(target_pass.hidden)  # [batch, T, hidden]
        head_prefill = target_pass.prefill and fused.shape[1] > 1
        if head_prefill:  # entries 0..P-2; shorter rows write padding that later chunks overwrite
            width = fused.shape[1] - 1
            positions = torch.arange(width, device=fused.device)[None, :].expand(len(target_pass.slots), -1)
            self.head(target_pass.tokens[:, 1:], fused[:, :-1], positions, self.cache, target_pass.slots, width)
        for row, (slot, start, n) in enumerate(
            zip(target_pass.slots, target_pass.start, target_pass.num_committed)
        ):
            if slot in self._read:  # the states its last proposal read: that step went through
                self._read.discard(slot)
                self.pending.pop(slot, None)
            first = n - 1 if head_prefill else 0  # entries not run yet: first..n-1
            states = fused[row, first:n]  # [n - first, hidden]
            if slot in self.pending and not target_pass.prefill:  # no draft since: catch up later
                self.pending[slot][1].append(states.clone())  # a copy: the pass's whole tensor is not kept
            else:
                self.pending[slot] = (start + first, [states])

    def _chunk(
        self, request: ProposeInput
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """The first forward's inputs: each row's pending positions ``start..n-1`` pairing
        ``x[p+1]`` with ``h[p]``, right-padded. Padding continues at positions >= n (entries
        that later writes overwrite before anything reads them), clamped to the cache.
        Returns tokens [batch, W], hidden [batch, W, h], positions [batch, W], the index of
        each row's last real entry [batch], and the keys the forward reads (a host int: no
        device synchronisation on this hot path)."""
        device = request.last_tokens.device
        starts, chunks, token_rows = [], [], []
        for slot, history in zip(request.slots, request.histories):
            n = len(history) - 1  # the newest token's position
            if slot not in self.pending:
                raise RuntimeError(f"{self.name}: propose for slot {slot} before any target pass")
            start, pieces = self.pending[slot]  # dropped at its next target pass once read (:meth:`_consumed`)
            states = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
            if start + states.shape[0] != n:
                raise RuntimeError(
                    f"{self.name}: slot {slot} has states up to {start + states.shape[0]}, newest token at {n}"
                )
            starts.append(start)
            chunks.append(states)
            token_rows.append(history[start + 1 : n + 1])
        width = max(len(row) for row in token_rows)
        tokens = torch.tensor([row + [0] * (width - len(row)) for row in token_rows], device=device)
        hidden = nn.utils.rnn.pad_sequence(chunks, batch_first=True)  # [batch, width, h]
        start_t = torch.tensor(starts, device=device)
        positions = (start_t[:, None] + torch.arange(width, device=device)).clamp(
            max=self.capacity - 1
        )
        kv_len = min(max(starts) + width, self.capacity)
        return tokens, hidden, positions, request.positions - start_t - 1, kv_len

    @torch.no_grad()
    def propose(self, request: ProposeInput) -> Proposal:
        slots = request.slots
        tokens, hidden, positions, last, chunk_kv_len = self._chunk(request)
        out = self.head(tokens, hidden, positions, self.cache, slots, chunk_kv_len)
        kv_len = max(len(h) for h in request.histories)  # newest position + 1

        def advance(token: torch.Tensor, i: int, state: torch.Tensor) -> torch.Tensor:
            # position n + i pairs d_{i+1} with the head's previous output
            step_positions = request.positions[:, None] + i  # [batch, 1]
            return self.head(token[:, None], state[:, None], step_positions, self.cache, slots, kv_len + i)[:, 0]

        proposal = draft_chain(request, out[torch.arange(len(slots), device=out.device), last],  # [batch, h]
                               self.head.logits, advance)
        self._consumed(slots)
        return proposal

    @torch.no_grad()
    def propose_tree(self, request: ProposeInput, tree: TreeShape) -> TreeProposal:
        """Draft ``tree`` (:func:`~specscope.proposers.tree_draft.draft_tree`) from the chunk's
        last output. Entry ``p`` stands for token ``p + 1``, so the root (the newest token, at
        ``n``) is entry ``n - 1`` and the nodes sit past it, where the next chunk overwrites them."""
        slots = request.slots
        tokens, hidden, positions, last, chunk_kv_len = self._chunk(request)
        out = self.head(tokens, hidden, positions, self.cache, slots, chunk_kv_len)
        root = out[torch.arange(len(slots), device=out.device), last]  # [batch, h]

        def step(token, state, positions, ctx):
            return self.head(token, state, positions, self.cache, slots, 0, ctx=ctx)

        base = [len(h) - 2 for h in request.histories]
        proposal = TreeProposal(
            draft_tree(tree, root, base, step, self.head.logits, self.head.config, self.cache, slots)
        )
        self._consumed(slots)
        return proposal

    def _consumed(self, slots: list[int]) -> None:
        """Mark the hidden states a proposal read, to drop at the slot's next target pass (the step
        went through): a step that fails after its proposal — its verification, say — leaves them
        for the engine's retry of each row alone."""
        self._read.update(slots)

    def release(self, slot: int) -> None:
        self.pending.pop(slot, None)
        self._read.discard(slot)

    @torch.no_grad()
    def rollout(self, batch: RolloutInput) -> tuple[torch.Tensor, torch.Tensor]:
        """All positions at once (:class:`~specscope.engine.proposer_api.PositionRollout`): the
        prefix is the head over entries ``0..T-2`` (``x[p+1]`` with ``h[p]``); the anchor of
        output position i is ``P + i - 1``, whose output ``f`` proposes ``d_1``."""
        tokens = batch.tokens[:, 1:]  # [batch, T-1]: x[p+1] of entry p
        hidden = self.head.fuse(batch.hidden)[:, :-1]  # [batch, T-1, h]: h[p]
        rows, width = tokens.shape
        tree = RolloutTree.for_batch(batch, shift=1)
        cache = KVCache(self.head.config, rows, tree.capacity, self.head.dtype, tokens.device)
        positions = torch.arange(width, device=tokens.device)[None, :].expand_as(tokens)
        prefix = self.head(tokens, hidden, positions, cache, list(range(rows)), width)

        def step(token, state, positions, ctx):
            return self.head(token, state, positions, cache, [], 0, ctx=ctx)

        return roll_out(tree, prefix, step, self.head.logits, self.head.config, cache)
