"""The MCP stdio transport, with an answer for every request the SDK would drop.

A line the SDK's parser rejects (a lone surrogate, nesting past about 200 levels) is only
logged by the session, so the client would wait forever: a refused ``tools/call`` gets a
``TQX_DATA_INVALID`` tool error, another request a JSON-RPC error starting with the code,
and a line that is no request at all the JSON-RPC 2.0 error with ``"id": null``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, BinaryIO, TextIO

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from . import codes

logger = logging.getLogger("templiqx.mcp")

_TOKENS = re.compile(r'["{}\[\],]')
# A JSON-escaped lone surrogate decodes fine but cannot be written as UTF-8: echoing it
# back to the client would kill the stdout writer.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _skip_blank(text: str, i: int) -> int:
    while text[i : i + 1] in (" ", "\t", "\r", "\n"):
        i += 1
    return i


def _top_level_members(text: str, names: frozenset[str]) -> dict[str, Any]:
    """The top-level members ``names`` of the JSON object ``text``, read without parsing the
    rest, so a message too deep (or too odd) for any parser still yields its id."""
    found: dict[str, Any] = {}
    if not text.lstrip().startswith("{"):
        return found
    decoder = json.JSONDecoder()
    depth, at_key, i = 0, False, 0
    while (match := _TOKENS.search(text, i)) is not None:
        char, i = match.group(), match.end()
        if char == '"':
            try:
                key, i = decoder.raw_decode(text, i - 1)  # the string starting at the quote
            except ValueError:
                return found
            if depth == 1 and at_key and key in names:
                colon = _skip_blank(text, i)
                if text[colon : colon + 1] == ":":
                    start = _skip_blank(text, colon + 1)
                    with contextlib.suppress(ValueError, RecursionError):
                        found[key], i = decoder.raw_decode(text, start)
            at_key = False
        elif char in "{[":
            depth += 1
            at_key = depth == 1
        elif char in "}]":
            depth -= 1
        else:
            at_key = depth == 1
    return found


def error_result(code: str, message: str) -> types.CallToolResult:
    """A tool error as every tool error goes out: text and structured ``TQX_*`` code."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"error": {"code": code, "message": message}},
        is_error=True,
    )


def _refusal(request_id: str | int | None, code: int, problem: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(code=code, message=f"{codes.DATA_INVALID}: {problem}"),
    )


def _valid_id(value: object) -> bool:  # MCP forbids JSON-RPC's fractional and null ids
    return isinstance(value, str | int) and not isinstance(value, bool)


_ABSENT = object()
_BAD_ID = "its id must be a string or an integer"


def _invalid_id(parsed: types.JSONRPCMessage, line: str) -> bool:
    """A request whose id is ``true``, ``1.5``, ``null``...: the SDK reads it as a
    notification (ignoring the id) and never answers; JSON-RPC wants an Invalid Request."""
    if not isinstance(parsed, types.JSONRPCNotification) or (
        "id" not in line and "\\u" not in line
    ):
        return False
    try:
        message = json.loads(line)
    except (RecursionError, ValueError):
        return False
    return isinstance(message, dict) and "id" in message


def _answer(line: str, error: ValidationError) -> types.JSONRPCMessage | None:
    """The JSON-RPC 2.0 answer to ``line`` the SDK would drop; ``None`` when nobody waits
    for one (a blank line, a notification, a response)."""
    if not line.strip():
        return None
    try:
        message: Any = json.loads(line)
    except json.JSONDecodeError as bad:
        # Not JSON at all: nothing on the line can be trusted, the id included.
        return _refusal(
            None, types.PARSE_ERROR, f"the line is not JSON ({bad.msg} at column {bad.colno})"
        )
    except (RecursionError, ValueError):
        # JSON too deep (or a number too long) for the stdlib: read the id the slow way.
        members = _top_level_members(line, frozenset({"id", "method"}))
        if not _valid_id(members.get("id")) or not isinstance(members.get("method"), str):
            return None
        return _request_answer(members, error)
    if isinstance(message, list):
        return _refusal(
            None,
            types.INVALID_REQUEST,
            "batches are not part of MCP (removed in 2025-06-18); send one request per line",
        )
    if not isinstance(message, dict):
        return _refusal(None, types.INVALID_REQUEST, "it is not a JSON-RPC 2.0 request object")
    if "id" not in message:
        if "method" in message:
            return None  # a notification: never answered
        return _refusal(None, types.INVALID_REQUEST, "it has neither an id nor a method")
    if "method" not in message and ("result" in message or "error" in message):
        return None  # the client's own response
    if not _valid_id(message["id"]):
        return _refusal(None, types.INVALID_REQUEST, _BAD_ID)
    return _request_answer(message, error)


