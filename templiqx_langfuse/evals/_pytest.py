"""``assert_eval_passes``: an eval suite as one pytest assertion, offline from cassettes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from templiqx_core import Contract, RuntimeAdapter

from ._report import EvalReport
from ._runner import run_eval

__all__ = ["assert_eval_passes"]


def assert_eval_passes(
    contract: Contract | str | Path,
    *,
    runtime: RuntimeAdapter,
    min_pass_rate: float | None = None,
    **options: Any,
) -> EvalReport:
    """Run the eval and fail the test (an ``AssertionError`` pytest shows in its summary)
    naming every failing case and why, unless it passes the gate."""
    report = run_eval(contract, runtime=runtime, **options)
    if report.gate(min_pass_rate):
        return report
    summary = report.summary
    wanted = "every case" if min_pass_rate is None else f"pass rate >= {min_pass_rate:.1%}"
    lines = [
        f"eval {summary.contract_id}: {summary.passed}/{summary.total} passed "
        f"(pass rate {summary.pass_rate:.1%}; wanted {wanted})"
    ]
    lines += [f"  {case.id}#{case.repeat}: {case.why()}" for case in report.failures()]
    raise AssertionError("\n".join(lines))
