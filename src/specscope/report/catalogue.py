"""The report's contents as lists: every table (CSV file) and every figure, in page order.

A :class:`FigureSpec` says what a figure shows (title), what to look at (sentence), how to draw
it, and what it needs (``missing`` names what is absent, or is ``None`` when it can be drawn).
Figure numbers, file names and the progress total follow from :data:`FIGURES`; adding a figure
to the report means adding one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from matplotlib.figure import Figure

from specscope.analysis.measured import beside_pairs
from specscope.report import figures as F
from specscope.report.analyse import ReportData
from specscope.report.heatmaps import acceptance_heatmap, difference_heatmap
from specscope.report.policy import choices_figure, gap_figure, policy_label
from specscope.report.whatif import fitted_to, whatif_figure
from specscope.sim.checks import LOOKUP_PROPOSERS
from specscope.sim.evaluate import MIN_ROOM, ceiling_of
from specscope.trace.schema import by_dataset


@dataclass(frozen=True)
class TableSpec:
    filename: str
    rows: Callable[[ReportData], list[dict] | None]  # None: the table does not apply


@dataclass(frozen=True)
class FigureSpec:
    slug: str  # file name stem: fig<N>_<slug>.png
    title: Callable[[ReportData], str]
    sentence: Callable[[ReportData], str]  # what to look at
    draw: Callable[[ReportData], Figure]
    missing: Callable[[ReportData], str | None] = lambda data: None  # why it cannot be drawn


def _priced(data: ReportData, rows: list[dict] | None, **labels: object) -> list[dict] | None:
    """``rows`` labelled with the cost model that priced them (and ``labels``), the traces they
    replay and the code (a table copied out of its folder still says what produced it, as
    ``simulate -o`` rows do); None stays None."""
    return None if rows is None else [{**row, "cost_model": data.cost_label, **labels, **data.made} for row in rows]


def _ran_on(cells) -> str:
    """Where the measured ``cells`` ran, for a caption: `` (on cpu float32, 1 thread)`` where their
    rows say one place, `` (on cpu float32, 1 thread; cuda bfloat16, 1 thread)`` where several,
    nothing where none says."""
    places = list(dict.fromkeys(c.ran_on for c in cells if c.ran_on))
    return f" (on {'; '.join(places)})" if places else ""


def _fit_of(data: ReportData, cell) -> dict:
    """``in_fit``, where the cost model was calibrated to a sweep: whether it was fitted to this very
    cell of its engine (its error in-sample, not a prediction)."""
    fitted = getattr(data.cost, "fitted_cells", ())
    return {"in_fit": fitted_to(cell, fitted, data.cost.engine)} if fitted else {}


TABLES = [
    TableSpec("stats.csv", lambda d: [s.flat() for s in d.singles]),
    TableSpec("pairs.csv", lambda d: [p.flat() for p in d.pairs] or None),  # one proposer: nothing to pair
    TableSpec("request_means.csv", lambda d: d.means),
    TableSpec("position_profile.csv", lambda d: [r.flat() for r in d.profile]),
    TableSpec("speedup.csv", lambda d: _priced(d, [r.flat() for r in d.rows], seed=d.config.sim.seed)),
    TableSpec("answer.csv", lambda d: _priced(d, [a.flat() for a in d.answer], mode=d.config.sim.mode,
                                              seed=d.config.sim.seed)),  # paper mode's draw depends on the seed
    TableSpec("bleu.csv", lambda d: [r.flat() for r in d.bleu]),
    TableSpec("overlap.csv", lambda d: _priced(d, [r.flat() for r in d.overlap] if d.overlap else None)),
    TableSpec("timesplit.csv", lambda d: _priced(d, d.predicted) + [{**r, "cost_model": None} for r in d.measured_split]),
    TableSpec("bound.csv", lambda d: _priced(d, [p.flat() for p in d.points] or None)),  # no α estimated: no table
    TableSpec("measured.csv", lambda d: _priced(d, [{**c.flat(), **_fit_of(d, c)} for c in d.measured]
                                                if d.measured else None)),
    TableSpec("learned_vs_chains.csv", lambda d: _priced(d, [p.flat() for p in beside_pairs(d.measured)] or None)),
    TableSpec("trees.csv", lambda d: _priced(d, [t.flat() for t in d.trees] if d.trees else None)),
    TableSpec("tree_speedup.csv", lambda d: _priced(d, [r.flat() for r in d.tree_rows] if d.trees else None)),
    TableSpec("policy.csv", lambda d: _priced(d, d.policy_table or None, policy=d.config.policy)),
    TableSpec("whatif.csv", lambda d: _priced(d, [r.flat() for r in d.whatif] or None)),
]


def _no_pair(data: ReportData) -> str | None:
    if data.pair_of:
        return None
    return "the traces hold a single proposer" if len(data.names) < 2 else \
        "no dataset's records all hold two proposers the cost model prices"


def _without_pair(data: ReportData) -> list[str]:
    """The datasets without a pair (:func:`~specscope.sim.grid.dataset_pairs`): no panel."""
    return [dataset for dataset in by_dataset(data.records) if dataset not in data.pair_of]


def _pair_title(data: ReportData) -> str:
    """Figure 3's title: each pair (the datasets of each where they differ), and the datasets
    without one."""
    datasets: dict[tuple[str, str], list[str]] = {}
    for dataset, pair in data.pair_of.items():
        datasets.setdefault(pair, []).append(dataset)
    left = _without_pair(data)
    return "Where " + "; ".join(f"{a} beats {b}" + (f" ({', '.join(those)})" if len(datasets) > 1 else "")
                                for (a, b), those in datasets.items()) + (
        f" (not for {', '.join(left)}: no two proposers the cost model prices that every record there holds)"
        if left else "")


def _pair_caption(data: ReportData) -> str:
    pairs = set(data.pair_of.values())
    first, second = next(iter(pairs)) if len(pairs) == 1 else ("the first of a panel's pair", "the second")
    return (f"One colour marks positions where {first} emits more than {second}, the other the reverse; white is a "
            "tie — check whether either wins in bursts or everywhere. Each dataset's pair is the one its "
            "oracle-combined replays.")


def _no_overlap(data: ReportData) -> str | None:
    ov = data.config.overlap
    if data.overlap:
        return None
    compared = f"proposers {ov.lookup!r} and {ov.reference!r}" if ov.reference else f"{ov.lookup!r} with a model proposer"
    candidates = (ov.lookup, ov.reference) if ov.reference else \
        (ov.lookup, *(n for n in data.names if n not in LOOKUP_PROPOSERS))  # no reference named: any model proposer
    unpriced = [name for name in candidates if name in data.names and name not in data.simulated]
    if unpriced:
        return f"it compares {compared}, and the cost model prices no {' or '.join(unpriced)}"
    references = [ov.reference] if ov.reference else [n for n in data.simulated if n not in LOOKUP_PROPOSERS]
    lacking = {name: sum(name not in r.proposers for r in data.records) for name in (ov.lookup, *references)}
    if ov.lookup in data.names and references and any(lacking.values()):  # each in some records, not all
        return (f"it compares {compared}, which every record of a dataset must hold; "
                + ", ".join(f"{name!r} is missing from {count} of the {len(data.records)} records"
                            for name, count in lacking.items() if count))
    return f"it compares {compared}; the traces have {', '.join(data.names)}"


def _fitted(cost) -> bool:
    """Whether ``cost`` was fitted to an engine's runs (its step records or a sweep)."""
    return bool(getattr(cost, "measured", None) or getattr(cost, "fitted_cells", ()))


