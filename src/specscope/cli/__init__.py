"""The `specscope` command line.

Every verb lives in its own module of this package and exposes ``register(subparsers)``, which
adds its parser and sets ``run=<function(args) -> int>``. Verbs are discovered automatically, so
adding a verb means adding one file. Heavy libraries (torch, matplotlib) are imported inside the
verbs' ``run`` functions so that ``specscope --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import pkgutil
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

from specscope.errors import SpecscopeError


NOT_GIVEN = object()  # an option not yet seen in this parse (None may be a value)


class StoreOnce(argparse._StoreAction):
    """argparse's ``store``, refusing an option given twice (argparse would keep the last value
    silently: ``--k 3 … --k 4`` ran k = 4 where a user may have meant either)."""

    given: object = NOT_GIVEN

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        if self.option_strings and self.given is not NOT_GIVEN:
            parser.error(f"argument {argparse._get_action_name(self)}: given twice ({_shown(self.given)} "
                         f"and {_shown(values)}); give it once")
        self.given = values
        super().__call__(parser, namespace, values, option_string)


class Version(argparse.Action):
    """``--version``: the code's version and, run from a git checkout, its commit
    (:func:`specscope.version.code_version`, asked only when the option is given)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        from specscope.version import code_version

        print(code_version())
        parser.exit()


def _shown(value: object) -> str:
    """An option's parsed value as typed: a list comma-joined, a path as its text."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (``specscope VERB: error: argument --k: ...``)
    and exit status 2, like every other error of the CLI; ``--help`` shows the usage. An option
    that takes a value may be given once (:class:`StoreOnce`)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.register("action", None, StoreOnce)
        self.register("action", "store", StoreOnce)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        for action in self._actions:
            if isinstance(action, StoreOnce):
                action.given = NOT_GIVEN
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="specscope",
        description="Does speculative decoding pay off for my model, workload and batch size?",
    )
    parser.add_argument("--version", action=Version, nargs=0, help="show specscope's version (and its git commit) and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(subparsers)
    _say_defaults(parser)
    return parser


def _say_defaults(parser: argparse.ArgumentParser) -> None:
    """Every option of ``parser`` and its verbs whose default is a number or a word says it in its
    help, where the help does not already (a review counted two dozen options whose defaults
    ``--help`` never showed, some with no help at all)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb in dict.fromkeys(action.choices.values()):  # an alias is the same parser
                _say_defaults(verb)
            continue
        default, text = action.default, action.help or ""
        if not action.option_strings or text == argparse.SUPPRESS or "default" in text or isinstance(default, bool) \
                or not isinstance(default, (str, int, float)) or default in ("", argparse.SUPPRESS):
            continue
        action.help = f"{text} (default: %(default)s)" if text else "default: %(default)s"


def main(argv: list[str] | None = None) -> int:
    with _noting_interrupts() as interrupted:
        return _run(argv, interrupted)


def _run(argv: list[str] | None, interrupted: list[int]) -> int:
    args = None
    try:
        parser = build_parser()  # imports every verb: a Ctrl-C may land here too
        given = sys.argv[1:] if argv is None else argv
        dashes = next((word for word in given if word.startswith("--") and word.endswith("=--")), None)
        if dashes:  # argparse takes the value for the end of options and hands on no value at all ([] for a list)
            parser.error(f"argument {dashes[:-3]}: expected a value, got '--'")
        args = parser.parse_args(argv)  # output paths are checked here, before any work
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        return int(args.run(args) or 0)
    except SpecscopeError as error:
        print(f"specscope: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(args, interrupted)
    except BrokenPipeError:
        return 0
    except OSError as error:
        if error.errno not in FULL:  # a bug, or an unforeseen error: its traceback says where
            raise
        where = f"{error.filename}: " if error.filename else ""
        print(f"specscope: error: {where}cannot write ({error.strerror}); what was finished is kept", file=sys.stderr)
        return 2
    except Exception:
        if interrupted:  # a Ctrl-C inside an extension module's import: numpy raises ImportError
            return _interrupted(args, interrupted)
        raise


FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)  # a disk that took no more: said in one line


def _interrupted(args: argparse.Namespace | None, noted: list[int]) -> int:
    """Exit status 128 + the signal (130 for Ctrl-C, 143 for SIGTERM, as a batch scheduler stops
    a job); a verb that resumes (``resumes`` in its defaults: True, or what it keeps, in words)
    says so."""
    resumes = getattr(args, "resumes", False)
    kept = resumes if isinstance(resumes, str) else "finished work is kept"
    again = "rerun without --overwrite to resume" if getattr(args, "overwrite", False) else "rerun to resume"  # it would start over
    print("specscope: interrupted" + (f" ({kept}; {again})" if resumes else ""), file=sys.stderr)
    return 128 + (noted[0] if noted else signal.SIGINT)


@contextlib.contextmanager
def _noting_interrupts() -> Iterator[list[int]]:
    """Python's own Ctrl-C (raise KeyboardInterrupt), and SIGTERM alike, each noted in the list
    given: an extension module interrupted while it imports (numpy, torch: the verbs import them)
    raises another error instead. A second one while the first unwinds exits at once (its
    KeyboardInterrupt inside a cleanup printed a traceback). Only the main thread can set a signal
    handler; elsewhere nothing is noted."""
    noted: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        noted.append(signum)
        if len(noted) > 1:  # again, while the first unwinds (locks, files, torch): stop now, no traceback
            os.write(2, b"specscope: interrupted again: stopped at once, without cleaning up\n")
            os._exit(128 + noted[0])
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    # each signal taken over only from its default: a SIGINT the shell ignores (a job started with
    # `&` from a script) stays ignored, while SIGTERM still stops the run cleanly
    own = [sig for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
           if signal.getsignal(sig) is default]
    for sig in own:
        signal.signal(sig, interrupt)
    try:
        yield noted
    finally:
        for sig in own:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
