"""Compressed bodies: one coding at most, decoded within 2 MiB and the deadline.

The bomb tests run the client in a subprocess with its address space capped (RLIMIT_AS)
against a real loopback server, and measure how far its resident set grew.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse._wire import MAX_RESPONSE_BYTES
from tests.conftest import BOTH_IO, GREETING, REFERENCE, REPO_ROOT, RuntimeFactory
from tests.loopback import LoopbackModelServer, Reply, chat_completion, serve

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO


COMPLETION = json.dumps(chat_completion(GREETING)).encode()
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


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


ACCEPTED = {
    "gzip": encoded(gzip.compress(COMPLETION), "gzip"),
    "x-gzip": encoded(gzip.compress(COMPLETION), "x-gzip"),
    "GZIP (case)": encoded(gzip.compress(COMPLETION), "GZIP"),
    "deflate (zlib)": encoded(zlib.compress(COMPLETION), "deflate"),
    "deflate (raw)": encoded(raw_deflate(COMPLETION), "deflate"),
    "identity": encoded(COMPLETION, "identity"),
    "identity, gzip": encoded(gzip.compress(COMPLETION), "identity, gzip"),
}


@pytest.mark.parametrize("reply", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_one_known_coding_is_decoded(
    reply: Reply,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(lambda request: reply)
    assert make_runtime(tracing=False).execute(greeting_request).output == GREETING
    assert model_server.requests[0].headers["accept-encoding"] == "gzip"


TWICE = gzip.compress(gzip.compress(COMPLETION))
REFUSED = {
    "gzip, gzip": encoded(TWICE, "gzip, gzip"),
    "gzip, gzip, gzip": encoded(gzip.compress(TWICE), "gzip, gzip, gzip"),
    "two headers": Reply(200, {"content-encoding": "gzip", "Content-Encoding": "gzip"}, TWICE),
    "br": encoded(COMPLETION, "br"),
    "zstd": encoded(COMPLETION, "zstd"),
    "compress": encoded(COMPLETION, "compress"),
    "truncated gzip": encoded(gzip.compress(COMPLETION)[:-12], "gzip"),
    "gzip then garbage": encoded(gzip.compress(COMPLETION) + b"HTTP/1.1 200 OK", "gzip"),
    "gzip then a member": encoded(gzip.compress(COMPLETION) * 2, "gzip"),
    "corrupt gzip": encoded(b"\x1f\x8b\x08\x00" + bytes(40), "gzip"),
    "oversize gzip": encoded(gzip.compress(b" " * (MAX_RESPONSE_BYTES + 1)), "gzip"),
}


@pytest.mark.parametrize("reply", REFUSED.values(), ids=REFUSED.keys())
def test_stacks_unknown_codings_and_broken_streams_are_invalid(
    reply: Reply,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(lambda request: reply)
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(tracing=False).execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_INVALID_RESPONSE"


def test_bytes_past_the_end_of_a_body_decoded_in_several_steps_are_refused_not_spun_on(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """Past an output step's cap, zlib leaves the bytes after the end in its input tail:
    a loop waiting for that tail to empty never ends, and no deadline check is reached."""
    long_completion = COMPLETION + b" " * (100 * 1024)  # JSON may end in whitespace
    reply = encoded(gzip.compress(long_completion) + b"\n", "gzip")
    model_server.set_responder(lambda request: reply)
    runtime = make_runtime(tracing=False)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            runtime.execute(greeting_request)
        except BaseException as error:
            raised.append(error)

    caller = threading.Thread(target=call, daemon=True)  # a spinning call cannot be stopped
    caller.start()
    caller.join(30)
    assert not caller.is_alive(), "the call spun on the bytes past the compressed body"
    assert isinstance(raised[0], RuntimeFailureError)
    assert raised[0].code == "TQX_RUNTIME_INVALID_RESPONSE"
    assert "bytes after the end of the compressed body" in raised[0].failure.detail


def test_a_trickled_compressed_body_keeps_the_deadline(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    body = gzip.compress(COMPLETION)
    model_server.set_responder(
        lambda request: Reply(200, {"content-encoding": "gzip"}, body, trickle_s=0.05)
    )
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(tracing=False, timeout_s=1.0).execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"
    assert time.monotonic() - started < 1.0 + 1.0


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
def test_bombs_stay_within_the_cap_and_the_deadline(
    bomb: str, encoding: str, request: pytest.FixtureRequest
) -> None:
    body: bytes = request.getfixturevalue(bomb)
    # Chunked: no Content-Length to refuse it by, the decoder itself must stop it.
    headers = {"content-type": "application/json", "content-encoding": encoding}
    reply = Reply(200, headers, body, chunked=True)
    with serve(lambda _: reply) as server:
        bounded = run_client(server.base_url)
        control = run_client(server.base_url, "--unbounded")
    print(f"{encoding} ({len(body)} bytes on the wire): bounded {bounded}, httpx alone {control}")
    assert control["code"] == "MemoryError"  # the bomb is real: plain httpx cannot hold it
    assert bounded["code"] == "TQX_RUNTIME_INVALID_RESPONSE"
    assert float(bounded["elapsed_s"]) < 2.0  # type: ignore[arg-type]
    # Peak growth of the resident set during the call: the 2 MiB cap plus a few MiB.
    assert int(bounded["peak_growth_kib"]) < (MAX_RESPONSE_BYTES + 6 * MIB) // 1024  # type: ignore[call-overload]
