"""The engine: continuous batching of requests over :func:`~specscope.engine.step.sd_step`.

``Engine.step()`` prefills requests added since the last call (each gets its first token,
alone: time to first token is one prefill), runs one SD step (a plain decode step without a
proposer) for every request prefilled earlier, applies stop conditions, frees finished slots
and returns what each request gained. Every step appends a
:class:`~specscope.engine.records.StepRecord` and updates ``stats``.

Each request draws its random numbers from its own generator, seeded with its ``seed`` or,
without one, with a seed drawn from the engine's generator (``Engine(seed=...)``): a request's
output does not depend on the other requests in the batch. ``max_seq_len`` never exceeds the
model's ``max_position_embeddings``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch

from specscope.engine.config import check_context
from specscope.engine.constraints import RowConstraints
from specscope.engine.kv_cache import KVCache
from specscope.engine.model import Transformer
from specscope.engine.records import SpecDecodeStats, StepRecord
from specscope.engine.sampling import BatchSampling, SamplingParams
from specscope.engine.step import prefill, sd_step
from specscope.engine.timing import PhaseClock
from specscope.engine.tree_step import tree_step
from specscope.errors import SpecscopeError
from specscope.engine.proposer_api import PolicyTimed, Proposer, TreeDrafting
from specscope.methods import NO_SD, check_confidence
from specscope.trees import TreeShape

__all__ = ["Engine", "SamplingParams", "StepOutput", "DEFAULT_MAX_SEQ_LEN"]

log = logging.getLogger(__name__)
DEFAULT_MAX_SEQ_LEN = 2048


@dataclass
class StepOutput:
    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "length" | "stop"


@dataclass
class _Sequence:
    request_id: str
    slot: int
    history: list[int]  # prompt + output
    prompt_len: int
    max_tokens: int
    sampling: SamplingParams
    generator: torch.Generator
    stop_ids: frozenset[int]  # tokens that end the request once min_tokens are out
    prefilled: bool = False
    finish_reason: str | None = None
    new_tokens: list[int] = field(default_factory=list)

    @property
    def num_output(self) -> int:
        return len(self.history) - self.prompt_len

    def constraints(self) -> RowConstraints:
        params = self.sampling
        return RowConstraints(
            params.repetition_penalty, params.min_tokens, tuple(sorted(self.stop_ids)), self.num_output,
            self.history,
        )


def check_tree(tree: TreeShape, k: int, proposer: Proposer | None, vocab_size: int) -> None:
    """A tree needs a proposer that drafts trees, ``k`` equal to its depth, and child ranks
    within the vocabulary."""
    if proposer is None:
        raise SpecscopeError(f"--tree: tree {tree.name} needs an SD method (draft, eagle, eagle3, mtp)")
    if not isinstance(proposer, TreeDrafting):
        raise SpecscopeError(
            f"--tree: the '{proposer.name}' method drafts chains only (tree drafting is optional "
            "for it and not implemented); use --k, or draft, eagle, eagle3, mtp"
        )
    if k != tree.depth:
        raise SpecscopeError(f"engine: expected k = the tree's depth {tree.depth}, got {k}")
    if tree.max_rank >= vocab_size:
        raise SpecscopeError(
            f"--tree: child rank {tree.max_rank} needs more than the vocabulary's {vocab_size} tokens"
        )


class Engine:
    """Batched lossless SD over a :class:`Transformer` target and an optional proposer.

    ``max_seq_len`` bounds prompt + output tokens per request; the KV cache holds
    ``max_seq_len + k + 1`` positions per slot (see :meth:`cache_capacity`), so a step may
    write speculative positions past the end of a request. With a ``tree`` every step drafts
    and verifies that static token tree (:mod:`specscope.engine.tree_step`) instead of a chain
    of ``k``; ``k`` must then be the tree's depth, and the cache holds ``tree.nodes`` positions
    past ``max_seq_len + 1``. With ``confidence`` p (``confidence:p``) a model drafter ends each row's
    proposal at its first draft of probability below p, that draft included, at k at the latest,
    and its passes stop once every row has ended (:class:`~specscope.engine.proposer_api.ProposeInput`).
    """

    def __init__(
        self,
        target: Transformer,
        proposer: Proposer | None,
        k: int,
        max_batch_size: int,
        max_seq_len: int,
        eos_token_ids: Iterable[int] = (),
        seed: int = 0,
        tree: TreeShape | None = None,
        confidence: float | None = None,
    ) -> None:
        if k < 1 or max_batch_size < 1 or max_seq_len < 2:
            raise SpecscopeError(
                "engine: expected k >= 1, max_batch_size >= 1, max_seq_len >= 2; "
                f"got {k}, {max_batch_size}, {max_seq_len}"
            )
        check_context(target.config, max_seq_len, "the model")
        if tree is not None:
            check_tree(tree, k, proposer, target.config.vocab_size)
        if confidence is not None:
            check_confidence(confidence, proposer.name if proposer else NO_SD, tree and tree.name)
        self.target, self.proposer, self.k, self.tree = target, proposer, k, tree
        self.confidence = confidence
        self.max_batch_size, self.max_seq_len = max_batch_size, max_seq_len
        self.eos_token_ids = frozenset(eos_token_ids)
        self.method = proposer.name if proposer is not None else NO_SD
        self._policy_timed = proposer if isinstance(proposer, PolicyTimed) else None
        self.cache = KVCache(
            target.config,
            max_batch_size,
            self.cache_capacity(max_seq_len, k, tree),
            target.dtype,
            target.device,
        )
        self.clock = PhaseClock(target.device)
        self.stats = SpecDecodeStats(k)
        self.step_records: list[StepRecord] = []
        self._running: list[_Sequence] = []
        self._free_slots = list(range(max_batch_size))
        self._seeds = torch.Generator().manual_seed(seed)  # draws the seeds of unseeded requests

    @staticmethod
    def cache_capacity(max_seq_len: int, k: int, tree: TreeShape | None = None) -> int:
        """KV positions per slot: the longest request plus one step's speculative positions
        (``k`` drafts, or the ``tree``'s nodes)."""
        return max_seq_len + (k if tree is None else tree.nodes) + 1

    def has_capacity(self) -> bool:
        return bool(self._free_slots)

    def free_slots(self) -> int:
        """Batch slots no running request holds."""
        return len(self._free_slots)

    def num_running(self) -> int:
        return len(self._running)

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        sampling: SamplingParams = SamplingParams(),
        ignore_eos: bool = False,
    ) -> None:
        """Queue a request; it is prefilled by the next :meth:`step`."""
        if not self._free_slots:
            raise SpecscopeError(
                f"request {request_id!r}: engine is full ({self.max_batch_size} running)"
            )
        if any(s.request_id == request_id for s in self._running):
            raise SpecscopeError(f"request {request_id!r}: id already running")
        if not prompt_token_ids:
            raise SpecscopeError(f"request {request_id!r}: empty prompt")
        vocab = self.target.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_token_ids):
            raise SpecscopeError(f"request {request_id!r}: prompt token ids must be in 0..{vocab - 1}")
        if max_tokens < 1:
            raise SpecscopeError(f"request {request_id!r}: max_tokens must be >= 1, got {max_tokens}")
        if len(prompt_token_ids) + max_tokens > self.max_seq_len:
            raise SpecscopeError(
                f"request {request_id!r}: prompt ({len(prompt_token_ids)}) + max_tokens ({max_tokens}) "
                f"exceeds max_seq_len {self.max_seq_len}"
            )
        if any(not 0 <= t < vocab for t in sampling.stop_token_ids):
            raise SpecscopeError(f"request {request_id!r}: stop token ids must be in 0..{vocab - 1}")
        seed = sampling.seed
        if seed is None:
            seed = int(torch.randint(1 << 62, (), generator=self._seeds))
        generator = torch.Generator(device=self.target.device).manual_seed(seed)
        stop_ids = frozenset(sampling.stop_token_ids) | (frozenset() if ignore_eos else self.eos_token_ids)
        self._running.append(
            _Sequence(
                request_id,
                self._free_slots.pop(0),
                list(prompt_token_ids),
                len(prompt_token_ids),
                max_tokens,
                sampling,
                generator,
                stop_ids,
            )
        )

    def _append(self, seq: _Sequence, tokens: list[int]) -> None:
        """Add emitted tokens up to the first stop condition."""
        for token in tokens:
            seq.history.append(token)
            seq.new_tokens.append(token)
            if token in seq.stop_ids and seq.num_output >= seq.sampling.min_tokens:
                seq.finish_reason = "stop"
            elif seq.num_output >= seq.max_tokens:
                seq.finish_reason = "length"
            if seq.finish_reason:
                return

    def _sampling(self, seqs: list[_Sequence]) -> BatchSampling:
        return BatchSampling(
            [s.sampling for s in seqs],
            [s.generator for s in seqs],
            self.target.device,
            [s.constraints() for s in seqs],
        )

    def _choices(self, running: list) -> list[list | None]:
        """What the policy chose for each of ``running`` this step (``StepRecord.choices``)."""
        taken = self._policy_timed.take_choices()
        return [list(taken[s.slot]) if s.slot in taken else None for s in running]

    def step(self, only: set[str] | None = None) -> list[StepOutput]:
        """Prefill new requests, run one step for all running ones (``only``: just these ids),
        return their new tokens."""
        running = [s for s in self._running if only is None or s.request_id in only]
        if not running:
            return []
        if self._policy_timed is not None:  # a failed step's policy counts belong to no record: dropped
            self._policy_timed.take_policy_seconds(), self._policy_timed.take_policy_rows()
            self._policy_timed.take_choices()
        clock = self.clock
        clock.reset()
        begin = clock.now()
        cached = [self.cache.lengths[s.slot] for s in running if s.prefilled]  # the rows it decodes
        active = [s for s in running if s.prefilled]  # fresh requests get their first token alone
        fresh = [s for s in running if not s.prefilled]
        if fresh:
            with clock.phase("prefill"):
                first = prefill(
                    self.target,
                    self.cache,
                    self.proposer,
                    [s.slot for s in fresh],
                    [s.history for s in fresh],
                    self._sampling(fresh),
                )
            for seq, token in zip(fresh, first):
                seq.prefilled = True
                self._append(seq, [token])
        verified = proposed = 0
        if active:
            slots, histories, sampling = [s.slot for s in active], [s.history for s in active], self._sampling(active)
            if self.tree is None:
                result = sd_step(self.target, self.cache, self.proposer, slots, histories, self.k, sampling, clock,
                                 self.confidence)
            else:
                result = tree_step(self.target, self.cache, self.proposer, slots, histories, self.tree, sampling, clock)
            verified, proposed = result.tokens_verified, sum(result.draft_len)
            for seq, tokens, offered, accepted in zip(
                active, result.emitted, result.draft_len, result.accepted
            ):
                self._append(seq, tokens)
                self.stats.observe(offered, accepted, len(seq.new_tokens))
        wall = clock.now() - begin
        seconds = clock.seconds
        self.step_records.append(
            StepRecord(
                step=len(self.step_records),
                method=self.method,
                k=self.k if self.proposer is not None else 0,  # no SD proposes nothing
                batch_size=len(running),
                tokens_verified=verified,
                tokens_emitted=[len(s.new_tokens) for s in running],
                draft_s=seconds["draft"],
                verify_s=seconds["verify"],
                sample_s=seconds["sample"],
                overhead_s=max(0.0, wall - sum(seconds.values())),
                kv_tokens=sum(cached),
                kv_longest=max(cached, default=0),
                prefill_tokens=sum(s.prompt_len for s in fresh),
                prefill_requests=len(fresh),
                prefill_width=max((s.prompt_len for s in fresh), default=0),
                prefill_s=seconds["prefill"],
                tree=None if self.tree is None else self.tree.name,
                policy_s=0.0 if self._policy_timed is None else self._policy_timed.take_policy_seconds(),
                policy_rows=None if self._policy_timed is None else self._policy_timed.take_policy_rows(),
                tokens_proposed=proposed,
                choices=None if self._policy_timed is None else self._choices(running),
                confidence=self.confidence,
            )
        )
        outputs = []
        for seq in running:
            outputs.append(
                StepOutput(
                    seq.request_id, seq.new_tokens, seq.finish_reason is not None, seq.finish_reason
                )
            )
            seq.new_tokens = []
        for seq in [s for s in running if s.finish_reason]:
            self._release(seq)
        return outputs

    def generator_states(self) -> dict[str, torch.Tensor]:
        """Each running request's generator state: a caller retrying a failed step restores them
        (:meth:`restore_generators`), so that a seeded request draws as if the step had not run."""
        return {s.request_id: s.generator.get_state() for s in self._running}

    def restore_generators(self, states: dict[str, torch.Tensor]) -> None:
        for s in self._running:
            if s.request_id in states:
                s.generator.set_state(states[s.request_id])

    def abort_request(self, request_id: str) -> bool:
        """Drop a running request (e.g. its client went away); ``False`` if it is not running."""
        for seq in self._running:
            if seq.request_id == request_id:
                self._release(seq)
                return True
        return False

    def generate(
        self,
        prompts: Iterable[tuple[str, list[int]]],
        max_tokens: int,
        batch_size: int | None = None,
        sampling: SamplingParams = SamplingParams(),
        ignore_eos: bool = False,
    ) -> dict[str, list[int]]:
        """Decode every ``(request_id, prompt_token_ids)`` with continuous batching: at most
        ``batch_size`` (default: every slot) run at once, and a finished request's slot goes to
        the next waiting one. Returns each request's output tokens (a stop token included)."""
        prompts = list(prompts)
        outputs: dict[str, list[int]] = {rid: [] for rid, _ in prompts}
        for step in self.decode(prompts, max_tokens, batch_size, sampling, ignore_eos):
            for out in step:
                outputs[out.request_id].extend(out.new_token_ids)
        return outputs

    def decode(
        self,
        prompts: Iterable[tuple[str, list[int]]],
        max_tokens: int,
        batch_size: int | None = None,
        sampling: SamplingParams = SamplingParams(),
        ignore_eos: bool = False,
    ) -> Iterator[list[StepOutput]]:
        """:meth:`generate` one step at a time: yields every step's outputs, so a caller can
        pause between steps (the benchmark interleaves two engines this way)."""
        limit = self.max_batch_size if batch_size is None else min(batch_size, self.max_batch_size)
        queue = list(prompts)
        while queue or self._running:
            while queue and len(self._running) < limit:
                rid, ids = queue.pop(0)
                self.add_request(rid, ids, max_tokens, sampling, ignore_eos)
            yield self.step()

    def _release(self, seq: _Sequence) -> None:
        self._running.remove(seq)
        self.cache.lengths[seq.slot] = 0
        if self.proposer is not None:
            self.proposer.release(seq.slot)
        self._free_slots.append(seq.slot)
        self._free_slots.sort()

    def serve_at(self, batch_size: int) -> None:
        """Tell a policy the batch size its requests run at from now (a bench's run at one of its
        batch sizes on an engine of more slots, whose caller admits at most that many): its
        admission gate commits requests by that batch size's rule, as the simulator's run at that
        batch size does. It admits as before: the caller keeps to ``batch_size``."""
        if self._policy_timed is not None:
            self._policy_timed.serve_at(batch_size)

    def reset_stats(self) -> None:
        """Forget step records and counters (e.g. after a warm-up)."""
        self.stats = SpecDecodeStats(self.k)
        self.step_records = []
