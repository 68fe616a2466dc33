"""CLI start-up time, hyperfine-style: each command run N times, best and median wall time.

    flock /tmp/tqx-heavy.lock .venv/bin/python bench/cli_startup.py [--runs 20]

Budgets: every command that runs no model (``--help``, ``fingerprint``, ``runtimes``,
``check``, ``compile``) <= 300 ms; the README's main job (``execute ... --runtime langfuse
--replay ...``) <= 600 ms, judged on the best wall time (the machine is shared; the median
and the CPU time are printed too). A command that exits non-zero fails the run loudly.
Python byte-compiles the package on a normal install; where ``PYTHONDONTWRITEBYTECODE``
is set (this sandbox), run ``python -m compileall -q templiqx_core templiqx_langfuse``
first or every run also pays for compiling the sources. Measure in the virtualenv of the
README's first command (``pip install -e ".[testing]"``): the ``dev`` extra adds aiohttp,
which vcrpy imports (about 130 ms) to patch it on every ``--replay``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLIQX = str(Path(sys.executable).with_name("templiqx"))
GREETING = [
    "examples/greeting.yaml",
    "--inputs",
    "examples/greeting.inputs.json",
    "--context",
    "examples/greeting.context.json",
]
COMMANDS: list[tuple[str, list[str], float]] = [
    ("--help", ["--help"], 0.300),
    ("fingerprint", ["fingerprint", "reference/crm3/evals/bli-61-output.json"], 0.300),
    ("runtimes", ["runtimes"], 0.300),
    ("check", ["check", "examples/greeting.yaml"], 0.300),
    ("compile", ["compile", *GREETING], 0.300),
    (
        "execute langfuse --replay (README)",
        [
            "execute",
            *GREETING,
            "--runtime",
            "langfuse",
            "--replay",
            "cassettes/greeting-success.yaml",
            "--stream",
        ],
        0.600,
    ),
]


def clean_env() -> dict[str, str]:
    prefixes = ("LANGFUSE_", "TEMPLIQX_", "OPENAI_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(args: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user+sys) seconds per run; CPU is what a busy machine distorts least."""
    env = clean_env()
    walls, cpus = [], []
    for _ in range(runs + 1):  # the first run warms the page cache and is dropped
        cpu, start = _child_cpu(), time.perf_counter()
        result = subprocess.run(
            [TEMPLIQX, *args], cwd=ROOT, env=env, capture_output=True, check=False, timeout=60
        )
        walls.append(time.perf_counter() - start)
        cpus.append(_child_cpu() - cpu)
        if result.returncode != 0:
            raise SystemExit(f"templiqx {' '.join(args)} exited {result.returncode}")
    return walls[1:], cpus[1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    print(f"load average: {os.getloadavg()[0]:.2f} (2-core machine); N={runs} runs per command")
    print("| command | wall best ms | wall median ms | CPU median ms | budget ms | |")
    print("|---|---:|---:|---:|---:|---|")
    over = 0
    for name, args, budget in COMMANDS:
        walls, cpus = measure(args, runs)
        best, median, cpu = min(walls), statistics.median(walls), statistics.median(cpus)
        verdict = "ok" if best <= budget else "OVER"
        over += verdict == "OVER"
        print(
            f"| {name} | {best * 1000:.0f} | {median * 1000:.0f} | {cpu * 1000:.0f} "
            f"| {budget * 1000:.0f} | {verdict} |"
        )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
