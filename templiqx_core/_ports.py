"""The ``RuntimeAdapter`` port: a template method around one hook, one lifecycle for all."""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from . import codes
from ._canonical import NotJson
from ._contracts import (
    AdapterDescriptor,
    CompleteEvent,
    DeltaEvent,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    StreamEvent,
    ToolCallDeltaEvent,
)
from ._errors import PortError, RuntimeClosed
from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError
from ._receipts import build_receipt, request_fingerprint
from ._schema import SchemaValidator, compile_schema

logger = logging.getLogger("templiqx_core")

EventSink = Callable[[StreamEvent], None]
_Self = TypeVar("_Self", bound="RuntimeAdapter")


@dataclass(frozen=True)
class Produced:
    """An output, ``details`` for observers, a declared schema verdict, a validation deadline."""

    output: Any
    details: Any = None
    output_schema_valid: bool | None = None
    deadline_at: float | None = None


@dataclass(frozen=True)
class CallOutcome:
    """How one call ended: ``receipt``, or the caller's ``code`` and a request-free ``detail``."""

    receipt: ExecutionReceipt | None = None
    details: Any = None
    error: BaseException | None = None
    code: str | None = None
    detail: str = ""


@dataclass(slots=True)
class _Stream:
    """The host's sink for one call: one terminal event, nothing once the task is cancelled."""

    sink: EventSink
    error: BaseException | None = None
    cancelled: bool = False
    ended: bool = False

    def send(self, event: StreamEvent) -> None:
        if isinstance(event, (CompleteEvent, FailedEvent)):
            if self.ended or self.cancelled:
                return
            self.ended = True
        elif self.cancelled:
            import asyncio  # only a cancelled async host gets here

            self.error = asyncio.CancelledError()
            raise self.error
        try:
            self.sink(event)
        except BaseException as error:
            self.error = error
            raise


def _terminal_failure(stream: _Stream | None, error: BaseException) -> None:
    if stream is not None and error is not stream.error:
        stream.send(_failed_event(error))


def _own(adapter: RuntimeAdapter, name: str) -> bool:
    """Whether ``adapter``'s class overrides the port's ``name``."""
    return getattr(type(adapter), name) is not getattr(RuntimeAdapter, name)


@dataclass(slots=True, eq=False, repr=False)
class RuntimeCall:
    """One execution in progress, as the port hands it to ``produce_output``."""

    request: ExecutionRequest
    adapter: AdapterDescriptor
    request_fingerprint: str
    _stream: _Stream | None = None
    _observers: list[Callable[[CallOutcome], None]] = field(default_factory=list)

    def emit(self, event: DeltaEvent | ToolCallDeltaEvent) -> None:
        """Send a delta to a streaming host; the sink's exception (a host cancel) propagates."""
        if not isinstance(event, (DeltaEvent, ToolCallDeltaEvent)):
            raise TypeError("adapters emit Delta/ToolCallDelta only; the port emits the terminal")
        if self._stream is not None:
            self._stream.send(event)

    def on_finish(self, observer: Callable[[CallOutcome], None]) -> None:
        """Call ``observer`` once with the outcome; its own exception is logged, not raised."""
        self._observers.append(observer)

    def _finish(self, **outcome: Any) -> None:
        observers, self._observers = self._observers, []
        if not observers:  # most calls have none: build no outcome for nobody
            return
        ended = CallOutcome(**outcome)
        for observer in observers:
            try:
                observer(ended)
            except Exception as error:
                logger.warning(
                    "an execution observer of %s failed (%s)", self.adapter.id, type(error).__name__
                )
            except BaseException as error:  # a KeyboardInterrupt: still one terminal event
                _terminal_failure(self._stream, error)
                raise


def _interrupted(error: BaseException) -> str:
    return f"execution interrupted ({type(error).__name__})"


def _failed_event(error: BaseException) -> FailedEvent:
    """``Failed`` with the error's code (or PERMANENT / INTERRUPTED), never its text."""
    if isinstance(error, PortError):
        return FailedEvent(code=error.code, message=str(error))
    if isinstance(error, Exception):
        return FailedEvent(
            code=codes.RUNTIME_PERMANENT, message=f"unexpected {type(error).__name__}"
        )
    return FailedEvent(code=codes.RUNTIME_INTERRUPTED, message=_interrupted(error))


