"""Files users give: UTF-8 text, JSON (keys unique, text valid), TOML and JSON Lines read
as streams; anything unreadable is a one-line error naming the file (and the line)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from specscope.errors import SpecscopeError

T = TypeVar("T")
csv.field_size_limit(2**31 - 1)  # for every CSV read: a field (a long article) is bounded by its file, not by 128 KiB


BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark


def read_text(path: str | Path) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark, as Excel's "CSV UTF-8" writes,
    left out, as :func:`read_jsonl` does), or a one-line error naming the file (and the bad byte)."""
    path = Path(path)
    try:
        return path.read_bytes().decode("utf-8-sig")
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise not_text(path, path.read_bytes()[:2], f"byte {error.start}") from None


def not_text(path: str | Path, start: bytes, byte: str, line: int | None = None) -> SpecscopeError:
    """The one-line error for bytes of ``path`` (at ``line``) that are not UTF-8 text: ``start``, the
    file's first bytes, names a gzip file as one; else ``byte`` says where decoding failed."""
    if start.startswith(b"\x1f\x8b"):
        return SpecscopeError(f"{path}: gzip-compressed (decompress it first, e.g. gunzip -k {path})")
    return SpecscopeError(f"{path}{'' if line is None else f':{line}'}: not UTF-8 text ({byte})")


class DuplicateKey(ValueError):
    """A JSON object names one key twice (``json`` would keep the last silently)."""

    def __str__(self) -> str:
        return f"key {self.args[0]!r} given twice (which one counts would be a guess)"


class BadText(ValueError):
    """A JSON string that is not text: a lone surrogate escape (``"\\ud800"``), which no file or
    terminal can hold (``json`` reads it; printing or writing it fails)."""

    def __str__(self) -> str:
        return f"key {self.args[0]!r}: a lone surrogate escape (\\ud800-\\udfff) is not text"


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """``json``'s ``object_pairs_hook``: the object, or :class:`DuplicateKey` naming a key given
    twice, or :class:`BadText` naming a key or a text value that holds a lone surrogate."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    for key, value in pairs:
        for text in (key, value) if isinstance(value, str) else (key,):
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise BadText(key) from None
    return obj


def parse_json(text: str, path: str | Path, line: int | None = None) -> object:
    """``text`` (all of ``path``, or its line ``line``) as JSON, each object's keys once and its
    text valid (:func:`unique_keys`); anything else a one-line error naming ``path`` and the line."""
    place = f"{path}:{line}" if line is not None else str(path)
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except (DuplicateKey, BadText) as error:
        raise SpecscopeError(f"{place}: {error}") from None
    except json.JSONDecodeError as error:
        message = error.msg.removesuffix(" at")  # "Invalid control character at": json then names the position
        at = place if line is not None else f"{path}:{error.lineno}"
        raise SpecscopeError(f"{at}: invalid JSON ({message}, column {error.colno})") from None
    except RecursionError:
        raise SpecscopeError(f"{place}: invalid JSON (nested too deeply)") from None
    except ValueError as error:  # a number of more digits than Python converts (sys.get_int_max_str_digits)
        raise SpecscopeError(f"{place}: invalid JSON ({str(error).split(':')[0]})") from None


def read_json(path: str | Path) -> object:
    """The JSON document in ``path`` (:func:`parse_json`)."""
    return parse_json(read_text(path), path)


def read_json_object(path: str | Path, what: str = "a JSON object") -> dict:
    """The JSON object in ``path``, or a one-line error naming the file (and line) and what
    was expected."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise SpecscopeError(f"{path}: expected {what}")
    return data


def read_toml_object(path: str | Path) -> dict:
    """The TOML table in ``path``, or a one-line error naming the file and what is wrong."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    path = Path(path)
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as error:
        raise SpecscopeError(f"{path}: invalid TOML ({error})") from None


def first_line(path: str | Path) -> tuple[int, bytes] | None:
    """The first line of ``path`` that is not blank, and its number (None: the file holds none).
    An ``OSError`` (a folder, an unreadable file) passes to the caller, who knows what it means."""
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            line = line.removeprefix(BOM) if number == 1 else line
            if line.strip():
                return number, line
    return None


def read_jsonl(path: str | Path, parse: Callable[[object, Path, int], T]) -> Iterator[T]:
    """``parse(obj, path, line)`` for each non-blank line of the JSON Lines file ``path``, read
    as a stream (a UTF-8 byte-order mark opening the file, as some Windows tools write, is
    skipped); a line that is not UTF-8 or not JSON is a one-line error naming ``path:line``."""
    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot read ({error.strerror or error})") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise not_text(path, raw if number == 1 else b"", f"byte {error.start} of the line", number) from None
            if not line.strip():
                continue
            # without its line break: a line cut short is blamed at its end, not at column 1 of a "line 2"
            yield parse(parse_json(line.rstrip("\r\n"), path, number), path, number)
