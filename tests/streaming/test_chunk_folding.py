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
    """Fold every chunk, then end the stream (held calls come out then)."""
    folder = ChunkFolder()
    return folder, [event for c in chunks for event in folder.fold(c)] + folder.finish()


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


def test_interleaved_calls_stream_the_first_and_hold_the_rest() -> None:
    folder = ChunkFolder()
    first = folder.fold(
        fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}})
    )
    held = folder.fold(
        fragments({"index": 1, "id": "b", "function": {"name": "g", "arguments": "{"}})
    )
    more = folder.fold(fragments({"index": 0, "function": {"arguments": "}"}}))
    assert first == [ToolCallDeltaEvent(name="f", arguments_fragment="{")]
    assert held == []
    assert more == [ToolCallDeltaEvent(name="", arguments_fragment="}")]
    # The first call's arguments closed: the held call takes over with its next fragment.
    handed = folder.fold(fragments({"index": 1, "function": {"arguments": "}"}}))
    assert handed == [ToolCallDeltaEvent(name="g", arguments_fragment="{}")]
    assert folder.finish() == []
    assert [c["id"] for c in folder.message()["tool_calls"]] == ["a", "b"]


def test_sequential_calls_all_stream_live() -> None:
    # OpenAI's usual order: all of call 0, then all of call 1. Each fragment goes out as
    # it arrives; nothing waits for the end of the stream.
    folder = ChunkFolder()
    live = [
        folder.fold(fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}})),
        folder.fold(fragments({"index": 0, "function": {"arguments": '{"q": "}]'}})),
        folder.fold(fragments({"index": 0, "function": {"arguments": '\\"{"}'}})),
        folder.fold(fragments({"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}})),
        folder.fold(fragments({"index": 1, "function": {"arguments": "[1, "}})),
        folder.fold(fragments({"index": 1, "function": {"arguments": "2]"}})),
    ]
    assert live == [
        [],
        [ToolCallDeltaEvent(name="f", arguments_fragment='{"q": "}]')],
        [ToolCallDeltaEvent(name="", arguments_fragment='\\"{"}')],
        [],
        [ToolCallDeltaEvent(name="g", arguments_fragment="[1, ")],
        [ToolCallDeltaEvent(name="", arguments_fragment="2]")],
    ]
    assert folder.finish() == []
    assert [c["function"]["arguments"] for c in folder.message()["tool_calls"]] == [
        '{"q": "}]\\"{"}',
        "[1, 2]",
    ]


def test_arguments_continuing_after_they_closed_are_invalid() -> None:
    folder = ChunkFolder()
    folder.fold(fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}))
    # Insignificant whitespace after the close is dropped; anything else cannot be JSON.
    assert folder.fold(fragments({"index": 0, "function": {"arguments": " \n"}})) == []
    with pytest.raises(WireFailure, match="continued after its arguments were complete"):
        folder.fold(fragments({"index": 0, "function": {"arguments": "{}"}}))


def test_several_indices_in_one_chunk_and_gaps_keep_index_order() -> None:
    folder, events = fold(
        fragments(
            {"index": 3, "id": "c", "function": {"name": "h", "arguments": "{"}},
            {"index": 7, "id": "e", "function": {"name": "k", "arguments": "[1"}},
        ),
        fragments(
            {"index": 7, "function": {"arguments": "]"}},
            {"index": 5, "id": "d", "function": {"name": "j", "arguments": "{}"}},
            {"index": 3, "function": {"arguments": "}"}},
        ),
    )
    calls = [(c.name, c.arguments) for c in assemble_tool_calls(events)]
    assert calls == [("h", "{}"), ("j", "{}"), ("k", "[1]")]
    message = folder.message()["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in message] == [
        ("c", "h"),
        ("d", "j"),
        ("e", "k"),
    ]


def test_a_lower_index_arriving_later_is_still_first_in_the_message() -> None:
    folder, events = fold(
        fragments({"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}),
        fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}),
    )
    # events: the live call first (the wire has no index); the message: by index
    assert [(c.name, c.arguments) for c in assemble_tool_calls(events)] == [
        ("g", "{}"),
        ("f", "{}"),
    ]
    assert [c["id"] for c in folder.message()["tool_calls"]] == ["a", "b"]


def test_a_repeated_id_or_name_is_the_same_call() -> None:
    _, events = fold(
        fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":'}}),
        fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": "1}"}}),
    )
    assert [(c.name, c.arguments) for c in assemble_tool_calls(events)] == [("f", '{"x":1}')]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"id": "other"}, "a tool call received a second, different id"),
        ({"function": {"name": "g", "arguments": "}"}}, "a tool call changed its name"),
    ],
)
def test_a_second_identity_for_one_index_is_invalid(second: dict[str, Any], message: str) -> None:
    folder = ChunkFolder()
    folder.fold(fragments({"index": 2, "id": "a", "function": {"name": "f", "arguments": "{"}}))
    with pytest.raises(WireFailure, match=message) as raised:
        folder.fold(fragments({"index": 2, **second}))
    assert raised.value.code == "TQX_RUNTIME_INVALID_RESPONSE"


def test_a_name_split_across_chunks_is_joined_before_the_first_event() -> None:
    folder = ChunkFolder()
    assert folder.fold(fragments({"index": 0, "id": "a", "function": {"name": "get_"}})) == []
    assert (
        folder.fold(fragments({"index": 0, "function": {"name": "weather", "arguments": ""}})) == []
    )
    events = folder.fold(fragments({"index": 0, "function": {"arguments": "{}"}}))
    assert events == [ToolCallDeltaEvent(name="get_weather", arguments_fragment="{}")]
    assert folder.finish() == []


def test_a_call_with_empty_arguments_is_emitted_at_the_end() -> None:
    _, events = fold(fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}))
    assert events == [ToolCallDeltaEvent(name="f", arguments_fragment="")]


def test_a_call_that_never_gets_a_name_is_invalid() -> None:
    folder = ChunkFolder()
    assert folder.fold(fragments({"index": 0, "function": {"arguments": "{}"}})) == []
    with pytest.raises(WireFailure, match="a tool call never received a name"):
        folder.finish()
    with pytest.raises(WireFailure, match="never received a name"):
        folder.message()


def test_other_choices_are_ignored() -> None:
    _, events = fold({"choices": [{"index": 1, "delta": {"content": "other"}}]})
    assert events == []


@pytest.mark.parametrize("code", ["\u00b2", "abc"])  # "²".isdigit(), yet no int
def test_an_error_event_whose_code_is_not_a_number_is_the_provider_breaking_off(
    code: str,
) -> None:
    with pytest.raises(WireFailure) as raised:
        ChunkFolder().fold({"error": {"code": code, "message": "x"}})
    assert raised.value.code == "TQX_RUNTIME_UNAVAILABLE"
