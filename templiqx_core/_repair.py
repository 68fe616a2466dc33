"""Repair: when the model's answer is not JSON or fails the output schema, ask it again.

The same conversation goes back with the answer as an ``assistant`` message and one
``user`` message listing every failed rule at its pointer (the diagnostics' own text),
until the output is valid or the tries or the deadline run out. A truncated answer
(``finish_reason: length``) or a malformed response is a plain failure, never repaired.

One decision object (``RepairSession``) serves the sync and the async driver, each a
loop of four lines. Each try runs with its ``RepairAttempt`` current (``current_repair``):
a tracing adapter puts every try of one call in one trace and marks those repaired.
"""

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

__all__ = [
    "RepairAttempt",
    "RepairSession",
    "RepairingRuntime",
    "collect_attempts",
    "current_repair",
]

#: Extra rules a host checks on a schema-valid receipt (a typed contract's model): one
#: ``/pointer: rule`` line per failure, none when the output passes.
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
    """Collect how many tries each repairing call finished inside the block made (the
    receipt, a wire contract, cannot say): one number per call, success or failure."""
    found: list[int] = []
    token = _COUNTS.set((*_COUNTS.get(), found))
    try:
        yield found
    finally:
        _COUNTS.reset(token)


class RepairAttempt:
    """One try of a repairing call: its number (1 is the original request), the request
    it sends, and ``notes``, a dict all tries of the call share (adapters keep there what
    ties the tries together, such as the trace they land in).

    A driver runs the try inside ``with attempt:`` and sets ``attempt.receipt``; leaving
    the block decides: a repairable failure is swallowed when another try follows.
    """

    __slots__ = ("_again", "_session", "_token", "number", "receipt", "request")

    def __init__(self, session: RepairSession, number: int, request: ExecutionRequest) -> None:
        self._session, self.number, self.request = session, number, request
        self._again: bool | None = None
        self.receipt: ExecutionReceipt | None = None

    @property
    def attempts(self) -> int:
        return self._session.attempts

    @property
    def original_fingerprint(self) -> str:
        """The request fingerprint of the original interaction (every receipt's)."""
        return self._session.original_fingerprint

    @property
    def notes(self) -> dict[Any, Any]:
        return self._session.notes

    def repairs(self, outcome: ExecutionReceipt | BaseException) -> bool:
        """Whether this outcome of the try is sent back for another: it names failed
        rules, and tries and time are left."""
        return self.failed_rules(outcome) is not None and self._continues()

    def failed_rules(self, outcome: ExecutionReceipt | BaseException) -> list[str] | None:
        """The lines the repair message lists; None when there is nothing to repair."""
        if isinstance(outcome, RuntimeFailureError):
            return None if outcome.failure.answer is None else [outcome.failure.detail]
        if not isinstance(outcome, ExecutionReceipt):
            return None
        rules: list[str] = []
        if not outcome.output_schema_valid:
            # One line per failed rule; the messages never quote the output.
            schema = self.request.interaction.output_schema
            rules = output_schema_messages(schema, outcome.output) or [OUTPUT_SCHEMA_SUMMARY]
        elif self._session.validate is not None:
            rules = list(self._session.validate(outcome))
        return rules or None

    def _continues(self) -> bool:
        # Decided once per try (the first repairable outcome the tracer or the driver
        # sees), so a generation's level and the driver agree even at the deadline.
        if self._again is None:
            session = self._session
            left = session.ends_at is None or session.clock() < session.ends_at
            self._again = self.number < session.attempts and left
        return self._again

    def __enter__(self) -> RepairAttempt:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> bool:
        _CURRENT.reset(self._token)
        outcome = error if error is not None else self.receipt
        if outcome is not None and self._session.again(outcome):
            return error is not None  # repaired: the failure goes no further
        self._session.end()
        return False


