"""The async lane: N concurrent calls from one event loop against a slow loopback upstream.

    python bench/async_lane.py [--calls N] [--delay S] [--rate R] [--rounds R] [--only NAME ...]

Each client runs in its own process (``python bench/async_lane.py --client NAME ...``)
against one delayed model server and one Langfuse OTLP sink (``servers.py``). Reported
per client (median of the rounds): wall time of the burst, CPU per call (every thread
of the process, export included, through ``close``), event-loop lag (how late a 5 ms
ticker woke: p99 and worst), peak memory per call in flight, and the spans the sink
received. Ratios are to ``AsyncOpenAI`` in the same run. Exits non-zero when a client errs.

``--rate R`` starts the calls at R per second instead of all at once: a burst measures
how the loop copes with N completions arriving together (its lag is their CPU time,
whatever the client), a steady rate how much a client holds the loop in normal service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from clients import KEY, MESSAGES, PK, RESPONSE_FORMAT, ROOT, SK  # noqa: E402
from run import server, sink_count, sink_reset  # noqa: E402

ORDER = ["async-openai", "langfuse-async-openai", "adapter-async-untraced", "adapter-async-traced"]
Built = tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]], int]


def _openai(client: Any) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        completion = await client.chat.completions.create(
            model="bench-model", messages=MESSAGES, response_format=RESPONSE_FORMAT, temperature=0
        )
        return json.loads(completion.choices[0].message.content)

    return call


def async_openai(model_url: str, sink_url: str, calls: int) -> Built:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=model_url, api_key=KEY, max_retries=0)
    return _openai(client), client.close, 0


def langfuse_async_openai(model_url: str, sink_url: str, calls: int) -> Built:
    os.environ.update(
        {"LANGFUSE_PUBLIC_KEY": PK, "LANGFUSE_SECRET_KEY": SK, "LANGFUSE_BASE_URL": sink_url}
    )
    from langfuse import get_client
    from langfuse.openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=model_url, api_key=KEY, max_retries=0)

    async def close() -> None:
        await asyncio.to_thread(get_client().flush)
        await client.close()

    return _openai(client), close, 1


def adapter(model_url: str, sink_url: str, calls: int, tracing: bool) -> Built:
    from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig

    interaction = compile_contract(
        ROOT / "examples" / "greeting.yaml",
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        ["structured_output"],
    ).interaction
    assert interaction is not None
    request = ExecutionRequest(interaction=interaction)
    langfuse = (
        LangfuseConfig(public_key=PK, secret_key=SK, base_url=sink_url, flush_timeout_s=10.0)
        if tracing
        else LangfuseConfig()
    )
    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url=model_url, api_key=KEY, model="bench-model", timeout_s=60), langfuse
    )

    async def call() -> Any:
        return (await runtime.aexecute(request)).output

    return call, runtime.aclose, 1 if tracing else 0


CLIENTS: dict[str, Callable[[str, str, int], Built]] = {
    "async-openai": async_openai,
    "langfuse-async-openai": langfuse_async_openai,
    "adapter-async-untraced": lambda m, s, n: adapter(m, s, n, False),
    "adapter-async-traced": lambda m, s, n: adapter(m, s, n, True),
}


async def _ticker(lags: list[float], stop: asyncio.Event) -> None:
    """Wakes every 5 ms and records how late it woke: the loop's responsiveness."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.005)
        lags.append(time.perf_counter() - started - 0.005)


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def _client_main(
    name: str, model_url: str, sink_url: str, calls: int, rate: float = 0.0
) -> dict[str, Any]:
    call, close, spans_per_call = CLIENTS[name](model_url, sink_url, calls)
    await asyncio.gather(*(call() for _ in range(20)))  # warm-up: imports, first connections
    baseline_mb = _rss_mb()
    peak_mb = baseline_mb
    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(lags, stop))

    async def sampler() -> None:
        nonlocal peak_mb
        while not stop.is_set():
            peak_mb = max(peak_mb, _rss_mb())
            await asyncio.sleep(0.02)

    sampling = asyncio.create_task(sampler())
    cpu_started = time.process_time()
    started = time.perf_counter()
    if rate > 0:
        started_calls = []
        for i in range(calls):
            started_calls.append(asyncio.ensure_future(call()))
            delay = started + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        results = await asyncio.gather(*started_calls, return_exceptions=True)
    else:
        results = await asyncio.gather(*(call() for _ in range(calls)), return_exceptions=True)
    wall = time.perf_counter() - started
    await close()
    cpu = time.process_time() - cpu_started
    stop.set()
    await asyncio.gather(ticker, sampling)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    ordered = sorted(lags) or [0.0]
    return {
        "client": name,
        "wall_s": wall,
        "cpu_us_per_call": cpu * 1e6 / calls,
        "lag_p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1e3,
        "lag_max_ms": ordered[-1] * 1e3,
        "kib_per_call_in_flight": max(peak_mb - baseline_mb, 0.0) * 1024 / calls,
        "errors": errors[:3],
        "error_count": len(errors),
        "expected_spans": (20 + calls) * spans_per_call,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_client(name: str, model: str, sink: str, calls: int, rate: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--client", name, f"{model}/v1", sink, str(calls), str(rate)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        name, model, sink, calls, rate = sys.argv[2:7]
        print(json.dumps(asyncio.run(_client_main(name, model, sink, int(calls), float(rate)))))
        sys.stdout.flush()
        os._exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--rate", type=float, default=0.0, help="calls per second (0: burst)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=ORDER)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in args.only}
    with server("model", "--delay", str(args.delay)) as model, server("sink") as sink:
        for _ in range(args.rounds):
            for name in args.only:
                sink_reset(sink)
                result = run_client(name, model, sink, args.calls, args.rate)
                time.sleep(0.5)  # let the sink count the last export
                result["spans"] = sink_count(sink)
                if result["error_count"]:
                    raise SystemExit(f"{name}: {result['error_count']} errors {result['errors']}")
                rows[name].append(result)
    medians = {
        name: {
            key: statistics.median(r[key] for r in runs)
            for key in runs[0]
            if isinstance(runs[0][key], (int, float))
        }
        for name, runs in rows.items()
    }
    floor = medians.get("async-openai")
    pace = f"at {args.rate:g}/s" if args.rate > 0 else "all at once"
    print(
        f"{args.calls} calls {pace}, {args.delay:g} s upstream, median of {args.rounds}"
        " round(s); ratios to AsyncOpenAI"
    )
    print(
        "| client | wall s | CPU µs/call | loop lag p99 ms | lag max ms | KiB/call in flight "
        "| wall x | CPU x | spans |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, m in medians.items():
        wall_x = m["wall_s"] / floor["wall_s"] if floor else float("nan")
        cpu_x = m["cpu_us_per_call"] / floor["cpu_us_per_call"] if floor else float("nan")
        spans = f"{int(m['spans'])}/{int(m['expected_spans'])}" if m["expected_spans"] else "-"
        print(
            f"| {name} | {m['wall_s']:.2f} | {m['cpu_us_per_call']:.0f} | {m['lag_p99_ms']:.1f} "
            f"| {m['lag_max_ms']:.1f} | {m['kib_per_call_in_flight']:.1f} | {wall_x:.2f} "
            f"| {cpu_x:.2f} | {spans} |"
        )
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "async_lane.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
