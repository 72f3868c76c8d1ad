"""The report's files, its self-containedness and its escaping (synthetic traces)."""

from __future__ import annotations

import base64
import hashlib
import csv
import html
import re
from dataclasses import replace
from pathlib import Path

import pytest
from report_fixtures import HOSTILE_DATASET, HOSTILE_ID

from specscope.errors import SpecscopeError
from specscope.report.answer import answer_rows
from specscope.sim.grid import SimRow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_every_figure_and_table_is_written(synthetic_report):
    names = sorted(p.name for p in synthetic_report.figures)
    assert names == ["fig1_speedup.png", "fig2_acceptance_heatmap.png", "fig3_difference_heatmap.png",
                     "fig4_position_profile.png", "fig5_request_boxplots.png", "fig6_overlap.png",
                     "fig7_time_split.png", "fig8_bound.png"]
    for path in synthetic_report.figures:
        assert path.read_bytes().startswith(PNG_MAGIC)
    tables = {p.name for p in synthetic_report.tables}
    assert {"stats.csv", "pairs.csv", "speedup.csv", "answer.csv", "overlap.csv", "bleu.csv",
            "position_profile.csv", "timesplit.csv", "bound.csv", "request_means.csv"} <= tables
    with (synthetic_report.index.parent / "answer.csv").open() as handle:
        answer = list(csv.DictReader(handle))
    assert len(answer) == 2 * 3  # datasets × batch sizes
    assert {(row["mode"], row["seed"]) for row in answer} == {("mixed", "42")}  # what drew the requests it rests on
    few = ["dataset 'chat': only 24 requests (3605 output positions); dataset '<img src=x onerror=\"alert(2)\"> "
           "$x_1$ & co': only 12 requests (3265 output positions): their speedups, α and verdict rest on these alone; "
           "a few requests more or fewer may move them (the paper's datasets hold about 300)"]
    assert synthetic_report.notes == [
        *few,
        "dataset 'chat': ngram recorded no draft_len, so its fixed and adaptive steps there are taken to have "
        "proposed (and paid its drafting) (no guess applies)",
        "dataset '<img src=x onerror=\"alert(2)\"> $x_1$ & co': ngram recorded no draft_len, so its fixed and "
        "adaptive steps there are taken to have proposed (and paid its drafting) (no guess applies)",
        "figure 'tree vs chain' not drawn: no tree was simulated: the traces carry no tree_rank (trace with "
        "--trees), or each tree is deeper than the ranks they recorded or the chains compared (the notes say which)",
        "figure 'measured' not drawn: no measured runs were given (--measured)",
        "figure 'policy gap' not drawn: no learned policy was given (--policy)",
        "figure 'policy choices' not drawn: no learned policy was given (--policy)",
        "figure 'whatif' not drawn: the cost model was not calibrated to an engine (specscope costmodel fit "
        "--from-sweep)"]


def test_page_is_self_contained(synthetic_report, synthetic_traces):
    page = synthetic_report.index.read_text(encoding="utf-8")
    for trace in map(Path, synthetic_traces):  # each input by its absolute path and digest: the page travels
        assert f"{trace.resolve()} (SHA-256 {hashlib.sha256(trace.read_bytes()).hexdigest()[:12]})" in page
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == 8
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    # The embedded images are the PNG files, byte for byte.
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in sources}
    assert embedded == {p.read_bytes() for p in synthetic_report.figures}
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "default-src 'none'" in html.unescape(page)
    assert "batch sizes 1, 8, 12 · seed 42" in html.unescape(page)  # the draws' seed: it moves n-gram's guessed cells
    for term in ("acc_len", "α", "τ (mean acceptance length)", "oracle-combined · oracle-switch"):  # defined on the page
        assert f"<dt>{html.escape(term)}</dt>" in page
    with (synthetic_report.index.parent / "speedup.csv").open(newline="") as handle:
        assert {row["seed"] for row in csv.DictReader(handle)} == {"42"}


def test_trace_strings_render_as_text(synthetic_report):
    page = synthetic_report.index.read_text(encoding="utf-8")
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt; $x_1$ &amp; co" in page


def test_page_opens_with_the_answer(synthetic_report):
    page = synthetic_report.index.read_text(encoding="utf-8")
    assert page.index("The answer") < page.index("<figure")
    assert "optimistic" in page
    for number in range(1, 9):
        assert f"Figure {number}." in page


def _row(dataset, acc, policy, b, speedup) -> SimRow:
    return SimRow(dataset, acc, policy, b, "mixed", speedup, speedup, 1.0, 1.0, 1.0, 1.0, 0.5, 2.0, 10)


def test_answer_picks_the_best_realisable_policy_and_the_oracle_gap():
    rows = [
        _row("d", "ngram", "fixed:3", 1, 1.2), _row("d", "eagle", "fixed:3", 1, 1.8),
        _row("d", "eagle", "adaptive", 1, 1.9), _row("d", "eagle", "oracle", 1, 2.1),
        _row("d", "ngram", "oracle", 1, 1.4), _row("d", "combined", "oracle-combined:ngram+eagle", 1, 3.0),
        _row("d", "ngram", "fixed:3", 64, 0.95), _row("d", "eagle", "fixed:3", 64, 0.9),
        _row("d", "eagle", "oracle", 64, 1.1),
    ]
    first, second = answer_rows(rows)
    assert (first.best_acc, first.best_policy, first.best_speedup) == ("eagle", "adaptive", 1.9)
    assert (first.oracle_acc, first.oracle_speedup) == ("eagle", 2.1)
    assert first.gap == pytest.approx(0.2)
    assert first.combined_speedup == 3.0
    assert (second.best_acc, second.best_speedup, second.combined_speedup) == ("ngram", 0.95, None)


