"""What an eval runner needs from the core besides ``templiqx_core`` (``read_contract``)
and ``templiqx_core.adapters`` (``load_document``): eval cases and their checks, and
runtimes by name. The adapter's runner (``templiqx_langfuse.evals``) is built on these
public names alone, as any other runner can be.
"""

from __future__ import annotations

from ._eval_cases import CheckResult, EvalCaseSpec, Observed, check_case, iter_cases, load_cases
from ._runtimes import RuntimeOptions, available_runtimes, load_runtime

__all__ = [
    "CheckResult",
    "EvalCaseSpec",
    "Observed",
    "RuntimeOptions",
    "available_runtimes",
    "check_case",
    "iter_cases",
    "load_cases",
    "load_runtime",
]
