"""MCP server (``mcp`` extra): ``compile_contract`` and ``execute_contract`` over stdio, with the
CLI's envelopes. The caller is an agent: paths resolve inside the cwd or TEMPLIQX_MCP_ROOTS."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field, ValidationError

from . import codes
from ._application import compile_envelope, execute_contract
from ._canonical import sort_keys, wire_json
from ._contracts import OperationEnvelope, RenderRequest, StreamEvent
from ._errors import InvalidPath, NotFound, PortError
from ._loading import contract_source
from ._ports import RuntimeAdapter
from ._runtimes import RuntimeOptions, load_runtime
from ._version import __version__

ENV_MCP_ROOTS = "TEMPLIQX_MCP_ROOTS"  # directories besides the working directory
logger = logging.getLogger("templiqx.mcp")
#: Tool calls in flight at once; one more is refused with ``TQX_RUNTIME_RATE_LIMITED``.
MAX_TOOL_CALLS = 64
#: Threads doing tool work at once; further calls wait for one without holding anything.
TOOL_THREADS = 16
T = TypeVar("T")


async def _on_own_thread(work: Callable[[], T], slots: anyio.CapacityLimiter) -> T:
    """``work()`` on a daemon thread holding one of ``slots``: not on anyio's threads, which are
    no daemons (a call stuck in I/O would outlive stdin) and whose limiter stdio needs."""
    async with slots:
        done, token = anyio.Event(), anyio.lowlevel.current_token()
        outcome: Future[T] = Future()
        context = contextvars.copy_context()  # as anyio's threads see the caller's

        def target() -> None:
            try:
                outcome.set_result(context.run(work))
            except BaseException as error:  # handed to the awaiting task as is
                outcome.set_exception(error)
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                anyio.from_thread.run_sync(done.set, token=token)

        threading.Thread(target=target, name="templiqx-mcp-tool", daemon=True).start()
        await done.wait()
    return outcome.result()


def _envelope_result(envelope: OperationEnvelope[Any]) -> CallToolResult:
    """As the reference MCP server: not ok is a normal result, ``result`` sorted at every level."""
    data: dict[str, Any] = envelope.to_json()
    if "result" in data:
        data["result"] = sort_keys(data["result"])
    text = [TextContent(type="text", text=wire_json(data))]
    return CallToolResult(content=text, structured_content=data)


def error_result(code: str, message: str) -> CallToolResult:
    text = [TextContent(type="text", text=f"{code}: {message}")]
    data = {"error": {"code": code, "message": message}}
    return CallToolResult(content=text, structured_content=data, is_error=True)


class _Server(MCPServer):
    """Tool errors all start with a ``TQX_*`` code; at most ``MAX_TOOL_CALLS`` in flight."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.tool_slots = anyio.CapacityLimiter(TOOL_THREADS)
        self._in_flight = 0  # only touched on the event loop's thread

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        if self._in_flight >= MAX_TOOL_CALLS:
            busy = f"{MAX_TOOL_CALLS} tool calls running, the limit: retry once one ends"
            return error_result(codes.RUNTIME_RATE_LIMITED, busy)
        self._in_flight += 1
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:  # the SDK's: what the tool raised is its cause
            cause = error.__cause__
            if isinstance(cause, PortError):
                return error_result(cause.code, cause.message)
            if isinstance(cause, ValidationError):  # field names, never the caller's values
                fields = sorted({".".join(map(str, e["loc"])) for e in cause.errors()})
                return error_result(codes.DATA_INVALID, f"arguments of {name}: {fields}")
            if isinstance(error, UnexpectedToolError):
                logger.error("tool %r crashed", name, exc_info=cause)
                return error_result(codes.PORT, f"internal error in {name}")
            return error_result(codes.NOT_FOUND, str(error))  # "Unknown tool: NAME"
        finally:
            self._in_flight -= 1


# What an agent reads about each parameter (tools/list inputSchema descriptions).
Contract = Annotated[
    str, Field(description="A contract YAML path in the roots, or langfuse:NAME[@LABEL|#VERSION].")
]
Inputs = Annotated[dict[str, Any] | None, Field(description="The contract's inputs (JSON).")]
RenderContext = Annotated[dict[str, Any] | None, Field(description="Its context values (JSON).")]
Capabilities = Annotated[
    list[str] | None, Field(description="Target capabilities; default: the contract's own.")
]
FixtureOutput = Annotated[Any, Field(description="Output for the scripted runtime to return.")]
Stream = Annotated[bool, Field(description="Send each StreamEvent as a progress notification.")]