def test_hostile_names_appear_in_tables(synthetic_report):
    with (synthetic_report.index.parent / "bleu.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert HOSTILE_ID in {r["id"] for r in rows}
    assert HOSTILE_DATASET in {r["dataset"] for r in rows}


def test_a_report_held_to_a_depth_simulates_no_deeper_proposal(tmp_path):
    """``depth``: what a cost model measured no deeper than may price. Every simulated walk —
    fixed, adaptive (which grows to the traces' k_max) and the oracles — stays within it, as on
    the traces cut to that depth; the acceptance analyses keep the whole traces."""
    from report_fixtures import synthetic_records

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig, simulate
    from specscope.trace.load import load_traces, write_traces

    path = tmp_path / "chat.jsonl"
    write_traces(path, synthetic_records("chat", 12, seed=3))
    config = ReportConfig(sim=SimConfig(mode="mixed", batch_sizes=(1, 4)), trees=()).held_to(2, "measured to 2")
    assert config.ks == (1, 2) and config.overlap.lookup_policies == ("fixed:2",) and config.bound_k == 2
    data = analyse([str(path)], config)
    cut = [r.capped(2) for r in load_traces([path], lengths="own")[0]]
    expected = simulate(cut, ["ngram", "eagle"], ["fixed:1", "fixed:2", "adaptive", "oracle"], data.cost, config.sim)
    assert {(r.acc, r.policy, r.batch_size): r.speedup for r in data.rows if r.policy != "oracle-combined:ngram+eagle"} \
        == {(r.acc, r.policy, r.batch_size): r.speedup for r in expected}
    assert max(int(r.proposers["eagle"].acc_len.max()) for r in data.records) > 3  # the analyses read all of it
    # probe: the answer's † said "the traces were recorded to k_max = 2" of traces recorded to 10
    assert data.edges[("chat", "eagle")] == (2, "measured to 2")


def test_a_proposer_measured_shallower_is_held_to_its_own_depth(tmp_path):
    """A study measured EAGLE's trees 3 deep and every chain at k = 2: n-gram is held to 2 (its
    fixed ks, adaptive and its oracle, as on its arrays cut to 2, and its † says why), EAGLE to 3;
    the pair's oracle-combined reads n-gram's arrays so cut."""
    from report_fixtures import synthetic_records

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig, simulate
    from specscope.trace.load import load_traces, write_traces

    path = tmp_path / "chat.jsonl"
    write_traces(path, synthetic_records("chat", 12, seed=3))
    config = replace(ReportConfig(sim=SimConfig(mode="mixed", batch_sizes=(1, 4)), trees=()),
                     proposer_depths=(("ngram", 2, "ngram measured to 2"),)).held_to(3, "measured to 3")
    data = analyse([str(path)], config)
    records = [r.capped(3) for r in load_traces([path], lengths="own")[0]]
    cut = [replace(r, proposers={**r.proposers, "ngram": r.proposers["ngram"].capped(2)}) for r in records]
    expected = [*simulate(cut, ["ngram"], ["fixed:1", "fixed:2", "adaptive", "oracle"], data.cost, config.sim),
                *simulate(cut, ["eagle"], ["fixed:1", "fixed:2", "fixed:3", "adaptive", "oracle"], data.cost,
                          config.sim)]
    assert {(r.acc, r.policy, r.batch_size): r.speedup for r in data.rows if r.policy != "oracle-combined:ngram+eagle"} \
        == {(r.acc, r.policy, r.batch_size): r.speedup for r in expected}
    assert data.edges[("chat", "ngram")] == (2, "ngram measured to 2")
    assert data.edges[("chat", "eagle")] == (3, "measured to 3")
    combined = simulate(cut, ["combined"], ["oracle-combined:ngram+eagle"], data.cost, config.sim)
    assert {r.batch_size: r.speedup for r in data.rows if r.policy == "oracle-combined:ngram+eagle"} \
        == {r.batch_size: r.speedup for r in combined}


def test_a_report_on_shallow_traces_holds_itself_to_their_depth(tmp_path):
    """Traces recorded to k_max 2 with the report's defaults (--ks 1–8, the overlap's fixed:3 and
    fixed:5, the time split's fixed:3): every part is held to k = 2 and the answer says why (the
    report refused every trace of k_max < 5, whatever --ks said)."""
    from report_fixtures import synthetic_records

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces

    path = tmp_path / "chat.jsonl"
    write_traces(path, [r.capped(2) for r in synthetic_records("chat", 12, seed=4)])
    data = analyse([str(path)], ReportConfig(sim=SimConfig(mode="mixed", batch_sizes=(1, 4)), trees=()))
    assert data.config.ks == (1, 2) and data.config.deepest == 2
    assert data.config.longer_k == "the traces were recorded to k_max = 2" and data.edges[("chat", "eagle")][0] == 2
    assert {r.policy for r in data.rows} >= {"fixed:1", "fixed:2", "adaptive", "oracle"}
    positions = sum(r.output_len for r in data.records)  # 12 requests: the note says its numbers stand on them alone
    assert f"dataset 'chat': only 12 requests ({positions} output positions): its speedups" in " ".join(data.notes)


def test_a_trace_read_from_a_pipe_is_read_once(tmp_path):
    """A report read each trace twice (cut to common lengths, then whole): a pipe or ``<(...)``
    was empty the second time, and refused as holding no records. One read gives both."""
    import os
    import threading

    from report_fixtures import synthetic_records

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces

    path = tmp_path / "chat.jsonl"
    write_traces(path, [r.capped(2) for r in synthetic_records("chat", 12, seed=4)])
    read, write = os.pipe()  # as the shell's <(...): /dev/fd/N, a pipe that empties as it is read

    def feed() -> None:
        with os.fdopen(write, "wb") as sink:
            sink.write(path.read_bytes())

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        data = analyse([f"/dev/fd/{read}"], ReportConfig(sim=SimConfig(mode="mixed", batch_sizes=(1,)), trees=()))
    finally:
        writer.join()
        os.close(read)
    assert len(data.records) == len(data.sim_records) == 12 and {r.dataset for r in data.records} == {"chat"}


def test_the_answer_explains_the_dagger_only_where_a_row_carries_it():
    from specscope.report.answer import AnswerRow
    from specscope.report.html import answer_section

    row = AnswerRow("d", 1, "eagle", "fixed:3", 1.5, "eagle", 1.6, 0.1, None)
    assert "†" not in answer_section([row], {("d", "eagle"): (8, "a longer one may do better (--ks)")})
    assert "†" not in answer_section([row], {("d", "ngram"): (3, "n-gram's own depth")})  # another proposer's
    edge = answer_section([row], {("d", "eagle"): (3, "a longer one may do better (--ks)")})
    assert "fixed:3\u00a0†" in edge and "† the largest k tried (3); a longer one may do better (--ks)." in edge
    other = AnswerRow("e", 1, "eagle", "fixed:8", 1.5, "eagle", 1.6, 0.1, None)
    both = answer_section([row, other], {("d", "eagle"): (3, "recorded to 3"), ("e", "eagle"): (8, "a longer one (--ks)")})
    assert "† the largest k tried (3 for d · eagle); recorded to 3." in both
    assert "(8 for e · eagle); a longer one (--ks)." in both


def test_the_answer_shows_oracle_combined_only_where_a_pair_was_combined():
    """One proposer: no oracle-combined cell, so neither its column nor its footnote."""
    from specscope.report.answer import AnswerRow
    from specscope.report.html import answer_section

    alone = AnswerRow("d", 1, "eagle", "fixed:3", 1.5, "eagle", 1.6, 0.1, None)
    assert "oracle-combined" not in answer_section([alone])
    paired = answer_section([AnswerRow("d", 1, "eagle", "fixed:3", 1.5, "eagle", 1.6, 0.1, 2.4)])
    assert "oracle-combined*" in paired and "* oracle-combined takes" in paired and "2.400" in paired
    named = answer_section([AnswerRow("d", 1, "eagle3", "fixed:3", 1.5, "eagle3", 1.6, 0.1, 2.4,
                                      "oracle-combined:ngram+eagle3")])
    assert "oracle-combined:ngram+eagle3*" in named  # the column names the pair it combined


def test_an_interrupted_report_runs_again_into_its_folder(synthetic_traces, tmp_path, monkeypatch):
    """Stopped after its tables (Ctrl-C in the first figure), the report is run again into the
    same folder: its half-written files are its own (listed in its manifest as they were
    written), not a user's it would refuse to replace."""
    import dataclasses

    from specscope.report import figures
    from specscope.report.build import MANIFEST, build_report
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig

    config = dataclasses.replace(ReportConfig(), ks=(1, 3), sim=SimConfig(mode="paper", batch_sizes=(1, 8)))
    out = tmp_path / "out"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    drawn = figures.speedup_figure
    monkeypatch.setattr(figures, "speedup_figure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_report(synthetic_traces, out, config)
    assert (out / "speedup.csv").is_file() and "speedup.csv" in (out / MANIFEST).read_text()
    monkeypatch.setattr(figures, "speedup_figure", drawn)
    result = build_report(synthetic_traces, out, config)
    assert result.index.is_file() and (out / "fig1_speedup.png").is_file()
    monkeypatch.setattr(figures, "speedup_figure", interrupted)  # a rerun stopped: no page beside its new tables
    with pytest.raises(KeyboardInterrupt):
        build_report(synthetic_traces, out, dataclasses.replace(config, sim=SimConfig(mode="paper", batch_sizes=(1,))))
    assert not (out / "index.html").exists() and (out / "speedup.csv").is_file()
    # a table the user edits after the interruption is theirs: neither replaced nor removed (it was listed without
    # its SHA-256 until the report's end, and a rerun overwrote the edit, or removed it where it no longer wrote it)
    with (out / "speedup.csv").open("a") as handle:
        handle.write("my conclusion\n")
    monkeypatch.setattr(figures, "speedup_figure", drawn)
    with pytest.raises(SpecscopeError, match="speedup.csv was changed since the report wrote it"):
        build_report(synthetic_traces, out, config)
    assert (out / "speedup.csv").read_text().endswith("my conclusion\n")


def test_a_dangling_link_in_the_folder_is_not_written_through(synthetic_traces, tmp_path):
    """A user's dangling link named stats.csv passed as no file: the report created its target,
    outside the folder, and listed the link as its own."""
    from specscope.report.build import build_report
    from specscope.report.config import ReportConfig

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "stats.csv").symlink_to(elsewhere / "victim.csv")
    with pytest.raises(SpecscopeError, match=r"holds stats\.csv, which no report wrote there"):
        build_report(synthetic_traces, out, ReportConfig())
    assert not list(elsewhere.iterdir())


def test_the_overlap_note_names_the_proposer_the_cost_model_cannot_price():
    from types import SimpleNamespace

    from specscope.report.catalogue import _no_overlap
    from specscope.report.config import ReportConfig

    both, eagle = SimpleNamespace(proposers={"ngram": 0, "eagle": 0}), SimpleNamespace(proposers={"eagle": 0})
    data = SimpleNamespace(config=ReportConfig(), overlap=[], names=["ngram", "eagle"], simulated=["eagle"],
                           records=[both, both])
    assert _no_overlap(data) == "it compares 'ngram' with a model proposer, and the cost model prices no ngram"
    data.names, data.simulated, data.records = ["eagle"], ["eagle"], [eagle, eagle]
    assert _no_overlap(data).endswith("the traces have eagle")
    # both proposers among the traces', n-gram in some records only: said so, not "the traces have eagle, ngram"
    data.names, data.simulated, data.records = ["ngram", "eagle"], ["ngram", "eagle"], [both, eagle, eagle]
    assert _no_overlap(data) == ("it compares 'ngram' with a model proposer, which every record of a dataset must "
                                 "hold; 'ngram' is missing from 2 of the 3 records")
    # its only model proposer unpriced (traces of n-gram and MTP under the paper's model): said, where it
    # read "the traces have ngram, mtp"
    mtp = SimpleNamespace(proposers={"ngram": 0, "mtp": 0})
    data.names, data.simulated, data.records = ["ngram", "mtp"], ["ngram"], [mtp, mtp]
    assert _no_overlap(data) == "it compares 'ngram' with a model proposer, and the cost model prices no mtp"


def test_datasets_traced_with_other_proposers_report_what_each_holds(tmp_path):
    """One dataset traced with n-gram and EAGLE-3 beside one with n-gram and EAGLE: each is
    simulated with the proposers it holds (a note for the rest), and the overlap figure sets
    n-gram against EAGLE-3 where there is no EAGLE to set it against."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    rng = np.random.default_rng(0)

    def records(dataset, model):
        return [TraceRecord(f"r{i}", rng.integers(0, 50, 20), rng.integers(0, 50, 60),
                            {"ngram": ProposerTrace(rng.integers(1, 4, 60).astype(np.int32)),
                             model: ProposerTrace(rng.integers(1, 6, 60).astype(np.int32))}, k_max=5, dataset=dataset)
                for i in range(6)]

    write_traces(tmp_path / "a.jsonl", records("chat", "eagle"))
    write_traces(tmp_path / "b.jsonl", records("code", "eagle3"))
    config = ReportConfig(cost_model="roofline:h100:llama3.1-8b", ks=(1, 2, 3), sim=SimConfig(mode="paper", batch_sizes=(1, 8)))
    data = analyse([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], config)
    cells = {(r.dataset, r.acc) for r in data.rows}
    assert {("chat", "eagle"), ("code", "eagle3"), ("chat", "ngram"), ("code", "ngram")} <= cells
    assert not {("chat", "eagle3"), ("code", "eagle")} & cells
    assert "dataset 'code': its traces do not all hold proposer 'eagle': none of its 6 records holds it, so its cells with eagle are left out" in data.notes
    assert {(r.dataset, r.reference) for r in data.overlap} == {("chat", "eagle"), ("code", "eagle3")}
    from specscope.report.catalogue import _pair_title
    assert data.pair_of == {"chat": ("ngram", "eagle"), "code": ("ngram", "eagle3")}  # each its own (figure 3 too)
    assert _pair_title(data) == "Where ngram beats eagle (chat); ngram beats eagle3 (code)"
    data = analyse([tmp_path / "b.jsonl"], config)
    assert data.overlap and {r.reference for r in data.overlap} == {"eagle3"}  # drawn: n-gram against EAGLE-3
    data = analyse([tmp_path / "b.jsonl"], replace(config, ks=(1, 2, 7, 9)))  # traced to k_max = 5
    assert data.config.ks == (1, 2, 5) and "fixed:7, fixed:9 not simulated: the traces were recorded to k_max = 5; " \
        "fixed:5 in their place" in data.notes  # probe: the deepest k that fits was not tried


def test_a_record_without_one_proposer_and_ks_between_two_depths_still_report(tmp_path):
    """A later record without EAGLE raised KeyError (only the first record's proposers were
    looked up); a --ks between n-gram's depth (traced to 6) and EAGLE's (4) aborted the report
    naming a k the user never gave. Held to the shallowest proposer, with a note."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    def record(i, eagle=True):
        proposers = {"ngram": ProposerTrace(np.array([7, 1, 1, 1, 1, 1, 1, 1], np.int32))}
        if eagle:
            proposers["eagle"] = ProposerTrace(np.array([5, 1, 2, 1, 3, 1, 1, 1], np.int32))
        return TraceRecord(f"r{i}", np.arange(5), np.arange(8), proposers, dataset="d")

    write_traces(tmp_path / "t.jsonl", [record(0), record(1), record(2, eagle=False)])
    config = ReportConfig(ks=(1, 2, 5), sim=SimConfig(mode="paper", batch_sizes=(1,)), trees=())
    data = analyse([tmp_path / "t.jsonl"], config)
    assert {r.acc for r in data.rows} >= {"ngram"} and "eagle" not in {r.acc for r in data.rows}
    write_traces(tmp_path / "u.jsonl", [record(0), record(1)])
    data = analyse([tmp_path / "u.jsonl"], config)
    assert data.config.ks == (1, 2, 4) and any("eagle: fixed:5 not simulated: the traces reach k = 4 (the proposer's "
                                                "longest acc_len − 1: k_max not recorded" in n for n in data.notes)
    assert ("ngram", "fixed:5", 1) in {(r.acc, r.policy, r.batch_size) for r in data.rows}  # n-gram's own depth, 6


def test_one_datasets_depth_never_limits_anothers(tmp_path):
    """Probe: a report over a dataset traced to k_max 2 and one traced to 8 held both to 2 (the
    deeper one's oracle cut, its best fixed:8 never tried, its note false). Each keeps its own
    depth: the deep one is simulated to fixed:8 as it is alone, with the same numbers."""
    from report_fixtures import synthetic_records

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces

    shallow, deep = tmp_path / "shallow.jsonl", tmp_path / "deep.jsonl"
    write_traces(shallow, [r.capped(2) for r in synthetic_records("chat", 12, seed=4)])
    write_traces(deep, synthetic_records("code", 12, seed=5))
    config = ReportConfig(sim=SimConfig(mode="mixed", batch_sizes=(1, 4)), trees=())
    both, alone = analyse([str(shallow), str(deep)], config), analyse([str(deep)], config)
    mine = {(r.acc, r.policy, r.batch_size): r.speedup for r in both.rows if r.dataset == "code"}
    assert mine == {(r.acc, r.policy, r.batch_size): r.speedup for r in alone.rows}
    assert "fixed:8" in {p for _, p, _ in mine} and both.edges[("code", "eagle")][0] == 8 and both.edges[("chat", "ngram")][0] == 2
    assert {r.policy for r in both.rows if r.dataset == "chat"} == {"fixed:1", "fixed:2", "adaptive", "oracle",
                                                                   "oracle-combined:ngram+eagle"}
    assert any(n.startswith("dataset 'chat': fixed:3") for n in both.notes)
    assert not any("dataset 'code'" in n and "not simulated" in n for n in both.notes)


def test_records_of_one_dataset_traced_to_two_depths_keep_their_oracle_whatever_the_ks(tmp_path):
    """Probe: a dataset whose records were traced to k_max 6 and 10 had every array cut to 6 when
    the report simulated past 6 (its default --ks 1–8), and whole with --ks 1–6: n-gram's oracle
    2.39× or 2.71× by --ks (simulate: 2.71×), the gap to it 0.04 or 0.36. The arrays stay whole;
    the fixed ks stop at 6, fixed:6 tried in place of 7 and 8, and the answer's † says the traces
    end there rather than that a longer k may do better."""
    from report_fixtures import synthetic_records

    from specscope.costmodel.registry import resolve_cost_model
    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig, simulate
    from specscope.trace.load import load_traces, write_traces

    path = tmp_path / "mixed.jsonl"
    records = synthetic_records("chat", 12, seed=6)
    write_traces(path, [r.capped(6) if i % 3 == 0 else r for i, r in enumerate(records)])
    sim = SimConfig(mode="paper", batch_sizes=(1, 8))
    oracles = [{(r.acc, r.batch_size): r.speedup for r in analyse([str(path)], ReportConfig(ks=ks, sim=sim, trees=())).rows
                if r.policy == "oracle"} for ks in ((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6, 7, 8))]
    expected = simulate(load_traces([path], lengths="own")[0], ["ngram", "eagle"], ["oracle"],
                        resolve_cost_model(ReportConfig().cost_model), sim)
    assert oracles[0] == oracles[1] == {(r.acc, r.batch_size): r.speedup for r in expected}
    data = analyse([str(path)], ReportConfig(ks=(1, 3, 8), sim=sim, trees=()))
    assert data.config.ks == (1, 3, 6)  # the deepest k that fits, in place of 8
    assert data.edges[("chat", "ngram")] == (6, "the traces were recorded to k_max = 6")


def test_a_report_never_replaces_or_removes_what_a_user_changed_or_wrote(synthetic_traces, tmp_path):
    """Probe: a figure the last report wrote and the user annotated since was removed by the
    next report (the manifest listed its name only); a user's fig3_mine.png was refused as one
    the report 'would replace'; a report into a study's folder removed the study's measured and
    policy tables. Now: a changed file refuses the run, a name the report never writes is left
    alone, a study's folder is the study's."""
    import dataclasses

    from specscope.report.build import build_report
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig

    config = dataclasses.replace(ReportConfig(), ks=(1, 3), sim=SimConfig(mode="paper", batch_sizes=(1,)))
    out = tmp_path / "out"
    first = build_report(synthetic_traces, out, config)
    (out / "fig3_mine.png").write_bytes(b"mine")
    first.figures[0].write_bytes(b"annotated")
    with pytest.raises(SpecscopeError, match=rf"{first.figures[0].name} was changed since the report wrote it"):
        build_report(synthetic_traces, out, config)
    assert first.figures[0].read_bytes() == b"annotated"
    first.figures[0].unlink()
    build_report(synthetic_traces, out, config)  # its own files again, the user's beside them
    assert (out / "fig3_mine.png").read_bytes() == b"mine"
    (out / "study.json").write_text("{}")
    with pytest.raises(SpecscopeError, match="holds a study"):
        build_report(synthetic_traces, out, config)


def test_the_verdict_names_where_sd_pays_when_it_is_not_one_run_of_batch_sizes():
    """Probe: speedups 0.80, 0.79, 1.38, 3.79 at B = 1, 2, 16, 64 read "SD pays up to batch 64;
    from batch 1 on, run without it"."""
    from specscope.report.answer import AnswerRow
    from specscope.report.html import _verdict

    def rows(*pairs):
        return [AnswerRow("d", b, "ngram", "fixed:1", s, None, None, None, None) for b, s in pairs]

    assert _verdict(rows((1, 0.8), (2, 0.79), (16, 1.38), (64, 3.79))) == \
        "SD pays from batch 16 on; below it, run without it."
    assert _verdict(rows((1, 1.5), (8, 0.9), (64, 1.2))) == "SD pays at batch 1, 64; at batch 8, run without it."
    assert _verdict(rows((1, 1.5), (8, 0.9))) == "SD pays up to batch 1; from batch 8 on, run without it."


def test_the_answer_names_the_steady_states_best_where_the_drain_decides_the_whole_run():
    """Probe: in mixed mode the answer named n-gram adaptive at B = 128 from whole-run speedups
    set by four long requests' drain, while at steady state EAGLE was best; the page never said
    so. The steady state's best is named beside it where it is another cell."""
    from specscope.report.answer import answer_rows
    from specscope.sim.grid import SimRow

    def row(acc, policy, speedup, steady):
        return SimRow(dataset="d", acc=acc, policy=policy, batch_size=128, mode="mixed", speedup=speedup,
                      steady_speedup=steady, throughput=1.0, baseline_throughput=1.0, latency_per_token=1.0,
                      baseline_latency_per_token=1.0, acceptance_rate=0.5, mean_acceptance_length=2.0, requests=200)

    (answer,) = answer_rows([row("ngram", "adaptive", 2.33, 1.14), row("eagle", "fixed:2", 1.30, 1.27)])
    assert (answer.best_acc, answer.steady_acc, answer.steady_policy) == ("ngram", "eagle", "fixed:2")
    assert (answer.steady_speedup, answer.best_steady_speedup) == (1.27, 1.14)
    (same,) = answer_rows([row("ngram", "adaptive", 2.33, 1.50), row("eagle", "fixed:2", 1.30, 1.27)])
    assert same.steady_acc is None


def test_one_proposer_writes_no_head_to_head_and_the_page_is_titled_by_what_it_shows(tmp_path):
    """Probe: one proposer gave an empty head-to-head table and a 0-byte pairs.csv; every page
    was titled 'specscope report'."""
    import dataclasses

    from report_fixtures import synthetic_records

    from specscope.report.build import build_report
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces

    path = tmp_path / "one.jsonl"
    write_traces(path, [dataclasses.replace(r, proposers={"ngram": r.proposers["ngram"]})
                        for r in synthetic_records("chat", 8, seed=1)])
    result = build_report([str(path)], tmp_path / "out", ReportConfig(sim=SimConfig(mode="paper", batch_sizes=(1,)),
                                                                       trees=()))
    page = result.index.read_text()
    assert not (tmp_path / "out" / "pairs.csv").exists() and "Head to head" not in page
    assert "<title>specscope report: chat · h100-llama3.1-8b</title>" in page


def test_each_dataset_is_combined_with_its_own_pair(tmp_path):
    """Probe: a dataset traced with n-gram and EAGLE-3 beside one traced with n-gram and EAGLE got
    no oracle-combined cell (the first pair, n-gram + EAGLE, was the only one), and nothing said so."""
    import dataclasses

    from report_fixtures import synthetic_records

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces

    three = [dataclasses.replace(r, proposers={"ngram": r.proposers["ngram"], "eagle3": r.proposers["eagle"]})
             for r in synthetic_records("code", 8, seed=2)]
    write_traces(tmp_path / "a.jsonl", synthetic_records("chat", 8, seed=1))
    write_traces(tmp_path / "b.jsonl", three)
    data = analyse([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
                   ReportConfig(sim=SimConfig(mode="paper", batch_sizes=(1,)), trees=()))
    assert {(a.dataset, a.combined_policy) for a in data.answer} == {("chat", "oracle-combined:ngram+eagle"),
                                                                     ("code", "oracle-combined:ngram+eagle3")}
    # the overlap comparison too: n-gram against each dataset's own model proposer (code had been left out)
    assert {(r.dataset, r.reference) for r in data.overlap} == {("chat", "eagle"), ("code", "eagle3")}
    assert not any(n.startswith("overlap:") for n in data.notes)


def test_each_proposer_keeps_its_own_depth_where_no_k_max_was_recorded(tmp_path):
    """Probe: traces without k_max whose n-gram never accepted more than 3 drafts capped EAGLE,
    whose acc_len reaches 9, at k = 3 too: its oracle and best fixed k came out below what
    `simulate` gives on the same file, and nothing said EAGLE was cut. Each proposer now keeps
    its own depth, and the note names n-gram alone."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig, simulate
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    rng = np.random.default_rng(3)
    records = [TraceRecord(f"r{i}", rng.integers(0, 50, 20), rng.integers(0, 50, 80),
                           {"ngram": ProposerTrace(rng.integers(1, 5, 80).astype(np.int32)),
                            "eagle": ProposerTrace(rng.integers(1, 10, 80).astype(np.int32))}, k_max=None, dataset="d")
               for i in range(6)]
    write_traces(tmp_path / "d.jsonl", records)
    config = ReportConfig(ks=(1, 2, 3, 5, 8), sim=SimConfig(mode="paper", batch_sizes=(1, 8)), trees=())
    data = analyse([tmp_path / "d.jsonl"], config)
    mine = {(r.acc, r.policy, r.batch_size): r.speedup for r in data.rows}
    alone = simulate(records, ["eagle"], ["fixed:8", "oracle"], data.cost, SimConfig(mode="paper", batch_sizes=(1, 8)))
    assert all(mine[("eagle", r.policy, r.batch_size)] == pytest.approx(r.speedup) for r in alone)
    assert {p for a, p, _ in mine if a == "ngram"} == {"fixed:1", "fixed:2", "fixed:3", "adaptive", "oracle"}
    assert data.figure_policies == ("fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle")  # EAGLE's fixed:5 drawn
    assert [n for n in data.notes if "not simulated" in n] == [
        "ngram: fixed:5, fixed:8 not simulated: the traces reach k = 3 (the proposer's longest acc_len − 1: k_max not "
        "recorded, they cannot tell what more drafts would have given)"]


def test_records_with_and_without_k_max_keep_a_deep_proposers_depth(tmp_path):
    """Review: records declaring k_max 10 beside records declaring none, where n-gram's longest
    acc_len is 4 and EAGLE's 9: capping the declared records' k_max at n-gram's 3 cut EAGLE to 3
    too (its fixed:5 and fixed:8 left out with a false note)."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    def record(i, k_max):
        return TraceRecord(f"r{i}", np.arange(5), np.arange(8),
                           {"ngram": ProposerTrace(np.array([4, 1, 1, 2, 1, 1, 1, 1], np.int32)),
                            "eagle": ProposerTrace(np.array([9, 1, 2, 1, 3, 1, 1, 1], np.int32))}, k_max=k_max,
                           dataset="d")

    write_traces(tmp_path / "t.jsonl", [record(0, 10), record(1, 10), record(2, None), record(3, None)])
    data = analyse([tmp_path / "t.jsonl"], ReportConfig(ks=(1, 2, 3, 5, 8), sim=SimConfig(mode="paper", batch_sizes=(1,)),
                                                        trees=()))
    cells = {(r.acc, r.policy) for r in data.rows}
    assert {("eagle", "fixed:5"), ("eagle", "fixed:8")} <= cells and ("ngram", "fixed:5") not in cells
    assert [n for n in data.notes if "not simulated" in n] == [
        "ngram: fixed:5, fixed:8 not simulated: the traces reach k = 3 (the proposer's longest acc_len − 1: k_max not "
        "recorded, they cannot tell what more drafts would have given)"]
    assert not any("left out" in n for n in data.notes)


def test_a_steady_state_lead_is_shown_with_the_decimals_that_tell_it_apart():
    """A review: the steady-state column read "eagle fixed:5: 1.65× (best's 1.65×)" for 1.652
    against 1.650, a tie to the eye where the column says the policy ranks first."""
    from specscope.report.html import _apart

    assert _apart(1.652, 1.650, "× (best's ", "×)") == "1.652× (best's 1.650×)"
    assert _apart(1.70, 1.65, "× (best's ", "×)") == "1.70× (best's 1.65×)"


def test_outputs_of_one_token_leave_out_the_bound_table_and_still_draw_their_profile(tmp_path):
    """A review: with no α to estimate (every output one token: no step) bound.csv was written
    empty, without a header, and listed on the page; the position profile's one bin drew nothing
    (a line of one point), its legend alone showing."""
    import json

    from specscope.analysis.position import position_profiles
    from specscope.cli import main
    from specscope.report.figures import profile_figure
    from specscope.trace.load import load_traces

    lines = [{"schema": "specscope.trace/1", "id": str(i), "dataset": "onetok", "k_max": 8,
              "prompt_token_ids": [5 + i, 6, 7], "output_token_ids": [9],
              "proposers": {"ngram": {"acc_len": [1 + i % 2]}, "eagle": {"acc_len": [4]}}} for i in range(12)]
    (tmp_path / "one.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["report", str(tmp_path / "one.jsonl"), "-o", str(tmp_path / "r")]) == 0
    assert not (tmp_path / "r" / "bound.csv").exists()
    assert "bound.csv" not in (tmp_path / "r" / "index.html").read_text()
    records, _ = load_traces([tmp_path / "one.jsonl"])
    figure = profile_figure(position_profiles(records))
    drawn = [line for ax in figure.axes for line in ax.get_lines()]
    assert drawn and all(len(line.get_xdata()) == 1 and line.get_marker() == "o" for line in drawn)


def test_arrays_of_other_lengths_say_which_positions_each_policy_replays(tmp_path):
    """A review: records whose EAGLE arrays run past the output. The report's oracle-combined
    replays the positions its proposers' arrays share, the fixed ks each whole array — said, as
    `simulate` says it; and the load's cut to the common prefix is the per-position analysis's."""
    import numpy as np
    from report_fixtures import synthetic_records

    from specscope.report.build import build_report
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace

    records = [replace(r, proposers={**r.proposers, "eagle": ProposerTrace(
        np.concatenate([r.acc_len("eagle"), [3, 2]]).astype(np.int32))}) for r in synthetic_records("chat", 10, seed=3)]
    write_traces(tmp_path / "chat.jsonl", records)
    result = build_report([tmp_path / "chat.jsonl"], tmp_path / "r", ReportConfig(sim=SimConfig(batch_sizes=(1,))))
    assert any(n.startswith("oracle-combined:ngram+eagle replays the positions its proposers' acc_len share, the "
                            "other policies each proposer's whole array (10 of 10 records differ)") for n in result.notes)
    assert any("cut to the common prefix" in n and n.endswith("in the per-position analysis (the simulation replays "
                                                              "each proposer's whole array, oracle-combined the "
                                                              "positions its proposers' arrays share)")
               for n in result.notes)


def test_a_report_held_to_a_depth_says_how_deep_its_traces_went(tmp_path):
    """A review: a study's report, held to the depth its cost model measured (4), said its traces of
    k_max 10 "were traced to k = 4 (its k_max)". The depth it is held to is said as such."""
    from report_fixtures import synthetic_records

    from specscope.report.build import build_report
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "chat.jsonl", synthetic_records("chat", 8, seed=4))  # k_max 10
    config = ReportConfig(sim=SimConfig(batch_sizes=(1,))).held_to(4, "the cost model measured k up to 4")
    result = build_report([tmp_path / "chat.jsonl"], tmp_path / "r", config)
    assert not any("was traced to k = 4" in note for note in result.notes)
    assert "the cost model measured k up to 4" in (tmp_path / "r" / "index.html").read_text()


def test_the_lowest_and_highest_request_say_how_many_tie_them():
    """17 requests tied at the lowest mean acc_len: the table named one of them as if alone."""
    from specscope.report.build import _extremes

    means = [{"dataset": "d", "proposer": "ngram", "id": f"r{i}", "mean_acc_len": 1.0 if i < 3 else 1.0 + i}
             for i in range(6)]
    assert _extremes(means) == [["d", "ngram", "r0 (and 2 more)", 1.0, "r5", 6.0]]


def test_a_depth_note_shared_by_every_dataset_is_said_once():
    """A study's report said the same 'fixed:4 not simulated' once for every dataset and proposer
    (16 notes for 4 datasets × 4 proposers): a note that holds for every dataset names none."""
    from specscope.report.analyse import _depth_notes
    from specscope.report.config import ReportConfig

    short = ReportConfig(ks=(1, 2, 3))
    held = {(d, p): replace(short, longer_k=f"{p} measured to 3") for d in ("a", "b") for p in ("x", "y")}
    held[("a", "z")] = ReportConfig(ks=(1, 2, 3, 4))  # traced deeper: no note
    assert _depth_notes(held, (1, 2, 3, 4), several=True) == [
        "x: fixed:4 not simulated: x measured to 3", "y: fixed:4 not simulated: y measured to 3"]
    held[("b", "x")] = held[("a", "z")]  # one dataset alone: named
    assert _depth_notes(held, (1, 2, 3, 4), several=True)[0] == "dataset 'a', x: fixed:4 not simulated: x measured to 3"


def test_the_answer_names_a_proposer_some_records_lack(tmp_path):
    """Probe: one record without EAGLE dropped it from the answer, whose winner changed with a
    vague note ("its traces do not all hold proposer 'eagle'")."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.report.html import answer_section
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    rng = np.random.default_rng(0)

    def record(i: int, held=("ngram", "eagle")) -> TraceRecord:
        acc = {"ngram": rng.integers(1, 3, 60), "eagle": rng.integers(3, 6, 60)}
        return TraceRecord(f"r{i}", rng.integers(0, 50, 20), rng.integers(0, 50, 60),
                           {name: ProposerTrace(acc[name].astype(np.int32)) for name in held}, k_max=5, dataset="chat")

    config = ReportConfig(cost_model="roofline:h100:llama3.1-8b", ks=(1, 2, 3),
                          sim=SimConfig(mode="paper", batch_sizes=(1,)))
    write_traces(tmp_path / "b.jsonl", [record(i) for i in range(5)] + [record(5, ("ngram",))])
    data = analyse([tmp_path / "b.jsonl"], config)
    assert data.answer[0].best_acc == "ngram" and data.answer[0].left_out == "eagle (1 of 6 records lack it)"
    assert "dataset 'chat': its traces do not all hold proposer 'eagle': 1 of 6 records lack it (first id 'r5'), so its cells with eagle are left out" in data.notes
    assert "Left out of this answer: eagle (1 of 6 records lack it)" in answer_section(data.answer)


def test_the_report_pairs_the_lookup_with_the_proposer_accepting_most(tmp_path):
    """Probe: with keys ngram, mtp, eagle3 the report combined and overlapped n-gram with MTP (the
    first named), below EAGLE-3's own oracle."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    rng = np.random.default_rng(0)

    def record(i: int, held=("ngram", "mtp", "eagle3")) -> TraceRecord:
        acc = {"ngram": rng.integers(1, 3, 60), "mtp": rng.integers(1, 3, 60), "eagle3": rng.integers(3, 6, 60)}
        return TraceRecord(f"r{i}", rng.integers(0, 50, 20), rng.integers(0, 50, 60),
                           {name: ProposerTrace(acc[name].astype(np.int32)) for name in held}, k_max=5, dataset="chat")

    config = ReportConfig(cost_model="roofline:h100:llama3.1-8b", ks=(1, 2, 3),
                          sim=SimConfig(mode="paper", batch_sizes=(1,)))
    write_traces(tmp_path / "a.jsonl", [record(i) for i in range(6)])
    data = analyse([tmp_path / "a.jsonl"], config)
    assert data.pair_of == {"chat": ("ngram", "eagle3")}
    assert data.answer[0].combined_policy == "oracle-combined:ngram+eagle3"
    assert {r.reference for r in data.overlap} == {"eagle3"} and data.answer[0].left_out is None
    assert any(note.startswith("dataset 'chat': oracle-combined pairs ngram+eagle3, the lookup and the model proposer "
                               "whose oracles emit the most tokens per step") for note in data.notes)


def test_one_pair_per_dataset_among_the_priced_proposers_every_record_holds(tmp_path):
    """Probes: MTP accepting most (which the cost model prices no drafting of), Figure 3 compared
    ngram with mtp while oracle-combined and overlap took eagle; two datasets whose best model
    proposers differ, Figure 3 drew both against the first's (one pair over all records) where
    oracle-combined and overlap took each dataset's own."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.catalogue import _pair_title
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    rng = np.random.default_rng(4)

    def records(dataset: str, means: dict[str, int]) -> list[TraceRecord]:
        return [TraceRecord(f"{dataset}{i}", rng.integers(0, 50, 20), rng.integers(0, 50, 60),
                            {name: ProposerTrace(rng.integers(mean, mean + 2, 60).astype(np.int32))
                             for name, mean in means.items()}, k_max=5, dataset=dataset) for i in range(6)]

    config = ReportConfig(ks=(1, 2, 3), sim=SimConfig(mode="paper", batch_sizes=(1,)))  # the paper's fit: no mtp
    write_traces(tmp_path / "m.jsonl", records("chat", {"ngram": 1, "eagle": 2, "mtp": 4}))
    data = analyse([tmp_path / "m.jsonl"], config)
    assert _pair_title(data) == "Where ngram beats eagle" and data.pair_of == {"chat": ("ngram", "eagle")}
    assert {r.reference for r in data.overlap} == {"eagle"}
    assert {a.combined_policy for a in data.answer} == {"oracle-combined:ngram+eagle"}
    write_traces(tmp_path / "a.jsonl", records("A", {"ngram": 1, "eagle": 4, "eagle3": 2}))
    write_traces(tmp_path / "b.jsonl", records("B", {"ngram": 1, "eagle": 2, "eagle3": 4}))
    data = analyse([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], config)
    assert _pair_title(data) == "Where ngram beats eagle (A); ngram beats eagle3 (B)"
    assert data.pair_of == {"A": ("ngram", "eagle"), "B": ("ngram", "eagle3")}
    assert {(r.dataset, r.reference) for r in data.overlap} == {("A", "eagle"), ("B", "eagle3")}
    assert {(a.dataset, a.combined_policy) for a in data.answer} == {("A", "oracle-combined:ngram+eagle"),
                                                                     ("B", "oracle-combined:ngram+eagle3")}


def test_the_answers_left_out_counts_the_records_the_simulator_decided_on(tmp_path):
    """Probe: paper mode's draw of 300 of 310 records left out the one lacking EAGLE, so the
    simulator kept EAGLE's cells and answer.csv named eagle best beside left_out 'eagle (1 of 310
    records lack it)'. The simulator decides over all the dataset's records, as the answer counts."""
    import numpy as np

    from specscope.report.analyse import analyse
    from specscope.report.config import ReportConfig
    from specscope.sim.grid import SimConfig
    from specscope.trace.load import write_traces
    from specscope.trace.schema import ProposerTrace, TraceRecord

    rng = np.random.default_rng(5)
    write_traces(tmp_path / "t.jsonl", [
        TraceRecord(f"r{i}", rng.integers(0, 50, 5), rng.integers(0, 50, 8),
                    {name: ProposerTrace(rng.integers(low, low + 2, 8).astype(np.int32))
                     for name, low in (("ngram", 1), ("eagle", 4)) if i or name == "ngram"}, k_max=5, dataset="d")
        for i in range(310)])
    config = ReportConfig(ks=(1, 3), sim=SimConfig(mode="paper", batch_sizes=(1,), seed=63))  # 63's draw: no r0
    data = analyse([tmp_path / "t.jsonl"], config)
    assert {r.acc for r in data.rows} == {"ngram"} and data.answer[0].best_acc == "ngram"
    assert data.answer[0].left_out == "eagle (1 of 310 records lack it; all 310 of its records counted, not only the 300 drawn)"
