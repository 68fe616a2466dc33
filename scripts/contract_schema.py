"""Write ``templiqx_core/_compiler/contract.schema.json`` from the ``Contract`` model.

    python scripts/contract_schema.py

The CLI's ``compile`` validates contracts against this file without importing pydantic;
the model stays the one source of truth (``tests/core/test_compile_paths.py`` fails when
the file and the model's schema differ).
"""

from __future__ import annotations

import orjson

from templiqx_core._compiler import Contract
from templiqx_core._compiler.check import SCHEMA_FILE


def main() -> None:
    schema = Contract.model_json_schema(by_alias=True)
    SCHEMA_FILE.write_bytes(orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {SCHEMA_FILE}")


if __name__ == "__main__":
    main()
