"""Fingerprints are what the product sells: nothing cached may go stale."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from templiqx_core import (
    CompiledInteraction,
    ExecutionRequest,
    InvalidData,
    ScriptedRuntime,
    ScriptedSuccess,
    fingerprint,
)
from templiqx_core.adapters import compile_schema, request_fingerprint

MUTATIONS: dict[str, Callable[[CompiledInteraction], object]] = {
    "policy key": lambda i: i.runtime_policy.__setitem__("temperature", 0.5),
    "policy update": lambda i: i.runtime_policy.update(temperature=0.5),
    "schema nested": lambda i: i.output_schema["properties"].pop("terms"),  # type: ignore[index]
    "schema required": lambda i: i.output_schema["required"].append("x"),  # type: ignore[index]
    "messages": lambda i: i.messages.append(i.messages[0]),
    "message order": lambda i: i.messages.reverse(),
    "capabilities": lambda i: i.required_capabilities.extend(["x"]),
    "targets": lambda i: i.target_capabilities.__setitem__(0, "x"),
    "extensions": lambda i: i.extensions.clear(),
    "in-place or": lambda i: i.runtime_policy.__ior__({"seed": 1}),
}


def from_wire(interaction: CompiledInteraction) -> CompiledInteraction:
    return CompiledInteraction.model_validate_json(interaction.model_dump_json())


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_an_interaction_cannot_be_changed_in_place(name: str, bli61: CompiledInteraction) -> None:
    interaction = from_wire(bli61)
    before = request_fingerprint(interaction)
    with pytest.raises(TypeError, match="immutable"):
        MUTATIONS[name](interaction)
    assert request_fingerprint(interaction) == before == fingerprint(interaction.to_json())


def test_wire_json_is_unchanged_by_freezing(bli61: CompiledInteraction) -> None:
    plain = bli61.model_dump(mode="json")
    assert type(plain["runtime_policy"]) is dict
    assert type(plain["messages"]) is list
    assert from_wire(bli61).model_dump_json() == bli61.model_dump_json()
    assert from_wire(bli61) == bli61
    fresh, cached = from_wire(bli61), from_wire(bli61)
    request_fingerprint(cached)
    assert fresh == cached  # a cached fingerprint is not part of the value


def test_model_copy_with_an_update_gets_its_own_fingerprint(bli61: CompiledInteraction) -> None:
    before = request_fingerprint(bli61)
    policy = {**bli61.runtime_policy, "temperature": 0.5}
    changed = bli61.model_copy(update={"runtime_policy": policy})
    assert request_fingerprint(changed) != before
    assert request_fingerprint(changed) == fingerprint(changed.to_json())
    policy["temperature"] = 0.9  # the caller's dict was copied, not captured
    assert request_fingerprint(changed) == fingerprint(changed.to_json())
    with pytest.raises(TypeError):
        changed.runtime_policy["seed"] = 1
    assert request_fingerprint(bli61.model_copy()) == before


def test_an_unvalidated_interaction_is_frozen_before_it_is_fingerprinted(
    bli61: CompiledInteraction,
) -> None:
    fields = {**dict(bli61), "runtime_policy": dict(bli61.runtime_policy)}
    built = CompiledInteraction.model_construct(**fields)
    built.runtime_policy["temperature"] = 0.25  # still a plain dict: allowed, not cached yet
    value = request_fingerprint(built)
    assert value == fingerprint(built.to_json()) != request_fingerprint(bli61)
    with pytest.raises(TypeError):
        built.runtime_policy["temperature"] = 0.5


def test_frozen_values_copy_and_pickle(bli61: CompiledInteraction) -> None:
    for clone in (copy.deepcopy(bli61), pickle.loads(pickle.dumps(bli61))):
        assert clone == bli61
        assert request_fingerprint(clone) == request_fingerprint(bli61)
        with pytest.raises(TypeError):
            clone.runtime_policy["temperature"] = 0.5


def test_the_receipt_follows_the_interaction_not_a_stale_cache(
    bli61_request: ExecutionRequest,
) -> None:
    runtime = ScriptedRuntime([ScriptedSuccess()])
    first = runtime.execute(bli61_request)
    policy = {**bli61_request.interaction.runtime_policy, "temperature": 0.5}
    changed = bli61_request.model_copy(
        update={
            "interaction": bli61_request.interaction.model_copy(update={"runtime_policy": policy})
        }
    )
    assert runtime.execute(changed).request_fingerprint != first.request_fingerprint


def test_a_schema_changed_in_place_is_validated_as_it_is_now() -> None:
    schema: dict[str, Any] = {"type": "object", "required": ["a"]}
    assert not compile_schema(schema).is_valid({})
    schema["required"] = []  # a plain dict: looked up by content, never by identity
    assert compile_schema(schema).is_valid({})
    schema["type"] = "nonsense"
    with pytest.raises(InvalidData):
        compile_schema(schema)


def test_an_interactions_schema_is_frozen_so_its_validator_is_too(
    bli61: CompiledInteraction,
) -> None:
    interaction = from_wire(bli61)
    validator = compile_schema(interaction.output_schema)
    assert compile_schema(interaction.output_schema) is validator
    with pytest.raises(TypeError):
        interaction.output_schema["type"] = "string"  # type: ignore[index]
