"""Composition root of the ``langfuse`` entry point (``templiqx.runtimes`` group): apart
from ``_runtime``, which so never imports the testing package (replay, vcrpy-backed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from templiqx_core import RuntimeAdapter, Unsupported
from templiqx_core.adapters import RuntimeOptions

from ._config import LangfuseConfig
from ._runtime import LangfuseTracedRuntime
from ._tracing import TraceRef

if TYPE_CHECKING:
    from .testing.replay import ReplayingRuntime


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Configured from the environment, or replaying a cassette (no call, no export)."""
    runtime = _build(options)
    if (on_url := options.on_trace_url) is not None:
        traced = runtime if isinstance(runtime, LangfuseTracedRuntime) else runtime.runtime
        assert isinstance(traced, LangfuseTracedRuntime)  # built so by ``_build``

        def on_ref(ref: TraceRef) -> None:
            if ref.url is not None:
                on_url(ref.url)

        traced.tracing.on_ref = on_ref
    return runtime


def _build(options: RuntimeOptions) -> LangfuseTracedRuntime | ReplayingRuntime:
    if options.replay is not None:
        try:
            from .testing.replay import offline_langfuse, replaying_runtime
        except ImportError:
            raise Unsupported(
                "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
            ) from None
        # A person reads the CLI's miss: one line, the body diff only when debugging.
        brief = options.env.get("TEMPLIQX_DEBUG") != "1"
        return replaying_runtime(
            options.replay,
            env=options.env,
            langfuse=offline_langfuse(LangfuseConfig.from_env(options.env), options.replay),
            brief_misses=brief,
        )
    return LangfuseTracedRuntime.from_env(options.env)
