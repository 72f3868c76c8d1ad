"""Trace schema, both readers, the length repair and the one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specscope.cli import main
from specscope.errors import SpecscopeError
from specscope.trace import ProposerTrace, TraceRecord, load_traces
from specscope.trace.load import write_traces


def write_lines(path, objects):
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects))
    return path


def bench_record(i=0, generated=(5, 6, 7, 8), ngram=(1, 2, 1, 1), eagle=(2, 1, 3, 1)):
    return {"id": str(i), "prompt_token_ids": [1, 2, 3], "generated_token_ids": list(generated),
            "acc_ngram": {"acc_len": list(ngram)}, "acc_eagle": {"acc_len": list(eagle)}}


def test_specdecode_bench_format_is_detected(tmp_path):
    records, (report,) = load_traces([write_lines(tmp_path / "gsm8k.jsonl", [bench_record()])])
    (record,) = records
    assert report.format == "specdecode-bench" and report.mismatched_records == 0
    assert record.dataset == "gsm8k"
    assert sorted(record.proposers) == ["eagle", "ngram"]
    assert record.acc_len("eagle").tolist() == [2, 1, 3, 1]
    assert (record.prompt_len, record.output_len) == (3, 4)


def test_own_schema_round_trips(tmp_path):
    record = TraceRecord(
        id="a", prompt_token_ids=np.array([1, 2]), output_token_ids=np.array([3, 4, 5]),
        proposers={"ngram": ProposerTrace(np.array([1, 2, 1], dtype=np.int32), np.array([0, 3, 3], dtype=np.int32)),
                   "eagle": ProposerTrace(np.array([2, 1, 1], dtype=np.int32), None,
                                          np.array([[0.5, 0.25], [0.1, np.nan], [0.9, 0.8]], dtype=np.float32))},
        k_max=3, dataset="demo",
    )
    path = tmp_path / "t.jsonl"
    write_traces(path, [record])
    (back,), (report,) = load_traces([path])
    assert report.format == "specscope"
    assert back.id == "a" and back.dataset == "demo" and back.k_max == 3
    assert back.proposers["ngram"].draft_len.tolist() == [0, 3, 3]
    assert np.allclose(back.proposers["eagle"].draft_prob, [[0.5, 0.25], [0.1, np.nan], [0.9, 0.8]], equal_nan=True)
    assert '"draft_prob":[[0.5,0.25],[0.1,null],[0.9,0.8]]' in path.read_text()


def test_length_mismatch_common_prefix_is_counted(tmp_path):
    lines = [bench_record(0), bench_record(1, eagle=(2, 1)), bench_record(2, eagle=(2, 1, 1, 1, 1, 1)),
             bench_record(3, ngram=(1,) * 5, eagle=(1,) * 7)]  # 1 + 3 entries past the output: both arrays' count
    path = write_lines(tmp_path / "t.jsonl", lines)
    records, (report,) = load_traces([path])
    assert report.mismatched_records == 3
    assert report.mismatches_by_proposer == {"eagle": 3, "ngram": 1}
    assert report.dropped_positions == 2  # record 1 loses 2 output positions, record 2 two acc_len entries past its end
    assert report.surplus_entries == 2 + 4
    assert "dropping 2 output positions and 6 acc_len entries beyond the output" in report.summary()
    assert [r.output_len for r in records] == [4, 2, 4, 4]
    assert all(len(t.acc_len) == r.output_len for r in records for t in r.proposers.values())
    assert "3 of 4 records" in report.summary()
    own, (own_report,) = load_traces([path], lengths="own")
    assert [len(r.acc_len("eagle")) for r in own] == [4, 2, 6, 7]
    assert own_report.dropped_positions == 0 and own_report.mismatched_records == 3


@pytest.mark.parametrize("line, message", [
    ("{not json", "t.jsonl:2: invalid JSON"),
    (json.dumps({"id": "x", "generated_token_ids": [1]}), "t.jsonl:2: field 'acc_ngram': missing"),
    (json.dumps({"id": "x", "prompt_token_ids": [1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": [1, "2"]}}), "t.jsonl:2: field 'acc_ngram.acc_len': expected a list of integers"),
    (json.dumps({"id": "x", "prompt_token_ids": [1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": [1, 0]}}), "t.jsonl:2: field 'acc_ngram.acc_len': expected integers in [1, 65], got 0 at position 1"),
    (json.dumps({"id": "x", "k_max": 2, "prompt_token_ids": [1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": [1, 4]}}), "t.jsonl:2: field 'acc_ngram.acc_len': expected integers in [1, 3], got 4 at position 1 (k_max = 2)"),
    (json.dumps({"id": "x", "prompt_token_ids": [1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": [10**12, 1]}}), "t.jsonl:2: field 'acc_ngram.acc_len': expected integers in [1, 65]"),
    (json.dumps({"id": "x", "prompt_token_ids": [1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": []}}), "t.jsonl:2: field 'acc_ngram.acc_len': empty, but the output has 2 tokens"),
    (json.dumps({"id": "x", "k_max": 10**9, "prompt_token_ids": [1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": [1, 1]}}), "t.jsonl:2: field 'k_max': expected an integer <= 64"),
    (json.dumps({"id": "x", "prompt_token_ids": [-1], "generated_token_ids": [1, 2],
                 "acc_ngram": {"acc_len": [1, 1]}}), "t.jsonl:2: field 'prompt_token_ids': expected integers in [0, "),
    (json.dumps({"id": "x", "prompt_token_ids": [1], "generated_token_ids": [],
                 "acc_ngram": {"acc_len": [1]}}), "t.jsonl:2: field 'acc_ngram.acc_len': 1 entries, but the output is empty"),
    (json.dumps({"id": "x", "prompt_token_ids": [1], "generated_token_ids": "abc",
                 "acc_ngram": {"acc_len": [1]}}), "t.jsonl:2: field 'generated_token_ids': expected a list of integers"),
    (json.dumps([1, 2]), "t.jsonl:2: expected a JSON object"),
])
def test_bad_input_names_file_line_and_field(tmp_path, line, message):
    path = write_lines(tmp_path / "t.jsonl", [bench_record(), line])
    with pytest.raises(SpecscopeError) as error:
        load_traces([path])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    path = write_lines(tmp_path / "t.jsonl", [bench_record(), "{oops"])
    assert main(["traces", "inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specscope: error:") and "t.jsonl:2" in err and "\n" not in err
    assert main(["simulate", str(tmp_path / "missing.jsonl")]) == 2


def test_inspect_and_convert(tmp_path, capsys):
    path = write_lines(tmp_path / "t.jsonl", [bench_record(0), bench_record(1, eagle=(2, 1))])
    assert main(["traces", "inspect", "--format", "json", str(path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 2 and summary["positions"] == 8
    assert summary["mismatched_records"] == 1 and summary["proposers"] == ["eagle", "ngram"]
    assert summary["mean_prompt_len"] == 3.0 and summary["k_max"] is None
    out = tmp_path / "converted.jsonl"
    assert main(["traces", "convert", str(path), "-o", str(out), "--k-max", "20"]) == 0
    records, (report,) = load_traces([out])
    assert report.format == "specscope" and records[0].k_max == 20 and records[1].output_len == 2


@pytest.mark.parametrize("settings, said", [
    ('{"trees": ["2x0"]}', "field 'trees[0]': expected an integer >= 1, got 0"),  # a traceback
    ('{"trees": "2x2"}', "field 'trees': expected a list of trees, got '2x2'"),  # read letter by letter
    ("{oops", "invalid JSON"),  # the valid trace was refused
])
def test_inspect_reads_a_trace_whose_settings_name_no_trees_it_can_read(tmp_path, capsys, settings, said):
    path = write_lines(tmp_path / "t.jsonl", [bench_record(0)])
    (tmp_path / "t.jsonl.settings.json").write_text(settings)
    assert main(["traces", "inspect", "--format", "json", str(path)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["requests"] == 1 and said in captured.err and "trees are not summarised" in captured.err


def test_inspect_says_where_k_max_is_missing(tmp_path, capsys):
    """One record declares k_max 1, the other none but accepted 9 drafts: the file has no k_max,
    and the table says what is known instead of reporting the one that was declared."""
    declared = {"schema": "specscope.trace/1", "id": "a", "k_max": 1, "prompt_token_ids": [1],
                "output_token_ids": [5, 6], "proposers": {"ngram": {"acc_len": [2, 1]}}}
    missing = {**declared, "id": "b", "k_max": None, "output_token_ids": list(range(5, 15)),
               "proposers": {"ngram": {"acc_len": [10] + [1] * 9}}}
    path = write_lines(tmp_path / "t.jsonl", [declared, missing])
    assert main(["traces", "inspect", "--format", "json", str(path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert (summary["k_max"], summary["k_max_declared"], summary["k_max_missing"]) == (None, [1], 1)
    assert main(["traces", "inspect", str(path)]) == 0
    assert "not recorded in 1 of 2 records (others: 1; max accepted drafts seen: 9)" in capsys.readouterr().out


def test_inspect_counts_the_records_a_proposer_is_missing_from(tmp_path, capsys):
    """5 of 40 records without n-gram were listed as "eagle, ngram", while stats counted 35 and
    simulate refused the file."""
    lines = [bench_record(i) for i in range(8)]
    for line in lines[::4]:
        del line["acc_ngram"]
    assert main(["traces", "inspect", str(write_lines(tmp_path / "t.jsonl", lines))]) == 0
    assert "eagle, ngram (in 6 of the records)" in capsys.readouterr().out


def test_invalid_utf8_and_empty_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes((write_lines(tmp_path / "ok.jsonl", [bench_record()]).read_text() + "\xff\n").encode("latin-1"))
    with pytest.raises(SpecscopeError, match=r"bad.jsonl:2: not UTF-8 text"):
        load_traces([bad])
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n")
    with pytest.raises(SpecscopeError, match=r"blank.jsonl: no trace records found"):
        load_traces([blank])


def test_duplicate_ids_dropped_when_same_refused_when_different(tmp_path, caplog):
    same = write_lines(tmp_path / "same.jsonl", [bench_record(0), bench_record(1), bench_record(0)])
    records, (report,) = load_traces([same])
    assert [r.id for r in records] == ["0", "1"] and report.duplicates == 1 and report.records == 2
    assert "same.jsonl:3: request '0' repeats" in caplog.text and "same.jsonl:1" in caplog.text
    assert "1 duplicate records dropped" in report.summary()
    differ = write_lines(tmp_path / "differ.jsonl", [bench_record(0), bench_record(0, eagle=(1, 1, 3, 1))])
    with pytest.raises(SpecscopeError, match=r"differ.jsonl:2: field 'id': request '0' .* already at .*differ.jsonl:1 "
                                             r"with other content"):
        load_traces([differ])
    # the same file twice: every request of the second is a repeat, counted once
    records, reports = load_traces([same, same])
    assert len(records) == 2 and [r.duplicates for r in reports] == [1, 3]


def test_a_repeat_is_compared_as_read_whatever_lengths_cuts(tmp_path):
    """Two records of one id whose outputs differ past their acc_len arrays' end: cut to the common
    length they looked alike, and under --lengths common one was dropped as "the same content". A
    repeat is compared as the file holds it: other content, under either reading."""
    first = bench_record(0, generated=(5, 6, 7, 8), ngram=(1, 2), eagle=(2, 1))
    second = bench_record(0, generated=(5, 6, 9, 9), ngram=(1, 2), eagle=(2, 1))
    path = write_lines(tmp_path / "d.jsonl", [first, second])
    for lengths in ("common", "own"):
        with pytest.raises(SpecscopeError, match=r"d\.jsonl:2: field 'id': request '0' .* with other content"):
            load_traces([path], lengths=lengths)


def test_one_read_gives_both_readings(tmp_path):
    """``whole``: the records with every array whole, from the same read as the common cut — the
    ``own`` reading, so a stream (a pipe, ``<(...)``) is read once."""
    path = write_lines(tmp_path / "d.jsonl", [bench_record(0, ngram=(1, 2, 1, 1, 2)), bench_record(1)])
    whole: list = []
    cut, _ = load_traces([path], lengths="common", whole=whole)
    own, _ = load_traces([path], lengths="own")
    assert [len(r.acc_len("ngram")) for r in cut] == [4, 4]
    assert [r.acc_len("ngram").tolist() for r in whole] == [r.acc_len("ngram").tolist() for r in own]


def test_consistent_empty_output_is_skipped_and_counted(tmp_path, caplog):
    empty = json.dumps({"id": "e", "prompt_token_ids": [1], "generated_token_ids": [], "acc_ngram": {"acc_len": []}})
    path = write_lines(tmp_path / "t.jsonl", [bench_record(0), empty])
    records, (report,) = load_traces([path])
    assert [r.id for r in records] == ["0"] and report.empty_outputs == 1
    assert "1 records with an empty output skipped" in caplog.text


def test_tree_rank_round_trips_and_old_records_have_none(tmp_path):
    ranks = np.array([[0, 3], [63, -1], [-1, -1]], dtype=np.int16)
    rec = TraceRecord("r", np.array([1, 2]), np.array([5, 6, 7]),
                      {"eagle": ProposerTrace(np.array([2, 1, 1], dtype=np.int32), tree_rank=ranks),
                       "ngram": ProposerTrace(np.array([1, 1, 1], dtype=np.int32))}, k_max=2, dataset="d")
    write_traces(tmp_path / "t.jsonl", [rec])
    assert json.loads((tmp_path / "t.jsonl").read_text())["proposers"]["eagle"]["tree_rank"] == ranks.tolist()
    (back,), _ = load_traces([tmp_path / "t.jsonl"])
    np.testing.assert_array_equal(back.proposers["eagle"].tree_rank, ranks)
    assert back.proposers["ngram"].tree_rank is None
    assert back.proposers["eagle"].truncated(2).tree_rank.tolist() == ranks[:2].tolist()


def test_tree_rank_that_tells_another_chain_is_counted_and_ngram_ranks_refused(tmp_path, caplog):
    """A greedy chain's acc_len is 1 + the leading zero ranks (up to k_max): a position where
    the file says otherwise is counted and warned about; a lookup proposer carries no tree."""
    ranks = np.array([[0, 0, 5], [0, 1, 0], [2, 0, 0], [0, -1, -1]], dtype=np.int16)
    acc = np.array([3, 2, 1, 2], dtype=np.int32)  # agrees at every position (k_max 2: min(acc, 3))
    rec = TraceRecord("r", np.array([1]), np.array([5, 6, 7, 8]), {"eagle": ProposerTrace(acc, tree_rank=ranks)},
                      k_max=2, dataset="d")
    write_traces(tmp_path / "ok.jsonl", [rec])
    _, (report,) = load_traces([tmp_path / "ok.jsonl"])
    assert report.rank_disagreements == 0
    rec.proposers["eagle"] = ProposerTrace(np.array([1, 3, 1, 2], dtype=np.int32), tree_rank=ranks)
    write_traces(tmp_path / "bad.jsonl", [rec])
    (back,), (report,) = load_traces([tmp_path / "bad.jsonl"])
    assert report.rank_disagreements == 2 and "2 positions where tree_rank gives another greedy chain" in caplog.text
    assert back.proposers["eagle"].acc_len.tolist() == [1, 3, 1, 2]  # kept as written
    line = json.loads((tmp_path / "ok.jsonl").read_text())
    line["proposers"]["ngram"] = {"acc_len": [1, 1, 1, 1], "tree_rank": [[0], [0], [0], [0]]}
    (tmp_path / "ngram.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(SpecscopeError, match=r"ngram\.jsonl:1: field 'proposers\.ngram\.tree_rank': ngram drafts by lookup"):
        load_traces([tmp_path / "ngram.jsonl"])


def test_two_files_that_name_one_dataset_are_warned_about(tmp_path, caplog):
    """llama/gsm8k.jsonl and qwen/gsm8k.jsonl: records without a dataset field take the file's
    name, so the two read as one dataset; a warning names both files."""
    for model in ("llama", "qwen"):
        (tmp_path / model).mkdir()
        write_traces(tmp_path / model / "gsm8k.jsonl", [TraceRecord(f"{model}-r", np.array([1]), np.array([5, 6]),
                                                                    {"ngram": ProposerTrace(np.array([1, 1], np.int32))})])
    records, reports = load_traces([tmp_path / "llama" / "gsm8k.jsonl", tmp_path / "qwen" / "gsm8k.jsonl"])
    assert {r.dataset for r in records} == {"gsm8k"}
    assert "llama/gsm8k.jsonl and" in caplog.text and "both name dataset 'gsm8k'" in caplog.text
    # the second file's summary (a report's page lists them) says so too: a log line alone left the page silent
    assert f"read as one dataset with {tmp_path / 'llama' / 'gsm8k.jsonl'}" in reports[1].summary()
    assert "read as one dataset" not in reports[0].summary()


def test_a_pipe_that_names_its_records_is_warned_about(tmp_path, caplog):
    """Read from a pipe (``<(...)`` gives ``/dev/fd/63``), records without a dataset field are named
    after the pipe: a warning says so; a regular file's name is no news."""
    import os
    import threading

    pipe = tmp_path / "63"
    os.mkfifo(pipe)
    text = json.dumps(bench_record()) + "\n"
    writer = threading.Thread(target=pipe.write_text, args=(text,))
    writer.start()
    records, _ = load_traces([pipe])
    writer.join()
    assert [r.dataset for r in records] == ["63"]
    assert "63 is no regular file (a pipe?)" in caplog.text and "give them a dataset field" in caplog.text
    caplog.clear()
    load_traces([write_lines(tmp_path / "gsm8k.jsonl", [bench_record()])])
    assert "regular file" not in caplog.text


