"""Cases and their expectations: what passes and what fails, checked without I/O."""

from __future__ import annotations

import tracemalloc
from enum import IntEnum, StrEnum
from pathlib import Path

import pytest

from templiqx_core import InvalidData
from templiqx_core._compiler import Contract
from templiqx_core._eval_cases import (
    MAX_CASE_LINE,
    EvalCaseSpec,
    Observed,
    check_case,
    iter_cases,
    resolve_pointer,
)

OUTPUT = {"greeting": "Hello Ryan", "score": 0.75, "tags": ["a", "b"], "n": 3, "meta": {"k": 1}}


def results(
    checks: list[dict], *, expected=None, output=OUTPUT, valid=True, latency=10.0, tokens=20
):
    case = EvalCaseSpec.model_validate({"id": "c", "assert": checks})
    observed = Observed(output, valid, latency, tokens)
    return check_case(case.assert_, expected, observed)


@pytest.mark.parametrize(
    ("check", "passed"),
    [
        ({"pointer": "/greeting", "equals": "Hello Ryan"}, True),
        ({"pointer": "/greeting", "equals": "Hello"}, False),
        ({"pointer": "/n", "equals": 3.0}, True),
        ({"pointer": "/n", "equals": True}, False),
        ({"pointer": "/greeting", "contains": "Ryan"}, True),
        ({"pointer": "/tags", "contains": "b"}, True),
        ({"pointer": "/tags", "contains": "c"}, False),
        ({"pointer": "/meta", "contains": {"k": 1}}, True),
        ({"pointer": "/greeting", "matches": "^Hello [A-Z]"}, True),
        ({"pointer": "/greeting", "matches": "^Bye"}, False),
        ({"pointer": "/score", "min": 0, "max": 1}, True),
        ({"pointer": "/score", "min": 0.8}, False),
        ({"pointer": "/greeting", "max": 1}, False),
        ({"pointer": "/n", "type": "integer"}, True),
        ({"pointer": "/n", "type": "number"}, True),
        ({"pointer": "/score", "type": "integer"}, False),
        ({"pointer": "/missing", "type": "null"}, False),
        ({"pointer": "/tags/1", "equals": "b"}, True),
        ({"pointer": "/tags/\u0661", "equals": "b"}, False),  # an Arabic-Indic 1: no index
        ({"pointer": "/tags/\u00b2", "equals": "b"}, False),  # a superscript 2: no index
        ({"max_latency_ms": 50}, True),
        ({"max_latency_ms": 5}, False),
        ({"max_tokens": 20}, True),
        ({"max_tokens": 19}, False),
    ],
)
def test_each_check_passes_or_fails_on_the_output(check: dict, passed: bool) -> None:
    found = results([check])
    assert [r.passed for r in found] == [True, passed]  # schema validity, then the check
    if not passed:
        assert found[1].detail


def test_type_checks_see_a_host_s_enum_values_as_their_json_type() -> None:
    """A host's own harness may observe a ``model_dump()``: enums subclass str and int."""

    class Tier(StrEnum):
        GOLD = "gold"

    class Level(IntEnum):
        HIGH = 3

    output = {"tier": Tier.GOLD, "level": Level.HIGH}
    checks = [{"pointer": "/tier", "type": "string"}, {"pointer": "/level", "type": "integer"}]
    assert [r.passed for r in results(checks, output=output)] == [True, True, True]


def test_a_failed_pointer_check_says_where_what_and_what_was_found() -> None:
    (_, result) = results([{"pointer": "/greeting", "contains": "Ada"}])
    assert result.name == "/greeting contains"
    assert result.detail == '/greeting: expected contains "Ada", got "Hello Ryan"'


def test_expected_output_is_an_exact_match_checked_first() -> None:
    assert [r.name for r in results([], expected=OUTPUT)] == ["expected_output", "schema_valid"]
    (exact, _) = results([], expected={**OUTPUT, "n": 4})
    assert not exact.passed
    assert exact.detail.startswith("got ")


def test_schema_validity_is_checked_unless_a_check_says_otherwise() -> None:
    assert [r.passed for r in results([], valid=False)] == [False]
    assert [r.passed for r in results([{"schema_valid": False}], valid=False)] == [True]


