"""reading.read_jsonl: one streaming JSON Lines reader whose errors name file:line."""

from __future__ import annotations

import pytest

from specscope.errors import SpecscopeError
from specscope.reading import read_jsonl


def keep(obj, path, line):
    return obj, path.name, line


def test_non_blank_lines_are_parsed_with_their_line_numbers(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n   \n[2]\n"three"', encoding="utf-8")
    assert list(read_jsonl(path, keep)) == [({"a": 1}, "x.jsonl", 1), ([2], "x.jsonl", 4), ("three", "x.jsonl", 5)]


def test_it_streams_lines_before_a_bad_one(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{broken\n', encoding="utf-8")
    lines = read_jsonl(path, keep)
    assert next(lines) == ({"a": 1}, "x.jsonl", 1)
    with pytest.raises(SpecscopeError, match=r"x\.jsonl:2: invalid JSON \(Expecting property name .*, column 2\)$"):
        next(lines)


@pytest.mark.parametrize("content, message", [
    (b'{"a": 1}\n\xff\xfe\n', r"x\.jsonl:2: not UTF-8 text \(byte 0 of the line\)$"),
    (b'\n\n{"a": 1', r"x\.jsonl:3: invalid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, r"x\.jsonl:1: invalid JSON \(nested too deeply\)$"),
    (b'{"a": ' + b"7" * 5000 + b"}\n", r"x\.jsonl:1: invalid JSON \(Exceeds the limit \(4300 digits\)"),
    (b'{"id": "\\ud800"}\n', r"x\.jsonl:1: key 'id': a lone surrogate escape .* is not text$"),
])
def test_bad_lines_are_one_line_errors_naming_file_and_line(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(SpecscopeError, match=message):
        list(read_jsonl(path, keep))


def test_unreadable_paths(tmp_path):
    with pytest.raises(SpecscopeError, match=r"absent\.jsonl: cannot read \(No such file or directory\)"):
        list(read_jsonl(tmp_path / "absent.jsonl", keep))
    with pytest.raises(SpecscopeError, match=r": cannot read \(Is a directory\)"):
        list(read_jsonl(tmp_path, keep))


def test_errors_of_the_parser_pass_through(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n', encoding="utf-8")

    def refuse(obj, path, line):
        raise SpecscopeError(f"{path.name}:{line}: field 'a': no")

    with pytest.raises(SpecscopeError, match=r"^x\.jsonl:1: field 'a': no$"):
        list(read_jsonl(path, refuse))
