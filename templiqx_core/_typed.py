"""Typed contracts: a contract bound to pydantic models, so the output shape is written once."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ._canonical import canonical_json, json_pointer, thaw
from ._compiler import Contract, check_plain, compile_contract, read_contract
from ._compiler.model import _PATH
from ._contracts import (
    API_VERSION,
    CompiledInteraction,
    Diagnostic,
    ExecutionReceipt,
    ExecutionRequest,
    RenderRequest,
    Role,
)
from ._errors import InvalidData, OutputSchemaError, OutputTypeError
from ._loading import exponent_floats
from ._ports import RuntimeAdapter
from ._receipts import output_schema_messages
from ._repair import RepairingRuntime
from ._schema import MAX_FAILURES, declared_names
from ._strict import model_output_schema

Out = TypeVar("Out", bound=BaseModel)
Values = BaseModel | Mapping[str, Any] | None

# Keywords that annotate without constraining: a contract and a model may differ in them.
_ANNOTATIONS: Final = frozenset({"title", "description", "examples", "default", "$comment"})
_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions"})


class TypedContractError(InvalidData):
    """A typed contract that cannot be built, or values that do not fit it (``problems``)."""

    def __init__(self, what: str, problems: Sequence[str]) -> None:
        super().__init__(f"{what}: " + "; ".join(problems))
        self.problems = list(problems)


def _constraints(schema: Any) -> Any:
    """``schema`` without annotations at schema positions (a property named ``title`` stays)."""
    if isinstance(schema, list):
        return [_constraints(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: {name: _constraints(child) for name, child in value.items()}
        if key in _SCHEMA_MAPS and isinstance(value, dict)
        else sorted(value, key=str)  # a set of names: its order says nothing
        if key == "required" and isinstance(value, list)
        else value
        if key in ("enum", "const")
        else _constraints(value)
        for key, value in schema.items()
        if key not in _ANNOTATIONS
    }


def _differences(ours: Any, theirs: Any, pointer: str) -> list[str]:
    if canonical_json(ours) == canonical_json(theirs):
        return []
    if not (isinstance(ours, dict) and isinstance(theirs, dict)):
        return [f"{pointer or '/'}: the contract and the model's schema differ"]
    found = []
    for key in sorted(set(ours) | set(theirs)):
        here = pointer + json_pointer([key])
        if key not in ours:
            found.append(f"{here}: in the model's schema, not in the contract")
        elif key not in theirs:
            found.append(f"{here}: in the contract, not in the model's schema")
        else:
            found += _differences(ours[key], theirs[key], here)
    return found


def _inline(schema: Any, defs: Mapping[str, Any], where: str, seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with its ``$ref``s inlined: a declared value's schema stands alone."""
    if isinstance(schema, list):
        return [_inline(item, defs, where, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in defs:
            raise TypedContractError(where, [f"{ref}: recursive or unknown (cannot be inlined)"])
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline({**defs[name], **rest}, defs, where, (*seen, name))
    return {key: _inline(value, defs, where, seen) for key, value in schema.items()}


def _declared(model: type[BaseModel] | None, section: str) -> dict[str, dict[str, Any]]:
    if model is None:
        return {}
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypedContractError(section, ["a pydantic model class is required"])
    schema = model.model_json_schema()
    defs, required = schema.get("$defs", {}), set(schema.get("required", []))
    return {
        name: {"schema": _inline(field, defs, f"{section}.{name}"), "required": name in required}
        for name, field in schema.get("properties", {}).items()
    }


def _problems(error: ValidationError, schema: Any) -> list[str]:
    """pydantic's errors as ``pointer: rule (type)``; a key the schema does not declare is ``*``."""
    names = declared_names(schema)
    found = []
    for item in error.errors(include_url=False, include_input=False)[:MAX_FAILURES]:
        loc = (s if isinstance(s, int) or s in names else "*" for s in item["loc"])
        rule = item["msg"] if item["type"] != "union_tag_invalid" else "no expected tag matches"
        found.append(f"{json_pointer(loc) or '/'}: {rule} ({item['type']})")
    if error.error_count() > len(found):
        found.append(f"{error.error_count() - len(found)} more")
    return found


def _output_differences(declared: Any, model: type[BaseModel], strict: bool = False) -> list[str]:
    expected = _constraints(model_output_schema(model, strict=strict))
    return _differences(_constraints(thaw(declared)), expected, "/output_schema")


def _read(path: str | Path) -> Contract:
    contract, diagnostics = read_contract(path)
    if contract is None:
        raise TypedContractError(str(path), _listed(diagnostics))
    return contract


def _section(declared: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        name: {"schema": _constraints(thaw(spec["schema"])), "required": spec["required"]}
        for name, spec in declared.items()
    }


def _listed(diagnostics: Iterable[Diagnostic | Mapping[str, Any]]) -> list[str]:
    items = (d if isinstance(d, Mapping) else d.model_dump() for d in diagnostics)
    return [
        f"{d['code']} {at}: {d['message'].removeprefix(f'{at}: ')}"
        for d in items
        for at in [d.get("json_pointer") or "/"]
    ]


def check_output_model(
    contract: Contract | str | Path | Mapping[str, Any], model: type[BaseModel]
) -> None:
    """``OutputTypeError`` listing every way the output_schema differs from the model's."""
    if isinstance(contract, (str, Path)):
        contract = _read(contract)
    declared = contract.output_schema if isinstance(contract, Contract) else contract
    if problems := _output_differences(declared, model):
        message = f"output_schema does not match {model.__name__}: " + "; ".join(problems)
        raise OutputTypeError(message)


@exponent_floats
class _Dumper(yaml.SafeDumper):
    """Multi-line strings as ``|`` blocks (as they render); a NEL, quoted (PyYAML writes it raw)."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        style = '"' if "\x85" in data else "|" if "\n" in data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _Dumper.represent_str)


def _filter_text(item: str | Mapping[str, Any]) -> str:
    if isinstance(item, str):
        return item
    arguments = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}"
        for key, value in item.items()
        if key != "name" and (value is not None or key == "value")
    )
    return f"{item['name']}({arguments})"


def print_template(nodes: Iterable[Mapping[str, Any]]) -> str | None:
    """The string form of ``nodes``, or None when it has none (conditions, loops, ...): to_yaml
    writes text as text, not as syntax trees."""
    items: list[Mapping[str, Any]] = []
    for node in nodes:  # adjacent text merged: "{" then "{" must not open a placeholder
        if node["kind"] == "text" and items and items[-1]["kind"] == "text":
            items[-1] = {"kind": "text", "value": items[-1]["value"] + node["value"]}
        else:
            items.append(node)
    parts: list[str] = []
    for index, node in enumerate(items):
        if node["kind"] == "text":  # next: a placeholder, or no string form at all
            escaped = node["value"].replace("{{", '{{ "{{" }}')
            if index + 1 < len(items) and escaped.endswith("{"):  # the placeholder would join
                escaped = escaped[:-1] + '{{ "{" }}'
            parts.append(escaped)
            continue
        expression = node.get("expression", {})
        path = expression["path"] if expression.get("kind") == "ref" else ""
        if node["kind"] != "interpolate" or _PATH.fullmatch(path) is None:
            return None
        filters = "".join(f" | {_filter_text(item)}" for item in node.get("filters", []))
        parts.append(f"{{{{ {path}{filters} }}}}")
    return "".join(parts)


def _short(content: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
    """``content`` and its bodies, each in string form where it has one."""
    for node in content:
        for body in ("then", "else", "body"):
            if body in node:
                node[body] = _short(node[body])
    short = print_template(content)
    return content if short is None else short


@dataclass(frozen=True)
class TypedContract(Generic[Out]):
    """A contract whose output and values (None: plain dicts) are pydantic models."""

    contract: Contract
    output: type[Out]
    inputs: type[BaseModel] | None = None
    context: type[BaseModel] | None = None

    @classmethod
    def define(
        cls,
        *,
        id: str,
        version: str,
        output: type[Out],
        messages: Sequence[tuple[Role, str | list[Any]]],
        inputs: type[BaseModel] | None = None,
        context: type[BaseModel] | None = None,
        runtime_policy: Mapping[str, Any] | None = None,
        evals: Sequence[Mapping[str, Any]] = (),
        strict: bool | Literal["auto"] = "auto",
    ) -> TypedContract[Out]:
        """One declared value per field of ``inputs``/``context``."""
        try:
            schema = model_output_schema(output, strict=strict is True)
        except RecursionError:  # pydantic's schema generation, on models nested hundreds deep
            raise TypedContractError(f"contract {id}", ["output: nested too deeply"]) from None
        document: dict[str, Any] = {
            "api_version": API_VERSION,
            "id": id,
            "version": version,
            "inputs": _declared(inputs, "inputs"),
            "context": _declared(context, "context"),
            "messages": [{"role": role, "content": content} for role, content in messages],
            "output_schema": schema,
            "runtime_policy": dict(runtime_policy or {}),
            "evals": [dict(case) for case in evals],
        }
        try:
            contract = Contract.model_validate(document)
        except ValidationError as error:
            problems = _problems(
                error, [Contract.model_json_schema(by_alias=True), document]
            )  # its field names too
            raise TypedContractError(f"contract {id}", problems) from None
        return cls(contract, output, inputs, context)._checked(f"contract {id}")

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        output: type[Out],
        inputs: type[BaseModel] | None = None,
        context: type[BaseModel] | None = None,
        strict: bool | Literal["auto"] = "auto",
    ) -> TypedContract[Out]:
        """A YAML contract bound to models: every difference in one ``TypedContractError``."""
        contract = _read(path)
        problems = _output_differences(contract.output_schema, output, strict=strict is True)
        for section, model in (("inputs", inputs), ("context", context)):
            if model is not None:
                ours = _section(contract.model_dump(by_alias=True)[section])
                problems += _differences(ours, _section(_declared(model, section)), f"/{section}")
        if problems:
            raise TypedContractError(f"{path} does not match its models", problems)
        return cls(contract, output, inputs, context)._checked(str(path))

    def _checked(self, what: str) -> TypedContract[Out]:
        """What ``templiqx check`` finds, raised at definition rather than at the first call."""
        found = check_plain(self.contract.model_dump(by_alias=True))
        if any(d["severity"] == "error" for d in found):
            raise TypedContractError(what, _listed(found))
        return self

    def _values(self, model: type[BaseModel] | None, given: Values, section: str) -> Any:
        if model is not None and not isinstance(given, model):
            try:
                given = model.model_validate({} if given is None else given)
            except ValidationError as error:
                problems = _problems(error, model.model_json_schema())
                raise TypedContractError(section, problems) from None
        if isinstance(given, BaseModel):
            try:
                return given.model_dump(mode="json", by_alias=True)
            except ValueError as error:  # pydantic's serializer: bytes that are not UTF-8
                problem = f"a value JSON cannot hold ({type(error).__name__})"
                raise TypedContractError(section, [problem]) from None
        return {} if given is None else given  # RenderRequest checks it is a mapping of JSON

    def compile(self, inputs: Values = None, *, context: Values = None) -> CompiledInteraction:
        """The interaction for these values (models or dicts), else ``TypedContractError``."""
        values = {
            "inputs": self._values(self.inputs, inputs, "inputs"),
            "context": self._values(self.context, context, "context"),
        }
        try:
            request = RenderRequest.model_validate(values)
        except ValidationError as error:  # a value that is not JSON (a date, a set, ...)
            problems = _problems(error, RenderRequest.model_json_schema())
            raise TypedContractError("values", problems) from None
        result = compile_contract(self.contract, request)
        if result.interaction is None:
            what = f"contract {self.contract.id} does not compile"
            raise TypedContractError(what, _listed(result.diagnostics))
        return result.interaction

    def output_of(self, receipt: ExecutionReceipt) -> Out:
        """The receipt's output as the model, else ``OutputSchemaError`` or ``OutputTypeError``."""
        if not receipt.output_schema_valid:
            messages = output_schema_messages(self.contract.output_schema, thaw(receipt.output))
            detail = "; ".join(messages) or "see the contract's output_schema"
            raise OutputSchemaError(f"output does not satisfy the contract schema: {detail}")
        try:
            return self.output.model_validate(thaw(receipt.output))
        except ValidationError as error:
            problems = _problems(error, self.output.model_json_schema())
            message = f"output does not validate as {self.output.__name__}: "
            raise OutputTypeError(message + "; ".join(problems)) from None

    def output_problems(self, receipt: ExecutionReceipt) -> list[str]:
        """What the output model refuses, one ``/pointer: rule`` line each (what repair sends)."""
        try:
            self.output.model_validate(thaw(receipt.output))
        except ValidationError as error:
            return _problems(error, self.output.model_json_schema())
        return []

    def _on(self, runtime: RuntimeAdapter, repair: int) -> RuntimeAdapter:
        """A repairing wrapper per call (closing one would close ``runtime``)."""
        if type(repair) is int and repair == 1:
            return runtime
        return RepairingRuntime(runtime, attempts=repair, validate=self.output_problems)

    def run(
        self,
        runtime: RuntimeAdapter,
        inputs: Values = None,
        *,
        context: Values = None,
        repair: int = 1,
    ) -> Out:
        """The output model instance; ``repair=N``: up to N tries, refusals sent back."""
        request = ExecutionRequest(interaction=self.compile(inputs, context=context))
        return self.output_of(self._on(runtime, repair).execute(request))

    async def arun(
        self,
        runtime: RuntimeAdapter,
        inputs: Values = None,
        *,
        context: Values = None,
        repair: int = 1,
    ) -> Out:
        """``run`` on the event loop (the runtime's ``aexecute``)."""
        request = ExecutionRequest(interaction=self.compile(inputs, context=context))
        return self.output_of(await self._on(runtime, repair).aexecute(request))

    def to_yaml(self) -> str:
        """The equivalent contract as YAML, messages in their string forms where they have one."""
        data = self.contract.model_dump(by_alias=True, exclude_defaults=True)
        for message in data["messages"]:
            message["content"] = _short(message["content"])
        return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
