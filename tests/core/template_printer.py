"""The string form of content nodes, for the property test that parses what it prints."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from templiqx_core._compiler.model import _PATH


def _filter_text(item: str | Mapping[str, Any]) -> str:
    if isinstance(item, str):
        return item
    arguments = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}"
        for key, value in item.items()
        if key != "name" and (value is not None or key == "value")
    )
    return f"{item['name']}({arguments})"


def print_template(nodes: Iterable[Mapping[str, Any]]) -> str | None:
    """The string form of ``nodes``, or None when it has none (conditions, loops, ...)."""
    items: list[Mapping[str, Any]] = []
    for node in nodes:  # adjacent text merged: "{" then "{" must not open a placeholder
        if node["kind"] == "text" and items and items[-1]["kind"] == "text":
            items[-1] = {"kind": "text", "value": items[-1]["value"] + node["value"]}
        else:
            items.append(node)
    parts: list[str] = []
    for index, node in enumerate(items):
        if node["kind"] == "text":  # next: a placeholder, or no string form at all
            escaped = node["value"].replace("{{", '{{ "{{" }}')
            if index + 1 < len(items) and escaped.endswith("{"):  # the placeholder would join
                escaped = escaped[:-1] + '{{ "{" }}'
            parts.append(escaped)
            continue
        expression = node.get("expression", {})
        path = expression["path"] if expression.get("kind") == "ref" else ""
        if node["kind"] != "interpolate" or _PATH.fullmatch(path) is None:
            return None
        filters = "".join(f" | {_filter_text(item)}" for item in node.get("filters", []))
        parts.append(f"{{{{ {path}{filters} }}}}")
    return "".join(parts)
