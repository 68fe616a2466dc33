"""Run every client against one loopback model server and one Langfuse OTLP sink.

    python bench/run.py [--calls N] [--threads T] [--only NAME ...]

Servers and clients each get their own process. Prints one table (median and p99 per
call, CPU per call, 8-thread calls/s, each as a ratio to raw httpx, peak RSS, spans
received at the sink) and writes ``bench/results/latest.json``. Exits non-zero, loudly,
when any client errs: a broken client never passes as a fast one.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ORDER = [
    "raw-httpx",
    "openai-sdk",
    "langfuse-openai",
    "instructor",
    "adapter-untraced",
    "adapter-traced",
    "adapter-sink-hanging",
]


@contextmanager
def server(kind: str, *flags: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        process = subprocess.Popen(
            [sys.executable, str(HERE / "servers.py"), kind, str(port_file), *flags]
        )
        try:
            for _ in range(200):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"{kind} server did not start")
            yield f"http://127.0.0.1:{port_file.read_text()}"
        finally:
            process.kill()
            process.wait(10)


def sink_count(sink: str) -> int:
    with urllib.request.urlopen(f"{sink}/count", timeout=5) as response:
        return int(json.load(response)["spans"])


def sink_reset(sink: str) -> None:
    request = urllib.request.Request(f"{sink}/reset", data=b"", method="POST")
    urllib.request.urlopen(request, timeout=5).close()


def run_client(name: str, model: str, sink: str, calls: int, threads: int) -> dict[str, Any]:
    result = subprocess.run(
        [
            sys.executable,
            str(HERE / "clients.py"),
            name,
            f"{model}/v1",
            sink,
            str(calls),
            str(threads),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        return {"client": name, "error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (the machine is shared and noisy)."""
    good = [r for r in runs if "error" not in r]
    if len(good) < len(runs):
        return next(r for r in runs if "error" in r)  # an error is never averaged away
    merged = dict(good[0])
    for part in ("sequential", "threaded"):
        merged[part] = {k: statistics.median(r[part][k] for r in good) for k in good[0][part]}
    for key in ("rss_mb", "close_s", "cpu_us_per_call"):
        merged[key] = statistics.median(r[key] for r in good)
    merged["spans_received"] = min(r["spans_received"] for r in good)
    merged["rounds"] = len(good)
    return merged


def ratios(result: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    """The issue-14 ratios to raw httpx: latency and CPU (lower is better), calls/s."""
    s, f = result["sequential"], floor["sequential"]
    return {
        "p50": s["p50_us"] / f["p50_us"],
        "p99": s["p99_us"] / f["p99_us"],
        "cpu": result["cpu_us_per_call"] / floor["cpu_us_per_call"],
        "calls_per_s": result["threaded"]["calls_per_s"] / floor["threaded"]["calls_per_s"],
    }


def table(results: list[dict[str, Any]]) -> str:
    floor = next((r for r in results if r["client"] == "raw-httpx" and "error" not in r), None)
    lines = [
        f"{'client':22} {'seq p50':>9} {'seq p99':>9} {'CPU/call':>9} {'8thr c/s':>8} "
        f"{'p50 x':>6} {'p99 x':>6} {'CPU x':>6} {'c/s x':>6} {'RSS MB':>7} {'spans':>12}",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"{r['client']:22} ERROR: {r['error']}")
            continue
        s, t = r["sequential"], r["threaded"]
        x = ratios(r, floor) if floor else dict.fromkeys(("p50", "p99", "cpu", "calls_per_s"), 0.0)
        spans = f"{r['spans_received']}/{r['expected_spans']}" if r["expected_spans"] else "-"
        lines.append(
            f"{r['client']:22} {s['p50_us']:8.0f}u {s['p99_us']:8.0f}u "
            f"{r['cpu_us_per_call']:8.0f}u {t['calls_per_s']:8.0f} "
            f"{x['p50']:6.2f} {x['p99']:6.2f} {x['cpu']:6.2f} {x['calls_per_s']:6.2f} "
            f"{r['rss_mb']:7.1f} {spans:>12}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="templiqx-langfuse vs its peers")
    parser.add_argument("--calls", type=int, default=800)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--only", nargs="*", default=ORDER)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds; the table shows each figure's median",
    )
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, Any]]] = {}
    with ExitStack() as stack:
        model = stack.enter_context(server("model"))
        sink = stack.enter_context(server("sink"))
        hanging = stack.enter_context(server("sink", "--hang"))
        for round_no in range(args.rounds):
            for name in [n for n in ORDER if n in args.only]:
                target = hanging if name == "adapter-sink-hanging" else sink
                if target is sink:
                    sink_reset(target)
                result = run_client(name, model, target, args.calls, args.threads)
                if "error" not in result:
                    time.sleep(0.5)  # let the sink finish decoding the last export
                    hung = name == "adapter-sink-hanging"
                    counted = result["expected_spans"] and not hung
                    result["spans_received"] = sink_count(target) if counted else 0
                rounds.setdefault(name, []).append(result)
                print(f"  round {round_no + 1}: ran {name}", file=sys.stderr)
    results = [median_result(runs) for runs in rounds.values()]
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} "
        f"python {platform.python_version()} cores={__import__('os').cpu_count()}"
    )
    print(
        f"calls: {args.calls} sequential, {args.calls} over {args.threads} threads per client; "
        f"median of {args.rounds} interleaved round(s)"
    )
    print(table(results))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2))
    failed = [r["client"] for r in results if "error" in r]
    if failed:
        sys.exit(f"bench FAILED: {', '.join(failed)} errored (see the table)")


if __name__ == "__main__":
    main()