class RepairSession:
    """The decisions of one repairing call, for any driver: iterate it for the tries,
    run each in ``with attempt:``; ``receipt()`` is what the caller gets."""

    def __init__(
        self,
        request: ExecutionRequest,
        *,
        attempts: int,
        deadline_s: float | None = None,
        validate: Validate | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.attempts, self.validate, self.clock = attempts, validate, clock
        self.ends_at = None if deadline_s is None else clock() + deadline_s
        self.original_fingerprint = request_fingerprint(request.interaction)
        self.notes: dict[Any, Any] = {}
        self._next: ExecutionRequest | None = request
        self.attempt = RepairAttempt(self, 0, request)

    def __iter__(self) -> RepairSession:
        return self

    def __next__(self) -> RepairAttempt:
        if self._next is None:
            raise StopIteration
        self.attempt = RepairAttempt(self, self.attempt.number + 1, self._next)
        self._next = None
        return self.attempt

    def again(self, outcome: ExecutionReceipt | BaseException) -> bool:
        """Whether to try again; if so, the next try sends the conversation so far, the
        answer and the failed rules."""
        attempt = self.attempt
        rules = attempt.failed_rules(outcome)
        if rules is None or not attempt._continues():
            return False
        if isinstance(outcome, RuntimeFailureError):
            answer = outcome.failure.answer or ""
        elif isinstance(outcome, ExecutionReceipt):
            # Clipped as a non-JSON answer is: each try adds one answer to the conversation.
            answer = canonical_json(outcome.output).decode()[:MAX_ANSWER_CHARS]
        feedback = "\n".join([REPAIR_INTRO, *(f"- {rule}" for rule in rules), REPAIR_OUTRO])
        interaction = attempt.request.interaction
        messages = [
            *interaction.messages,
            CompiledMessage(role="assistant", content=answer),
            CompiledMessage(role="user", content=feedback),
        ]
        update = {"interaction": interaction.model_copy(update={"messages": messages})}
        self._next = attempt.request.model_copy(update=update)
        return True

    def end(self) -> None:
        for sink in _COUNTS.get():
            sink.append(self.attempt.number)

    def receipt(self) -> ExecutionReceipt:
        """The last try's receipt, fingerprinted as the original request."""
        receipt = self.attempt.receipt
        assert receipt is not None  # the tries ended on a receipt, else they raised
        if receipt.request_fingerprint == self.original_fingerprint:
            return receipt
        return receipt.model_copy(update={"request_fingerprint": self.original_fingerprint})


class RepairingRuntime(WrappingRuntime):
    """Wraps ``inner`` and repairs invalid answers: ``attempts`` counts every try (1 is
    ``inner`` unchanged); no try starts once ``deadline_s`` (from the call's start) has
    passed. Recommended order: ``RepairingRuntime(RetryingRuntime(runtime))``, so each try
    is retried on its own. ``validate`` adds rules of the host's (a typed contract's
    model) to the schema's."""

    def __init__(
        self,
        inner: RuntimeAdapter,
        *,
        attempts: int = 2,
        deadline_s: float | None = None,
        validate: Validate | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise InvalidData(f"attempts must be an integer from 1 to {MAX_ATTEMPTS}")
        if not 1 <= attempts <= MAX_ATTEMPTS:
            raise InvalidData(f"attempts must be an integer from 1 to {MAX_ATTEMPTS}")
        number = isinstance(deadline_s, int | float) and not isinstance(deadline_s, bool)
        if deadline_s is not None and not (number and deadline_s > 0):
            raise InvalidData("deadline_s must be a positive number of seconds")
        super().__init__(inner)
        self.attempts, self.deadline_s = attempts, deadline_s
        self.validate, self._clock = validate, clock

    def session(self, request: ExecutionRequest) -> RepairSession:
        """The decisions for one call of ``request`` (for hosts driving tries themselves)."""
        return RepairSession(
            request,
            attempts=self.attempts,
            deadline_s=self.deadline_s,
            validate=self.validate,
            clock=self._clock,
        )

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        if self.attempts == 1:
            return self.inner.execute(request)
        session = self.session(request)
        for attempt in session:
            with attempt:
                attempt.receipt = self.inner.execute(attempt.request)
        return session.receipt()

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        """``execute`` for async hosts: the same decisions, each try ``inner.aexecute``."""
        self._ensure_open()
        if self.attempts == 1:
            return await self.inner.aexecute(request)
        session = self.session(request)
        for attempt in session:
            with attempt:
                attempt.receipt = await self.inner.aexecute(attempt.request)
        return session.receipt()

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        """One try streams as ``inner`` does; with repair, one terminal event for the
        call (an earlier try's deltas cannot be taken back)."""
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
