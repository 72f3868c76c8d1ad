"""The ``specscope sweep`` configuration file (TOML) and the cells it expands to.

Example::

    output = "runs/llama8b"            # relative paths are relative to this file
    workloads = ["prompts.jsonl"]      # JSON Lines of {"id", "prompt" | "prompt_token_ids"}
    methods = ["none", "ngram", "eagle3"]
    k = [1, 3, 5]
    trees = ["2x2x1", "4x1x1"]         # token trees, beside k (by the methods that draft them)
    batch_sizes = [1, 8, 32]
    max_tokens = 128
    ignore_eos = true
    num_requests = 64                  # default: each workload's length
    baselines = "paired"               # default "shared"; or "interleaved"/"interleaved-all", with segments (see below)
    temperature = 0.0                  # these: as `specscope bench`'s options (its --help gives the defaults)
    prompt_lookup_min = 3              # n-gram's shortest and longest match
    prompt_lookup_max = 7
    mtp_method = "mtp"                 # vLLM's MTP method name, for a launched vLLM's mtp cells
    request_timeout_s = 600            # seconds per request, seconds without a byte, seconds for a
    idle_timeout_s = 60                # launched server to become healthy
    launch_timeout_s = 900

    [[engines]]
    name = "vllm"
    launch = "vllm"                    # vllm | sglang | specscope
    model = "meta-llama/Llama-3.1-8B-Instruct"  # a hub name, or a directory (relative to this file)
    drafts = { eagle3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" }
    args = ["--gpu-memory-utilization", "0.9"]
    port = 8100                        # default: a free port per server (launched engines only)
    resources = { "H100" = 1 }         # with --ray: Ray resources its server needs (GPU: its TP size)

    [[engines]]                        # servers already running: one engine, a server per configuration
    name = "external"                  # url engines may share a name (one method and k each): the SD
    url = "http://127.0.0.1:8000"      # cells then take the none server's cells as their baselines,
    method = "none"                    # and `costmodel fit --from-sweep --engine external` fits them all
    [[engines]]
    name = "external"
    url = "http://127.0.0.1:8001"
    method = "ngram"                   # what it serves (a label; the sweep cannot change it)
    k = 3

A **cell** is one measured run: engine × method × k × batch size × workload (``none`` runs once
per batch size and workload, with k = 0; a ``url`` engine contributes its own method and k).
Where every engine is a ``url`` engine, the fields only launched engines use (``methods``, ``k``,
``trees``, ``baselines``, ``segments``, ``replicas``, ``prompt_lookup_*``, ``mtp_method``) are
refused when given: each server runs as it was started. A launched engine's ``args`` may not set
what the sweep sets from each cell (:data:`~specscope.backends.openai.launchers.CONTROLLED_FLAGS`),
nor ``specscope serve``'s ``--confidence``: a sweep measures fixed-k chains.
A **tree cell** is engine × method × tree × batch size × workload: its k is the tree's node
count (drafts per step, what the server's per-position metrics show) and its rows also carry
``tree``, ``tree_nodes`` and ``tree_depth``. With ``trees`` and no ``k``, only tree cells run.
The methods that draft trees on a launched engine run each tree; the others (a lookup) their
chains alone, whose plan says so by listing no tree cells for them. A tree that no listed method
can draft there is refused when the file is read
(:func:`~specscope.backends.openai.launchers.check_tree`), as is one an engine cannot draft.
A cell's id is a hash of everything that determines its result, so results of a changed
configuration are never mistaken for results of the old one; a model or draft directory counts
by its fingerprint too (config.json and its weight files' contents), so another
checkpoint in its place measures anew.

**Baselines.** A speedup is an SD cell's throughput over a ``none`` cell's. With ``baselines =
"shared"`` (the default) one ``none`` cell per engine, batch size and workload serves every SD
cell. With ``"paired"`` each SD cell gets its own ``none`` cell, run right before it (same
engine, batch size and workload; its ``baseline_for`` names the SD server it pairs with, e.g.
``ngram k=3``): on a machine whose speed drifts over minutes (a shared VM measured 6–9 % apart
on the same cell), a ratio of two runs taken back to back is what is worth trusting, at the
price of one more server run per SD cell; a pair is measured again together when either half is
missing (an SD cell recorded by a shared sweep, or by a run interrupted between the two, is no
pair to a ``none`` cell measured later). With ``"interleaved"`` (launched engines) the pair's
two servers run at once and take turns: the requests are cut into ``segments`` consecutive
parts (default 10), each run on the ``none`` server and on the SD server, the order reversed
every other part (:func:`~specscope.backends.openai.measure.measure_interleaved`); each cell's
throughput counts its own segments' time only. On a machine whose speed wanders over seconds
(a 2-core VM measured ±15 % from one second to the next, half of it carried into the next
second) the two cells of a pair then see nearly the same machine: the ``none`` cell of one
launched server, run three times back to back, read 240–413 tokens/s at batch 1, while the ratio
of an interleaved pair (n-gram k = 2, batch 4), measured three times, read 1.42–1.45. A
segment's requests ramp up and drain on their own, as the calibration's prediction replays
them (:mod:`specscope.backends.openai.calibration`). The two servers are up at once (idle in
turn): on a GPU give each room (vLLM: ``--gpu-memory-utilization`` under one half), and with
``--ray`` a pair's group reserves its engine's resources twice. With ``"interleaved-all"``
(launched engines) every cell of one workload is measured over the same minutes: one ``none``
server and one per SD method and k (or tree), each launched for the sweep's largest batch size,
are up at once, and every cell — each server at each batch size, one ``none`` cell per batch
size shared by its SD cells — takes its turn the same way, segment by segment (A B … Z, then
Z … A). On a machine whose speed also drifts over minutes that is meant to make cells comparable
with one another, not only with their own baseline: a calibration sweep of pairs (27 of them
over 25 minutes on a 2-core VM) saw the ``none`` server's throughput at one batch size move by
1.6× from pair to pair, and the speedup of a pair depended on when it ran. (Three calibration
sweeps of this design on that VM did not predict better than five that took turns within each
batch size only: README, "Calibrate to your engine".) A server serving several cells counts each
cell's spec-decode counters around that cell's own segments. A workload's cells are measured
together or, resumed, again together; with ``--ray`` they reserve their engine's resources once
per server.

**Replicas.** With ``replicas = R`` (interleaved baselines, launched engines) every server is
launched as R processes and segment i of every cell runs on replica i mod R: a cell's throughput
then averages the speeds of R processes (``--ray`` reserves R times the resources). Processes of
one engine differ in speed for as long as they live: four ``none`` servers of the reference
engine, up at once and taking turns over the same 12 rounds on a 2-core VM, took 3.11, 3.13,
3.23 and 3.29 ms (medians) for the same one-token forward — and one ``none`` server's offset is
carried into the speedup of every SD cell that shares it. (One calibration sweep with
``replicas = 2`` on that VM did not predict better than those with one process a server:
README, "Calibrate to your engine".)
"""

