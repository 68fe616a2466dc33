"""The two ways into the compiler, side by side (used by the compiler and path tests).

The fast path accepts a document with ``check.checked_contract`` (no pydantic) and
compiles it as loaded; the model path validates it with ``Contract`` and compiles the
model dumped by alias. ``assert_paths_agree`` holds the fast path to two promises: it
never accepts what the model rejects, and what it accepts compiles to the same envelope,
byte for byte, as ``compile_envelope`` writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from templiqx_core import RenderRequest, compile_envelope
from templiqx_core._compiler import Contract
from templiqx_core._compiler.check import checked_contract, is_plain_json
from templiqx_core._compiler.core import compile_plain
from templiqx_core._compiler.wire import compile_envelope_data
from templiqx_core._serde import wire_json


def model_or_errors(data: Any) -> Contract | str:
    try:
        return Contract.model_validate(data)
    except ValidationError as error:
        return str(error)


def assert_paths_agree(
    data: Any,
    inputs: Any,
    context: Any = None,
    capabilities: Any = ("structured_output",),
) -> bool:
    """Check both promises for one document and request; whether the fast path took it."""
    context = {} if context is None else context
    checked = checked_contract(data)
    model = model_or_errors(data)
    if checked is None:
        return False
    assert isinstance(model, Contract), f"fast path accepted what the model rejects: {model}"
    if not all(type(v) is dict and is_plain_json(v) for v in (inputs, context)):
        return True  # the CLI hands such values to the model path
    for indent in (None, 2):
        fast = _outcome(
            lambda: wire_json(
                compile_envelope_data(compile_plain(checked, inputs, context, capabilities)),
                indent=indent,  # noqa: B023
            )
        )
        model_path = _outcome(
            lambda: compile_envelope(
                model,  # type: ignore[arg-type]
                RenderRequest(inputs=inputs, context=context),
                capabilities=capabilities,
            ).model_dump_json(indent=indent)  # noqa: B023
        )
        assert fast == model_path
    return True


def _outcome(run: Callable[[], str]) -> tuple[str, str]:
    """The text, or the error's type: a crash must at least be the same crash."""
    try:
        return "ok", run()
    except Exception as error:
        return "raised", type(error).__name__
