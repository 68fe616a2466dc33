"""The shipped contract JSON Schema is generated from the ``Contract`` model, never edited."""

from __future__ import annotations

import json

import templiqx_core
from templiqx_core._compiler.model import CONTRACT_SCHEMA_PATH, Contract


def test_the_committed_schema_is_what_the_model_generates() -> None:
    committed = json.loads(CONTRACT_SCHEMA_PATH.read_text(encoding="utf-8"))
    assert committed == Contract.model_json_schema(by_alias=True), (
        "contract.schema.json is stale: run `python scripts/contract_schema.py`"
    )


def test_the_public_path_is_the_shipped_file() -> None:
    assert templiqx_core.CONTRACT_SCHEMA_PATH == CONTRACT_SCHEMA_PATH
    assert CONTRACT_SCHEMA_PATH.is_file()


def test_the_schema_refuses_an_argument_of_another_filter_as_the_model_does() -> None:
    """Editors flag ``{name: upper, value: x}`` as ``templiqx check`` does."""
    import jsonschema
    from pydantic import ValidationError

    from templiqx_core._compiler.model import Contract

    schema = jsonschema.Draft202012Validator(Contract.model_json_schema(by_alias=True))

    def contract(flt: dict[str, object]) -> dict[str, object]:
        node = {"kind": "interpolate", "expression": {"kind": "ref", "path": "inputs.x"}}
        return {
            "api_version": "templiqx/v1alpha1",
            "id": "f",
            "version": "1",
            "messages": [{"role": "user", "content": [{**node, "filters": [flt]}]}],
            "output_schema": {},
        }

    def model_accepts(document: dict[str, object]) -> bool:
        try:
            Contract.model_validate(document)
        except ValidationError:
            return False
        return True

    for flt, accepted in [
        ({"name": "default", "value": None}, True),
        ({"name": "default", "value": {"a": [1]}}, True),
        ({"name": "format_date", "format": "%Y"}, True),
        ({"name": "format_number", "decimals": 2, "format": None}, True),  # a dump's nulls
        ({"name": "upper", "format": None, "decimals": None}, True),
        ({"name": "upper", "value": "x"}, False),
        ({"name": "format_number", "value": 2}, False),
        ({"name": "default", "decimals": 2}, False),
        ({"name": "json", "format": "%Y"}, False),
        ({"name": "format_date", "decimals": 1}, False),
    ]:
        document = contract(flt)
        assert (schema.is_valid(document), model_accepts(document)) == (accepted, accepted), flt
