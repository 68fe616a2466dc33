"""The modules of both packages import each other without a cycle.

Module-level imports only (what runs at import time): an import inside a function is how
an optional part (the testing package, the MCP extra) is reached lazily, on purpose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

#: Checks of the source: run once, in the lint step of .ci/run.
pytestmark = pytest.mark.lint

PACKAGES = ("templiqx_core", "templiqx_langfuse")


def module_files() -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at import time (into try/if blocks, not TYPE_CHECKING ones)."""
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from module_level(node.orelse)
        elif isinstance(node, (ast.If, ast.Try)):
            yield from module_level(node.body)
            yield from module_level(node.orelse)
            for handler in getattr(node, "handlers", []):
                yield from module_level(handler.body)
        else:
            yield node


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    is_package = path.name == "__init__.py"
    edges = set()
    for node in module_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        edges.update(target for target in targets if target in known and target != name)
    return edges


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


def test_the_import_graph_has_no_cycle() -> None:
    files = module_files()
    graph = {name: imports_of(name, path, set(files)) for name, path in files.items()}
    assert graph["templiqx_core._ports"]  # the graph is really built
    assert "templiqx_core._receipts" in graph["templiqx_core._ports"]
    assert find_cycle(graph) is None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
