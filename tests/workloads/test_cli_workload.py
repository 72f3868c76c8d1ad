"""`specscope workload make`: files the engine's reader accepts; one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope.cli import main
from specscope.workloads.bundled import read_bundled
from specscope.workloads.jsonl import read_workload
from specscope.zoo.tokenizer import save_tokenizer, train_tokenizer

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tokenizer.json + tokenizer_config.json (the zoo's chat template)."""
    directory = tmp_path_factory.mktemp("tok")
    texts = [json.loads(line)["question"] for line in (FIXTURES / "gsm8k.jsonl").read_text().splitlines()]
    save_tokenizer(train_tokenizer(texts * 3, 300), directory)
    return directory


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_make_from_local_file_with_chat_template(tmp_path, model_dir, capsys):
    out = tmp_path / "w.jsonl"
    assert main(["workload", "make", "gsm8k", "--source", str(FIXTURES / "gsm8k.jsonl"), "--n", "5",
                 "--tokenizer", str(model_dir), "-o", str(out)]) == 0
    written = rows(out)
    assert len(written) == 2 and all(r["prompt"].startswith("<|user|>") for r in written)
    assert all(r["prompt"].endswith("?<|assistant|>") and "####" in r["reference"] for r in written)
    assert "2 rows read, 2 kept" in capsys.readouterr().out


def test_make_token_ids(tmp_path, model_dir):
    from tokenizers import Tokenizer

    out = tmp_path / "w.jsonl"
    assert main(["workload", "make", "gsm8k", "--source", str(FIXTURES / "gsm8k.jsonl"), "--token-ids",
                 "--tokenizer", str(model_dir), "-o", str(out)]) == 0
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    requests = read_workload(out)
    assert tokenizer.decode(requests[0].prompt_token_ids, skip_special_tokens=False).startswith("<|user|>")


def test_make_bundled_without_source(tmp_path):
    out = tmp_path / "code.jsonl"
    assert main(["workload", "make", "code", "--n", "7", "-o", str(out)]) == 0
    written = rows(out)
    shipped = {r["id"]: r for r in read_bundled("code")}
    assert len(written) == 7 and all(shipped[r["id"]]["prompt"] == r["prompt"] for r in written)


def test_a_workload_to_standard_output_is_the_workload_alone(capsys):
    """``-o -`` with more requested than a task ships: the note goes to stderr (it ended the
    workload on stdout, whose next reader refused that line)."""
    assert main(["workload", "make", "code", "--n", "1000", "-o", "-"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert all(json.loads(line)["id"] for line in lines) and len(lines) == len(read_bundled("code"))
    assert f"note: 1000 requested, only {len(lines)} available" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["gsm8k"], "--source: gsm8k needs a local file"),
    (["gsm8k", "--source", "missing.jsonl"], "missing.jsonl: no such file"),
    (["code", "--source", "x.jsonl"], "takes no source"),
    (["gsm8k", "--source", "hub", "--token-ids"], "--token-ids: needs --tokenizer"),
])
def test_errors_are_one_line(tmp_path, capsys, argv, message):
    assert main(["workload", "make", *argv, "-o", str(tmp_path / "w.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specscope: error: ") and message in err and err.count("\n") == 1


def test_bad_row_names_file_and_line(tmp_path, capsys):
    source = tmp_path / "instructcoder.jsonl"
    source.write_text('{"instruction": "a", "input": "b"}\n{"input": "no instruction"}\n', encoding="utf-8")
    assert main(["workload", "make", "instructcoder", "--source", str(source), "-o", str(tmp_path / "w.jsonl")]) == 2
    assert f"{source}:2: field 'instruction'" in capsys.readouterr().err


def test_double_special_tokens_are_flagged(tmp_path, model_dir, capsys):
    """The zoo tokenizer adds its turn markers itself (as Llama's adds BOS)."""
    source = str(FIXTURES / "gsm8k.jsonl")
    assert main(["workload", "make", "gsm8k", "--source", source, "--tokenizer", str(model_dir), "-o", str(tmp_path / "a.jsonl")]) == 0
    assert "use --token-ids" in capsys.readouterr().out
    assert main(["workload", "make", "gsm8k", "--source", source, "--tokenizer", str(model_dir), "--token-ids",
                 "-o", str(tmp_path / "b.jsonl")]) == 0
    assert "use --token-ids" not in capsys.readouterr().out


def test_a_csv_field_longer_than_csvs_own_limit_is_read_whole(tmp_path):
    """csv refuses a field over 128 KiB by default (a traceback); a long article is one field."""
    from specscope.cli import main

    source = tmp_path / "g.csv"
    source.write_text('question,answer\n"' + "word " * 40_000 + '",1\n', encoding="utf-8")
    out = tmp_path / "w.jsonl"
    assert main(["workload", "make", "gsm8k", "--source", str(source), "-o", str(out)]) == 0
    assert len(json.loads(out.read_text().splitlines()[0])["prompt"]) >= 200_000 - 1
