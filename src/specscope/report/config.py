"""What ``specscope report`` simulates and draws (no matplotlib here: the CLI imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specscope.analysis.overlap import OverlapConfig
from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.sim.grid import SimConfig



@dataclass
class ReportConfig:
    """What the report simulates and draws."""

    cost_model: str = DEFAULT_COST_MODEL
    sim: SimConfig = field(default_factory=SimConfig)  # mode, batch sizes, seed
    ks: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)  # fixed:k searched for the best policy
    adaptive: bool = True
    figure_policies: tuple[str, ...] = ("fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle")
    timesplit_policy: str = "fixed:3"
    overlap: OverlapConfig = field(default_factory=OverlapConfig)
    bound_k: int = 3  # k at which c is measured for figure 8 (at the smallest batch size)
    steps: tuple[str, ...] = ()  # measured per-step records (JSON Lines) for the time split
    measured: tuple = ()  # MeasuredCell rows (specscope.analysis.measured): figure 9 and the advisor line
    trees: tuple[str, ...] = ("2x2x1", "3x2x1x1")  # static trees set against the chain of their depth
    policy: str | None = None  # a learned policy file (specscope policy fit) judged on the traces

    @property
    def policies(self) -> list[str]:
        return [f"fixed:{k}" for k in self.ks] + (["adaptive"] if self.adaptive else []) + ["oracle"]
