"""What a study runs: models, workloads, batch sizes, and where it writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from specscope.analysis.measured import MeasuredCell
from specscope.engine.config import model_fingerprint
from specscope.fingerprint import file_sha256
from specscope.methods import method, of_kind
from specscope.trace.schema import DRAFT_PROBS
from specscope.trees import TreeShape


BUNDLED_REQUESTS = 16  # requests per bundled workload in the default study
# A small and a large static tree (6 nodes, depth 3; 21 nodes, depth 4), set against the chains.
STUDY_TREES = (TreeShape.parse("2x1x1"), TreeShape.parse("3x2x1x1"))
# The drafter the trees are measured with, the first of these the study has. EAGLE first: it
# is the drafter vLLM drafts trees with (methods.METHODS, tree_engines) and the one EAGLE-2's and
# the tree numbers are about, so its crossover is the one a user can act on; its passes
# (one decoder layer) are also the cheapest of the model drafters, so a tree's width costs least.
TREE_DRAFTER_PREFERENCE = ("eagle", "eagle3", "mtp", "draft")
BEFORE_KEPT = {"device": "cpu", "dtype": "float32"}  # where every study ran before these were settings: the defaults
SECOND_K_BEFORE = 0  # the second k of every study before it was a setting: none measured
CONFIDENCE_BEFORE = 0.0  # the confidence chain of every study before it was a setting: none measured


@dataclass
class StudyConfig:
    """A study of one target model with its drafters on one or more workloads.

    ``drafters`` maps a proposer method (``draft``, ``eagle``, ``eagle3``, ``mtp``) to its
    checkpoint directory; the lookup methods specscope's engine implements (n-gram) are always
    included. Speedups are measured with the reference engine at ``batch_sizes`` with ``k``
    drafts per step (distinct requests, continuous batching) and simulated with the cost model
    fitted to those very steps; each model drafter also with ``second_k`` drafts on the first
    workload (:attr:`second_k_drafters`), and at ``k`` stopped at the drafter's confidence
    ``confidence_p`` (:attr:`confidence_drafters`). ``trees`` are also traced, measured, simulated and replayed
    with :attr:`tree_drafter`.
    """

    model_dir: Path
    workloads: list[Path]
    out_dir: Path
    drafters: dict[str, Path] = field(default_factory=dict)
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    k: int = 3
    second_k: int = 1  # each model drafter's chain measured at this k too, on the first workload (0: not)
    confidence_p: float = 0.5  # ... and at k stopped at its first draft below this probability (0: not)
    k_max: int = 10
    max_tokens: int = 96
    requests: int | None = None  # the first N requests of each workload (None: all)
    replay_cost_models: tuple[str, ...] = ()
    trees: tuple[TreeShape, ...] = STUDY_TREES
    threads: int = 1  # torch CPU threads the measured runs used
    device: str = BEFORE_KEPT["device"]  # where the models run (cpu, cuda, cuda:N): traces and measured runs alike
    dtype: str = BEFORE_KEPT["dtype"]  # the models' weights and activations

    def __post_init__(self) -> None:
        self.batch_sizes = tuple(sorted(self.batch_sizes))  # a resume given them in another order runs as the first

    def settings(self) -> dict:
        """What decides the study's results (``study.json``): a resume with others would mix them
        (the checkpoints by their fingerprints: a drafter trained again into its folder, or another
        one under its name, would leave cells measured with the old one beside traces of the new)."""
        return {"schema": "specscope.study/1", "workloads": [w.name for w in self.workloads],
                "workload_sha256": [file_sha256(w) for w in self.workloads],
                "model_sha256": model_fingerprint(self.model_dir)[:16],
                "drafter_sha256": {name: model_fingerprint(path)[:16] for name, path in sorted(self.drafters.items())},
                "drafters": sorted(self.drafters), "batch_sizes": list(self.batch_sizes), "k": self.k,
                "second_k": self.measured_second_k,
                "confidence_p": self.confidence_p if self.confidence_drafters else CONFIDENCE_BEFORE,
                "k_max": self.k_max, "max_tokens": self.max_tokens, "requests": self.requests,
                "trees": [t.name for t in self.trees], "threads": self.threads, "device": self.device,
                "dtype": self.dtype}

    @property
    def settings_path(self) -> Path:
        return self.out_dir / "study.json"

    @property
    def lookups(self) -> list[str]:
        """The lookup methods (no checkpoint) the reference engine runs."""
        return [m.name for m in of_kind("lookup") if m.reference]

    @property
    def methods(self) -> list[str]:
        return [*self.lookups, *self.drafters]

    @property
    def measured_second_k(self) -> int:
        """``second_k`` where the study measures it, ``0 < second_k < k``; else 0 (none)."""
        return self.second_k if 0 < self.second_k < self.k else 0

    @property
    def second_k_drafters(self) -> list[str]:
        """The model drafters measured at :attr:`measured_second_k` too, on the first workload: every
        drafter with a checkpoint (none where that k is 0). A drafter's k passes cost the
        same on every workload, and chains of two ks tell its cost per pass from its fixed cost,
        which chains of one k cannot: the fit then splits their cost arbitrarily and prices every
        other k on that split (a study of 2026-12-06 with chains of k = 3 alone simulated MTP
        k = 1 on code at 0.74×, which measured 1.12×)."""
        return list(self.drafters) if self.measured_second_k else []

    @property
    def confidence_drafters(self) -> list[str]:
        """The model drafters whose chain of k is measured stopped at the confidence ``confidence_p``
        too, on the first workload: every drafter with a checkpoint (none where p is 0). Reading each
        pass's draft probabilities and stopping rows costs the engine beyond the plain chain's passes;
        its steps price that per pass (``c_confidence``), which the policy's confidence rule weighs
        (about 10 µs a pass at B = 1 on the bundled models, ``benchmarks/bench_confidence.py``; the
        study's steps on a CPU vary too much to tell it: docs/learned-policy-log.md, stop 65)."""
        return list(self.drafters) if self.confidence_p else []

    @property
    def draft_probs(self) -> int:
        """Drafts per position whose probability the traces keep: ``trace``'s default, or the study's
        k where that is deeper (at most k_max), so that its policy may stop a drafter at a confidence
        at every depth it proposes (kept to 4 under ``--k 5``, its confidence rule was refused the
        fifth draft)."""
        return min(self.k_max, max(DRAFT_PROBS, self.k))

    @property
    def tree_drafter(self) -> str | None:
        """The drafter the trees are measured with (see :data:`TREE_DRAFTER_PREFERENCE`); ``None``
        without trees or without a drafter that drafts trees in specscope's engine."""
        if not self.trees:
            return None
        ranked = [m for m in TREE_DRAFTER_PREFERENCE if m in self.drafters]
        return next((m for m in [*ranked, *self.drafters] if method(m).drafts_trees_on("specscope")), None)

    def policy_methods(self, measured: Sequence[MeasuredCell]) -> tuple[str, str] | None:
        """What the study's learned policy chooses between: n-gram and the one model drafter an
        engine running it keeps beside n-gram — the drafter whose measured chains of ``k`` were fastest
        over every workload and batch size (geometric mean of their speedups; ties in the tree
        drafter's preference order); ``None`` without n-gram or a drafter."""
        ranked = list(dict.fromkeys([*(m for m in TREE_DRAFTER_PREFERENCE if m in self.drafters), *self.drafters]))
        if "ngram" not in self.lookups or not ranked:
            return None

        def speed(drafter: str) -> float:  # over its chains of k, measured on every workload
            mine = [c.measured_speedup for c in measured if c.method == drafter and c.tree is None and c.k == self.k]
            return float(np.exp(np.mean(np.log(mine)))) if mine else 0.0

        return ("ngram", max(ranked, key=speed))  # max keeps the first of equals

    @property
    def workloads_dir(self) -> Path:
        """Where the study keeps its copies of the workloads' first ``requests`` requests."""
        return self.out_dir / "workloads"

    @property
    def policy_path(self) -> Path:
        return self.out_dir / "policy.json"

    @property
    def learned_dir(self) -> Path:
        return self.out_dir / "learned"

    @property
    def trace_dir(self) -> Path:
        return self.out_dir / "traces"

    @property
    def measure_dir(self) -> Path:
        return self.out_dir / "measured"

    @property
    def cost_model_path(self) -> Path:
        return self.out_dir / "costmodel.json"
