from __future__ import annotations

from pathlib import Path

import pytest

from templiqx_core import CompiledInteraction, ExecutionRequest, RenderRequest
from templiqx_core._compiler import compile_contract
from tests.conftest import read_json


def compile_reference(reference_dir: Path, contract: str, request: str) -> CompiledInteraction:
    render = RenderRequest.model_validate(read_json(reference_dir / "crm3" / "evals" / request))
    result = compile_contract(
        reference_dir / "crm3" / "contracts" / contract, render, ["structured_output"]
    )
    assert result.interaction is not None, result.diagnostics
    return result.interaction


@pytest.fixture(scope="session")
def bli61(reference_dir: Path) -> CompiledInteraction:
    return compile_reference(
        reference_dir, "bli-61-date-term-extraction.yaml", "bli-61-request.json"
    )


@pytest.fixture(scope="session")
def bli62(reference_dir: Path) -> CompiledInteraction:
    return compile_reference(reference_dir, "bli-62-document-drafting.yaml", "bli-62-request.json")


@pytest.fixture(scope="session")
def bli61_output(reference_dir: Path) -> object:
    return read_json(reference_dir / "crm3" / "evals" / "bli-61-output.json")


@pytest.fixture
def bli61_request(bli61: CompiledInteraction, bli61_output: object) -> ExecutionRequest:
    return ExecutionRequest(interaction=bli61, fixture_output=bli61_output)
