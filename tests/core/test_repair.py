"""``RepairingRuntime`` around the scripted runtime: what each try sends, when it stops,
and what the caller gets; every test as a sync and as an async host calls it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from templiqx_core import (
    CompiledInteraction,
    ExecutionReceipt,
    ExecutionRequest,
    InvalidData,
    RenderRequest,
    RepairingRuntime,
    RuntimeAdapter,
    RuntimeClosed,
    RuntimeFailureCode,
    RuntimeFailureError,
    ScriptedFailure,
    ScriptedRuntime,
    ScriptedSuccess,
    codes,
    collect_attempts,
    execute_contract,
)
from templiqx_core._failures import MAX_ANSWER_CHARS
from templiqx_core.adapters import RuntimeCall, current_repair, request_fingerprint
from templiqx_core.conformance import check_adapter
from tests.conftest import BOTH_IO, REFERENCE

pytestmark = BOTH_IO

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["tier", "count"],
    "properties": {"tier": {"enum": ["low", "high"]}, "count": {"type": "integer"}},
}
VALID = {"tier": "low", "count": 2}


class Spy(ScriptedRuntime):
    """The scripted runtime, remembering each request it was sent and the try it was."""

    def __init__(self, *outcomes: ScriptedSuccess | ScriptedFailure) -> None:
        super().__init__(list(outcomes))
        self.sent: list[ExecutionRequest] = []
        self.tries: list[int | None] = []

    def produce_output(self, call: RuntimeCall) -> Any:
        self.sent.append(call.request)
        attempt = current_repair()
        self.tries.append(None if attempt is None else attempt.number)
        return super().produce_output(call)


@pytest.fixture
def request_(greeting: CompiledInteraction) -> ExecutionRequest:
    interaction = greeting.model_copy(update={"output_schema": SCHEMA})
    return ExecutionRequest(interaction=interaction)


@pytest.fixture
def call(io: str) -> Iterator[Callable[[RuntimeAdapter, ExecutionRequest], ExecutionReceipt]]:
    """``runtime.execute`` (sync) or ``runtime.aexecute`` on an event loop (async)."""
    with asyncio.Runner() as runner:

        def run(runtime: RuntimeAdapter, request: ExecutionRequest) -> ExecutionReceipt:
            if io == "async":
                # In the caller's context, as a task started there sees it.
                return runner.run(runtime.aexecute(request), context=contextvars.copy_context())
            return runtime.execute(request)

        yield run


Call = Callable[[RuntimeAdapter, ExecutionRequest], ExecutionReceipt]


def test_an_answer_that_is_not_json_is_sent_back_then_the_valid_one_returned(
    request_: ExecutionRequest, call: Call
) -> None:
    spy = Spy(ScriptedSuccess(text="Sure! {tier: low}"), ScriptedSuccess(output=VALID))
    with collect_attempts() as tries:
        receipt = call(RepairingRuntime(spy, attempts=3), request_)
    assert receipt.output == VALID
    assert receipt.output_schema_valid
    assert tries == [2]
    assert spy.tries == [1, 2]
    original = request_.interaction
    assert receipt.request_fingerprint == request_fingerprint(original)
    repaired = spy.sent[1].interaction
    assert repaired.messages[: len(original.messages)] == original.messages
    assistant, user = repaired.messages[len(original.messages) :]
    assert (assistant.role, assistant.content) == ("assistant", "Sure! {tier: low}")
    assert user.role == "user"
    assert user.content.splitlines() == [
        "Your answer does not satisfy the required output:",
        "- message content is not JSON",
        "Answer again with only the corrected JSON value.",
    ]
    # Everything else of the interaction is sent as it was.
    assert repaired.model_copy(update={"messages": original.messages}) == original


def test_every_failed_rule_is_listed_with_its_pointer(
    request_: ExecutionRequest, call: Call
) -> None:
    wrong = {"tier": "urgent", "count": "two"}
    spy = Spy(ScriptedSuccess(output=wrong), ScriptedSuccess(output=VALID))
    receipt = call(RepairingRuntime(spy, attempts=2), request_)
    assert receipt.output == VALID
    assistant, user = spy.sent[1].interaction.messages[-2:]
    assert assistant.content == '{"count":"two","tier":"urgent"}'
    rules = user.content.splitlines()[1:-1]
    assert sorted(rules) == [
        "- /count: not of type integer",
        '- /tier: fails enum ["low", "high"]',
    ]


def test_the_conversation_grows_by_one_answer_and_one_feedback_per_try(
    request_: ExecutionRequest, call: Call
) -> None:
    spy = Spy(
        ScriptedSuccess(text="nope"),
        ScriptedSuccess(output={"tier": "low"}),
        ScriptedSuccess(output=VALID),
    )
    call(RepairingRuntime(spy, attempts=3), request_)
    sizes = [len(sent.interaction.messages) for sent in spy.sent]
    base = len(request_.interaction.messages)
    assert sizes == [base, base + 2, base + 4]
    assert "- /count: missing (required)" in spy.sent[2].interaction.messages[-1].content


def test_tries_run_out_with_the_last_answer(request_: ExecutionRequest, call: Call) -> None:
    spy = Spy(ScriptedSuccess(output={"tier": "x", "count": 1}))
    with collect_attempts() as tries:
        receipt = call(RepairingRuntime(spy, attempts=3), request_)
    assert not receipt.output_schema_valid
    assert tries == [3]
    assert len(spy.sent) == 3
    assert receipt.request_fingerprint == request_fingerprint(request_.interaction)

    spy = Spy(ScriptedSuccess(text="still not JSON"))
    with collect_attempts() as tries, pytest.raises(RuntimeFailureError) as raised:
        call(RepairingRuntime(spy, attempts=2), request_)
    assert raised.value.code == codes.RUNTIME_INVALID_RESPONSE
    assert raised.value.failure.answer == "still not JSON"
    assert tries == [2]
    assert len(spy.sent) == 2


@pytest.mark.parametrize(
    "failure",
    [
        ScriptedFailure(
            RuntimeFailureCode.INVALID_RESPONSE, "model stopped with finish_reason length"
        ),
        ScriptedFailure(RuntimeFailureCode.INVALID_RESPONSE, "response has no choices"),
        ScriptedFailure(RuntimeFailureCode.UNAVAILABLE, "model gateway returned HTTP 503"),
    ],
    ids=["truncated", "malformed", "unavailable"],
)
def test_failures_without_an_answer_are_not_repaired(
    request_: ExecutionRequest, call: Call, failure: ScriptedFailure
) -> None:
    spy = Spy(failure, ScriptedSuccess(output=VALID))
    with pytest.raises(RuntimeFailureError) as raised, collect_attempts() as tries:
        call(RepairingRuntime(spy, attempts=3), request_)
    assert raised.value.code == failure.code.value
    assert raised.value.failure.answer is None
    assert len(spy.sent) == 1
    assert tries == [1]


def test_an_interrupt_during_a_repair_goes_through_counted(
    request_: ExecutionRequest, call: Call
) -> None:
    class Interrupted(Spy):
        def produce_output(self, call_: RuntimeCall) -> Any:
            if len(self.sent) == 1:
                self.sent.append(call_.request)
                raise KeyboardInterrupt
            return super().produce_output(call_)

    spy = Interrupted(ScriptedSuccess(text="no"), ScriptedSuccess(output=VALID))
    with pytest.raises(KeyboardInterrupt), collect_attempts() as tries:
        call(RepairingRuntime(spy, attempts=3), request_)
    assert tries == [2]
    assert current_repair() is None  # no try stays current after the call


def test_the_answer_kept_is_bounded_and_never_in_the_failures_json(
    request_: ExecutionRequest, call: Call
) -> None:
    huge = "prose " * 20_000
    spy = Spy(ScriptedSuccess(text=huge))
    with pytest.raises(RuntimeFailureError) as raised:
        call(RepairingRuntime(spy, attempts=2), request_)
    failure = raised.value.failure
    assert failure.answer == huge[:MAX_ANSWER_CHARS]
    assert spy.sent[1].interaction.messages[-2].content == huge[:MAX_ANSWER_CHARS]
    assert "prose" not in failure.fingerprint + str(raised.value) + repr(failure)


def test_one_attempt_is_the_plain_runtime(request_: ExecutionRequest, call: Call) -> None:
    outcomes = (ScriptedSuccess(output={"tier": "x", "count": 1}),)
    plain = call(Spy(*outcomes), request_)
    spy = Spy(*outcomes)
    with collect_attempts() as tries:
        wrapped = call(RepairingRuntime(spy, attempts=1), request_)
    assert wrapped.model_dump_json() == plain.model_dump_json()
    assert spy.tries == [None]
    assert tries == []


def test_no_try_starts_after_the_deadline(request_: ExecutionRequest, call: Call) -> None:
    now = [0.0]

    class Slow(Spy):
        def produce_output(self, call_: RuntimeCall) -> Any:
            now[0] += 4.0  # each try takes 4 s of the injected clock
            return super().produce_output(call_)

    spy = Slow(
        ScriptedSuccess(text="no"), ScriptedSuccess(text="no"), ScriptedSuccess(output=VALID)
    )
    runtime = RepairingRuntime(spy, attempts=5, deadline_s=6.0, clock=lambda: now[0])
    with pytest.raises(RuntimeFailureError), collect_attempts() as tries:
        call(runtime, request_)
    # Try 1 ends at 4 s (time left: try 2 starts), try 2 at 8 s: past 6 s, no try 3.
    assert len(spy.sent) == 2
    assert tries == [2]


def test_a_hosts_own_rules_are_repaired_too(request_: ExecutionRequest, call: Call) -> None:
    def validate(receipt: ExecutionReceipt) -> list[str]:
        count = receipt.output["count"] if isinstance(receipt.output, dict) else None
        return [] if count == 2 else ["/count: must be 2 (the model's field)"]

    spy = Spy(ScriptedSuccess(output={"tier": "low", "count": 7}), ScriptedSuccess(output=VALID))
    receipt = call(RepairingRuntime(spy, attempts=2, validate=validate), request_)
    assert receipt.output == VALID
    assert "- /count: must be 2 (the model's field)" in spy.sent[1].interaction.messages[-1].content


def test_wrapper_is_the_inner_runtime_to_hosts(request_: ExecutionRequest, call: Call) -> None:
    spy = Spy(ScriptedSuccess(output=VALID))
    runtime = RepairingRuntime(spy, attempts=2)
    assert runtime.descriptor() == spy.descriptor()
    events: list[Any] = []
    receipt = runtime.execute_streaming(request_, events.append)
    assert [e.kind for e in events] == ["Complete"]
    assert receipt.output == VALID
    runtime.close()
    assert spy.closed
    with pytest.raises(RuntimeClosed):
        call(runtime, request_)


def test_one_attempt_streams_as_the_inner_runtime(request_: ExecutionRequest, io: str) -> None:
    def stream(runtime: RuntimeAdapter) -> list[str]:
        events: list[Any] = []
        if io == "async":
            asyncio.run(runtime.aexecute_streaming(request_, events.append))
        else:
            runtime.execute_streaming(request_, events.append)
        return [event.model_dump_json() for event in events]

    outcome = ScriptedSuccess(output=VALID, deltas=("{", "}"))
    plain = stream(ScriptedRuntime([outcome]))
    assert len(plain) == 3  # two deltas, then Complete
    assert stream(RepairingRuntime(ScriptedRuntime([outcome]), attempts=1)) == plain
    repaired = stream(RepairingRuntime(ScriptedRuntime([outcome]), attempts=2))
    assert repaired == plain[-1:]  # with repair: the call's one terminal event


def test_the_wrapper_passes_the_port_conformance_checks(request_: ExecutionRequest) -> None:
    valid = request_.model_copy(update={"fixture_output": VALID})
    passed = check_adapter(
        RepairingRuntime(
            ScriptedRuntime([ScriptedSuccess(text="no"), ScriptedSuccess()]), attempts=2
        ),
        valid,
        failing_request=valid,
        failing_adapter=RepairingRuntime(ScriptedRuntime([ScriptedSuccess(text="no")]), attempts=3),
    )
    assert "failure_projection" in passed


@pytest.mark.parametrize("attempts", [0, -1, True, 1.5, 11, 10**20])
def test_attempts_and_deadline_are_checked(attempts: Any) -> None:
    with pytest.raises(InvalidData):
        RepairingRuntime(ScriptedRuntime([ScriptedSuccess()]), attempts=attempts)
    with pytest.raises(InvalidData):
        RepairingRuntime(ScriptedRuntime([ScriptedSuccess()]), deadline_s=0)


def test_execute_contract_says_the_attempts(call: Call) -> None:
    contract = REFERENCE / "demo" / "greeting.yaml"
    render = RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"})
    runtime = ScriptedRuntime(
        [ScriptedSuccess(text="{"), ScriptedSuccess(output={"greeting": "Hi"})]
    )
    envelope = execute_contract(contract, render, runtime=runtime, repair=3)
    assert envelope.ok
    assert envelope.attempts == 2
    assert '"attempts": 2' in envelope.model_dump_json(indent=2)
    plain = execute_contract(
        contract, render, runtime=ScriptedRuntime([ScriptedSuccess(output={"greeting": "Hi"})])
    )
    assert plain.attempts is None
    assert "attempts" not in plain.model_dump_json()
    failed = execute_contract(
        contract, render, runtime=ScriptedRuntime([ScriptedSuccess(text="{")]), repair=2
    )
    assert not failed.ok
    assert failed.attempts == 2
    assert failed.diagnostics[0].code == codes.RUNTIME_INVALID_RESPONSE
