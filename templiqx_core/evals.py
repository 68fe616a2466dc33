"""What an eval runner needs besides ``templiqx_core`` and ``templiqx_core.adapters``: eval
cases, their checks, runtimes by name (``templiqx_langfuse.evals`` uses these alone)."""

from ._eval_cases import CheckResult, EvalCaseSpec, Observed, check_case, iter_cases
from ._repair import MAX_ATTEMPTS as MAX_REPAIR_ATTEMPTS
from ._runtimes import load_runtime

__all__ = [
    "MAX_REPAIR_ATTEMPTS",
    "CheckResult",
    "EvalCaseSpec",
    "Observed",
    "check_case",
    "iter_cases",
    "load_runtime",
]
