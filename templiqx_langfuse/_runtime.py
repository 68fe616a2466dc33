"""``LangfuseTracedRuntime`` (one bounded, failure-mapped round trip per call; SSE streaming is
``templiqx_streaming_host``'s) and ``RetryingRuntime`` around any adapter, on tenacity."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Unpack

import tenacity

from templiqx_core import (
    AdapterDescriptor,
    ExecutionReceipt,
    ExecutionRequest,
    InvalidData,
    RuntimeAdapter,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
)
from templiqx_core.adapters import Produced, RuntimeCall, WrappingRuntime

from ._config import LangfuseConfig, ModelConfig
from ._deadline import BoundedStream, Post, aopen_bounded, deadline, open_bounded
from ._host import HostWiring, WiringOptions
from ._tracing import PROMPT_CAPABILITY, TracedReceipt, collect_traces, collect_usage
from ._version import __version__

ADAPTER_ID = "templiqx-langfuse"
CAPABILITIES = ("structured_output", PROMPT_CAPABILITY)


class LangfuseTracedRuntime(RuntimeAdapter):
    """Executes compiled interactions against an OpenAI-compatible endpoint, traced, for
    threads and tasks alike (natively async); close it to release connections and flush."""

    def __init__(
        self,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        **options: Unpack[WiringOptions],
    ) -> None:
        self._descriptor = AdapterDescriptor(
            id=ADAPTER_ID, version=__version__, capabilities=sorted(CAPABILITIES)
        )
        self._wiring = wiring = HostWiring.build(model, langfuse, **options)
        self.model, self.langfuse_config = wiring.model, wiring.langfuse
        self.redactor, self.tracing = wiring.redactor, wiring.tracing

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> LangfuseTracedRuntime:
        """Build from ``TEMPLIQX_*`` / ``OPENAI_*`` / ``LANGFUSE_*`` variables."""
        environ = os.environ if env is None else env
        return cls(ModelConfig.from_env(environ), LangfuseConfig.from_env(environ), **kwargs)

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def execute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        """``execute``, plus where its generation landed in Langfuse and its usage."""
        with collect_traces() as found, collect_usage() as used:
            receipt = self.execute(request)
        return TracedReceipt.of(receipt, found, used)

    async def aexecute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        with collect_traces() as found, collect_usage() as used:
            receipt = await self.aexecute(request)
        return TracedReceipt.of(receipt, found, used)

    def produce_output(self, call: RuntimeCall) -> Produced:
        wiring = self._wiring
        with wiring.settled(self):
            with open_bounded(wiring.clients.sync, wiring.url, **self._begin(call)) as stream:
                body = stream.body()
            return _produced(stream, body)  # parsed once the connection is back

    async def aproduce_output(self, call: RuntimeCall) -> Produced:
        wiring = self._wiring
        with wiring.settled(self):
            client = wiring.clients.for_loop()
            async with aopen_bounded(client, wiring.url, **self._begin(call)) as stream:
                body = await stream.abody()
            return _produced(stream, body)

    def _begin(self, call: RuntimeCall) -> Post:
        content, headers = self._wiring.begin(call).content, self._wiring.headers
        return Post(content=content, headers=headers, timeout_s=self.model.timeout_s)

    def release(self) -> None:
        self._wiring.close()

    async def arelease(self) -> None:
        await self._wiring.aclose()


def _produced(stream: BoundedStream, body: bytes) -> Produced:
    completion = stream.settle(body)
    return Produced(completion.output, completion, deadline_at=stream.at)


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
    ) -> None:
        positive = deadline_s is None or deadline_s > 0
        if attempts < 1 or min(base_wait_s, max_wait_s) < 0 or not positive:
            raise InvalidData("attempts must be at least 1, waits >= 0, the deadline > 0")
        super().__init__(inner)
        self.attempts, self.max_wait_s, self.deadline_s = attempts, max_wait_s, deadline_s
        backoff = tenacity.wait_random_exponential(multiplier=base_wait_s, max=max_wait_s)

        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, RuntimeFailureError) and error.failure.retry_after_ms is not None:
                return min(error.failure.retry_after_ms / 1000.0, max_wait_s)
            return float(backoff(state))

        # No wait starts that would end past the deadline.
        before = tenacity.stop_before_delay(deadline_s or math.inf)
        self._policy: dict[str, Any] = {
            "stop": tenacity.stop_after_attempt(attempts) | before,
            "wait": wait,
            "retry": tenacity.retry_if_exception(
                lambda error: isinstance(error, RuntimeFailureError) and error.retryable
            ),
            "retry_error_callback": self._exhausted,
        }
        self._sleep = sleep  # aexecute waits on tenacity's asyncio.sleep

    def _budget(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext() if self.deadline_s is None else deadline(self.deadline_s)

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        with self._budget():
            retrying = tenacity.Retrying(sleep=self._sleep, **self._policy)
            return retrying(self.inner.execute, request)

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        with self._budget():
            return await tenacity.AsyncRetrying(**self._policy)(self.inner.aexecute, request)

    def _exhausted(self, state: tenacity.RetryCallState) -> NoReturn:
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
