"""Evals that run real models: cases checked, scored, gated, and landed in Langfuse as an
experiment; ``assert_eval_passes`` is the pytest helper."""

from __future__ import annotations

from ._experiment import LangfuseExperiment, stable_item_id
from ._report import (
    CaseResult,
    EvalReport,
    Summary,
    baseline_diff,
    junit_xml,
    read_results,
    table,
    write_junit,
)
from ._runner import (
    arun_eval,
    assert_eval_passes,
    contract_cases,
    default_run_name,
    experiment_for,
    in_shard,
    judge_evaluator,
    load_evaluator,
    parse_shard,
    run_eval,
    select_shard,
)

__all__ = [
    "CaseResult",
    "EvalReport",
    "LangfuseExperiment",
    "Summary",
    "arun_eval",
    "assert_eval_passes",
    "baseline_diff",
    "contract_cases",
    "default_run_name",
    "experiment_for",
    "in_shard",
    "judge_evaluator",
    "junit_xml",
    "load_evaluator",
    "parse_shard",
    "read_results",
    "run_eval",
    "select_shard",
    "stable_item_id",
    "table",
    "write_junit",
]
