"""The ``assert`` checks of an eval case, as models: part of the contract document
(``evals:``) and of ``--cases`` files, so they live apart from the code that runs them."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, JsonValue, Tag, model_validator

from ._contracts import WireModel

JsonType = Literal["string", "number", "integer", "boolean", "object", "array", "null"]


class _Named(WireModel):
    _omit_none = frozenset({"name"})


class PointerCheck(_Named):
    #: RFC 6901 JSON pointer into the output; "" is the whole output.
    pointer: str = Field("", pattern="^(/.*)?$")
    name: str | None = None


class EqualsCheck(PointerCheck):
    equals: JsonValue


class ContainsCheck(PointerCheck):
    """A substring of a string, an element of an array, or a subset of an object."""

    contains: JsonValue


class MatchesCheck(PointerCheck):
    matches: str = Field(min_length=1)

    @model_validator(mode="after")
    def _compiles(self) -> MatchesCheck:
        try:
            re.compile(self.matches)
        except re.error as error:
            raise ValueError(f"matches is not a regular expression: {error}") from None
        return self


class RangeCheck(PointerCheck):
    """A number within ``[min, max]`` (either bound may be left out, not both)."""

    _omit_none = frozenset({"name", "min", "max"})

    model_config = ConfigDict(
        **PointerCheck.model_config,
        json_schema_extra={"anyOf": [{"required": ["min"]}, {"required": ["max"]}]},
    )

    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> RangeCheck:
        if self.min is None and self.max is None:
            raise ValueError("a range check needs min, max or both")
        return self


class TypeCheck(PointerCheck):
    type: JsonType


class SchemaValidCheck(_Named):
    schema_valid: bool
    name: str | None = None


class LatencyCheck(_Named):
    max_latency_ms: float = Field(gt=0)
    name: str | None = None


class TokensCheck(_Named):
    """Total tokens the call used (the provider's usage), at most ``max_tokens``."""

    max_tokens: int = Field(ge=0)
    name: str | None = None


# Each check is told by its own key(s); an entry with none or several is one error.
_KEYS = {
    "equals": EqualsCheck,
    "contains": ContainsCheck,
    "matches": MatchesCheck,
    "min/max": RangeCheck,
    "type": TypeCheck,
    "schema_valid": SchemaValidCheck,
    "max_latency_ms": LatencyCheck,
    "max_tokens": TokensCheck,
}


def _kind(entry: Any) -> str | None:
    if isinstance(entry, WireModel):
        return type(entry).__name__
    if not isinstance(entry, dict):
        return None
    present = {model.__name__ for key, model in _KEYS.items() if set(key.split("/")) & set(entry)}
    return present.pop() if len(present) == 1 else None


Check = Annotated[
    Annotated[EqualsCheck, Tag("EqualsCheck")]
    | Annotated[ContainsCheck, Tag("ContainsCheck")]
    | Annotated[MatchesCheck, Tag("MatchesCheck")]
    | Annotated[RangeCheck, Tag("RangeCheck")]
    | Annotated[TypeCheck, Tag("TypeCheck")]
    | Annotated[SchemaValidCheck, Tag("SchemaValidCheck")]
    | Annotated[LatencyCheck, Tag("LatencyCheck")]
    | Annotated[TokensCheck, Tag("TokensCheck")],
    Discriminator(
        _kind,
        custom_error_type="check_kind",
        custom_error_message=f"an assert check has exactly one of {', '.join(_KEYS)}",
    ),
]
