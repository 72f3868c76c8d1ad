"""Typed field access for one JSON object, with one-line errors naming file:line and field."""

from __future__ import annotations

import numpy as np

from specscope.errors import SpecscopeError, where


class Fields:
    """Reads fields of one decoded JSON line; every failure names ``path:line: field``."""

    def __init__(self, obj: object, path: object, line: int):
        self.path, self.line = path, line
        if not isinstance(obj, dict):
            raise self.error(None, f"expected a JSON object, got {type(obj).__name__}")
        self.obj = obj

    def error(self, name: str | None, message: str) -> SpecscopeError:
        return SpecscopeError(f"{where(self.path, self.line, name)}: {message}")

    def has(self, name: str) -> bool:
        return name in self.obj

    def get(self, name: str) -> object:
        if name not in self.obj:
            raise self.error(name, "missing")
        return self.obj[name]

    def text(self, name: str, optional: bool = False) -> str | None:
        if optional and self.obj.get(name) is None:
            return None
        value = self.get(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.error(name, f"expected a string, got {type(value).__name__}")
        return str(value)

    def integer(self, name: str, optional: bool = False, minimum: int = 0) -> int | None:
        if optional and self.obj.get(name) is None:
            return None
        value = self.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, f"expected an integer, got {type(value).__name__}")
        if value < minimum:
            raise self.error(name, f"expected an integer >= {minimum}, got {value}")
        return value

    def int_array(self, name: str, value: object = None, dtype=np.int64) -> np.ndarray:
        """A list of integers as a 1-D array (``value`` overrides the lookup of ``name``)."""
        value = self.get(name) if value is None else value
        if not isinstance(value, list):
            raise self.error(name, f"expected a list of integers, got {type(value).__name__}")
        if value and not all(type(v) is int for v in value):
            bad = next(v for v in value if type(v) is not int)
            raise self.error(name, f"expected a list of integers, found {bad!r}")
        return np.asarray(value, dtype=dtype)

    def float_matrix(self, name: str, value: object) -> np.ndarray:
        """A list of equal-length lists of numbers (null = NaN) as a 2-D float32 array."""
        try:
            if isinstance(value, list):
                value = [[np.nan if v is None else v for v in row] if isinstance(row, list) else row for row in value]
            array = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            raise self.error(name, "expected a list of lists of numbers") from None
        if array.ndim != 2:
            raise self.error(name, "expected a list of equal-length lists of numbers")
        return array
