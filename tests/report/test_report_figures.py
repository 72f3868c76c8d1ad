"""The heatmap matrix: placement, the position cap and block averaging."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.report import heatmaps
from specscope.report.heatmaps import acc_matrix


def test_rows_are_placed_and_padded_with_nan():
    grid = acc_matrix([np.array([1, 2, 3]), np.array([4])], cap=3)
    assert grid.shape == (2, 3)
    assert grid[0].tolist() == [1, 2, 3]
    assert grid[1, 0] == 4 and np.isnan(grid[1, 1:]).all()


def test_cap_cuts_and_blocks_average_ignoring_nan(monkeypatch):
    monkeypatch.setattr(heatmaps, "MAX_COLUMNS", 2)
    # cap 5 -> blocks of 3 positions -> 2 columns over positions 0-2 and 3-5
    grid = acc_matrix([np.array([1, 2, 3, 10, 20, 99, 99]), np.array([6, 8, 1, 4])], cap=5)
    assert grid.shape == (2, 2)
    assert grid[0].tolist() == [2.0, 15.0]  # position 5 and beyond are cut
    assert grid[1].tolist() == [5.0, 4.0]


def test_a_long_dataset_name_is_cut_in_figures_only():
    """A 300-character dataset name made figures 4500 px wide, their labels overlapping: figures
    show its first and last characters around an ellipsis (tables and the page keep all of it).
    Cut at the end, two runs' datasets sharing 39 characters were drawn under one name (a review:
    ``…_run2025-01-15_gsm8k`` and ``…_sharegpt``, whose boxes could be swapped unseen)."""
    from specscope.report.style import NAME_WIDTH, short

    assert short("code") == "code" and short("x" * NAME_WIDTH) == "x" * NAME_WIDTH
    long = "a" * 150 + "b" * 150
    assert len(short(long)) == NAME_WIDTH and short(long) == "a" * 19 + "…" + "b" * 20
    runs = [f"llama3.1-8b-instruct_h100_run2025-01-15_{d}" for d in ("gsm8k", "sharegpt")]
    assert short(runs[0]) != short(runs[1]) and short(runs[0]).endswith("_gsm8k")


def test_measured_runs_of_several_step_files_are_bars_naming_their_file():
    """Two engines' step records of one method, k and batch size: two bars, each naming its file
    (their runs had been pooled into one row, their times summed)."""
    from specscope.analysis.timesplit import PHASES
    from specscope.report.figures import timesplit_figure

    rows = [{"source": "measured", "steps_file": f"/runs/{name}.jsonl", "method": "eagle", "k": 3, "batch_size": 8,
             **{f"{p}_share": 1 / len(PHASES) for p in PHASES}} for name in ("cpu", "gpu")]
    fig = timesplit_figure([], "fixed:3", rows)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["eagle k=3\nB=8\ncpu.jsonl", "eagle k=3\nB=8\ngpu.jsonl"]
    fig = timesplit_figure([], "fixed:3", rows[:1])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["eagle k=3\nB=8"]


def test_a_studys_many_step_files_are_pooled_in_the_figure():
    """A study's step records (a file per workload × method: 28 files, over 100 bars whose labels
    ran into one another) are drawn as a bar per method × k × batch size, the panel naming how many
    files it pools, each bar's shares those of the summed seconds."""
    from specscope.analysis.timesplit import PHASES
    from specscope.report.figures import MAX_MEASURED_BARS, timesplit_figure

    def row(workload, method, b, drafting):
        seconds = {"prefill": 0.1, "drafting": drafting, "verification": 1.0, "overhead": 0.1}
        return {"source": "measured", "steps_file": f"/s/{workload}__{method}.steps.jsonl", "method": method,
                "k": 3, "batch_size": b, **{f"{p}_s": seconds[p] for p in PHASES},
                **{f"{p}_share": seconds[p] / sum(seconds.values()) for p in PHASES}}

    rows = [row(w, m, b, d) for w, d in (("code", 0.2), ("math", 0.8)) for m in ("eagle", "mtp", "draft", "ngram")
            for b in (1, 4, 8, 16)]
    assert len(rows) > MAX_MEASURED_BARS
    fig = timesplit_figure([], "fixed:3", rows)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) == 16 and labels[0] == "eagle k=3\nB=1"
    assert fig.axes[0].get_title() == "measured (engine step records, 8 files pooled)"
    drafting = fig.axes[0].patches[16].get_height()  # the second phase's first bar: (0.2 + 0.8) / (2.4 + 1.0)
    assert drafting == pytest.approx(1.0 / 3.4)


def test_the_speedup_legend_keeps_one_column_per_proposer():
    """A review: with EAGLE drawn at five policies and n-gram at two, the column-major legend put
    n-gram's entries under EAGLE's; each proposer's column is padded to the longest."""
    from specscope.report.figures import speedup_figure
    from specscope.sim.grid import COMBINED, SimRow

    def row(acc: str, policy: str, batch: int) -> SimRow:
        return SimRow("d", acc, policy, batch, "mixed", 1.2, 1.2, 1.0, 1.0, 1.0, 1.0, 0.5, 1.5, 4)

    policies = ["fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle"]
    rows = [row("eagle", p, b) for p in policies for b in (1, 8)] + [row("ngram", p, b) for p in policies[:2] for b in (1, 8)]
    rows += [row(COMBINED, "oracle-combined:ngram+eagle", b) for b in (1, 8)]
    legend = speedup_figure(rows, policies).legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert legend._ncols == 3 and len(texts) == 15
    assert texts[5:10] == ["ngram fixed:1", "ngram fixed:3", " ", " ", " "]  # the second column, n-gram's alone
    assert texts[10] == "oracle-combined:ngram+eagle (optimistic)"


def test_the_bound_figures_datasets_wear_no_proposers_colour():
    """A review: figure 8's panels are proposers and its lines datasets, drawn in n-gram's orange
    and EAGLE's blue — in the n-gram panel ShareGPT read as EAGLE."""
    from matplotlib.colors import to_hex

    from specscope.analysis.bound_points import BoundPoint
    from specscope.report.figures import bound_figure
    from specscope.report.style import PROPOSER_COLOURS

    points = [BoundPoint(d, p, 0.7, 0.1, 8, 1, 100.0, 4, 2.0, 3, (0.1,) * 12)
              for d in ("gsm8k", "sharegpt") for p in ("ngram", "eagle")]
    drawn = {to_hex(line.get_color()) for ax in bound_figure(points).axes for line in ax.lines if line.get_linewidth() > 2}
    assert len(drawn) == 2 and not drawn & {c.lower() for c in PROPOSER_COLOURS.values()}


def test_an_acc_len_of_1_is_the_lowest_colour_where_nothing_was_accepted():
    """Traces without k_max whose every acc_len is 1: the colour scale spans 1 … 2, so 1 is drawn
    at its bottom (a scale of no width drew every cell mid-green, which reads as acc_len 3)."""
    from specscope.report.heatmaps import acceptance_heatmap
    from specscope.trace.schema import ProposerTrace, TraceRecord

    record = TraceRecord("r", np.arange(3), np.arange(5), {"ngram": ProposerTrace(np.ones(5, dtype=np.int32))},
                         dataset="d")
    fig = acceptance_heatmap([record], ["ngram"])
    image = next(image for ax in fig.axes for image in ax.get_images())
    assert image.norm.vmin == 1 and image.norm.vmax == 2 and image.norm(1.0) == 0.0
