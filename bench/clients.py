"""One benchmark client per process: ``python bench/clients.py NAME MODEL_URL SINK_URL N THREADS``.

Prints one JSON line: per-call latencies (p50/p99), calls/s and peak RSS, for a
sequential pass and a threaded pass over the same client object, the process CPU time
per call (every thread, from the first measured call through ``close()``, so tracing
work done in the background counts), plus how many spans the client should have
exported. Every client sends the same json_schema request the adapter sends and parses
the JSON content, so they all do the same useful work.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["greeting"],
    "properties": {"greeting": {"type": "string"}},
}
MESSAGES = [
    {"role": "system", "content": "You write concise greetings."},
    {"role": "user", "content": "Hello Ryan for Blinqx"},
]
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "templiqx_output", "strict": True, "schema": SCHEMA},
}
KEY = "sk-bench-0000000000"
Built = tuple[Callable[[], Any], Callable[[], None], int]  # (call, close, spans per call)
PK, SK = "pk-lf-bench", "sk-lf-bench"


def raw_httpx(model_url: str, sink_url: str) -> Built:
    import httpx

    client = httpx.Client()
    body = json.dumps(
        {
            "model": "bench-model",
            "messages": MESSAGES,
            "response_format": RESPONSE_FORMAT,
            "temperature": 0,
        }
    ).encode()
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}

    def call() -> Any:
        response = client.post(f"{model_url}/chat/completions", content=body, headers=headers)
        response.raise_for_status()
        return json.loads(response.json()["choices"][0]["message"]["content"])

    return call, client.close, 0


def _openai_call(client: Any) -> Callable[[], Any]:
    def call() -> Any:
        completion = client.chat.completions.create(
            model="bench-model", messages=MESSAGES, response_format=RESPONSE_FORMAT, temperature=0
        )
        return json.loads(completion.choices[0].message.content)

    return call


def openai_sdk(model_url: str, sink_url: str) -> Built:
    from openai import OpenAI

    client = OpenAI(base_url=model_url, api_key=KEY, max_retries=0)
    return _openai_call(client), client.close, 0


def langfuse_openai(model_url: str, sink_url: str) -> Built:
    os.environ.update(
        {"LANGFUSE_PUBLIC_KEY": PK, "LANGFUSE_SECRET_KEY": SK, "LANGFUSE_BASE_URL": sink_url}
    )
    from langfuse import get_client
    from langfuse.openai import OpenAI

    client = OpenAI(base_url=model_url, api_key=KEY, max_retries=0)

    def close() -> None:
        get_client().flush()
        client.close()

    return _openai_call(client), close, 1


def instructor_client(model_url: str, sink_url: str) -> Built:
    import instructor
    from openai import OpenAI
    from pydantic import BaseModel

    class Greeting(BaseModel):
        greeting: str

    raw = OpenAI(base_url=model_url, api_key=KEY, max_retries=0)
    client = instructor.from_openai(raw, mode=instructor.Mode.JSON_SCHEMA)

    def call() -> Any:
        return client.chat.completions.create(
            model="bench-model", messages=MESSAGES, response_model=Greeting, max_retries=0
        )

    return call, raw.close, 0


def _adapter(model_url: str, sink_url: str, tracing: bool) -> Built:
    from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig

    interaction = compile_contract(
        ROOT / "examples" / "greeting.yaml",
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        ["structured_output"],
    ).interaction
    assert interaction is not None
    request = ExecutionRequest(interaction=interaction)
    # BENCH_FLUSH_AT / BENCH_FLUSH_INTERVAL_S tune the adapter-owned span processor.
    tuning: dict[str, Any] = {}
    if "BENCH_FLUSH_AT" in os.environ:
        tuning["flush_at"] = int(os.environ["BENCH_FLUSH_AT"])
    if "BENCH_FLUSH_INTERVAL_S" in os.environ:
        tuning["flush_interval_s"] = float(os.environ["BENCH_FLUSH_INTERVAL_S"])
    langfuse = (
        LangfuseConfig(
            public_key=PK, secret_key=SK, base_url=sink_url, flush_timeout_s=5.0, **tuning
        )
        if tracing
        else LangfuseConfig()
    )
    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url=model_url, api_key=KEY, model="bench-model"), langfuse
    )
    return (lambda: runtime.execute(request).output), runtime.close, 1 if tracing else 0


CLIENTS: dict[str, Callable[[str, str], Built]] = {
    "raw-httpx": raw_httpx,
    "openai-sdk": openai_sdk,
    "langfuse-openai": langfuse_openai,
    "instructor": instructor_client,
    "adapter-traced": lambda m, s: _adapter(m, s, True),
    "adapter-untraced": lambda m, s: _adapter(m, s, False),
    "adapter-sink-hanging": lambda m, s: _adapter(m, s, True),
}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(call: Callable[[], Any], n: int, threads: int) -> dict[str, float]:
    latencies: list[float] = []
    lock = threading.Lock()

    def work(count: int) -> None:
        local = []
        for _ in range(count):
            started = time.perf_counter()
            call()
            local.append(time.perf_counter() - started)
        with lock:
            latencies.extend(local)

    started = time.perf_counter()
    if threads == 1:
        work(n)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, [n // threads] * threads))
    wall = time.perf_counter() - started
    return {
        "p50_us": percentile(latencies, 0.5) * 1e6,
        "p99_us": percentile(latencies, 0.99) * 1e6,
        "calls_per_s": len(latencies) / wall,
        "calls": len(latencies),
    }


def main() -> None:
    name, model_url, sink_url, n, threads = sys.argv[1:6]
    call, close, spans_per_call = CLIENTS[name](model_url, sink_url)
    for _ in range(200):  # warm-up: connection pool, imports, caches
        call()
    cpu_started = time.process_time()  # every thread of this process: exporters included
    sequential = measure(call, int(n), 1)
    threaded = measure(call, int(n), int(threads))
    close_started = time.perf_counter()
    close()
    close_s = time.perf_counter() - close_started
    cpu_us = (time.process_time() - cpu_started) * 1e6 / (sequential["calls"] + threaded["calls"])
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = 200 + sequential["calls"] + threaded["calls"]
    print(
        json.dumps(
            {
                "client": name,
                "sequential": sequential,
                "threaded": threaded,
                "rss_mb": rss_mb,
                "close_s": close_s,
                "cpu_us_per_call": cpu_us,
                "expected_spans": int(total * spans_per_call),
            }
        )
    )
    sys.stdout.flush()
    os._exit(0)  # skip atexit flushes: whatever was not exported by close() is lost


if __name__ == "__main__":
    main()
