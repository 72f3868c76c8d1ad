"""`specscope paper`: reproduce the paper's Figures 10 and 12 from its public traces.

Looks for the traces in ``--traces-dir``, else ``$SPECSCOPE_PAPER_DIR``; simulates every
dataset × {ngram, eagle, combined} × policy × batch size in paper mode with the paper's H100
cost model, and, when the folder holds ``figures_gsm8k_sharegpt.csv`` (speedups read off the
paper's figures), prints each cell beside the paper's value.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from specscope.cli._common import add_table_output, human_stream, note_mismatches, print_table, refuse_clashes, write_rows
from specscope.errors import SpecscopeError
from specscope.fingerprint import provenance
from specscope.reading import first_line

if TYPE_CHECKING:
    from specscope.sim.grid import SimRow
    from specscope.trace.schema import TraceRecord

ENV = "SPECSCOPE_PAPER_DIR"
REFERENCE = "figures_gsm8k_sharegpt.csv"
WHERE = ("get them from the SpecDecode-Bench organisation's `simulator` repository, "
         "data/llama3.1-8B/combined_{gsm8k,sharegpt,instructcoder,cnn}.jsonl")
POLICIES = ["fixed:1", "fixed:3", "fixed:5", "oracle", "oracle-combined:ngram+eagle"]
REPLAYED = ("ngram", "eagle", "combined")  # the proposers of the paper's figures, and their oracle-combined
PAPER_DATASETS = ("gsm8k", "sharegpt", "cnn", "instructcoder")  # the datasets of the paper's figures
PAPER_REQUESTS = 300  # the requests the paper's simulator drew from each dataset
PAPER_MODEL = ("llama3.1-8b_", "combined_")  # the paper's Llama-3.1-8B traces: this folder's names, and upstream's


def paper_dataset(dataset: str) -> str | None:
    """The paper's dataset a trace's dataset name stands for (``gsm8k`` for ``llama3.1-8b_gsm8k``,
    ``combined_gsm8k`` or ``gsm8k``); ``None`` for any other name — another model's traces are not
    the figures' (its own name, not a part of it, decides)."""
    name = dataset.lower()
    for prefix in ("", *PAPER_MODEL):
        if name.startswith(prefix) and name[len(prefix):] in PAPER_DATASETS:
            return name[len(prefix):]
    return None


def _refuse_broken(path: Path) -> None:
    """A ``*.jsonl`` beside the traces whose first line is no JSON at all is a broken file, not
    another kind of file (a workload, notes): refused at that line rather than left out (a folder
    or an unreadable file is left out)."""
    try:
        first = first_line(path)
    except OSError:  # a folder, an unreadable file: no trace file, left out
        return
    if first is not None:
        try:
            json.loads(first[1])
        except (ValueError, RecursionError):
            raise SpecscopeError(f"{path}:{first[0]}: not JSON (records are JSON objects, one a line)") from None


def _foreign_files(files: list[Path], records: list, reports: list) -> dict[str, str]:
    """Dataset → the name of a file holding some of its records whose own name is not the paper's
    (``qwen3-8b_gsm8k.jsonl`` holding records of dataset ``gsm8k``): another model's traces, not
    the figures', whatever their records call their dataset. ``records`` are in file order,
    ``reports[i].records`` of them from ``files[i]``."""
    foreign, start = {}, 0
    for path, report in zip(files, reports):
        if paper_dataset(path.stem) is None:
            for record in records[start:start + report.records]:
                if paper_dataset(record.dataset) is not None:  # its records claim a paper dataset
                    foreign.setdefault(record.dataset, path.name)
        start += report.records
    return foreign


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("paper", help="reproduce the paper's Figures 10 and 12 from its traces",
                                   description="Replay the paper's traces in paper mode under its fitted cost model "
                                               "and set every cell beside the value read off the paper's figures "
                                               "(figures_gsm8k_sharegpt.csv in the traces' folder, when there).")
    parser.add_argument("--traces-dir", default=os.environ.get(ENV),
                        help=f"folder with the paper's *.jsonl traces (default: ${ENV})")
    add_table_output(parser, "every cell (with the paper's value)")
    parser.set_defaults(run=run)


