"""Composition root of the ``langfuse`` entry point (``templiqx.runtimes`` group): apart
from ``_runtime``, which so never imports the testing package (replay, vcrpy-backed)."""

from __future__ import annotations

from templiqx_core import RuntimeAdapter, Unsupported
from templiqx_core.adapters import RuntimeOptions

from ._runtime import LangfuseTracedRuntime


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """From the environment, or replaying a cassette (no call, no export)."""
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
        traced.tracing.on_ref = lambda ref: None if ref.url is None else on_url(ref.url)
    return runtime
