"""Runtimes found through the ``templiqx.runtimes`` entry points (the core imports none)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import Unsupported

if TYPE_CHECKING:  # listing runtimes must not load the port (and pydantic)
    from ._ports import RuntimeAdapter


ENTRY_POINT_GROUP = "templiqx.runtimes"
#: Runtimes of this repository's other distributions: where to get one that is missing.
_PROVIDED_BY = {"openai-stream": "templiqx-streaming-host (README: Installing into a host project)"}


@dataclass(frozen=True)
class RuntimeOptions:
    """What a surface passes a runtime factory; ``on_trace_url``: per call, as they overlap."""

    replay: Path | None = None
    scenario: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    on_trace_url: Callable[[str], None] | None = None


RuntimeFactory = Callable[[RuntimeOptions], "RuntimeAdapter"]


def available_runtimes() -> list[str]:
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def load_runtime(name: str, options: RuntimeOptions) -> RuntimeAdapter:
    """Build the runtime registered as ``name``; ``Unsupported`` lists the known names."""
    matches = entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not matches:
        known = ", ".join(available_runtimes()) or "none installed"
        hint = _PROVIDED_BY.get(name)
        where = f"; {name!r} comes with {hint}" if hint else ""
        raise Unsupported(f"unknown runtime {name!r} (available: {known}{where})")
    factory: RuntimeFactory = matches[name].load()
    return factory(options)
