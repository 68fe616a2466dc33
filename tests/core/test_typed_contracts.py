"""Typed contracts: pydantic models as a contract's types, the output shape written once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
import yaml
from pydantic import BaseModel, Field, field_validator

from templiqx_core import (
    ExecutionReceipt,
    ExecutionRequest,
    InvalidData,
    OutputSchemaStrictError,
    RenderRequest,
    RepairingRuntime,
    RuntimeAdapter,
    ScriptedRuntime,
    ScriptedSuccess,
    TypedContract,
    TypedContractError,
    check_output_model,
    codes,
    collect_attempts,
    compile_contract,
    model_output_schema,
)
from templiqx_core._errors import OutputSchemaError, OutputTypeError
from templiqx_core._receipts import request_fingerprint
from templiqx_core.adapters import RuntimeCall

Out = TypeVar("Out", bound=BaseModel)
Values = BaseModel | dict[str, Any] | None


def _request(
    typed: TypedContract[Out], runtime: RuntimeAdapter, inputs: Values, context: Values, repair: int
) -> tuple[RuntimeAdapter, ExecutionRequest]:
    if type(repair) is not int or repair != 1:  # as run does: 1 is the plain call
        runtime = RepairingRuntime(runtime, attempts=repair, validate=typed.output_problems)
    return runtime, ExecutionRequest(interaction=typed.compile(inputs, context=context))


def run_receipt(
    typed: TypedContract[Out],
    runtime: RuntimeAdapter,
    inputs: Values = None,
    *,
    context: Values = None,
    repair: int = 1,
) -> tuple[Out, ExecutionReceipt]:
    """``typed.run``, and the receipt: the compiled interaction executed, read by output_of."""
    runtime, request = _request(typed, runtime, inputs, context, repair)
    receipt = runtime.execute(request)
    return typed.output_of(receipt), receipt


async def arun_receipt(
    typed: TypedContract[Out],
    runtime: RuntimeAdapter,
    inputs: Values = None,
    *,
    context: Values = None,
    repair: int = 1,
) -> tuple[Out, ExecutionReceipt]:
    runtime, request = _request(typed, runtime, inputs, context, repair)
    receipt = await runtime.aexecute(request)
    return typed.output_of(receipt), receipt


class Customer(BaseModel):
    name: str
    plan: Literal["free", "pro"]


class Ticket(BaseModel):
    subject: str = Field(min_length=1)
    body: str
    customer: Customer
    tags: list[str] = []


class Org(BaseModel):
    org: str


class Triage(BaseModel):
    tier: Literal["p1", "p2", "p3"]
    summary: str


MESSAGES: list[tuple[Any, str]] = [
    ("system", "You triage tickets for {{ context.org | upper }}."),
    (
        "user",
        "Plan: {{ inputs.customer.plan }}\n"
        "Subject: {{ inputs.subject | trim }}\n\n{{ inputs.body }}",
    ),
]
TICKET = {"subject": " Down ", "body": "All of it.", "customer": {"name": "Ann", "plan": "pro"}}
ANSWER = {"tier": "p1", "summary": "outage"}


def triage(**overrides: Any) -> TypedContract[Triage]:
    arguments: dict[str, Any] = {
        "id": "triage",
        "version": "1",
        "output": Triage,
        "inputs": Ticket,
        "context": Org,
        "messages": MESSAGES,
        "runtime_policy": {"temperature": 0},
    }
    return TypedContract.define(**{**arguments, **overrides})


def run(typed: TypedContract[Triage], answer: Any, io: str) -> tuple[Triage, Any]:
    runtime = ScriptedRuntime([ScriptedSuccess(output=answer)])
    if io == "async":
        return asyncio.run(arun_receipt(typed, runtime, Ticket(**TICKET), context={"org": "acme"}))
    return run_receipt(typed, runtime, TICKET, context=Org(org="acme"))


def test_define_declares_one_value_per_field_and_the_model_s_output_schema() -> None:
    contract = triage().contract
    assert list(contract.inputs) == ["subject", "body", "customer", "tags"]
    assert [spec.required for spec in contract.inputs.values()] == [True, True, True, False]
    customer = contract.inputs["customer"].schema_
    assert "$ref" not in json.dumps(customer)  # $defs inlined
    assert customer["properties"]["plan"]["enum"] == ["free", "pro"]
    assert contract.output_schema == model_output_schema(Triage)


@pytest.mark.parametrize("io", ["sync", "async"])
def test_run_returns_the_output_model(io: str) -> None:
    answer, receipt = run(triage(), ANSWER, io)
    assert answer == Triage(**ANSWER)
    assert receipt.output == ANSWER
    runtime = ScriptedRuntime([ScriptedSuccess(output=ANSWER)])
    assert triage().run(runtime, TICKET, context={"org": "a"}) == answer


def test_the_compiled_messages_render_the_templates() -> None:
    interaction = triage().compile(TICKET, context={"org": "acme"})
    assert [m.content for m in interaction.messages] == [
        "You triage tickets for ACME.",
        "Plan: pro\nSubject: Down\n\nAll of it.",
    ]


@pytest.mark.parametrize("io", ["sync", "async"])
def test_an_answer_the_model_rejects_names_every_pointer(io: str) -> None:
    with pytest.raises(OutputSchemaError) as schema_error:
        run(triage(), {"tier": "p9", "summary": 3}, io)
    assert schema_error.value.code == codes.OUTPUT_SCHEMA
    assert "/tier" in str(schema_error.value)
    assert "/summary" in str(schema_error.value)

    class Strict(BaseModel):  # the model refuses what the schema allows
        tier: Literal["p1", "p2", "p3"]
        summary: str

        @field_validator("summary")
        @classmethod
        def _short(cls, value: str) -> str:
            if len(value) > 3:
                raise ValueError("too long")
            return value

    typed = TypedContract.define(id="t", version="1", output=Strict, messages=[("user", "x")])
    with pytest.raises(OutputTypeError) as type_error:
        typed.run(ScriptedRuntime([ScriptedSuccess(output=ANSWER)]))
    _, receipt = run_receipt(
        triage(), ScriptedRuntime([ScriptedSuccess(output=ANSWER)]), TICKET, context={"org": "a"}
    )
    assert typed.output_problems(receipt) == ["/summary: Value error, too long (value_error)"]
    assert triage().output_problems(receipt) == []
    assert type_error.value.code == codes.OUTPUT_TYPE
    assert "/summary" in str(type_error.value)
    assert "outage" not in str(type_error.value)


def test_values_that_the_models_refuse_are_listed() -> None:
    with pytest.raises(TypedContractError) as error:
        triage().compile({"subject": "", "customer": {"plan": "gold"}}, context={"org": "a"})
    text = str(error.value)
    for pointer in ("/subject", "/body", "/customer/name", "/customer/plan"):
        assert pointer in text
    assert error.value.code == codes.DATA_INVALID


def test_template_mistakes_are_found_at_define() -> None:
    with pytest.raises(TypedContractError, match=codes.REF_UNKNOWN):
        triage(messages=[("user", "{{ inputs.subjct }}")])
    with pytest.raises(TypedContractError, match="at character 20"):
        triage(messages=[("user", "Hi {{ inputs.subject")])
    with pytest.raises(TypedContractError) as error:
        triage(messages=[("system", "ok"), ("user", "Hi {{ inputs.subject | shout }}")])
    assert error.value.problems == [
        "/messages/1/content: unknown filter 'shout' (filters: trim, lower, upper, json, "
        "format_date, format_number, default) at character 23 (template_syntax)"
    ]
    with pytest.raises(TypedContractError):  # a value JSON cannot hold: not a NotJson escaping
        triage(evals=[{"id": "e", "inputs": {"when": object()}, "fake_output": ANSWER}])


def test_define_reports_each_field_of_the_document_that_is_wrong() -> None:
    with pytest.raises(TypedContractError) as error:
        triage(evals=[{"id": 1e20, "fake_output": ANSWER}])
    assert error.value.problems == ["/evals/0/id: Input should be a valid string (string_type)"]


def test_a_model_without_a_strict_form_is_refused_only_under_strict() -> None:
    class Open(BaseModel):
        extra: dict[str, int]

    loose = TypedContract.define(id="t", version="1", output=Open, messages=[("user", "x")])
    assert loose.contract.output_schema["properties"]["extra"]["additionalProperties"]
    with pytest.raises(OutputSchemaStrictError) as error:
        TypedContract.define(
            id="t", version="1", output=Open, messages=[("user", "x")], strict=True
        )
    assert error.value.code == codes.OUTPUT_SCHEMA_STRICT
    assert "/properties/extra" in str(error.value)


def test_to_yaml_round_trips_to_the_same_fingerprint(tmp_path: Path) -> None:
    typed = triage(  # a version that would read as a number unquoted (YAML 1.2's 1e3)
        version="1e3",
        evals=[{"id": "e", "inputs": TICKET, "context": {"org": "a"}, "fake_output": ANSWER}],
    )
    text = typed.to_yaml()
    assert "content: |-\n" in text  # short forms, block style
    assert "{{ inputs.body }}" in text
    path = tmp_path / "triage.yaml"
    path.write_text(text, encoding="utf-8")
    request = RenderRequest(inputs=TICKET, context={"org": "acme"})
    from_file = compile_contract(path, request).interaction
    assert from_file is not None
    expected = typed.compile(TICKET, context={"org": "acme"})
    assert request_fingerprint(from_file) == request_fingerprint(expected)
    loaded = TypedContract.load(path, output=Triage, inputs=Ticket, context=Org)
    assert request_fingerprint(loaded.compile(TICKET, context={"org": "acme"})) == (
        request_fingerprint(expected)
    )


class Note(BaseModel):
    note: str | None = None


@pytest.mark.parametrize("line_break", ["\x85", "\n\x85", "\u2028", "\u2029"])
def test_to_yaml_keeps_the_characters_yaml_reads_as_line_breaks(
    tmp_path: Path, line_break: str
) -> None:
    """NEL is a line break to YAML 1.1: written raw in a quoted scalar it is read back as a
    space, and the file would compile to another request (a default's value, or text)."""
    template = f"a{line_break}b {{{{ inputs.note | default(value={json.dumps(line_break)}) }}}}"
    typed = TypedContract.define(
        id="breaks", version="1", output=Triage, inputs=Note, messages=[("user", template)]
    )
    path = tmp_path / "breaks.yaml"
    path.write_text(typed.to_yaml(), encoding="utf-8")
    expected = typed.compile(Note())
    assert expected.messages[0].content == f"a{line_break}b {line_break}"
    assert compile_contract(path, RenderRequest(inputs={"note": None})).interaction == expected


def test_load_lists_every_difference_in_one_error(tmp_path: Path) -> None:
    document = yaml.safe_load(triage().to_yaml())
    document["output_schema"]["properties"]["tier"]["enum"] = ["p1", "p2"]
    del document["output_schema"]["properties"]["summary"]
    document["inputs"]["body"]["required"] = False
    document["inputs"]["extra"] = {"schema": {"type": "string"}}
    del document["context"]
    document["messages"] = [{"role": "user", "content": "x"}]
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(TypedContractError) as error:
        TypedContract.load(path, output=Triage, inputs=Ticket, context=Org)
    assert error.value.problems == [
        "/output_schema/properties/summary: in the model's schema, not in the contract",
        "/output_schema/properties/tier/enum: the contract and the model's schema differ",
        "/inputs/body/required: the contract and the model's schema differ",
        "/inputs/extra: in the contract, not in the model's schema",
        "/context/org: in the model's schema, not in the contract",
    ]


def test_load_ignores_annotations_and_reports_unreadable_files(tmp_path: Path) -> None:
    document = yaml.safe_load(triage().to_yaml())
    document["output_schema"]["description"] = "a triage"
    document["output_schema"].pop("title", None)
    path = tmp_path / "annotated.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    TypedContract.load(path, output=Triage, inputs=Ticket, context=Org)
    with pytest.raises(TypedContractError, match=codes.NOT_FOUND):
        TypedContract.load(tmp_path / "missing.yaml", output=Triage)


def test_a_recursive_input_model_is_a_typed_error() -> None:
    class Node(BaseModel):
        children: list[Node] = []

    class Tree(BaseModel):
        root: Node

    with pytest.raises(TypedContractError, match="recursive"):
        TypedContract.define(
            id="t", version="1", output=Triage, inputs=Tree, messages=[("user", "x")]
        )


def test_values_that_are_not_json_or_not_mappings_are_typed_errors() -> None:
    plain = TypedContract.define(id="t", version="1", output=Triage, messages=[("user", "x")])
    with pytest.raises(TypedContractError, match="/inputs: Input should be a valid dictionary"):
        plain.compile([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypedContractError, match="values"):
        plain.compile({"when": object()})


def test_load_reads_required_as_a_set(tmp_path: Path) -> None:
    document = yaml.safe_load(triage().to_yaml())
    document["output_schema"]["required"].reverse()
    path = tmp_path / "reordered.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    TypedContract.load(path, output=Triage, inputs=Ticket, context=Org)


def test_check_output_model_lists_every_difference(tmp_path: Path) -> None:
    schema = model_output_schema(Triage)
    check_output_model(schema, Triage)
    check_output_model(triage().contract, Triage)
    drifted = {**schema, "required": ["tier"], "title": "Other"}
    drifted["properties"] = {**schema["properties"], "extra": {"type": "string"}}
    with pytest.raises(OutputTypeError) as error:
        check_output_model(drifted, Triage)
    assert error.value.code == codes.OUTPUT_TYPE
    assert str(error.value) == (
        "output_schema does not match Triage: "
        "/output_schema/properties/extra: in the contract, not in the model's schema; "
        "/output_schema/required: the contract and the model's schema differ"
    )
    path = tmp_path / "triage.yaml"
    path.write_text(triage().to_yaml(), encoding="utf-8")
    check_output_model(path, Triage)
    with pytest.raises(TypedContractError, match=codes.NOT_FOUND):
        check_output_model(tmp_path / "missing.yaml", Triage)


class Brief(BaseModel):
    """A model stricter than its schema: the summary must be short."""

    tier: Literal["p1", "p2", "p3"]
    summary: str

    @field_validator("summary")
    @classmethod
    def _short(cls, value: str) -> str:
        if len(value) > 8:
            raise ValueError("at most 8 characters")
        return value


class Recording(ScriptedRuntime):
    """The scripted runtime, remembering the messages of each request it was sent."""

    def __init__(self, *answers: ScriptedSuccess) -> None:
        super().__init__(list(answers))
        self.sent: list[list[str]] = []

    def produce_output(self, call: RuntimeCall) -> Any:
        self.sent.append([m.content for m in call.request.interaction.messages])
        return super().produce_output(call)


BRIEF = TypedContract.define(id="brief", version="1", output=Brief, messages=[("user", "x")])


def run_brief(runtime: ScriptedRuntime, io: str, repair: int) -> tuple[Brief, Any]:
    if io == "async":
        return asyncio.run(arun_receipt(BRIEF, runtime, repair=repair))
    return run_receipt(BRIEF, runtime, repair=repair)


@pytest.mark.parametrize("io", ["sync", "async"])
def test_repair_sends_back_what_the_schema_or_the_model_refuses(io: str) -> None:
    model = Recording(
        ScriptedSuccess(text="p1, it is down"),  # not JSON
        ScriptedSuccess(output={"tier": "p9", "summary": "down"}),  # fails the schema
        ScriptedSuccess(output={"tier": "p1", "summary": "the site is down"}),  # the model
        ScriptedSuccess(output={"tier": "p1", "summary": "down"}),
    )
    with collect_attempts() as tries:
        answer, receipt = run_brief(model, io, repair=4)
    assert answer == Brief(tier="p1", summary="down")
    assert tries == [4]
    assert receipt.request_fingerprint == request_fingerprint(BRIEF.compile())
    feedback = [sent[-1] for sent in model.sent[1:]]
    assert "- message content is not JSON" in feedback[0]
    assert "- /tier: fails enum" in feedback[1]
    assert "- /summary: Value error, at most 8 characters (value_error)" in feedback[2]
    assert model.sent[3][:-1] == [*model.sent[2], '{"summary":"the site is down","tier":"p1"}']


@pytest.mark.parametrize("io", ["sync", "async"])
def test_repair_one_is_the_plain_call_and_the_last_refusal_is_raised(io: str) -> None:
    long = ScriptedSuccess(output={"tier": "p1", "summary": "the site is down"})
    model = Recording(long, ScriptedSuccess(output={"tier": "p2", "summary": "fine"}))
    with collect_attempts() as tries, pytest.raises(OutputTypeError, match="/summary"):
        run_brief(model, io, repair=1)
    assert (tries, len(model.sent)) == ([], 1)  # one try, no repair machinery
    model = Recording(long)
    with collect_attempts() as tries, pytest.raises(OutputTypeError, match="/summary"):
        run_brief(model, io, repair=2)
    assert (tries, len(model.sent)) == ([2], 2)
    for wrong in (0, -1, True):
        with pytest.raises(InvalidData, match="attempts"):
            run_brief(Recording(long), io, repair=wrong)


class Ask(BaseModel):
    message: str
    nickname: str | None = None


def test_to_yaml_writes_condition_and_loop_bodies_that_compile_the_same(tmp_path: Path) -> None:
    body = "Call them {{ inputs.nickname }}."
    when = {"kind": "when", "condition": {"kind": "exists", "path": "inputs.nickname"}}
    typed = TypedContract.define(
        id="ask",
        version="1",
        output=Triage,
        inputs=Ask,
        messages=[("user", [{**when, "then": body, "else": [{"kind": "text", "value": "Hi."}]}])],
    )
    text = typed.to_yaml()
    path = tmp_path / "ask.yaml"
    path.write_text(text, encoding="utf-8")
    for values in ({"message": "m"}, {"message": "m", "nickname": "Sam"}):
        from_file = compile_contract(path, RenderRequest(inputs=values)).interaction
        assert from_file is not None
        expected = typed.compile(Ask(**values))
        assert request_fingerprint(from_file) == request_fingerprint(expected)
