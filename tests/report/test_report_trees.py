"""Trees in the report: trees.csv, the tree-vs-chain figure and the answer line, from traces
that carry tree_rank."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest

from specscope.report.build import build_report
from specscope.report.config import ReportConfig
from specscope.sim.grid import SimConfig
from specscope.trace.load import write_traces
from specscope.trace.schema import ProposerTrace, TraceRecord
from specscope.trees import TreeShape
from specscope.trees import TreeShape


def ranked_records(n: int, seed: int) -> list[TraceRecord]:
    """EAGLE-like ranks: the drafter's top choice 55 % of the time, its 2nd or 3rd 35 %."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        length = int(rng.integers(40, 120))
        ranks = rng.choice([0, 1, 2, 9], size=(length, 4), p=[0.55, 0.2, 0.15, 0.1]).astype(np.int16)
        ranks[np.arange(length)[:, None] + np.arange(4)[None, :] >= length - 1] = -1
        acc = (1 + np.cumprod(ranks == 0, axis=1).sum(axis=1)).astype(np.int32)
        records.append(TraceRecord(f"r{i}", rng.integers(0, 100, 30), rng.integers(0, 100, length),
                                   {"eagle": ProposerTrace(acc, tree_rank=ranks)}, k_max=4, dataset="math"))
    return records


@pytest.fixture(scope="module")
def tree_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trees")
    write_traces(folder / "math.jsonl", ranked_records(12, 0))
    config = ReportConfig(cost_model="roofline:h100:llama3.1-8b", ks=(1, 2, 3, 4),
                          trees=("2x2x1", "3x2x1x1", "4x2x2x2x1"), sim=SimConfig(mode="paper", batch_sizes=(1, 8, 64)))
    return build_report([folder / "math.jsonl"], folder / "out", config), folder / "out"


def test_trees_table_matches_the_ranks(tree_report):
    result, out = tree_report
    rows = list(csv.DictReader((out / "trees.csv").open()))
    assert [(r["tree"], r["nodes"], r["depth"], r["chain"]) for r in rows] == [
        ("2x2x1", "10", "3", "fixed:3"), ("3x2x1x1", "21", "4", "fixed:4")]
    ranks = np.concatenate([r.proposers["eagle"].tree_rank for r in ranked_records(12, 0)])
    for row in rows:
        tree = TreeShape.parse(row["tree"])
        assert float(row["mean_acc_len"]) == pytest.approx(tree.acc_len(ranks).mean())
        assert float(row["acc_per_verified"]) == pytest.approx(float(row["mean_acc_len"]) / (tree.nodes + 1))
        chain_acc = float(row["chain_mean_acc_len"])
        assert float(row["chain_acc_per_verified"]) == pytest.approx(chain_acc / (tree.depth + 1))
        assert float(row["mean_acc_len"]) > float(row["chain_mean_acc_len"])  # ranks 1 and 2 are in the tree
    assert any("tree 4x2x2x2x1 not simulated for math (eagle): 5 deep" in note for note in result.notes)


def test_a_dataset_without_tree_rank_leaves_the_others_trees(tmp_path):
    """A dataset traced without --trees (and one traced shallower) beside one with ranks: the
    trees are compared where the ranks reach, and the report says where they are not."""
    chat = [replace(r, dataset="chat", proposers={"eagle": ProposerTrace(r.proposers["eagle"].acc_len)})
            for r in ranked_records(6, 1)]
    short = [replace(r, dataset="code", proposers={"eagle": replace(r.proposers["eagle"],
                                                                    tree_rank=r.proposers["eagle"].tree_rank[:, :3])})
             for r in ranked_records(6, 2)]
    write_traces(tmp_path / "t.jsonl", ranked_records(8, 0) + chat + short)
    config = ReportConfig(cost_model="roofline:h100:llama3.1-8b", ks=(1, 2, 3, 4), trees=("2x1x1", "3x2x1x1"),
                          sim=SimConfig(mode="paper", batch_sizes=(1, 8)))
    result = build_report([tmp_path / "t.jsonl"], tmp_path / "out", config)
    rows = list(csv.DictReader((tmp_path / "out" / "trees.csv").open()))
    assert [(r["dataset"], r["tree"]) for r in rows] == [("math", "2x1x1"), ("math", "3x2x1x1"), ("code", "2x1x1")]
    assert any("tree vs chain: not for chat, whose traces carry no tree_rank" in note for note in result.notes)
    assert any("tree 3x2x1x1 not simulated for code (eagle): 4 deep, but its traces reach depth 3" in note
               for note in result.notes)