def test_convert_renames_a_proposer_after_its_method(tmp_path, capsys):
    """A SpecDecode-Bench file's single 'acc' field reads as proposer 'default', which no cost model
    prices (the error says how to name it); `traces convert --rename default=mtp` names it."""
    line = {"generated_token_ids": [5, 6, 7], "prompt_token_ids": [1], "acc": {"acc_len": [2, 1, 1]}, "id": "a"}
    (tmp_path / "acc.jsonl").write_text(json.dumps(line) + "\n")
    assert main(["simulate", str(tmp_path / "acc.jsonl"), "--acc", "default", "--policies", "fixed:1"]) == 2
    assert "traces convert --rename default=METHOD" in capsys.readouterr().err
    assert main(["traces", "convert", str(tmp_path / "acc.jsonl"), "--rename", "default=mtp", "-o",
                 str(tmp_path / "mtp.jsonl")]) == 0
    (record,), _ = load_traces([tmp_path / "mtp.jsonl"])
    assert list(record.proposers) == ["mtp"] and record.proposers["mtp"].acc_len.tolist() == [2, 1, 1]
    with pytest.raises(SystemExit) as exit_:  # argparse refuses it, before anything is read
        main(["traces", "convert", str(tmp_path / "acc.jsonl"), "--rename", "default=bogus", "-o", str(tmp_path / "x.jsonl")])
    assert exit_.value.code == 2 and "unknown method 'bogus'" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_convert_keeps_every_array_whole_unless_asked_to_cut(tmp_path, capsys):
    """The paper's files hold acc_len arrays longer or shorter than the output; a conversion cut
    them to the common prefix (2034 positions of gsm8k) and `paper` on the copy gave other numbers."""
    path = write_lines(tmp_path / "t.jsonl", [bench_record(0), bench_record(1, eagle=(2, 1))])
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    assert main(["traces", "convert", str(path), "-o", str(whole)]) == 0
    assert main(["traces", "convert", str(path), "-o", str(cut), "--lengths", "common"]) == 0
    (_, kept), _ = load_traces([whole], lengths="own")
    (_, shortened), _ = load_traces([cut], lengths="own")
    assert kept.output_len == 4 and len(kept.acc_len("eagle")) == 2
    assert shortened.output_len == 2 and len(shortened.acc_len("ngram")) == 2


