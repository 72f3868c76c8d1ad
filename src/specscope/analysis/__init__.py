"""Analysis of traces and runs: what a single mean acceptance rate hides.

``acceptance`` — statistics per dataset × proposer and head-to-head shares per pair;
``position`` — acc_len along the output, by output-length group; ``overlap`` — prompt/output
BLEU-4 and n-gram's speedup over EAGLE per BLEU bin; ``timesplit`` — predicted and measured
split of step time into drafting, verification and overhead; ``bound_points`` — the measured
(α, c) on the closed-form bound.
"""

from specscope.analysis.acceptance import (
    PairStats,
    ProposerStats,
    acceptance_stats,
    by_dataset,
    k_max_of,
    proposer_names,
    request_means,
)
from specscope.analysis.bound_points import BoundPoint, bound_points
from specscope.analysis.overlap import (
    BLEU_EDGES,
    OverlapConfig,
    OverlapRow,
    bleu_scores,
    overlap_speedups,
    request_bleu,
)
from specscope.analysis.position import ProfileRow, length_edges, position_profiles
from specscope.analysis.timesplit import (
    measured_split,
    predicted_split,
    read_steps,
)
from specscope.costmodel.steps import MeasuredStep

__all__ = [
    "BLEU_EDGES", "BoundPoint", "MeasuredStep", "OverlapConfig", "OverlapRow", "PairStats", "ProfileRow",
    "ProposerStats", "acceptance_stats", "bleu_scores", "bound_points", "by_dataset", "k_max_of",
    "length_edges", "measured_split", "overlap_speedups", "position_profiles", "predicted_split",
    "proposer_names", "read_steps", "request_bleu", "request_means",
]
