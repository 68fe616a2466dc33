"""Every stable ``TQX_*`` code lives in ``templiqx_core.codes``, and only there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from templiqx_core import PortError, RuntimeFailureCode, codes
from templiqx_core._errors import (
    InvalidData,
    InvalidPath,
    IoFailure,
    NotFound,
    RuntimeClosed,
    Unsupported,
)
from tests.conftest import REPO_ROOT

CODE = re.compile(r"TQX_[A-Z0-9_]*[A-Z0-9]")


def code_literals(path: Path) -> list[str]:
    """``TQX_*`` codes written as string literals (docstrings and prefix checks aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            found += CODE.findall(node.value)
    return found


def test_no_code_is_spelled_outside_the_codes_module() -> None:
    offenders = {
        str(path.relative_to(REPO_ROOT)): literals
        for package in ("templiqx_core", "templiqx_langfuse")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if path.name != "codes.py" and (literals := code_literals(path))
    }
    assert offenders == {}, "use templiqx_core.codes constants"


def test_every_code_is_a_distinct_tqx_string() -> None:
    values = [getattr(codes, name) for name in codes.__all__ if name != "ALL_CODES"]
    assert len(values) == len(set(values)) == len(codes.ALL_CODES)
    assert all(CODE.fullmatch(value) for value in values)


def test_the_error_tree_and_failure_codes_come_from_the_codes_module() -> None:
    errors = [PortError, NotFound, InvalidPath, Unsupported, IoFailure, InvalidData]
    assert {e.code for e in [*errors, RuntimeClosed]} <= codes.ALL_CODES
    assert {c.value for c in RuntimeFailureCode} <= codes.ALL_CODES
