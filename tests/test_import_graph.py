"""The import graph of the shipped packages: no cycle, no arrow from the core up to the
adapter, and no package reaching into another's private modules.

Every import counts, wherever it is: a function-local import runs too, only later. An
import under ``if TYPE_CHECKING:`` never runs, so it is left out of the cycle check (that
is how a type-only reference is written), but not out of the direction and privacy
checks. ``from package import name`` also reaches the module a lazily loading package
(PEP 562) imports ``name`` from.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import REPO_ROOT

#: Checks of the source: run once, in the lint step of .ci/run.
pytestmark = pytest.mark.lint

PACKAGES = {
    "templiqx_core": REPO_ROOT / "templiqx_core",
    "templiqx_langfuse": REPO_ROOT / "templiqx_langfuse",
    "templiqx_streaming_host": REPO_ROOT / "examples/streaming_host/templiqx_streaming_host",
}
_CHECKING = re.compile(r"(not )?(\w+\.)?TYPE_CHECKING")
_IMPORT_CALLS = {"importlib.import_module", "import_module", "__import__"}


class Import(NamedTuple):
    module: str  # dotted, absolute
    name: str | None  # ``from module import name``
    runs: bool  # False: under ``if TYPE_CHECKING:``, for type checkers only


def module_files() -> dict[str, Path]:
    files = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def imports_in(name: str, path: Path) -> Iterator[Import]:
    """Every import of the module ``name`` at ``path``: module level, in functions and
    classes, in ``try``/``if`` blocks, and ``import_module("...")`` with a literal name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, runs: bool) -> Iterator[Import]:
        if isinstance(node, ast.If) and (found := _CHECKING.fullmatch(ast.unparse(node.test))):
            checking, running = (node.orelse, node.body) if found[1] else (node.body, node.orelse)
            for child in checking:
                yield from walk(child, False)
            for child in running:
                yield from walk(child, runs)
            return
        if isinstance(node, ast.Import):
            yield from (Import(alias.name, None, runs) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (Import(base, alias.name, runs) for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in _IMPORT_CALLS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Import(node.args[0].value, None, runs)
        for child in ast.iter_child_nodes(node):
            yield from walk(child, runs)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), True)


def all_imports() -> dict[str, list[Import]]:
    return {name: list(imports_in(name, path)) for name, path in module_files().items()}


def graph_of(imports: dict[str, list[Import]]) -> dict[str, set[str]]:
    """Module → the modules it imports at run time (now or when a function runs)."""
    known, files = set(imports), module_files()
    origin = {  # a package's name → the module it imports it from (lazily or not)
        (package, found.name): found.module
        for package in known
        if files[package].name == "__init__.py"
        for found in imports[package]
        if found.name is not None and found.module in known
    }
    graph: dict[str, set[str]] = {}
    for name, found in imports.items():
        targets = set()
        for item in found:
            if not item.runs:
                continue
            dotted = f"{item.module}.{item.name}"
            if dotted in known:  # ``from package import submodule``
                targets.add(dotted)
            else:
                targets |= {item.module, origin.get((item.module, item.name), item.module)}
        graph[name] = {target for target in targets if target in known and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def private(item: Import) -> bool:
    """A ``_private`` module (at any depth) or a ``_private`` name (dunders are public)."""
    parts = item.module.split(".")[1:]
    name = item.name or ""
    return any(part.startswith("_") for part in parts) or (
        name.startswith("_") and not name.endswith("__")
    )


def test_the_import_graph_has_no_cycle_counting_function_local_imports() -> None:
    graph = graph_of(all_imports())
    assert "templiqx_core._receipts" in graph["templiqx_core._ports"]  # the graph is built
    assert "templiqx_core._loading" in graph["templiqx_core._cli"]  # from inside a function
    # ``from templiqx_core import parse_contract``: the module the package loads it from
    assert "templiqx_core._compiler" in graph["templiqx_langfuse._prompts"]
    assert find_cycle(graph) is None


def test_the_core_never_imports_the_adapter_or_the_example() -> None:
    upward = [
        f"{name} -> {item.module}"
        for name, found in all_imports().items()
        if name.split(".")[0] == "templiqx_core"
        for item in found
        if item.module.split(".")[0] in PACKAGES.keys() - {"templiqx_core"}
    ]
    assert upward == []


def test_no_package_imports_a_private_module_of_another() -> None:
    """The adapter uses the core's public names only, the streaming example both packages'."""
    imports = all_imports()
    example = imports["templiqx_streaming_host._runtime"]  # the example is checked
    assert Import("templiqx_core.adapters", "RuntimeCall", True) in example
    reaching = [
        f"{name} -> {item.module}" + (f" ({item.name})" if item.name else "")
        for name, found in imports.items()
        for item in found
        if item.module.split(".")[0] in PACKAGES.keys() - {name.split(".")[0]} and private(item)
    ]
    assert reaching == []


def test_the_checks_see_every_kind_of_import(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "import typing\n"
        "from . import sibling\n"
        "from .._up import helper\n"
        "if typing.TYPE_CHECKING:\n"
        "    from pkg.types import T\n"
        "else:\n"
        "    from pkg.runtime import R\n"
        "if not TYPE_CHECKING:\n"
        "    from pkg.lazy import L\n"
        "def later():\n"
        "    from pkg.inner import f\n"
        "    importlib.import_module('pkg.plugin')\n",
        "utf-8",
    )
    assert list(imports_in("pkg.sub.mod", source)) == [
        Import("typing", None, True),
        Import("pkg.sub", "sibling", True),
        Import("pkg._up", "helper", True),
        Import("pkg.types", "T", False),
        Import("pkg.runtime", "R", True),
        Import("pkg.lazy", "L", True),
        Import("pkg.inner", "f", True),
        Import("pkg.plugin", None, True),
    ]
    assert private(Import("pkg._up", "helper", True))
    assert private(Import("pkg.api", "_hidden", True))
    assert not private(Import("pkg", "__version__", True))
    assert not private(Import("pkg.api", "public", True))


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