def test_tree_figure_and_answer_follow_the_speedups(tree_report):
    result, out = tree_report
    assert any(p.name.endswith("_tree_vs_chain.png") for p in result.figures)
    speedup = {(r["policy"], int(r["batch_size"])): float(r["speedup"])
               for r in csv.DictReader((out / "tree_speedup.csv").open())}
    html = (out / "index.html").read_text()
    sizes = (1, 8, 64)
    for row in csv.DictReader((out / "trees.csv").open()):
        beats = [speedup[(f"tree:{row['tree']}", b)] > speedup[(row["chain"], b)] for b in sizes]
        assert row["beats_at"] == ",".join(str(b) for b, won in zip(sizes, beats) if won)
        up_to = row["beats_up_to"]
        if up_to:
            assert all(beats[: sizes.index(int(up_to)) + 1])
            header = f"{row['tree']} ({row['nodes']} nodes) beats fixed:{row['depth']}"
            said = f"up to B={up_to}" if row["crossover"] else f"at every B, to {up_to}"
            assert header in html and f"<td class=text>{said}</td>" in html
        else:
            assert not beats[0]
        if row["crossover"]:
            assert not beats[sizes.index(int(row["crossover"]))]


def test_the_answer_names_a_tree_where_it_is_the_fastest(tree_report):
    """Probe: the answer's best and its gap to the oracle were over chains alone: a tree at
    2.42× beside the best chain's 2.32× was not named. A static tree is realisable: the answer
    takes the fastest cell of chains and trees."""
    _, out = tree_report
    cells = [r for name in ("speedup.csv", "tree_speedup.csv") for r in csv.DictReader((out / name).open())
             if not r["policy"].startswith("oracle")]
    answer = {int(r["batch_size"]): r for r in csv.DictReader((out / "answer.csv").open())}
    for b, row in answer.items():
        mine = [r for r in cells if int(r["batch_size"]) == b]
        best = max(mine, key=lambda r: float(r["speedup"]))
        assert (row["best_policy"], float(row["best_speedup"])) == (best["policy"], pytest.approx(float(best["speedup"])))
    assert any(r["best_policy"].startswith("tree:") for r in answer.values())  # these ranks make a tree win somewhere


def test_a_tree_that_never_beats_its_chain_is_not_labelled_with_a_crossover():
    from specscope.report.figures import tree_figure
    from specscope.report.trees import TreeRow
    from specscope.sim.grid import SimRow

    def row(policy: str, batch: int, speedup: float) -> SimRow:
        return SimRow("d", "eagle", policy, batch, "mixed", speedup, speedup, 1.0, 1.0, 1.0, 1.0, 0.5, 2.0, 4)

    rows = [row(p, b, s) for p, values in (("fixed:3", (1.5, 1.3)), ("tree:2x1x1", (1.2, 1.0)))
            for b, s in zip((1, 8), values)]
    never = TreeRow("d", "eagle", "2x1x1", 6, 3, "fixed:3", 3.0, 2.5, 0.4, 0.6, None, 1)
    ax = tree_figure(rows, [never]).axes[0]  # no crossover to mark: the legend says so, no cross, no label
    assert not ax.texts and len(ax.lines) == 3  # the tree, its chain, the no-SD line
    assert "tree:2x1x1 (6 nodes; below its chain throughout)" in [t.get_text() for t in ax.get_legend().get_texts()]
    beats = TreeRow("d", "eagle", "2x1x1", 6, 3, "fixed:3", 3.0, 2.5, 0.4, 0.6, 1, 8, (1,))
    assert [t.get_text() for t in tree_figure(rows, [beats]).axes[0].texts] == ["2x1x1: crossover B=8"]
    # a second tree crossing at the same batch size: its label a line lower, not on top of the first's
    rows += [row("tree:3x1x1", b, s) for b, s in zip((1, 8), (1.2, 1.0))]
    other = TreeRow("d", "eagle", "3x1x1", 6, 3, "fixed:3", 3.0, 2.5, 0.4, 0.6, 1, 8, (1,))
    texts = tree_figure(rows, [beats, other]).axes[0].texts
    assert [t.get_text() for t in texts] == ["2x1x1: crossover B=8", "3x1x1: crossover B=8"]
    assert texts[0].xyann != texts[1].xyann


