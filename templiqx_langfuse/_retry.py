"""Opt-in retries around any ``RuntimeAdapter``, sync or async, built on tenacity.

Only retryable codes (timeout, rate-limited, unavailable) are retried. A server's
``retry_after_ms`` is honoured (capped at ``max_wait_s``); otherwise the wait is
exponential with full jitter. When attempts or the deadline run out, the caller gets
``TQX_HOST_RETRY_EXHAUSTED`` naming the last failure's code.

``deadline_s`` is hard for adapters whose sockets honour the ambient deadline (the
Langfuse runtime does): every attempt gets only what is left of it, and no wait starts
that would end past it. Another adapter's attempt in flight cannot be cut short.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from templiqx_core import (
    ExecutionReceipt,
    ExecutionRequest,
    InvalidData,
    RuntimeAdapter,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
)
from templiqx_core.adapters import WrappingRuntime

from ._deadline import deadline

__all__ = ["RetryingRuntime"]


def _retryable(error: BaseException) -> bool:
    return isinstance(error, RuntimeFailureError) and error.retryable


class RetryingRuntime(WrappingRuntime):
    """Wraps ``inner``; same descriptor, so receipts are indistinguishable from the inner's.

    Closing it closes ``inner`` (and with it the pool and traces ``inner`` owns).
    """

    def __init__(
        self,
        inner: RuntimeAdapter,
        *,
        attempts: int = 3,
        base_wait_s: float = 0.5,
        max_wait_s: float = 30.0,
        deadline_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if attempts < 1:
            raise InvalidData("attempts must be at least 1")
        if base_wait_s < 0 or max_wait_s < 0 or (deadline_s is not None and deadline_s <= 0):
            raise InvalidData("waits must be non-negative and the deadline positive")
        super().__init__(inner)
        self.attempts = attempts
        self.max_wait_s = max_wait_s
        self.deadline_s = deadline_s
        self._sleep = sleep
        # Unless given, tenacity's own: ``asyncio.sleep``, imported only by async hosts.
        self._asleep: dict[str, Any] = {"sleep": asleep} if asleep else {}
        self._backoff = wait_random_exponential(multiplier=base_wait_s, max=max_wait_s)

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, RuntimeFailureError) and error.failure.retry_after_ms is not None:
            return min(error.failure.retry_after_ms / 1000.0, self.max_wait_s)
        return float(self._backoff(state))

    def _policy(self) -> dict[str, Any]:
        stop: stop_base = stop_after_attempt(self.attempts)
        if self.deadline_s is not None:
            stop = stop | stop_before_delay(self.deadline_s)
        return {
            "stop": stop,
            "wait": self._wait,
            "retry": retry_if_exception(_retryable),
            "retry_error_callback": self._exhausted,
        }

    def _budget(self) -> contextlib.AbstractContextManager[object]:
        return (
            deadline(self.deadline_s) if self.deadline_s is not None else contextlib.nullcontext()
        )

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        with self._budget():
            return Retrying(sleep=self._sleep, **self._policy())(self.inner.execute, request)

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        """``execute`` for async hosts: waits are ``asyncio.sleep``, attempts the inner
        runtime's ``aexecute``; the same hints, deadline and outcome."""
        self._ensure_open()
        with self._budget():
            retrying = AsyncRetrying(**self._asleep, **self._policy())
            return await retrying(self.inner.aexecute, request)

    def _exhausted(self, state: RetryCallState) -> NoReturn:
        """Attempts or deadline ran out: the caller gets the last failure, named."""
        assert state.outcome is not None
        last = state.outcome.exception()
        assert isinstance(last, RuntimeFailureError)
        failure = RuntimeFailure.for_adapter(
            self.descriptor(),
            RuntimeFailureCode.RETRY_EXHAUSTED,
            f"gave up after {state.attempt_number} attempt(s); "
            f"last failure {last.code}: {last.failure.detail}",
            retry_after_ms=last.failure.retry_after_ms,
            scenario_id=last.failure.scenario_id,
        )
        raise RuntimeFailureError(failure) from None
