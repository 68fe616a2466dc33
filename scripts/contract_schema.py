"""Write ``templiqx_core/_compiler/contract.schema.json`` from the ``Contract`` model.

    python scripts/contract_schema.py

The file is shipped for editors; the model stays the one source of truth
(``tests/core/test_contract_schema.py`` fails when the file and the model's schema differ).
"""

from __future__ import annotations

import orjson

from templiqx_core._compiler.model import CONTRACT_SCHEMA_PATH, Contract


def main() -> None:
    schema = Contract.model_json_schema(by_alias=True)
    CONTRACT_SCHEMA_PATH.write_bytes(orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {CONTRACT_SCHEMA_PATH}")


if __name__ == "__main__":
    main()
