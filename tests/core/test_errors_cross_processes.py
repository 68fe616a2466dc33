"""Errors cross process boundaries intact: a ``multiprocessing`` worker's failure reaches
the parent as the same typed error (an error that cannot be unpickled hangs ``Pool.map``)."""

from __future__ import annotations

import copy
import multiprocessing
import pickle

import pytest

from templiqx_core import (
    InvalidData,
    NotFound,
    PortError,
    RuntimeClosed,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
)
from templiqx_core._canonical import NotJson
from templiqx_langfuse.testing.cassettes import CassetteMiss

FAILURE = RuntimeFailure(
    code=RuntimeFailureCode.UNAVAILABLE,
    adapter_id="templiqx.test",
    adapter_version="0.1.0",
    detail="model gateway returned HTTP 503",
)
ERRORS = [
    RuntimeFailureError(FAILURE),
    NotJson("NaN", "/a/0"),
    CassetteMiss("no recorded answer"),
    InvalidData("bad"),
    NotFound("gone"),
    RuntimeClosed("closed"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_port_error_survives_pickling_and_copying(error: PortError) -> None:
    for again in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
        assert type(again) is type(error)
        assert again.code == error.code
        assert str(again) == str(error)
        assert vars(again) == vars(error)


def _fail(_: int) -> None:
    raise RuntimeFailureError(FAILURE)


def test_a_pool_workers_runtime_failure_reaches_the_parent() -> None:
    with multiprocessing.get_context("fork").Pool(1) as pool:
        result = pool.map_async(_fail, [0])
        with pytest.raises(RuntimeFailureError) as raised:
            result.get(timeout=30)
    assert raised.value.failure == FAILURE
    assert raised.value.retryable
