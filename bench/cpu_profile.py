"""CPU profile of traced calls, every thread: ``python bench/cpu_profile.py [--calls N] [--top K]``.

Starts the bench's loopback model server and healthy Langfuse sink in their own
processes, runs N traced ``execute`` calls in this process under yappi (CPU clock, all
threads, the exporter's included), and prints the top entries by own time and the CPU
time per call. Needs the ``bench`` extra (yappi).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from clients import CLIENTS  # noqa: E402
from run import server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--client", default="adapter-traced")
    args = parser.parse_args()
    import yappi

    with server("model") as model, server("sink") as sink:
        call, close, _ = CLIENTS[args.client](f"{model}/v1", sink)
        for _ in range(200):
            call()
        yappi.set_clock_type("cpu")
        yappi.start(builtins=True, profile_threads=True)
        cpu = time.process_time()
        for _ in range(args.calls):
            call()
        close()
        cpu = time.process_time() - cpu
        yappi.stop()
    stats = yappi.get_func_stats()
    stats.sort("tsub", "desc")
    print(f"{args.client}: {cpu / args.calls * 1e6:.0f} us CPU per call (profiled)")
    print(f"{'own s':>8} {'total s':>8} {'calls':>8}  function")
    for entry in list(stats)[: args.top]:
        where = f"{Path(entry.module).name}:{entry.lineno} {entry.name}"
        print(f"{entry.tsub:8.3f} {entry.ttot:8.3f} {entry.ncall:8d}  {where}")


if __name__ == "__main__":
    main()
