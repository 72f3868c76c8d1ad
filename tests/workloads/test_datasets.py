"""The paper's dataset loaders on tiny fixture files in each dataset's own format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope.errors import SpecscopeError
from specscope.workloads.datasets import load_prompts, read_rows

FIXTURES = Path(__file__).parent / "fixtures"


def test_instructcoder_prompt_format():
    prompts, report = load_prompts("instructcoder", FIXTURES / "instructcoder.jsonl", n=10)
    assert report.rows == report.kept == 3 and len(prompts) == 3
    by_id = {p.id: p for p in prompts}
    assert by_id["instructcoder-1"].prompt == (
        "x = 1\nprint(x)\n\nRename x to y. Just output the code, do not include any explanation."
    )
    assert by_id["instructcoder-1"].reference == "y = 1\nprint(y)"


def test_sharegpt_first_user_turn_and_filters_are_counted():
    prompts, report = load_prompts("sharegpt", FIXTURES / "sharegpt.json", n=10)
    assert sorted(p.prompt for p in prompts) == [
        "Can you explain how a hash table works in simple terms?",
        "Write a haiku about the sea and the wind please",
    ]
    assert report.rows == 4 and report.kept == 2
    assert report.left_out == {"conversations with fewer than 2 turns": 1, "prompts outside 4-1024 tokens": 1}
    haiku = next(p for p in prompts if p.prompt.startswith("Write"))
    assert haiku.reference == "Waves fold into foam"


def test_a_sharegpt_reference_is_the_answer_not_the_users_next_message(tmp_path):
    """The turn after the prompt is its reference only where the model wrote it: a user's second
    message is no answer (it was taken as one)."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "x y z w v"},
                                                   {"from": "human", "value": "again"}]},
                                {"conversations": [{"from": "user", "value": "a b c d e"},
                                                   {"from": "assistant", "value": "done"}]}]))
    prompts, report = load_prompts("sharegpt", path, n=10)
    assert [(p.prompt, p.reference) for p in prompts] == [("x y z w v", None), ("a b c d e", "done")]
    assert report.summary() == "2 rows read, 2 kept (1 without a reference output)"  # counted, not unsaid


def test_sharegpt_counts_with_the_given_tokenizer():
    _prompts, report = load_prompts("sharegpt", FIXTURES / "sharegpt.json", n=10, count_tokens=len)
    assert report.kept == 2  # in characters "hi" is still shorter than 4
    with pytest.raises(SpecscopeError, match="no usable sharegpt rows .*3 prompts outside 4-1024 tokens"):
        load_prompts("sharegpt", FIXTURES / "sharegpt.json", n=10, count_tokens=lambda text: 2000)


def test_cnn_prefix_and_multiline_csv():
    prompts, _ = load_prompts("cnn_dailymail", FIXTURES / "cnn_dailymail.csv", n=10)
    first = next(p for p in prompts if p.id == "cnn_dailymail-0")
    assert first.prompt == (
        "Could you summarize the following article, please reuse text from the article if possible: "
        "LONDON, England -- A cat was found on the roof of the station.\nIt had been there for three days, officials said."
    )
    assert first.reference == "Cat found on station roof."


def test_gsm8k_question():
    prompts, _ = load_prompts("gsm8k", FIXTURES / "gsm8k.jsonl", n=1, seed=42)
    assert len(prompts) == 1 and prompts[0].prompt.endswith("?")
    assert prompts[0].reference.endswith("#### 72") or prompts[0].reference.endswith("#### 10")


def test_aime_keeps_2022_to_2024_from_year_column_or_url():
    prompts, report = load_prompts("aime", FIXTURES / "aime.csv", n=10)
    assert sorted(p.reference for p in prompts) == ["116", "45"]
    assert report.left_out == {"problems from years other than 2022-2024": 1}
    prompts, report = load_prompts("aime", FIXTURES / "aime_validation.jsonl", n=10)
    assert report.kept == 2 and {p.reference for p in prompts} == {"204", "33"}