def test_convert_refuses_two_names_for_one_proposer_and_takes_a_swap(tmp_path, capsys):
    path = write_lines(tmp_path / "t.jsonl", [bench_record(0)])
    out = tmp_path / "o.jsonl"
    assert main(["traces", "convert", str(path), "-o", str(out), "--rename", "eagle=mtp", "--rename", "eagle=draft"]) == 2
    assert "--rename: 'eagle' renamed twice (eagle=mtp, eagle=draft)" in capsys.readouterr().err
    assert main(["traces", "convert", str(path), "-o", str(out), "--rename", "eagle=ngram", "--rename", "ngram=eagle"]) == 0
    (record,), _ = load_traces([out], lengths="own")
    (original,), _ = load_traces([path], lengths="own")
    assert record.acc_len("eagle").tolist() == original.acc_len("ngram").tolist()


def test_a_file_read_twice_counts_its_length_mismatches_once(tmp_path):
    """The second copy's records are dropped as repeats; its summary said "1 of 0 records had
    acc_len arrays of another length" of records it did not keep."""
    path = write_lines(tmp_path / "t.jsonl", [bench_record(0), bench_record(1, eagle=(2, 1))])
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / "t.jsonl").write_bytes(path.read_bytes())
    _, (first, second) = load_traces([path, twin / "t.jsonl"])
    assert (first.mismatched_records, first.dropped_positions) == (1, 2)
    assert (second.records, second.duplicates, second.mismatched_records, second.dropped_positions) == (0, 2, 0, 0)


