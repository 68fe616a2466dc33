"""Schema patterns cost time linear in the value: a pattern the linear-time engine cannot
run (lookaround, backreferences) is refused when the schema compiles, for inputs in
``compile`` (the CLI's, and the one MCP's tools call) as for output schemas; a pattern it
can run validates megabytes in milliseconds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from templiqx_core import RenderRequest, codes, compile_contract
from templiqx_core.adapters import compile_schema
from tests.conftest import REFERENCE
from tests.mcp.test_mcp_server import CONTEXT, session

#: Before: 4 000 characters took 13 ms, 8 000 took 51 ms, 64 000 took 3.4 s (quadratic).
QUADRATIC = r"(?=\w*c)\w"
VALUE = "a" * 100_000


def contract_with(tmp_path: Path, *, input_pattern: str | None, output_pattern: str | None) -> Path:
    document = yaml.safe_load((REFERENCE / "demo" / "greeting.yaml").read_text("utf-8"))
    if input_pattern is not None:
        document["inputs"]["name"]["schema"]["pattern"] = input_pattern
    if output_pattern is not None:
        document["output_schema"]["properties"]["greeting"]["pattern"] = output_pattern
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(document), "utf-8")
    return path


def test_the_cli_refuses_a_quadratic_input_pattern_at_compile_without_running_it(
    tmp_path: Path,
) -> None:
    contract = contract_with(tmp_path, input_pattern=QUADRATIC, output_pattern=None)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"name": VALUE}), "utf-8")
    context = tmp_path / "context.json"
    context.write_text(json.dumps({"organization": "Blinqx"}), "utf-8")
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("templiqx")), "compile", "--json", str(contract),
         "--inputs", str(inputs), "--context", str(context)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    envelope = json.loads(done.stdout)
    found = [(d["code"], d.get("json_pointer")) for d in envelope["diagnostics"]]
    assert (codes.VALUE_SCHEMA, "/inputs/name") in found, found
    assert "regex" in done.stdout  # the validator names the pattern it refuses
    assert took < 10.0, f"compile took {took:.1f} s"


def test_a_quadratic_output_pattern_is_refused_when_the_contract_compiles(
    tmp_path: Path,
) -> None:
    contract = contract_with(tmp_path, input_pattern=None, output_pattern=QUADRATIC)
    result = compile_contract(
        contract,
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        ["structured_output"],
    )
    assert result.interaction is None
    assert [(d.code, d.json_pointer) for d in result.diagnostics] == [
        (codes.VALUE_SCHEMA, "/output_schema")
    ]


@pytest.mark.parametrize("pattern", [r"(?<!x)a*c", r"(a*)\1c", r"a(?=b)"])
def test_patterns_outside_the_linear_subset_are_refused(pattern: str) -> None:
    with pytest.raises(Exception, match='is not a "regex"') as caught:
        compile_schema({"type": "string", "pattern": pattern})
    assert getattr(caught.value, "code", None) == codes.DATA_INVALID


def test_a_pattern_in_the_subset_validates_in_time_linear_in_the_value() -> None:
    validator = compile_schema({"type": "string", "pattern": r"^\w+c$"})
    timings = []
    for size in (500_000, 1_000_000, 2_000_000):
        started = time.perf_counter()
        assert not validator.is_valid("a" * size)
        timings.append(time.perf_counter() - started)
    assert timings[-1] < 0.5, timings
    assert validator.is_valid("a" * 1_000_000 + "c")


def test_an_agent_over_mcp_gets_the_same_refusal(tmp_path: Path) -> None:
    contract = contract_with(tmp_path, input_pattern=QUADRATIC, output_pattern=None)

    async def scenario() -> Any:
        roots = {"TEMPLIQX_MCP_ROOTS": str(tmp_path)}
        async with session("--runtime", "scripted", env=roots) as client:
            with anyio.fail_after(30):
                return await client.call_tool(
                    "compile_contract",
                    {"contract": str(contract), "inputs": {"name": VALUE}, "context": CONTEXT},
                )

    result = anyio.run(scenario)
    envelope = result.structured_content
    assert envelope["ok"] is False
    found = [(d["code"], d.get("json_pointer")) for d in envelope["diagnostics"]]
    assert (codes.VALUE_SCHEMA, "/inputs/name") in found, found
