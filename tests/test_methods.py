"""The table of methods against what reads it: the proposer registry, the memory models, the
engines' documented method names and every choice list derived from it."""

from __future__ import annotations

import argparse

import pytest

from specscope import methods
from specscope.costmodel.memory import MEMORY_MODELS
from specscope.errors import SpecscopeError
from specscope.methods import ENGINES, KINDS, METHODS, NO_SD, method, names

# vllm/config/speculative.py (SpeculativeMethod; "mtp" is the generic MTP name)
VLLM_METHODS = {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp"}
# sglang/srt/speculative/spec_info.py (SpeculativeAlgorithm; NEXTN is an alias of EAGLE)
SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN"}


def test_names_are_unique_and_none_is_no_method():
    assert len(set(methods.NAMES)) == len(METHODS)
    assert NO_SD not in methods.NAMES
    assert all(m.kind in KINDS for m in METHODS)


def test_unknown_method_is_one_line_listing_the_known_ones():
    with pytest.raises(SpecscopeError) as error:
        method("medusa")
    assert str(error.value) == "unknown method 'medusa' (known: ngram, draft, eagle, eagle3, mtp, suffix)"


def test_reference_methods_are_the_registered_proposers():
    from specscope.proposers import PROPOSERS

    assert sorted(PROPOSERS) == sorted(m.name for m in METHODS if m.reference)


def test_memory_models_are_the_drafters_with_weights():
    assert {m.memory_model for m in METHODS if m.memory_model} == set(MEMORY_MODELS)
    assert all((m.memory_model is None) == (m.kind == "lookup") for m in METHODS)


def test_engine_names_are_the_engines_own():
    assert {m.vllm_method for m in METHODS if m.vllm_method} <= VLLM_METHODS
    assert {m.sglang_algorithm for m in METHODS if m.sglang_algorithm} <= SGLANG_ALGORITHMS
    assert {e for m in METHODS for e in (*m.tree_engines, *m.learns_across_requests)} <= set(ENGINES)


@pytest.mark.parametrize("engine, expected", [
    (None, ("none", "ngram", "draft", "eagle", "eagle3", "mtp", "suffix")),
    ("vllm", ("none", "ngram", "draft", "eagle", "eagle3", "mtp", "suffix")),
    ("sglang", ("none", "ngram", "draft", "eagle", "eagle3", "mtp")),
    ("specscope", ("none", "ngram", "draft", "eagle", "eagle3", "mtp")),
])
def test_choice_lists_per_engine(engine, expected):
    assert names(engine) == expected
    assert names(engine, baseline=False) == expected[1:]


@pytest.mark.parametrize("name, engine, expected", [
    ("mtp", "specscope", True), ("mtp", "vllm", False), ("mtp", "sglang", False),  # MTP layers in the target
    ("eagle3", "vllm", True), ("draft", "sglang", True), ("ngram", "specscope", False), ("suffix", "vllm", False),
])
def test_needs_draft(name, engine, expected):
    assert method(name).needs_draft(engine) is expected


@pytest.mark.parametrize("name, engine, expected", [
    ("ngram", "sglang", True),  # one trie of every request's tokens
    ("ngram", "vllm", False),  # prompt lookup in the request itself
    ("suffix", "vllm", True),
    ("ngram", None, True),  # engine unknown: any engine's rule
    ("ngram", "tgi", True),
    ("eagle", None, False),
])
def test_learns_across_requests(name, engine, expected):
    assert method(name).learns_on(engine) is expected


def test_trees_only_with_model_drafters_and_vllm_only_in_its_eagle_proposer():
    assert all(not m.tree_engines for m in METHODS if m.kind == "lookup")
    assert [m.name for m in METHODS if m.drafts_trees_on("vllm")] == ["eagle", "eagle3"]
    assert [m.name for m in METHODS if m.drafts_trees_on("specscope")] == ["draft", "eagle", "eagle3", "mtp"]


def test_of_kind():
    assert [m.name for m in methods.of_kind("head")] == ["eagle", "eagle3", "mtp"]
    with pytest.raises(ValueError, match="unknown method kind"):
        methods.of_kind("heads")


def _flags(register) -> set[str]:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    [sub] = parser._subparsers._group_actions[0].choices.values()
    return {option for action in sub._actions for option in action.option_strings}


def test_cli_flags_follow_the_table():
    from specscope.cli import memory, study

    assert {f"--{m.name}" for m in METHODS if m.memory_model} <= _flags(memory.register)
    assert {f"--{m.name}" for m in METHODS if m.reference and m.needs_checkpoint} <= _flags(study.register)