def build_server(
    runtime_name: str, options: RuntimeOptions
) -> tuple[MCPServer, RuntimeAdapter | None]:
    """The MCP server and the runtime it shares, to close after it (raises ``PortError`` for
    an unknown runtime, or a configured cassette outside the server's roots)."""
    extra = [p for p in options.env.get(ENV_MCP_ROOTS, "").split(os.pathsep) if p.strip()]
    roots = [Path(p).resolve() for p in [str(Path.cwd()), *extra]]

    def confine(value: str | Path, what: str) -> Path:
        """``value`` as given, once its real location (symlinks followed) is in the roots."""
        try:
            real = Path(value).resolve()
            found = real.is_file()
        except (OSError, RuntimeError, ValueError):  # a loop, a NUL, a name too long
            raise InvalidPath(f"{what} path cannot be used") from None
        if not any(real.is_relative_to(root) for root in roots):
            raise InvalidPath(f"{what} path {str(value)!r} is outside the roots ({ENV_MCP_ROOTS})")
        if not found:
            raise NotFound(f"{value}: no such {what} file")
        return Path(value)

    def call(
        contract: str, inputs: dict[str, Any] | None, context: dict[str, Any] | None
    ) -> tuple[str | Path, RenderRequest]:
        """The call's contract (a confined file, or a contract source's reference) and values."""
        where = contract if contract_source(contract) else confine(contract, "contract")
        # A value that is not JSON: call_tool answers its ValidationError (TQX_DATA_INVALID).
        return where, RenderRequest(inputs=inputs or {}, context=context or {})

    if options.replay is not None:
        confine(options.replay, "cassette")
    # A cassette plays each interaction once: under replay, each call replays it anew.
    shared = None if options.replay is not None else load_runtime(runtime_name, options)

    about = "Compile and execute templiqx prompt contracts: OperationEnvelope JSON, TQX_* codes."
    server = _Server(name="templiqx", version=__version__, instructions=about)

    @server.tool()
    async def compile_contract(
        contract: Contract,
        inputs: Inputs = None,
        context: RenderContext = None,
        capabilities: Capabilities = None,
    ) -> CallToolResult:
        """Compile a contract YAML file for the given inputs and context."""
        path, request = call(contract, inputs, context)
        run = functools.partial(compile_envelope, path, request, capabilities=capabilities)
        return _envelope_result(await _on_own_thread(run, server.tool_slots))

    # Named for the wire; the Python name avoids shadowing the application function.
    @server.tool(name="execute_contract")
    async def execute_contract_tool(
        contract: Contract,
        ctx: Context,
        inputs: Inputs = None,
        context: RenderContext = None,
        capabilities: Capabilities = None,
        fixture_output: FixtureOutput = None,
        stream: Stream = False,
    ) -> CallToolResult:
        """Compile and execute a contract on the server's runtime (which must offer the
        capabilities); with stream=true the result's stream_events lists the events sent."""
        path, request = call(contract, inputs, context)
        token, sent = anyio.lowlevel.current_token(), itertools.count(1)

        def forward(event: StreamEvent) -> None:
            # On the loop, each before the next: every event reaches the client before the result.
            message = event.model_dump_json()
            anyio.from_thread.run(ctx.report_progress, next(sent), None, message, token=token)

        def run() -> OperationEnvelope[Any]:
            with (
                load_runtime(runtime_name, options)
                if shared is None
                else contextlib.nullcontext(shared) as runtime
            ):
                return execute_contract(
                    path,
                    request,
                    runtime=runtime,
                    capabilities=capabilities,
                    fixture_output=fixture_output,
                    stream=stream,
                    on_event=forward if stream else None,
                )

        return _envelope_result(await _on_own_thread(run, server.tool_slots))

    return server, shared


def serve(options: RuntimeOptions, *, runtime_name: str) -> None:
    """Run the stdio server until the client disconnects."""
    server, shared = build_server(runtime_name, options)
    with contextlib.nullcontext() if shared is None else shared:  # closed after the server
        server.run("stdio")
