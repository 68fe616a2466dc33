"""Composition root of the ``langfuse`` entry point (``templiqx.runtimes`` group): apart
from ``_runtime``, which so never imports the testing package (replay, vcrpy-backed)."""

from __future__ import annotations

from templiqx_core import RuntimeAdapter, Unsupported
from templiqx_core.adapters import RuntimeOptions

from ._runtime import LangfuseTracedRuntime
from ._tracing import TraceRef


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Configured from the environment, or replaying a cassette (no call, no export)."""
    runtime: RuntimeAdapter
    if options.replay is None:
        runtime = traced = LangfuseTracedRuntime.from_env(options.env)
    else:
        try:
            from .testing.replay import cli_replay
        except ImportError:
            raise Unsupported(
                "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
            ) from None
        runtime = cli_replay(options)
        assert isinstance(runtime.inner, LangfuseTracedRuntime)  # as cli_replay builds
        traced = runtime.inner
    if (on_url := options.on_trace_url) is not None:

        def on_ref(ref: TraceRef) -> None:
            if ref.url is not None:
                on_url(ref.url)

        traced.tracing.on_ref = on_ref
    return runtime
