"""Backends that run a benchmark for ``specscope bench``: one protocol,
``run_bench(config) -> BenchResult``.

The reference backend (:mod:`specscope.backends.reference`, config :class:`BenchConfig`) runs
specscope's own engine; the OpenAI backend (:mod:`specscope.backends.openai.bench`, config
``ServingBenchConfig``) measures servers over HTTP. Both return :class:`BenchRow` objects,
which only the command line (and the study) turn into JSON or CSV. A backend is imported only
when picked, so heavy libraries load only for the backend a user runs.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from specscope.errors import SpecscopeError
from specscope.costmodel.steps import StepRecord
from specscope.trees import TreeShape

log = logging.getLogger(__name__)
C = TypeVar("C")  # a bench configuration: BenchConfig, or the openai backend's

BATCHING = ("distinct", "replicate")


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark: no-SD and SD (``method``) on the same requests at each batch size.

    ``batching="distinct"``: up to B different requests decode together (continuous batching);
    ``"replicate"``: each request is run as B identical copies (the paper's batch size B).
    ``temperature == 0`` is greedy, and then SD output is checked against no-SD output.
    With a ``tree`` every SD step drafts and verifies that static token tree
    (:mod:`specscope.trees`) instead of a chain, and ``k`` must be its depth. With a ``policy``
    and ``beside_k``, a chain of ``beside_k`` of each method the policy chooses between runs
    beside it, in the same lockstep over the same requests: the learned row and the fixed
    policies it chose between measured side by side (their rows name the policy as ``beside``).
    """

    model_dir: Path
    workload: Path
    method: str = "ngram"
    draft_dir: Path | None = None
    k: int = 3
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    batch_sizes_given: bool = True  # False: the defaults, of which those above the requests are left out
    max_tokens: int = 128
    batching: str = "distinct"
    dtype: str = "float32"
    device: str = "cpu"
    ignore_eos: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    repeats: int = 3  # each batch size runs no-SD and SD this many times (see the backend)
    tree: TreeShape | None = None
    policy: Path | None = None  # a learned policy file: SD switches proposer per step (method "learned")
    confidence: float | None = None  # p: a model drafter ends each row at its first draft of probability < p
    beside_k: int | None = None  # with a policy: its methods' chains of this k run in the same lockstep, each a row


def fill_batch_sizes(config: C, at_once: int, why: str) -> C:
    """``config`` (a bench configuration) with batch sizes no run can fill left out: at most
    ``at_once`` requests are in flight (``why`` says which), so a row at a larger B would name a
    concurrency it never reached. Batch sizes the user gave are refused instead; the defaults
    above it are dropped with a warning."""
    too_many = [b for b in config.batch_sizes if b > at_once]
    if too_many and config.batch_sizes_given:
        raise SpecscopeError(f"--batch-sizes: {too_many[0]} is above the {at_once} requests in flight at once ({why})")
    if too_many:
        log.warning("batch sizes %s left out: at most %d requests in flight at once (%s)",
                    ",".join(map(str, too_many)), at_once, why)
    return replace(config, batch_sizes=tuple(b for b in config.batch_sizes if b <= at_once))


@dataclass
class BenchRow:
    """One batch size of a bench: no-SD and SD on the same requests.

    ``throughput`` and ``baseline_throughput``: generated tokens per second of the SD and the
    no-SD run (``None`` when unknown); ``speedup`` = their ratio; ``acceptance_rate`` (α) and
    ``mean_acceptance_length`` (τ) of the SD run. ``details``: the backend's further
    measurements, field → value in output order (each backend's docstring lists them).
    Optional fields are added as keyword fields with a ``None`` default: ``tree``, the static
    tree an SD step drafted (``None``: a chain of ``k``), written as its
    :meth:`~specscope.trees.TreeShape.describe` fields ``tree``, ``tree_nodes``, ``tree_depth``
    (absent from a chain's row).
    """

    method: str
    k: int
    batch_size: int
    throughput: float | None
    baseline_throughput: float | None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    details: dict[str, object] = field(default_factory=dict)
    tree: TreeShape | None = None

    @property
    def speedup(self) -> float | None:
        """SD throughput / no-SD throughput; ``None`` when either is unknown or zero."""
        if not self.baseline_throughput or self.throughput is None:
            return None
        return self.throughput / self.baseline_throughput

    def flat(self) -> dict[str, object]:
        """The row as written to JSON or CSV (the on-disk field names)."""
        row = {name: value for name, value in asdict(self).items() if name not in ("details", "tree")}
        row.update(self.tree.describe() if self.tree is not None else {})
        row["speedup"] = self.speedup
        return {**row, **self.details}


@dataclass
class BenchResult:
    """``rows``: one per batch size; ``records``: one per engine step, baseline steps (method
    ``none``) and SD steps together (empty where the backend cannot see steps)."""

    rows: list[BenchRow]
    records: list[StepRecord] = field(default_factory=list)
