"""The shipped contract JSON Schema is generated from the ``Contract`` model, never edited."""

from __future__ import annotations

import json

import templiqx_core
from templiqx_core._compiler.model import CONTRACT_SCHEMA_PATH, contract_json_schema


def test_the_committed_schema_is_what_the_model_generates() -> None:
    committed = json.loads(CONTRACT_SCHEMA_PATH.read_text(encoding="utf-8"))
    assert committed == contract_json_schema(), (
        "contract.schema.json is stale: run `python scripts/contract_schema.py`"
    )


def test_the_public_path_is_the_shipped_file() -> None:
    assert templiqx_core.CONTRACT_SCHEMA_PATH == CONTRACT_SCHEMA_PATH
    assert CONTRACT_SCHEMA_PATH.is_file()
