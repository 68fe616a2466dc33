"""What an eval runner needs besides ``templiqx_core`` and ``templiqx_core.adapters``: eval
cases, their checks, runtimes by name (``templiqx_langfuse.evals`` uses these alone)."""

from ._eval_cases import CheckResult as CheckResult
from ._eval_cases import EvalCaseSpec as EvalCaseSpec
from ._eval_cases import Observed as Observed
from ._eval_cases import check_case as check_case
from ._eval_cases import iter_cases as iter_cases
from ._eval_cases import load_cases as load_cases
from ._runtimes import RuntimeOptions as RuntimeOptions
from ._runtimes import available_runtimes as available_runtimes
from ._runtimes import load_runtime as load_runtime

__all__ = [name for name in dir() if not name.startswith("_")]
