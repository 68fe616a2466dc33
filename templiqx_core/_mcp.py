"""MCP surface (SPEC §8.5): ``compile_contract`` and ``execute_contract`` over stdio.

Agents get the same ``OperationEnvelope`` JSON the CLI prints for the same inputs. With
``stream=true`` each ``StreamEvent`` reaches the client as a progress notification (its
message is the event's JSON) while it happens; the tool result carries the envelope.
Needs the optional extra: ``pip install 'templiqx-langfuse[mcp]'``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the MCP server needs the mcp extra: pip install 'templiqx-langfuse[mcp]'"
    ) from error

from . import codes
from ._application import compile_envelope, execute_contract
from ._compiler import read_contract
from ._contracts import OperationEnvelope, RenderRequest, StreamEvent
from ._errors import PortError
from ._ports import RuntimeAdapter
from ._runtimes import RuntimeOptions, load_runtime
from ._serde import sort_keys, wire_json
from ._version import __version__

__all__ = ["build_server", "serve"]


def _envelope_result(envelope: OperationEnvelope[Any]) -> CallToolResult:
    """The envelope as the reference MCP server returns it (``StructuredEnvelope``).

    A not-ok envelope is a normal result (domain diagnostics are not MCP errors, as in the
    reference); ``result`` goes through ``serde_json::Value`` there, so its keys are
    sorted at every level. The text content is that JSON, compact, as serde writes it.
    """
    data: dict[str, Any] = envelope.to_json()
    if "result" in data:
        data["result"] = sort_keys(data["result"])
    return CallToolResult(
        content=[TextContent(type="text", text=wire_json(data))],
        structured_content=data,
        is_error=False,
    )


def _render_request(inputs: dict[str, Any] | None, context: dict[str, Any] | None) -> RenderRequest:
    try:
        return RenderRequest(inputs=inputs or {}, context=context or {})
    except ValueError as error:
        raise ToolError(
            f"{codes.DATA_INVALID}: inputs/context must be JSON objects ({error})"
        ) from None


def _contract_path(contract: str) -> Path:
    path = Path(contract)
    if not path.is_file():
        raise ToolError(f"{codes.NOT_FOUND}: {contract}: no such contract file")
    return path


class _Runtimes:
    """One runtime for the server's life; a fresh one per call when replaying a cassette
    (a cassette plays each interaction once, and every tool call is a new replay)."""

    def __init__(self, name: str, options: RuntimeOptions) -> None:
        self.name, self.options = name, options
        self._shared: RuntimeAdapter | None = None
        if options.replay is None:
            self._shared = load_runtime(name, options)

    @contextlib.contextmanager
    def acquire(self) -> Iterator[RuntimeAdapter]:
        if self._shared is not None:
            yield self._shared
            return
        runtime = load_runtime(self.name, self.options)
        try:
            yield runtime
        finally:
            runtime.close()

    def close(self) -> None:
        if self._shared is not None:
            self._shared.close()


def build_server(runtime_name: str, options: RuntimeOptions) -> tuple[MCPServer, _Runtimes]:
    """The MCP server and its runtimes (raises ``PortError`` for an unknown runtime)."""
    runtimes = _Runtimes(runtime_name, options)
    server = MCPServer(
        name="templiqx",
        version=__version__,
        instructions=(
            "Compile and execute templiqx prompt contracts. Results are OperationEnvelope "
            "JSON with stable TQX_* diagnostic codes and SHA-256 fingerprints."
        ),
    )

    @server.tool()
    def compile_contract(
        contract: str,
        inputs: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        capabilities: list[str] | None = None,
    ) -> CallToolResult:
        """Compile a contract YAML file for the given inputs and context.

        capabilities defaults to the contract's own declared capabilities.
        """
        path = _contract_path(contract)
        request = _render_request(inputs, context)
        if capabilities is None:
            parsed, _ = read_contract(path)
            capabilities = [] if parsed is None else parsed.declared_capabilities
        return _envelope_result(compile_envelope(path, request, capabilities=capabilities))

    # Named for the wire; the Python name avoids shadowing the application function.
    @server.tool(name="execute_contract")
    async def execute_contract_tool(
        contract: str,
        ctx: Context,
        inputs: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        capabilities: list[str] | None = None,
        fixture_output: Any = None,
        stream: bool = False,
    ) -> CallToolResult:
        """Compile and execute a contract on the server's runtime.

        With stream=true every StreamEvent is sent as a progress notification as it
        happens, and the result's stream_events lists them. capabilities defaults to
        what the runtime offers.
        """
        path = _contract_path(contract)
        request = _render_request(inputs, context)

        def run() -> OperationEnvelope[Any]:
            emitted = 0

            def forward(event: StreamEvent) -> None:
                nonlocal emitted
                emitted += 1
                anyio.from_thread.run(ctx.report_progress, emitted, None, event.model_dump_json())

            with runtimes.acquire() as runtime:
                caps = (
                    capabilities
                    if capabilities is not None
                    else (runtime.descriptor().capabilities)
                )
                return execute_contract(
                    path,
                    request,
                    runtime=runtime,
                    capabilities=caps,
                    fixture_output=fixture_output,
                    stream=stream,
                    on_event=forward if stream else None,
                )

        try:
            envelope = await anyio.to_thread.run_sync(run)
        except PortError as error:
            raise ToolError(f"{error.code}: {error}") from None
        return _envelope_result(envelope)

    return server, runtimes


def serve(options: RuntimeOptions, *, runtime_name: str) -> None:
    """Run the stdio server until the client disconnects."""
    server, runtimes = build_server(runtime_name, options)
    try:
        server.run("stdio")
    finally:
        runtimes.close()
