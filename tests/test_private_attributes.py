"""Product code reads no other library's private attributes.

A ``._name`` (or ``__name__``-style dunder) read on an object is ours only if our own code
defines that name somewhere (a class, function, module, argument or assigned attribute);
anything else is another library's internals, which its next release may move (the
transport once followed five of them down to h11). Found by parsing, not by grepping
text, so comments and strings do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

#: Checks of the source: run once, in the lint step of .ci/run.
pytestmark = pytest.mark.lint

PRODUCT = [
    REPO_ROOT / "templiqx_core",
    REPO_ROOT / "templiqx_langfuse",
    REPO_ROOT / "examples" / "streaming_host" / "templiqx_streaming_host",
    REPO_ROOT / "examples" / "fastapi_app",
]
# Python's own protocol names, not a library's internals.
_LANGUAGE_DUNDERS = frozenset(
    {"__setattr__", "__new__", "__name__", "__class__", "__version__", "__dict__", "__doc__"}
)
OURS = {"templiqx_core", "templiqx_langfuse", "templiqx_streaming_host", "examples"}


def _imported_modules(node: ast.AST) -> list[str]:
    """Absolute modules an import names (a private module of a library counts too)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def _files() -> list[Path]:
    return sorted(path for root in PRODUCT for path in root.rglob("*.py"))


def _own_names(trees: list[ast.Module]) -> set[str]:
    own: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in {"self", "cls", "instance"}
            ):
                own.add(node.attr)  # our own objects' attributes (writing others' counts)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, ast.alias):
                own.add((node.asname or node.name).rsplit(".", 1)[-1])
    return own


def private_reads() -> set[tuple[str, str]]:
    files = _files()
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in files]
    own = _own_names(trees)
    found: set[tuple[str, str]] = set()
    for path, tree in zip(files, trees, strict=True):
        where = path.relative_to(REPO_ROOT).as_posix()
        for node in ast.walk(tree):
            for module in _imported_modules(node):
                private = [part for part in module.split(".") if part.startswith("_")]
                if private and module.split(".")[0] not in OURS | {"__future__"}:
                    found.add((where, module))
            name: str | None = None
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
            if name is None or not name.startswith("_") or name in _LANGUAGE_DUNDERS:
                continue
            dunder = name.startswith("__") and name.endswith("__")
            if dunder and name not in {"__pydantic_private__"}:
                continue  # protocol methods (__enter__, __aiter__...) are public by design
            if name not in own or dunder:
                found.add((where, name))
    return found


def test_product_code_reads_no_other_librarys_private_attributes() -> None:
    assert private_reads() == set()


def test_the_scan_catches_an_import_of_a_private_module() -> None:
    tree = ast.parse("from httpx._config import DEFAULT_LIMITS\nimport httpcore2._async\n")
    modules = [m for node in ast.walk(tree) for m in _imported_modules(node)]
    assert modules == ["httpx._config", "httpcore2._async"]


def test_the_scan_catches_a_private_read() -> None:
    """The scanner itself, on the transport as it was: reading httpx's ``_transport`` and
    ``_mounts``, replacing httpcore's ``_pool._network_backend``."""
    tree = ast.parse(
        "def check(client):\n    return [client._transport, *client._mounts.values()]\n"
        "class T:\n    def wrap(self):\n        self._pool._network_backend = None\n"
    )
    own = _own_names([tree])
    reads = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} - own
    assert reads >= {"_transport", "_mounts", "_pool", "_network_backend"}