def _drawn_policies(data) -> list[str]:
    """Figure 1's policies: the configured ones the simulation has, and every policy the answer
    names best somewhere (a best fixed:8 is drawn though fixed:8 is not among them)."""
    simulated = {r.policy for r in data.rows}  # a proposer traced deeper than another draws its deeper ones too
    return list(dict.fromkeys([*(p for p in data.figure_policies or data.config.figure_policies if p in simulated),
                               *(r.best_policy for r in data.answer)]))


FIGURES = [
    FigureSpec(
        "speedup",
        lambda d: f"Speedup vs batch size ({d.config.sim.mode} mode)",
        lambda d: "Look where each line crosses 1.0 (no SD), which k wins at small and at large batch, and how "
                  "far each proposer's best solid line sits from its dashed oracle (exact k at every step, its "
                  "drafting paid at every step too: a bound on accepted tokens, not on speed — at large batch a "
                  f"fixed k can beat it). Drawn: "
                  f"{', '.join(_drawn_policies(d))} (the figure's policies and the answer's best).",
        lambda d: F.speedup_figure(d.rows, _drawn_policies(d)),
    ),
    FigureSpec(
        "acceptance_heatmap",
        lambda d: "Acceptance per request and output position",
        lambda d: "Bright streaks are runs of long acceptance: look for long bright bursts (typical of n-gram "
                  "copying from the prompt) against an even, fine-grained texture (a model drafter); positions "
                  "beyond the 95th percentile of output length are not drawn.",
        lambda d: acceptance_heatmap(d.records, d.names),
    ),
    FigureSpec(
        "difference_heatmap",
        _pair_title,
        _pair_caption,
        lambda d: difference_heatmap(d.records, d.pair_of),
        _no_pair,
    ),
    FigureSpec(
        "position_profile",
        lambda d: "Acceptance along the output, by output length",
        lambda d: "Check whether acc_len grows along a generation and drops in the last few percent of the "
                  "output, and whether long outputs behave differently from short ones. A bin that fewer than "
                  f"{F.PROFILE_MIN_REQUESTS} requests of its group reach is not drawn (position_profile.csv keeps "
                  "it, with its counts), except in a group of fewer requests, whose bins all of them reach are "
                  "(the legend gives each group's count); a tail that few requests reach moves with each of them.",
        lambda d: F.profile_figure(d.profile),
    ),
    FigureSpec(
        "request_boxplots",
        lambda d: "Per-request mean acc_len",
        lambda d: "The spread matters as much as the mean: wide boxes mean some requests gain a lot from SD "
                  "and others nothing. Boxes span the middle half of the requests, whiskers the 5th to the 95th "
                  "percentile, white diamonds the means.",
        lambda d: F.request_box_figure(d.means),
    ),
    FigureSpec(
        "overlap",
        lambda d: f"{d.config.overlap.lookup} vs {' / '.join(dict.fromkeys(r.reference for r in d.overlap))} by "
                  f"prompt/output overlap ({d.config.overlap.mode} mode)",
        lambda d: f"Read across a row: where {d.config.overlap.lookup} wins (positive percentages), and whether its "
                  "edge follows how much the output copies the prompt (BLEU-4) and how it moves as the batch grows "
                  f"(the paper found it winning only at high BLEU-4, its edge fading with the batch). Simulated in "
                  f"{d.config.overlap.mode} mode"
                  + (" (B copies of each request: a bin holds few requests, whose drain would decide mixed mode)"
                     if d.config.overlap.mode == "paper" else "") + ".",
        lambda d: F.overlap_figure(d.overlap, d.config.overlap.lookup, d.config.overlap.reference_policy),
        _no_overlap,
    ),
    FigureSpec(
        "time_split",
        lambda d: "Where step time goes",
        lambda d: "Compare the drafting slice across proposers, and how the verification and prefill "
                  "slices change with batch size.",
        lambda d: F.timesplit_figure(d.predicted, d.config.timesplit_policy, d.measured_split),
        lambda d: None if d.measured_split or any(r["policy"] == d.config.timesplit_policy for r in d.predicted)
        else f"it shows {d.config.timesplit_policy}, which was not simulated (--ks)",
    ),
    FigureSpec(
        "bound",
        lambda d: "Closed-form bound",
        lambda d: "Each star is the best k the i.i.d. model predicts for the α fitted to a dataset's traces (each "
                  "draft's chance of acceptance, not a policy's accepted over proposed), with c priced at "
                  "each k (a drafting cost paid once per step makes each draft cheaper as k grows), up to the k "
                  "its traces recorded (where its curve stops; where no k_max is recorded, the longest "
                  "acc_len − 1, which also counts those positions as cut off rather than rejected); where the "
                  "curve is flat, k matters little, where it falls, a long k costs more than it gains.",
        lambda d: F.bound_figure(d.points),
        lambda d: None if d.points else "no proposer's α could be estimated (no position with a draft to accept)",
    ),
    FigureSpec(
        "tree_vs_chain",
        lambda d: "Static tree vs chain, by batch size",
        lambda d: "A tree verifies nodes + 1 tokens per sequence to accept a longer path, its drafter one "
                  "pass per depth over each level's nodes: look where each "
                  "tree's line falls below the chain of its depth (the marked crossover) — past it, batch "
                  "size makes the extra verification cost more than the extra acceptance gives."
                  + (f" Note: {d.trees_from_chains}." if d.trees_from_chains else ""),
        lambda d: F.tree_figure(d.tree_rows, d.trees),
        lambda d: None if d.trees else "no tree was simulated: the traces carry no tree_rank (trace with "
                                       "--trees), or each tree is deeper than the ranks they recorded or the "
                                       "chains compared (the notes say which)",
    ),
    FigureSpec(
        "measured",
        lambda d: "Measured speedup, and the simulator's prediction for the same runs",
        lambda d: ("Solid lines are what the engine measured; nothing was simulated for these runs (the "
                   "traces hold none of their cells: the notes say which)."
                   if all(c.simulated_speedup is None for c in d.measured) else
                   f"Solid lines are what the engine measured{_ran_on(d.measured)}, dashed what the simulator "
                   f"predicted from the traces and the cost model ({d.cost_label}): "
                   + ("the gap between them is the simulator's error, where that model was fitted to the same "
                      "engine's runs." if _fitted(d.cost) else "this model was not fitted to an engine's runs (a "
                      "preset or a roofline), so the gap holds how far its prices are from that engine's, not "
                      "only the simulator's error: fit one with `costmodel fit`.")),
        lambda d: F.measured_figure(d.measured),
        lambda d: None if d.measured else "no measured runs were given (--measured)",
    ),
    FigureSpec(
        "policy_gap",
        lambda d: "How much of the gap to oracle-switch the learned policy closes",
        lambda d: "Gap closed = (learned − best fixed) / (oracle-switch − best fixed), all within the "
                  "policy's deepest k. A bar above 0 beats the best fixed policy (k chosen in hindsight); at 1 "
                  "it matches oracle-switch, the ceiling of a causal policy's tokens; \"no gap\": oracle-switch beats "
                  f"the best fixed policy there by less than {MIN_ROOM:.0%} of it, too little to divide by; \"below\": "
                  "oracle-switch is below it (its drafting and catch-up cost more than choosing the longer acc_len "
                  "gains); a bar beyond ±2 is cut there, its value written at its end (policy.csv has the "
                  "speedups). A black dash, where the policy chooses between a lookup and a model drafter, marks "
                  "how far knowing the lookup's next step reaches (lookup known: exact lookup steps, the drafter at "
                  "one fixed k or none, chosen in hindsight): above it the rest of the gap needs the drafter's "
                  "acceptance at each step. " + policy_label(d.config.policy, d.cost, d.cost_label),
        lambda d: gap_figure(d.policy_table),
        lambda d: ("no learned policy was given (--policy)" if not d.policy_table else None
                   if any(ceiling_of(line) is not None for line in d.policy_table) else
                   "the policy chooses between more than two proposers, and oracle-switch, the ceiling a gap "
                   "is measured to, switches between two"),
    ),
    FigureSpec(
        "policy_choices",
        lambda d: "The learned policy's choices along a few outputs",
        lambda d: "For each request, a strip of each proposer's acc_len (at most the policy's deepest k + 1, "
                  "as its walk replays them) and, below it, markers of its steps (colour = proposer, height = "
                  "k + 1): check that it switches to n-gram where n-gram's acc_len is bright (long) and proposes "
                  "little where both are dark (short) "
                  f"(each request walked alone, at batch size {min(d.config.sim.batch_sizes)}; a request the "
                  "policy's admission gate commits from its prompt runs one chain from its first step: one colour, "
                  "one k, n-gram's cut to what it offers)."
                  + ("" if not d.policy_choices or d.policy_choices[0].confidence is None else
                     f" There its rule stops a model drafter at its confidence: such a step's k is where the "
                     f"drafter's probability of a draft first fell below p = {d.policy_choices[0].confidence:g}."),
        lambda d: choices_figure(d.policy_choices),
        lambda d: None if d.policy_choices else "no learned policy was given (--policy)",
    ),
    FigureSpec(
        "whatif",
        lambda d: "What if: your engine beyond what was measured",
        lambda d: "Lines are the best k the model calibrated to your engine predicts at each batch size; "
                  "circles are measured cells (filled: the model was fitted to them; hollow: checks it never "
                  "saw), each with a dash at what the model predicts for it — look how far the hollow "
                  "circles sit from their dashes, and where the best k changes.",
        lambda d: whatif_figure(d.rows, d.measured, d.cost.fitted_cells, d.cost.engine),
        lambda d: None if d.whatif else "the cost model was not calibrated to an engine "
                                        "(specscope costmodel fit --from-sweep)",
    ),
]
