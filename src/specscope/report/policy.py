"""The learned policy's section of the report: its judgement table, the gap it closes, and the
choices it makes along a few outputs.

``policy_section`` simulates the traces under the policy and the policies it is judged against
(:mod:`specscope.sim.evaluate`) and walks :data:`EXAMPLES` requests with it at the smallest batch
size; the two figures draw those. Everything is judged within the policy's deepest k (the
traces capped there, :meth:`~specscope.trace.schema.TraceRecord.capped`): fixed ks and oracles
that propose more than the policy may would set it against drafting it was kept from — a
policy fitted with ``--max-k`` at the k its cost model was measured at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specscope.costmodel.base import CostModel
from specscope.errors import SpecscopeError
from specscope.methods import LEARNED, NO_SD
from specscope.analysis.acceptance import by_dataset
from specscope.report.style import CYCLE, SEQUENTIAL, plt, proposer_colours, short
from specscope.sim.evaluate import ceiling_of, judge, judged_rows, lookup_known, no_gap_reason
from specscope.sim.switching import on_common_positions
from specscope.sim.checks import check_k_by_dataset
from specscope.sim.grid import SimConfig
from specscope.sim.plan import dataset_depths
from specscope.sim.policies import parse_policy
from specscope.policy.learned import load_policy
from specscope.policy.observation import NONE
from specscope.sim.switching import causal_plan, common_length
from specscope.trace.schema import TraceRecord

EXAMPLES = 3  # requests whose per-step choices are drawn (one per dataset, up to MAX_EXAMPLES, where several)
MAX_EXAMPLES = 4
GAP_AXIS = 2.0  # the gap figure shows -2 … 2; a bar beyond is cut there, its value written at its end


@dataclass
class PolicyChoices:
    """One request walked by the policy: each method's acc_len [G] and the steps' (pos, method, k);
    ``confidence``: the p at which its rule stopped a model drafter (its k then the drafter's)."""

    dataset: str
    request: str
    acc: dict[str, np.ndarray]
    pos: np.ndarray
    method: np.ndarray  # names (NO_SD where nothing was proposed)
    k: np.ndarray
    confidence: float | None = None


def policy_section(records: Sequence[TraceRecord], path: str, cost: CostModel,
                   config: SimConfig) -> tuple[list[dict], list[PolicyChoices]]:
    """The judgement table (one line per dataset × batch size) and the example walks."""
    policy = load_policy(path)
    missing = [m for m in policy.methods if any(m not in r.proposers for r in records)]
    if missing:
        raise SpecscopeError(f"--policy {path}: chooses {missing[0]!r}, which the traces do not record for every "
                             f"request (its methods: {', '.join(policy.methods)})")
    learned = f"learned:{path}"
    check_k_by_dataset(records, policy.methods[0], parse_policy(learned))  # refused deeper than the traces, as in simulate
    records = [record.capped(policy.depth) for record in on_common_positions(records, policy.methods)]
    judged = SimConfig(mode=config.mode, batch_sizes=config.batch_sizes, seed=config.seed, oversize=config.oversize)
    rows = judged_rows(records, policy.methods, [learned], cost, judged)
    known = lookup_known(records, policy.methods, cost, judged, sorted({(r.dataset, r.batch_size) for r in rows}))
    table = [{**row, "methods": "+".join(policy.methods), "policy_sha256": policy.sha256}  # a file refitted in place told apart
             for row in judge(rows, learned, known=known)]
    # each example walked as deep as its dataset is in the table (the examples' own acc_len once capped it lower)
    depths = dataset_depths(records, policy.methods)
    choices, smallest = [], min(config.batch_sizes)
    for record in _examples(records):
        plan = causal_plan([record], policy.methods, policy.decide_for, min(depths[record.dataset], policy.depth),
                           smallest, confidence_for=policy.confidence_for, gate=policy.gate_for(smallest))
        names = np.asarray([policy.methods[m] if m != NONE else NO_SD for m in plan.method.tolist()])
        g = common_length(record, policy.methods)
        choices.append(PolicyChoices(record.dataset or "trace", record.id, {m: record.acc_len(m)[:g] for m in policy.methods},
                                     plan.pos, names, plan.proposed, policy.confidence_for(smallest)))
    return table, choices


def _examples(records: Sequence[TraceRecord]) -> list[TraceRecord]:
    """The requests whose walks are drawn: each dataset's request of median output length (up to
    :data:`MAX_EXAMPLES` datasets), or, with one dataset, :data:`EXAMPLES` from its median up."""
    groups = by_dataset(records)
    if len(groups) == 1:
        return sorted(records, key=lambda r: r.output_len)[len(records) // 2:][:EXAMPLES]
    return [sorted(m, key=lambda r: r.output_len)[len(m) // 2] for m in list(groups.values())[:MAX_EXAMPLES]]


def policy_label(path: str, cost: CostModel, label: str) -> str:
    """What produced the section's numbers: the policy file, the methods it chooses between, the
    cost model and batch sizes it was fitted for (a batch size between them takes the nearest
    one's rule), and whether the report's cost model (``cost``, named ``label`` as every priced
    table names it) prices the policy's own work per step."""
    policy = load_policy(path)
    fitted = policy.document.get("cost_model", {})
    sizes = ", ".join(map(str, sorted(policy.choosers)))
    try:
        cost.drafting_for(LEARNED)
        work = "its own work per step priced from the engine's measured policy_s"
    except SpecscopeError:
        work = (f"its own work per step not priced ({label} has no '{LEARNED}' entry: `costmodel fit` makes one "
                "from the step records of an engine running the policy)")
    return (f"Policy {path} over {'+'.join(policy.methods)}, fitted for {fitted.get('name', 'an unnamed cost model')} "
            f"at batch sizes {sizes} (others take the nearest one's rule), proposing at most k = {policy.depth}; "
            f"judged here under {label}, {work}.")


def gap_figure(table: Sequence[dict]) -> plt.Figure:
    """Bars of the gap closed per dataset, one bar per batch size."""
    datasets = list(dict.fromkeys(line["dataset"] for line in table))
    sizes = sorted({line["batch_size"] for line in table})
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(datasets), 3.4), layout="constrained")
    width = 0.8 / len(sizes)
    for i, b in enumerate(sizes):
        lines = [next((l for l in table if l["dataset"] == d and l["batch_size"] == b), None) for d in datasets]
        values = [np.nan if line is None else line.get("gap_closed", np.nan) for line in lines]
        where = np.arange(len(datasets)) + (i - (len(sizes) - 1) / 2) * width  # bars centred on their dataset
        ax.bar(where, values, width, label=f"B={b}", color=CYCLE[i % len(CYCLE)])
        known = [np.nan if line is None else _known_share(line) for line in lines]
        ax.scatter(where, np.clip(known, -GAP_AXIS, GAP_AXIS), marker="_", s=(72 * width * 4) ** 2 / 16, color="black",
                   linewidths=1.6, zorder=3, label="lookup known" if i == 0 and not np.all(np.isnan(known)) else None)
        for x, value, line in zip(where, values, lines):
            if line is not None and np.isnan(value):  # a gap too small to divide by, or none: said which
                ax.text(x, 0.0, no_gap_reason(line), rotation=90, ha="center", va="bottom", fontsize=7, color="grey")
            elif abs(value) > GAP_AXIS:  # one bar over a gap just past MIN_ROOM would flatten every other
                ax.text(x, np.sign(value) * GAP_AXIS, f"{value:+.1f}", ha="center",
                        va="bottom" if value < 0 else "top", fontsize=7)  # inside the cut end
    ax.set_xlim(-0.5, len(datasets) - 0.5)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    low, high = ax.get_ylim()
    ax.set_ylim(max(min(low, -0.1), -GAP_AXIS), min(max(high, 1.1), GAP_AXIS))
    ax.set_xticks(np.arange(len(datasets)), datasets)
    ax.set_ylabel("gap closed")
    ax.legend()
    return fig


def _known_share(line: dict) -> float:
    """The lookup-known yardstick's own share of the gap to oracle-switch, (lookup known − best
    fixed) / (oracle-switch − best fixed): where on the gap figure knowing the lookup's next step
    reaches; NaN where the line has no yardstick or no gap closed."""
    if "lookup_known" not in line or np.isnan(line.get("gap_closed", np.nan)):
        return np.nan
    return (line["lookup_known"] - line["best_fixed_speedup"]) / (ceiling_of(line) - line["best_fixed_speedup"])


def choices_figure(choices: Sequence[PolicyChoices]) -> plt.Figure:
    """Per request two strips over its output positions: each method's acc_len (a heat strip, a
    row per method), and below it the policy's steps (marker colour = method, height = k + 1)."""
    fig, axes = plt.subplots(2 * len(choices), 1, figsize=(9.0, 3.4 * len(choices)),
                             height_ratios=[1, 2] * len(choices), squeeze=False, layout="constrained")
    top = max(float(np.max(list(walk.acc.values()))) for walk in choices)
    for i, walk in enumerate(choices):
        strip, ax = axes[2 * i][0], axes[2 * i + 1][0]
        methods = list(walk.acc)
        colours = {**proposer_colours(methods), NO_SD: "#999999"}
        grid = np.stack([walk.acc[m] for m in methods]).astype(float)  # [methods, G]
        image = strip.imshow(grid, aspect="auto", origin="lower", cmap=SEQUENTIAL, interpolation="nearest",
                             extent=(0, grid.shape[1], -0.5, len(methods) - 0.5), vmin=1, vmax=top)
        strip.set_yticks(range(len(methods)), methods)
        strip.grid(False)
        strip.set_title(f"{short(walk.dataset)} · request {walk.request}: each method's acc_len (above), the "
                        "policy's steps (below)")
        fig.colorbar(image, ax=strip, label="acc_len", fraction=0.03)
        ax.sharex(strip)
        for name in [*methods, NO_SD]:
            mine = walk.method == name
            if mine.any():
                ax.scatter(walk.pos[mine], walk.k[mine] + 1, s=14, color=colours[name],
                           label="no drafting" if name == NO_SD else name)
        ax.set_ylim(0, float((walk.k + 1).max(initial=1)) + 0.6)  # a step at the top stays whole
        ax.set_xlabel("output position")
        ax.set_ylabel("k + 1 proposed")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # beside, over no step
    return fig