def read_reference(path: Path, batch_sizes: Sequence[int]) -> dict[tuple[str, str, str, int], float]:
    """Speedups read off the paper's figures: (acc, dataset, policy, batch size) -> speedup; each
    cell once (a row given twice would let the last one win unsaid). Every row names a cell this
    command simulates — acc ngram, eagle or combined (combined's policy: oracle), policy fixed1,
    fixed3, fixed5 or oracle, one of the paper's datasets — and every column is one of them or a
    batch size it simulates (``bsN``), each a positive number: a row or column it could not match
    would be left out of the comparison unsaid, or compared with another cell."""
    policies = {p.replace(":", ""): p for p in POLICIES if not p.startswith("oracle-combined")}  # fixed1 → fixed:1
    cells, first, line = {}, {}, 1
    try:
        with path.open(encoding="utf-8-sig") as handle:  # a spreadsheet's byte-order mark, as traces allow
            kept = [(number, text) for number, text in enumerate(handle, start=1) if not text.startswith("#")]
        rows = csv.DictReader(text for _, text in kept)
        columns = [c for c in rows.fieldnames or [] if c not in ("acc", "dataset", "policy")]
        for column in columns:
            if not (column.startswith("bs") and column[2:].isdigit() and int(column[2:]) in batch_sizes):
                raise SpecscopeError(f"{path}:{kept[0][0] if kept else 1}: column {column!r}: expected acc, dataset, "
                                     f"policy and bsN for N in {', '.join(map(str, batch_sizes))}")
        for row in rows:
            line = kept[rows.line_num - 1][0]  # the file's own line: the comments counted
            if None in row:
                raise ValueError(f"{len(row[None])} cells beyond the header's columns")
            acc, dataset, policy = row["acc"], row["dataset"], row["policy"]
            if acc not in ("ngram", "eagle", "combined"):
                raise ValueError(f"acc {acc!r}: expected ngram, eagle or combined")
            if dataset not in PAPER_DATASETS:
                raise ValueError(f"dataset {dataset!r}: expected one of the paper's, {', '.join(PAPER_DATASETS)}")
            allowed = ("oracle",) if acc == "combined" else tuple(policies)  # the paper's combined is an oracle
            if policy not in allowed:
                raise ValueError(f"policy {policy!r}: expected {', '.join(allowed)} for acc {acc}")
            simulated = "oracle-combined:ngram+eagle" if acc == "combined" else policies[policy]
            for column in columns:
                value = row[column]
                try:
                    speedup = float(value)
                except (TypeError, ValueError):
                    raise ValueError(f"{column} = {value!r}: expected a number") from None
                if not (math.isfinite(speedup) and speedup > 0):
                    raise ValueError(f"{column} = {value}: expected a positive speedup")
                key = (acc, dataset, simulated, int(column[2:]))
                if key in cells:
                    raise SpecscopeError(f"{path}:{line}: {acc} {dataset} {policy} is already on line {first[key]}")
                cells[key], first[key] = speedup, line
    except UnicodeDecodeError as error:  # before ValueError, of which it is one
        raise SpecscopeError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except (KeyError, ValueError, TypeError) as error:
        raise SpecscopeError(f"{path}:{line}: expected columns acc, dataset, policy and bsN numbers ({error})") from None
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot read the paper's figures ({error.strerror})") from None
    if not cells:
        raise SpecscopeError(f"{path}: holds no figures (expected a header acc,dataset,policy,bs1,… and a row per "
                             "acc, dataset and policy; remove the file to simulate without the comparison)")
    return cells


def _length_notes(records: Sequence[TraceRecord], rows: Sequence[SimRow]) -> list[str]:
    """:func:`~specscope.sim.grid.length_notes` of the policies that made rows, over the records of
    the datasets where a policy of several proposers made one (a dataset without n-gram or EAGLE
    makes no oracle-combined cell)."""
    from specscope.sim.grid import SEVERAL, length_notes

    several = {row.dataset for row in rows if row.policy.startswith(SEVERAL)}
    made = {row.policy for row in rows}
    return length_notes([r for r in records if r.dataset in several], [p for p in POLICIES if p in made])


