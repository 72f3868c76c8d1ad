"""What ``specscope report`` simulates and draws (no matplotlib here: the CLI imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specscope.analysis.overlap import OverlapConfig
from specscope.costmodel.registry import DEFAULT_COST_MODEL
from specscope.sim.grid import SimConfig
from specscope.sim.policies import held_to

LONGER_K = "a longer one may do better (--ks)"  # the answer's † where nothing holds the ks to a depth


@dataclass
class ReportConfig:
    """What the report simulates and draws."""

    cost_model: str = DEFAULT_COST_MODEL
    sim: SimConfig = field(default_factory=SimConfig)  # mode, batch sizes, seed
    ks: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)  # fixed:k searched for the best policy
    longer_k: str = LONGER_K  # what the answer says where its best is the largest k
    depth: int | None = None  # every simulated proposal at most this deep (adaptive's, the oracles'): a cost
    # model measured no deeper (None: as deep as the traces)
    proposer_depths: tuple[tuple[str, int, str], ...] = ()  # (proposer, depth, why): one whose drafting the cost
    # model measured shallower than ``depth``, each of its proposals held to its own (why: what its answer's † says)
    adaptive: bool = True
    figure_policies: tuple[str, ...] = ("fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle")
    timesplit_policy: str = "fixed:3"
    overlap: OverlapConfig = field(default_factory=OverlapConfig)
    bound_k: int = 3  # k at which c is measured for figure 8 (at the smallest batch size)
    steps: tuple[str, ...] = ()  # measured per-step records (JSON Lines) for the time split
    measured: tuple = ()  # MeasuredCell rows (specscope.analysis.measured): figure 9 and the advisor line
    measured_files: tuple[str, ...] = ()  # the files they were read from (the page names them)
    measured_by: str = "--measured"  # what gave the measured cells (a study's: its own runs)
    trees: tuple[str, ...] = ("2x2x1", "3x2x1x1")  # static trees set against the chain of their depth
    tree_drafters: tuple[str, ...] | None = None  # the proposers whose trees are set against chains (None: each
    # whose traces hold ranks; a study's: the one drafter its trees were measured with, the others' unpriced)
    policy: str | None = None  # a learned policy file (specscope policy fit) judged on the traces
    beside: tuple[str, ...] = ()  # files of the output folder the page links beside its own tables (a study's)

    @property
    def deepest(self) -> int:
        """The deepest fixed k any part of the report simulates."""
        fixed = [*self.figure_policies, *self.overlap.lookup_policies, self.overlap.reference_policy,
                 self.timesplit_policy]
        return max([*self.ks, self.bound_k, *(int(p.split(":")[1]) for p in fixed if p.startswith("fixed:"))])

    def held_to(self, depth: int, why: str) -> "ReportConfig":
        """This configuration with every proposal at most ``depth`` deep (:attr:`depth`): its fixed
        ks, the figures', the overlap's and the time split's fixed policies and the bound's k brought
        within it (a k asked past it replaced by ``depth`` itself, the deepest there is to try);
        ``why`` is what the answer says of a longer k."""
        kept = tuple(k for k in self.ks if k <= depth)
        ks = kept + ((depth,) if depth not in kept and any(k > depth for k in self.ks) else ())
        return replace(self, depth=depth, longer_k=why, ks=ks,
                       figure_policies=held_to(self.figure_policies, depth),
                       timesplit_policy=held_to((self.timesplit_policy,), depth)[0], bound_k=min(self.bound_k, depth),
                       overlap=replace(self.overlap, lookup_policies=held_to(self.overlap.lookup_policies, depth),
                                       reference_policy=held_to((self.overlap.reference_policy,), depth)[0]))

    @property
    def policies(self) -> list[str]:
        return [f"fixed:{k}" for k in self.ks] + (["adaptive"] if self.adaptive else []) + ["oracle"]
