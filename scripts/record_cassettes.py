"""Re-record every cassette in ``cassettes/``.

    python scripts/record_cassettes.py            # loopback reference server (no keys)
    python scripts/record_cassettes.py --real     # success cases against a real provider

``--real`` reads TEMPLIQX_MODEL_BASE_URL / TEMPLIQX_MODEL_API_KEY / TEMPLIQX_MODEL (or the
OPENAI_* equivalents). Fault cases (429, 503, malformed body) cannot be provoked on a
real provider on demand, so they are always recorded against the loopback server, which
answers each example contract with its eval fixture. Credentials are scrubbed at record
time; check `git diff cassettes/` before committing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from templiqx_core import (
    CompiledInteraction,
    ExecutionRequest,
    PortError,
    RenderRequest,
    compile_contract,
)
from templiqx_core._compiler import read_contract
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from templiqx_langfuse.testing.cassettes import open_cassette

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the loopback server is the test suite's
from tests.loopback import Reply, ServerRequest, chat_completion, json_reply, serve  # noqa: E402

CASSETTES = ROOT / "cassettes"
REFERENCE = ROOT / "reference"
CONTRACTS = {
    "greeting": ROOT / "examples" / "greeting.yaml",
    "bli-61": REFERENCE / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml",
    "bli-62": REFERENCE / "crm3" / "contracts" / "bli-62-document-drafting.yaml",
}
LOOPBACK_KEY = "loopback-recording-key"


def eval_case(name: str) -> tuple[CompiledInteraction, Any]:
    contract, diagnostics = read_contract(CONTRACTS[name])
    if contract is None:
        sys.exit(f"{name}: {diagnostics[0].message}")
    case = contract.evals[0]
    result = compile_contract(
        contract, RenderRequest(inputs=case.inputs, context=case.context), ["structured_output"]
    )
    assert result.interaction is not None, result.diagnostics
    return result.interaction, case.fake_output


def fixed(reply: Reply) -> Callable[[ServerRequest], Reply]:
    return lambda request: reply


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def plan() -> list[tuple[str, str, bool, Callable[[ServerRequest], Reply]]]:
    """(cassette, contract, may use a real provider, loopback responder)."""
    entries = []
    for name in CONTRACTS:
        _, output = eval_case(name)
        body = chat_completion(output, usage=usage(180, 60), response_id=f"chatcmpl-{name}")
        entries.append((f"{name}-success", name, True, fixed(json_reply(body))))
    invalid = chat_completion({"greeting": 42}, response_id="chatcmpl-invalid")
    entries += [
        ("greeting-schema-invalid", "greeting", False, fixed(json_reply(invalid))),
        (
            "greeting-429-retry-after",
            "greeting",
            False,
            fixed(
                json_reply(
                    {
                        "error": {
                            "message": "Rate limit reached",
                            "type": "requests",
                            "code": "rate_limit_exceeded",
                        }
                    },
                    status=429,
                    headers={"retry-after": "2", "x-ratelimit-remaining-requests": "0"},
                )
            ),
        ),
        (
            "greeting-503",
            "greeting",
            False,
            fixed(
                Reply(
                    status=503,
                    headers={"content-type": "text/plain"},
                    body=b"upstream connect error or disconnect/reset before headers",
                )
            ),
        ),
        (
            "greeting-malformed",
            "greeting",
            False,
            fixed(
                Reply(
                    status=200,
                    headers={"content-type": "application/json"},
                    body=b'{"id": "chatcmpl-trunc", "choices": [{"mess',
                )
            ),
        ),
    ]
    return entries


def record(runtime: LangfuseTracedRuntime, secrets: list[str], cassette: str, name: str) -> str:
    interaction, _ = eval_case(name)
    path = CASSETTES / f"{cassette}.yaml"
    path.unlink(missing_ok=True)
    with open_cassette(path, record_mode="all", secrets=secrets):
        try:
            receipt = runtime.execute(ExecutionRequest(interaction=interaction))
            outcome = (
                f"ok output={receipt.output_fingerprint[:12]} valid={receipt.output_schema_valid}"
            )
        except PortError as error:
            outcome = error.code
    return f"{path.relative_to(ROOT)}: {outcome}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="record success cases for real")
    args = parser.parse_args()
    CASSETTES.mkdir(exist_ok=True)
    real = LangfuseTracedRuntime.from_env() if args.real else None
    try:
        for cassette, name, may_be_real, responder in plan():
            if real is not None and may_be_real:
                print(record(real, list(real.model.secrets()), cassette, name))
                continue
            with serve(responder) as server:
                config = ModelConfig(
                    base_url=server.base_url, api_key=LOOPBACK_KEY, model="loopback-model"
                )
                with LangfuseTracedRuntime(config, LangfuseConfig()) as runtime:
                    print(record(runtime, [LOOPBACK_KEY], cassette, name))
    finally:
        if real is not None:
            real.close()
    print(json.dumps({"recorded": len(plan())}))


if __name__ == "__main__":
    main()
