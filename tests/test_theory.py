"""The closed-form bound, pinned on hand-computed values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specscope.cli import main
from specscope.costmodel.linear import H100_LLAMA31_8B
from specscope.errors import SpecscopeError
from specscope.theory.bound import estimate_alpha, estimate_c, expected_speedup, optimal_k


def test_expected_speedup_hand_values():
    assert expected_speedup(0.5, 1, 0.0) == pytest.approx(1.5)  # (1 − 0.25) / 0.5
    assert expected_speedup(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    assert expected_speedup(1.0, 3, 0.1) == pytest.approx(4 / 1.3)  # the α → 1 limit
    assert expected_speedup(0.0, 4, 0.0) == pytest.approx(1.0)


def test_a_drafting_cost_past_a_float_gives_a_speedup_of_0_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `bound --c 1e308` printed numpy's overflow warning
        assert expected_speedup(0.5, 3, 1e308) == 0.0


def test_optimal_k():
    k, value = optimal_k(0.8, 0.1)
    values = [float(expected_speedup(0.8, k, 0.1)) for k in range(21)]
    assert k == int(np.argmax(values)) and value == pytest.approx(max(values))
    assert optimal_k(0.1, 0.5)[0] == 0  # SD cannot pay off


def test_estimate_alpha_truncated_geometric_mle():
    # acc_len [1, 3, 1, 2, 1] of an output of 5, k_max = 2: caps min(2, 4 − i) = [2, 2, 2, 1, 0];
    # accepted a = [0, 2, 0, 1, 0]: Σa = 3 successes, failures where a < cap: positions 0 and 2.
    # Positions 3 and 4 accepted up to the output's end: cut off, not rejected (else 3 / 7).
    assert estimate_alpha([np.array([1, 3, 1, 2, 1])], 2) == pytest.approx(3 / 5)
    assert np.isnan(estimate_alpha([np.array([1]), np.array([1])], 4))  # one-token outputs: nothing to accept
    # Probe: an array that records acceptance past its end (the paper's last entries: acc_len 2
    # where no draft is left to judge) counted those drafts as successes (4 / 6 here): capped, 3 / 5.
    assert estimate_alpha([np.array([1, 3, 1, 2, 2])], 2) == pytest.approx(3 / 5)


def test_bound_refuses_traces_that_say_nothing_of_alpha(tmp_path, capsys):
    from specscope.cli import main
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [TraceRecord(f"r{i}", np.arange(3), np.arange(1), {"ngram": ProposerTrace(
        np.ones(1, dtype=np.int32))}, k_max=4, dataset="d") for i in range(2)])
    assert main(["bound", str(tmp_path / "t.jsonl")]) == 2
    captured = capsys.readouterr()
    assert "ngram: no α: no position of its records had a draft to judge" in captured.out
    assert "no proposer left to bound: ngram: no α (no position of its records had a draft to judge: one-token " \
           "outputs, or nothing offered; give --alpha)" in captured.err


def test_estimate_alpha_judges_only_what_the_proposer_offered():
    """draft_len [2, 0, 0, 1, 0] with acc_len [3, 1, 1, 2, 1] over an output of 5, k_max 4: caps
    min(4, 4 − i, draft_len) = [2, 0, 0, 1, 0]; a = [2, 0, 0, 1, 0] reaches every cap — no
    rejection, α = 1 (without draft_len the positions offering nothing were three rejections:
    3 / 6)."""
    acc, offered = np.array([3, 1, 1, 2, 1]), np.array([2, 0, 0, 1, 0])
    assert estimate_alpha([acc], 4, [offered]) == 1.0
    assert estimate_alpha([acc], 4) == pytest.approx(3 / 6)
    assert np.isnan(estimate_alpha([np.ones(4, dtype=int)], 4, [np.zeros(4, dtype=int)]))  # nothing offered


def test_a_trace_whose_every_first_draft_was_rejected_bounds_no_k():
    """acc_len 1 everywhere and no k_max: a tracer proposes at least one draft, so every first
    draft was rejected — any k replays alike (no depth inferred as 0, which refused fixed:1), and
    its α is 0 (9 positions with room, none accepted)."""
    from specscope.analysis.bound_points import traced_alpha
    from specscope.sim.plan import traced_k_max
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.validate import K_MAX_LIMIT

    records = [TraceRecord("r", np.arange(3), np.arange(10), {"ngram": ProposerTrace(np.ones(10, dtype=np.int32))})]
    assert traced_k_max(records, ["ngram"]) == K_MAX_LIMIT
    assert traced_alpha(records, "ngram") == (0.0, K_MAX_LIMIT)


def test_a_perfect_drafter_is_estimated_at_one_up_to_the_outputs_end():
    perfect = np.minimum(21, 30 - np.arange(30))  # k_max 20, 30 tokens: the last 20 positions cut by the end
    assert estimate_alpha([perfect], 20) == 1.0


def test_estimate_alpha_truncates_each_trace_at_its_own_k_max():
    """Two outputs of 10 whose drafts were all accepted, one traced to k_max 4 (acc_len 5 where
    the output allows), one to 20: no rejection anywhere, α = 1. Truncated at the larger k_max for
    both, the first's 4 accepted drafts at positions 0–4 would count as 5 rejections: 75 / 80."""
    from specscope.analysis.acceptance import k_max_each
    from specscope.trace.schema import ProposerTrace, TraceRecord

    def record(rid: str, acc: int, k_max: int | None) -> TraceRecord:
        return TraceRecord(rid, np.array([1]), np.array([5]), {"eagle": ProposerTrace(np.array([acc], dtype=np.int32))},
                           k_max=k_max)

    left = 10 - np.arange(10)
    acc_lens = [np.minimum(5, left), np.minimum(21, left)]
    assert estimate_alpha(acc_lens, [4, 20]) == 1.0
    assert estimate_alpha(acc_lens, 20) == pytest.approx(75 / 80)
    records = [record("a", 5, 4), record("b", 21, None), record("c", 3, None)]
    assert k_max_each(records, "eagle") == [4, 20, 20]  # undeclared: the largest seen among them

