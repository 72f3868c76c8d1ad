"""reading.read_jsonl: where a bad line is blamed."""

from __future__ import annotations

import pytest

from specscope.errors import SpecscopeError
from specscope.reading import read_jsonl


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_line_cut_short_is_blamed_at_its_end_not_at_column_one(tmp_path, ending):
    cut = '{"id": "b", "output_token_ids": [1, 2, 3'  # 40 characters: the error lies past the last
    path = tmp_path / "x.jsonl"
    path.write_bytes(('{"id": "a"}' + ending + cut + ending).encode())
    with pytest.raises(SpecscopeError, match=r"x\.jsonl:2: invalid JSON \(Expecting ',' delimiter, column 41\)$"):
        list(read_jsonl(path, lambda obj, where, line: obj))
