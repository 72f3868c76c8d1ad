"""The heatmap matrix: placement, the position cap and block averaging."""

from __future__ import annotations

import numpy as np

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
    show its first 39 characters and an ellipsis (tables and the page keep all of it)."""
    from specscope.report.style import NAME_WIDTH, short

    assert short("code") == "code"
    long = "x" * 300
    assert len(short(long)) == NAME_WIDTH and short(long).endswith("…") and short(long)[:-1] == long[: NAME_WIDTH - 1]


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
