"""The bundled workloads: reproducible, well-formed, and the tasks' answers are right."""

from __future__ import annotations

import difflib
import re

import pytest

from specscope.errors import SpecscopeError
from specscope.workloads.bundled import (
    BUNDLED_SIZE,
    bundled_path,
    bundled_records,
    read_bundled,
)
from specscope.workloads.jsonl import read_workload
from specscope.workloads.tasks import TASKS, extract_answer, generate


@pytest.mark.parametrize("task", TASKS)
def test_shipped_files_equal_the_generator(task):
    assert read_bundled(task) == bundled_records(task)
    assert len(read_bundled(task)) == BUNDLED_SIZE


@pytest.mark.parametrize("task", TASKS)
def test_engine_reader_accepts_the_files(task):
    class Chars:  # stands in for a tokenizer: one id per character
        def encode(self, text):
            return type("E", (), {"ids": [ord(c) for c in text]})()

    requests = read_workload(bundled_path(task), Chars())
    assert len(requests) == BUNDLED_SIZE and len({r.id for r in requests}) == BUNDLED_SIZE


def test_math_references_are_correct():
    for record in bundled_records("math"):
        numbers = [int(x) for x in re.findall(r"\d+", record["prompt"])]
        a, b, c = numbers
        assert record["answer"] == str(a + b - c) == extract_answer("math", record["reference"])


def test_code_edit_copies_most_of_the_prompt():
    for record in bundled_records("code"):
        code = record["prompt"].split("\n\n")[0]
        assert code != record["reference"]
        assert len(code.splitlines()) == len(record["reference"].splitlines())
        assert difflib.SequenceMatcher(None, code, record["reference"]).ratio() >= 0.75


def test_summary_is_the_lead_two_sentences():
    for record in bundled_records("summary"):
        article = record["prompt"].split("if possible: ", 1)[1]
        assert article.startswith(record["reference"] + " ")


def test_generators_are_seeded_and_unknown_tasks_rejected():
    assert generate("chat", 5, 3) == generate("chat", 5, 3) != generate("chat", 5, 4)
    with pytest.raises(SpecscopeError, match="unknown bundled workload"):
        bundled_records("poetry")
    assert extract_answer("math", "so 3 + 4 = 7. The answer is 7.") == "7"
    assert extract_answer("math", "no final line") == ""
