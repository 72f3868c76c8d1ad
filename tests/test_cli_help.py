"""Every verb's ``--help`` says each option's default where it has one of its own."""

from __future__ import annotations

import argparse

from specscope.cli import build_parser


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb in dict.fromkeys(action.choices.values()):
                yield from _parsers(verb)


def test_every_option_with_a_default_says_it():
    """A review counted two dozen options whose defaults --help never showed (trace's --k-max 20,
    bound's --k-max 10, simulate's --mode mixed), some with no help at all."""
    unsaid = []
    for parser in _parsers(build_parser()):
        parser.format_help()  # every help string expands (a stray % would raise here)
        for action in parser._actions:
            default = action.default
            if action.option_strings and isinstance(default, (str, int, float)) and not isinstance(default, bool) \
                    and default not in ("", argparse.SUPPRESS) and (action.help or "").find("default") < 0:
                unsaid.append(f"{parser.prog} {action.option_strings[-1]}")
    assert not unsaid, unsaid
    trace = next(p for p in _parsers(build_parser()) if p.prog.endswith(" trace"))
    assert "(default: 20)" in " ".join(trace.format_help().split())


def test_the_dtype_names_the_verbs_offer_are_the_engines():
    from specscope.cli._common import DTYPE_NAMES
    from specscope.engine.loading import DTYPES

    assert DTYPE_NAMES == tuple(DTYPES)
