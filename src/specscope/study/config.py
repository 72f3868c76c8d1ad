"""What a study runs: models, workloads, batch sizes, and where it writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


BUNDLED_REQUESTS = 16  # requests per bundled workload in the default study


@dataclass
class StudyConfig:
    """A study of one target model with its drafters on one or more workloads.

    ``drafters`` maps a proposer method (``draft``, ``eagle``, ``eagle3``, ``mtp``) to its
    checkpoint directory; the n-gram proposer is always included. Speedups are measured with
    the reference engine at ``batch_sizes`` with ``k`` drafts per step (distinct requests,
    continuous batching) and simulated with the cost model fitted to those very steps.
    """

    model_dir: Path
    workloads: list[Path]
    out_dir: Path
    drafters: dict[str, Path] = field(default_factory=dict)
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    k: int = 3
    k_max: int = 10
    max_tokens: int = 96
    requests: int | None = None  # the first N requests of each workload (None: all)
    replay_cost_models: tuple[str, ...] = ()

    @property
    def methods(self) -> list[str]:
        return ["ngram", *self.drafters]

    @property
    def trace_dir(self) -> Path:
        return self.out_dir / "traces"

    @property
    def measure_dir(self) -> Path:
        return self.out_dir / "measured"

    @property
    def cost_model_path(self) -> Path:
        return self.out_dir / "costmodel.json"