def _unreplayed(records: Sequence[TraceRecord], cost) -> list[str]:
    """A line naming the proposers of ``records`` the paper's figures do not replay (only n-gram
    and EAGLE), and how to replay them: `simulate --acc` with those ``cost`` prices (the others
    named unpriced), and, for each dataset whose records hold no EAGLE, renaming to it the model
    proposer its default pair takes (:func:`~specscope.sim.grid.dataset_pairs`; the datasets named
    unless one name serves them all)."""
    from specscope.analysis.acceptance import proposer_names
    from specscope.costmodel.registry import priced
    from specscope.sim.checks import LOOKUP_PROPOSERS
    from specscope.sim.grid import dataset_pairs

    names = proposer_names(records)
    others = [name for name in names if name not in REPLAYED]
    if not others:
        return []
    replayable, unpriced = priced(cost, others)
    ways = []
    picked: dict[str, list[str]] = {}  # the pair's model proposer → its datasets that hold no EAGLE
    pairs = dataset_pairs(records, cost)
    for dataset, (pair, _) in pairs.items():
        if "eagle" in proposer_names([record for record in records if record.dataset == dataset]):
            continue
        model = next((name for name in pair or () if name in others and name not in LOOKUP_PROPOSERS), None)
        if model:
            picked.setdefault(model, []).append(dataset)
    every = sum(map(len, picked.values())) == len(pairs)  # one proposer renamed in every dataset: none named
    ways += [f"`specscope traces convert --rename {model}=eagle` names it eagle"
             + ("" if every and len(picked) == 1 else f" (dataset{'s' * (len(those) > 1)} {', '.join(those)})")
             for model, those in picked.items()]
    if replayable:
        ways.append(f"`specscope simulate --mode paper --acc ngram,{','.join(replayable)}` replays "
                    f"{'it' if len(replayable) == 1 else 'them'} as traced")
    why = [f"{', '.join(unpriced)} unpriced: the paper's cost model ({cost.name}) prices no drafting of "
           f"{'it' if len(unpriced) == 1 else 'them'}"] if unpriced else []
    return [f"{', '.join(others)} not replayed: the paper's figures replay ngram and eagle alone"
            + (f" ({'; '.join(ways)})" if ways else "") + "".join(f"; {line}" for line in why)]