class RuntimeAdapter(ABC):
    """Implement ``descriptor`` and ``produce_output``; one instance serves concurrent calls."""

    _port_closing: threading.Lock

    def __new__(cls, *args: Any, **kwargs: Any) -> RuntimeAdapter:
        instance = super().__new__(cls)
        # Set here, not in __init__: subclasses need not call super().__init__(). Acquired
        # once by close()/aclose() and never released: closed for good, and one closer wins.
        instance._port_closing = threading.Lock()
        return instance

    @abstractmethod
    def descriptor(self) -> AdapterDescriptor:
        """Identity and capabilities of this adapter."""

    def produce_output(self, call: RuntimeCall) -> Any:
        """Run ``call.request`` once into the output (or ``Produced``); the port maps errors."""
        raise NotImplementedError("implement produce_output (or override execute)")

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        """Run the request once; raise a ``PortError`` subclass on failure."""
        return self._run(request, None)

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        """``execute``, deltas then one terminal event to ``sink``; its exceptions propagate."""
        if not _own(self, "execute"):
            return self._run(request, sink)
        try:  # a wrapper: its outcome, projected
            receipt = self.execute(request)
        except BaseException as error:
            sink(_failed_event(error))
            raise
        sink(CompleteEvent.from_receipt(receipt))
        return receipt

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        """``execute`` on the loop (``aproduce_output``) or in a worker thread; cancellable."""
        if _own(self, "execute") and not _own(self, "aproduce_output"):
            import asyncio  # here: a synchronous host (the CLI) need not import it (~20 ms)

            return await asyncio.to_thread(self.execute, request)
        return await self._arun(request, None)

    async def aexecute_streaming(
        self, request: ExecutionRequest, sink: EventSink
    ) -> ExecutionReceipt:
        """``execute_streaming`` awaited; cancelling the task ends the stream, no event follows."""
        if _own(self, "aproduce_output") or not _own(self, "execute"):
            return await self._arun(request, sink)
        import asyncio

        try:  # a wrapper: its outcome, projected
            receipt = await self.aexecute(request)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            sink(_failed_event(error))
            raise
        sink(CompleteEvent.from_receipt(receipt))
        return receipt

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        """The async hook; by default ``produce_output`` in a worker thread (off the loop)."""
        import asyncio

        try:
            return await asyncio.to_thread(self.produce_output, call)
        except asyncio.CancelledError:
            if call._stream is not None:
                call._stream.cancelled = True
            raise

    def _run(self, request: ExecutionRequest, sink: EventSink | None) -> ExecutionReceipt:
        call, validator = self._port_open(request, sink)
        try:
            produced = self.produce_output(call)
        except BaseException as error:
            self._port_failed(call, error)
        return self._port_receipt(call, validator, produced)

    async def _arun(self, request: ExecutionRequest, sink: EventSink | None) -> ExecutionReceipt:
        import asyncio

        call, validator = self._port_open(request, sink)
        try:
            produced = await self.aproduce_output(call)
        except BaseException as error:
            # A cancelled task: the host stopped listening, nothing more is sent to it.
            self._port_failed(call, error, quiet=isinstance(error, asyncio.CancelledError))
        return self._port_receipt(call, validator, produced)

    def _port_open(
        self, request: ExecutionRequest, sink: EventSink | None
    ) -> tuple[RuntimeCall, SchemaValidator]:
        """Checks before any I/O, and the call the hook receives."""
        stream = None if sink is None else _Stream(sink)
        try:
            self._ensure_open()
            descriptor = self.descriptor()
            interaction = request.interaction
            # An invalid output schema is the caller's error (InvalidData), before any I/O.
            validator: SchemaValidator = compile_schema(interaction.output_schema)
            request_fp = request_fingerprint(interaction)
        except BaseException as error:
            _terminal_failure(stream, error)
            raise
        return RuntimeCall(request, descriptor, request_fp, stream), validator

    def _port_receipt(
        self, call: RuntimeCall, validator: SchemaValidator, produced: Any
    ) -> ExecutionReceipt:
        """The receipt from what the hook returned (built only here), then ``Complete``."""
        if not isinstance(produced, Produced):
            produced = Produced(produced)
        try:
            receipt = build_receipt(
                call.adapter,
                call.request.interaction,
                produced.output,
                request_fp=call.request_fingerprint,
                validator=validator,
            )
        except Exception as error:  # whatever goes wrong here is a problem with the output
            reason = error.reason if isinstance(error, NotJson) else type(error).__name__
            detail = f"model output cannot be fingerprinted or validated ({reason})"
            raise _refuse(call, RuntimeFailureCode.INVALID_RESPONSE, detail) from error
        if produced.deadline_at is not None and time.monotonic() > produced.deadline_at:
            detail = "validating the model output took the call past its deadline"
            raise _refuse(call, RuntimeFailureCode.TIMEOUT, detail)
        declared = produced.output_schema_valid
        if declared is not None and declared != receipt.output_schema_valid:
            receipt = receipt.model_copy(update={"output_schema_valid": declared})
        call._finish(receipt=receipt, details=produced.details)
        if call._stream is not None:
            call._stream.send(CompleteEvent.from_receipt(receipt))
        return receipt

    def _port_failed(
        self, call: RuntimeCall, error: BaseException, quiet: bool = False
    ) -> NoReturn:
        """Map what the hook raised, tell observers, end the stream (unless ``quiet``), raise."""
        stream = call._stream
        if (stream is not None and error is stream.error) or not isinstance(error, Exception):
            # A host cancel through its sink, or KeyboardInterrupt & co: re-raised as is.
            call._finish(error=error, code=codes.RUNTIME_INTERRUPTED, detail=_interrupted(error))
            if not quiet:
                _terminal_failure(stream, error)
            raise error
        if self.closed and (
            isinstance(error, RuntimeFailureError) or not isinstance(error, PortError)
        ):
            # close() ran during the call: its I/O was aborted (the pool closed under it).
            mapped: PortError = self._closed_error()
        elif isinstance(error, PortError):
            mapped = error
        else:
            detail = f"unexpected {type(error).__name__} while producing the output"
            raise _refuse(call, RuntimeFailureCode.PERMANENT, detail) from error
        detail = mapped.failure.detail if isinstance(mapped, RuntimeFailureError) else str(mapped)
        call._finish(error=mapped, code=mapped.code, detail=detail)
        _terminal_failure(stream, mapped)
        if mapped is error:
            raise error
        raise mapped from error

    @property
    def closed(self) -> bool:
        return self._port_closing.locked()

    def _closed_error(self) -> RuntimeClosed:
        descriptor = self.descriptor()
        return RuntimeClosed(f"runtime {descriptor.id} {descriptor.version} is closed")

    def _ensure_open(self) -> None:
        """Raise ``RuntimeClosed`` once ``close()`` has started (for wrappers' ``execute``)."""
        if self.closed:
            raise self._closed_error()

    def release(self) -> None:  # noqa: B027 - a no-op default, by design
        """Free what the adapter owns (pools, trace clients); called once by ``close``."""

    def close(self) -> None:
        """Close for good (idempotent, thread-safe): later calls raise ``RuntimeClosed``."""
        if self._port_closing.acquire(blocking=False):
            self.release()

    async def arelease(self) -> None:
        """``release`` for ``aclose``, by default in a worker thread (off the loop)."""
        import asyncio

        await asyncio.to_thread(self.release)

    async def aclose(self) -> None:
        """``close`` for async hosts; either of the two closes once."""
        if self._port_closing.acquire(blocking=False):
            await self.arelease()

    async def __aenter__(self: _Self) -> _Self:
        self._ensure_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self: _Self) -> _Self:
        self._ensure_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _refuse(call: RuntimeCall, code: RuntimeFailureCode, detail: str) -> RuntimeFailureError:
    """The runtime failure ending ``call``, its observers told and its ``Failed`` sent."""
    refused = RuntimeFailureError(RuntimeFailure.for_adapter(call.adapter, code, detail))
    call._finish(error=refused, code=refused.code, detail=refused.failure.detail)
    _terminal_failure(call._stream, refused)
    return refused


class WrappingRuntime(RuntimeAdapter):
    """Base of runtimes wrapping ``inner`` (retrying, repairing): its descriptor and lifecycle."""

    def __init__(self, inner: RuntimeAdapter) -> None:
        self.inner = inner

    def descriptor(self) -> AdapterDescriptor:
        return self.inner.descriptor()

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        return self.inner.execute(request)

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        return await self.inner.aexecute(request)

    def release(self) -> None:
        self.inner.close()

    async def arelease(self) -> None:
        await self.inner.aclose()