from __future__ import annotations

import re

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from specscope import validate
from specscope.backends.openai.bench import DEFAULTS
from specscope.backends.openai.client import ClientConfig, split_url
from specscope.backends.openai.launchers import VLLM_GENERIC_MTP, check_engine_args, check_tree, needs_draft
from specscope.backends.openai.measure import in_flight
from specscope.backends.openai.prompts import read_prompts, select_prompts
from specscope.engine.config import model_fingerprint
from specscope.errors import SpecscopeError, where
from specscope.fileio import check_output_dir
from specscope.fingerprint import file_sha256
from specscope.reading import read_toml_object
from specscope.methods import ENGINES, NO_SD, method, names, proposal_label
from specscope.trees import TreeShape

INTERLEAVED = "interleaved"  # each SD server beside its own none server, taking turns
INTERLEAVED_ALL = "interleaved-all"  # every cell of one workload, its servers up at once, taking turns
BASELINES = ("shared", "paired", INTERLEAVED, INTERLEAVED_ALL)  # how SD cells get their none cells (module docstring)
INTERLEAVING = (INTERLEAVED, INTERLEAVED_ALL)
LAUNCHED_ONLY = ("methods", "k", "baselines", "segments", "replicas", "prompt_lookup_min", "prompt_lookup_max",
                 "mtp_method")  # fields no url engine uses (trees: _check_trees_launched)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    launch: str | None = None
    url: str | None = None
    model: str | None = None
    drafts: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    port: int | None = None
    method: str | None = None
    k: int | None = None
    resources: dict[str, float] = field(default_factory=dict)  # Ray resources of its server (--ray)


