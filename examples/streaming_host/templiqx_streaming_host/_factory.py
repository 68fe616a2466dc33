"""Composition root for the ``openai-stream`` entry point (``templiqx.runtimes`` group)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from templiqx_core import (
    AdapterDescriptor,
    EventSink,
    ExecutionReceipt,
    ExecutionRequest,
    RuntimeAdapter,
    Unsupported,
)
from templiqx_core._runtimes import RuntimeOptions
from templiqx_langfuse import ModelConfig

from ._runtime import StreamingHostRuntime

__all__ = ["ReplayingHost", "runtime_factory"]

_REPLAY_KEY = "replay-no-key"


class ReplayingHost(RuntimeAdapter):
    """The streaming host with its HTTP calls answered by a vcrpy cassette (offline)."""

    def __init__(self, cassette: Path) -> None:
        try:
            from templiqx_langfuse.testing.cassettes import use_cassette
            from templiqx_langfuse.testing.replay import recorded_endpoint
        except ImportError:
            raise Unsupported(
                "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
            ) from None
        base_url, model = recorded_endpoint(cassette)
        self.runtime = StreamingHostRuntime(
            ModelConfig(base_url=base_url, api_key=_REPLAY_KEY, model=model)
        )
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(use_cassette(cassette, require_all_played=False))

    def descriptor(self) -> AdapterDescriptor:
        return self.runtime.descriptor()

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        with self._no_match():
            return self.runtime.execute(request)

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        with self._no_match():
            return self.runtime.execute_streaming(request, sink)

    @contextlib.contextmanager
    def _no_match(self) -> Iterator[None]:
        from vcr.errors import CannotOverwriteExistingCassetteException

        from templiqx_langfuse.testing.cassettes import no_match_error

        try:
            yield
        except CannotOverwriteExistingCassetteException as error:
            raise no_match_error(error) from None

    def close(self) -> None:
        try:
            self.runtime.close()
        finally:
            self._stack.close()


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Entry point ``openai-stream``: configured from the environment, or replaying."""
    if options.replay is not None:
        return ReplayingHost(Path(options.replay))
    return StreamingHostRuntime(ModelConfig.from_env(options.env))
