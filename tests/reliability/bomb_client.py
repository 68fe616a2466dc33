"""Child process of the decompression-bomb test: one model call under a memory limit.

Usage: ``python bomb_client.py BASE_URL CONTRACT HEADROOM_MIB [--unbounded | --async]``. Prints one
JSON line: the outcome code, wall time of the call and how much the resident set grew
(peak, from the kernel's high-water mark reset just before the call). The address space
is capped at what the process already maps plus ``HEADROOM_MIB``, so a decoder that
inflates the bomb dies with ``MemoryError`` instead of taking the machine with it.
``--unbounded`` decodes the same response with plain httpx, proving the bomb is real;
``--async`` makes the call through ``aexecute``.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux >= 4.0)
        return True
    except OSError:
        return False


def main() -> None:
    base_url, contract, headroom_mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
    unbounded = "--unbounded" in sys.argv

    import httpx

    from templiqx_core import ExecutionRequest, PortError, RenderRequest, compile_contract
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig

    compiled = compile_contract(
        contract,
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "B"}),
        ["structured_output"],
    )
    assert compiled.interaction is not None
    request = ExecutionRequest(interaction=compiled.interaction)
    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url=base_url, api_key="sk-bomb-0123456789", model="m", timeout_s=10),
        LangfuseConfig(),
    )
    plain = httpx.Client(trust_env=False)
    limit = _status_kib("VmSize") * 1024 + headroom_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    exact = _reset_peak()
    before = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    code = "ok"
    try:
        if unbounded:
            plain.post(f"{base_url}/chat/completions", content=b"{}").read()
        elif "--async" in sys.argv:
            import asyncio

            asyncio.run(runtime.aexecute(request))
        else:
            runtime.execute(request)
    except PortError as error:
        code = error.code
    except MemoryError:
        code = "MemoryError"
    elapsed = time.monotonic() - started
    after = _status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"code": code, "elapsed_s": elapsed, "peak_growth_kib": after - before, "exact": exact}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