@dataclass(frozen=True)
class SweepConfig:
    path: Path
    output: Path
    workloads: tuple[str, ...]  # as written in the file; see workload_path
    engines: tuple[EngineSpec, ...]
    methods: tuple[str, ...] = (NO_SD,)
    k: tuple[int, ...] = (3,)
    trees: tuple[TreeShape, ...] = ()
    batch_sizes: tuple[int, ...] = (1,)
    max_tokens: int = ClientConfig.max_tokens
    ignore_eos: bool = ClientConfig.ignore_eos
    temperature: float = ClientConfig.temperature
    num_requests: int | None = None
    request_timeout_s: float = DEFAULTS.request_timeout_s
    idle_timeout_s: float = DEFAULTS.idle_timeout_s
    launch_timeout_s: float = DEFAULTS.launch_timeout_s
    prompt_lookup_min: int = DEFAULTS.prompt_lookup_min
    prompt_lookup_max: int = DEFAULTS.prompt_lookup_max
    mtp_method: str = DEFAULTS.mtp_method
    baselines: str = "shared"  # or "paired", "interleaved", "interleaved-all" (module docstring)
    segments: int = 10  # parts the requests of interleaved servers are cut into
    replicas: int = 1  # processes launched per interleaved server, taking the segments in turn

    def workload_path(self, name: str) -> Path:
        """A workload's file, relative to the configuration file's directory."""
        return self.path.parent / name


@dataclass(frozen=True)
class Cell:
    engine: EngineSpec
    method: str
    k: int
    batch_size: int
    workload: str
    tree: TreeShape | None = None  # a tree cell: k is its node count
    baseline_for: str | None = None  # a paired ``none`` cell: the SD server it pairs with (``server``)

    @property
    def server(self) -> str:
        return proposal_label(self.method, self.k, self.tree.name if self.tree else None)

    def labels(self) -> dict[str, object]:
        """What a result row says about the cell."""
        tree = self.tree.describe() if self.tree is not None else {"tree": None, "tree_nodes": None, "tree_depth": None}
        return {"engine": self.engine.name, "workload": self.workload, "method": self.method, "k": self.k,
                **tree, "batch_size": self.batch_size, "baseline_for": self.baseline_for}

    def key(self, config: SweepConfig) -> dict[str, object]:
        """Everything that determines this cell's result (JSON-ready)."""
        draft = self.engine.drafts.get(self.method)
        engine = {
            "name": self.engine.name,
            "launch": self.engine.launch,
            "url": self.engine.url,
            "model": self.engine.model,
            "draft": draft,
            "args": list(self.engine.args),
            **{f"{what}_files": print_ for what, print_ in (("model", _checkpoint(self.engine.model)),
                                                           ("draft", _checkpoint(draft))) if print_},
        }
        settings = {
            name: getattr(config, name)
            for name in ("max_tokens", "ignore_eos", "temperature", "num_requests")
        }
        chosen = method(self.method) if self.method != NO_SD else None
        if chosen is not None and chosen.prompt_lookup:
            settings.update(
                prompt_lookup_min=config.prompt_lookup_min, prompt_lookup_max=config.prompt_lookup_max
            )
        if chosen is not None and chosen.vllm_method == VLLM_GENERIC_MTP:
            settings["mtp_method"] = config.mtp_method
        tree = {"tree": [list(p) for p in self.tree.paths]} if self.tree is not None else {}  # chain ids unchanged
        pair = {"baseline_for": self.baseline_for} if self.baseline_for is not None else {}  # shared ids unchanged
        if config.baselines in INTERLEAVING and self.engine.url is None:  # measured differently: new ids
            pair.update(baselines=config.baselines, segments=config.segments)
            if config.replicas > 1:  # ids of one process per server unchanged
                pair["replicas"] = config.replicas
        if config.baselines == INTERLEAVED_ALL and self.engine.url is None:  # its server's batch size
            pair["server_batch_size"] = max(config.batch_sizes)
        return {
            "engine": engine,
            "method": self.method,
            "k": self.k,
            **tree,
            **pair,
            "batch_size": self.batch_size,
            "workload": self.workload,
            "workload_sha256": file_sha256(config.workload_path(self.workload)),
            **settings,
        }

    def cell_id(self, config: SweepConfig) -> str:
        return key_id(self.key(config))


