"""Compressed replies: the request asks for ``identity``; a body compressed anyway is an
invalid response, refused on its head, never inflated.

The bomb tests run the client in a subprocess with its address space capped (RLIMIT_AS)
against a real loopback server, and measure how far its resident set grew.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse._wire import MAX_RESPONSE_BYTES
from tests.conftest import BOTH_IO, GREETING, REFERENCE, REPO_ROOT, RuntimeFactory
from tests.loopback import LoopbackModelServer, Reply, serve
from tests.reliability.test_hostile_framing import BODY as COMPLETION

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO

MIB = 1024 * 1024


def gzip_of_zeros(mebibytes: int) -> bytes:
    """A valid gzip member of ``mebibytes`` MiB of zeros, built without compressing them all.

    Every 1 MiB of zeros compresses (after a full flush, which resets the compressor) to
    the same ~1 KB, so the stream is that block repeated, a final empty block, and the
    trailer (CRC-32 and length of the decoded data).
    """
    block = bytes(MIB)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    final = b"\x03\x00"  # a last, empty, fixed-Huffman block
    size = (mebibytes * MIB) & 0xFFFFFFFF
    return (
        header
        + segment * mebibytes
        + final
        + crc.to_bytes(4, "little")
        + size.to_bytes(4, "little")
    )


def encoded(reply_body: bytes, encoding: str) -> Reply:
    return Reply(
        200, {"content-type": "application/json", "content-encoding": encoding}, reply_body
    )


def test_the_bomb_builder_makes_valid_gzip() -> None:
    assert gzip.decompress(gzip_of_zeros(3)) == bytes(3 * MIB)


@pytest.mark.parametrize("coding", ["identity", "", "IDENTITY"])
def test_identity_is_asked_for_and_read(
    coding: str,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(lambda request: encoded(COMPLETION, coding))
    assert make_runtime(tracing=False).execute(greeting_request).output == GREETING
    assert model_server.requests[0].headers["accept-encoding"] == "identity"


REFUSED = {
    "gzip": encoded(gzip.compress(COMPLETION), "gzip"),
    "deflate": encoded(zlib.compress(COMPLETION), "deflate"),
    "identity, gzip": encoded(gzip.compress(COMPLETION), "identity, gzip"),
    "gzip, gzip": encoded(gzip.compress(gzip.compress(COMPLETION)), "gzip, gzip"),
    "br": encoded(COMPLETION, "br"),
    "zstd": encoded(COMPLETION, "zstd"),
    "oversize gzip": encoded(gzip.compress(b" " * (MAX_RESPONSE_BYTES + 1)), "gzip"),
}


def test_a_compressed_error_is_the_failure_its_status_names(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """Its body is not read: a rate limit behind a compressing proxy stays retryable."""
    body = gzip.compress(b'{"error": {"message": "slow down"}}')
    headers = {"content-encoding": "gzip", "retry-after": "1"}
    model_server.set_responder(lambda request: Reply(429, headers, body))
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(tracing=False).execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_RATE_LIMITED"


@pytest.mark.parametrize("reply", REFUSED.values(), ids=REFUSED.keys())
def test_a_compressed_reply_is_an_invalid_response(
    reply: Reply,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(lambda request: reply)
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(tracing=False).execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_INVALID_RESPONSE"
    assert "compressed" in raised.value.failure.detail


# -- bombs, in a subprocess with a memory limit -----------------------------------

CLIENT = Path(__file__).with_name("bomb_client.py")
HEADROOM_MIB = 256  # address space the child may add; an unbounded decode needs far more
BOMB_GIB = 4


def run_client(base_url: str, *extra: str) -> dict[str, object]:
    result = subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            base_url,
            str(REFERENCE / "demo" / "greeting.yaml"),
            str(HEADROOM_MIB),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},  # the code under test, not a copy
    )
    assert result.returncode == 0, result.stderr[-2000:]
    outcome: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return outcome


@pytest.fixture(scope="module")
def single_bomb() -> bytes:
    return gzip_of_zeros(BOMB_GIB * 1024)  # ~4 MB on the wire, 4 GiB decoded


@pytest.fixture(scope="module")
def stacked_bomb() -> bytes:
    return gzip.compress(gzip.compress(gzip_of_zeros(1024), 9), 9)  # a few KB, 1 GiB decoded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bomb", "encoding"),
    [("single_bomb", "gzip"), ("stacked_bomb", "gzip, gzip, gzip")],
    ids=["gzip 4 GiB", "gzip x3 1 GiB"],
)
def test_bombs_are_refused_within_the_cap_and_the_deadline(
    bomb: str, encoding: str, io: str, request: pytest.FixtureRequest
) -> None:
    body: bytes = request.getfixturevalue(bomb)
    # Chunked: no Content-Length to refuse it by.
    headers = {"content-type": "application/json", "content-encoding": encoding}
    reply = Reply(200, headers, body, chunked=True)
    with serve(lambda _: reply) as server:
        bounded = run_client(server.base_url, *(["--async"] if io == "async" else []))
        control = run_client(server.base_url, "--unbounded")
    print(f"{encoding} ({len(body)} bytes on the wire): bounded {bounded}, httpx alone {control}")
    assert control["code"] == "MemoryError"  # the bomb is real: plain httpx cannot hold it
    assert bounded["code"] == "TQX_RUNTIME_INVALID_RESPONSE"
    assert float(bounded["elapsed_s"]) < 2.0  # type: ignore[arg-type]
    # Peak growth of the resident set during the call: the 2 MiB cap plus a few MiB.
    assert int(bounded["peak_growth_kib"]) < (MAX_RESPONSE_BYTES + 6 * MIB) // 1024  # type: ignore[call-overload]
