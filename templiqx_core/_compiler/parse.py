"""Strict contract loading: YAML syntax and structure errors become located diagnostics."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .. import codes
from .._canonical import json_pointer
from .._contracts import Diagnostic, SourceSpan
from .._errors import IoFailure, NotFound
from .._loading import compose_and_load, contract_source
from .model import Contract

_Read = tuple[Contract | None, list[Diagnostic]]
_READS: ContextVar[dict[str, _Read] | None] = ContextVar("templiqx_contract_reads", default=None)


@contextmanager
def reading_each_file_once() -> Iterator[None]:
    """Within the block, each contract file is read and validated once (a CLI run reads
    its contract to compile it and again for its declared capabilities); scoped to the
    block (a context variable), so no host ever sees a stale contract."""
    token = _READS.set({})
    try:
        yield
    finally:
        _READS.reset(token)


def _mark_for(root: yaml.Node | None, loc: Sequence[Any]) -> yaml.Mark | None:
    """Walk the composed YAML tree along a pydantic error location; the deepest mark found."""
    node, mark = root, root.start_mark if root is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == str(part)), None)
            if found is None:
                key = next((k for k, _ in node.value if k.value == str(part)), None)
                return key.start_mark if key is not None else mark
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return mark
            node = node.value[part]
        else:
            continue  # a union-member tag in the location, not a document key
        mark = node.start_mark
    return mark


def _error(message: str, file: str | None, mark: yaml.Mark | None = None, **at: Any) -> Diagnostic:
    """A ``TQX_PARSE_YAML`` diagnostic, at ``mark`` (line and column) when known."""
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
        at["span"] = SourceSpan(line=line, column=column, end_line=line, end_column=column)
    return Diagnostic(code=codes.PARSE_YAML, severity="error", message=message, file=file, **at)


def _clean_loc(data: Any, loc: Sequence[Any]) -> list[Any]:
    """The document keys and indices of a pydantic error location, without the union tags
    pydantic puts in (``interpolate``, ``literal[...]``, ``TypedComponent``): walking the
    document tells them apart. A last segment absent from the document is kept unless it
    is a tag: it names a missing field."""
    cleaned: list[Any] = []
    node = data
    for index, part in enumerate(loc):
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_list or (isinstance(node, dict) and part in node):
            node = node[part]
        elif index < len(loc) - 1 or "[" in str(part) or str(part)[:1].isupper():
            continue  # a union tag
        cleaned.append(part)
    return cleaned


def parse_contract(
    text: str, *, file: str | None = None
) -> tuple[Contract | None, list[Diagnostic]]:
    """Parse contract YAML; structure errors carry a JSON pointer and line/column."""
    try:
        root, data = compose_and_load(text)  # one parse: the tree locates errors
    except RecursionError:  # only PyYAML's pure-Python composer recurses (no libyaml)
        return None, [_error("invalid YAML: nested too deeply to parse", file)]
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or "malformed YAML"
        return None, [
            _error(f"invalid YAML: {problem}", file, getattr(error, "problem_mark", None))
        ]
    if not isinstance(data, dict):
        return None, [_error("a contract is a YAML mapping", file)]
    try:
        return Contract.model_validate(data), []
    except ValidationError as error:
        diagnostics: dict[tuple[str, str], Diagnostic] = {}  # each (pointer, rule) once
        for item in error.errors(include_url=False, include_input=False):
            loc = _clean_loc(data, item["loc"])
            pointer, rule = json_pointer(loc), item["msg"]
            if (pointer, rule) not in diagnostics:
                mark = _mark_for(root, loc)
                message = f"{pointer or '/'}: {rule}"
                found = _error(message, file, mark, json_pointer=pointer)
                if item["type"] == "template_syntax":  # located by pointer and offset
                    found = found.model_copy(update={"code": codes.TEMPLATE_SYNTAX})
                diagnostics[pointer, rule] = found
        return None, list(diagnostics.values())


def read_contract(path: str | Path) -> tuple[Contract | None, list[Diagnostic]]:
    """Read and parse a contract file; a missing or unreadable one is a diagnostic too."""
    memo = _READS.get()
    key = os.fspath(path)
    found = memo.get(key) if memo is not None else None
    source = contract_source(key) if found is None else None
    if source is not None:  # ``langfuse:NAME@LABEL``: a contract source's, checked there
        found = source(key)
        if memo is not None:
            memo[key] = found
    elif found is None:
        file = str(Path(path))
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            missing = isinstance(error, FileNotFoundError)
            code = NotFound.code if missing else IoFailure.code
            reason = "no such file" if missing else type(error).__name__
            message = f"cannot read contract: {reason}"
            found = None, [Diagnostic(code=code, severity="error", message=message, file=file)]
        else:
            found = parse_contract(text, file=file)
        if memo is not None:
            memo[key] = found
    contract, diagnostics = found
    return contract, list(diagnostics)
