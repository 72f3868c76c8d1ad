"""The what-if section: a calibrated model's predicted winner per batch size, checked against the
measured winner among the configurations measured, with what the fit saw marked."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from specscope.analysis.measured import MeasuredCell, simulated_for
from specscope.costmodel.base import LinearDrafting
from specscope.costmodel.linear import FittedCell, LinearCostModel, linear_from_json
from specscope.errors import SpecscopeError
from specscope.report.whatif import whatif_figure, whatif_rows, whatif_summary
from specscope.sim.grid import SimRow


def row(acc: str, policy: str, batch: int, speedup: float) -> SimRow:
    return SimRow("code", acc, policy, batch, "mixed", speedup, speedup, 1.0, 1.0, 1.0, 1.0, 0.5, 1.5, 4)


ROWS = [  # B=1: ngram k=4 is best among what an engine runs, k=2 best among the measured; B=4: nothing pays
    row("ngram", "fixed:2", 1, 1.5), row("ngram", "fixed:4", 1, 1.8), row("eagle", "fixed:2", 1, 1.3),
    row("ngram", "adaptive", 1, 1.9), row("ngram", "oracle", 1, 2.5),  # no engine runs these as configured
    row("ngram", "fixed:2", 4, 0.9), row("ngram", "fixed:4", 4, 0.8), row("eagle", "fixed:2", 4, 0.95),
]
FITTED = (FittedCell("ngram", 2, 1, "/runs/code.jsonl"), FittedCell("eagle", 2, 1, "/runs/code.jsonl"))


def test_predicted_winner_against_the_measured_one():
    measured = [MeasuredCell("code", "ngram", 2, 1, 1.45), MeasuredCell("code", "eagle", 2, 1, 1.6),
                MeasuredCell("code", "ngram", 2, 4, 0.97), MeasuredCell("code", "eagle", 2, 4, 0.9),
                MeasuredCell("code", "ngram", 12, 1, 1.2)]  # k = 12: not simulated, and no winner
    measured = [replace(c, simulated_speedup=simulated_for(c, ROWS)) for c in measured]
    assert measured[-1].simulated_speedup is None and measured[0].simulated_speedup == 1.5
    one, four = whatif_rows(ROWS, measured, FITTED)
    assert (one.in_fit, one.predicted_best, one.predicted_speedup, one.best_in_fit) == (True, "ngram fixed:4", 1.8, False)
    assert (one.measured_best, one.measured_speedup, one.measured_in_fit) == ("eagle fixed:2", 1.6, True)
    assert (one.predicted_among_measured, one.agree) == ("ngram fixed:2", False)
    # trusting the prediction (k = 2, measured 1.45×) instead of EAGLE (1.6×) lost 9.4 %
    assert one.pick_measured_speedup == 1.45 and abs(one.lost_pct - 100 * 0.15 / 1.6) < 1e-12
    # B=4 was never fitted; nothing beats 1 there, measured or predicted: no SD wins both ways
    assert (four.in_fit, four.predicted_best, four.predicted_speedup) == (False, "none", 1.0)
    assert (four.measured_best, four.predicted_among_measured, four.agree) == ("none", "none", True)
    assert (four.pick_measured_speedup, four.lost_pct) == (1.0, 0.0)
    assert whatif_summary([one, four]) == ("The predicted winner among the measured configurations is the "
                                           "measured one in 1 of 1 batch sizes not in the fit (B=4); in 0 of 1 "
                                           "batch sizes in the fit (B=1); where not, the predicted pick measured "
                                           "9.4 % below the measured winner (ngram fixed:2 1.45× against "
                                           "eagle fixed:2 1.60× at B=1, code).")
    assert "in 2 of 2 workloads and batch sizes not in the fit (chat B=4, code B=4)" in \
        whatif_summary([replace(four, dataset="chat"), four])  # a check per workload, not per batch size
    whatif_figure(ROWS, measured, FITTED)  # draws without error
    # A k = 12 cell that won, measured but never simulated: the winner is named, the check not made
    measured[-1] = replace(measured[-1], measured_speedup=3.0)
    one, four = whatif_rows(ROWS, measured, FITTED)
    assert (one.measured_best, one.measured_speedup, one.measured_in_fit, one.agree) == ("ngram fixed:12", 3.0, False, None)
    assert (one.pick_measured_speedup, one.lost_pct) == (None, None)  # not checked: nothing to lose against
    assert whatif_summary([one, four]) == ("The predicted winner among the measured configurations is the "
                                           "measured one in 1 of 1 batch sizes not in the fit (B=4).")


def test_not_calibrated_or_not_measured():
    assert whatif_rows(ROWS, [], ()) == []  # a model not fitted to a sweep: no section
    rows = whatif_rows(ROWS, [], FITTED)
    assert [r.agree for r in rows] == [None, None] and whatif_summary(rows) is None


def test_fitted_cells_round_trip_through_the_model_file():
    drafting = {m: LinearDrafting(1e-4, 1e-5, 0.0) for m in ("ngram", "eagle")}  # each fitted method priced
    model = LinearCostModel("engine", 1e-3, 1e-5, 0.0, 0.0, drafting=drafting, fitted_cells=FITTED)
    again = linear_from_json(json.loads(json.dumps(model.describe())), "engine.json")
    assert again.fitted_cells == FITTED
    for change, field in ((lambda d: d.pop("drafting"), "fitted_cells[0].method"),  # a model that prices none of them
                          (lambda d: d.update(measured={"k": 2, "batch_size": 1}), "measured"),  # and step records
                          (lambda d: d.update(not_separated=["eagel.c_fixed"]), "not_separated")):
        document = json.loads(json.dumps(model.describe()))
        change(document)
        with pytest.raises(SpecscopeError, match=f"engine.json: field '{re.escape(field)}'"):
            linear_from_json(document, "engine.json")
    assert "fitted_cells" not in LinearCostModel("plain", 1e-3, 0.0, 0.0, 0.0).describe()


def test_measured_table_says_which_cells_the_model_was_fitted_to():
    """measured.csv mixed in-sample and held-out errors unsaid: each row says ``in_fit`` where the
    cost model was calibrated to a sweep (and nothing where it was not)."""
    from types import SimpleNamespace

    from specscope.report.catalogue import _fit_of

    calibrated = SimpleNamespace(cost=LinearCostModel("engine", 1e-3, 1e-5, 0.0, 0.0, fitted_cells=FITTED))
    assert _fit_of(calibrated, MeasuredCell("code", "ngram", 2, 1, 1.45)) == {"in_fit": True}
    assert _fit_of(calibrated, MeasuredCell("code", "ngram", 3, 1, 1.45)) == {"in_fit": False}
    plain = SimpleNamespace(cost=LinearCostModel("preset", 1e-3, 1e-5, 0.0, 0.0))
    assert _fit_of(plain, MeasuredCell("code", "ngram", 2, 1, 1.45)) == {}


def test_a_batch_size_the_requests_barely_fill_names_the_steady_states_own_winner():
    """At B = 64 over 100 requests the whole run is mostly ramp-up and drain: its winner (k = 4)
    is not the steady state's (k = 2, every slot decoding, as on a loaded server), which the row
    and the summary say; where they agree, or no iteration filled the batch, nothing is added."""
    rows = [replace(row("ngram", "fixed:2", 64, 1.10), steady_speedup=1.30),
            replace(row("ngram", "fixed:4", 64, 1.20), steady_speedup=1.05),
            row("ngram", "fixed:2", 1, 1.5), row("ngram", "fixed:4", 1, 1.8),
            replace(row("ngram", "fixed:2", 8, 1.2), steady_speedup=float("nan"))]
    wide, one, eight = whatif_rows(rows, [], FITTED)
    assert (wide.predicted_best, wide.steady_best, wide.steady_speedup) == ("ngram fixed:4", "ngram fixed:2", 1.30)
    assert (one.steady_best, eight.steady_best) == ("ngram fixed:4", None)
    assert whatif_summary([wide, one, eight]) == (
        "At B=64 (code: ngram fixed:2 1.30×) the steady state (every slot decoding, as on a loaded server) has another "
        "winner than the whole run: the traces' requests fill those batch sizes for part of their run only.")


def test_a_drafter_stopped_at_its_confidence_is_named_apart_from_its_fixed_chain():
    """A measured EAGLE cell at k = 2 stopped at p = 0.9 is `eagle confidence:0.9:2` (simulated by
    that policy where the rows hold it), never the fixed chain the model was fitted to; the measured
    figure draws it as its own line."""
    from specscope.report.figures import measured_figure

    stopped = MeasuredCell("code", "eagle", 2, 1, 1.7, confidence=0.9)
    assert simulated_for(stopped, ROWS) is None  # the rows simulate no confidence policy
    assert simulated_for(stopped, ROWS + [row("eagle", "confidence:0.9:2", 1, 1.65)]) == 1.65
    one, _ = whatif_rows(ROWS, [replace(stopped, simulated_speedup=1.65), MeasuredCell("code", "eagle", 2, 4, 0.9)],
                         FITTED)
    assert (one.measured_best, one.measured_in_fit) == ("eagle confidence:0.9:2", False)
    fixed = MeasuredCell("code", "eagle", 2, 1, 1.3)
    figure = measured_figure([stopped, fixed])
    labels = {text.get_text() for legend in figure.legends for text in legend.get_texts()}
    assert {"eagle k=2", "eagle confidence:0.9 k≤2"} <= labels
    markers = {line.get_label(): line.get_marker() for line in figure.axes[0].lines}
    assert markers["eagle k=2"] != markers["eagle confidence:0.9 k≤2"]  # one k, two configurations told apart


def test_a_chain_measured_beside_a_policy_is_told_apart_from_the_same_chain_measured_alone():
    """n-gram k = 4 at B = 1 measured alone (1.2×) and beside a learned policy (1.5×): the measured
    figure draws two lines, and the what-if's winner (the one beside) is not called the same
    configuration as a pick of the one alone (a review: "agree", with 20 % lost)."""
    from specscope.report.figures import measured_figure

    alone = MeasuredCell("code", "ngram", 4, 1, 1.2, simulated_speedup=1.8)
    beside = MeasuredCell("code", "ngram", 4, 1, 1.5, simulated_speedup=1.8, beside="learned:p.json (ngram+eagle)")
    figure = measured_figure([alone, beside])
    labels = {text.get_text() for legend in figure.legends for text in legend.get_texts()}
    assert {"ngram k=4", "ngram beside learned k=4"} <= labels
    one = whatif_rows(ROWS, [alone, beside], FITTED)[0]
    assert one.measured_best == "ngram fixed:4 beside learned" and one.agree is not True


def test_measured_cells_of_another_engine_are_named_and_noted(tmp_path):
    """A review: with every measured row's engine changed to another server's, the check scored
    "agree" against its cells with no note, and whatif.csv and measured.csv named no engine. Each
    now names the measured engine beside the fitted one, a cell of another engine is never one the
    model was fitted to, and one note says the check compares another engine's cells."""
    from types import SimpleNamespace

    from specscope.analysis.measured import read_bench_results
    from specscope.costmodel.linear import FittedSweep
    from specscope.report.catalogue import _fit_of
    from specscope.report.whatif import engine_note

    path = tmp_path / "measured.json"
    path.write_text(json.dumps([{"engine": "other", "workload": "code", "method": "ngram", "k": 2, "batch_size": 1,
                                 "speedup": 1.45}]))
    [cell] = read_bench_results([path])
    assert cell.engine == "other" and cell.flat()["engine"] == "other"  # measured.csv's column
    cell = replace(cell, simulated_speedup=simulated_for(cell, ROWS))
    mine = replace(cell, engine="ref")
    one = whatif_rows(ROWS, [cell], FITTED, "ref")[0]
    assert (one.fitted_engine, one.measured_engine, one.measured_in_fit) == ("ref", "other", False)
    assert whatif_rows(ROWS, [mine], FITTED, "ref")[0].measured_in_fit  # the very cell it was fitted to
    calibrated = SimpleNamespace(cost=LinearCostModel("engine", 1e-3, 1e-5, 0.0, 0.0, fitted_cells=FITTED, engine="ref"))
    assert (_fit_of(calibrated, cell), _fit_of(calibrated, mine)) == ({"in_fit": False}, {"in_fit": True})
    sweep = FittedSweep("/runs/calib", "ab" * 32)
    assert engine_note([cell], "engine", "ref", sweep) == (
        "1 of 1 measured cells are of engine 'other', and cost model 'engine' was fitted to engine 'ref' (sweep "
        "/runs/calib (results.json SHA-256 abababababab)): the what-if's measured check sets its predictions against "
        "another engine's cells (agree and lost % say how its prices carry over to that engine, not how well it "
        "predicts its own)")
    assert engine_note([mine], "engine", "ref", sweep) is None
    assert engine_note([replace(mine, engine=None)], "engine", "ref", None) == (
        "1 of 1 measured cells name no engine, and cost model 'engine' was fitted to engine 'ref': nothing checks "
        "that they are of it")
    assert engine_note([mine], "engine", "", None) == (
        "cost model 'engine' names no engine it was fitted to (a file written before fits kept it, or by hand): "
        "nothing checks that the measured cells (engine 'ref') are of it")
