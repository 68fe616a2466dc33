"""What a process queued reaches Langfuse however the process ends: a fork-started
``multiprocessing`` child (``Process`` and ``Pool``) leaving through ``os._exit``, and a
real SIGTERM sent to a real interpreter (``flush_on_sigterm``: flush within a bound,
then the handler before ours or the default action)."""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator

import pytest

from templiqx_core import ExecutionRequest
from templiqx_langfuse import LangfuseTracedRuntime
from tests.conftest import REPO_ROOT, RuntimeFactory
from tests.loopback import Reply
from tests.otlp_receiver import LoopbackOtlpReceiver, otlp_receiver
from tests.reliability import test_export_losses as losses

_RUNTIME: LangfuseTracedRuntime | None = None  # what forked children inherit
_REQUEST: ExecutionRequest | None = None


def execute_once(_: int = 0) -> bool:
    """Runs in a forked child: one traced execution, nothing flushed by hand."""
    assert _RUNTIME is not None
    assert _REQUEST is not None
    return bool(_RUNTIME.execute(_REQUEST).output_schema_valid)


@pytest.fixture
def receiver() -> Iterator[LoopbackOtlpReceiver]:
    with otlp_receiver("ok") as running:
        yield running


def test_fork_started_process_and_pool_children_flush_before_they_exit(
    receiver: LoopbackOtlpReceiver,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    global _RUNTIME, _REQUEST
    _RUNTIME = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
    _REQUEST = greeting_request
    fork = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
        children = [fork.Process(target=execute_once) for _ in range(5)]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=30)
        pool = fork.Pool(3)
        try:
            assert all(pool.map(execute_once, range(6)))
        finally:
            pool.close()  # workers leave after their last task, through their finalizers
            pool.join()
    assert [child.exitcode for child in children] == [0] * 5
    assert receiver.span_names() == ["greeting"] * 11
    assert len(receiver.scores) == 11


SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
    from tests.loopback import chat_completion, json_reply, serve

    langfuse_url, mode, contract = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "host-handler":
        def host(signum, frame):
            print("host handler ran", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, host)
    if mode == "ignored":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    heard = []
    if mode == "host-survives":  # a graceful shutdown: the process goes on after SIGTERM
        def host(signum, frame):
            heard.append(1)
            print(f"host handler {len(heard)}", flush=True)
            if len(heard) == 2:
                os._exit(0)  # past every exit hook: only what the signal flushed counts
        signal.signal(signal.SIGTERM, host)
    reply = json_reply(chat_completion({"greeting": "Hello Ryan"}))
    with serve(lambda request: reply) as model:
        def build():
            return LangfuseTracedRuntime(
                ModelConfig(base_url=model.base_url, api_key="sk-model-0123", model="m"),
                LangfuseConfig(
                    public_key="pk-lf-0123", secret_key="sk-lf-0123", base_url=langfuse_url,
                    flush_interval_s=60, flush_at=2048,
                    flush_timeout_s=2.0 if "quick" in mode else 5.0,
                    flush_on_sigterm=mode not in ("off", "exit"),
                ),
            )
        runtime = first = build()
        later = mode.endswith("-later") or mode == "host-chains-last"
        if later:  # as a server puts its own handler once the app is built
            chained = signal.getsignal(signal.SIGTERM)  # ours, from the first runtime
            def host(signum, frame):
                print("host handler ran", flush=True)
                if "chains" in mode:  # as libraries do: then the one before
                    chained(signum, frame)
                os._exit(3)  # past every exit hook: only what the signal flushed counts
            signal.signal(signal.SIGTERM, host)
            if mode != "host-chains-last":  # a runtime built after it stands in front
                runtime = build()
        compiled = compile_contract(
            contract,
            RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
            ["structured_output"],
        )
        for _ in range(25):
            runtime.execute(ExecutionRequest(interaction=compiled.interaction))
        if later:
            for _ in range(5):
                first.execute(ExecutionRequest(interaction=compiled.interaction))
        print("ready", flush=True)
        if mode == "host-survives":
            for _ in range(200):  # bounded: 20 s
                if heard:
                    break
                time.sleep(0.1)
            for _ in range(7):
                runtime.execute(ExecutionRequest(interaction=compiled.interaction))
            print("again", flush=True)
        if mode == "exit":
            sys.exit(0)  # no close(): the exit hook flushes
        for _ in range(600):  # bounded: a minute at most
            time.sleep(0.1)
    """
)


@contextlib.contextmanager
def script_ready(receiver: LoopbackOtlpReceiver, mode: str) -> Iterator[subprocess.Popen[str]]:
    """``SCRIPT`` in ``mode`` once it has queued its traces; killed on the way out."""
    contract = str(REPO_ROOT / "reference" / "demo" / "greeting.yaml")
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, receiver.base_url, mode, contract],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    ) as process:
        assert process.stdout is not None
        try:
            assert process.stdout.readline().strip() == "ready"
            yield process
        finally:
            process.kill()


def run_until_sigterm(receiver: LoopbackOtlpReceiver, mode: str) -> tuple[int, str, float]:
    with script_ready(receiver, mode) as process:
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=20)
        took = time.monotonic() - sent
        assert process.stdout is not None
        return code, process.stdout.read(), took


def test_sigterm_flushes_what_is_queued_then_the_signal_ends_the_process(
    receiver: LoopbackOtlpReceiver,
) -> None:
    code, _, took = run_until_sigterm(receiver, "on")
    assert code == -signal.SIGTERM  # the default action, as before: killed by the signal
    assert receiver.span_names() == ["greeting"] * 25
    assert len(receiver.scores) == 25
    assert took < 5.0


def test_sigterm_flush_chains_to_the_hosts_own_handler(receiver: LoopbackOtlpReceiver) -> None:
    code, output, _ = run_until_sigterm(receiver, "host-handler")
    assert code == 3
    assert "host handler ran" in output
    assert receiver.span_names() == ["greeting"] * 25


def test_a_host_handler_that_keeps_running_gets_every_sigterm_flushed(
    receiver: LoopbackOtlpReceiver,
) -> None:
    """A graceful shutdown traces calls after the first SIGTERM: the export path stays
    open, and the next SIGTERM flushes them too."""
    with script_ready(receiver, "host-survives") as process:
        assert process.stdout is not None
        process.send_signal(signal.SIGTERM)
        assert process.stdout.readline().strip() == "host handler 1"
        assert process.stdout.readline().strip() == "again"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    assert receiver.span_names() == ["greeting"] * 32


def test_an_ignored_sigterm_is_flushed_on_before_the_kill_that_follows(
    receiver: LoopbackOtlpReceiver,
) -> None:
    """An orchestrator sends SIGTERM, then SIGKILL after a grace period: a process that
    ignores SIGTERM goes on running, and what it queued is flushed before the kill."""
    with script_ready(receiver, "ignored") as process:
        process.send_signal(signal.SIGTERM)
        for _ in range(100):  # bounded: 10 s
            if len(receiver.span_names()) == 25:
                break
            time.sleep(0.1)
        assert process.poll() is None  # ignored, as before
    assert receiver.span_names() == ["greeting"] * 25


@pytest.mark.parametrize(
    ("mode", "ends"),
    [
        ("host-handler-later", 3),
        ("host-chains-later", -signal.SIGTERM),
        ("host-chains-last", -signal.SIGTERM),
    ],
)
def test_a_handler_put_after_a_runtime_runs_once_after_the_flush(
    receiver: LoopbackOtlpReceiver, mode: str, ends: int
) -> None:
    """A server (uvicorn, gunicorn) puts its own SIGTERM handler once the app, and its
    first runtime, are built; a runtime built after that stands in front of it again.
    A handler that calls the one it replaced (ours) gets the flush done first, then the
    one before ours (the default): also when no runtime came after it."""
    code, output, _ = run_until_sigterm(receiver, mode)
    assert code == ends
    assert output.count("host handler ran") == 1
    assert receiver.span_names() == ["greeting"] * 30


def test_a_host_handler_calling_ours_back_adds_no_second_flush_wait() -> None:
    """The runtime in front flushes every runtime within ``flush_timeout_s`` (2 s here);
    the host handler behind it calling the first runtime's back hands on at once: a
    Langfuse that hangs costs the bound once, not once per handler in the chain."""
    with (
        otlp_receiver("hang", hang_s=30.0) as hanging,
        script_ready(hanging, "host-chains-quick-later") as process,
    ):
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM
        took = time.monotonic() - sent
    assert took < 3.0, f"SIGTERM took {took:.2f} s"


def test_without_opting_in_sigterm_keeps_pythons_default(receiver: LoopbackOtlpReceiver) -> None:
    code, _, _ = run_until_sigterm(receiver, "off")
    assert code == -signal.SIGTERM
    assert receiver.span_names() == []  # what the option is for


def test_exit_without_close_right_after_a_failed_send_still_delivers() -> None:
    """The exit hook's flush retries at once: one 503 at exit loses nothing."""
    contract = str(REPO_ROOT / "reference" / "demo" / "greeting.yaml")
    with losses.receiver(losses.first_only(Reply(status=503))) as server:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, server.base_url, "exit", contract],
            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert server.span_names() == ["greeting"] * 25
        assert [r.path for r in server.requests].count(losses.TRACES) == 2


def test_a_second_sigterm_during_a_stuck_flush_ends_the_process_at_once() -> None:
    """The flush waits up to ``flush_timeout_s`` (5 s here) for a Langfuse that hangs; a
    second SIGTERM means now."""
    with otlp_receiver("hang", hang_s=30.0) as hanging, script_ready(hanging, "on") as process:
        process.send_signal(signal.SIGTERM)
        time.sleep(1.0)  # the flush is under way, stuck on the hanging request
        assert process.poll() is None
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == -signal.SIGTERM
        took = time.monotonic() - sent
    assert took < 2.0, f"the second SIGTERM took {took:.2f} s"
