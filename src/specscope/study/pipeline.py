"""The study's stages in order (see :mod:`specscope.study.run`), then the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text, check_user_output, exclusive
from specscope.reading import read_json_object
from specscope.study.config import BEFORE_KEPT, CONFIDENCE_BEFORE, SECOND_K_BEFORE, StudyConfig
from specscope.version import code_version
from specscope.study.run import (
    check_replays,
    checked_steps,
    fidelity_stage,
    fit_stage,
    measure_stage,
    policy_refit_stage,
    policy_stage,
    policy_work_stage,
    replay_stage,
    steps_files,
    trace_stage,
    workloads_stage,
)


LOCK = ".study.lock"  # held while a study runs into its folder


def run_study(config: StudyConfig, say: Callable[[str], None]) -> None:
    """Run every stage; ``say`` receives one line per finished piece of work. One study at a
    time writes into a folder (a second one would measure beside it, each timed under the other's
    load, and replace its cells)."""
    from specscope.report.build import check_outputs

    out = config.out_dir
    made, locked_before = not out.exists(), (out / LOCK).exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecscopeError(f"{out}: cannot make the study's folder ({error.strerror or error})") from None
    found = set(out.iterdir())  # what was there before this run: a refused run removes only what it made
    with exclusive(out / LOCK, f"{out}: another study is running into this folder (both would measure the same "
                               "cells, each under the other's load); wait for it to end, or study into another "
                               "folder (-o)"):
        try:
            check_resume(config)
            check_outputs(out, [], study=True)  # its report's files: refused now, not after every stage ran
            check_user_output(out / "fidelity.csv", "it would be replaced; remove it first")  # its own table:
            # replaced only as it wrote it (not edited since); a study cannot write it elsewhere
            check_replays(config)  # its replay tables too, replaced or removed
            for folder in (config.measure_dir, config.learned_dir):  # kept runs' step records: before any
                checked_steps(folder)  # work, not after the fit rewrote costmodel.json without them
            config.workloads = workloads_stage(config)
            _record_version(config, say)
            _stages(config, say)
        except SpecscopeError:  # a run refused before its first result leaves nothing behind
            _unmake(config, made, found, locked_before)
            raise


def _unmake(config: StudyConfig, made: bool, found: set[Path], locked_before: bool) -> None:
    """Remove what a refused run made: its lock; and where the folder holds no result yet, the
    folder if it made it (every file in it is this run's: its settings, the workloads' copies,
    empty stage folders), else what it added beside ``found``, the entries there before it (its
    settings, its workloads' folder and empty stage folders, where it made them; a folder refused
    as no study's keeps every file and folder of its own)."""
    out = config.out_dir
    if not produced(config):
        if made:
            shutil.rmtree(out)
            return
        for added in set(out.iterdir()) - found - {out / LOCK}:
            if added.is_dir():
                shutil.rmtree(added)
            else:
                added.unlink()
    if not locked_before:
        (out / LOCK).unlink(missing_ok=True)


def produced(config: StudyConfig) -> list[Path]:
    """What the study in ``config.out_dir`` has produced: every entry but its settings, the
    workloads' copies (they follow the settings) and the lock, a folder only where it holds a file
    (a stage that made its folder and was refused before its first record produced nothing)."""
    out = config.out_dir
    return [p for p in out.iterdir() if p not in (config.settings_path, config.workloads_dir, out / LOCK)
            and (p.is_file() or p.is_dir() and _holds_a_file(p))]


def _holds_a_file(folder: Path) -> bool:
    """Whether ``folder`` or a folder in it holds a file."""
    return any(path.is_file() for path in folder.rglob("*"))


def _record_version(config: StudyConfig, say: Callable[[str], None]) -> None:
    """Add this run's code version to the study's ``made_by`` (in ``study.json``, beside its
    settings, never compared with them); where an earlier run's differs, say that what it finished
    is kept as it made it (a resumed study mixes the work of both; each file that records its maker,
    policy.json, costmodel.json, the report, names its own)."""
    path = config.settings_path
    settings = read_json_object(path, "a study's settings (a JSON object)")
    runs, now = settings.get("made_by", []), code_version()
    if not isinstance(runs, list) or any(not isinstance(run, str) for run in runs):
        raise SpecscopeError(f"{path}: field 'made_by': expected a list of code versions, got {runs!r:.60}")
    if runs and runs[-1] != now:
        say(f"note    this study was begun by {runs[0]}" + (f" and resumed by {', '.join(runs[1:])}" if runs[1:] else "")
            + f": what those runs finished is kept as they made it; this run is {now}")
    if not runs or runs[-1] != now:
        atomic_write_text(path, json.dumps({**settings, "made_by": [*runs, now]}, indent=1) + "\n")


def _stages(config: StudyConfig, say: Callable[[str], None]) -> None:
    traces = trace_stage(config, say)
    measured = measure_stage(config, say)
    fitted = fit_stage(config, say)  # the chains' and trees' steps: no price yet for the policy's own work
    learned = policy_stage(config, traces, measured, fitted, say)
    cost = policy_work_stage(config, fitted, say)
    if policy_refit_stage(config, traces, cost, say):  # its choices weigh its own work now: measured again
        learned = policy_stage(config, traces, measured, cost, say)
        cost = policy_work_stage(config, fitted, say)  # the work of the policy measured now, or none
    fidelity = fidelity_stage(config, traces, measured + learned, cost, say)
    replay_stage(config, traces, say)
    from specscope.study.report import study_report

    index = study_report(config, traces, fidelity, steps_files(config))
    say(f"report  {index}")


def check_resume(config: StudyConfig) -> None:
    """Make the output folder ready, or refuse before any work: a folder that holds a study with
    other settings (its ``study.json``: batch sizes, k, workloads, …) would mix their results; a
    folder that holds other files but no ``study.json`` is not a study's, and its files would be
    overwritten; one that holds only its settings (a study refused before its first result) takes
    the new ones. Then record the settings, so that an interrupted study resumes."""
    out, path = config.out_dir, config.settings_path
    settings = json.loads(json.dumps(config.settings()))  # as read back: lists, not tuples
    if path.is_file():
        old = read_json_object(path, "a study's settings (a JSON object)")
        if old.get("schema") != settings["schema"]:
            raise SpecscopeError(f"{path}: holds no study's settings (its schema: {old.get('schema')!r}, expected "
                                 f"{settings['schema']!r}): not a study folder specscope made; choose another -o")
        before_kept = {**BEFORE_KEPT, "second_k": SECOND_K_BEFORE, "confidence_p": CONFIDENCE_BEFORE}
        ran = {**before_kept, **old}  # as a study of before they were kept ran
        changed = [f"{key} {ran[key]} → {settings[key]}" for key in settings
                   if key in ran and ran[key] != settings[key]]  # a key it lacks (a study of before that setting was
        # kept, such as the workloads' digests) is written below, not compared
        if changed and produced(config):  # settings alone (its first stage refused): nothing to mix
            began = [f"--{key.replace('_', '-')} 0" for key in ("second_k", "confidence_p")  # a study of before the
                     if key not in old and settings[key] != before_kept[key]]  # option measured none
            before = f"; or resume it as it began, with {' '.join(began)}" if began else ""
            raise SpecscopeError(f"{out}: holds a study with other settings ({'; '.join(changed)}): resuming would mix "
                                 f"their results; study into another folder (-o), or delete this one to start over{before}")
        if not changed and settings.keys() <= old.keys():
            return  # (a study.json of before a setting was kept gets it written below)
    elif out.is_dir() and any(p.name != LOCK for p in out.iterdir()):
        raise SpecscopeError(f"{out}: not empty and holds no study.json (not a study folder made by specscope, or one "
                             "from before it kept its settings): its files would be overwritten; choose another -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecscopeError(f"{out}: cannot make the study's folder ({error.strerror or error})") from None
    atomic_write_text(path, json.dumps(settings, indent=1) + "\n")
