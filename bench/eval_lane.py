"""The eval lane: ``templiqx eval`` over N cases against a loopback model with a delay.

    python bench/eval_lane.py [--cases 1000] [--delay 0.2] [--concurrency 50] [--traced]

The model (``tests/slow_upstream.py``: asyncio, no thread per call) answers every call
after ``--delay`` seconds; the command runs as a user runs it (the console script, a
subprocess) and writes its JSON results to a file. Reported per case count: wall time
against the ideal (cases / concurrency * delay), the most calls the model saw in flight,
and the command's peak RSS (``wait4``), so memory flatness shows as the same peak for
1/4, 1 and 4 times the cases. ``--traced`` also exports every generation to a loopback
Langfuse (OTLP receiver and public API fake) and lands the run as an experiment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from tests.slow_upstream import slow_upstream  # noqa: E402

CONTRACT = ROOT / "examples" / "greeting.yaml"


def write_cases(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for index in range(count):
            case = {
                "id": f"case-{index:05d}",
                "inputs": {"name": f"Person{index}"},
                "context": {"organization": "Blinqx"},
                "assert": [{"pointer": "/greeting", "matches": f"^Hello Person{index} "}],
            }
            handle.write(json.dumps(case) + "\n")


def run_once(
    count: int, delay: float, concurrency: int, env: dict[str, str], tmp: Path
) -> dict[str, Any]:
    cases, results = tmp / f"cases-{count}.jsonl", tmp / f"results-{count}.json"
    write_cases(cases, count)
    script = Path(sys.executable).with_name("templiqx")
    command = [
        str(script), "eval", str(CONTRACT), "--runtime", "langfuse", "--cases", str(cases),
        "--concurrency", str(concurrency), "--format", "json", "--output", str(results),
        "--no-progress",
    ]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    summary = json.loads(results.read_text())["summary"]
    ideal = count / concurrency * delay
    return {
        "cases": count,
        "exit": process.returncode,
        "passed": summary["passed"],
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "ratio": round(wall / ideal, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "results_mb": round(results.stat().st_size / 1e6, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--traced", action="store_true")
    args = parser.parse_args()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    sizes = [args.cases // 4, args.cases, args.cases * 4]
    rows = []
    with slow_upstream(args.delay) as upstream, tempfile.TemporaryDirectory() as tmp:
        env = {
            **clean,
            "TEMPLIQX_MODEL_BASE_URL": upstream.base_url,
            "TEMPLIQX_MODEL": "loopback-model",
            "TEMPLIQX_MODEL_API_KEY": "sk-bench",
        }
        langfuse = None
        if args.traced:
            from tests.evals.fake_langfuse import PUBLIC_KEY, SECRET_KEY, FakeLangfuse

            langfuse = FakeLangfuse().start()
            env.update(
                LANGFUSE_PUBLIC_KEY=PUBLIC_KEY,
                LANGFUSE_SECRET_KEY=SECRET_KEY,
                LANGFUSE_BASE_URL=langfuse.base_url,
                LANGFUSE_PROJECT_ID="bench",
            )
        try:
            for count in sizes:
                upstream.max_in_flight = 0
                row = run_once(count, args.delay, args.concurrency, env, Path(tmp))
                row["max_in_flight"] = upstream.max_in_flight
                if langfuse is not None:
                    row["experiment_items"] = langfuse.experiment_item_spans()
                    langfuse.reset()
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            if langfuse is not None:
                langfuse.stop()
    worst = next(r for r in rows if r["cases"] == args.cases)
    print(
        f"{args.cases} cases, --concurrency {args.concurrency}, model {args.delay}s: "
        f"{worst['wall_s']} s ({worst['ratio']}x the ideal {worst['ideal_s']} s), "
        f"peak RSS {worst['peak_rss_mb']} MB "
        f"(vs {rows[0]['peak_rss_mb']} MB at {rows[0]['cases']}, "
        f"{rows[-1]['peak_rss_mb']} MB at {rows[-1]['cases']})"
    )
    return 0 if all(r["exit"] == 0 and r["passed"] == r["cases"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
