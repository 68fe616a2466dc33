"""The core stays provider-neutral, and its public API is a pinned contract."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("langfuse", "httpx", "vcr", "openai", "templiqx_langfuse", "mcp")


def test_core_imports_no_provider_or_tracing_package() -> None:
    code = (
        "import json, sys\n"
        "import templiqx_core, templiqx_core._cli, templiqx_core.conformance\n"
        "import templiqx_core._application, templiqx_core._compiler, templiqx_core._runtimes\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(result.stdout)
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert leaked == []
