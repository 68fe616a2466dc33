"""The README's FastAPI example, served by a real uvicorn process, under a burst of requests.

100 concurrent requests against an upstream that answers each call after 0.3 s: with
``aexecute`` in a thread pool they took 8.65 s (six calls in flight); natively async
they are all in flight at once. Every request gets its own output and trace URL, and
the lifespan's ``aclose`` flushes every generation when uvicorn stops (SIGTERM).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from tests.conftest import MODEL_KEY, PUBLIC_KEY, REPO_ROOT, SECRET_KEY, closed_port
from tests.loopback import Reply, serve
from tests.otlp_receiver import otlp_receiver
from tests.slow_upstream import slow_upstream

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def wait_until_serving(base: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise AssertionError(
                f"uvicorn exited: {process.stderr.read() if process.stderr else ''!r}"
            )
        try:
            httpx.get(f"{base}/docs", timeout=0.5)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("uvicorn did not start")


@pytest.mark.slow
def test_the_fastapi_example_serves_a_burst_concurrently_and_flushes_its_traces() -> None:
    port = closed_port()
    with slow_upstream(0.3) as upstream, otlp_receiver() as langfuse:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "OPENAI_"))},
            "TEMPLIQX_MODEL_BASE_URL": upstream.base_url,
            "TEMPLIQX_MODEL_API_KEY": MODEL_KEY,
            "TEMPLIQX_MODEL": "test-model",
            "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY,
            "LANGFUSE_SECRET_KEY": SECRET_KEY,
            "LANGFUSE_BASE_URL": langfuse.base_url,
            "LANGFUSE_PROJECT_ID": "cm0example",
        }
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "examples.fastapi_app.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=REPO_ROOT,
            env=env,
            stderr=subprocess.PIPE,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(base, process)

            async def burst() -> tuple[list[httpx.Response], float]:
                async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                    started = time.monotonic()
                    responses = await asyncio.gather(
                        *(
                            client.post("/greet", json={"name": f"N{i}", "organization": "Acme"})
                            for i in range(100)
                        )
                    )
                    return responses, time.monotonic() - started

            responses, elapsed = asyncio.run(burst())
        finally:
            process.send_signal(signal.SIGTERM)  # uvicorn runs the lifespan's shutdown
            stderr = process.communicate(timeout=30)[1]
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.returncode in (0, -signal.SIGTERM), stderr
        bodies = [r.json() for r in responses]
        assert [b["output"] for b in bodies] == [
            {"greeting": f"Hello N{i} for Acme"} for i in range(100)
        ]
        assert elapsed < 4.0  # 0.3 s upstream; 8.65 s through six worker threads
        assert upstream.max_in_flight >= 50
        urls = {b["trace_url"] for b in bodies}
        assert len(urls) == 100
        assert all(u.startswith(f"{langfuse.base_url}/project/cm0example/traces/") for u in urls)
        assert len(langfuse.span_names()) == 100  # all flushed by the lifespan's aclose


@pytest.mark.parametrize(
    ("upstream_reply", "status", "code"),
    [
        (None, 504, "TQX_RUNTIME_TIMEOUT"),
        (Reply(429, {"retry-after": "3"}, b"{}"), 503, "TQX_RUNTIME_RATE_LIMITED"),
        (Reply(502, {}, b"bad gateway"), 502, "TQX_RUNTIME_UNAVAILABLE"),
        (
            Reply(200, {"content-type": "application/json"}, b"not json"),
            502,
            "TQX_RUNTIME_INVALID_RESPONSE",
        ),
    ],
    ids=["hang", "rate limited", "gateway error", "not json"],
)
def test_a_failing_model_call_is_an_http_answer_named_by_its_code(
    upstream_reply: Reply | None, status: int, code: str
) -> None:
    """The example maps the runtime's typed failures: never a 500 with a traceback."""
    from examples.fastapi_app.app import app

    def respond(request: object) -> Reply:
        return upstream_reply or Reply(hang_s=5)

    async def call(base_url: str) -> httpx.Response:
        async with LangfuseTracedRuntime(
            ModelConfig(base_url=base_url, api_key=MODEL_KEY, model="m", timeout_s=0.5),
            LangfuseConfig(tracing=False),
        ) as runtime:
            app.state.runtime = runtime
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
                return await client.post("/greet", json={"name": "R", "organization": "A"})

    with serve(respond) as server:
        response = asyncio.run(call(server.base_url))
    assert response.status_code == status
    assert response.json()["code"] == code
    assert MODEL_KEY not in response.text
    if code == "TQX_RUNTIME_RATE_LIMITED":
        assert response.headers["retry-after"] == "3"
