"""Tool-call fragments the recordings show only in part: late names, no index, interleaving."""

from __future__ import annotations

from typing import Any

import pytest

from templiqx_core import ToolCallDeltaEvent
from templiqx_core.conformance import assemble_tool_calls
from templiqx_langfuse.building_blocks import WireFailure
from templiqx_streaming_host._chunks import ChunkFolder


def fragments(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": list(calls)}}]}


def fold(*chunks: dict[str, Any]) -> tuple[ChunkFolder, list[Any]]:
    folder = ChunkFolder()
    return folder, [event for c in chunks for event in folder.fold(c)]


def test_a_name_that_arrives_late_is_on_the_first_event() -> None:
    folder, events = fold(
        fragments({"index": 0, "function": {"arguments": '{"a"'}}),
        fragments({"index": 0, "id": "c1", "function": {"name": "f", "arguments": ": 1}"}}),
        fragments({"index": 0, "function": {"arguments": ""}}),
    )
    assert events == [ToolCallDeltaEvent(name="f", arguments_fragment='{"a": 1}')]
    assert folder.message()["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}


def test_without_an_index_fragments_without_id_or_name_continue_the_last_call() -> None:
    _, events = fold(
        fragments({"id": "x", "function": {"name": "f", "arguments": '{"a":'}}),
        fragments({"function": {"arguments": "1}"}}),
        fragments({"id": "y", "function": {"name": "g", "arguments": "{}"}}),
    )
    calls = [(c.name, c.arguments) for c in assemble_tool_calls(events)]
    assert calls == [("f", '{"a":1}'), ("g", "{}")]


def test_interleaved_calls_cannot_be_projected() -> None:
    with pytest.raises(WireFailure) as raised:
        fold(
            fragments({"index": 0, "function": {"name": "f", "arguments": "{"}}),
            fragments({"index": 1, "function": {"name": "g", "arguments": "{"}}),
            fragments({"index": 0, "function": {"arguments": "}"}}),
        )
    assert raised.value.code == "TQX_RUNTIME_INVALID_RESPONSE"


def test_a_call_that_never_gets_a_name_is_invalid() -> None:
    folder, events = fold(fragments({"index": 0, "function": {"arguments": "{}"}}))
    assert events == []
    with pytest.raises(WireFailure, match="never received a name"):
        folder.message()


def test_other_choices_are_ignored() -> None:
    _, events = fold({"choices": [{"index": 1, "delta": {"content": "other"}}]})
    assert events == []
