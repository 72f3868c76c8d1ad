"""A Ctrl-C while `python -m specscope` still imports: one line, exit 130, no traceback — also
when it lands inside an extension module's import, which numpy turns into an ImportError."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Each script first takes Ctrl-C as a foreground process does: a job a script starts with `&`
# inherits SIGINT ignored, which specscope keeps (and these tests would then see no interrupt).
FOREGROUND = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"

# Sends SIGINT to itself as the named module starts importing, then runs `python -m specscope`
# (datetime: imported by numpy's C extension as it initialises, which turns the interrupt there
# into an ImportError).
INTERRUPT_AT = FOREGROUND + """
import importlib.abc, os, runpy, signal, sys
TARGET = sys.argv[1]
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["specscope", "--help"]
runpy.run_module("specscope", run_name="__main__")
"""


@pytest.mark.parametrize("module", ["specscope.cli", "numpy", "datetime"])
def test_interrupt_while_importing(module):
    done = subprocess.run([sys.executable, "-c", INTERRUPT_AT, module], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.startswith("specscope: interrupted") and done.stderr.count("\n") == 1, done.stderr[-2000:]


def test_an_interrupt_says_what_the_verb_keeps(capsys):
    """A verb that keeps less than all its finished work says what (an interleaved-all sweep
    measures a workload's cells again whole; zoo train starts the stage it was in over)."""
    import argparse

    from specscope.cli import _interrupted

    assert _interrupted(argparse.Namespace(resumes=True), []) == 130
    assert "(finished work is kept; rerun to resume)" in capsys.readouterr().err
    _interrupted(argparse.Namespace(resumes="finished stages are kept; the interrupted stage starts over"), [15])
    assert "(finished stages are kept; the interrupted stage starts over; rerun to resume)" in capsys.readouterr().err
    _interrupted(argparse.Namespace(), [])
    assert capsys.readouterr().err == "specscope: interrupted\n"
    _interrupted(argparse.Namespace(resumes=True, overwrite=True), [])  # trace --overwrite rerun would start over
    assert "(finished work is kept; rerun without --overwrite to resume)" in capsys.readouterr().err


# A verb whose cleanup is still running when a second Ctrl-C comes (releasing a lock, torch
# shutting its threads down): it printed the second KeyboardInterrupt's traceback.
TWICE = FOREGROUND + """
import os, signal, time
from specscope.cli import _noting_interrupts
with _noting_interrupts():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        finally:
            print("cleanup ran on", flush=True)
"""


def test_a_second_interrupt_while_the_first_unwinds_stops_at_once_without_a_traceback():
    done = subprocess.run([sys.executable, "-c", TWICE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stdout == ""
    assert done.stderr == "specscope: interrupted again: stopped at once, without cleaning up\n"
