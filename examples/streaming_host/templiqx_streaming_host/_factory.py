"""Composition root for the ``openai-stream`` entry point (``templiqx.runtimes`` group)."""

from __future__ import annotations

from templiqx_core import RuntimeAdapter, Unsupported
from templiqx_core.adapters import RuntimeOptions
from templiqx_langfuse import LangfuseConfig

from ._runtime import StreamingHostRuntime

__all__ = ["runtime_factory"]


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Configured from the environment, or replaying a cassette offline, as ``langfuse``."""
    if options.replay is None:
        return StreamingHostRuntime.from_env(options.env)
    try:
        from templiqx_langfuse.testing.replay import offline_langfuse, replaying_runtime
    except ImportError:
        needs = "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
        raise Unsupported(needs) from None
    return replaying_runtime(
        options.replay,
        env=options.env,
        langfuse=offline_langfuse(LangfuseConfig.from_env(options.env), options.replay),
        # A person reads the CLI's miss: one line, the body diff only when debugging.
        brief_misses=options.env.get("TEMPLIQX_DEBUG") != "1",
        build=StreamingHostRuntime,
    )