def test_a_specdecode_bench_field_specscope_does_not_read_is_said_once_per_file(tmp_path, caplog):
    """Upstream files may carry fields beyond the paper's (a category, the text): read, not refused,
    and said once for the file; a near-miss of a field it reads (``k_mx``) is refused instead."""
    import json

    from specscope.errors import SpecscopeError
    from specscope.trace import load_traces

    line = {"id": "a", "prompt_token_ids": [1, 2], "generated_token_ids": [5, 6], "acc_ngram": {"acc_len": [1, 2]},
            "category": "math", "output_token_ids": [5, 6]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "id": "b"}) + "\n")
    records, reports = load_traces([path])
    assert len(records) == 2 and list(reports[0].ignored_fields) == ["category", "output_token_ids"]
    assert caplog.text.count("fields category, output_token_ids of its SpecDecode-Bench records not read") == 1
    path.write_text(json.dumps({**line, "k_mx": 4}) + "\n")
    with pytest.raises(SpecscopeError, match=r"t\.jsonl:1: field 'k_mx': unknown field \(did you mean 'k_max'\?\)"):
        load_traces([path])


def test_specdecode_bench_files_hold_any_known_method_under_acc_method_and_may_open_with_a_bom(tmp_path):
    """Probe: a SpecDecode-Bench file with acc_mtp, acc_eagle3 or acc_suffix could not be read
    at all (unknown proposer), nor one whose first line a Windows tool opened with a BOM."""
    import json

    from specscope.trace import load_traces

    row = {"id": "r", "prompt_token_ids": [1, 2], "generated_token_ids": [3, 4, 5],
           "acc_mtp": {"acc_len": [2, 1, 1]}, "acc_suffix": {"acc_len": [1, 3, 1]}}
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")
    (record,), _ = load_traces([path])
    assert set(record.proposers) == {"mtp", "suffix"} and record.acc_len("suffix").tolist() == [1, 3, 1]
    path.write_text(json.dumps({**row, "acc_eagle3": {"acc_len": [1, 1, 1]}, "acc_eagle_three": {"acc_len": [1, 1, 1]}}))
    with pytest.raises(SpecscopeError, match="one proposer under two fields"):
        load_traces([path])


