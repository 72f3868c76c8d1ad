"""The linear cost model: a target forward costs
``c_fixed + c_tok·batched + c_kv·kv + c_req·running + c_multi·[batched > 1]`` seconds.

This is the model the paper fitted on an H100 for Llama-3.1-8B-Instruct (preset
``h100-llama3.1-8b``; it has neither of the last two terms), and the one ``specscope costmodel
fit`` fits to measured step records, where they can show up: ``c_req``, a cost per sequence
(cache indexing, masks, per-row bookkeeping of a small engine); ``c_multi``, a fixed cost of a
forward of more than one token in all — on a CPU the matmuls switch from matrix-vector to
matrix-matrix kernels there (the bundled target, one sequence with 100 cached tokens: 1 token
2.97 ms, 2 tokens 3.25, 4 tokens 3.63, 8 tokens 3.65). A calibration to a served engine may add
``c_batch·[running > 1]``, a fixed cost of a forward over more than one sequence: on ``specscope
serve`` a batch-1 step verifying five tokens took no longer than one verifying one, while going from
one sequence to four cost more per sequence than from four to eight (chunk gaps of 1.79, 3.13 and
3.89 ms at B = 1, 4, 8 without SD); without it the batch-1 cells' speedups came out 3–5 % low on
average in four sweeps, with it 1–4 % (2026-12-02).

A prefill — a forward over whole prompts, with an empty cache — costs
``c_prompt_fixed + c_prompt·positions + c_prompt_kv·pairs + c_req·prompts + c_multi·[positions > 1]``
(``pairs``: the query–key pairs its attention computes among the prompts' own positions, Σ over
prompts of their length², each padded to the longest on an engine that pads — a cost that grows
with the square of a prompt, which a price per position cannot follow: on ``specscope serve`` with
prompts of 50–520 tokens its batch-8 prefills took 1.5× a fit without it, 2026-12-04; 0 in the
paper's fit, whose prompts were short beside its model): the same forward
with its own fixed cost and cost per position where a fit measured them (``c_prompt_fixed``, else
``c_fixed``; ``c_prompt``, else ``c_tok``, as in the paper's fit). On ``specscope serve`` a prefill of
one prompt alone took 6.8 ms + 0.061 ms a position in the server's own step records, where a decode
forward's fixed cost was fitted at 3.1–3.5 ms (2026-12-04); a calibration that priced a prefill's
fixed cost as ``c_fixed`` (and a request's first chunk from an idle engine as a decode forward
plus its prefill) missed by up to 14–17 % on held-out cells of three sweeps, with its own term
by up to 9–13 % (docs/calibration.md). A calibration to a served engine fits it (``costmodel fit --from-sweep``): on
``specscope serve`` a prompt's position cost 0.042–0.052 ms, a verified token 0–0.058 ms (four
sweeps, 2026-12-02: the per-token cost trades with the per-request one).
The phase-by-phase fit to step records (``costmodel fit RECORDS``) keeps one line through
verifications and prefills (``--whole-steps``, the like-for-like comparison for a sweep, fits
``c_prompt`` as a sweep does): fitted apart there (a study's records, 2026-12-02), its trees at batch 8 went from 3.8 % to 9.3 % under their measured
speedups on average and its chains' worst error from 8.9 % to 10.1 %.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from specscope.costmodel.base import Drafting, FractionDrafting, LinearDrafting
from specscope.errors import SpecscopeError
from specscope.fingerprint import file_sha256
from specscope.methods import BENCH_DEFAULT, LEARNED, NAMES as METHOD_NAMES, NO_SD, default_hint
from specscope.trace.fields import Fields
from specscope.trees import parse_tree
from specscope.validate import K_MAX_LIMIT, MAX_BATCH_SIZE, Invalid


@dataclass(frozen=True)
class FittedCell:
    """A measured cell a calibrated model was fitted to (``costmodel fit --from-sweep``): what
    the model has seen; everything else it predicts. ``tree``: a static tree's name, else a
    chain of ``k``."""

    method: str
    k: int
    batch_size: int
    workload: str
    tree: str | None = None

    @classmethod
    def from_json(cls, spec: Fields) -> "FittedCell":
        """A cell as ``describe()`` writes it: a known method (or ``none``), a tree that parses
        (its node count its k), each number within what a sweep measures."""
        spec.only(["method", "k", "batch_size", "workload", "tree"])
        name = spec.text("method")
        if name != NO_SD and name not in METHOD_NAMES:
            raise spec.error(spec.name("method"), f"expected a method ({', '.join((NO_SD, *METHOD_NAMES))}), got {name!r}")
        tree = spec.text("tree", optional=True)
        if tree is not None:
            try:
                nodes = parse_tree(tree).nodes
            except (Invalid, SpecscopeError) as error:
                raise spec.error(spec.name("tree"), str(error)) from None
        if name == NO_SD and tree is not None:
            raise spec.error(spec.name("tree"), "expected none on a cell without SD (method none)")
        k = spec.integer("k", minimum=0 if name == NO_SD else 1, maximum=0 if name == NO_SD else
                         K_MAX_LIMIT if tree is None else nodes)  # none proposes 0; an SD cell at least 1
        return cls(name, k, spec.integer("batch_size", minimum=1, maximum=MAX_BATCH_SIZE), spec.text("workload"), tree)


@dataclass(frozen=True)
class FittedSweep:
    """The sweep a calibrated model was fitted to, as a result names its input: its folder
    (absolute) and the SHA-256 of its ``results.json`` (None: it had none, and every record in its
    ``cells/`` was fitted)."""

    folder: str
    results_sha256: str | None

    @classmethod
    def from_json(cls, spec: Fields) -> "FittedSweep":
        """The ``sweep`` object as ``describe()`` writes it."""
        spec.only(["folder", "results_sha256"])
        return cls(spec.text("folder"), _sha256(spec, "results_sha256"))

    def describe(self) -> str:
        """``/runs/calib (results.json SHA-256 0123456789ab)``: how a report names it."""
        return f"{self.folder} " + (f"(results.json SHA-256 {self.results_sha256[:12]})" if self.results_sha256
                                    else "(no results.json: every cell record fitted)")


@dataclass(frozen=True)
class FittedRecords:
    """A file of step records a model was fitted to (``costmodel fit RECORDS``, a study's fit), as
    the sweep of a calibrated one (:class:`FittedSweep`): its path (absolute) and the SHA-256 of
    its content when fitted (None: not a regular file)."""

    file: str
    sha256: str | None

    @classmethod
    def of(cls, path: str | Path) -> "FittedRecords":
        """``path`` as it is now (a regular file by its resolved path; a pipe or device as named, such
        as /dev/stdin, not the /proc name it resolves to)."""
        path = Path(path)
        return cls(str(path.resolve() if path.is_file() else path.absolute()), file_sha256(path))

    @classmethod
    def from_json(cls, spec: Fields) -> "FittedRecords":
        """One of the ``step_records`` as ``describe()`` writes them."""
        spec.only(["file", "sha256"])
        return cls(spec.text("file"), _sha256(spec, "sha256"))


def _sha256(spec: Fields, name: str) -> str | None:
    """The optional field ``name``: a SHA-256 (64 hex digits), or null."""
    digest = spec.text(name, optional=True)
    if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise spec.error(spec.name(name), f"expected a SHA-256 (64 hex digits) or null, got {digest!r}")
    return digest


@dataclass
class LinearCostModel:
    """Target forward time linear in batched tokens, cached tokens and running sequences, plus
    drafting models."""

    name: str
    c_fixed: float  # seconds per forward
    c_tok: float  # seconds per batched (new) token
    c_kv: float  # seconds per token in the KV cache
    overhead_s: float  # engine overhead per step
    drafting: dict[str, Drafting] = field(default_factory=dict)
    pads_verification: bool = False  # verify num_running × max(k+1) tokens (see costmodel.base)
    c_req: float = 0.0  # seconds per running sequence
    c_multi: float = 0.0  # seconds added to a forward of more than one token in all
    fitted_cells: tuple[FittedCell, ...] = ()  # a calibrated model: the sweep cells it was fitted to
    admit_s: float = 0.0  # seconds a request's arrival holds up an idle engine (costmodel.base)
    not_separated: tuple[str, ...] = ()  # a fitted model: terms its data could not tell apart (their split arbitrary)
    measured: tuple[int, int] | None = None  # a model fitted to step records: the largest k and batch size they held
    c_prompt: float | None = None  # seconds per position of a prefill forward (None: c_tok)
    c_prompt_fixed: float | None = None  # seconds per prefill forward beside its positions (None: c_fixed)
    c_batch: float = 0.0  # seconds added to a forward over more than one sequence
    c_prompt_kv: float = 0.0  # seconds per query–key pair of a prefill's attention among its prompts' positions
    made_by: str = ""  # a fitted model: the code that fitted it (specscope.version.code_version)
    engine: str = ""  # a sweep's model: the sweep's name for the engine it was fitted to ("": unsaid)
    sweep: FittedSweep | None = None  # ... and the sweep itself (None: unsaid)
    step_records: tuple[FittedRecords, ...] = ()  # a model fitted to step records: their files (empty: unsaid)

    def forward_time(self, batched_tokens: np.ndarray, kv_tokens: np.ndarray,
                     num_running: np.ndarray) -> np.ndarray:
        batched, running = np.asarray(batched_tokens), np.asarray(num_running)
        return (self.c_fixed + self.c_tok * batched + self.c_kv * np.asarray(kv_tokens)
                + self.c_req * running + self.c_multi * (batched > 1) + self.c_batch * (running > 1))

    @property
    def prompt_price(self) -> float:
        """Seconds per position of a prefill: ``c_prompt``, or ``c_tok`` where none was fitted."""
        return self.c_tok if self.c_prompt is None else self.c_prompt

    @property
    def prompt_fixed(self) -> float:
        """Seconds of a prefill forward beside its positions: ``c_prompt_fixed``, or ``c_fixed`` where
        none was fitted."""
        return self.c_fixed if self.c_prompt_fixed is None else self.c_prompt_fixed

    def prefill_forward_time(self, prompt_tokens: np.ndarray, num_prompts: np.ndarray,
                             prompt_pairs: np.ndarray | float = 0.0) -> np.ndarray:
        positions, prompts = np.asarray(prompt_tokens), np.asarray(num_prompts)
        return (self.prompt_fixed + self.prompt_price * positions + self.c_prompt_kv * np.asarray(prompt_pairs)
                + self.c_req * prompts + self.c_multi * (positions > 1) + self.c_batch * (prompts > 1))

    def drafting_for(self, proposer: str) -> Drafting:
        return drafting_lookup(self.name, self.drafting, proposer)

    def scaled(self, factor: float) -> "LinearCostModel":
        """Every time coefficient multiplied by ``factor`` (fractions stay fractions)."""
        drafting = {name: _times(d, factor) if isinstance(d, LinearDrafting) else d
                    for name, d in self.drafting.items()}
        return replace(_times(self, factor), drafting=drafting)

    def describe(self) -> dict:
        return {
            "kind": "linear",
            "name": self.name,
            "forward": {"c_fixed": self.c_fixed, "c_tok": self.c_tok, "c_kv": self.c_kv, "c_req": self.c_req,
                        "c_multi": self.c_multi, **({} if self.c_prompt is None else {"c_prompt": self.c_prompt}),
                        **({} if self.c_prompt_fixed is None else {"c_prompt_fixed": self.c_prompt_fixed}),
                        **({"c_batch": self.c_batch} if self.c_batch else {}),
                        **({"c_prompt_kv": self.c_prompt_kv} if self.c_prompt_kv else {})},
            "overhead_s": self.overhead_s,
            **({"admit_s": self.admit_s} if self.admit_s else {}),
            "pads_verification": self.pads_verification,
            "drafting": {name: d.to_json() for name, d in self.drafting.items()},
            **({"fitted_cells": [asdict(c) for c in self.fitted_cells]} if self.fitted_cells else {}),
            **({"not_separated": list(self.not_separated)} if self.not_separated else {}),
            **({"measured": {"k": self.measured[0], "batch_size": self.measured[1]}} if self.measured else {}),
            **({"made_by": self.made_by} if self.made_by else {}),
            **({"engine": self.engine} if self.engine else {}),
            **({"sweep": asdict(self.sweep)} if self.sweep else {}),
            **({"step_records": [asdict(r) for r in self.step_records]} if self.step_records else {}),
        }

    def beyond_measured(self, ks: Sequence[int], batch_sizes: Sequence[int], methods: Sequence[str] = ()) -> str | None:
        """A note where ``ks`` or ``batch_sizes`` reach past what a fitted model measured: there it
        extrapolates a line. A sweep's model (``fitted_cells``) judges each of ``methods`` by its
        own chain cells (a tree's nodes are no chain's k), below the least k and batch size it
        measured too; a step-record fit (``measured``) by the largest k and batch size of its
        steps. Either says which of its terms (of ``methods``, or the forward's) its data could
        not tell apart: any k or batch size but those measured is priced on an arbitrary split."""
        untold = [t for t in self.not_separated if "." not in t or not methods or t.split(".")[0] in methods]
        split = (f"its data could not tell {', '.join(untold)} apart, so a k or batch size it did not hold is priced "
                 "on an arbitrary split of their cost") if untold else ""
        if self.fitted_cells:
            past = []
            fitted = sorted({c.method for c in self.fitted_cells} - {NO_SD})
            for method in [m for m in methods if m in fitted] if methods else fitted:
                mine = [c for c in self.fitted_cells if c.method == method]
                chains = sorted({c.k for c in mine if c.tree is None})
                sizes = sorted({c.batch_size for c in mine})
                beyond = [f"k {_span(ks)} (chains fitted at k {', '.join(map(str, chains))})"
                          if chains and ks and (min(ks) < min(chains) or max(ks) > max(chains)) else "",
                          f"batch sizes {_span(batch_sizes)} (fitted at {', '.join(map(str, sizes))})"
                          if batch_sizes and (min(batch_sizes) < min(sizes) or max(batch_sizes) > max(sizes)) else ""]
                if any(beyond):
                    past.append(f"{method} at {' and '.join(b for b in beyond if b)}")
            said = [f"{'; '.join(past)}: there it extrapolates its lines"] if past else []
            said += [split] if split else []
            return f"cost model {self.name!r} was fitted to a sweep's cells; " + "; ".join(said) if said else None
        if self.measured is None:
            return None
        seen = self.measured
        past = []
        if ks and max(ks) > seen[0]:
            past.append(f"k up to {max(ks)}")
        if batch_sizes and max(batch_sizes) > seen[1]:
            past.append(f"batch sizes up to {max(batch_sizes)}")
        said = [f"{' and '.join(past)} extrapolate its lines"] if past else []
        said += [split] if split else []
        return (f"cost model {self.name!r} was fitted to steps of k <= {seen[0]} and batch size <= {seen[1]}; "
                + "; ".join(said)) if said else None

    def trees_from_chains(self, methods: Sequence[str]) -> str | None:
        """A note naming the methods among ``methods`` (simulated drafting a tree) whose trees a
        fitted model prices from their chains' lines, a tree step's own cost (``c_tree``) taken as
        0: a sweep's model (``fitted_cells``) that fitted no tree cell of theirs (the README's
        what-if priced 3x2x1x1 −17 … +19 % off what it measured so, docs/calibration.md), or any
        other model whose linear ``c_tree`` for them is 0: a step-record fit (``measured``) whose
        records held no tree step, or none that cost more than its passes, and a preset or file
        fitted elsewhere (the paper's, fitted to vLLM's chains)."""
        if self.fitted_cells:
            fitted = {c.method for c in self.fitted_cells}
            alone = [m for m in dict.fromkeys(methods)
                     if m in fitted and not any(c.tree and c.method == m for c in self.fitted_cells)]
            return (f"cost model {self.name!r} fitted no tree cell of {', '.join(alone)}: their trees are priced "
                    "from their chains alone, a tree step's own cost (c_tree) taken as 0") if alone else None
        alone = [m for m in dict.fromkeys(methods)
                 if isinstance(self.drafting.get(m), LinearDrafting) and not self.drafting[m].c_tree]
        why = ": its step records held none, or none that cost more" if self.measured is not None else ""
        return (f"cost model {self.name!r} prices no tree step of {', '.join(alone)} beyond its passes (c_tree "
                f"0{why}): their trees are priced from chains alone") if alone else None


def _span(values: Sequence[int]) -> str:
    """``1-8``, or ``4`` where every value is one."""
    return f"{min(values)}-{max(values)}" if min(values) < max(values) else f"{min(values)}"


def _times(model, factor: float):
    """``model`` (a dataclass) with every ``c_*`` coefficient and ``overhead_s`` times ``factor``."""
    return replace(model, **{f.name: getattr(model, f.name) * factor for f in fields(model)
                             if (f.name.startswith("c_") or f.name in ("overhead_s", "admit_s"))
                             and getattr(model, f.name) is not None})


def drafting_lookup(model_name: str, drafting: dict[str, Drafting], proposer: str) -> Drafting:
    """The drafting model for ``proposer``, or a one-line error listing the known ones."""
    try:
        return drafting[proposer]
    except KeyError:
        known = ", ".join(sorted(drafting)) or "none"
        raise SpecscopeError(
            f"cost model {model_name!r} has no drafting model for proposer {proposer!r} (has: {known})"
            f"{default_hint(proposer)}"
        ) from None


PROVENANCE = ("made_by", "engine", "sweep", "step_records")  # describe()'s fields: what fitted a model, not its prices
FORWARD_TERMS = ("c_fixed", "c_tok", "c_kv", "c_req", "c_multi")  # c_req and c_multi may be left out
TARGET_TERMS = (*FORWARD_TERMS, "c_prompt", "c_batch", "admit_s", "c_prompt_fixed", "c_prompt_kv")  # every target term a fit names
LINEAR_DRAFTING_TERMS = ("c_fixed", "c_tok", "c_kv", "c_req", "c_prefill", "c_multi", "c_tree", "c_batched",
                         "c_confidence")  # the first 3 required


PER_PROPOSAL = {"c_fixed": ("c_tok", True), "c_req": ("c_batched", False)}  # may be below 0, down to −slope
MAX_COEFFICIENT_S = 3600.0  # an hour for one token, row or step: beyond it a typo, and sums overflow to inf
MIN_FORWARD_S = 1e-12  # a one-token forward faster than a picosecond is a typo (1e-320 made every throughput inf)


def _coefficients(spec: Fields, required: Sequence[str], optional: Sequence[str]) -> dict[str, float]:
    """Seconds coefficients: finite, >= 0 and at most :data:`MAX_COEFFICIENT_S` (``optional`` ones
    default to 0)."""
    return {**{name: spec.number(name, low=0.0, high=MAX_COEFFICIENT_S) for name in required},
            **{name: spec.number(name, default=0.0, low=0.0, high=MAX_COEFFICIENT_S) for name in optional}}


def drafting_from_json(spec: Fields) -> Drafting:
    """Parse ``{"kind": "fraction", "ratio": r}`` or ``{"kind": "linear", "c_fixed", ...}``."""
    kind = spec.get("kind")
    if kind == "fraction":
        spec.only(["kind", "ratio"])
        return FractionDrafting(spec.number("ratio", low=0.0, high=MAX_COEFFICIENT_S))
    if kind == "linear":
        spec.only(["kind", *LINEAR_DRAFTING_TERMS])
        terms = _coefficients(spec, ["c_tok", "c_kv"], ["c_prefill", "c_multi", "c_tree", "c_batched", "c_confidence"])
        for name, (slope, required) in PER_PROPOSAL.items():  # at least 0 at k = 0: >= −slope
            try:
                terms[name] = spec.number(name, default=None if required else 0.0, low=-terms[slope],
                                          high=MAX_COEFFICIENT_S)
            except SpecscopeError as error:
                raise SpecscopeError(f"{error} (−{slope}: a drafting proposing nothing costs at least 0)") from None
        return LinearDrafting(**terms)
    raise spec.error(spec.name("kind"), f"expected 'fraction' or 'linear', got {kind!r}")


def linear_from_json(obj: object, label: str) -> LinearCostModel:
    """Parse the ``describe()`` form of a linear cost model (a JSON or TOML file named
    ``label``, also its name when it has none): every field known, every coefficient finite
    and >= 0 (a drafting's ``c_fixed`` and ``c_req`` down to −``c_tok`` and −``c_batched``), no
    forward free (c_fixed + c_tok + c_req >= :data:`MIN_FORWARD_S`: a forward of one token over an
    empty cache takes some time; so does a prefill of a one-token prompt, priced by
    ``c_prompt_fixed`` and ``c_prompt`` where given)."""
    spec = Fields(obj, label)
    spec.only(["kind", "name", "forward", "overhead_s", "admit_s", "pads_verification", "drafting", "fitted_cells",
               "not_separated", "measured", *PROVENANCE])
    forward = spec.child("forward")
    forward.only([*FORWARD_TERMS, "c_prompt", "c_prompt_fixed", "c_batch", "c_prompt_kv"])
    terms = _coefficients(forward, FORWARD_TERMS[:3], [*FORWARD_TERMS[3:], "c_batch", "c_prompt_kv"])
    c_prompt, c_prompt_fixed = (forward.number(name, low=0.0, high=MAX_COEFFICIENT_S) if name in forward.obj else None
                                for name in ("c_prompt", "c_prompt_fixed"))
    if terms["c_fixed"] + terms["c_tok"] + terms.get("c_req", 0.0) < MIN_FORWARD_S:
        raise spec.error("forward", f"c_fixed, c_tok and c_req sum below {MIN_FORWARD_S:g} s (a one-token forward "
                                    "over an empty cache would take no time)")
    prefill = [terms["c_fixed"] if c_prompt_fixed is None else c_prompt_fixed,
               terms["c_tok"] if c_prompt is None else c_prompt, terms.get("c_req", 0.0)]
    if sum(prefill) < MIN_FORWARD_S:
        raise spec.error("forward", "c_prompt_fixed, c_prompt and c_req price a prefill at 0 (a one-token prompt "
                                    "would take no time; leave c_prompt_fixed and c_prompt out to price prefills "
                                    "as c_fixed and c_tok)")
    drafting = spec.child("drafting", optional=True)
    model = LinearCostModel(
        name=spec.text("name", optional=True) or label,
        overhead_s=spec.number("overhead_s", default=0.0, low=0.0, high=MAX_COEFFICIENT_S),
        admit_s=spec.number("admit_s", default=0.0, low=0.0, high=MAX_COEFFICIENT_S),
        drafting={} if drafting is None else {name: drafting_from_json(drafting.child(name))
                                              for name in _drafter_names(drafting)},
        pads_verification=spec.boolean("pads_verification", False),
        fitted_cells=tuple(FittedCell.from_json(Fields(cell, label, prefix=f"fitted_cells[{i}]"))
                           for i, cell in enumerate(_list(spec, "fitted_cells"))),
        not_separated=tuple(_names(spec, "not_separated")),
        measured=_measured(spec),
        c_prompt=c_prompt,
        c_prompt_fixed=c_prompt_fixed,
        made_by=spec.text("made_by", optional=True) or "",
        engine=spec.text("engine", optional=True) or "",
        sweep=None if (sweep := spec.child("sweep", optional=True)) is None else FittedSweep.from_json(sweep),
        step_records=tuple(FittedRecords.from_json(Fields(item, label, prefix=f"step_records[{i}]"))
                           for i, item in enumerate(_list(spec, "step_records"))),
        **terms,
    )
    _check_fitted(spec, model)
    return model


def _check_fitted(spec: Fields, model: LinearCostModel) -> None:
    """What a fitted model says of its fit agrees with itself: fitted to step records
    (``measured``) or to a sweep's cells (``fitted_cells``), not both; the sweep's ``engine`` and
    ``sweep`` only beside its cells, the records' files (``step_records``) only beside
    ``measured``; each fitted SD cell's method priced by its ``drafting``; each term
    ``not_separated`` one it has (a forward term, or a drafter's as ``METHOD.TERM``)."""
    if model.measured is not None and model.fitted_cells:
        raise spec.error("measured", "expected a model fitted to step records (measured) or to a sweep's cells "
                                     "(fitted_cells), not both")
    for name in ("engine", "sweep"):
        if spec.has(name) and not model.fitted_cells:
            raise spec.error(name, "expected only beside fitted_cells (the sweep's engine and folder a model was "
                                   "fitted to)")
    if spec.has("step_records") and model.measured is None:
        raise spec.error("step_records", "expected only beside measured (the files of the step records a model was "
                                         "fitted to)")
    for i, cell in enumerate(model.fitted_cells):
        if cell.method != NO_SD and cell.method not in model.drafting:
            raise spec.error(f"fitted_cells[{i}].method", f"{cell.method!r} has no drafting entry: the model prices "
                                                          "no cell of it, so it was fitted to none")
    drafter_terms = {f.name for f in fields(LinearDrafting)}
    for name in model.not_separated:
        method, _, term = name.rpartition(".")
        if (not method and term not in TARGET_TERMS) or \
                (method and (method not in model.drafting or term not in drafter_terms)):
            raise spec.error("not_separated", f"{name!r} is no term of this model (expected a forward term such as "
                                              "c_fixed, or a drafting's as METHOD.TERM, e.g. eagle.c_fixed)")


def _measured(spec: Fields) -> tuple[int, int] | None:
    """The optional ``measured`` object: the largest k and batch size of the steps fitted."""
    measured = spec.child("measured", optional=True)
    if measured is None:
        return None
    measured.only(["k", "batch_size"])
    return measured.integer("k", maximum=K_MAX_LIMIT), measured.integer("batch_size", minimum=1, maximum=MAX_BATCH_SIZE)


def _names(spec: Fields, name: str) -> list[str]:
    """The optional JSON list of strings ``name``."""
    values = _list(spec, name)
    if not all(isinstance(v, str) for v in values):
        raise spec.error(spec.name(name), "expected a list of term names")
    return values


def _list(spec: Fields, name: str) -> list:
    """The optional JSON list ``name`` (empty when absent)."""
    value = spec.obj.get(name, [])
    if not isinstance(value, list):
        raise spec.error(spec.name(name), f"expected a list, got {type(value).__name__}")
    return value


# The paper's constants (shared/paper/README.md): Llama-3.1-8B-Instruct on an H100, seconds.
PAPER_NGRAM = FractionDrafting(0.005875)
_PAPER_EAGLE = LinearDrafting(c_fixed=2.13526175e-03, c_tok=8.41429603e-07, c_kv=2.37768493e-09)

H100_LLAMA31_8B = LinearCostModel(
    name="h100-llama3.1-8b",
    c_fixed=5.88590713e-03,
    c_tok=2.10103129e-05,
    c_kv=3.92645679e-08,
    overhead_s=1.20683946e-03,
    drafting={"ngram": PAPER_NGRAM, "eagle": _PAPER_EAGLE, "eagle3": _PAPER_EAGLE},
)


def _drafter_names(drafting: Fields) -> list[str]:
    """The drafting entries' names, each a method's, ``learned`` (a policy's own work) or ``default``
    (the proposer of a SpecDecode-Bench file's single ``acc`` field); a misspelt one (``eagel``)
    would leave its method unpriced, the file's own name then blamed."""
    for name in drafting.obj:
        if name not in (LEARNED, BENCH_DEFAULT) and name not in METHOD_NAMES:
            raise drafting.error(drafting.name(name), f"unknown proposer (expected one of {', '.join(METHOD_NAMES)}, "
                                                      f"{LEARNED} or {BENCH_DEFAULT})")
    return list(drafting.obj)
