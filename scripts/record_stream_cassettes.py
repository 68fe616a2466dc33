"""Record the streaming host's cassettes from real recorded streams (no keys, no network).

    python scripts/record_stream_cassettes.py

Each cassette holds the streaming host's own request (exact bytes, as the CLI sends them
for the example contract) answered by a stream a real gateway sent: the response body
is the recorded bytes verbatim, served by the loopback server in pieces as a live stream
arrives. The CLI then replays it: ``templiqx execute … --runtime openai-stream --replay``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from templiqx_core import ExecutionRequest, PortError, RenderRequest, compile_contract
from templiqx_langfuse import ModelConfig
from templiqx_langfuse.testing.cassettes import open_cassette
from templiqx_streaming_host import StreamingHostRuntime

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the loopback server is the test suite's
from tests.loopback import Reply, serve  # noqa: E402

LITELLM = ROOT / "reference" / "corpus" / "gateway-litellm" / "stream"
KEY = "loopback-recording-key"
# cassette -> (recorded stream, the model name it was recorded for)
PLAN = {
    "greeting-stream-litellm": ("mock-ok.sse", "mock-ok"),
    "greeting-stream-litellm-notjson": ("mock-notjson.sse", "mock-notjson"),
}


def recorded_reply(name: str) -> Reply:
    body = (LITELLM / name).read_bytes()
    head = (LITELLM / f"{name}.headers").read_text(encoding="utf-8").splitlines()
    headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
    content_type = {"content-type": headers["content-type"]}
    pieces = tuple(body[i : i + 97] for i in range(0, len(body), 97))
    return Reply(int(head[0].split()[1]), content_type, pieces=pieces)


def main() -> None:
    result = compile_contract(
        ROOT / "examples" / "greeting.yaml",
        RenderRequest(
            inputs=json.loads((ROOT / "examples" / "greeting.inputs.json").read_text()),
            context=json.loads((ROOT / "examples" / "greeting.context.json").read_text()),
        ),
        ["structured_output"],
    )
    assert result.interaction is not None, result.diagnostics
    for cassette, (stream, model) in PLAN.items():
        path = ROOT / "cassettes" / f"{cassette}.yaml"
        path.unlink(missing_ok=True)
        reply = recorded_reply(stream)
        with serve(lambda request, reply=reply: reply) as server:
            host = StreamingHostRuntime(
                ModelConfig(base_url=server.base_url, api_key=KEY, model=model)
            )
            with host, open_cassette(path, record_mode="all", secrets=[KEY]):
                try:
                    receipt = host.execute(ExecutionRequest(interaction=result.interaction))
                    outcome = f"ok output={receipt.output_fingerprint[:12]}"
                except PortError as error:
                    outcome = error.code
        print(f"{path.relative_to(ROOT)}: {outcome}")


if __name__ == "__main__":
    main()
