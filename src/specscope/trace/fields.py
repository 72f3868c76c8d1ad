"""Typed field access for one JSON object, with one-line errors naming file:line and field.

The value rules themselves live in :mod:`specscope.validate`; this class only looks fields up
and puts the location (``path:line: field 'proposers.eagle.acc_len'``) in front of a broken
rule. Nested objects (``child``) keep the dotted path of their fields.
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

import numpy as np

from specscope import validate
from specscope.errors import SpecscopeError, where

T = TypeVar("T")
LOOKED_UP = object()  # int_array's value when none is given: the field's own


class Fields:
    """Reads fields of one decoded JSON object; every failure names ``path:line: field``.

    ``line`` is None for a whole file (a config); ``prefix`` is the dotted path of a nested
    object (``"forward"``)."""

    def __init__(self, obj: object, path: object, line: int | None = None, prefix: str = ""):
        self.path, self.line, self.prefix = path, line, prefix
        if not isinstance(obj, dict):
            raise self.error(prefix or None, f"expected a JSON object, got {type(obj).__name__}")
        self.obj = obj

    def name(self, field: str) -> str:
        """The dotted path of ``field``."""
        return f"{self.prefix}.{field}" if self.prefix else field

    def error(self, name: str | None, message: str) -> SpecscopeError:
        """An error at ``name`` (already a full dotted path; None for the object itself)."""
        return SpecscopeError(f"{where(self.path, self.line, name)}: {message}")

    def has(self, name: str) -> bool:
        return name in self.obj

    def get(self, name: str) -> object:
        if name not in self.obj:
            raise self.error(self.name(name), "missing")
        return self.obj[name]

    def child(self, name: str, optional: bool = False) -> "Fields | None":
        """The nested object ``name`` (None when ``optional`` and absent)."""
        if optional and name not in self.obj:
            return None
        return Fields(self.get(name), self.path, self.line, self.name(name))

    def only(self, allowed: Iterable[str]) -> None:
        """Refuse fields not in ``allowed``, naming them."""
        allowed = set(allowed)
        unknown = [key for key in self.obj if key not in allowed]
        if unknown:
            raise self.error(self.name(unknown[0]), f"unknown field (expected one of {', '.join(sorted(allowed))})")

    def check(self, name: str, rule: Callable[..., T], value: object, note: str = "", **bounds: object) -> T:
        """``rule(value, **bounds)`` (a :mod:`specscope.validate` rule), located at ``name``;
        ``note`` is appended to a broken rule's message (why the bounds are what they are)."""
        try:
            return rule(value, **bounds)
        except validate.Invalid as error:
            raise self.error(self.name(name), f"{error}{note}") from None

    def text(self, name: str, optional: bool = False) -> str | None:
        if optional and self.obj.get(name) is None:
            return None
        value = self.get(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.error(self.name(name), f"expected a string, got {type(value).__name__}")
        if not str(value).strip():  # a name, an id, a label: "" or "  " would be shown as nothing, or taken for absent
            raise self.error(self.name(name), f"expected non-empty text, got {value!r}")
        return str(value)

    def integer(self, name: str, optional: bool = False, minimum: int = 0, maximum: int | None = None) -> int | None:
        if optional and self.obj.get(name) is None:
            return None
        return self.check(name, validate.integer, self._not_text(name, "an integer"), low=minimum, high=maximum)

    def number(self, name: str, default: float | None = None, optional: bool = False, **bounds: object) -> float | None:
        """A finite number (``default`` when absent and a default is given; ``None`` when absent or
        null and ``optional``)."""
        if default is not None and name not in self.obj:
            return default
        if optional and self.obj.get(name) is None:
            return None
        return self.check(name, validate.number, self._not_text(name, "a number"), **bounds)

    def numbers(self, name: str, optional: bool = False, **bounds: object) -> tuple[float, ...] | None:
        """A non-empty list of finite numbers, each within ``bounds`` (a broken one is named
        ``name[i]``; ``None`` when absent or null and ``optional``)."""
        if optional and self.obj.get(name) is None:
            return None
        value = self.get(name)
        if not isinstance(value, list) or not value:
            raise self.error(self.name(name), "expected a non-empty list of numbers")
        numbers = []
        for i, item in enumerate(value):
            located = f"{name}[{i}]"
            numbers.append(self.check(located, validate.number,
                                      self.check(located, validate.not_text, item, what="a number"), **bounds))
        return tuple(numbers)

    def _not_text(self, name: str, what: str) -> object:
        """The field's value, refused if it is text: a file writes numbers as numbers (``"20"``
        would pass the command line's parsers, which read text)."""
        return self.check(name, validate.not_text, self.get(name), what=what)

    def boolean(self, name: str, default: bool) -> bool:
        """true or false; ``default`` where absent or null (as Hugging Face reads a config)."""
        value = self.obj.get(name)
        value = default if value is None else value
        if not isinstance(value, bool):
            raise self.error(self.name(name), f"expected true or false, got {value!r}")
        return value

    def int_array(self, name: str, value: object = LOOKED_UP, dtype=np.int64, low: int | None = None,
                  high: int | None = None, note: str = "") -> np.ndarray:
        """A list of integers in [low, high] as a 1-D array (``value``, given — null included —
        overrides the lookup of ``name``, which is then only the label)."""
        value = self.get(name) if value is LOOKED_UP else value
        return self.check(name, validate.integers, value, note, low=low, high=high).astype(dtype)

    def int_matrix(self, name: str, value: object, dtype=np.int64, low: int | None = None,
                   high: int | None = None) -> np.ndarray:
        """A list of equal-length lists of integers in [low, high] as a 2-D array (a broken row
        is named ``name[i]``)."""
        if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
            raise self.error(self.name(name), "expected a list of lists of integers")
        if len({len(row) for row in value}) > 1:
            raise self.error(self.name(name), "expected a list of equal-length lists of integers")
        rows = [self.check(f"{name}[{i}]", validate.integers, row, low=low, high=high) for i, row in enumerate(value)]
        return np.stack(rows).astype(dtype) if rows else np.zeros((0, 0), dtype=dtype)

    def float_matrix(self, name: str, value: object) -> np.ndarray:
        """A list of equal-length lists of numbers (null = NaN) as a 2-D float32 array; a number
        written as text, true/false, or a bare NaN (write null) is no number (a broken row is named ``name[i]``)."""
        if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
            raise self.error(self.name(name), "expected a list of lists of numbers")
        for i, row in enumerate(value):
            wrong = next((v for v in row if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                                               or v != v)), None)  # a bare NaN: null says "none"
            if wrong is not None:
                raise self.error(self.name(f"{name}[{i}]"), f"expected numbers (or null), got {wrong!r}")
        if len({len(row) for row in value}) > 1:
            raise self.error(self.name(name), f"expected rows of one length, got lengths "
                                              f"{sorted({len(row) for row in value})}")
        try:
            return np.asarray([[np.nan if v is None else v for v in row] for row in value], dtype=np.float32).reshape(
                len(value), len(value[0]))
        except OverflowError:
            raise self.error(self.name(name), "expected numbers a float holds (one is too large)") from None
