"""Output files: regular files are replaced atomically; devices, FIFOs and stdout are written in
place and never replaced; CSV cells never run as spreadsheet formulas."""

from __future__ import annotations

import csv
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from specscope.cli import main
from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text, check_output_dir, check_output_file, write_rows


def test_dev_null_stays_a_device():
    """The regression: renaming a temporary file over /dev/null replaced the device."""
    before = os.stat(os.devnull)
    atomic_write_text(os.devnull, "x\n")
    write_rows(os.devnull, [{"a": 1}])
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=30)
    assert received == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left


def test_regular_file_is_replaced_atomically(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    write_rows(path, [{"a": 1, "b": "x"}])
    assert path.read_text() == "a,b\n1,x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_a_replaced_file_keeps_its_permissions_and_a_read_only_one_is_refused(tmp_path):
    """A 0600 file came back 0644 (a new file's usual mode); a file no one may write was replaced."""
    private = tmp_path / "private.csv"
    private.write_text("old\n")
    private.chmod(0o600)
    atomic_write_text(private, "new\n")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text() == "new\n"
    private.chmod(0o444)
    with pytest.raises(SpecscopeError, match="read-only"):
        atomic_write_text(private, "newer\n")
    with pytest.raises(SpecscopeError, match="read-only"):  # before any work: root passed os.access here, so a
        check_output_file(private)  # run wrote its first output and then failed on this one
    assert private.read_text() == "new\n"


def test_a_symbolic_link_stays_and_its_target_gets_the_file(tmp_path):
    (tmp_path / "kept").mkdir()
    target, link = tmp_path / "kept" / "t.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    write_rows(link, [{"a": 1}])
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "a\n1\n"
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["t.csv"]  # no temporary file left


def test_dash_is_stdout(capsys):
    write_rows("-", [{"policy": "fixed:3", "speedup": 1.5}])
    assert capsys.readouterr().out == "policy,speedup\nfixed:3,1.5\n"


@pytest.mark.parametrize("text", ["=1+1", "+cmd", "-2+3", "@SUM(A1)", "\tx"])
def test_csv_cells_that_look_like_formulas_are_quoted(tmp_path, text):
    path = tmp_path / "rows.csv"
    write_rows(path, [{"dataset": text, "speedup": -1.25}])
    with path.open(newline="") as handle:
        row = next(csv.DictReader(handle))
    assert row["dataset"] == "'" + text  # shown as text by a spreadsheet, never run
    assert row["speedup"] == "-1.25"  # numbers stay numbers


def test_outputs_are_checked_before_work(tmp_path):
    with pytest.raises(SpecscopeError, match="is a directory"):
        check_output_file(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecscopeError, match="not a directory"):
        check_output_file(tmp_path / "file" / "out.csv")
    with pytest.raises(SpecscopeError, match="not a directory"):
        check_output_dir(tmp_path / "file")
    assert check_output_file(tmp_path / "new" / "deeper" / "out.csv") == tmp_path / "new" / "deeper" / "out.csv"
    assert not (tmp_path / "new").exists()  # checking makes nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(SpecscopeError, match="not writable"):
        check_output_file(locked / "out.csv")


def test_cli_table_to_stdout_keeps_words_off_it(paper, capsys):
    """``-o -``: the CSV alone on stdout; the human table goes to stderr."""
    status = main(["stats", str(paper / "llama3.1-8b_gsm8k.jsonl"), "-o", "-"])
    out = capsys.readouterr()
    assert status == 0
    rows = list(csv.DictReader(out.out.splitlines()))
    assert {row["proposer"] for row in rows} == {"ngram", "eagle"}
    assert "acc_len per request" in out.err


@pytest.mark.parametrize("target", ["/dev/stdout", "out.csv"])
def test_an_output_that_is_standard_output_is_written_in_place_and_words_go_to_stderr(tmp_path, target):
    """``-o /dev/stdout`` with standard output redirected to a file (or ``-o`` naming that very
    file) is standard output: the table is written into the file the shell opened — not renamed
    over it, which would leave everything printed after it in the file replaced — and no words
    land among its lines, as with ``-o -``."""
    import subprocess
    import sys

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"schema": "specscope.trace/1", "id": "a", "dataset": "d", "k_max": 6,
                                 "prompt_token_ids": [1, 2, 3], "output_token_ids": [5, 6, 7, 8, 9],
                                 "proposers": {"ngram": {"acc_len": [1, 2, 1, 1, 1]}}}) + "\n")
    out = tmp_path / "out.csv"
    with out.open("w") as handle:
        inode = os.fstat(handle.fileno()).st_ino
        result = subprocess.run([sys.executable, "-m", "specscope", "simulate", str(trace), "--acc", "ngram",
                                 "--batch-sizes", "1", "-o", target], stdout=handle, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    assert os.stat(out).st_ino == inode  # the same file, written in place
    rows = list(csv.DictReader(out.read_text().splitlines()))  # the table alone: no words among its lines
    assert [row["policy"] for row in rows] == ["fixed:1", "fixed:3", "fixed:5", "oracle"]
    assert all(None not in row and float(row["speedup"]) > 0 for row in rows)
    assert "wrote" not in out.read_text()


def test_cli_dev_null_output(paper):
    assert main(["paper", "--traces-dir", str(paper), "-o", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert not Path(os.devnull).is_file()


def test_json_text_is_strict_json_for_any_number():
    """NaN and ±∞ (Python's or numpy's) are null; numpy numbers are plain numbers; booleans stay."""
    import json

    import numpy as np

    from specscope.fileio import json_text

    text = json_text({"nan": np.float32("nan"), "inf": float("inf"), "k": np.int64(3), "x": [np.float32(1.5)],
                      "ok": True, "none": None})
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}")) == {
        "nan": None, "inf": None, "k": 3, "x": [1.5], "ok": True, "none": None}


def test_an_output_replaces_only_what_specscope_wrote_there(tmp_path):
    """Probes: bench -o, --records, workload make -o and zoo evaluate -o replaced a user's notes or
    spreadsheet without a word; then a user's CSV whose header was all names (`name,score`) and a
    model's config.json (an object keyed by names) passed for a specscope table and were
    replaced. A file the user names is replaced only where specscope wrote it there and no one
    changed it since (the folder's ledger lists its SHA-256); an empty file, a new path, '-' and a
    device are written as ever."""
    from specscope.fileio import atomic_write_text, check_user_output, write_rows
    from specscope.written import LEDGER

    ours = check_user_output(tmp_path / "rows.csv")  # a new path, as `-o` checks it
    write_rows(ours, [{"method": "ngram", "batch_size": 1, "speedup": 1.5}])
    assert check_user_output(ours) == ours  # a rerun replaces its own table
    (tmp_path / "link.csv").symlink_to(ours)
    assert check_user_output(tmp_path / "link.csv")  # a link to it is the same file
    for name, text in (("sheet.csv", "name,score\nalice,3\n"), ("config.json", '{"architectures": ["Llama"]}\n'),
                       ("notes.jsonl", "keep me\n"), ("records.jsonl", '{"batch_size": 1, "verify_s": 0.01}\n')):
        (tmp_path / name).write_text(text)
        with pytest.raises(SpecscopeError, match="specscope did not write it there"):
            check_user_output(tmp_path / name)
    ours.write_text(ours.read_text() + "ngram,8,1.2\n")  # edited by hand since
    with pytest.raises(SpecscopeError, match="or it was changed since"):
        check_user_output(ours)
    policy = check_user_output(tmp_path / "policy.json")
    atomic_write_text(policy, '{"schema": "x"}\n')
    (tmp_path / LEDGER).write_text("not json")  # a ledger damaged by hand lists nothing: refused, not lost
    with pytest.raises(SpecscopeError, match="specscope did not write it there"):
        check_user_output(policy)
    (tmp_path / "empty.csv").write_text("")
    assert check_user_output(tmp_path / "empty.csv") and check_user_output("-") and check_user_output("/dev/null")
    with pytest.raises(SpecscopeError, match="the name of the folder's record"):  # a review: the table written
        check_user_output(tmp_path / "new" / LEDGER)  # there became the ledger, listing itself


def test_a_ledger_read_while_another_run_records_lists_what_it_held(tmp_path):
    """A review: the ledger was rewritten in place; read meanwhile it listed nothing, and a rerun of
    a file specscope wrote was refused (8,543 of 20,000 reads). It is replaced whole: a read sees
    the old one or the new."""
    import hashlib
    import multiprocessing

    from specscope import written
    from specscope.fileio import atomic_write_text, check_user_output

    ours = check_user_output(tmp_path / "a.csv")
    atomic_write_text(ours, "hi\n")
    digest = hashlib.sha256(b"hi\n").hexdigest()
    writer = multiprocessing.get_context("fork").Process(target=_record_in_a_loop, args=(tmp_path, 400))
    writer.start()
    misses = sum(not written.listed(ours, digest) for _ in range(2000))
    writer.join()
    assert misses == 0


def test_an_interruption_around_a_write_leaves_the_file_and_the_ledger_ours(tmp_path, monkeypatch):
    """A review: a Ctrl-C after a file's rename and before its ledger entry left a file the rerun
    refused as a user's ("specscope did not write it there"); one while the ledger was truncated
    and rewritten in place left it empty, and every file of the folder refused. The new content is
    listed beside the old before the rename, and the ledger replaced whole."""
    from specscope import written
    from specscope.fileio import atomic_write_text, check_user_output

    ours, other = check_user_output(tmp_path / "a.csv"), check_user_output(tmp_path / "b.csv")
    atomic_write_text(ours, "first\n")
    atomic_write_text(other, "kept\n")

    def interrupted(path, text):
        raise KeyboardInterrupt

    monkeypatch.setattr(written, "record", interrupted)  # between the rename and the entry
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(ours, "second\n")
    monkeypatch.undo()
    assert ours.read_text() == "second\n" and check_user_output(ours) == ours
    monkeypatch.setattr(written.os, "replace", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # while the ledger is written
        written.record(ours, "third\n")
    monkeypatch.undo()
    assert check_user_output(ours) == ours and check_user_output(other) == other
    assert sorted(p.name for p in tmp_path.iterdir()) == [written.LEDGER, "a.csv", "b.csv"]  # no temporary left


def test_two_runs_recording_into_one_ledger_keep_both_entries(tmp_path):
    """The ledger is replaced whole under a lock: a run that waited for it locks the new one."""
    import multiprocessing

    from specscope import written

    runs = [multiprocessing.get_context("fork").Process(target=_record_in_a_loop, args=(tmp_path, 100, name))
            for name in ("b.csv", "c.csv")]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert set(written._read(tmp_path / written.LEDGER)) == {"b.csv", "c.csv"}


def _record_in_a_loop(folder, times, name="b.csv"):
    """Another run recording its writes into ``folder``'s ledger, ``times`` times over."""
    from specscope import written

    path = folder / name
    written.claim(path)
    for i in range(times):
        written.record(path, f"{i}\n")


def test_a_table_in_a_folder_specscope_keeps_is_replaced_where_it_holds_a_table(tmp_path):
    """A sweep's own tables (its folder is specscope's by the sweep's rules, also one an older
    specscope wrote): a CSV header of names or JSON objects keyed by names is replaced; anything
    else there is refused."""
    from specscope.fileio import check_kept_table

    (tmp_path / "rows.csv").write_text("method,batch_size,speedup\nngram,1,1.5\n")
    assert check_kept_table(tmp_path / "rows.csv")
    (tmp_path / "rows.json").write_text('[\n {"method": "ngram", "k": 3}\n]\n')
    assert check_kept_table(tmp_path / "rows.json")
    (tmp_path / "lines.json").write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n')
    assert check_kept_table(tmp_path / "lines.json")  # JSON Lines under a .json name
    for name, text in (("notes.csv", "my spreadsheet\n"), ("sheet.csv", "Total cost ($),Notes\n1,2\n"),
                       ("notes.jsonl", "keep me\n"), ("notes.json", "not json")):
        (tmp_path / name).write_text(text)
        with pytest.raises(SpecscopeError, match="holds no table or records specscope writes"):
            check_kept_table(tmp_path / name)


def test_a_full_disk_is_one_line_not_a_traceback(tmp_path):
    """Probe: writing to a full disk (here /dev/full, as standard output) raised a traceback."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "specscope", "workload", "make", "code", "--n", "2", "-o", "-"],
                                stdout=full, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "specscope: error: cannot write (No space left on device)" in result.stderr


def test_progress_writes_a_plain_line_to_a_log_once_a_minute(monkeypatch, capsys):
    """Where stderr is no terminal (nohup, CI) the bar is never drawn: a 100-request trace said
    nothing for minutes. Now a plain line, once work has run LOG_EVERY seconds, and every
    LOG_EVERY seconds after."""
    from specscope import progress

    clock = iter([0.0, 10.0, 61.0, 90.0, 125.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with progress.LazyProgress("tracing requests", 4) as bar:  # stderr is captured: no terminal
        for _ in range(4):
            bar.advance()
    assert capsys.readouterr().err.splitlines() == ["tracing requests: 2 of 4 done, 61 s",
                                                    "tracing requests: 4 of 4 done, 125 s"]


def test_a_pipe_has_no_sha256(tmp_path):
    """A trace read from a pipe has nothing left to hash afterwards: no fingerprint (the report's
    page showed the SHA-256 of nothing, e3b0c442…, as the trace's), a regular file its own."""
    import os

    from specscope.fingerprint import file_sha256

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert file_sha256(fifo) is None
    (tmp_path / "f").write_bytes(b"")
    assert file_sha256(tmp_path / "f").startswith("e3b0c442")


def test_a_checkpoint_written_by_safetensors_gets_the_usual_permissions(tmp_path):
    """safetensors' save_file makes its file 0600; a head or model the project saves is readable
    as any new file is under the umask (0644 under 022), as its config.json beside it."""
    torch = pytest.importorskip("torch")
    from specscope.proposers.heads import save_head

    umask = os.umask(0o022)
    try:
        out = save_head(tmp_path / "head", {"hidden_size": 2}, {"w": torch.zeros(2)})
    finally:
        os.umask(umask)
    assert stat.S_IMODE((out / "model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / "config.json").stat().st_mode) == 0o644
