"""`specscope bench --backend openai`: options it cannot honour are refused, and a server that
drafts short of its k is refused, rather than rows labelled with what did not run."""

from __future__ import annotations

import pytest
from serving_helpers import write_workload

from specscope import written
from specscope.cli import main
from specscope.fingerprint import file_sha256


def bench(url: str, tmp_path, *extra: str) -> list[str]:
    workload = write_workload(tmp_path / "w.jsonl", 4)
    return ["bench", "--backend", "openai", "--url", url, "--workload", str(workload), "--max-tokens", "8",
            "--batch-sizes", "1", *extra]


def test_records_are_refused_and_an_earlier_file_kept(tmp_path, fake_server, capsys):
    """--records wrote an empty file over 26 step records, exit 0: the servers' steps are not visible."""
    records, steps = tmp_path / "steps.jsonl", '{"step": 0}\n' * 26
    records.write_text(steps)
    written.record_file(records, file_sha256(records))  # an earlier reference bench's, specscope's to replace
    argv = bench(fake_server("ok").url, tmp_path, "--method", "ngram", "--k", "3", "--records", str(records))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == ("specscope: error: --records: only with --backend reference (a server's steps are not visible "
                   "to its client)\n")
    assert records.read_text() == steps


def test_a_model_drafter_that_drafts_short_of_k_is_refused(tmp_path, fake_server, capsys):
    """The fake's counters: 6 draft tokens in 3 drafts per request (4 requests), 2 a step at k = 3 — what a
    `specscope serve --confidence` server shows; its rows said eagle k = 3. A lookup may propose
    fewer where its match offers fewer: ngram's rows stand."""
    url = fake_server("ok").url
    assert main(bench(url, tmp_path, "--method", "eagle", "--k", "3")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--k 3: the server at" in err
    assert "proposed 2.00 drafts per drafting step (24 draft tokens in 12 drafts), not a chain of 3" in err
    assert main(bench(url, tmp_path, "--method", "ngram", "--k", "3")) == 0


@pytest.mark.parametrize("option, url", [("--url", "http://[localhost]:18457"), ("--url", "http://[::1"),
                                         ("--baseline-url", "http://[::1:80")])
def test_a_malformed_bracketed_host_is_one_line(tmp_path, capsys, option, url):
    """ValueError: Invalid IPv6 URL, a traceback; a bad --baseline-url was called --url."""
    argv = bench("http://127.0.0.1:1", tmp_path, "--method", "ngram")
    argv[argv.index("--url"):argv.index("--url") + 2] = [] if option != "--url" else ["--url", url]
    if option == "--baseline-url":
        argv += ["--url", "http://127.0.0.1:1", "--baseline-url", url]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"specscope: error: {option}: expected http://HOST:PORT (a port 0..65535), got {url!r}\n"


def test_a_chain_whose_last_steps_the_server_trimmed_is_still_a_chain():
    """vLLM trims a step's drafts at max_model_len: 19 steps of 7 drafts and two of 3 and 2 (94 %
    of k) are a chain of 7, as its rows say; 2 of 3 a step (a confidence stop) is not (a re-review)."""
    from specscope.backends.openai.verify import ServerCheckError, check_chain

    check_chain("http://vllm:8000", "eagle", 7, {"num_drafts": 21, "num_draft_tokens": 19 * 7 + 3 + 2})
    with pytest.raises(ServerCheckError, match="not a chain of 3: its drafter stops early"):
        check_chain("http://x:1", "eagle", 3, {"num_drafts": 12, "num_draft_tokens": 24})