def _request_answer(members: dict[str, Any], error: ValidationError) -> types.JSONRPCMessage:
    request_id, method = members["id"], members.get("method", _ABSENT)
    # An id that cannot be echoed was, for JSON-RPC 2.0, not determined: it is null.
    echoable = not isinstance(request_id, str) or _SURROGATE.search(request_id) is None
    reply_id = request_id if echoable else None
    if not isinstance(method, str):
        problem = "it has no method" if method is _ABSENT else "its method must be a string"
        return _refusal(reply_id, types.INVALID_REQUEST, f"the request was refused: {problem}")
    first = error.errors()[0]
    problem = "it is not a JSON-RPC 2.0 request"
    invalid_json = first["type"] == "json_invalid"
    if invalid_json:
        detail = first.get("ctx", {}).get("error", "invalid JSON")
        problem = (
            f"it is not JSON the MCP transport accepts ({detail}; strings must be Unicode "
            "text without lone surrogates, nesting is limited to about 200 levels)"
        )
    shown = ascii(method) if _SURROGATE.search(method) else method
    message = f"the {shown} request was refused: {problem}"
    if method == "tools/call" and reply_id is not None:
        result = error_result(codes.DATA_INVALID, message)
        dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return types.JSONRPCResponse(jsonrpc="2.0", id=reply_id, result=dumped)
    return _refusal(reply_id, types.PARSE_ERROR if invalid_json else types.INVALID_REQUEST, message)


class _GuardedStdin(anyio.AsyncFile[str]):
    """The client's lines, minus those the SDK cannot parse (answered here instead)."""

    def __init__(self, fp: TextIO) -> None:
        super().__init__(fp)
        self.replies: Any = None  # the transport's write stream, once it exists
        self.ready = anyio.Event()

    async def readline(self) -> str:
        while True:
            line = await super().readline()
            if not line:
                return line
            try:
                parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValidationError as error:
                reply = _answer(line, error)
            else:
                if not _invalid_id(parsed, line):
                    return line
                reply = _refusal(None, types.INVALID_REQUEST, _BAD_ID)
            if reply is None:
                if line.strip():
                    logger.warning("ignored a line from the client the SDK cannot read")
                continue
            try:  # the SDK's writer dies on a reply it cannot encode
                reply.model_dump_json(by_alias=True, exclude_unset=True)
            except ValueError:
                logger.warning("ignored a request whose answer cannot be encoded")
                continue
            await self.ready.wait()
            await self.replies.send(SessionMessage(reply))
            return line


@contextlib.contextmanager
def _claimed_stdin() -> Iterator[BinaryIO]:
    """The client's stdin on a private descriptor; fd 0 reads /dev/null meanwhile, so no
    handler or child process can take the client's bytes (as the SDK does itself)."""
    try:
        private = os.dup(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    except OSError:
        yield sys.stdin.buffer
        return
    try:
        # closefd=False: a worker thread may still block on it after the transport ends.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


@contextlib.asynccontextmanager
async def guarded_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.server.stdio.stdio_server`` reading through ``_GuardedStdin``."""
    with _claimed_stdin() as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
        stdin = _GuardedStdin(text)
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            stdin.replies = write_stream
            stdin.ready.set()
            yield read_stream, write_stream
