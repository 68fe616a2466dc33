"""Composition root of the ``langfuse`` entry point (``templiqx.runtimes`` group): apart
from ``_runtime``, which so never imports the testing package (replay, vcrpy-backed)."""

from __future__ import annotations

from templiqx_core import RuntimeAdapter, Unsupported
from templiqx_core.adapters import RuntimeOptions

from ._config import LangfuseConfig
from ._runtime import LangfuseTracedRuntime


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """From the environment, or replaying a cassette (no call, no export)."""
    runtime: RuntimeAdapter
    if options.replay is None:
        runtime = traced = LangfuseTracedRuntime.from_env(options.env)
    else:
        try:
            from .testing.replay import offline_langfuse, replaying_runtime
        except ImportError:
            raise Unsupported(
                "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
            ) from None
        langfuse = offline_langfuse(LangfuseConfig.from_env(options.env), options.replay)
        # A person reads the CLI's miss: one line, the body diff only when debugging.
        brief = options.env.get("TEMPLIQX_DEBUG") != "1"
        runtime = replaying_runtime(
            options.replay, env=options.env, langfuse=langfuse, brief_misses=brief
        )
        assert isinstance(runtime.runtime, LangfuseTracedRuntime)  # as replaying_runtime builds
        traced = runtime.runtime
    if (on_url := options.on_trace_url) is not None:
        traced.tracing.on_ref = lambda ref: None if ref.url is None else on_url(ref.url)
    return runtime
