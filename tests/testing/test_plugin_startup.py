"""The pytest11 plugin loads with every host test run, so it must stay light."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("langfuse", "opentelemetry", "vcr", "httpx", "pydantic", "yaml", "jsonschema_rs", "orjson")


def test_plugin_load_imports_nothing_heavy() -> None:
    code = (
        "import json, sys\n"
        "import templiqx_langfuse.testing.plugin\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    )
    assert not set(loaded) & set(HEAVY)


def test_package_names_still_resolve() -> None:
    """The package is lazy (PEP 562); every public name is still there."""
    import templiqx_langfuse

    for name in templiqx_langfuse.__all__:
        assert getattr(templiqx_langfuse, name) is not None
    assert set(templiqx_langfuse.__all__) <= set(dir(templiqx_langfuse))
