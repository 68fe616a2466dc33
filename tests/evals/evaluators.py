"""Custom evaluators with Langfuse's evaluator signature, for the eval tests."""

from __future__ import annotations

from typing import Any


def length(*, input: Any, output: Any, expected_output: Any, metadata: Any) -> dict[str, Any]:
    return {"name": "length", "value": len(output["greeting"]), "comment": "characters"}


async def polite(*, input: Any, output: Any, expected_output: Any, metadata: Any) -> Any:
    class Evaluation:  # an object with name/value/comment, as Langfuse's Evaluation
        name = "polite"
        value = output["greeting"].startswith("Hello")
        comment = None

    return [Evaluation()]


def is_ryan(*, input: Any, output: Any, expected_output: Any, metadata: Any) -> dict[str, Any]:
    return {"name": "is_ryan", "value": input["inputs"]["name"] == "Ryan"}


def verbose(**_: Any) -> dict[str, Any]:
    return {"name": "verbose", "value": "x" * 100_000, "comment": "y" * 100_000}


def huge(**_: Any) -> dict[str, Any]:
    return {"value": 2**70}


def broken(**_: Any) -> Any:
    raise RuntimeError("evaluator bug")


_calls = 0


def interrupting(**_: Any) -> Any:
    """Ctrl-C pressed while the second case is being scored."""
    global _calls
    _calls += 1
    if _calls == 2:
        raise KeyboardInterrupt
    return {"name": "ok", "value": True}
