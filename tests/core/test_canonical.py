from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templiqx_core import InvalidData, canonical_json, fingerprint
from templiqx_core._canonical import MAX_DEPTH, NotJson
from tests.conftest import read_json


def _vectors(shared: Path) -> list[dict[str, str]]:
    vectors: list[dict[str, str]] = read_json(shared / "vectors" / "canonical-json.json")["vectors"]
    return vectors


def test_every_reference_vector_matches(reference_dir: Path) -> None:
    vectors = _vectors(reference_dir)
    assert len(vectors) >= 10
    for vector in vectors:
        value = json.loads(vector["json"])
        assert canonical_json(value).decode("utf-8") == vector["canonical"], vector["name"]
        assert fingerprint(value) == vector["fingerprint"], vector["name"]


def test_known_spec_vectors(reference_dir: Path) -> None:
    assert fingerprint({"b": 2, "a": 1}) == (
        "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777"
    )
    output = read_json(reference_dir / "crm3" / "evals" / "bli-61-output.json")
    assert fingerprint(output) == "66d6c3fbb03611b4b22deabbe9ef669e5ad69f59c1e90be4dee92d9c3a5188de"


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1.0, "1.0"),
        (100.0, "100.0"),
        (0.00001, "0.00001"),
        (0.000015, "0.000015"),
        (123.45, "123.45"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e+16"),
        (1.5e16, "1.5e+16"),
        (1e-6, "1e-6"),
        (1.234e-7, "1.234e-7"),
        (5e-324, "5e-324"),
        (-0.0, "-0.0"),
        (-2.5e-9, "-2.5e-9"),
    ],
)
def test_float_layout(number: float, text: str) -> None:
    assert canonical_json([number]) == f"[{text}]".encode()


def deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "pointer", "reason"),
    [
        ([1.0, math.nan], "/1", "a non-finite number (nan)"),
        ({"a": {"b/c~": [math.inf]}}, "/a/b~1c~0/0", "a non-finite number (inf)"),
        ({"a": [10**30, -math.inf]}, "/a/1", "a non-finite number (-inf)"),  # slow path
        ({"k": "ok \ud800"}, "/k", "a string with a lone surrogate"),
        ({"\udfff": 1}, "/\\udfff", "a string with a lone surrogate"),
        ({"x": [b"bytes"]}, "/x/0", "bytes, not a JSON value"),
        ({"x": {1, 2}}, "/x", "set, not a JSON value"),
        ({"x": {1: 2}}, "/x", "int, not a string"),
        ([10**400], "/0", "an integer beyond the f64 range"),
        (deep(MAX_DEPTH + 1), "/0" * MAX_DEPTH, f"nested deeper than {MAX_DEPTH} levels"),
        (deep(100_000), "/0" * MAX_DEPTH, f"nested deeper than {MAX_DEPTH} levels"),
    ],
)
def test_what_is_not_json_is_invalid_data_naming_the_pointer(
    value: Any, pointer: str, reason: str
) -> None:
    with pytest.raises(InvalidData) as raised:
        canonical_json(value)
    assert isinstance(raised.value, NotJson)
    assert (raised.value.pointer, raised.value.reason) == (pointer, reason)
    assert str(raised.value).encode("utf-8")  # the message itself always prints


def test_nesting_up_to_the_limit_is_encoded() -> None:
    text = canonical_json(deep(MAX_DEPTH))
    assert text == b"[" * MAX_DEPTH + b"]" * MAX_DEPTH


def test_null_is_still_null_on_the_fast_path() -> None:
    assert canonical_json({"a": None, "b": [None, 1.5]}) == b'{"a":null,"b":[null,1.5]}'


def test_integers_beyond_64_bits_become_nearest_f64() -> None:
    assert canonical_json([2**64 - 1, 2**64, -(2**63) - 1]) == (
        b"[18446744073709551615,1.8446744073709552e+19,-9.223372036854776e+18]"
    )


def test_bool_is_never_an_integer() -> None:
    assert canonical_json({"t": True, "one": 1}) == b'{"one":1,"t":true}'


def test_deep_nesting_up_to_the_limit_is_encoded_around_a_big_integer() -> None:
    deep: object = 2**64
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert (
        canonical_json(deep)
        == ("[" * MAX_DEPTH + "1.8446744073709552e+19" + "]" * MAX_DEPTH).encode()
    )


def test_float_subclasses_encode_as_their_value() -> None:
    # numpy.float64 is one: eval scores, dataframe-built inputs.
    class Score(float):
        pass

    assert canonical_json({"a": Score(2.5)}) == b'{"a":2.5}'
    assert canonical_json(Score(1.0)) == b"1.0"


def test_non_json_values_are_named() -> None:
    with pytest.raises(InvalidData, match=r"/a/0 is set"):
        canonical_json({"a": [{1, 2}]})
    with pytest.raises(InvalidData, match="object key"):
        canonical_json({1: "x"})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_integers_beyond_64_bits_take_the_slow_path_with_serde_bytes(value: object) -> None:
    expected = json.loads(canonical_json(value))  # the slow path's bytes read back ...
    assert canonical_json(expected) == canonical_json(value)  # ... are the fast path's