def test_a_token_limit_fails_when_the_call_reported_no_usage() -> None:
    case = EvalCaseSpec.model_validate({"id": "c", "assert": [{"max_tokens": 5}]})
    (_, tokens) = check_case(case.assert_, None, Observed(OUTPUT, True, 1.0, None))
    assert not tokens.passed
    assert "no token usage" in tokens.detail


def test_a_check_may_be_named() -> None:
    (_, named) = results([{"pointer": "/n", "equals": 3, "name": "three"}])
    assert named.name == "three"


@pytest.mark.parametrize(
    "check",
    [
        {"pointer": "/x"},  # no check at all
        {"pointer": "/x", "equals": 1, "contains": 1},  # two at once
        {"pointer": "x", "equals": 1},  # not a JSON pointer
        {"pointer": "/x", "matches": "("},  # not a regex
        {"max_tokens": 1.5},
        {"max_latency_ms": 0},
    ],
)
def test_a_malformed_check_is_refused(check: dict) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (pydantic's ValidationError)
        EvalCaseSpec.model_validate({"id": "c", "assert": [check]})


def test_json_pointers_follow_rfc_6901() -> None:
    document = {"a/b": {"m~n": [10, 20]}}
    assert resolve_pointer(document, "/a~1b/m~0n/1") == 20
    assert resolve_pointer(document, "") is document
    assert resolve_pointer(document, "/a~1b/m~0n/01") != 20  # no leading zeros
    assert resolve_pointer(document, "/a~1b/m~0n/2") != 20


def test_an_index_too_long_for_int_is_a_missing_value_not_a_crash() -> None:
    [_, found] = results([{"pointer": "/tags/" + "9" * 5000, "type": "string"}])
    assert not found.passed


def test_contract_evals_carry_expectations_and_keep_fake_output() -> None:
    contract = Contract.model_validate(
        {
            "api_version": "templiqx/v1alpha1",
            "id": "c",
            "version": "1",
            "messages": [{"role": "user", "content": [{"kind": "text", "value": "hi"}]}],
            "output_schema": {"type": "object"},
            "evals": [
                {
                    "id": "e",
                    "fake_output": {"a": 1},
                    "expected_output": {"a": 1},
                    "assert": [{"pointer": "/a", "equals": 1}],
                }
            ],
        }
    )
    (case,) = contract.evals
    assert case.expected_output == {"a": 1}
    assert case.fake_output == {"a": 1}
    assert len(case.assert_) == 1
    # An eval without expectations dumps exactly as before.
    plain = {"id": "e", "inputs": {}, "context": {}, "fake_output": 1}
    assert type(case).model_validate(plain).model_dump(by_alias=True) == plain


def test_cases_load_from_jsonl_and_yaml(tmp_path: Path) -> None:
    jsonl = tmp_path / "cases.jsonl"
    jsonl.write_text(
        '{"id": "a", "inputs": {"name": "Ada"}, "assert": [{"pointer": "/x", "equals": 1}]}\n'
        "\n"
        '{"id": "b", "expected_output": {"x": 2}}\n',
        encoding="utf-8",
    )
    yml = tmp_path / "cases.yaml"
    yml.write_text("- id: a\n  context: {org: X}\n", encoding="utf-8")
    assert [c.id for c in list(iter_cases(jsonl))] == ["a", "b"]
    assert list(iter_cases(jsonl))[1].expected_output == {"x": 2}
    assert next(iter_cases(yml)).context == {"org": "X"}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.jsonl", '{"id": "a"}\nnot json\n', "bad.jsonl:2"),
        ("bad.yaml", "id: a\n", "expected a list"),
        ("typo.yaml", "- {id: a, expected: 1}\n", "expected"),
    ],
)
def test_a_bad_cases_file_is_one_typed_error(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidData, match=message):
        list(iter_cases(path))


def test_a_jsonl_line_past_its_bound_is_refused_without_reading_it_whole(
    tmp_path: Path,
) -> None:
    """A JSONL file is read a line at a time; a line without end (a file of no newlines)
    was read whole, however large."""
    path = tmp_path / "flat.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b", "inputs": {"name": "' + "x" * MAX_CASE_LINE, "utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(InvalidData, match=r"flat.jsonl:2: longer than \d+ characters"):
            list(iter_cases(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_CASE_LINE
