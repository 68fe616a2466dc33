"""SSE framing the recordings do not cover (recorders normalised it), per WHATWG HTML.

First the parser on the spec's own examples and edge cases, fed whole and one byte at a
time; then the adapter end to end over a real socket (sync and async), with the same
stream re-framed each way and cut into one-byte HTTP chunks.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable

import pytest

from templiqx_core import ExecutionRequest
from templiqx_core.conformance import run_stream
from templiqx_streaming_host import ServerSentEvent, SSEParser
from tests.conftest import BOTH_IO
from tests.loopback import LoopbackModelServer, Reply
from tests.streaming.conftest import HostFactory, chunk, streamed


def parse(body: bytes, *, bytewise: bool = False) -> list[ServerSentEvent]:
    parser = SSEParser()
    pieces = [body[i : i + 1] for i in range(len(body))] if bytewise else [body]
    return [event for piece in pieces for event in parser.feed(piece)]


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # the spec's examples (HTML "9.2.6 Interpreting an event stream")
        (b"data: YHOO\ndata: +2\ndata: 10\n\n", [("YHOO\n+2\n10", "message")]),
        (
            b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
            b"data:  third event\n",
            [("first event", "message"), ("second event", "message")],
        ),
        (b"data\n\ndata\ndata\n\ndata:", [("", "message"), ("\n", "message")]),
        (b"data:test\n\ndata: test\n\n", [("test", "message"), ("test", "message")]),
        # line endings: CRLF, lone CR, mixed
        (b"data: a\r\ndata: b\r\n\r\n", [("a\nb", "message")]),
        (b"data: a\rdata: b\r\r", [("a\nb", "message")]),
        (b"data: a\r\ndata: b\rdata: c\n\r\n", [("a\nb\nc", "message")]),
        # event; id, retry and unknown fields are ignored
        (
            b"event: error\nid: 7\nretry: 1500\nfoo: bar\ndata: x\n\nid: a\x00b\ndata: y\n\n",
            [("x", "error"), ("y", "message")],
        ),
        # a BOM is dropped once, at the very start only
        (b"\xef\xbb\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n", [("a", "message")]),
        # a block without data is not dispatched; an unfinished event at EOF is discarded
        (b"event: ping\nid: 3\n\ndata: tail", []),
        # invalid UTF-8 becomes U+FFFD, as the spec's decoder does
        (b"data: \xff\xfe\n\n", [("\ufffd\ufffd", "message")]),
    ],
)
def test_parser_follows_whatwg(
    body: bytes, expected: list[tuple[str, str]], bytewise: bool
) -> None:
    assert [(e.data, e.event) for e in parse(body, bytewise=bytewise)] == expected


def test_crlf_split_between_two_chunks_is_one_line_end() -> None:
    parser = SSEParser()
    events = [*parser.feed(b"data: a\r"), *parser.feed(b"\ndata: b\r"), *parser.feed(b"\n\r\n")]
    assert [e.data for e in events] == ["a\nb"]


# -- the adapter, end to end --------------------------------------------------------

PARTS = ['{"greet', 'ing": "Hel', "lo ", "Ryan \u2013 ünïcødé 👋", '"}']
TEXT = "".join(PARTS)
EVENTS = [json.dumps(chunk(p)) for p in PARTS] + [json.dumps(chunk(finish="stop")), "[DONE]"]


def lf(events: list[str]) -> bytes:
    return "".join(f"data: {e}\n\n" for e in events).encode()


def multiline(events: list[str]) -> bytes:
    # JSON pretty-printed over several data: lines: the parser joins them with "\n"
    out = []
    for e in events:
        text = e if e == "[DONE]" else json.dumps(json.loads(e), indent=1)
        out.append("".join(f"data: {line}\n" for line in text.split("\n")) + "\n")
    return "".join(out).encode()


FRAMINGS: dict[str, Callable[[list[str]], bytes]] = {
    "lf": lf,
    "crlf": lambda ev: lf(ev).replace(b"\n", b"\r\n"),
    "lone-cr": lambda ev: lf(ev).replace(b"\n", b"\r"),
    "multi-line-data": multiline,
    "data-without-space": lambda ev: "".join(f"data:{e}\n\n" for e in ev).encode(),
    "event-id-retry-fields": lambda ev: "".join(
        f"event: message\nid: {i}\nretry: 3000\ndata: {e}\n\n" for i, e in enumerate(ev)
    ).encode(),
    "comments": lambda ev: (
        b": hello\n\n" + "".join(f": keep-alive\ndata: {e}\n: between\n\n" for e in ev).encode()
    ),
    "bom": lambda ev: b"\xef\xbb\xbf" + lf(ev),
    "all-at-once": lambda ev: (
        b"\xef\xbb\xbf: c\r\n"
        + "".join(f"id: {i}\r\nevent: message\rdata:{e}\r\n\r" for i, e in enumerate(ev)).encode()
    ),
}


@BOTH_IO
@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_adapter_reads_every_framing(
    framing: str,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    body = FRAMINGS[framing](EVENTS)
    reply = streamed(body, pieces=tuple(body[i : i + 1] for i in range(len(body))))
    stream_server.set_responder(lambda request: reply)
    run = run_stream(make_host(), plain_request)
    assert run.receipt is not None
    assert run.receipt.output == json.loads(TEXT)
    assert [e.text for e in run.deltas] == PARTS  # one Delta per provider delta, in order


@BOTH_IO
def test_a_gzip_encoded_stream_is_refused_before_any_delta(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    """The request asks for ``identity``: a compressed stream is an invalid response, never
    inflated (see tests/reliability/test_hostile_decoding.py)."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    body = compressor.compress(b"".join(f"data: {e}\n\n".encode() for e in EVENTS))
    reply = Reply(
        200,
        {"content-type": "text/event-stream", "content-encoding": "gzip"},
        pieces=(body + compressor.flush(),),
    )
    stream_server.set_responder(lambda request: reply)
    run = run_stream(make_host(), plain_request)
    assert run.deltas == []
    assert run.error is not None
    assert run.error.code == "TQX_RUNTIME_INVALID_RESPONSE", run.error
    assert stream_server.requests[0].headers["accept-encoding"] == "identity"
