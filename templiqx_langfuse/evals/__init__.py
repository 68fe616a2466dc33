"""Evals that run real models: cases checked, scored, gated, and landed in Langfuse as an
experiment; ``assert_eval_passes`` is the pytest helper."""

from __future__ import annotations

from ._report import (
    CaseResult,
    EvalReport,
    Summary,
    baseline_diff,
    read_results,
    table,
    write_junit,
)
from ._runner import arun_eval, assert_eval_passes, judge_evaluator, run_eval, stable_item_id

__all__ = [
    "CaseResult",
    "EvalReport",
    "Summary",
    "arun_eval",
    "assert_eval_passes",
    "baseline_diff",
    "judge_evaluator",
    "read_results",
    "run_eval",
    "stable_item_id",
    "table",
    "write_junit",
]
