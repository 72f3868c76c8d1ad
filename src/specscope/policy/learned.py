"""A learned causal policy from a portable JSON file: the features of an observation
(:mod:`specscope.policy.features`) → (method, k) by one :class:`~specscope.policy.chooser.Chooser`
per fitted batch size (the acceptance model and the decision rule are described there; the
model is fitted by :mod:`specscope.sim.fit`). At a batch size the file was not fitted for, the
nearest fitted one (log scale) decides.

The file (``"schema": "specscope.policy/7"``) holds ``methods``, ``features`` (name →
definition), ``cost_model``, ``mean``/``scale`` [F], ``coef`` [M][F], ``intercept`` [M][J]
(b_m,j), ``base_rate`` [M][J] (the training data's acceptance of draft token j), ``span``
[M][2] (the least and greatest coef_m · z over the training steps, z the standardised features), and
``models``: per batch size ``seconds`` [M][J + 1] (the price per row), ``fixed``
[M][J + 1] (F_B: the batch's once-per-iteration drafting; 0 for a lookup and at k = 0) and
``verify`` [J + 1] (the verification part of the price) and, optionally, ``confidence`` p (a model
drafter a step takes proposes until its first draft of probability below p, at most J, in place
of the chosen k: :meth:`LearnedPolicy.confidence_for`; null or absent: the chosen k) and
``gate`` (the admission gate that commits a request to one chain from its prompt:
:mod:`specscope.policy.gate`; null or absent: every request decided per step), and ``pads``
(the cost model's engine verifies every row at the batch's widest proposal: its group then weighs
each width); plain numbers only. ``training`` says what it was fitted on; its optional
``checkpoints`` (one object per source: method → fingerprint, ``model`` the target, as the traces'
settings name them; a file without it still loads) is what an engine checks its own checkpoints
against (:func:`checkpoint_notes`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from specscope.costmodel.linear import MAX_COEFFICIENT_S, drafting_from_json, linear_from_json
from specscope.costmodel.roofline import MIN_EFFICIENCY, Efficiency
from specscope.errors import SpecscopeError
from specscope.reading import parse_json
from specscope.methods import METHODS, method as method_named
from specscope.policy.chooser import Chooser
from specscope.policy.features import feature_names, features
from specscope.policy.gate import ADMISSION_FEATURES, CARRIED, GATE_KEPT, LEAF, Gate
from specscope.policy.observation import NONE, Decide, Observation
from specscope.trace.fields import Fields
from specscope.validate import K_MAX_LIMIT, MAX_BATCH_SIZE

SCHEMA = "specscope.policy/7"  # /7: admission gates as trees; /6: each method's slope term bounded to its training
# span (refit files of /1 … /6)
FIELDS = ("schema", "methods", "features", "cost_model", "batch_sizes", "pads", "mean", "scale", "coef", "intercept",
          "base_rate", "span", "models", "training")  # a policy file's, as `policy fit` writes them
MODEL_FIELDS = ("batch_size", "seconds", "fixed", "verify", "confidence", "gate")  # each of its models' (the last two: optional)
MAX_STEP_S = 3600.0  # a step's price in a policy file: at most an hour (a typo's 1e300 is refused)


@dataclass(frozen=True)
class LearnedPolicy:
    """A fitted policy file: its methods and one chooser per fitted batch size."""

    path: str
    methods: tuple[str, ...]
    choosers: dict[int, Chooser]
    document: dict
    sha256: str | None = None  # :func:`stamp` of the file it was read from
    _decisions: dict[int, Decide] = field(default_factory=dict, compare=False, repr=False)  # decide_for by batch size

    @property
    def depth(self) -> int:
        """The deepest k it proposes (J)."""
        return next(iter(self.choosers.values())).seconds.shape[1] - 1

    @property
    def label(self) -> str:
        """What a row says ran: the file and the methods it chose between."""
        return f"learned:{Path(self.path).name} ({'+'.join(self.methods)})"

    def drafter(self, draft_dir: object) -> str | None:
        """Its one model drafter (``None``: lookups only), checked against the checkpoint
        ``draft_dir`` it needs; an engine runs only methods of its own (``reference``), at most
        one model drafter beside n-gram."""
        unrun = [m for m in self.methods if not method_named(m).reference]
        if unrun:
            runs = ", ".join(m.name for m in METHODS if m.reference)
            raise SpecscopeError(f"{self.path}: field 'methods': {unrun[0]} is not run by the reference engine (it "
                                 f"runs {runs}); a policy over it is for `simulate --policies learned:FILE`")
        models = [m for m in self.methods if method_named(m).kind != "lookup"]
        if len(models) > 1:
            raise SpecscopeError(f"--policy: {self.path} chooses between {', '.join(models)}; the engine runs one "
                                 "model drafter beside n-gram (its checkpoint: --draft)")
        if models and draft_dir is None:
            raise SpecscopeError(f"--policy: {self.path} runs {models[0]}: give its checkpoint with --draft DIR")
        if not models and draft_dir is not None:
            raise SpecscopeError(f"--draft: {self.path} runs no model drafter ({', '.join(self.methods)}): "
                                 "leave --draft out")
        return models[0] if models else None

    def rule_notes(self, batch_sizes: Sequence[int]) -> list[str]:
        """One line per batch size among ``batch_sizes`` the policy was not fitted for: whose rule
        it decides by there (:meth:`chooser`)."""
        notes = []
        for b in batch_sizes:
            nearest = self.chooser(b).batch_size
            if nearest != b:
                notes.append(f"learned:{self.path} was fitted at batch sizes {', '.join(map(str, sorted(self.choosers)))}"
                             f": at B={b} it decides by B={nearest}'s rule")
        return notes

    def chooser(self, batch_size: int) -> Chooser:
        """The rule of the fitted batch size nearest ``batch_size`` (log scale)."""
        nearest = min(self.choosers, key=lambda b: (abs(math.log(b) - math.log(batch_size)), b))
        return self.choosers[nearest]

    def confidence_for(self, batch_size: int) -> float | None:
        """p at ``batch_size`` (its rule's, :meth:`chooser`): where a step takes a model drafter, the
        drafter proposes until its first draft of probability below p (that one included), at most
        :attr:`depth`, in place of the chosen k — its confidence within the step, which the policy
        reads only where it pays for the drafting; ``None``: the chosen k."""
        return self.chooser(batch_size).confidence

    def gate_for(self, batch_size: int) -> Gate | None:
        """The admission gate at ``batch_size`` (its rule's, :meth:`chooser`; the engine's and the
        simulator's slots): what commits a request to one chain from its prompt (None: no gate)."""
        return self.chooser(batch_size).gate

    def decide_for(self, batch_size: int) -> Decide:
        """The decision at ``batch_size`` (made once per size: an engine asks at every step):
        observations of the rows of one engine iteration → their (method, k), decided together as
        the engine decides them (:meth:`Chooser.choose_group`; ``committed``: the (method, k) this
        step of the iteration's rows its gate committed, which wait for the decided rows' drafting).
        Copies of one observation (the simulator's paper mode: B copies of a request), or one row
        at batch 1 with no committed row beside it, decide alone: B
        identical rows choose alike, paying the batch's part of the drafting among them."""
        if batch_size in self._decisions:
            return self._decisions[batch_size]
        chooser, methods = self.chooser(batch_size), self.methods

        def inputs(obs: Observation) -> tuple:
            return features(obs, methods), obs.ngram_offer, chooser.shift_for(obs)

        def decide(observed: Sequence[Observation],
                   committed: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
            obs = observed[0]
            if not committed and all(other is obs for other in observed) and (len(observed) > 1
                                                                              or chooser.batch_size == 1):
                return [chooser.choose(*inputs(obs))] * len(observed)
            return chooser.choose_group(*zip(*map(inputs, observed)), committed=committed)

        return self._decisions.setdefault(batch_size, decide)


def load_policy(path: str | Path) -> LearnedPolicy:
    """Read a policy file; a missing or malformed one is a one-line error naming it."""
    try:
        data = Path(path).read_bytes()
        text = data.decode("utf-8")
    except OSError as error:
        raise SpecscopeError(f"{path}: cannot read the policy file: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise SpecscopeError(f"{path}: not a JSON policy file: {error}") from None
    document = parse_json(text, path)
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        found = (f"{document['schema']!r}" + (": made by another specscope; fit it again"
                                              if str(document["schema"]).startswith("specscope.policy/") else "")
                 if isinstance(document, dict) and "schema" in document else "none")
        raise SpecscopeError(f"{path}: expected a policy file with \"schema\": {SCHEMA!r} (made by `specscope "
                             f"policy fit`), got {found}")
    try:
        methods = _methods(document["methods"])
        choosers = choosers_from_json(document, methods)
        sizes = document["batch_sizes"]
        if not isinstance(sizes, list) or any(type(b) is not int for b in sizes) or sizes != sorted(choosers):
            raise ValueError(f"batch_sizes: expected those of its models, {sorted(choosers)}, got "
                             f"{document['batch_sizes']!r:.40}")
        training = document["training"]
        if not isinstance(training, dict) or not isinstance(training.get("sources"), list) \
                or not all(isinstance(source, str) for source in training["sources"]) or not all(
                type(training[count]) is int and training[count] >= 0 for count in ("requests", "steps")
                if count in training) or not all(isinstance(training.get(text, ""), str)
                                                 for text in ("made_by", "cost_model")) \
                or training.get("gate", CARRIED) not in GATE_KEPT:
            raise ValueError(f"training: expected what it was fitted on (an object with its sources' names, its "
                             f"requests and steps as counts, the code that fitted it and the cost model's name as "
                             f"text, and how its gates were kept: {', '.join(GATE_KEPT)}), got {training!r:.60}")
        _check_checkpoints(training)
    except KeyError as error:
        raise SpecscopeError(f"{path}: malformed policy file: missing field {error.args[0]!r}") from None
    except (TypeError, ValueError) as error:
        raise SpecscopeError(f"{path}: malformed policy file: {error}") from None
    except SpecscopeError as error:
        raise SpecscopeError(f"{path}: field 'methods': {error}") from None
    if "cost_model" not in document:
        raise SpecscopeError(f"{path}: malformed policy file: missing field 'cost_model'")
    try:
        _fitted_for(document["cost_model"])
    except SpecscopeError as error:
        raise SpecscopeError(f"{path}: malformed policy file: {error}") from None
    return LearnedPolicy(str(path), methods, choosers, document, stamp(data))


def _check_checkpoints(training: dict) -> None:
    """ValueError where ``training`` has a ``checkpoints`` (optional: files fitted before it was
    kept have none) that is not one object per source, each method (``model``: the target) →
    the fingerprint of the checkpoint its traces' settings name."""
    kept = training.get("checkpoints", [{}] * len(training["sources"]))
    if not isinstance(kept, list) or len(kept) != len(training["sources"]) or not all(
            isinstance(one, dict) and all(isinstance(value, str) for value in one.values()) for one in kept):
        raise ValueError(f"training.checkpoints: expected one object per source (method → the fingerprint of the "
                         f"checkpoint that traced it), got {kept!r:.60}")


def checkpoint_notes(policy: LearnedPolicy, target_dir: str | Path, draft_dir: str | Path | None,
                     fingerprint: Callable[[Path], str]) -> list[str]:
    """One line where the engine's target (``target_dir``) or model drafter (``draft_dir``) is not
    the checkpoint the policy's traces say produced them, or where its traces say none: its
    acceptance model learned that model's drafts (``training.checkpoints``; ``fingerprint``: the
    engine's :func:`~specscope.engine.config.model_fingerprint`, given by the engine's layer)."""
    training = policy.document["training"]
    if "checkpoints" not in training:
        return [f"{policy.label}: its file does not record which model produced its traces (fitted by an older "
                "specscope, or not by `policy fit`): nothing checks that it learned this engine's target"]
    kept = dict(zip(training["sources"], training["checkpoints"]))
    notes = []
    unnamed = [source for source, named in kept.items() if "model" not in named]
    if unnamed:
        notes.append(f"{policy.label}: fitted on traces that do not say which model produced them "
                     f"({', '.join(unnamed)}): nothing checks that they are this engine's target's")
    drafter = policy.drafter(draft_dir)
    ours = {"model": target_dir, **({drafter: draft_dir} if drafter is not None else {})}
    for key, folder in ours.items():
        own = fingerprint(Path(folder))
        other = {source: named[key] for source, named in kept.items() if named.get(key, own) != own}
        if other:
            what = "target model" if key == "model" else f"{key} checkpoint"
            notes.append(f"{policy.label}: fitted on traces of another {what} ("
                         + ", ".join(f"{source}: {digest[:12]}" for source, digest in other.items())
                         + f"; this engine's {folder}: {own[:12]}): its choices weigh the acceptance measured "
                         "there, not this engine's")
    return notes


def _fitted_for(value: object) -> None:
    """Check a policy file's ``cost_model``, the ``describe()`` form of the model whose prices its
    choices weigh (notes compare it with the model a simulation prices by), as a cost model file
    is checked: a linear one whole; a roofline's names, efficiency shares and drafting (its
    ``model`` may be a config.json on the machine that fitted it, so it is not read here)."""
    if not isinstance(value, dict) or value.get("kind", "linear") == "linear":
        linear_from_json(value, "cost_model")
        Fields(value, "cost_model").text("name")  # the policy's notes name the model (a file may omit it; fit writes it)
        return
    spec = Fields(value, "cost_model")
    if spec.get("kind") != "roofline":
        raise spec.error("kind", f"expected 'linear' or 'roofline', got {spec.get('kind')!r}")
    spec.only(["kind", "name", "gpu", "model", "draft_model", "efficiency", "overhead_s", "drafting"])
    for name in ("name", "gpu", "model"):
        spec.text(name)
    spec.text("draft_model", optional=True)
    spec.number("overhead_s", low=0.0, high=MAX_COEFFICIENT_S)
    efficiency = spec.child("efficiency")
    efficiency.only([f.name for f in fields(Efficiency)])
    for name in efficiency.obj:
        efficiency.number(name, low=MIN_EFFICIENCY, high=1.0)
    drafting = spec.child("drafting")
    for name in drafting.obj:
        entry = drafting.child(name)
        if entry.get("kind") == "roofline":  # a head or draft model the roofline prices by its shape
            entry.only(["kind", "model"])
            entry.text("model")
        else:
            drafting_from_json(entry)


def stamp(data: bytes) -> str:
    """What names a policy file's content in a result (its rows' ``policy_sha256``): the start of
    its SHA-256 — a file fitted again in place runs under the same name, not the same stamp."""
    return hashlib.sha256(data).hexdigest()[:16]


def _methods(value: object) -> tuple[str, ...]:
    """A policy file's ``methods``: distinct names of known proposers (SpecscopeError otherwise)."""
    if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
        raise SpecscopeError(f"expected a list of proposer names, got {value!r}")
    for name in value:
        method_named(name)  # an unknown name: a one-line error listing the known ones
    if len(set(value)) != len(value):
        raise SpecscopeError(f"expected distinct proposers, got {', '.join(value)}")
    return tuple(value)


def _numbers(document: dict, name: str, where: str = "") -> np.ndarray:
    """``document[name]``, a (nested) list of numbers, as a float array (ValueError naming it
    otherwise: a number written as text, or true/false, is no number, as in a trace file)."""
    if name not in document:
        raise ValueError(f"{where}{name}: missing")

    def plain(value: object) -> bool:
        if isinstance(value, list):
            return all(plain(item) for item in value)
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    try:
        if not plain(document[name]):
            raise ValueError
        return np.asarray(document[name], dtype=float)
    except OverflowError:  # an integer beyond a float's range (JSON has no limit)
        raise ValueError(f"{where}{name}: expected finite numbers (one is too large for a float)") from None
    except (TypeError, ValueError):
        raise ValueError(f"{where}{name}: expected a list (of equal-length lists) of numbers, written as "
                         "numbers") from None


def _shape(name: str, array: np.ndarray, shape: str, fits: bool) -> None:
    """ValueError naming ``name`` where ``array`` is not of ``shape`` (``fits`` false)."""
    if not fits:
        raise ValueError(f"{name}: expected {shape}, got shape {list(array.shape)}")


def _values(name: str, array: np.ndarray, what: str, hold: bool) -> None:
    """ValueError naming ``name`` where its values are not ``what`` (``hold`` false)."""
    if not hold:
        shown = np.array2string(array.ravel(), threshold=8, precision=4)
        raise ValueError(f"{name}: expected {what}, got {shown}")


def gate_from_json(value: object, methods: int, depth: int) -> Gate:
    """A policy file's ``gate`` (:mod:`specscope.policy.gate`; ValueError naming the field where
    malformed): ``methods`` and ``depth`` (J) bound its options' method indices and k."""
    names = ("options", "low", "high", "feature", "threshold", "left", "right", "value")
    if not isinstance(value, dict) or set(value) != set(names):
        raise ValueError(f"gate: expected an object with {', '.join(names)} (or null), got {value!r:.60}")
    options = value["options"]
    if not isinstance(options, list) or not all(
            isinstance(o, list) and len(o) == 2 and all(type(v) is int for v in o)
            and 0 <= o[0] < methods and 1 <= o[1] <= depth for o in options) or not options:
        raise ValueError(f"gate.options: expected [method index, k] pairs (0 … {methods - 1}, 1 … {depth}), got "
                         f"{options!r:.60}")
    width, arrays = len(ADMISSION_FEATURES), {}
    nodes = len(value["feature"]) if isinstance(value["feature"], list) else 0
    if not nodes:
        raise ValueError(f"gate.feature: expected a list of the tree's nodes (one at least), got {value['feature']!r:.40}")
    for name, shape in (("low", (nodes, width)), ("high", (nodes, width)), ("feature", (nodes,)), ("threshold", (nodes,)),
                        ("left", (nodes,)), ("right", (nodes,)), ("value", (nodes, len(options)))):
        arrays[name] = _numbers(value, name, "gate.")
        _shape(f"gate.{name}", arrays[name], str(list(shape)), arrays[name].shape == shape)
        _values(f"gate.{name}", arrays[name], "finite numbers", bool(np.all(np.isfinite(arrays[name]))))
    _values("gate.high", arrays["high"], "bounds no lower than gate.low", bool(np.all(arrays["low"] <= arrays["high"])))
    feature, left, right = (arrays[name] for name in ("feature", "left", "right"))
    at = np.arange(nodes)
    leaf = feature == LEAF
    _values("gate.feature", feature, f"feature indices (0 … {width - 1}, {LEAF} at a leaf)",
            bool(np.all((feature == np.round(feature)) & (feature >= LEAF) & (feature < width))))
    for name, child in (("left", left), ("right", right)):  # children after their node: the walk ends at a leaf
        _values(f"gate.{name}", child, f"a later node's index at a split, {LEAF} at a leaf",
                bool(np.all(np.where(leaf, child == LEAF, (child == np.round(child)) & (child > at) & (child < nodes)))))
    return Gate(tuple(map(tuple, options)), tuple(map(tuple, arrays["low"].tolist())),
                tuple(map(tuple, arrays["high"].tolist())),
                tuple(int(f) for f in feature), tuple(arrays["threshold"].tolist()), tuple(int(c) for c in left),
                tuple(int(c) for c in right), tuple(map(tuple, arrays["value"].tolist())))


def choosers_from_json(document: dict, methods: tuple[str, ...]) -> dict[int, Chooser]:
    """The decision rule per batch size of a policy document (ValueError when malformed)."""
    names = feature_names(methods)
    if not isinstance(document["features"], dict) or list(document["features"]) != list(names) \
            or not all(isinstance(text, str) for text in document["features"].values()):
        raise ValueError(f"features: expected the {len(names)} features of {', '.join(methods)} "
                         f"({', '.join(list(names)[:3])}, …), in order, each with its definition")
    for name, text in document["features"].items():  # a file states what its model reads: this code's reading
        if text != names[name]:
            raise ValueError(f"features.{name}: expected the definition this code computes, {names[name]!r}, "
                             f"got {text!r:.80}")
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field (expected {', '.join(FIELDS)})")
    width = len(names)
    coef = _numbers(document, "coef")  # [M, F]
    intercept = _numbers(document, "intercept")  # [M, J]
    base_rate = _numbers(document, "base_rate")  # [M, J]
    span = _numbers(document, "span")  # [M, 2] of coef · z, z the standardised features
    scale, mean = _numbers(document, "scale"), _numbers(document, "mean")
    m = len(methods)
    _shape("coef", coef, f"[{m}][{width}]", coef.shape == (m, width))
    _shape("intercept", intercept, f"[{m}][J], 1 <= J <= {K_MAX_LIMIT} (the deepest k an engine proposes)",
           intercept.ndim == 2 and intercept.shape[0] == m and 1 <= intercept.shape[1] <= K_MAX_LIMIT)
    _shape("base_rate", base_rate, f"[{m}][{intercept.shape[1]}]", base_rate.shape == intercept.shape)
    _values("base_rate", base_rate, "rates in (0, 1)", bool(np.all((base_rate > 0) & (base_rate < 1))))
    _shape("span", span, f"[{m}][2]", span.shape == (m, 2))
    _values("span", span, "[least, greatest] pairs, least <= greatest", bool(np.all(span[:, 0] <= span[:, 1])))
    _shape("mean", mean, f"[{width}]", mean.shape == (width,))
    _shape("scale", scale, f"[{width}]", scale.shape == (width,))
    _values("scale", scale, "positive scales", bool(np.all(scale > 0)))
    for name, value in (("coef", coef), ("scale", scale), ("mean", mean), ("intercept", intercept), ("span", span)):
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{name}: expected finite numbers")
    with np.errstate(all="ignore"):  # overflow to ±inf is refused below
        weights = coef / scale
        bias = intercept - (weights @ mean)[:, None]
        span = span + (weights @ mean)[:, None]  # coef · z = weights · x − weights · mean
    if not np.all(np.isfinite(weights)) or not np.all(np.isfinite(bias)) or not np.all(np.isfinite(span)):
        raise ValueError("coef, scale and mean: too large together (their products overflow)")
    pads, models = document["pads"], document["models"]
    if not isinstance(pads, bool):
        raise ValueError(f"pads: expected true or false, got {pads!r}")
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
        raise ValueError("models: expected a non-empty list of objects, one per batch size")
    choosers = {}
    lookups = [j for j, name in enumerate(methods) if method_named(name).kind == "lookup"]  # they draft nothing
    for i, model in enumerate(models):
        b = model.get("batch_size")
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BATCH_SIZE or b in choosers:
            raise ValueError(f"models[{i}].batch_size: expected an integer in 1 … {MAX_BATCH_SIZE}, once, got {b!r}")
        unknown = sorted(set(model) - set(MODEL_FIELDS))
        if unknown:
            raise ValueError(f"models[{i}] (batch size {b}): {unknown[0]}: unknown field (expected "
                             f"{', '.join(MODEL_FIELDS)})")
        seconds, fixed, verify = (_numbers(model, name, f"models[{i}] (batch size {b}): ")
                                  for name in MODEL_FIELDS[1:4])
        confidence = model.get("confidence")
        if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, (int, float))
                                       or not 0.0 < confidence <= 1.0):
            raise ValueError(f"models[{i}] (batch size {b}): confidence: expected a probability p, 0 < p <= 1, or "
                             f"null (the drafter's k not stopped by its confidence), got {confidence!r:.40}")
        shape = (len(methods), intercept.shape[1] + 1)
        try:
            gate = None if model.get("gate") is None else gate_from_json(model["gate"], len(methods), shape[1] - 1)
        except ValueError as error:
            raise ValueError(f"models[{i}] (batch size {b}): {error}") from None
        if seconds.shape != shape or fixed.shape != shape or verify.shape != shape[1:] \
                or not np.all((seconds > 0) & (seconds <= MAX_STEP_S)) \
                or not np.all((fixed >= 0) & (fixed <= MAX_STEP_S)) or not np.all((verify >= 0) & (verify <= seconds)):
            raise ValueError(f"models[{i}] (batch size {b}): expected seconds and fixed [{shape[0]}][{shape[1]}] "
                             f"(seconds above 0, at most {MAX_STEP_S:g}; fixed 0 … {MAX_STEP_S:g}) and verify [{shape[1]}] "
                             "(0 <= verify <= seconds)")
        if np.any(fixed[:, 0]) or np.any(fixed[lookups]):  # the chooser would count them as a drafting paid
            raise ValueError(f"models[{i}] (batch size {b}): fixed: expected 0 at k = 0 (first column) and in a "
                             f"lookup's row ({', '.join(methods[j] for j in lookups) or 'none here'}): nothing is "
                             "drafted there")
        choosers[b] = Chooser(weights, bias, seconds, methods.index("ngram") if "ngram" in methods else NONE,
                              base_rate, fixed, b, verify, pads, span,
                              None if confidence is None else float(confidence), gate)
    return choosers


def policy_notes(policy: LearnedPolicy, batch_sizes: Sequence[int] | None, target_dir: str | Path | None = None,
                 draft_dir: str | Path | None = None, fingerprint: Callable[[Path], str] | None = None) -> list[str]:
    """What an engine running ``policy`` at ``batch_sizes`` should be told: the cost model whose
    prices its choices weigh (fitted for another engine, it weighs that engine's), the batch
    sizes it was not fitted for (:meth:`LearnedPolicy.rule_notes`; None: a server, whose
    iterations run any number of rows — one line for all) and, given the engine's target, whether
    its traces came from it and its drafter (:func:`checkpoint_notes`)."""
    fitted = policy.document["cost_model"]["name"]
    sizes = ", ".join(map(str, sorted(policy.choosers)))
    return [f"{policy.label}: its choices weigh the prices of cost model {fitted!r}, whatever this engine's are (a "
            "policy fitted with a cost model of this engine weighs its own: `costmodel fit` of the step records of "
            "runs of each of its methods alone, `bench --method M --records FILE`)",
            *(policy.rule_notes(batch_sizes) if batch_sizes is not None else
              [f"{policy.label} was fitted at batch sizes {sizes}: an iteration of other rows decides by the nearest "
               "one's rule"]),
            *(checkpoint_notes(policy, target_dir, draft_dir, fingerprint)
              if target_dir is not None and fingerprint is not None else [])]
