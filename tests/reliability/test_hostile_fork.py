"""``os.fork()`` after the runtime was used: the child never touches the parent's sockets.

A real fork (gunicorn ``--preload``, multiprocessing's default start method on Linux)
of a process whose runtime holds a pooled keep-alive connection. Parent and child then
call concurrently; each must get its own answer, and the child's request must arrive on
a connection of its own.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable

import pytest

from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
from templiqx_langfuse import DeadlineTransport
from tests.conftest import REFERENCE, RuntimeFactory
from tests.loopback import chat_completion
from tests.raw_http import RawRequest, http_response, raw_server


def request_for(name: str) -> ExecutionRequest:
    compiled = compile_contract(
        REFERENCE / "demo" / "greeting.yaml",
        RenderRequest(inputs={"name": name}, context={"organization": "Blinqx"}),
        ["structured_output"],
    )
    assert compiled.interaction is not None
    return ExecutionRequest(interaction=compiled.interaction)


def echo(request: RawRequest) -> bytes:
    """Answers with the request's last message, so every caller can recognise its own."""
    said = request.json()["messages"][-1]["content"]
    return http_response(200, json.dumps(chat_completion({"greeting": said})).encode())


def fork() -> int:
    with warnings.catch_warnings():
        # Python >= 3.12 warns when a multi-threaded process forks (the test server's
        # threads are not used by the child).
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def run_in_child(call: Callable[[], object]) -> tuple[int, Callable[[], object]]:
    """Fork; the child runs ``call`` and reports through a pipe, then exits at once."""
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:  # pragma: no cover - runs in the child, which never returns to pytest
        try:
            os.close(read_end)
            try:
                result: object = {"ok": call()}
            except BaseException as error:  # report anything, never unwind into pytest
                result = {"error": f"{type(error).__name__}: {error}"}
            os.write(write_end, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_end)

    def outcome() -> object:
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        os.close(read_end)
        os.waitpid(pid, 0)
        return json.loads(b"".join(chunks))

    return pid, outcome


@pytest.mark.parametrize("client", ["owned", "host DeadlineTransport"])
def test_child_gets_fresh_connections_and_each_side_its_own_answer(
    client: str, make_runtime: RuntimeFactory
) -> None:
    with raw_server(echo) as server:
        lent = None if client == "owned" else DeadlineTransport()
        runtime = make_runtime(base_url=server.base_url, tracing=False, transport=lent)
        first = runtime.execute(request_for("Parent")).output
        assert first == {"greeting": "Hello Parent for Blinqx"}
        parent_port = server.requests[0].client_port

        _, child_outcome = run_in_child(lambda: runtime.execute(request_for("Child")).output)
        parent_again = runtime.execute(request_for("Parent2")).output
        child = child_outcome()

        assert child == {"ok": {"greeting": "Hello Child for Blinqx"}}
        assert parent_again == {"greeting": "Hello Parent2 for Blinqx"}
        ports = {r.json()["messages"][-1]["content"]: r.client_port for r in server.requests}
        assert ports["Hello Child for Blinqx"] != parent_port  # its own connection
        assert ports["Hello Parent2 for Blinqx"] == parent_port  # the parent keeps its pool
        if lent is not None:
            lent.close()
