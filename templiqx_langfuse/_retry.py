"""Opt-in retries around any ``RuntimeAdapter`` on tenacity; ``deadline_s`` is hard where
sockets honour the ambient deadline (the Langfuse runtime's do)."""

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


class RetryingRuntime(WrappingRuntime):
    """Retries retryable failures: a server's ``retry_after_ms`` (capped at ``max_wait_s``),
    else full-jitter backoff; then ``TQX_HOST_RETRY_EXHAUSTED``. Receipts are the inner's."""

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
        positive = deadline_s is None or deadline_s > 0
        if attempts < 1 or min(base_wait_s, max_wait_s) < 0 or not positive:
            raise InvalidData("attempts must be at least 1, waits >= 0, the deadline > 0")
        super().__init__(inner)
        self.attempts, self.max_wait_s, self.deadline_s = attempts, max_wait_s, deadline_s
        backoff = wait_random_exponential(multiplier=base_wait_s, max=max_wait_s)

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, RuntimeFailureError) and error.failure.retry_after_ms is not None:
                return min(error.failure.retry_after_ms / 1000.0, max_wait_s)
            return float(backoff(state))

        stop: stop_base = stop_after_attempt(attempts)
        if deadline_s is not None:
            stop = stop | stop_before_delay(deadline_s)
        self._policy: dict[str, Any] = {
            "stop": stop,
            "wait": wait,
            "retry": retry_if_exception(
                lambda error: isinstance(error, RuntimeFailureError) and error.retryable
            ),
            "retry_error_callback": self._exhausted,
        }
        self._sleep = sleep
        # Unless given, tenacity's own ``asyncio.sleep``, imported only by async hosts.
        self._asleep: dict[str, Any] = {"sleep": asleep} if asleep else {}

    def _budget(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext() if self.deadline_s is None else deadline(self.deadline_s)

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        with self._budget():
            return Retrying(sleep=self._sleep, **self._policy)(self.inner.execute, request)

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        with self._budget():
            retrying = AsyncRetrying(**self._asleep, **self._policy)
            return await retrying(self.inner.aexecute, request)

    def _exhausted(self, state: RetryCallState) -> NoReturn:
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
