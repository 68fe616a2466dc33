"""The ``RuntimeAdapter`` port (SPEC §3).

One abstract round trip (``execute``) plus a streaming projection with a default: adapters
that do not stream inherit a single terminal event and need no code for it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from ._contracts import (
    AdapterDescriptor,
    CompleteEvent,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    StreamEvent,
)
from ._errors import PortError

__all__ = ["EventSink", "RuntimeAdapter", "project_terminal"]

EventSink = Callable[[StreamEvent], None]


class RuntimeAdapter(ABC):
    """A way to run a compiled interaction and get back a fingerprinted receipt.

    Implementations must be thread-safe: one instance serves concurrent ``execute`` calls.
    """

    @abstractmethod
    def descriptor(self) -> AdapterDescriptor:
        """Identity and capabilities of this adapter."""

    @abstractmethod
    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        """Run the request once; raise a ``PortError`` subclass on failure."""

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        """Run the request, projecting its outcome onto ``sink`` as stream events.

        The default emits exactly one terminal event: ``Complete`` with the receipt
        ``execute`` returned, or ``Failed{code, message}`` followed by re-raising the same
        exception (the exception stays the authoritative outcome). An exception raised by
        ``sink`` propagates unchanged: that is how a host cancels.
        """
        return project_terminal(lambda: self.execute(request), sink)


def project_terminal(run: Callable[[], ExecutionReceipt], sink: EventSink) -> ExecutionReceipt:
    """Run ``run`` and emit its outcome as the one terminal event of a stream."""
    try:
        receipt = run()
    except PortError as error:
        sink(FailedEvent(code=error.code, message=str(error)))
        raise
    sink(CompleteEvent.from_receipt(receipt))
    return receipt
