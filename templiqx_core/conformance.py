"""A conformance kit hosts run against their own ``RuntimeAdapter``.

Each check raises ``ConformanceError`` (an ``AssertionError``, so pytest reports a test
failure) naming the invariant that broke. ``check_adapter`` runs the port's checks,
``check_streaming_adapter`` the streaming ones, ``check_async_adapter`` those of
``aexecute``/``aexecute_streaming``; each check is also callable on its own, and
``CONFORMANCE_CHECKS`` names them for parametrized tests::

    @pytest.mark.parametrize("check", sorted(CONFORMANCE_CHECKS))
    def test_my_adapter(check):
        run_check(check, MyAdapter(), request, failing_request=bad_request)
"""

from __future__ import annotations

from ._conformance import (
    ASYNC_CHECKS,
    CONFORMANCE_CHECKS,
    STREAMING_CHECKS,
    AssembledToolCall,
    ConformanceError,
    ConformanceReport,
    StreamRun,
    assemble_tool_calls,
    check_adapter,
    check_async_adapter,
    check_async_cancellation,
    check_async_concurrent_use,
    check_async_failure_projection,
    check_async_parity,
    check_cancellation,
    check_concurrent_use,
    check_delta_order,
    check_failure_projection,
    check_midstream_failure,
    check_single_terminal,
    check_sink_exception_propagates,
    check_size_bound,
    check_streaming_adapter,
    check_streaming_parity,
    check_tool_call_assembly,
    receipts_equal,
    run_check,
    run_stream,
    validate_event_order,
)

__all__ = [
    "ASYNC_CHECKS",
    "CONFORMANCE_CHECKS",
    "STREAMING_CHECKS",
    "AssembledToolCall",
    "ConformanceError",
    "ConformanceReport",
    "StreamRun",
    "assemble_tool_calls",
    "check_adapter",
    "check_async_adapter",
    "check_async_cancellation",
    "check_async_concurrent_use",
    "check_async_failure_projection",
    "check_async_parity",
    "check_cancellation",
    "check_concurrent_use",
    "check_delta_order",
    "check_failure_projection",
    "check_midstream_failure",
    "check_single_terminal",
    "check_sink_exception_propagates",
    "check_size_bound",
    "check_streaming_adapter",
    "check_streaming_parity",
    "check_tool_call_assembly",
    "receipts_equal",
    "run_check",
    "run_stream",
    "validate_event_order",
]
