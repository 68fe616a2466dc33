"""The tracing layer's part in experiments: attributes and usage of the calls of a case."""

from __future__ import annotations

from typing import Any

from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest
from templiqx_langfuse._tracing import collect_traces, collect_usage, experiment_attributes
from tests.conftest import RuntimeFactory

EXPERIMENT = {A.EXPERIMENT_ID: "exp-1", A.EXPERIMENT_NAME: "nightly", A.EXPERIMENT_ITEM_ID: "i"}


def _attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_calls_in_the_block_carry_the_experiment_and_name_themselves_its_root(
    make_runtime: RuntimeFactory, exporter: InMemorySpanExporter, greeting_request: ExecutionRequest
) -> None:
    runtime = make_runtime()
    with experiment_attributes(EXPERIMENT), collect_traces() as refs:
        runtime.execute(greeting_request)
    runtime.execute(greeting_request)  # outside: no experiment
    runtime.close()
    inside, outside = exporter.get_finished_spans()
    assert _attributes(inside)[A.EXPERIMENT_ID] == "exp-1"
    own_id = f"{inside.context.span_id:016x}"
    assert _attributes(inside)[A.EXPERIMENT_ITEM_ROOT_OBSERVATION_ID] == own_id
    assert refs[0].observation_id == own_id
    assert not any(key.startswith("langfuse.experiment") for key in _attributes(outside))


def test_usage_is_collected_for_each_successful_call_traced_or_not(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    for runtime in (make_runtime(), make_runtime(tracing=False)):
        with collect_usage() as used:
            runtime.execute(greeting_request)
        assert used == [{"input": 20, "output": 7, "total": 27}]
