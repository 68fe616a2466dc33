"""Micro-benchmarks: canonical JSON + fingerprint, output-schema validation, compiling.

python bench/micro.py
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from templiqx_core import canonical_json, fingerprint


def document(target_bytes: int, seed: int = 7) -> Any:
    """A realistic nested document (records with text, numbers, floats, nested lists)."""
    rng = random.Random(seed)
    records: list[Any] = []
    size = 0
    while size < target_bytes:
        record = {
            "id": f"SYN-DOC-{len(records):06d}",
            "title": "De overeenkomst gaat in op 1 september 2026 — €12,50 ✓",
            "amount": rng.random() * 1e6,
            "count": rng.randint(-(2**40), 2**40),
            "tags": [rng.choice(["a", "b", "ç", "中"]) for _ in range(5)],
            "evidence": [
                {
                    "start": rng.randint(0, 999),
                    "end": rng.randint(1000, 2000),
                    "quote_sha256": hashlib.sha256(str(rng.random()).encode()).hexdigest(),
                }
                for _ in range(3)
            ],
            "valid": rng.random() > 0.5,
            "note": None,
        }
        records.append(record)
        size += len(orjson.dumps(record))
    return {"records": records, "z": 1, "a": [0.1, 1e-7, 1e16]}


def best(fn: Any, repeat: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def fingerprint_table() -> list[str]:
    rows = [
        f"{'size':>7} {'templiqx fp':>12} {'orjson+sha':>11} {'json.dumps':>11} "
        f"{'vs orjson':>9} {'vs json':>8}"
    ]
    for label, size, repeat in (
        ("1 KB", 1_000, 2000),
        ("100 KB", 100_000, 50),
        ("5 MB", 5_000_000, 5),
    ):
        doc = document(size)
        assert canonical_json(doc) == orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        ours = best(lambda d=doc: fingerprint(d), repeat)
        fast = best(
            lambda d=doc: hashlib.sha256(orjson.dumps(d, option=orjson.OPT_SORT_KEYS)).hexdigest(),
            repeat,
        )
        stdlib = best(
            lambda d=doc: hashlib.sha256(
                json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            ).hexdigest(),
            repeat,
        )
        rows.append(
            f"{label:>7} {ours * 1e3:10.3f}ms {fast * 1e3:9.3f}ms {stdlib * 1e3:9.3f}ms "
            f"{ours / fast:8.2f}x {stdlib / ours:7.1f}x faster"
        )
    return rows


def schema_25() -> tuple[dict[str, Any], dict[str, Any]]:
    """A 25-field nested schema with date/date-time formats, and a valid instance."""
    props: dict[str, Any] = {}
    instance: dict[str, Any] = {}
    for i in range(20):
        kind = ["string", "integer", "number", "boolean"][i % 4]
        props[f"f{i}"] = {"type": kind}
        instance[f"f{i}"] = {"string": "x", "integer": 3, "number": 2.5, "boolean": True}[kind]
    props["effective_date"] = {"type": "string", "format": "date"}
    props["created_at"] = {"type": "string", "format": "date-time"}
    props["status"] = {"type": "string", "enum": ["draft", "final"]}
    props["evidence"] = {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["field", "start"],
            "properties": {"field": {"type": "string"}, "start": {"type": "integer", "minimum": 0}},
        },
    }
    props["owner"] = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1}},
    }
    instance |= {
        "effective_date": "2026-09-01",
        "created_at": "2026-09-01T10:00:00Z",
        "status": "final",
        "evidence": [{"field": "a", "start": 1}] * 4,
        "owner": {"name": "Ryan"},
    }
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "required": sorted(props),
        "properties": props,
    }
    return schema, instance


def validation_table() -> list[str]:
    schema, instance = schema_25()
    bad = {**instance, "effective_date": "2026-13-45"}
    rows = [f"{'validator':34} {'per call':>10} {'rejects bad date':>17}"]
    candidates: list[tuple[str, Any]] = []
    from templiqx_core.adapters import compile_schema

    ours = compile_schema(schema)
    candidates.append(("jsonschema-rs (compiled once)", ours.is_valid))
    candidates.append(
        ("jsonschema-rs via cache lookup", lambda value: compile_schema(schema).is_valid(value))
    )
    try:
        import jsonschema

        checker = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        candidates.append(("jsonschema (python)", checker.is_valid))
    except ImportError:
        pass
    try:
        import fastjsonschema

        compiled = fastjsonschema.compile(schema)

        def fast(value: Any) -> bool:
            try:
                compiled(value)
            except fastjsonschema.JsonSchemaException:
                return False
            return True

        candidates.append(("fastjsonschema", fast))
    except ImportError:
        pass
    for name, check in candidates:
        assert check(instance)
        per_call = best(lambda: [check(instance) for _ in range(1000)], 5) / 1000  # noqa: B023
        rows.append(f"{name:34} {per_call * 1e6:8.2f}us {'yes' if not check(bad) else 'NO':>17}")
    return rows


def compile_table() -> list[str]:
    """Compiling bli-61: from its path (read + parse + compile), and from a parsed Contract."""
    import statistics

    from templiqx_core import RenderRequest, compile_contract
    from templiqx_core._compiler import read_contract

    crm3 = Path(__file__).resolve().parents[1] / "reference" / "crm3"
    path = crm3 / "contracts" / "bli-61-date-term-extraction.yaml"
    request = RenderRequest.model_validate(
        json.loads((crm3 / "evals" / "bli-61-request.json").read_text(encoding="utf-8"))
    )
    contract, _ = read_contract(path)
    assert contract is not None
    rows = [f"{'compile bli-61':34} {'median':>10} {'best':>10}"]
    for name, source in (("from its path", path), ("from a parsed Contract", contract)):
        assert compile_contract(source, request, ["structured_output"]).interaction is not None
        times = timeit.repeat(
            lambda: compile_contract(source, request, ["structured_output"]),  # noqa: B023
            number=1,
            repeat=200,
        )
        rows.append(f"{name:34} {statistics.median(times) * 1e3:8.2f}ms {min(times) * 1e3:8.2f}ms")
    return rows


if __name__ == "__main__":
    print("canonical JSON + SHA-256 fingerprint (best of N)")
    print("\n".join(fingerprint_table()))
    print()
    print("output validation, 25-field nested schema, Draft 2020-12 with formats")
    print("\n".join(validation_table()))
    print()
    print("contract compiler (200 runs)")
    print("\n".join(compile_table()))
