"""Shared fixtures: where the reference data lives, and helpers every layer uses."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import TypeAdapter

from templiqx_core import (
    CompiledInteraction,
    ExecutionReceipt,
    ExecutionRequest,
    PortError,
    RenderRequest,
    RuntimeAdapter,
    StreamEvent,
    codes,
    compile_contract,
)
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
STREAM_EVENT: TypeAdapter[StreamEvent] = TypeAdapter(StreamEvent)


def parse_stream_event(data: Any) -> StreamEvent:
    """The ``StreamEvent`` a JSON object (or JSON text) is, as a host reads one with pydantic."""
    if isinstance(data, (str, bytes)):
        return STREAM_EVENT.validate_json(data)
    return STREAM_EVENT.validate_python(data)


#: Reference data kept in the repository (see reference/README.md for provenance).
REFERENCE = REPO_ROOT / "reference"
CORPUS = REFERENCE / "corpus"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


# -- the Langfuse adapter against a loopback model server -------------------------

MODEL_KEY = "sk-model-SECRET-0123456789"
PUBLIC_KEY = "pk-lf-PUBLIC-0123456789"
SECRET_KEY = "sk-lf-SECRET-0123456789"
GREETING = {"greeting": "Hello Ryan"}
_keys = itertools.count()


def ok_reply(request: ServerRequest) -> Reply:
    return json_reply(chat_completion(GREETING))


@pytest.fixture
def model_server() -> Iterator[LoopbackModelServer]:
    server = LoopbackModelServer(ok_reply).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def greeting(reference_dir: Path) -> CompiledInteraction:
    result = compile_contract(
        reference_dir / "demo" / "greeting.yaml",
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        ["structured_output"],
    )
    assert result.interaction is not None
    return result.interaction


@pytest.fixture
def greeting_request(greeting: CompiledInteraction) -> ExecutionRequest:
    return ExecutionRequest(interaction=greeting)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


RuntimeFactory = Callable[..., LangfuseTracedRuntime]

#: How a suite's calls are made: a sync host's ``execute``, or an async host's ``aexecute``.
IO_MODES = ["sync", "async"]
#: A suite runs every test both ways with ``pytestmark = BOTH_IO``.
BOTH_IO = pytest.mark.parametrize("io", IO_MODES, indirect=True)


@pytest.fixture(autouse=True)
def io(request: pytest.FixtureRequest) -> str:
    """``sync`` unless the suite is parametrised with ``BOTH_IO``."""
    return str(getattr(request, "param", "sync"))


@pytest.fixture
def event_loop_runner() -> Iterator[asyncio.Runner]:
    """One event loop for the test's async calls (so its runtime keeps one pool)."""
    with asyncio.Runner() as runner:
        yield runner


class AsyncDriven:
    """A runtime as an async host drives it: every ``execute`` and ``execute_streaming``
    of a suite runs ``aexecute``/``aexecute_streaming`` on the test's event loop, so one
    suite checks both socket layers (the async path shares everything but its I/O)."""

    runner: asyncio.Runner

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        # In the caller's context, as a task started where it is would see it (deadlines).
        coro = self.aexecute(request)  # type: ignore[attr-defined]
        return self.runner.run(coro, context=contextvars.copy_context())  # type: ignore[no-any-return]

    def execute_streaming(self, request: ExecutionRequest, sink: Any) -> ExecutionReceipt:
        coro = self.aexecute_streaming(request, sink)  # type: ignore[attr-defined]
        return self.runner.run(coro, context=contextvars.copy_context())  # type: ignore[no-any-return]


def async_driven(kind: type[Any], runner: asyncio.Runner) -> type[Any]:
    """``kind`` whose sync calls run its async path on ``runner``'s loop."""
    return type(f"AsyncDriven{kind.__name__}", (AsyncDriven, kind), {"runner": runner})


@pytest.fixture
def make_runtime(
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    io: str,
    request: pytest.FixtureRequest,
) -> Iterator[RuntimeFactory]:
    """Runtimes against the loopback server, traced into ``exporter``; closed at teardown.
    Under ``BOTH_IO`` the async variant drives each call through ``aexecute``."""
    made: list[LangfuseTracedRuntime] = []
    kind: type[LangfuseTracedRuntime] = LangfuseTracedRuntime
    if io == "async":
        kind = async_driven(kind, request.getfixturevalue("event_loop_runner"))

    def build(
        *, timeout_s: float = 5.0, tracing: bool = True, base_url: str | None = None, **kw: object
    ) -> LangfuseTracedRuntime:
        # A fresh public key per runtime: the SDK shares one resource manager per key.
        suffix = next(_keys)
        extra = {k: kw.pop(k) for k in ("project_id", "schema_score_name", "mask") if k in kw}
        langfuse = (
            LangfuseConfig(
                public_key=str(kw.pop("public_key", f"{PUBLIC_KEY}-{suffix}")),
                secret_key=SECRET_KEY,
                base_url=str(kw.pop("langfuse_base_url", "http://127.0.0.1:9")),
                flush_timeout_s=float(kw.pop("flush_timeout_s", 2.0)),
                **extra,  # type: ignore[arg-type]
            )
            if tracing
            else LangfuseConfig()
        )
        runtime = kind(
            ModelConfig(
                base_url=base_url or model_server.base_url,
                api_key=MODEL_KEY,
                model="test-model",
                timeout_s=timeout_s,
                proxy=kw.pop("proxy", None),  # type: ignore[arg-type]
            ),
            langfuse,
            span_exporter=kw.pop("span_exporter", exporter),  # type: ignore[arg-type]
            **kw,  # type: ignore[arg-type]
        )
        made.append(runtime)
        return runtime

    yield build
    for runtime in made:
        runtime.close()


# -- the port's lifecycle ------------------------------------------------------------


def start_call(run: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``run`` on a thread; the list collects what it raised (for close-races)."""
    raised: list[BaseException] = []

    def call() -> None:
        try:
            run()
        except BaseException as error:
            raised.append(error)

    worker = threading.Thread(target=call)
    worker.start()
    return worker, raised


def assert_closed(runtime: RuntimeAdapter, request: ExecutionRequest) -> None:
    """A closed runtime refuses with ``TQX_RUNTIME_CLOSED``, a ``PortError``."""
    with pytest.raises(PortError) as raised:
        runtime.execute(request)
    assert raised.value.code == codes.RUNTIME_CLOSED
