"""Count what each way of writing the triage service takes, and check this package's is shorter.

    python examples/triage/count_lines.py

Non-blank lines that are not ``#`` comments, of every Python and YAML file each way is
written in (service, tests, contract YAML if any); recorded cassettes are not written by
hand and are left out. The suite runs this (``tests/testing/test_triage_example.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
WAYS = ("templiqx_way", "conventional")


def count(path: Path) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def written(way: str) -> list[Path]:
    files = [
        *(HERE / way).rglob("*.py"),
        *(HERE / way).rglob("*.yaml"),
        *(HERE / way).rglob("*.yml"),
    ]
    return sorted(path for path in files if "cassettes" not in path.relative_to(HERE).parts)


def main() -> int:
    totals = {}
    for way in WAYS:
        for path in written(way):
            print(f"{count(path):5d}  {path.relative_to(HERE)}")
        totals[way] = sum(count(path) for path in written(way))
        print(f"{totals[way]:5d}  {way} in all\n")
    shape_twice = [p for p in written("templiqx_way") if "output_schema" in p.read_text("utf-8")]
    if shape_twice:
        print(f"the output shape is written again in {shape_twice}", file=sys.stderr)
        return 1
    if totals["templiqx_way"] >= totals["conventional"]:
        print("this package's way is not shorter", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