def test_gpqa_zero_shot_multiple_choice():
    prompts, _ = load_prompts("gpqa", FIXTURES / "gpqa.csv", n=10, seed=42)
    first = next(p for p in prompts if p.id == "gpqa-0")
    assert first.prompt.startswith("What is the correct answer to this question: Two quantum states")
    assert "\nWhich energy difference" in first.prompt
    choices = [line for line in first.prompt.splitlines() if line[:3] in ("(A)", "(B)", "(C)", "(D)")]
    assert len(choices) == 4
    correct = next(line for line in choices if line.endswith(" 10^-4 eV"))
    assert correct[1] == first.reference
    again, _ = load_prompts("gpqa", FIXTURES / "gpqa.csv", n=10, seed=42)
    assert [p.prompt for p in again] == [p.prompt for p in prompts]  # seeded shuffle


def test_sampling_is_seeded_and_bounded():
    a, _ = load_prompts("instructcoder", FIXTURES / "instructcoder.jsonl", n=2, seed=42)
    b, _ = load_prompts("instructcoder", FIXTURES / "instructcoder.jsonl", n=2, seed=42)
    c, _ = load_prompts("instructcoder", FIXTURES / "instructcoder.jsonl", n=3, seed=7)
    assert [p.id for p in a] == [p.id for p in b] and len(a) == 2
    assert sorted(p.id for p in c) == ["instructcoder-0", "instructcoder-1", "instructcoder-2"]


def test_a_byte_order_mark_is_no_part_of_the_first_field(tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM: the header read '\\ufeffquestion' (no 'question'
    field), a JSON list was invalid JSON."""
    csv_file, json_file = tmp_path / "g.csv", tmp_path / "g.json"
    csv_file.write_bytes("\ufeffquestion,answer\nWhat is 2+2?,4\n".encode())
    json_file.write_bytes('\ufeff[{"question": "How many?", "answer": "5"}]'.encode())
    assert [p.prompt for p in load_prompts("gsm8k", csv_file, n=1)[0]] == ["What is 2+2?"]
    assert [p.reference for p in load_prompts("gsm8k", json_file, n=1)[0]] == ["5"]


def test_a_reference_is_kept_as_written_or_refused_never_dropped(tmp_path):
    """A number is its text (as aime's answers were); a list is refused naming the line (both
    were left out of the workload without a word)."""
    path = tmp_path / "gsm8k.jsonl"
    path.write_text('{"question": "q1", "answer": 42}\n{"question": "q2"}\n', encoding="utf-8")
    assert [p.reference for p in load_prompts("gsm8k", path, n=2)[0]] == ["42", None]
    path.write_text('{"question": "q1", "answer": 42}\n{"question": "q2", "answer": ["x"]}\n', encoding="utf-8")
    with pytest.raises(SpecscopeError, match=r"gsm8k\.jsonl:2: field 'answer': expected text \(the reference output\), got list"):
        load_prompts("gsm8k", path, n=2)


def test_missing_field_names_file_and_line(tmp_path):
    bad = tmp_path / "gsm8k.jsonl"
    bad.write_text('{"question": "ok?"}\n{"query": "no question"}\n', encoding="utf-8")
    with pytest.raises(SpecscopeError, match=r"gsm8k.jsonl:2: field 'question'"):
        load_prompts("gsm8k", bad, n=5)


def test_bad_json_and_unknown_format(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"question": "ok?"}\n{not json\n', encoding="utf-8")
    with pytest.raises(SpecscopeError, match=r"x.jsonl:2: invalid JSON"):
        list(read_rows(bad))
    other = tmp_path / "x.txt"
    other.write_text("hello", encoding="utf-8")
    with pytest.raises(SpecscopeError, match="expected a .jsonl, .json, .csv or .parquet"):
        list(read_rows(other))
    conv = tmp_path / "s.json"
    conv.write_text(json.dumps([{"conversations": "nope"}]), encoding="utf-8")
    with pytest.raises(SpecscopeError, match=r"s.json: item 0: field 'conversations'"):
        load_prompts("sharegpt", conv, n=1)


def test_hub_without_datasets_library_is_one_clear_error():
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(SpecscopeError, match="needs the 'datasets' library"):
            load_prompts("gsm8k", "hub", n=1)
    else:
        pytest.skip("the datasets library is installed; the hub path needs network")


def test_parquet_needs_pyarrow(tmp_path):
    source = tmp_path / "cnn.parquet"
    source.write_bytes(b"PAR1")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(SpecscopeError, match="reading parquet needs pyarrow"):
            load_prompts("cnn_dailymail", source, n=1)
    else:
        pytest.skip("pyarrow is installed; its own reader handles parquet")