def test_estimate_c_from_the_paper_model():
    # One request, 1000 cached tokens, k = 3: EAGLE step / (3 × plain forward).
    drafting = 2.37768493e-09 * 1000 + 8.41429603e-07 * 4 + 2.13526175e-03
    plain = 3.92645679e-08 * 1000 + 2.10103129e-05 + 5.88590713e-03
    assert estimate_c(H100_LLAMA31_8B, "eagle", 3, 1, 1000) == pytest.approx(drafting / (3 * plain))


def test_bound_cli(capsys):
    assert main(["bound", "--alpha", "0.7", "--c", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "E[speedup]" in out and "2.35" in out and "largest shown" not in out  # best k 5 of 10
    assert main(["bound", "--alpha", "0.95", "--c", "0.001"]) == 0  # still rising at k = 10: said
    assert "note: given: the best k is the largest shown (10); the bound may keep rising" in capsys.readouterr().out
    assert main(["bound", "--alpha", "0.7", "--c", "1e300"]) == 0  # c in significant digits, not 301 of them
    assert "│ 1e+300 │" in capsys.readouterr().out


def test_bound_says_nothing_of_a_larger_k_max_where_the_traces_end_at_the_tables_edge(tmp_path, capsys):
    """Traces recorded to k_max 10, every draft accepted: the best k is 10, the traces' end — a
    larger --k-max shows nothing more (the note told the user to raise it)."""
    record = {"schema": "specscope.trace/1", "id": "a", "k_max": 10, "prompt_token_ids": [1],
              "output_token_ids": list(range(5, 27)), "proposers": {"ngram": {"acc_len": [11, 1] * 11}}}
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["bound", str(tmp_path / "t.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "largest shown" not in out
    for option, value in (("--alpha", "1.5"), ("--alpha", "1"), ("--c", "nan"), ("--c", "-0.1"),
                          ("--batch-size", "0"), ("--k-max", "65"), ("--k", "0")):
        with pytest.raises(SystemExit) as stop:  # argparse: one line naming the option
            main(["bound", "--alpha", "0.5", "--c", "0.1", option, value])
        assert stop.value.code == 2
        assert f"argument {option}" in capsys.readouterr().err
    assert main(["bound"]) == 2


def test_library_calls_refuse_what_the_bound_cannot_mean():
    with pytest.raises(SpecscopeError, match="batch_size: expected an integer >= 1, got 0"):
        estimate_c(H100_LLAMA31_8B, "eagle", 3, 0, 1000)
    with pytest.raises(SpecscopeError, match="k_max: expected an integer <= 64"):
        optimal_k(0.5, 0.1, 10**9)
    with pytest.raises(SpecscopeError, match="c: expected a finite number"):
        optimal_k(0.5, float("nan"))


def test_bound_names_the_best_k_among_those_it_shows(capsys):
    """α 0.99, c 0.001: the speedup still grows at k = 30; the best k is the last shown (it was
    searched to 20 whatever the table showed: "best k 20, 18.65" beside k = 30's 25.99)."""
    from specscope.cli import main

    assert main(["bound", "--alpha", "0.99", "--c", "0.001", "--k-max", "30"]) == 0
    row = capsys.readouterr().out.splitlines()
    assert "(i.i.d. acceptance, α per draft; α and c given; best k: 0 = run without SD)" in " ".join(row[:2])
    cells = [c.strip() for c in next(line for line in row if "│ given" in line).split("│") if c.strip()]
    assert cells[-2:] == ["30", cells[-3]]  # best k, best speedup = the k = 30 cell
    assert main(["bound", "--alpha", "0.99", "--c", "0.001", "--k-max", "3"]) == 0
    cells = [c.strip() for c in next(line for line in capsys.readouterr().out.splitlines() if "│ given" in line).split("│")
             if c.strip()]
    assert cells[-2] == "3"


def test_bound_from_traces_shows_no_k_beyond_their_depth(tmp_path, capsys):
    """Traces of k_max 2, every draft accepted: α = 1 says nothing of k = 3 … 10 beyond the
    i.i.d. law, so the table stops at 2 and says why."""
    from specscope.cli import main
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.trace.load import write_traces

    records = [TraceRecord(f"r{i}", np.arange(5), np.arange(20), {"eagle": ProposerTrace(np.full(20, 3, np.int32))},
                           k_max=2, dataset="d") for i in range(3)]
    write_traces(tmp_path / "t.jsonl", records)
    assert main(["bound", str(tmp_path / "t.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "note: eagle: k above 2 not shown: its α was measured on proposals of at most k_max = 2" in out
    assert "k=2" in out and "k=3" not in out
    acc = {"eagle": np.full(20, 3, np.int32), "ngram": np.tile(np.array([1, 7], np.int32), 10)}
    undeclared = [TraceRecord(f"r{i}", np.arange(5), np.arange(20), {n: ProposerTrace(a) for n, a in acc.items()},
                              dataset="d") for i in range(3)]  # no k_max: each proposer's depth is its longest acc_len − 1
    write_traces(tmp_path / "d.jsonl", undeclared)
    assert main(["bound", str(tmp_path / "d.jsonl"), "--k-max", "4"]) == 0
    out = capsys.readouterr().out
    assert "at most k_max = 2, inferred from the longest acc_len seen (some records declare none)" in out
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[4:-1]] for line in out.splitlines()
            if "│ eagle" in line or "│ ngram" in line}
    assert rows["eagle"][2:4] == ["–", "–"] and rows["eagle"][4] == "2"  # k = 3, 4 not shown; best k within 2
    assert "–" not in rows["ngram"]  # traced to 6: every k up to --k-max 4


def test_bound_takes_each_proposer_from_the_records_that_hold_it(tmp_path, capsys):
    """Two files, one traced with n-gram only, one with n-gram and EAGLE-3: a row for each
    dataset and proposer it holds, in whichever order the files come (the first record alone had
    decided; datasets were pooled, unsaid)."""
    from specscope.cli import main
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.trace.load import write_traces

    def records(dataset, names):
        return [TraceRecord(f"r{i}", np.arange(5), np.arange(20), {n: ProposerTrace(np.full(20, 2, np.int32))
                                                                   for n in names}, k_max=4, dataset=dataset)
                for i in range(3)]

    write_traces(tmp_path / "a.jsonl", records("a", ["ngram"]))
    write_traces(tmp_path / "b.jsonl", records("b", ["ngram", "eagle3"]))
    for files in (["a.jsonl", "b.jsonl"], ["b.jsonl", "a.jsonl"]):
        assert main(["bound", *(str(tmp_path / f) for f in files)]) == 0
        out = capsys.readouterr().out
        rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
        assert sorted(rows) == ["a · ngram", "b · eagle3", "b · ngram"]


def test_the_reports_bound_points_stop_at_the_shallowest_records_depth_as_specscope_bound_does():
    """Records traced to k_max 2 and 8: α says nothing of a third draft of the first, so the
    report's optimum is sought up to k = 2, as `specscope bound` seeks it (it was sought up to 8)."""
    from specscope.analysis.bound_points import bound_points
    from specscope.costmodel.registry import resolve_cost_model
    from specscope.trace.schema import ProposerTrace, TraceRecord

    def record(rid: str, k_max: int) -> TraceRecord:
        acc = np.minimum(k_max + 1, 12 - np.arange(12)).astype(np.int32)  # every draft accepted
        return TraceRecord(rid, np.array([1]), np.arange(12), {"eagle": ProposerTrace(acc)}, dataset="d", k_max=k_max)

    (point,) = bound_points([record("a", 2), record("b", 8)], resolve_cost_model("h100-llama3.1-8b"), ["eagle"], 1, 1)
    assert point.k_max == 2 and point.best_k <= 2 and point.alpha == 1.0
    # a run that held every proposal to k = 3 (a study) bounds no deeper: its best k was 8 and more
    (deep,) = bound_points([record("b", 8)], resolve_cost_model("h100-llama3.1-8b"), ["eagle"], 1, 1)
    (held,) = bound_points([record("b", 8)], resolve_cost_model("h100-llama3.1-8b"), ["eagle"], 1, 1, depth=3)
    assert deep.best_k > 3 and (held.k_max, held.best_k) == (3, 3)


def test_bound_leaves_out_a_proposer_its_cost_model_cannot_price(tmp_path, capsys):
    """Every proposer held, none named: one the cost model has no drafting for (suffix under the
    paper's H100 fit) is left out with a note, the others shown; named with --acc, it is refused."""
    from specscope.cli import main
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.trace.load import write_traces

    acc = np.array([2, 1, 3, 1, 1, 1], dtype=np.int32)
    write_traces(tmp_path / "t.jsonl", [TraceRecord(f"r{i}", np.arange(3), np.arange(6), {
        "ngram": ProposerTrace(acc), "suffix": ProposerTrace(acc)}, k_max=4, dataset="d") for i in range(2)])
    assert main(["bound", str(tmp_path / "t.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "note: suffix left out: cost model 'h100-llama3.1-8b' has no drafting model for proposer 'suffix'" in out
    assert "│ ngram" in out
    assert main(["bound", str(tmp_path / "t.jsonl"), "--acc", "suffix"]) == 2


def test_bound_prices_c_at_every_k_so_the_best_k_does_not_depend_on_where_c_is_shown(tmp_path, capsys):
    """Probe: c measured at --k and used for every k made the best k follow --k (the paper's
    EAGLE, whose drafting is nearly the same at any k: best k 2 at --k 1, 4 at 3, 6 at 10).
    Priced at each k, by hand with a drafting of 1 s per step and a forward of 1 s: c(1) = 1,
    c(2) = 0.5; at α = 0.5, E = 1.5 / 2 = 0.75 and 1.75 / 2 = 0.875: neither pays (best k 0);
    the table's speedups are the same whatever --k."""
    import json

    from specscope.cli import main
    from specscope.costmodel.registry import resolve_cost_model
    from specscope.theory.bound import c_by_k, optimal_k
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.trace.load import write_traces

    path = tmp_path / "flat.json"
    zero = {"c_tok": 0.0, "c_kv": 0.0, "c_req": 0.0, "c_multi": 0.0}
    path.write_text(json.dumps({"kind": "linear", "name": "flat", "forward": {"c_fixed": 1.0, **zero}, "overhead_s": 0.0,
                                "drafting": {"eagle": {"kind": "linear", "c_fixed": 1.0, **zero, "c_prefill": 0.0,
                                                       "c_tree": 0.0, "c_batched": 0.0}}}))
    curve = c_by_k(resolve_cost_model(str(path)), "eagle", 2, 1, 0.0)
    assert curve.tolist() == pytest.approx([1.0, 0.5])
    assert optimal_k(0.5, curve, 2) == (0, 1.0)
    records = [TraceRecord(f"r{i}", np.arange(5), np.arange(20), {"eagle": ProposerTrace(
        np.tile(np.array([1, 3, 2], np.int32), 7)[:20])}, k_max=4, dataset="d") for i in range(3)]
    write_traces(tmp_path / "t.jsonl", records)
    speedups = []
    for k in ("1", "3"):
        assert main(["bound", str(tmp_path / "t.jsonl"), "--cost-model", str(path), "--k", k]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if "│ eagle" in line)
        speedups.append([cell.strip() for cell in row.split("│")[4:-1]])
    assert speedups[0] == speedups[1]
    # the title's context as computed: mean prompt 5 + half of 20 = 15, and a given 0.4 (printed 0)
    assert main(["bound", str(tmp_path / "t.jsonl"), "--cost-model", str(path)]) == 0
    assert "context 15;" in capsys.readouterr().out
    assert main(["bound", str(tmp_path / "t.jsonl"), "--cost-model", str(path), "--context", "0.4"]) == 0
    assert "context 0.4;" in capsys.readouterr().out


def test_bound_refuses_what_it_would_ignore_with_c_given(tmp_path, capsys):
    """--c given, nothing is priced: a cost model, batch size, k or context beside it is refused,
    with --alpha and with traces alike (with traces they were ignored, the output byte-identical)."""
    from specscope.cli import main

    assert main(["bound", "--alpha", "0.5", "--c", "0.1", "--cost-model", "bogus"]) == 2
    assert "--cost-model: not used with --c (it prices c or picks α from traces)" in capsys.readouterr().err
    from specscope.trace import ProposerTrace, TraceRecord
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [TraceRecord("r", np.arange(5), np.arange(15), {"eagle": ProposerTrace(
        np.tile(np.array([2, 1, 3], np.int32), 5))}, k_max=3, dataset="d")])
    for extra in (["--batch-size", "64"], ["--k", "5"], ["--context", "1000"], ["--cost-model", "nosuch.json"]):
        assert main(["bound", str(tmp_path / "t.jsonl"), "--c", "0.1", *extra]) == 2
        assert f"{extra[0]}: not used with --c (it prices c)" in capsys.readouterr().err
    assert main(["bound", str(tmp_path / "t.jsonl"), "--c", "0.1"]) == 0


def test_expected_tokens_is_exact_near_alpha_one():
    """α = 0.99999, k = 64: (1 − α^65) / (1 − α) = 64.979…, where a closeness test to 1 gave 65."""
    from specscope.theory.bound import expected_tokens

    assert float(expected_tokens(0.99999, 64)) == pytest.approx((1 - 0.99999 ** 65) / 1e-5, rel=1e-9)
    assert float(expected_tokens(1.0, 64)) == 65.0 and float(expected_tokens(0.0, 64)) == 1.0


def test_bound_says_how_often_a_lookup_offered_nothing_where_its_traces_record_it(tmp_path, capsys):
    """Its α is over the positions it offered at; the bound proposes k at every step, so with n-gram
    finding no match at 73 % of positions it read 1.45× where simulate gave 1.11×, unsaid. Offers
    0, 2, 0 at the three positions before the output's last (the last drafts nothing): 2 of 3."""
    from specscope.analysis.bound_points import unoffered_note
    from specscope.trace.schema import ProposerTrace, TraceRecord

    record = TraceRecord("r", np.arange(3), np.arange(4), {"ngram": ProposerTrace(
        np.array([1, 3, 1, 1], dtype=np.int32), draft_len=np.array([0, 2, 0, 1], dtype=np.int32))}, k_max=2)
    assert unoffered_note([record], "ngram").startswith("offered no draft at 2 of 3 positions (67 %)")
    assert unoffered_note([record.truncated(1)], "ngram") is None  # one token: no position to draft at
    always = TraceRecord("s", np.arange(3), np.arange(3), {"ngram": ProposerTrace(
        np.array([2, 1, 1], dtype=np.int32), draft_len=np.array([1, 1, 1], dtype=np.int32))}, k_max=2)
    assert unoffered_note([always], "ngram") is None
    from specscope.trace.load import write_traces

    write_traces(tmp_path / "t.jsonl", [record, always])
    assert main(["bound", str(tmp_path / "t.jsonl"), "--k-max", "2"]) == 0
    assert "note: ngram: offered no draft at 2 of 5 positions (40 %)" in capsys.readouterr().out
