"""The table of speculative-decoding methods: the one place that knows what each method is.

A **method** is what the engine verbs call ``--method`` (vLLM's ``speculative_config.method``):
a proposer family. Every choice list (CLI, sweep, launchers), the engines' own names for a
method, the memory model and the zoo are read from :data:`METHODS`; nothing else dispatches on
method names. The implementations stay where they are: each proposer module registers itself
(:mod:`specscope.proposers.registry`), each memory model lives in
:mod:`specscope.costmodel.memory`. :data:`NO_SD` (``none``) is the baseline without
speculation; it is not a method of the table, nor is :data:`LEARNED` (``learned``), an engine
switching per step between methods as a policy file says.

Fields of :class:`Method`:

- ``kind`` — ``lookup`` (drafts by matching earlier tokens, no model), ``draft model`` (a
  separate smaller LM) or ``head`` (layers reading the target's hidden states);
- ``needs_checkpoint`` — specscope's engine needs a draft or head directory; with
  ``checkpoint_in_target`` vLLM and SGLang read it from the target checkpoint instead (MTP);
- ``vllm_method`` / ``sglang_algorithm`` — vLLM's ``speculative_config.method`` and SGLang's
  ``--speculative-algorithm`` (``None``: that engine lacks the method);
- ``prompt_lookup`` — it takes ``prompt_lookup_min``/``max``, the n-gram match window;
- ``learns_across_requests`` — the engines on which the method learns from earlier requests
  (SGLang's NGRAM trie of every request's tokens, vLLM's suffix tree over past outputs);
- ``reference`` — specscope's own engine implements it;
- ``tree_engines`` — the engines on which it drafts a static token tree
  (:mod:`specscope.trees`): model drafters rank children; vLLM drafts trees only in its EAGLE
  proposer (``eagle``, ``eagle3``);
- ``memory_model`` — the key of its memory model (``None``: no weights, no KV cache).
"""

from __future__ import annotations

from dataclasses import dataclass

from specscope.errors import SpecscopeError

NO_SD = "none"  # the method name of a run without speculative decoding
LEARNED = "learned"  # the method an engine running a policy file reports (step records, bench rows)
BENCH_DEFAULT = "default"  # the proposer of a SpecDecode-Bench file's single ``acc`` field (no method named)
ENGINES = ("vllm", "sglang", "specscope")  # the serving engines specscope launches
KINDS = ("lookup", "draft model", "head")


@dataclass(frozen=True)
class Method:
    """One speculative-decoding method (see the module docstring for each field)."""

    name: str
    kind: str
    needs_checkpoint: bool
    vllm_method: str | None
    sglang_algorithm: str | None
    reference: bool
    memory_model: str | None
    prompt_lookup: bool = False
    learns_across_requests: tuple[str, ...] = ()
    tree_engines: tuple[str, ...] = ()
    checkpoint_in_target: bool = False

    def on(self, engine: str) -> bool:
        """Whether ``engine`` (one of :data:`ENGINES`) runs this method."""
        return {"vllm": self.vllm_method is not None, "sglang": self.sglang_algorithm is not None,
                "specscope": self.reference}[engine]

    def needs_draft(self, engine: str) -> bool:
        """Whether ``engine`` needs a draft model or head directory for this method."""
        return self.needs_checkpoint and not (self.checkpoint_in_target and engine != "specscope")

    def learns_on(self, engine: str | None) -> bool:
        """Whether it learns from earlier requests on ``engine`` (on any engine when the engine
        is ``None`` or not one of :data:`ENGINES`)."""
        if engine in ENGINES:
            return engine in self.learns_across_requests
        return bool(self.learns_across_requests)

    def drafts_trees_on(self, engine: str) -> bool:
        """Whether ``engine`` drafts a static token tree with this method."""
        return engine in self.tree_engines


