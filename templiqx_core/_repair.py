"""Repair: an invalid answer goes back with every failed rule at its pointer; each try runs
with its ``RepairAttempt`` current (``current_repair``), so a tracer puts them in one trace."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from ._canonical import canonical_json
from ._contracts import CompiledMessage, ExecutionReceipt, ExecutionRequest
from ._errors import InvalidData
from ._failures import MAX_ANSWER_CHARS, RuntimeFailureError
from ._ports import EventSink, RuntimeAdapter, WrappingRuntime
from ._receipts import OUTPUT_SCHEMA_SUMMARY, output_schema_messages, request_fingerprint

#: A host's rules for a schema-valid receipt: one ``/pointer: rule`` line per failure.
Validate = Callable[[ExecutionReceipt], Sequence[str]]

#: Every try resends the conversation with each earlier answer and its failures: a model
#: that never complies would otherwise cost ever longer requests without end.
MAX_ATTEMPTS: Final = 10
REPAIR_INTRO: Final = "Your answer does not satisfy the required output:"
REPAIR_OUTRO: Final = "Answer again with only the corrected JSON value."

_CURRENT: contextvars.ContextVar[RepairAttempt | None] = contextvars.ContextVar(
    "templiqx_repair_attempt", default=None
)
_COUNTS: contextvars.ContextVar[tuple[list[int], ...]] = contextvars.ContextVar(
    "templiqx_repair_counts", default=()
)


def current_repair() -> RepairAttempt | None:
    """The try of a repairing call running in this context (None outside a repair)."""
    return _CURRENT.get()


@contextmanager
def collect_attempts() -> Iterator[list[int]]:
    """How many tries each repairing call finished in the block made (a receipt cannot say)."""
    found: list[int] = []
    token = _COUNTS.set((*_COUNTS.get(), found))
    try:
        yield found
    finally:
        _COUNTS.reset(token)


class RepairAttempt:
    """One try (``number`` 1 is the original); ``notes`` are shared by all tries (a tracer's
    trace). Leaving ``with attempt:`` swallows a repairable outcome when another try follows."""

    def __init__(
        self,
        runtime: RepairingRuntime,
        request: ExecutionRequest,
        previous: RepairAttempt | None = None,
    ) -> None:
        self._runtime, self.request = runtime, request
        self.receipt: ExecutionReceipt | None = None
        self._again: bool | None = None
        self._next: RepairAttempt | None = None
        self.notes: dict[Any, Any] = {} if previous is None else previous.notes
        self.number: int = 1 if previous is None else previous.number + 1
        if previous is None:
            self._original = request_fingerprint(request.interaction)  # every receipt's
            deadline_s = runtime.deadline_s
            self._ends_at = None if deadline_s is None else runtime._clock() + deadline_s
        else:
            self._original, self._ends_at = previous._original, previous._ends_at

    def repairs(self, outcome: ExecutionReceipt | BaseException) -> bool:
        """Whether this outcome is sent back: it names failed rules, and tries and time are left."""
        return self._failed_rules(outcome) is not None and self._continues()

    def _failed_rules(self, outcome: ExecutionReceipt | BaseException) -> list[str] | None:
        """The lines the repair message lists; None when there is nothing to repair."""
        if isinstance(outcome, RuntimeFailureError):
            return None if outcome.failure.answer is None else [outcome.failure.detail]
        if not isinstance(outcome, ExecutionReceipt):
            return None
        rules: list[str] = []
        if not outcome.output_schema_valid:
            schema = self.request.interaction.output_schema
            rules = output_schema_messages(schema, outcome.output) or [OUTPUT_SCHEMA_SUMMARY]
        elif self._runtime.validate is not None:
            rules = list(self._runtime.validate(outcome))
        return rules or None

    def _continues(self) -> bool:
        # Decided once per try, so the tracer and the driver agree even at the deadline.
        if self._again is None:
            left = self._ends_at is None or self._runtime._clock() < self._ends_at
            self._again = self.number < self._runtime.attempts and left
        return self._again

    def __iter__(self) -> Iterator[RepairAttempt]:
        attempt: RepairAttempt | None = self
        while attempt is not None:
            yield attempt
            attempt = attempt._next

    def __enter__(self) -> RepairAttempt:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> bool:
        _CURRENT.reset(self._token)
        outcome = error if error is not None else self.receipt
        rules = None if outcome is None else self._failed_rules(outcome)
        if rules is None or not self._continues():
            for sink in _COUNTS.get():
                sink.append(self.number)
            return False
        if isinstance(outcome, RuntimeFailureError):
            answer = outcome.failure.answer or ""
        elif isinstance(outcome, ExecutionReceipt):
            # Clipped as a non-JSON answer is: each try adds one answer to the conversation.
            answer = canonical_json(outcome.output).decode()[:MAX_ANSWER_CHARS]
        feedback = "\n".join([REPAIR_INTRO, *(f"- {rule}" for rule in rules), REPAIR_OUTRO])
        interaction = self.request.interaction
        messages = [
            *interaction.messages,
            CompiledMessage(role="assistant", content=answer),
            CompiledMessage(role="user", content=feedback),
        ]
        update = {"interaction": interaction.model_copy(update={"messages": messages})}
        self._next = RepairAttempt(self._runtime, self.request.model_copy(update=update), self)
        return error is not None  # repaired: the failure goes no further

    def result(self) -> ExecutionReceipt:
        """The receipt of the last try, fingerprinted as the original request."""
        last = list(self)[-1].receipt
        assert last is not None  # the tries ended on a receipt, else they raised
        return last.model_copy(update={"request_fingerprint": self._original})


class RepairingRuntime(WrappingRuntime):
    """``attempts`` counts every try (1 is ``inner`` unchanged); ``validate``: a host's rules."""

    def __init__(
        self,
        inner: RuntimeAdapter,
        *,
        attempts: int = 2,
        deadline_s: float | None = None,
        validate: Validate | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if type(attempts) is not int or not 1 <= attempts <= MAX_ATTEMPTS:
            raise InvalidData(f"attempts must be an integer from 1 to {MAX_ATTEMPTS}")
        number = isinstance(deadline_s, int | float) and not isinstance(deadline_s, bool)
        if deadline_s is not None and not (number and deadline_s > 0):
            raise InvalidData("deadline_s must be a positive number of seconds")
        super().__init__(inner)
        self.attempts, self.deadline_s = attempts, deadline_s
        self.validate, self._clock = validate, clock

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        if self.attempts == 1:
            return self.inner.execute(request)
        first = RepairAttempt(self, request)
        for attempt in first:
            with attempt:
                attempt.receipt = self.inner.execute(attempt.request)
        return first.result()

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        if self.attempts == 1:
            return await self.inner.aexecute(request)
        first = RepairAttempt(self, request)
        for attempt in first:
            with attempt:
                attempt.receipt = await self.inner.aexecute(attempt.request)
        return first.result()

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        """With repair, one terminal event: an earlier try's deltas cannot be taken back."""
        if self.attempts == 1:
            self._ensure_open()
            return self.inner.execute_streaming(request, sink)
        return super().execute_streaming(request, sink)

    async def aexecute_streaming(
        self, request: ExecutionRequest, sink: EventSink
    ) -> ExecutionReceipt:
        if self.attempts == 1:
            self._ensure_open()
            return await self.inner.aexecute_streaming(request, sink)
        return await super().aexecute_streaming(request, sink)
