"""The settings a trace file was collected with, kept beside it so a resume cannot mix runs.

``<output>.settings.json`` (the trace schema itself is unchanged) holds one JSON object:

- ``model`` — the target's directory (absolute) and ``model_files`` its fingerprint;
- ``proposers`` — each ``METHOD`` or ``METHOD=DIR`` with the fingerprint of DIR;
- ``k_max``, ``max_tokens``, ``dtype``, ``dataset``, ``ngram_n`` (shortest and longest n-gram);
- ``workload`` — a SHA-256 of the requests (ids and prompt token ids, in order);
- ``batch_size`` — the requests traced together (a draft's probability moves in its last bits
  with its batch's shapes); a trace from before it was kept resumes, and records it;
- ``trees`` (only when ``--trees`` was given) — the requested tree shapes; ``tree_rank`` is
  recorded to the deepest of them, and ``traces inspect`` replays each;
- ``draft_probs`` (only when a model proposer keeps other than the first
  :data:`~specscope.trace.schema.DRAFT_PROBS`) — the drafts per position whose probability it keeps;
- ``made_by`` — the code versions (:func:`specscope.version.code_version`) that wrote its records,
  in order: a resume by another adds itself (not refused: a commit seldom changes what is traced,
  but the file says which code traced which part, and the resume says so).

A fingerprint is a SHA-256 of ``config.json`` and of the weight files' contents
(:func:`specscope.engine.config.model_fingerprint`): a copied model keeps it, a retrained or
other one does not.

A resume whose settings differ is refused, naming the first differing setting, unless the
caller starts over (``--overwrite``, which empties the old trace only once the new run's first
batch is ready); so is a resume onto a record the settings do not make (another command wrote
into the file: :func:`~specscope.tracing.run.done_ids`). Models are compared by path as well as
fingerprint. A trace file with records but no settings file (written before settings were kept), or with one
that no longer reads as settings, is refused the same way: nothing tells what it was traced
with. A file that holds something else (its first line no trace record, and no settings file
beside it) is never replaced, not even with ``--overwrite``; nor is a file at the settings
file's path that holds no trace settings, unless ``--overwrite`` starts over a trace file that
holds trace records (its settings file damaged).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Sequence

from specscope.errors import SpecscopeError
from specscope.fileio import atomic_write_text
from specscope.reading import read_json_object
from specscope.trace.load import holds_traces
from specscope.trace.schema import DRAFT_PROBS
from specscope.version import code_version

MADE_BY = "made_by"  # the code versions that wrote a trace's records (not a setting a resume must match)
KEPT_SINCE = ("batch_size",)  # settings an older trace did not keep: its resume takes this run's, and records them
UNSET = {"trees": "none", "draft_probs": f"the default ({DRAFT_PROBS}, at most k_max)"}  # a setting kept only when given


def settings_path(output: Path) -> Path:
    """``<output>.settings.json``."""
    return output.with_name(output.name + ".settings.json")


def requests_fingerprint(requests: Sequence) -> str:
    """SHA-256 of the requests' ids and prompt token ids, in order."""
    digest = hashlib.sha256()
    for request in requests:
        digest.update(json.dumps([str(request.id), [int(t) for t in request.prompt_token_ids]]).encode() + b"\n")
    return digest.hexdigest()


def check_resume(output: Path, settings: dict, overwrite: bool, dry_run: bool = False) -> Callable[[], None] | None:
    """Make ``output`` ready to trace into with ``settings``: refuse to resume a trace taken
    with other settings, and record the settings. Nothing is changed when it refuses, or with
    ``dry_run`` (the checks alone). Starting over (``overwrite``, or no trace there yet) returns
    what does it — the old traces removed, the settings recorded — for the caller to run once the
    first new records are ready: a run that fails or is stopped before then (a checkpoint that does
    not load) leaves the old traces and their settings as they were."""
    sidecar = settings_path(output)
    has_records = output.is_file() and _holds_text(output)
    if has_records and not sidecar.is_file() and not holds_traces(output):
        raise SpecscopeError(f"{output}: exists and holds no trace records (nor a settings file "
                             f"{sidecar.name} beside it): specscope replaces only traces; trace into another file")
    if has_records and not sidecar.is_file():  # not a trace this command wrote (or one it cannot vouch for): kept
        raise SpecscopeError(f"{output}: holds traces but no settings file {sidecar.name}: specscope did not trace "
                             "it here (or by a version that kept none), so it neither resumes nor replaces it; "
                             "trace into another file, or delete it yourself")
    if has_records and not overwrite:
        if not _ours(sidecar):
            raise SpecscopeError(f"{sidecar}: holds no trace settings (damaged?): cannot tell what {output.name} was "
                                 "traced with; start over (`trace --overwrite`) or trace into another file")
        old = read_json_object(sidecar, "trace settings (a JSON object)")
        unkept = {key: settings[key] for key in KEPT_SINCE if key in settings and key not in old}
        for key in sorted((set(old) | set(settings)) - {MADE_BY} - set(unkept)):
            if old.get(key) != settings.get(key):
                was, now, where = _differing(old.get(key), settings.get(key))
                shown = [UNSET[key] if value is None and key in UNSET else _show(value) for value in (was, now)]
                raise SpecscopeError(f"{output}: traced with other settings: {key}{where} was {shown[0]}, now "
                                     f"{shown[1]}; start over (`trace --overwrite`, or delete the file) or "
                                     "trace into another file")
        versions, now = old.get(MADE_BY) if isinstance(old.get(MADE_BY), list) else [], code_version()  # []: none kept
        if (now not in versions or unkept) and not dry_run:
            if now not in versions:
                print(f"note: {output}: resumed by {now}; its earlier records by "
                      f"{', '.join(map(str, versions)) or 'a specscope that did not say'}", file=sys.stderr)
            atomic_write_text(sidecar, json.dumps({**old, **unkept, MADE_BY: list(dict.fromkeys([*versions, now]))},
                                                  indent=1) + "\n")
        return None
    if sidecar.exists() and not _ours(sidecar) and not (overwrite and has_records and holds_traces(output)):
        raise SpecscopeError(f"{sidecar}: exists and holds no trace settings: specscope replaces only its own; "
                             "trace into another file")
    if dry_run:
        return None

    def start_over() -> None:
        if output.is_file():
            with open(output, "r+b") as old_traces:  # emptied in place: a symbolic link stays one, and the mode stays
                old_traces.truncate(0)
        atomic_write_text(sidecar, json.dumps({**settings, MADE_BY: [code_version()]}, indent=1) + "\n")

    return start_over