def test_one_batch_size_draws_the_chain_as_a_point():
    """A report at one batch size: the chain's dashed line through one point drew nothing, while the
    legend listed it (a review finding); it carries a marker now."""
    from specscope.report.figures import tree_figure
    from specscope.report.trees import TreeRow
    from specscope.sim.grid import SimRow

    rows = [SimRow("d", "eagle", policy, 1, "mixed", s, s, 1.0, 1.0, 1.0, 1.0, 0.5, 2.0, 4)
            for policy, s in (("fixed:3", 1.4), ("tree:2x1x1", 1.6))]
    tree = TreeRow("d", "eagle", "2x1x1", 6, 3, "fixed:3", 3.0, 2.5, 0.4, 0.6, None, 1, (1,))
    lines = {line.get_label(): line for line in tree_figure(rows, [tree]).axes[0].lines}
    assert lines["chain fixed:3"].get_marker() not in (None, "None", "", " ")


def test_a_tree_that_loses_at_a_small_batch_and_wins_at_a_larger_one_is_not_called_never():
    """A review's study: 2x1x1 lost to fixed:3 at B = 1 (1.022 against 1.029) and won at B = 2
    (1.004 against 0.960); the answer said 'never' and the figure 'below its chain throughout'."""
    from specscope.report.answer import tree_answer
    from specscope.report.figures import tree_figure
    from specscope.report.trees import TreeRow, _summarise
    from specscope.sim.grid import SimRow

    def row(policy: str, batch: int, speedup: float) -> SimRow:
        return SimRow("d", "eagle", policy, batch, "mixed", speedup, speedup, 1.0, 1.0, 1.0, 1.0, 0.5, 2.0, 4)

    rows = [row(p, b, s) for p, values in (("fixed:3", (1.029, 0.960, 0.9, 0.8)), ("tree:2x1x1", (1.022, 1.004, 0.8, 0.85)))
            for b, s in zip((1, 2, 4, 8), values)]
    ranks = np.zeros((3, 3), dtype=np.int64)
    late = _summarise("d", "eagle", TreeShape.parse("2x1x1"), ranks, rows)
    assert (late.beats_up_to, late.crossover, late.beats_at, late.again) == (None, 1, (2, 8), "2, 8")
    assert tree_answer([late])[1] == [["d", "eagle", "at B=2, 8 only"]]
    legend = [t.get_text() for t in tree_figure(rows, [late]).axes[0].get_legend().get_texts()]
    assert "tree:2x1x1 (6 nodes)" in legend
    back = TreeRow("d", "eagle", "2x1x1", 6, 3, "fixed:3", 3.0, 2.5, 0.4, 0.6, 1, 2, (1, 8))
    assert tree_answer([back])[1] == [["d", "eagle", "up to B=1, again at B=8"]]


def test_a_report_sets_the_trees_a_trace_was_taken_with_against_their_chains(tmp_path):
    """`trace --trees 2x1x1,3x1` keeps them in the settings file; the report took its own default
    (2x2x1, 3x2x1x1) and never showed the 2x1x1 that was traced."""
    import json

    from specscope.cli.report import traced_trees
    from specscope.report.config import ReportConfig

    first, second, bare = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    (tmp_path / "a.jsonl.settings.json").write_text(json.dumps({"trees": ["2x1x1", "3x1"]}))
    (tmp_path / "b.jsonl.settings.json").write_text(json.dumps({"trees": ["3x1", "2x2"]}))
    assert traced_trees([str(first), str(second), str(bare)]) == ("2x1x1", "3x1", "2x2")
    (tmp_path / "b.jsonl.settings.json").write_text('{"trees": ["3x1"')  # damaged: names nothing
    assert traced_trees([str(second), str(bare)]) == ReportConfig().trees


def test_a_study_sets_only_its_measured_drafters_trees_against_chains(tmp_path):
    """Probe: a study measured trees with EAGLE alone, yet its report set MTP's and the draft
    model's trees against chains too, priced with a tree cost its fit never measured (0).
    ``tree_drafters`` keeps the comparison to the drafters named."""
    from specscope.report.analyse import analyse

    records = [replace(r, proposers={**r.proposers, "mtp": r.proposers["eagle"]}) for r in ranked_records(6, 1)]
    write_traces(tmp_path / "math.jsonl", records)
    config = ReportConfig(cost_model="roofline:h100:llama3.1-8b", ks=(1, 2, 3), trees=("2x1x1",),
                          sim=SimConfig(mode="paper", batch_sizes=(1, 8)))
    assert {t.proposer for t in analyse([tmp_path / "math.jsonl"], config).trees} == {"eagle", "mtp"}
    kept = analyse([tmp_path / "math.jsonl"], replace(config, tree_drafters=("eagle",)))
    assert {t.proposer for t in kept.trees} == {"eagle"} and {r.acc for r in kept.tree_rows} == {"eagle"}

