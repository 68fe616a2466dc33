"""Strict loading of JSON and YAML documents from files, with errors that name the file."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from . import codes
from ._canonical import MAX_DEPTH  # one nesting bound for every document and value
from ._errors import InvalidData, NotFound

if TYPE_CHECKING:  # pydantic loads only when a model is validated (CLI start-up)
    from importlib.metadata import EntryPoint

    from pydantic import BaseModel

_R = TypeVar("_R", bound=type[yaml.resolver.BaseResolver])
_EXPONENT = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")


def exponent_floats(cls: _R) -> _R:
    """``1e-05`` as a float, as the reference (YAML 1.2, JSON) reads it; a dumper quotes it."""
    cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+.0123456789"))
    return cls


@exponent_floats
class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe YAML loader refusing duplicate keys, on libyaml when PyYAML has it."""


def _construct_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> Iterator[dict[Any, Any]]:
    # A generator, as PyYAML's own: filled once the loader resumes it (no recursion).
    mapping: dict[Any, Any] = {}
    yield mapping
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        hashable = isinstance(key, Hashable)  # ``? [a, b]`` makes a list
        if not hashable or key in mapping:
            problem = f"duplicate key {key!r}" if hashable else "found unhashable key"
            raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
        mapping[key] = loader.construct_object(value_node)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


#: Nodes and characters aliases may add to the document's own: any sane reuse of an anchor, far
#: below a "billion laughs" or one long string reused 90 000 times (gigabytes once serialized).
MAX_ALIAS_EXPANSION = 100_000
MAX_ALIAS_EXPANSION_BYTES = 16 * 1024 * 1024


def _check_alias_expansion(root: yaml.Node, own_size: int = 0) -> None:
    """Refuse a node graph whose aliases expand past the bounds above or form a cycle, or
    nesting deeper than ``MAX_DEPTH`` (libyaml stops at 1000). Memoised per node, iterative."""
    byte_budget = own_size + MAX_ALIAS_EXPANSION_BYTES
    done: dict[int, tuple[int, int, int]] = {}  # expanded nodes, characters, depth
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            below = [done[id(child)] for child in _children(node)]
            scalar = isinstance(node, yaml.ScalarNode)
            size = 1 + sum(nodes for nodes, _, _ in below)
            weight = 1 + (len(node.value) if scalar else sum(chars for _, chars, _ in below))
            depth = max((d for _, _, d in below), default=0) + (not scalar)
            done[key] = (size, weight, depth)
            if depth > MAX_DEPTH:
                problem = f"containers nested deeper than {MAX_DEPTH} levels"
            elif size > MAX_ALIAS_EXPANSION + len(done):
                problem = "aliases expand past the limit (anchors reused too often)"
            elif weight > byte_budget:
                problem = f"aliases expand past {MAX_ALIAS_EXPANSION_BYTES // 2**20} MiB of text"
            else:
                continue
        elif key in done:
            continue
        elif key in open_nodes:
            problem = "an alias refers to its own anchor (recursive)"
        else:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in done)
            continue
        raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def compose_and_load(text: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (errors' locations) and its data, aliases bounded before construction."""
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_alias_expansion(node, len(text))
        return node, loader.construct_document(node)
    except ValueError as error:  # a constructor's: Python's int digit limit, a 2020-13-45 date
        raise yaml.constructor.ConstructorError(None, None, str(error)) from None
    finally:
        loader.dispose()


class YamlDocumentError(InvalidData):
    """A YAML document that cannot be loaded: ``TQX_PARSE_YAML``, as for a contract."""

    code = codes.PARSE_YAML


def load_document(path: str | Path) -> Any:
    """A JSON (``.json``) or YAML file's data; ``NotFound`` if missing, ``InvalidData`` (naming
    the file and where) if it cannot be read or parsed."""
    name = str(Path(path))
    try:
        text = Path(name).read_text(encoding="utf-8-sig")  # a BOM, as contracts accept it
    except FileNotFoundError:
        raise NotFound(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidData(f"{name}: cannot be read ({type(error).__name__})") from None
    try:
        return json.loads(text) if name.endswith(".json") else compose_and_load(text)[1]
    except RecursionError:
        raise InvalidData(f"{name}: nested too deeply to parse") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        message = f"{codes.PARSE_YAML} {name}: invalid YAML{where}: {problem}"
        raise YamlDocumentError(message) from None
    except ValueError as error:  # JSON: malformed (located), or an int past Python's digit limit
        raise InvalidData(f"{name}: invalid JSON: {error}") from None


ModelT = TypeVar("ModelT", bound="BaseModel")


def validate_model(model: type[ModelT], data: Any, *, name: str) -> ModelT:
    """``InvalidData`` names the source and each offending field (never its value)."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(part) for part in item['loc']) or '<root>'}: {item['msg']}"
            for item in error.errors(include_url=False, include_input=False)
        ]
        raise InvalidData(f"{name}: {'; '.join(problems)}") from None


# Entry points ``SCHEME = "module:function"`` (``function(reference) -> (Contract | None,
# diagnostics)``) answer ``SCHEME:...``, ``langfuse:NAME@LABEL``: the core imports no adapter.
# Two characters at least: a drive letter (``C:``) stays a path; ``s3://`` is no source.
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]+):(?!//)")


def contract_source(reference: str) -> Callable[[str], Any] | None:
    """The installed source answering ``reference`` (``SCHEME:...``), or None: a file."""
    found = _SCHEME.match(reference)
    entry = None if found is None else _sources().get(found.group(1))
    return None if entry is None else entry.load()


@functools.cache  # keyed by installed schemes only: made-up references never grow it
def _sources() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group="templiqx.contract_sources")}
