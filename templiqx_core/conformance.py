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

from ._conformance import *  # noqa: F403 (exactly the names of its __all__)
from ._conformance import __all__ as __all__
