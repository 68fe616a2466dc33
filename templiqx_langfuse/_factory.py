"""Composition root for the ``langfuse`` entry point (``templiqx.runtimes`` group).

Kept apart from ``_runtime`` so the runtime never imports the testing package: replay is
an optional, vcrpy-backed way of building the same runtime, chosen here and only here.
"""

from __future__ import annotations

from templiqx_core import RuntimeAdapter, Unsupported
from templiqx_core.adapters import RuntimeOptions

from ._runtime import LangfuseTracedRuntime


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Entry point ``langfuse``: configured from the environment, or replaying a cassette."""
    if options.replay is not None:
        try:
            from .testing.replay import replaying_runtime
        except ImportError:
            raise Unsupported(
                "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
            ) from None
        return replaying_runtime(options.replay, env=options.env)
    return LangfuseTracedRuntime.from_env(options.env)