METHODS: tuple[Method, ...] = (
    # name, kind, needs_checkpoint, vllm_method, sglang_algorithm, reference, memory_model, ...
    Method("ngram", "lookup", False, "ngram", "NGRAM", True, None, prompt_lookup=True,
           learns_across_requests=("sglang",)),
    Method("draft", "draft model", True, "draft_model", "STANDALONE", True, "draft",
           tree_engines=("sglang", "specscope")),
    Method("eagle", "head", True, "eagle", "EAGLE", True, "eagle", tree_engines=ENGINES),
    Method("eagle3", "head", True, "eagle3", "EAGLE3", True, "eagle3", tree_engines=ENGINES),
    # vLLM maps the generic "mtp" to the model's own MTP layers; SGLang runs MTP as EAGLE
    # (its NEXTN is an alias) on the target's MTP layers
    Method("mtp", "head", True, "mtp", "EAGLE", True, "mtp", tree_engines=("sglang", "specscope"),
           checkpoint_in_target=True),
    Method("suffix", "lookup", False, "suffix", None, False, None, learns_across_requests=("vllm",)),
)
NAMES: tuple[str, ...] = tuple(m.name for m in METHODS)
_BY_NAME = {m.name: m for m in METHODS}


def proposal_label(method_name: str, k: int, tree: str | None = None) -> str:
    """What a run of ``method_name`` proposes: ``ngram k=3``, ``eagle tree=2x1x1`` (``tree``: a
    static tree's name), ``none``."""
    if method_name == NO_SD:
        return NO_SD
    return f"{method_name} tree={tree}" if tree else f"{method_name} k={k}"


def run_label(method_name: str, tree: str | None = None, confidence: float | None = None) -> str:
    """A measured run's method as tables and figures name it: ``eagle``, ``eagle tree:2x1x1`` (a
    static tree), ``eagle confidence:0.9`` (a drafter stopped at its first draft below p)."""
    if tree is not None:
        return f"{method_name} tree:{tree}"
    return method_name if confidence is None else f"{method_name} confidence:{confidence!r}"


def check_confidence(threshold: float, method_name: str, tree: str | None = None) -> None:
    """``confidence:p`` in an engine (``--confidence``) needs a model drafter specscope's engine runs
    (it reads its probability of each draft) drafting chains, not ``tree``, and 0 < p ≤ 1."""
    drafters = [m.name for m in METHODS if m.kind != "lookup" and m.reference]
    if not 0.0 < threshold <= 1.0:
        raise SpecscopeError(f"--confidence: expected a probability p, 0 < p <= 1, got {threshold!r}")
    if method_name not in drafters:
        raise SpecscopeError(f"--confidence: needs a model drafter, which knows its probability of each draft "
                             f"({', '.join(drafters)}); got {method_name}")
    if tree is not None:
        raise SpecscopeError(f"--confidence: drafts chains (up to k, stopping at an unconfident draft), not tree {tree}")


def method(name: str) -> Method:
    """The method called ``name``; an unknown name is a one-line error listing the known ones."""
    found = _BY_NAME.get(name)
    if found is None:
        raise SpecscopeError(f"unknown method {name!r} (known: {', '.join(NAMES)}){default_hint(name)}")
    return found


def default_hint(name: str) -> str:
    """What to say of proposer ``name`` where a method is expected: the SpecDecode-Bench ``acc``
    field reads as proposer ``default``, which no method is until it is renamed."""
    return ("; a trace's SpecDecode-Bench 'acc' field reads as proposer 'default': name its method with "
            "`specscope traces convert --rename default=METHOD`") if name == BENCH_DEFAULT else ""


def names(engine: str | None = None, *, baseline: bool = True) -> tuple[str, ...]:
    """Method names that ``engine`` runs (all when ``None``), led by :data:`NO_SD` unless
    ``baseline`` is false: the choice lists of the CLI, the sweep and the launchers."""
    chosen = tuple(m.name for m in METHODS if engine is None or m.on(engine))
    return (NO_SD, *chosen) if baseline else chosen


def of_kind(kind: str) -> tuple[Method, ...]:
    """The methods of ``kind`` (one of :data:`KINDS`), in table order."""
    if kind not in KINDS:
        raise ValueError(f"unknown method kind {kind!r}; expected one of {KINDS}")
    return tuple(m for m in METHODS if m.kind == kind)
