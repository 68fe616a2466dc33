"""Typed results: a receipt's output as the host's pydantic model, and keeping a
contract's ``output_schema`` and that model from drifting apart.

The receipt stays the wire value (a JSON output and a validity flag); the model is the
host's view of it. Errors name the failing field by JSON pointer and the rule, never the
output's text: the output is a provider's reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ._canonical import canonical_json, json_pointer
from ._errors import InvalidData, OutputSchemaError, OutputTypeError
from ._frozen import thaw
from ._schema_errors import MAX_FAILURES, declared_names

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ._compiler import Contract
    from ._contracts import ExecutionReceipt

M = TypeVar("M", bound="BaseModel")

# Keywords that annotate a schema without constraining what validates: a contract written
# by hand and the model's generated schema may differ in them and still agree.
_ANNOTATIONS: Final = {"title", "description", "examples", "default", "$comment", "deprecated"}
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_VALUES: Final = frozenset(
    {"items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "contains"}
    | {"propertyNames", "not", "if", "then", "else"}
)


def _constraints(schema: Any) -> Any:
    """``schema`` without annotation keywords, at schema positions only (a property named
    ``title`` is kept)."""
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            result[key] = {name: _constraints(child) for name, child in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            result[key] = [_constraints(child) for child in value]
        elif key in _SCHEMA_VALUES:
            result[key] = _constraints(value)
        else:
            result[key] = value
    return result


def output_schema_for(model: type[BaseModel]) -> dict[str, Any]:
    """The ``output_schema`` a contract declares for ``model``: pydantic's JSON Schema of
    it (validation mode) without annotations, ready to paste into the contract."""
    from pydantic import BaseModel

    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidData("output_schema_for takes a pydantic model class")
    schema: dict[str, Any] = _constraints(model.model_json_schema(mode="validation"))
    return schema


def _first_difference(left: Any, right: Any, pointer: str = "") -> str:
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right)):
            here = pointer + json_pointer([key])
            if key not in left:
                return f"{here}: in the model's schema, not in output_schema"
            if key not in right:
                return f"{here}: in output_schema, not in the model's schema"
            if canonical_json(left[key]) != canonical_json(right[key]):
                return _first_difference(left[key], right[key], here)
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            if canonical_json(a) != canonical_json(b):
                return _first_difference(a, b, f"{pointer}/{index}")
    return f"{pointer or '/'}: output_schema and the model's schema differ"


def check_output_model(
    contract: Contract | str | Path | Mapping[str, Any], model: type[BaseModel]
) -> None:
    """Raise ``OutputTypeError`` (``TQX_OUTPUT_TYPE``) unless the contract's
    ``output_schema`` (a contract, its path, or the schema itself) constrains exactly what
    ``output_schema_for(model)`` does; annotations (titles, descriptions) are ignored.
    A host test calls it so the YAML and the model cannot drift."""
    from ._compiler import Contract, read_contract

    if isinstance(contract, (str, Path)):
        parsed, diagnostics = read_contract(contract)
        if parsed is None:
            first = diagnostics[0]
            raise InvalidData(f"{contract}: {first.code}: {first.message}")
        contract = parsed
    declared = contract.output_schema if isinstance(contract, Contract) else contract
    ours = _constraints(thaw(dict(declared)))
    theirs = output_schema_for(model)
    if canonical_json(ours) != canonical_json(theirs):
        where = _first_difference(ours, theirs)
        raise OutputTypeError(f"output_schema does not match {model.__name__}: {where}")


def _problem(item: Any, names: frozenset[str]) -> str:
    """One pydantic error: an object key shown only if declared, the message never
    quoting the output (a discriminator's message quotes its value)."""
    loc = (s if isinstance(s, int) or s in names else "*" for s in item["loc"])
    rule = item["msg"]
    if item["type"] == "union_tag_invalid":
        rule = "the discriminator matches none of the expected tags"
    return f"{json_pointer(loc) or '/'}: {rule} ({item['type']})"


def output_as(
    receipt: ExecutionReceipt, model: type[M], *, schema: Mapping[str, Any] | None = None
) -> M:
    """The receipt's output validated as ``model``.

    A receipt whose output failed the contract's schema raises ``OutputSchemaError``
    (``TQX_OUTPUT_SCHEMA``; given the ``schema``, naming each failed rule); output the
    model refuses raises ``OutputTypeError`` (``TQX_OUTPUT_TYPE``) naming each field.
    """
    from pydantic import ValidationError

    output = thaw(receipt.output)
    if not receipt.output_schema_valid:
        detail = ""
        if schema is not None:
            from ._receipts import output_schema_messages

            messages = output_schema_messages(schema, output)
            detail = (": " + "; ".join(messages)) if messages else ""
        raise OutputSchemaError(f"output does not satisfy the contract schema{detail}")
    try:
        return model.model_validate(output)
    except ValidationError as error:
        names = declared_names(model.model_json_schema(mode="validation"))
        errors = error.errors(include_url=False, include_input=False)[:MAX_FAILURES]
        problems = [_problem(item, names) for item in errors]
        more = error.error_count() - len(problems)
        if more > 0:
            problems.append(f"{more} more")
        raise OutputTypeError(
            f"output does not validate as {model.__name__}: " + "; ".join(problems)
        ) from None
