"""The import contract: a lower layer never imports a higher one.

Every module's imports are read with ``ast`` (nothing is imported), so a
new import that breaks the order fails here, naming the file and the line,
before it becomes a cycle or drags a client into the pure code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "modelplane"

# Bottom to top. A unit (a module or a package directly under modelplane)
# may import its own modules and those of lower layers only; units of one
# layer do not import each other.
LAYERS: list[set[str]] = [
    # The words written to a ServingStack (condition types, reasons, event
    # reasons), which every layer names; how Kubernetes reads YAML's
    # scalars, keys and merges (go-yaml v2's rules).
    {"vocabulary", "kubeyaml"},
    # Values and rules for hostile text, the wire's shared names, the pins,
    # the kinds of failure and the retry policy.
    {"untrusted", "wire", "pins", "faults", "backoff"},
    # Every fact about the substrate, as data.
    {"catalog"},
    # The ServingStack's models, validated against the catalog.
    {"api"},
    # Pure decisions: what to install, what changed, when to retry.
    {"plan"},
    # Kubernetes access: the only layer that talks to an API server.
    {"kube"},
    # Reading a target: its credentials, its state.
    {"credentials", "observe"},
    # Acting on a target, and checking one.
    {"actions", "checks"},
    {"operator"},
    {"cli"},
]
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}

# Imports that go up the order, each with its reason. Only imports made for
# type checking (under ``if TYPE_CHECKING:``) may be listed: they cost
# nothing at run time and make no cycle.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("catalog", "api"): (
        "a component's rules take the ServingStackSpec, while the spec's models validate "
        "against the catalog: the catalog names the spec in annotations only"
    ),
}

# The operator's public entry point; the CLI uses nothing else of it.
OPERATOR_ENTRY = "modelplane.operator"


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str
    typing_only: bool

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(SRC.parent)}:{self.line} imports {self.module}"


def _typing_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, text: str | None = None) -> list[Import]:
    """Every ``modelplane`` import of a module, at any depth (functions too)."""
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    package = ".".join(("modelplane", *path.relative_to(SRC).with_suffix("").parts[:-1]))
    out: list[Import] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = typing_only or _typing_block(child)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = package.rsplit(".", child.level - 1)[0] if child.level else ""
                module = ".".join(p for p in (base, child.module or "") if p)
                # "from modelplane import kube" imports the unit it names.
                names = (
                    [f"{module}.{a.name}" for a in child.names]
                    if module == "modelplane"
                    else [module]
                )
            for name in names:
                if name.startswith("modelplane."):
                    out.append(Import(path, getattr(child, "lineno", 0), name, inner))
            visit(child, inner)

    visit(tree, False)
    return out


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p != SRC / "__init__.py")


def test_every_unit_has_a_layer() -> None:
    units = {p.relative_to(SRC).with_suffix("").parts[0] for p in _modules()}
    assert units == set(LAYER_OF), "add the new unit to LAYERS, where its imports put it"


def violations() -> list[str]:
    out = []
    for path in _modules():
        unit = path.relative_to(SRC).with_suffix("").parts[0]
        for imp in imports_of(path):
            target = unit_of(imp.module)
            if target in ("", unit):
                continue
            if LAYER_OF[target] < LAYER_OF[unit]:
                continue
            if imp.typing_only and (unit, target) in EXCEPTIONS:
                continue
            out.append(f"{imp.where} ({unit} may not import {target})")
    return out


def test_no_layer_imports_a_higher_one() -> None:
    assert violations() == []


def test_every_exception_is_still_needed() -> None:
    # An exception nothing uses any more is removed, so it cannot hide a new import.
    used = {
        (path.relative_to(SRC).with_suffix("").parts[0], unit_of(imp.module))
        for path in _modules()
        for imp in imports_of(path)
        if imp.typing_only
    }
    assert set(EXCEPTIONS) <= used


def test_the_cli_uses_only_the_operators_entry_point() -> None:
    reached = [
        imp.where
        for path in sorted((SRC / "cli").rglob("*.py"))
        for imp in imports_of(path)
        if unit_of(imp.module) == "operator" and imp.module != OPERATOR_ENTRY
    ]
    assert reached == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from modelplane.kube.client import open_target\n", True),
        ("import modelplane.kube\n", True),
        ("from modelplane import kube\n", True),
        ("from .. import kube\n", True),
        ("from ..kube.errors import classify\n", True),
        ("def f():\n    from modelplane.kube import errors\n", True),
        ("import lightkube\n", False),
        ("from . import model\n", False),
    ],
)
def test_the_reader_finds_every_kind_of_import(source: str, found: bool) -> None:
    # Read as a module of plan/ would be: each reaches kube, but the last two.
    seen = imports_of(SRC / "plan" / "probe.py", source)
    assert any(unit_of(i.module) == "kube" for i in seen) is found


def test_an_import_for_type_checking_only_is_told_apart() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import modelplane.kube\n"
    [imp] = imports_of(SRC / "plan" / "probe.py", source)
    assert imp.typing_only
    # ... and is a violation all the same unless EXCEPTIONS lists its pair.
    assert ("plan", "kube") not in EXCEPTIONS