def forget_settings(output: str | Path) -> None:
    """Remove the trace settings beside ``output`` (:func:`kept_settings`) once another command
    has written ``output`` (`traces convert -o`, `workload make -o` the same file): they describe
    records that are gone, and a resume would take them for the new file's."""
    if kept_settings(output) is not None:
        settings_path(Path(output)).unlink()


def _holds_text(path: Path) -> bool:
    """Whether ``path`` holds anything but whitespace, read only as far as the first of it (a
    trace file may run to hundreds of megabytes, and a resume checks it twice)."""
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 16):
            if chunk.strip():
                return True
    return False


def _ours(sidecar: Path) -> bool:
    """Whether ``sidecar`` is a settings file a trace wrote (:func:`_kept`)."""
    return _kept(sidecar) is not None


def _kept(sidecar: Path) -> dict | None:
    """The settings in ``sidecar`` where it is a settings file a trace wrote (a JSON object naming
    the workload's fingerprint and the proposers), else None."""
    try:
        old = read_json_object(sidecar)
    except SpecscopeError:
        return None
    return old if {"workload", "proposers", "k_max"} <= set(old) else None


def kept_settings(output: str | Path) -> dict | None:
    """The trace settings kept beside ``output`` (:func:`_kept`); None where there are none."""
    sidecar = settings_path(Path(output))
    return _kept(sidecar) if sidecar.is_file() else None


def traced_with(output: str | Path) -> str | None:
    """What traced ``output``, in words, from the settings kept beside it (the target's folder,
    the proposers, k_max and max_tokens); None where none are kept (a trace from elsewhere)."""
    settings = kept_settings(output)
    if settings is None:
        return None
    proposers = [str(entry).split(" ")[0] for entry in settings["proposers"]] \
        if isinstance(settings["proposers"], list) else []
    return (f"traced from the model {settings.get('model')} with {', '.join(proposers)} (k_max {settings['k_max']}, "
            f"{settings.get('max_tokens')} tokens)")


def traced_checkpoints(output: Path) -> tuple[str | None, dict[str, str]]:
    """The dataset a trace file's kept settings name, and the fingerprints of what traced it:
    ``model`` (the target) and each model drafter's method (``eagle``: its checkpoint's); (None,
    {}) where no settings are kept beside it (a trace from elsewhere)."""
    settings = kept_settings(output)
    if settings is None:
        return None, {}
    found = {"model": settings["model_files"]} if isinstance(settings.get("model_files"), str) else {}
    for entry in settings["proposers"] if isinstance(settings["proposers"], list) else []:
        method, _, checkpoint = entry.partition("=") if isinstance(entry, str) else ("", "", "")
        if " " in checkpoint:  # METHOD=DIR FINGERPRINT
            found[method] = checkpoint.rsplit(" ", 1)[1]
    dataset = settings.get("dataset")
    return (dataset if isinstance(dataset, str) else None), found


def requested_trees(output: Path) -> list[str]:
    """The tree shapes recorded in ``output``'s settings file ([] when none or no file); one that
    is not a list of trees (:func:`~specscope.trees.parse_tree`) is a one-line error naming it."""
    from specscope.trees import parse_tree
    from specscope.validate import Invalid

    sidecar = settings_path(output)
    if not sidecar.is_file():
        return []
    trees = read_json_object(sidecar, "trace settings (a JSON object)").get("trees") or []
    if not isinstance(trees, list):
        raise SpecscopeError(f"{sidecar}: field 'trees': expected a list of trees, got {trees!r}")
    for i, tree in enumerate(trees):
        try:
            parse_tree(tree if isinstance(tree, str) else repr(tree))
        except Invalid as error:
            raise SpecscopeError(f"{sidecar}: field 'trees[{i}]': {error}") from None
    return trees


def _differing(old: object, new: object) -> tuple[object, object, str]:
    """Where two settings' values differ: two lists of one length by their first differing entry
    (``[2]``: the third; a long list cut to 80 characters showed the same start twice), else whole."""
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        index = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
        return old[index], new[index], f"[{index}]"
    return old, new, ""


def _show(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:76] + "…"