def test_the_papers_no_match_guess_is_n_grams_not_suffix_decodings():
    from specscope.sim.grid import SimConfig, match_prob_for

    assert match_prob_for("qwen3-8b_gsm8k", SimConfig(), "ngram") == 0.2
    assert match_prob_for("qwen3-8b_gsm8k", SimConfig(), "suffix") is None
    assert match_prob_for("qwen3-8b_gsm8k", SimConfig(match_prob=0.5), "suffix") == 0.5


def test_a_walks_note_counts_the_positions_its_proposers_arrays_cover(tmp_path):
    """Read whole, a record whose EAGLE array is 3 short of its 10-token output loses 3 positions to
    a walk of n-gram and EAGLE and none to one of n-gram alone; cut to the common prefix, both lose 3."""
    from specscope.trace.load import load_traces

    rows = [{"id": "a", "prompt_token_ids": [5, 6], "generated_token_ids": list(range(10)),
             "acc_ngram": {"acc_len": [1] * 10}, "acc_eagle": {"acc_len": [1] * 7}},
            {"id": "b", "prompt_token_ids": [5, 6], "generated_token_ids": list(range(6)),
             "acc_ngram": {"acc_len": [1] * 6}, "acc_eagle": {"acc_len": [1] * 6}}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (own,) = load_traces([path], lengths="own")[1]
    assert own.walked_positions(("ngram", "eagle")) == (16, 13) and own.walked_positions(("ngram",)) == (16, 16)
    assert own.summary(("ngram", "eagle")).endswith("cover: 13 of 16 output positions (81.2%)")
    (common,) = load_traces([path], lengths="common")[1]
    assert common.walked_positions(("ngram",)) == (16, 13)


def test_inspect_says_how_many_drafts_probabilities_each_proposer_keeps(tmp_path, capsys):
    """A record keeping 2 drafts' probabilities beside one keeping 3 (a resume at another
    --draft-probs): inspect says both, and that the records differ; n-gram keeps none."""
    def record(rid, kept):
        return {"schema": "specscope.trace/1", "id": rid, "k_max": 3, "prompt_token_ids": [1], "output_token_ids": [5, 6],
                "proposers": {"ngram": {"acc_len": [2, 1]},
                              "eagle": {"acc_len": [2, 1], "draft_prob": [[0.5] * kept, [0.25] * kept]}}}
    path = write_lines(tmp_path / "t.jsonl", [record("a", 2), record("b", 3)])
    assert main(["traces", "inspect", "--format", "json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["draft_prob_depths"] == {"eagle": [2, 3], "ngram": []}
    assert main(["traces", "inspect", str(path)]) == 0
    assert "eagle (2 or 3 drafts, records differ)" in capsys.readouterr().out