def key_id(key: dict) -> str:
    """A cell's id: the start of the SHA-256 of its key (everything that makes it another measurement)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _beside(path: Path, model: str) -> str:
    """A model a launched engine loads: a directory relative to the configuration file ``path``
    as its absolute path; anything else (a hub name) as given."""
    local = path.parent / model
    return str(local.resolve()) if local.is_dir() else model


def _checkpoint(model: str | None) -> str | None:
    """The fingerprint of a model directory (:func:`~specscope.engine.config.model_fingerprint`:
    another checkpoint in its place is another cell, also one put there while a cell ran — each
    weight file's digest is kept per size and modification time), None for a hub name."""
    if model is None or not (Path(model) / "config.json").is_file():
        return None
    return model_fingerprint(Path(model))


def _check(path: Path, name: str, value: object, kind: type | tuple, what: str) -> object:
    if value is None:  # TOML has no null: the field is not there
        raise SpecscopeError(f"{where(path, field=name)}: missing (expected {what})")
    if isinstance(value, bool) and kind is not bool:
        raise SpecscopeError(f"{where(path, field=name)}: expected {what}, got {value!r}")
    if not isinstance(value, kind):
        raise SpecscopeError(f"{where(path, field=name)}: expected {what}, got {value!r}")
    return value


def _value(path: Path, name: str, value: object, rule, **bounds) -> object:
    """``rule(value, **bounds)`` (a :mod:`specscope.validate` rule) for a TOML value, whose
    type is its own: text is refused where a number is expected."""
    try:
        if isinstance(value, str):
            raise validate.Invalid(f"expected a number, got {value!r}")
        return rule(value, **bounds)
    except validate.Invalid as error:
        raise SpecscopeError(f"{where(path, field=name)}: {error}") from None


def _int_list(path: Path, name: str, value: object, **bounds: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise SpecscopeError(f"{where(path, field=name)}: expected a non-empty list of integers")
    return _distinct(path, name, tuple(_value(path, f"{name}[{i}]", v, validate.integer, **bounds)
                                       for i, v in enumerate(value)))


def _distinct(path: Path, name: str, values: tuple) -> tuple:
    """``values``, refused when one repeats (its cell would be planned twice and recorded once)."""
    repeated = validate.first_repeat(values)
    if repeated is not None:
        raise SpecscopeError(f"{where(path, field=name)}: {repeated!r} is listed twice")
    return values


def _engine(path: Path, index: int, table: object) -> EngineSpec:
    at = f"engines[{index}]"
    if not isinstance(table, dict):
        raise SpecscopeError(f"{path}: {at}: expected a table")
    unknown = set(table) - {f.name for f in fields(EngineSpec)}
    if unknown:
        raise SpecscopeError(f"{path}: {at}: unknown field(s) {', '.join(sorted(unknown))}")
    name = _check(path, f"{at}.name", table.get("name"), str, "a name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):  # it names files (server logs) in the output folder
        raise SpecscopeError(f"{path}: {at}.name: expected letters, digits, '.', '_' or '-' (it names log files), "
                             f"got {name!r}")
    launch, url = table.get("launch"), table.get("url")
    if (launch is None) == (url is None):
        raise SpecscopeError(f"{path}: {at}: expected exactly one of 'launch' and 'url'")
    if launch is not None and launch not in ENGINES:
        raise SpecscopeError(f"{path}: {at}.launch: expected one of {', '.join(ENGINES)}, got {launch!r}")
    if launch is not None and not isinstance(table.get("model"), str):
        raise SpecscopeError(f"{path}: {at}.model: a launched engine needs a model (name or directory)")
    if launch is not None and ("method" in table or "k" in table):
        raise SpecscopeError(f"{path}: {at}: method and k describe a server given by url; a launched engine "
                             "runs the sweep's methods and k")
    if url is not None:
        _check(path, f"{at}.url", url, str, "http://HOST:PORT")
        parts = split_url(url, f"{path}: {at}.url")  # else refused only as each cell ran
        if parts.query or parts.username or parts.path.strip("/"):
            raise SpecscopeError(f"{path}: {at}.url: expected http://HOST:PORT (the server's root: no path, query "
                                 f"or user), got {url!r}")
        served = _check(path, f"{at}.method", table.get("method"), str, "the method the server runs")
        if served not in names():
            raise SpecscopeError(
                f"{path}: {at}.method: expected one of {', '.join(names())}, got {served!r}"
            )
        if served != NO_SD:
            _value(path, f"{at}.k", table.get("k"), validate.integer, low=1, high=validate.K_MAX_LIMIT)
        elif "k" in table:  # a none server proposes nothing: a k would be dropped unsaid
            raise SpecscopeError(f"{path}: {at}.k: a server serving 'none' proposes nothing; leave k out")
        if table.get("model") is not None:  # the model it serves, named in its requests
            _check(path, f"{at}.model", table["model"], str, "the served model's name")
    launched_only = [field for field in ("drafts", "args", "port") if url is not None and field in table]
    if launched_only:  # the sweep starts no server here: what would they change?
        raise SpecscopeError(f"{path}: {at}.{launched_only[0]}: is for an engine the sweep launches; the server at "
                             f"{url} runs as it was started (give its options where you start it)")
    drafts = table.get("drafts", {})
    if not isinstance(drafts, dict) or any(not isinstance(v, str) for v in drafts.values()):
        raise SpecscopeError(f'{path}: {at}.drafts: expected a table of method = "draft model"')
    for drafter in drafts:
        if drafter not in names(baseline=False) or not method(drafter).needs_checkpoint:
            raise SpecscopeError(f"{path}: {at}.drafts.{drafter}: expected a method that drafts with a checkpoint "
                                 f"({', '.join(m for m in names(baseline=False) if method(m).needs_checkpoint)})")
    args = table.get("args", [])
    if not isinstance(args, list) or any(not isinstance(a, str) for a in args):
        raise SpecscopeError(f"{path}: {at}.args: expected a list of strings")
    try:  # the server would run other than the cell it is recorded as
        check_engine_args(launch, args, "the sweep")
    except SpecscopeError as error:
        raise SpecscopeError(f"{path}: {at}.args: {error}") from None
    port = table.get("port")
    if port is not None:
        _value(path, f"{at}.port", port, validate.integer, low=1, high=65535)
    resources = table.get("resources", {})
    if not isinstance(resources, dict):
        raise SpecscopeError(f'{path}: {at}.resources: expected a table of Ray resources such as {{ "H100" = 1 }}')
    for resource, amount in resources.items():
        _value(path, f"{at}.resources.{resource}", amount, validate.number, low=0.0)
    if launch is not None:  # what the sweep launches: a directory named relative to this file, as the workloads
        table = {**table, "model": _beside(path, table["model"])}
        drafts = {drafter: _beside(path, checkpoint) for drafter, checkpoint in drafts.items()}
    return EngineSpec(
        name,
        launch,
        url,
        table.get("model"),
        dict(drafts),
        tuple(args),
        port,
        table.get("method"),
        table.get("k") if table.get("method") != NO_SD else 0,
        resources=dict(resources),
    )


def load_sweep_config(path: str | Path) -> SweepConfig:
    """Parse and check ``path``; errors name the file and field."""
    path = Path(path)
    data = read_toml_object(path)
    known = {f.name for f in fields(SweepConfig)} - {"path"}
    unknown = set(data) - known
    if unknown:
        raise SpecscopeError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    base = path.parent
    values: dict[str, object] = {"path": path}
    output = base / _check(path, "output", data.get("output"), str, "an output directory")
    try:
        values["output"] = check_output_dir(output)
    except SpecscopeError as error:
        raise SpecscopeError(f"{where(path, field='output')}: {error}") from None
    workloads = data.get("workloads")
    if not isinstance(workloads, list) or not workloads or any(not isinstance(w, str) for w in workloads):
        raise SpecscopeError(f"{path}: field 'workloads': expected a non-empty list of files")
    values["workloads"] = _distinct(path, "workloads", tuple(workloads))
    stems = [Path(w).stem for w in workloads]
    clash = next((w for i, w in enumerate(workloads) if stems[i] in stems[:i]), None)
    if clash is not None:  # a workload's rows, traces and results go by its name
        raise SpecscopeError(f"{where(path, field='workloads')}: {clash!r} has the name {Path(clash).stem!r} of an "
                             "earlier workload; rename one (results are kept by workload name)")
    engines = data.get("engines")
    if not isinstance(engines, list) or not engines:
        raise SpecscopeError(f"{path}: expected at least one [[engines]] table")
    values["engines"] = tuple(_engine(path, i, e) for i, e in enumerate(engines))
    _check_names(path, values["engines"])
    if "methods" in data:
        methods = data["methods"]
        if not isinstance(methods, list) or not methods or any(m not in names() for m in methods):
            raise SpecscopeError(f"{path}: field 'methods': expected a list among {', '.join(names())}")
        values["methods"] = _distinct(path, "methods", tuple(methods))
    if "k" in data:
        values["k"] = _int_list(path, "k", data["k"], low=1, high=validate.K_MAX_LIMIT)
        if set(values.get("methods", ())) == {NO_SD}:  # no cell proposes: the k would be dropped unsaid
            raise SpecscopeError(f"{path}: field 'k': methods = [\"{NO_SD}\"] proposes nothing; leave k out")
    if "trees" in data:
        values["trees"] = _trees(path, data["trees"])
        values.setdefault("k", ())  # trees alone: no chain cells
    if "batch_sizes" in data:
        values["batch_sizes"] = _int_list(path, "batch_sizes", data["batch_sizes"], low=1)
    positive, seconds = (validate.integer, {"low": 1}), (validate.number, {"low": 0.0, "low_open": True})
    rules = {
        "max_tokens": positive,
        "num_requests": (validate.integer, {"low": 1, "high": validate.MAX_REQUESTS}),
        "prompt_lookup_min": positive,
        "prompt_lookup_max": positive,
        "request_timeout_s": seconds,
        "idle_timeout_s": seconds,
        "launch_timeout_s": seconds,
        "temperature": (validate.temperature, {}),
    }
    for name, (rule, bounds) in rules.items():
        if name in data:
            values[name] = _value(path, name, data[name], rule, **bounds)
    for name, kind, what in (("ignore_eos", bool, "true or false"), ("mtp_method", str, "a vLLM MTP method name")):
        if name in data:
            values[name] = _check(path, name, data[name], kind, what)
    if "baselines" in data:
        if data["baselines"] not in BASELINES:
            raise SpecscopeError(f"{where(path, field='baselines')}: expected one of {', '.join(map(repr, BASELINES))}, "
                                 f"got {data['baselines']!r}")
        values["baselines"] = data["baselines"]
    if "segments" in data:
        if values.get("baselines") not in INTERLEAVING:
            raise SpecscopeError(f"{where(path, field='segments')}: only with baselines = "
                                 f"{' or '.join(map(repr, INTERLEAVING))}")
        values["segments"] = _value(path, "segments", data["segments"], validate.integer, low=2)
    if "replicas" in data:
        if values.get("baselines") not in INTERLEAVING:
            raise SpecscopeError(f"{where(path, field='replicas')}: only with baselines = "
                                 f"{' or '.join(map(repr, INTERLEAVING))}")
        values["replicas"] = _value(path, "replicas", data["replicas"], validate.integer, low=1)
    config = SweepConfig(**values)
    if config.replicas > config.segments:
        raise SpecscopeError(f"{where(path, field='replicas')}: expected at most segments ({config.segments}), "
                             f"got {config.replicas} (a replica that takes no segment measures nothing)")
    if config.baselines in INTERLEAVING and config.num_requests is not None and config.segments > config.num_requests:
        raise SpecscopeError(f"{where(path, field='segments')}: expected at most num_requests "
                             f"({config.num_requests}), got {config.segments}")
    if not plan_cells(config):
        raise SpecscopeError(f"{path}: plans no cell (methods {', '.join(config.methods)} with baselines = "
                             f"{config.baselines!r}: a sweep measures SD methods against 'none')")
    for i, name in enumerate(config.workloads):
        try:
            requests = len(select_prompts(read_prompts(config.workload_path(name)), config.num_requests,
                                          config.workload_path(name)))
        except SpecscopeError as error:
            raise SpecscopeError(f"{where(path, field=f'workloads[{i}]')}: {error}") from None
        if config.baselines in INTERLEAVING and config.segments > requests:
            raise SpecscopeError(f"{where(path, field='segments')}: expected at most the requests of {name} "
                                 f"({requests}), got {config.segments}")
        at_once, runs = in_flight(requests, config.segments if config.baselines in INTERLEAVING else 1)
        if max(config.batch_sizes) > at_once:
            raise SpecscopeError(f"{where(path, field='batch_sizes')}: {max(config.batch_sizes)} is above the requests "
                                 f"{name} keeps in flight at once ({runs}): the cell would be labelled with a "
                                 "concurrency it never reached")
    if config.prompt_lookup_min > config.prompt_lookup_max:
        raise SpecscopeError(
            f"{where(path, field='prompt_lookup_min')}: expected <= prompt_lookup_max "
            f"({config.prompt_lookup_max}), got {config.prompt_lookup_min}"
        )
    _check_trees_launched(path, config)
    _check_launched_only(path, data, config)
    for engine in config.engines:
        if engine.launch is not None:
            unknown = [m for m in config.methods if m not in names(engine.launch)]
            if unknown:
                raise SpecscopeError(f"{path}: engine {engine.name!r}: {engine.launch} has no method {', '.join(unknown)}")
            missing = [m for m in config.methods if needs_draft(engine.launch, m) and m not in engine.drafts]
            if missing:
                raise SpecscopeError(
                    f"{path}: engine {engine.name!r}: methods {', '.join(missing)} need "
                    f'drafts.<method> = "draft model"'
                )
            drafters = _tree_drafters(config, engine)
            if config.trees and not drafters:
                raise SpecscopeError(f"{where(path, field='trees')}: engine {engine.name!r}: launch {engine.launch}: "
                                     f"no method listed drafts token trees there "
                                     f"({', '.join(m for m in config.methods if m != NO_SD) or 'none but no SD'})")
            idle = [m for m in config.methods if m != NO_SD and m not in drafters]
            if config.trees and not config.k and idle:
                raise SpecscopeError(f"{where(path, field='k')}: engine {engine.name!r}: launch {engine.launch}: "
                                     f"k is empty and these methods draft no token trees there: {', '.join(idle)} "
                                     "(they would measure nothing: give k, or leave them out of methods)")
            for tree in config.trees:
                try:
                    for m in drafters:
                        check_tree(engine.launch, m, tree)
                except SpecscopeError as error:
                    raise SpecscopeError(f"{where(path, field='trees')}: engine {engine.name!r}: {error}") from None
    return config


def _trees(path: Path, value: object) -> tuple[TreeShape, ...]:
    if not isinstance(value, list) or not value or any(not isinstance(t, str) for t in value):
        raise SpecscopeError(f'{where(path, field="trees")}: expected a non-empty list of trees such as "2x2x1"')
    trees = []
    for i, text in enumerate(value):
        try:
            tree = TreeShape.parse(text)
            if tree.nodes > validate.K_MAX_LIMIT:  # a tree cell's k is its node count
                raise validate.Invalid(f"expected at most {validate.K_MAX_LIMIT} nodes, got {tree.nodes} in {text}")
        except validate.Invalid as error:
            raise SpecscopeError(f"{where(path, field=f'trees[{i}]')}: {error}") from None
        if tree in trees:  # "2x1" and its paths written out are one tree: planned twice, recorded once
            raise SpecscopeError(f"{where(path, field='trees')}: {tree.name!r} is listed twice")
        trees.append(tree)
    return tuple(trees)


def _check_names(path: Path, engines: tuple[EngineSpec, ...]) -> None:
    """Each launched engine has a name of its own; ``url`` engines may share one, each serving
    another method and k: one engine (what a cost model describes) reached as several servers,
    each started with one speculative configuration (vLLM and SGLang fix theirs at start), whose
    SD cells take the ``none`` server's cells of the same name as their baselines."""
    seen: dict[str, list[EngineSpec]] = {}
    for engine in engines:
        seen.setdefault(engine.name, []).append(engine)
    for name, group in seen.items():
        if len(group) > 1 and any(e.url is None for e in group):
            raise SpecscopeError(f"{path}: engine name {name!r} given {len(group)} times: a launched engine's name "
                                 "must be unique (only url engines share one, each serving another method and k)")
        served = [(e.method, e.k) for e in group]
        twice = next((m for m in served if served.count(m) > 1), None)
        if twice is not None:
            raise SpecscopeError(f"{path}: url engines named {name!r}: two serve {twice[0]}"
                                 + (f" k={twice[1]}" if twice[0] != NO_SD else "") + " (one server per method and k)")


def plan_cells(config: SweepConfig) -> list[Cell]:
    """All cells, grouped so that cells sharing one launched server are adjacent; with paired or
    interleaved baselines, each SD cell right after its own ``none`` cell; with
    ``interleaved-all``, the cells of one workload together, per batch size its ``none`` cell
    first (module docstring)."""
    cells = []
    for engine in config.engines:
        if config.baselines == INTERLEAVED_ALL and engine.url is None:
            cells.extend(_all_interleaved(config, engine))
            continue
        if engine.url is not None:
            servers = [(engine.method, engine.k, None)]
        else:
            servers = [server for m in config.methods for server in _servers_of(config, engine, m)]
        paired = config.baselines in ("paired", INTERLEAVED) and engine.url is None
        for served, k, tree in servers:
            if paired and served == NO_SD:
                continue  # every SD cell brings its own
            for batch_size in config.batch_sizes:
                for cell in [Cell(engine, served, k, batch_size, w, tree) for w in config.workloads]:
                    if paired:
                        cells.append(Cell(engine, NO_SD, 0, batch_size, cell.workload, baseline_for=cell.server))
                    cells.append(cell)
    return cells


def _all_interleaved(config: SweepConfig, engine: EngineSpec) -> list[Cell]:
    """A launched engine's cells under ``interleaved-all``: per workload and batch size, its
    ``none`` cell, then one cell per SD method and k (or tree); none without an SD method (as with
    pairs, a ``none`` cell comes with the SD cells it is measured beside)."""
    servers = [server for m in config.methods if m != NO_SD for server in _servers_of(config, engine, m)]
    if not servers:
        return []
    return [cell for workload in config.workloads for batch_size in config.batch_sizes
            for cell in [Cell(engine, NO_SD, 0, batch_size, workload)]
            + [Cell(engine, m, k, batch_size, workload, tree) for m, k, tree in servers]]


def _servers_of(config: SweepConfig, engine: EngineSpec, method_name: str) -> list[tuple[str, int, TreeShape | None]]:
    """(method, k, tree) of each server a launched engine runs for ``method_name``: ``none`` once
    (k = 0); an SD method at each k, then, if it drafts trees there, at each tree (k: its node
    count)."""
    if method_name == NO_SD:
        return [(NO_SD, 0, None)]
    trees = config.trees if method_name in _tree_drafters(config, engine) else ()
    return [(method_name, k, None) for k in config.k] + [(method_name, t.nodes, t) for t in trees]


def _check_trees_launched(path: Path, config: SweepConfig) -> None:
    """Refuse ``trees`` where no engine is launched: a url engine serves its own method and k."""
    if config.trees and all(engine.url is not None for engine in config.engines):
        raise SpecscopeError(f"{where(path, field='trees')}: no launched engine to draft them (a url engine serves "
                             "its own method and k)")


def _check_launched_only(path: Path, data: dict, config: SweepConfig) -> None:
    """Refuse the fields only launched engines use, where given (``data``: the file's) and no engine
    is launched: a url engine serves its own method and k, as it was started (they would be
    ignored, and prompt_lookup_* still recorded in its cells' keys)."""
    given = [name for name in LAUNCHED_ONLY if name in data]
    if given and all(engine.url is not None for engine in config.engines):
        keyed = [name for name in given if name.startswith("prompt_lookup_")  # in a lookup cell's key: one
                 and data[name] != getattr(DEFAULTS, name)]  # other than the default changes it when left out
        raise SpecscopeError(f"{path}: field(s) {', '.join(given)}: no launched engine to use them (a url engine "
                             "serves its own method and k, as it was started); leave them out"
                             + (f" (lookup cells recorded under {', '.join(keyed)} are then measured again: the "
                                "setting was never the server's)" if keyed else ""))


def _tree_drafters(config: SweepConfig, engine: EngineSpec) -> list[str]:
    """The methods of ``config`` that draft token trees on the launched ``engine`` (a lookup
    runs its chains alone)."""
    return [m for m in config.methods if m != NO_SD and method(m).drafts_trees_on(engine.launch)]


def describe(config: SweepConfig) -> dict[str, object]:
    """The configuration as JSON-ready data (written next to the results)."""
    data = asdict(config)
    return json.loads(json.dumps(data, default=str))
