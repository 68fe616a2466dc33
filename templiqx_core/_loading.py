"""Strict loading of JSON and YAML documents from files, with errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from ._errors import InvalidData, NotFound

if TYPE_CHECKING:  # pydantic loads only when a model is validated (fast CLI start-up)
    from pydantic import BaseModel, ValidationError

__all__ = [
    "MAX_ALIAS_EXPANSION",
    "UniqueKeyLoader",
    "compose_and_load",
    "describe_validation_error",
    "load_document",
    "parse_document",
    "validate_model",
]


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe YAML loader that refuses duplicate mapping keys instead of keeping the last.

    Built on libyaml's parser (``CSafeLoader``) when PyYAML has it: an order of magnitude
    faster than the pure-Python one, with the same nodes, marks and errors.
    """


def _construct_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


#: Nodes that aliases may add on top of the document's own: enough for any sane reuse of an
#: anchor, far below a "billion laughs" document (a few hundred bytes expanding to 10^9 nodes).
MAX_ALIAS_EXPANSION = 100_000


def _check_alias_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases would expand past ``MAX_ALIAS_EXPANSION`` nodes.

    The composer shares one node per anchor, so the graph stays small; the expansion happens
    later, in whoever walks the data (canonical JSON, fingerprints, rendering). Sizes are
    memoised per node, so this is linear in the graph; iterative, so depth is no concern; an
    alias cycle (``&a [*a]``) is refused too.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_ALIAS_EXPANSION + len(sizes):
                problem = "aliases expand past the limit (anchors reused too often)"
                raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            problem = "an alias refers to its own anchor (recursive)"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def compose_and_load(text: str) -> tuple[yaml.Node | None, Any]:
    """Parse YAML once: the node tree (for error locations) and the data built from it.

    Alias expansion is bounded before anything is constructed (``yaml.YAMLError``).
    """
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_alias_expansion(node)
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data


def parse_document(text: str, *, name: str, yaml_allowed: bool = True) -> Any:
    """Parse JSON (or YAML, a superset) text; ``InvalidData`` names ``name`` and the position."""
    if not yaml_allowed or name.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidData(
                f"{name}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
            ) from None
        except RecursionError:
            raise InvalidData(f"{name}: JSON nested too deeply to parse") from None
    try:
        return compose_and_load(text)[1]
    except RecursionError:
        raise InvalidData(f"{name}: YAML nested too deeply to parse") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise InvalidData(f"{name}: invalid YAML{where}: {problem}") from None


def load_document(path: str | Path) -> Any:
    """Read and parse a JSON or YAML file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFound(f"{file}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidData(f"{file}: cannot be read ({type(error).__name__})") from None
    return parse_document(text, name=str(file))


def describe_validation_error(error: ValidationError) -> str:
    """One line naming each offending field by its dotted path (never the input value)."""
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in item["loc"]) or "<root>"
        problems.append(f"{path}: {item['msg']}")
    return "; ".join(problems)


ModelT = TypeVar("ModelT", bound="BaseModel")


def validate_model(model: type[ModelT], data: Any, *, name: str) -> ModelT:
    """Validate ``data`` into ``model``; ``InvalidData`` names the source and the fields."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidData(f"{name}: {describe_validation_error(error)}") from None
