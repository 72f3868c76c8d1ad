"""The import structure: packages sit in layers and import only their own layer or lower ones,
and no two packages import each other, directly or around a loop. Lazy imports inside
functions count too. See docs/ARCHITECTURE.md for what each layer holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "specscope"

# bottom to top; a unit is a subpackage or a top-level module of specscope
LAYERS: list[tuple[str, ...]] = [
    ("__init__", "errors", "validate", "progress", "written", "reading", "fingerprint", "fileio", "trees", "methods",
     "version"),
    ("trace", "costmodel", "workloads", "policy"),
    ("engine",),
    ("proposers",),
    ("assemble",),
    ("sim", "theory", "tracing", "serve", "zoo"),
    ("analysis", "backends"),
    ("report", "distributed"),
    ("study",),
    ("cli",),
    ("__main__",),
]
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def unit_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imported_units(path: Path) -> set[str]:
    """The specscope units that ``path`` imports anywhere in it (module level or lazily)."""
    units = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "specscope" else [f"specscope.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "specscope":
                units.add(parts[1] if len(parts) > 1 else "__init__")
    return units


def import_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the files that import it."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = unit_of(path)
        for other in imported_units(path) - {unit}:
            graph.setdefault(unit, {}).setdefault(other, []).append(str(path.relative_to(PACKAGE)))
    return graph


def test_every_unit_has_a_layer():
    units = {unit_of(p) for p in PACKAGE.rglob("*.py")}
    assert sorted(units - set(LAYER_OF)) == [], "add the new package to LAYERS (and docs/ARCHITECTURE.md)"


def test_no_import_runs_up_a_layer():
    upward = [f"{files[0]} imports {other} (layer {LAYER_OF[other]}) from layer {LAYER_OF[unit]}"
              for unit, targets in import_graph().items() for other, files in targets.items()
              if LAYER_OF.get(other, -1) > LAYER_OF.get(unit, -1)]
    assert upward == []


def test_no_import_loops():
    graph = {unit: set(targets) for unit, targets in import_graph().items()}
    loops = []

    def visit(unit: str, trail: list[str]) -> None:
        for other in sorted(graph.get(unit, ())):
            if other in trail:
                loops.append(" -> ".join(trail[trail.index(other):] + [other]))
            elif len(trail) < len(graph) + 1:
                visit(other, trail + [other])

    for start in sorted(graph):
        visit(start, [start])
    assert loops == []


@pytest.mark.parametrize("source, expected", [
    ("from specscope.engine.model import Transformer", {"engine"}),
    ("def f():\n    from specscope.sim import grid", {"sim"}),
    ("from specscope import validate, errors", {"validate", "errors"}),
    ("import specscope.trace.load", {"trace"}),
    ("from .sibling import x", set()),
])
def test_imports_are_read(tmp_path, source, expected, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert imported_units(path) == expected
