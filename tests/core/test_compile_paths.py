"""``templiqx compile`` without pydantic: the fast path is the model path, byte for byte.

The CLI accepts a contract with ``check.checked_contract`` (plain JSON, the model's own
JSON Schema, no float where the model wants a strict int) and falls back to the
``Contract`` model for anything else. These tests hold it to the model: the schema file
is the model's, every contract in the repository prints the same envelope (stdout,
stderr, exit code) both ways, and generated and mutated documents never make the fast
path accept what the model rejects or compile differently.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from templiqx_core._cli import main
from templiqx_core._compiler import Contract, check
from templiqx_core._loading import load_document
from tests.conftest import REFERENCE, REPO_ROOT
from tests.core.compile_paths import assert_paths_agree, model_or_errors

CONTRACTS = [
    REPO_ROOT / "examples" / "greeting.yaml",
    REFERENCE / "demo" / "greeting.yaml",
    *sorted((REFERENCE / "crm3" / "contracts").glob("*.yaml")),
]


def test_the_schema_file_is_the_model_s() -> None:
    # The model is the single source of truth; the file only spares the CLI pydantic.
    expected = Contract.model_json_schema(by_alias=True)
    assert orjson.loads(check.SCHEMA_FILE.read_bytes()) == expected, (
        "contract.schema.json is stale: run `python scripts/contract_schema.py`"
    )


def _integer_properties(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for name, prop in schema.get("properties", {}).items():
            variants = [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]
            if any(v.get("type") == "integer" for v in variants):
                yield name
        for value in schema.values():
            yield from _integer_properties(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _integer_properties(item)


def test_every_strict_int_field_is_guarded() -> None:
    # JSON Schema's "integer" admits 5.0; the model's strict int does not. Every integer
    # field must be one the fast path refuses floats for.
    schema = orjson.loads(check.SCHEMA_FILE.read_bytes())
    assert set(_integer_properties(schema)) == check.INTEGER_KEYS


def _requests(contract: Path) -> list[list[str]]:
    data = load_document(contract)
    requests = [[], ["--capability", "none_such"]]  # not ok: missing values, capabilities
    requests += [["--eval", case["id"]] for case in data.get("evals", [])]
    if contract.name == "greeting.yaml":
        examples = REPO_ROOT / "examples"
        inputs = ["--inputs", str(examples / "greeting.inputs.json")]
        requests += [[*inputs, "--context", str(examples / "greeting.context.json")], inputs]
    else:
        request = REFERENCE / "crm3" / "evals" / f"{contract.stem[:6]}-request.json"
        requests.append(["--request", str(request)])
    return requests


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def _both_paths(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[Any, Any, int]:
    """(fast run, model-only run, how often the fast run fell back to the models)."""
    from templiqx_core import _cli

    fallbacks = []
    with_models = _cli._compile_with_models

    def counting(*a: Any) -> int:
        fallbacks.append(a)
        return with_models(*a)

    monkeypatch.setattr(_cli, "_compile_with_models", counting)
    fast = _run(args)
    fell_back = len(fallbacks)
    monkeypatch.setattr(check, "read_checked_contract", lambda path: None)
    slow = _run(args)
    monkeypatch.undo()
    return fast, slow, fell_back


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_repository_contract_prints_what_the_models_print(
    contract: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = set()
    for request in _requests(contract):
        for flags in ([], ["--json"]):
            args = ["compile", str(contract), *request, *flags]
            fast, slow, fallbacks = _both_paths(monkeypatch, args)
            assert fast == slow, args
            assert fallbacks == 0, args  # these all take the fast path
            outcomes.add(fast[0])
            if fast[0] == 0:
                assert json.loads(fast[1])["fingerprints"]["compiled_interaction"]
    assert outcomes == {0, 2}  # ok and not-ok envelopes both compared


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda text: text.replace("role: system", "role: robot", 1), 2),
        (lambda text: text + "surprise: 1\n", 2),
        (lambda text: text.replace("kind: text", "kind: [text", 1), 2),  # YAML syntax
        (lambda text: text.replace("name: Ryan", "name: 2026-13-45", 1), 2),  # bad date
        (lambda text: text.replace("temperature: 0", "temperature: .nan", 1), 0),
        (lambda text: text.replace("temperature: 0", "temperature: 2026-05-31", 1), 0),
    ],
)
def test_what_the_fast_path_refuses_goes_to_the_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any, code: int
) -> None:
    contract = tmp_path / "contract.yaml"
    contract.write_text(edit((REPO_ROOT / "examples" / "greeting.yaml").read_text()))
    for flags in ([], ["--json"], ["--eval", "ryan"]):
        fast, slow, fallbacks = _both_paths(monkeypatch, ["compile", str(contract), *flags])
        assert fast == slow
        assert fallbacks == 1
    assert fast[0] in (code, 1)


def test_values_the_fast_path_refuses_go_to_the_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract = str(REPO_ROOT / "examples" / "greeting.yaml")
    cases = {
        "date.yaml": "name: 2026-05-31\n",  # a YAML date: not a JSON value
        "list.json": '["Ryan"]',  # not an object
        "deep.json": '{"name": ' + "[" * 70 + "]" * 70 + "}",  # deeper than MAX_DEPTH
        "request.json": '{"inputs": {"name": "Ryan"}, "extra": {}}',
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        flag = "--request" if name == "request.json" else "--inputs"
        fast, slow, fallbacks = _both_paths(
            monkeypatch, ["compile", contract, flag, str(tmp_path / name)]
        )
        assert fast == slow, name
        assert fallbacks == 1, name
    # A command error comes first, and is the same: --inputs is checked before --context
    # is read (here: a list, then a file that does not exist).
    missing = str(tmp_path / "missing.json")
    args = ["compile", contract, "--inputs", str(tmp_path / "list.json"), "--context", missing]
    fast, slow, _ = _both_paths(monkeypatch, args)
    assert fast == slow
    assert fast[0] == 1
    assert "--inputs: expected a JSON/YAML object" in fast[2]


# -- generated documents -------------------------------------------------------------

TRICKY: list[Any] = [
    0, 5, -1, 20, 21, 2**63, 2**64, 5.0, 2.5, 1e308, True, False, None,
    "", "a", "a\n", "a b", "ok_1", "\ud800", "é", "templiqx/v1alpha1",
    "trim", "json", "format_number", "format_date", "system", "robot",
    "text", "ref", "literal", "when", "for_each", "component", "interpolate", "not", "and",
    "inputs.name", "inputs", "recipient",
    [], {}, [{}], ["trim"], [[]],
    {"kind": "text", "value": "x"},
    {"kind": "ref", "path": "inputs.name"},
    {"kind": "literal", "value": 5.0},
    {"name": "format_number", "decimals": 2},
    {"name": "format_number", "decimals": 2.0},
    {"schema": {"type": "string"}, "required": True},
    {"type": "string"},
]  # fmt: skip
KEYS = [
    "with", "with_", "else", "otherwise", "schema", "schema_", "decimals", "format",
    "kind", "value", "required", "description", "filters", "separator", "parameters",
    "content", "extra", "capability", "evals", "then", "item", "body", "path", "name",
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
values = st.sampled_from(TRICKY) | json_values


def _rich_contract() -> dict[str, Any]:
    greeting = load_document(REPO_ROOT / "examples" / "greeting.yaml")
    greeting["inputs"]["amount"] = {"schema": {"type": "number"}}
    greeting["inputs"]["tags"] = {"schema": {"type": "array", "items": {"type": "string"}}}
    greeting["components"]["typed"] = {
        "parameters": {"who": {"schema": {"type": "string"}, "required": True}},
        "content": [{"kind": "interpolate", "expression": {"kind": "ref", "path": "who"}}],
    }
    name = {"kind": "ref", "path": "inputs.name"}
    greeting["messages"][1]["content"] += [
        {"kind": "component", "name": "typed", "with": {"who": name}},
        {
            "kind": "interpolate",
            "expression": {"kind": "ref", "path": "inputs.amount"},
            "filters": [{"name": "format_number", "decimals": 2}, "json"],
        },
        {
            "kind": "when",
            "condition": {"kind": "equals", "left": name, "right": {"kind": "literal", "value": 1}},
            "then": [{"kind": "text", "value": "one"}],
            "else": [
                {
                    "kind": "for_each",
                    "collection": {"kind": "ref", "path": "inputs.tags"},
                    "item": "tag",
                    "separator": ", ",
                    "body": [{"kind": "interpolate", "expression": {"kind": "ref", "path": "tag"}}],
                }
            ],
        },
    ]
    greeting["extensions"] = {"vendor.x": {"capability": "x", "schema": {}, "value": [1]}}
    return greeting


BASES = [load_document(path) for path in CONTRACTS] + [_rich_contract()]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _mutate(doc: Any, draw: Any) -> Any:
    path = draw(st.sampled_from(list(_paths(doc))))
    if not path:
        return doc
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    operation = draw(st.sampled_from(["replace", "replace", "delete", "add", "rename"]))
    if operation == "replace":
        parent[last] = copy.deepcopy(draw(values))
    elif operation == "delete":
        del parent[last]
    elif operation == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(values))
    elif operation == "add":
        parent.insert(last, copy.deepcopy(draw(values)))
    elif isinstance(parent, dict):
        parent[draw(st.sampled_from(KEYS))] = parent.pop(last)
    return doc


def _requests_for(doc: Any, draw: Any) -> list[tuple[Any, Any]]:
    cases = doc.get("evals", []) if isinstance(doc, dict) else []
    found = [
        (case.get("inputs", {}), case.get("context", {}))
        for case in (cases if isinstance(cases, list) else [])
        if isinstance(case, dict)
    ]
    drawn = draw(st.dictionaries(st.sampled_from(["name", "amount", "tags", "x"]), values))
    requests = [*found, ({}, {}), (drawn, {"organization": draw(values)})]
    if found:  # an eval's own values, one of them changed: the renderer's error paths
        inputs, context = copy.deepcopy(found[0])
        _mutate(inputs, draw)
        requests.append((inputs, context))
    return requests


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_documents_never_split_the_paths(data: st.DataObject) -> None:
    doc = copy.deepcopy(data.draw(st.sampled_from(BASES)))
    for _ in range(data.draw(st.integers(1, 3))):
        doc = _mutate(doc, data.draw)
    caps = data.draw(st.sampled_from([None, ["structured_output"], ["x", "structured_output"]]))
    if caps is None:
        extensions = doc.get("extensions") if isinstance(doc, dict) else None
        caps = ["structured_output"] if not isinstance(extensions, dict) else []
    for inputs, context in _requests_for(doc, data.draw):
        assert_paths_agree(doc, inputs, context, caps)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(base=st.sampled_from(BASES), value=values)
def test_any_value_anywhere_in_a_filter_call(base: Any, value: Any) -> None:
    # A filter call is where the schema and the strict model differ most (int, enum, null).
    doc = copy.deepcopy(base)
    doc["messages"][-1]["content"].append(
        {
            "kind": "interpolate",
            "expression": {"kind": "literal", "value": 3.14159},
            "filters": [{"name": "format_number", "decimals": value}],
        }
    )
    accepted = assert_paths_agree(doc, {"name": "Ann"}, {"organization": "B"})
    model = model_or_errors(doc)
    assert accepted or not isinstance(model, Contract) or type(value) is not int