def run(args: argparse.Namespace) -> int:
    from specscope.costmodel.linear import H100_LLAMA31_8B
    from specscope.sim.grid import OPTIMISTIC, SimConfig, no_match_notes, sample_notes, simulate
    from specscope.trace import load_traces
    from specscope.trace.load import holds_traces
    from specscope.version import code_version

    if not args.traces_dir:
        raise SpecscopeError(f"no paper traces: pass --traces-dir or set ${ENV}; {WHERE}")
    out = human_stream(args.output)
    folder = Path(args.traces_dir)
    if not folder.is_dir():
        raise SpecscopeError(f"{folder}: not a directory (--traces-dir); {WHERE}")
    found = sorted(folder.glob("*.jsonl"))
    # a workload or notes beside the traces are no traces; a file named as one of the paper's is read (its errors said)
    files = [f for f in found if paper_dataset(f.stem) is not None and f.is_file() or holds_traces(f)]
    if not files:
        raise SpecscopeError(f"{folder}: no *.jsonl trace files; {WHERE}")
    for other in sorted(set(found) - set(files)):
        _refuse_broken(other)
        print(f"note: {other.name} left out: its first record is no trace", file=out)
    refuse_clashes({"-o": args.output}, [*files, folder / REFERENCE])
    config = SimConfig(mode="paper", combined=("ngram", "eagle"))
    reference = read_reference(folder / REFERENCE, config.batch_sizes) if (folder / REFERENCE).exists() else {}
    records, reports = load_traces(files, lengths="own")
    note_mismatches(reports, out)
    foreign = _foreign_files(files, records, reports) if reference else {}
    others = [f.name for f in files if paper_dataset(f.stem) is None]
    if others:  # another model's traces, maybe: the paper's fit prices them all the same
        print(f"note: {', '.join(others)}: not named as the paper's traces; every cell here is priced with the "
              f"paper's fit of Llama-3.1-8B on an H100 ({H100_LLAMA31_8B.name}), whatever model traced it "
              "(`specscope simulate --mode paper --cost-model` prices another)", file=out)
    for dataset, name in foreign.items():
        print(f"note: dataset {dataset!r} not compared with the paper's figures: it comes from {name}, not a file "
              f"named as the paper's traces ({' or '.join(p + 'DATASET' for p in PAPER_MODEL)}, or DATASET)", file=out)
    missing: list[str] = []  # a dataset traced without n-gram or EAGLE replays what it holds
    unreplayed = _unreplayed(records, H100_LLAMA31_8B)
    rows = simulate(records, list(REPLAYED), POLICIES, H100_LLAMA31_8B, config, missing=missing)
    if not rows:
        raise SpecscopeError(f"{folder}: no cell to simulate: " + "; ".join([*missing, *unreplayed]))
    for note in [*unreplayed, *sample_notes(records, config, option=False),
                 *no_match_notes(records, ["ngram"], config, option=False), *_length_notes(records, rows), *missing]:
        print(f"note: {note}", file=out)
    table: dict[tuple[str, str, str], list[str]] = {}
    cells, differences, made_by = [], [], code_version()
    drawn = {"seed": config.seed, "traces": "; ".join(map(provenance, files))}  # paper mode's draw of 300: its seed
    for row in rows:
        dataset = None if row.dataset in foreign else paper_dataset(row.dataset)
        paper = None if dataset is None else reference.get((row.acc, dataset, row.policy, row.batch_size))
        cell = f"{row.speedup:.2f}" + (f" ({paper:.2f})" if paper is not None else "")
        table.setdefault((row.dataset, row.acc, row.policy), []).append(cell)
        if paper is not None:
            differences.append(abs(row.speedup - paper))
        cells.append({**row.flat(), "cost_model": H100_LLAMA31_8B.name, "paper_speedup": paper, **drawn,
                      "made_by": made_by})
    batch_sizes = list(config.batch_sizes)
    print_table(
        "speedup over no SD, paper mode, H100 cost model" + (" — ours (paper's figure)" if differences else ""),
        ["dataset", "acc", "policy", *[f"B={b}" for b in batch_sizes]],
        [[*key, *texts] for key, texts in table.items()],
        file=out,
    )
    if differences:
        print(f"largest difference from the paper's figures: {max(differences):.3f} over {len(differences)} cells "
              "(the figures were read by eye to ±0.02)", file=out)
        compared = {d for _, d, _, _ in reference}
        uncompared = sorted({row.dataset for row in rows if row.dataset not in foreign and paper_dataset(row.dataset)
                             and paper_dataset(row.dataset) not in compared})
        if uncompared:
            print(f"note: {', '.join(uncompared)}: not compared, {REFERENCE} holds no figures of "
                  f"{'them' if len(uncompared) > 1 else 'it'}", file=out)
        counts = collections.Counter(r.dataset for r in records)
        for dataset in sorted({row.dataset for row in rows if row.dataset not in foreign and paper_dataset(row.dataset)}):
            if counts[dataset] < PAPER_REQUESTS:
                print(f"note: dataset {dataset!r} holds {counts[dataset]} requests, the paper's figures {PAPER_REQUESTS} "
                      "drawn from its traces: its differences measure the sample as much as the simulator", file=out)
    elif not reference:
        print(f"note: no cell compared with the paper's figures: {folder} holds no {REFERENCE} (the speedups "
              "read off the paper's Figures 10 and 12, one row per acc, dataset, policy and batch size)", file=out)
    elif not foreign:  # else the notes above said why
        print(f"note: no cell compared with {REFERENCE}: it holds the paper's Llama-3.1-8B figures, and no "
              f"dataset here is one of its ({', '.join(sorted({d for _, d, _, _ in reference}))}, as named "
              f"{', '.join(p + 'DATASET' for p in PAPER_MODEL)} or DATASET)", file=out)
    if any(row.policy.startswith("oracle-combined") for row in rows):  # wherever its cells are shown (rule 8)
        print(f"note: {OPTIMISTIC}", file=out)
    if args.output:
        write_rows(args.output, cells)
        print(f"wrote {len(cells)} cell{'s' * (len(cells) != 1)} to {args.output}", file=out)
    return 0
