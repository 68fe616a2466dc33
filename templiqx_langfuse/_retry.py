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
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
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
        self._asleep = asleep  # ``asyncio.sleep`` unless given
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
            "reraise": False,
        }

    def _budget(self) -> contextlib.AbstractContextManager[object]:
        return (
            deadline(self.deadline_s) if self.deadline_s is not None else contextlib.nullcontext()
        )

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        retrying = Retrying(sleep=self._sleep, **self._policy())
        try:
            with self._budget():
                result: ExecutionReceipt = retrying(self.inner.execute, request)
        except RetryError as exhausted:
            raise self._exhausted(exhausted) from None
        return result

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        """``execute`` for async hosts: waits are ``asyncio.sleep``, attempts the inner
        runtime's ``aexecute``; the same hints, deadline and outcome."""
        self._ensure_open()
        retrying = AsyncRetrying(sleep=self._asleep or _asyncio_sleep, **self._policy())
        try:
            with self._budget():
                result: ExecutionReceipt = await retrying(self.inner.aexecute, request)
        except RetryError as exhausted:
            raise self._exhausted(exhausted) from None
        return result

    def _exhausted(self, exhausted: RetryError) -> RuntimeFailureError:
        last = exhausted.last_attempt.exception()
        assert isinstance(last, RuntimeFailureError)
        tries = exhausted.last_attempt.attempt_number
        failure = RuntimeFailure.for_adapter(
            self.descriptor(),
            RuntimeFailureCode.RETRY_EXHAUSTED,
            f"gave up after {tries} attempt(s); last failure {last.code}: {last.failure.detail}",
            retry_after_ms=last.failure.retry_after_ms,
            scenario_id=last.failure.scenario_id,
        )
        return RuntimeFailureError(failure)


async def _asyncio_sleep(seconds: float) -> None:
    import asyncio  # only async hosts get here

    await asyncio.sleep(seconds)
