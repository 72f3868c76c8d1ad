"""The one place where values from users are checked: numbers, ranges, seeds, probabilities.

Every check raises :class:`Invalid` with what was expected and what came ("expected a finite
number > 0, got nan"); it does not know where the value came from. Callers add the place:

- the CLI (:func:`arg`) turns it into an argparse error naming the option;
- trace and record readers (:class:`specscope.trace.fields.Fields`) prefix ``file:line: field``;
- the server (:mod:`specscope.serve.protocol`) answers 400 naming the request field;
- config files (sweep TOML, cost-model JSON) prefix the file and the key.

So a rule such as "a seed fits in 64 bits" or "temperature is finite" is written once.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Callable, Sequence, TypeVar

import numpy as np

from specscope.errors import SpecscopeError

T = TypeVar("T")

SEED_MAX = 2**64 - 1  # seeds are unsigned 64-bit, as vLLM's and torch's generators take


class Invalid(ValueError):
    """A value that breaks a rule; the message says what was expected and what came."""


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float within [low, high] (an end is excluded when ``*_open``)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise Invalid(f"expected a number, got {value!r}") from None
    if not _is_number(value):
        raise Invalid(f"expected a number, got {_show(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise Invalid(f"expected a finite number, got {_show(value)}") from None
    if not math.isfinite(result):
        raise Invalid(f"expected a finite number, got {_show(value)}")
    if low is not None and (result < low or (low_open and result == low)):
        raise Invalid(f"expected a number {'>' if low_open else '>='} {_show(low)}, got {_show(value)}")
    if high is not None and (result > high or (high_open and result == high)):
        raise Invalid(f"expected a number {'<' if high_open else '<='} {_show(high)}, got {_show(value)}")
    return result


def integer(value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int within [low, high]; text of ASCII digits such as ``"8"`` is accepted,
    ``8.0``, ``1_000`` or ``٣`` (which Python's int reads) are not."""
    if isinstance(value, str):
        if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
            raise Invalid(f"expected an integer, got {value!r}")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"expected an integer, got {_show(value)}")
    if low is not None and value < low:
        raise Invalid(f"expected an integer >= {low}, got {_show(value)}")
    if high is not None and value > high:
        raise Invalid(f"expected an integer <= {high}, got {_show(value)}")
    return value


def not_text(value: object, *, what: str) -> object:
    """``value`` as a file stores a number: text is refused (``"44"`` would pass the command
    line's rules, which read text, and then be text to the arithmetic that follows)."""
    if isinstance(value, str):
        raise Invalid(f"expected {what}, got text {value!r}")
    return value


def probability(value: object) -> float:
    """A number in [0, 1]."""
    return number(value, low=0.0, high=1.0)


def seed(value: object) -> int:
    """A random seed: an integer in [0, 2^64)."""
    return integer(value, low=0, high=SEED_MAX)


def temperature(value: object) -> float:
    """A sampling temperature: finite and >= 0 (0 = greedy)."""
    return number(value, low=0.0)


def split_list(text: str) -> list[str]:
    """``"a,b,[(0,), (1,)]"`` → ``["a", "b", "[(0,), (1,)]"]``: the comma-separated parts of
    ``text``, stripped; a comma inside brackets (a tree's list of paths) does not split. An empty
    part (``",1"``, ``"1,,8"``: a value left out by mistake?) is refused, not dropped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == "," and depth <= 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    parts = [part.strip() for part in parts]
    if len(parts) > 1 and "" in parts:
        raise Invalid(f"expected a value between every two commas, got {text!r} (entry {parts.index('') + 1} "
                      "is empty)")
    return [part for part in parts if part]


def first_repeat(values: Sequence[T]) -> T | None:
    """The first of ``values`` equal to one before it (``None``: they are distinct)."""
    return next((value for i, value in enumerate(values) if value in values[:i]), None)


def arg(check: Callable[..., T], **bounds: object) -> Callable[[str], T]:
    """An argparse ``type=`` that applies ``check(text, **bounds)``; argparse names the option
    in its error, e.g. ``arg(integer, low=1)`` for a positive count."""

    def parse(text: str) -> T:
        try:
            return check(text, **bounds)
        except Invalid as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = check.__name__  # argparse names the type in some messages
    return parse


def check(label: str, rule: Callable[..., T], value: object, **bounds: object) -> T:
    """``rule(value, **bounds)`` for a library caller: a broken rule becomes a one-line
    :class:`~specscope.errors.SpecscopeError` that starts with ``label`` (``"batch_size"``)."""
    try:
        return rule(value, **bounds)
    except Invalid as error:
        raise SpecscopeError(f"{label}: {error}") from None


def _show(value: object) -> str:
    """A value as a message shows it: short, with the type when it is not a number."""
    if _is_number(value):
        text = repr(value)
        return text if len(text) <= 24 else f"{text[:20]}…"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:36]}…{type(value).__name__}"


K_MAX_LIMIT = 64  # the longest proposal length anywhere (k, k_max): far past any useful k, below a typo's
MAX_BATCH_SIZE = 65536  # the most sequences at once anywhere: far past any engine's (vLLM's max_num_seqs: 256-1024)
MAX_CONTEXT = 10_000_000  # the most cached tokens per request anywhere: past any model's positions
MAX_REQUESTS = 1_000_000  # the most requests per measured run: past any benchmark's (a typo's 10^12 would fill memory)


def integers(value: object, *, low: int | None = None, high: int | None = None) -> np.ndarray:
    """``value``, a list of integers, as an int64 array with every entry in [low, high]; the
    first entry that breaks the rule is named by its position."""
    if not isinstance(value, list):
        raise Invalid(f"expected a list of integers, got {_show(value)}")
    bad = next((i for i, v in enumerate(value) if type(v) is not int), None)
    if bad is not None:
        raise Invalid(f"expected a list of integers, got {_show(value[bad])} at position {bad}")
    low_ = -(2**63) if low is None else max(low, -(2**63))
    high_ = 2**63 - 1 if high is None else min(high, 2**63 - 1)
    try:
        array = np.asarray(value, dtype=np.int64)
        fits = not array.size or (array.min() >= low_ and array.max() <= high_)
    except OverflowError:  # beyond 64 bits
        fits = False
    if not fits:
        position = next(i for i, v in enumerate(value) if not low_ <= v <= high_)
        raise Invalid(f"expected integers in [{low_}, {high_}], got {_show(value[position])} "
                      f"at position {position}")
    return array
