"""Composition root for the ``openai-stream`` entry point (``templiqx.runtimes`` group)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from templiqx_core import (
    EventSink,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    PortError,
    RuntimeAdapter,
    StreamEvent,
    Unsupported,
)
from templiqx_core.adapters import RuntimeOptions, WrappingRuntime
from templiqx_langfuse import LangfuseConfig, ModelConfig

from ._runtime import StreamingHostRuntime

__all__ = ["ReplayingHost", "runtime_factory"]

_REPLAY_KEY = "replay-no-key"


def _replay_miss(error: BaseException, *, brief: bool) -> PortError | None:
    """The cassette's ``NotFound`` when ``error`` is the port's mapping of a miss."""
    from vcr.errors import CannotOverwriteExistingCassetteException

    from templiqx_langfuse.testing.cassettes import no_match_error

    cause = error.__cause__
    if isinstance(error, PortError) and isinstance(cause, CannotOverwriteExistingCassetteException):
        return no_match_error(cause, brief=brief)
    return None


class ReplayingHost(WrappingRuntime):
    """The streaming host answered by a vcrpy cassette: offline, Langfuse tracing off."""

    def __init__(self, cassette: Path, env: Mapping[str, str]) -> None:
        try:
            from templiqx_langfuse.testing.cassettes import use_cassette
            from templiqx_langfuse.testing.replay import offline_langfuse, recorded_endpoint
        except ImportError:
            raise Unsupported(
                "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
            ) from None
        base_url, model = recorded_endpoint(cassette)
        super().__init__(
            StreamingHostRuntime(
                ModelConfig(base_url=base_url, api_key=_REPLAY_KEY, model=model),
                offline_langfuse(LangfuseConfig.from_env(env), cassette),
            )
        )
        self._brief_misses = env.get("TEMPLIQX_DEBUG") != "1"
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(use_cassette(cassette, require_all_played=False))

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        try:
            return self.inner.execute(request)
        except PortError as error:
            raise (_replay_miss(error, brief=self._brief_misses) or error) from None

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        """The inner stream, live; a replay miss ends it as ``NotFound`` (event and raise)."""
        self._ensure_open()
        held: list[FailedEvent] = []  # the inner's terminal Failed, sent once the cause is known

        def forward(event: StreamEvent) -> None:
            if isinstance(event, FailedEvent):
                held.append(event)
            else:
                sink(event)

        try:
            return self.inner.execute_streaming(request, forward)
        except BaseException as error:
            miss = _replay_miss(error, brief=self._brief_misses)
            if miss is None:
                for event in held:  # empty when the exception is the sink's own (a cancel)
                    sink(event)
                raise
            sink(FailedEvent(code=miss.code, message=str(miss)))
            raise miss from None

    def release(self) -> None:
        try:
            self.inner.close()
        finally:
            self._stack.close()


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Entry point ``openai-stream``: configured from the environment, or replaying."""
    if options.replay is not None:
        return ReplayingHost(Path(options.replay), options.env)
    return StreamingHostRuntime.from_env(options.env)
