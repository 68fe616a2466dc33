"""What a process queued reaches Langfuse however the process ends: a fork-started
``multiprocessing`` child (``Process`` and ``Pool``) leaving through ``os._exit``, and a
real SIGTERM sent to a real interpreter."""

from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from templiqx_core import ExecutionRequest
from templiqx_langfuse import LangfuseTracedRuntime
from templiqx_langfuse import _sigterm as sigterm
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
    import os, signal, socket, sys, threading, time
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
    if mode == "asyncio-handler":  # registered first: asyncio holds the wakeup fd
        import asyncio
        loop = asyncio.new_event_loop()
        def on_sigterm():
            heard.append(1)
            print(f"asyncio callback {len(heard)}", flush=True)
            loop.call_later(0.5, loop.stop)
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    if mode in ("host-wakeup-fd", "host-wakeup-fd-chains-later"):  # as asyncio's does
        _, host_end = socket.socketpair()
        host_end.setblocking(False)
        signal.set_wakeup_fd(host_end.fileno())
    reply = json_reply(chat_completion({"greeting": "Hello Ryan"}))
    with serve(lambda request: reply) as model:
        def build():
            return LangfuseTracedRuntime(
                ModelConfig(base_url=model.base_url, api_key="sk-model-0123", model="m"),
                LangfuseConfig(
                    public_key="pk-lf-0123", secret_key="sk-lf-0123", base_url=langfuse_url,
                    flush_interval_s=60, flush_at=2048,
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
        if mode == "host-wakeup-fd":
            if signal.set_wakeup_fd(host_end.fileno()) != host_end.fileno():
                sys.exit(5)  # taken from the host
        if mode == "main-waits-in-c-forked":  # as a Pool worker: after asyncio is loaded
            import asyncio, os
            child = os.fork()
            if child:
                print(os.waitpid(child, 0)[1], flush=True)
                sys.exit(0)
            mode = "main-waits-in-c"
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
        if mode == "asyncio-handler":
            loop.run_until_complete(asyncio.sleep(0))
            loop.run_forever()  # until the callback stops it
            loop.close()  # puts SIGTERM back to its default
            time.sleep(1)  # a signal sent again after the flush would end us here
            print("exited normally", flush=True)
            sys.exit(0)
        if mode == "exit":
            sys.exit(0)  # no close(): the exit hook flushes
        if mode == "main-waits-in-c":
            # The signal lands on another thread while the main thread waits in C for a
            # lock: the handler stays pending, as when a signal arrives just as a Pool
            # worker starts waiting for its next task.
            def signal_me():
                time.sleep(0.5)
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            threading.Thread(target=signal_me).start()
            held = threading.Lock()
            held.acquire()
            held.acquire(timeout=60)
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


@pytest.mark.parametrize("mode", ["on", "host-wakeup-fd"])
def test_sigterm_flushes_what_is_queued_then_the_signal_ends_the_process(
    receiver: LoopbackOtlpReceiver, mode: str
) -> None:
    """Also when the host holds the wakeup fd: it keeps it, the handler wakes the flush."""
    code, _, took = run_until_sigterm(receiver, mode)
    assert code == -signal.SIGTERM  # the default action, as before: killed by the signal
    assert receiver.span_names() == ["greeting"] * 25
    assert len(receiver.scores) == 25
    assert took < 5.0


def test_sigterm_flush_chains_to_the_hosts_own_handler(receiver: LoopbackOtlpReceiver) -> None:
    code, output, _ = run_until_sigterm(receiver, "host-handler")
    assert code == 3
    assert "host handler ran" in output
    assert receiver.span_names() == ["greeting"] * 25


@pytest.mark.parametrize("forked", [False, True], ids=["process", "forked-child"])
def test_sigterm_flushes_even_when_the_main_thread_never_runs_its_handler(
    receiver: LoopbackOtlpReceiver, forked: bool
) -> None:
    """CPython runs a handler only once the main thread runs bytecode; one waiting in C
    never does (about 1 Pool.terminate in 100 hung so, with any Python handler). Also in
    a forked child, whose wakeup fd asyncio's own fork hook clears (3.12+)."""
    contract = str(REPO_ROOT / "reference" / "demo" / "greeting.yaml")
    mode = "main-waits-in-c-forked" if forked else "main-waits-in-c"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, receiver.base_url, mode, contract],
        capture_output=True, text=True, timeout=30, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    if forked:  # the parent reports its child's wait status
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.splitlines() == ["ready", str(signal.SIGTERM)]
    else:
        assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert time.monotonic() - started < 20  # not the main thread's 60 s wait
    assert receiver.span_names() == ["greeting"] * 25


def test_an_asyncio_signal_handler_hears_sigterm_once_and_the_flush_still_happens(
    receiver: LoopbackOtlpReceiver,
) -> None:
    """asyncio hears a signal through the wakeup fd, not the handler: signalling again
    after the flush would call its callback twice, or kill a process shutting down."""
    code, output, _ = run_until_sigterm(receiver, "asyncio-handler")
    assert code == 0
    assert output.splitlines() == ["asyncio callback 1", "exited normally"]
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
        ("host-wakeup-fd-chains-later", -signal.SIGTERM),
        ("host-chains-last", -signal.SIGTERM),
    ],
)
def test_a_handler_put_after_a_runtime_runs_once_after_the_flush(
    receiver: LoopbackOtlpReceiver, mode: str, ends: int
) -> None:
    """A server (uvicorn, gunicorn) puts its own SIGTERM handler once the app, and its
    first runtime, are built; a runtime built after that stands in front of it again.
    A handler that calls the one it replaced (ours) gets the flush done first, then the
    one before ours (the default): also when the host holds the wakeup fd, and when no
    runtime came after it."""
    code, output, _ = run_until_sigterm(receiver, mode)
    assert code == ends
    assert output.count("host handler ran") == 1
    assert receiver.span_names() == ["greeting"] * 30


def test_without_opting_in_sigterm_keeps_pythons_default(receiver: LoopbackOtlpReceiver) -> None:
    code, _, _ = run_until_sigterm(receiver, "off")
    assert code == -signal.SIGTERM
    assert receiver.span_names() == []  # what the option is for


POOL_SCRIPT = textwrap.dedent(
    """
    import faulthandler, json, multiprocessing, os, sys, threading
    from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
    from tests.loopback import chat_completion, json_reply, serve

    RUNTIME = REQUEST = None

    def one(_):
        return RUNTIME.execute(REQUEST).output_schema_valid

    if __name__ == "__main__":
        langfuse_url, contract = sys.argv[1], sys.argv[2]
        reply = json_reply(chat_completion({"greeting": "Hello Ryan"}))
        with serve(lambda request: reply) as model:
            RUNTIME = LangfuseTracedRuntime(
                ModelConfig(base_url=model.base_url, api_key="sk-model-0123", model="m"),
                LangfuseConfig(
                    public_key="pk-lf-0123", secret_key="sk-lf-0123", base_url=langfuse_url,
                    flush_interval_s=30, flush_on_sigterm=True,
                ),
            )
            compiled = compile_contract(
                contract,
                RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
                ["structured_output"],
            )
            REQUEST = ExecutionRequest(interaction=compiled.interaction)
            pool = multiprocessing.get_context("fork").Pool(2)
            ok = all(pool.map(one, range(6)))
            # What `with Pool()` does on the way out. CPython's terminate() can itself hang
            # when it races its own task handler (python/cpython#96995): bounded here, and
            # the stacks are printed if it does, so a hang is told apart from ours.
            stopping = threading.Thread(target=pool.terminate, daemon=True)
            stopping.start()
            stopping.join(30)
            if stopping.is_alive():
                faulthandler.dump_traceback(all_threads=True)
            RUNTIME.close()
            print(json.dumps({"ok": ok, "terminated": not stopping.is_alive()}), flush=True)
            os._exit(0)  # a hung terminate() leaves threads that would block a normal exit
    """
)


def test_pool_workers_stopped_by_terminate_flush_with_flush_on_sigterm(
    receiver: LoopbackOtlpReceiver, tmp_path: Path
) -> None:
    script = tmp_path / "pool_job.py"  # a file: Pool pickles its task by module and name
    script.write_text(POOL_SCRIPT, "utf-8")
    contract = str(REPO_ROOT / "reference" / "demo" / "greeting.yaml")
    done = subprocess.run(
        [sys.executable, str(script), receiver.base_url, contract],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["ok"] is True
    assert receiver.span_names() == ["greeting"] * 6  # without the option: 0 of 6


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


def _threads_taking_sigterm() -> list[str]:
    """Names of this process's threads, other than the main one, that do not block SIGTERM
    (Linux: each thread's mask is in /proc)."""
    import threading

    taking = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.native_id is None:
            continue
        status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
        blocked = int(
            next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16
        )
        if not blocked & (1 << (signal.SIGTERM - 1)):
            taking.append(thread.name)
    return taking


def _export_threads_taking_sigterm() -> list[str]:
    """The export's threads (OTel's processor, ours named ``templiqx-langfuse-*``); not
    threads an earlier test left, such as a conformance check's that a hung adapter holds."""
    return [
        name
        for name in _threads_taking_sigterm()
        if "Otel" in name or name.startswith("templiqx-langfuse")
    ]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread masks read from /proc")
def test_export_threads_leave_sigterm_to_the_main_thread_also_in_forked_children(
    receiver: LoopbackOtlpReceiver, make_runtime: RuntimeFactory
) -> None:
    """A signal that lands on a background thread waits for the main thread to run Python
    again; a Pool worker waiting for its next task never does, and hung (1 run in 10)."""
    runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
    assert _export_threads_taking_sigterm() == []
    fork = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
        with fork.Pool(1) as pool:
            assert pool.apply(_export_threads_taking_sigterm) == []
    runtime.close()


def _masks_set_in_a_forked_child() -> int:
    """How many times a forked child's fork hooks set the signal mask."""
    calls = []
    real = signal.pthread_sigmask

    def counted(how: int, mask: Iterable[int]) -> set[signal.Signals]:
        calls.append(how)
        return real(how, mask)

    read, write = os.pipe()
    signal.pthread_sigmask = counted  # type: ignore[assignment]
    try:
        child = os.fork()
        if child == 0:
            os.write(write, str(len(calls)).encode())
            os._exit(0)
    finally:
        signal.pthread_sigmask = real
    os.waitpid(child, 0)
    os.close(write)
    with os.fdopen(read) as result:
        return int(result.read())


def test_a_closed_runtime_leaves_forks_no_work(make_runtime: RuntimeFactory) -> None:
    """Fork hooks cannot be unregistered: those of a runtime that is gone must do
    nothing, or a host building a runtime per request makes every fork slower."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
        gc.collect()
        before = _masks_set_in_a_forked_child()  # a runtime another test keeps counts too
        runtime = make_runtime(span_exporter=None)
        # Its export thread restarts with the stop signals blocked, then lifted.
        assert _masks_set_in_a_forked_child() >= before + 2
        for _ in range(10):
            make_runtime(span_exporter=None).close()
        runtime.close()
        del runtime
        gc.collect()
        assert _masks_set_in_a_forked_child() == before


_COLLECT_IN_CHILD = False  # the fork hook below collects only while a test asks it to


def _collect_if_asked() -> None:
    if _COLLECT_IN_CHILD:
        gc.collect()


def test_a_forked_child_takes_stop_signals_even_if_the_owner_dies_during_its_fork_hooks() -> None:
    """The export thread's owner is collected between the fork hook that blocks the stop
    signals and the one that restores them (a collection inside the OTel processor's own
    hook): the child's main thread must still take SIGTERM, or ``Pool.terminate()`` hangs."""
    global _COLLECT_IN_CHILD

    class Owner:
        pass

    owner = Owner()
    owner.cycle = owner  # type: ignore[attr-defined]  # collected only by the collector
    with sigterm.stop_signals_blocked(after_fork_while=owner):
        os.register_at_fork(after_in_child=_collect_if_asked)
    del owner
    read, write = os.pipe()
    _COLLECT_IN_CHILD = True
    gc.disable()  # the owner must still be there when the child forks
    try:
        child = os.fork()
        if child == 0:
            blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            os.write(write, b"blocked" if blocked else b"open")
            os._exit(0)
    finally:
        _COLLECT_IN_CHILD = False
        gc.enable()
    os.waitpid(child, 0)
    os.close(write)
    with os.fdopen(read) as result:
        assert result.read() == "open"


HOOK_ORDER_SCRIPT = textwrap.dedent(
    """
    import os, signal
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig

    def build():
        return LangfuseTracedRuntime(
            ModelConfig(base_url="http://127.0.0.1:9/v1", api_key="sk-model-0123", model="m"),
            LangfuseConfig(public_key="pk-lf-0123", secret_key="sk-lf-0123",
                           base_url="http://127.0.0.1:9", flush_on_sigterm=True),
        )

    def blocked():
        return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])

    first, seen = build(), []
    os.register_at_fork(after_in_child=lambda: seen.append(blocked()))
    second = build()  # its export thread restarts in a child's hooks after the one above
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write, f"{seen[0]} {blocked()}".encode())
        os._exit(0)
    os.waitpid(child, 0)
    print(os.read(read, 100).decode())
    """
)


def test_a_forked_child_takes_sigterm_only_once_every_export_thread_has_restarted() -> None:
    """A signal taken while a later runtime's fork hook restarts its export thread would
    flush that runtime half-way (a traceback from the flush, in one Pool worker of 60)."""
    done = subprocess.run(
        [sys.executable, "-c", HOOK_ORDER_SCRIPT],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]  # blocked during the hooks, not after


def _sigterm_blocked() -> bool:
    return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _in_a_forked_child(answer: Callable[[], bool]) -> bool:
    """``answer()`` as a forked child gives it, once every fork hook has run."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
        child = os.fork()
    if child == 0:
        os.write(write, b"1" if answer() else b"0")
        os._exit(0)
    os.waitpid(child, 0)
    os.close(write)
    with os.fdopen(read) as result:
        return result.read() == "1"


def test_threads_starting_export_threads_at_once_leave_a_forked_child_signals() -> None:
    """Two runtimes built on two threads at once register their fork hooks interleaved;
    a forked child runs them all on one thread and must end with the stop signals open."""

    class Owner:
        pass

    owners = [Owner(), Owner()]
    inside, leave = threading.Event(), threading.Event()

    def first() -> None:
        with sigterm.stop_signals_blocked(after_fork_while=owners[0]):
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    with sigterm.stop_signals_blocked(after_fork_while=owners[1]):
        pass  # block A, block B, lift B, lift A: in that order in the child
    leave.set()
    thread.join(10)
    assert not _in_a_forked_child(_sigterm_blocked)


FORK_FAULTS_SCRIPT = textwrap.dedent(
    """
    import os, resource, signal, sys, threading
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
    from templiqx_langfuse import _sigterm

    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url="http://127.0.0.1:9/v1", api_key="sk-model-0123", model="m"),
        LangfuseConfig(public_key="pk-lf-0123", secret_key="sk-lf-0123",
                       base_url="http://127.0.0.1:9", flush_on_sigterm=True),
    )

    def blocked():
        return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])

    if sys.argv[1] == "two-threads-fork":  # their before/after hooks interleave
        step, done, seen = threading.Event(), threading.Event(), []
        def other():
            _sigterm._before_fork()
            step.set()
            done.wait(10)
            _sigterm._after_fork_in_parent()
            seen.append(blocked())
        thread = threading.Thread(target=other)
        thread.start()
        step.wait(10)
        _sigterm._before_fork()
        done.set()
        thread.join(10)
        _sigterm._after_fork_in_parent()
        print(seen[0], blocked())
    else:  # out of file descriptors: the child gets no flusher, and its signals
        read, write = os.pipe()
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")), 4096))
        child = os.fork()
        if child == 0:
            os.write(write, str(blocked()).encode())
            os._exit(0)
        os.waitpid(child, 0)
        print(os.read(read, 10).decode())
    """
)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="open fds counted in /proc")
@pytest.mark.parametrize(
    ("fault", "expected"), [("two-threads-fork", "False False"), ("no-fds-in-child", "False")]
)
def test_no_fork_fault_leaves_the_stop_signals_blocked(fault: str, expected: str) -> None:
    """Two threads forking at once each get their own mask back; a child whose flusher
    cannot be made (out of file descriptors) still takes SIGTERM. Either left blocked,
    SIGTERM and Ctrl-C stay pending there for good."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_FAULTS_SCRIPT, fault],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_a_fork_while_another_thread_starts_an_export_thread_leaves_the_child_open() -> None:
    """The child inherits the hook that blocks the stop signals but not yet the one that
    lifts them: the last of our hooks lifts it."""

    class Owner:
        pass

    owner, inside, leave = Owner(), threading.Event(), threading.Event()

    def build() -> None:
        with sigterm.stop_signals_blocked(after_fork_while=owner):
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=build)
    thread.start()
    try:
        assert inside.wait(10)
        assert not _in_a_forked_child(_sigterm_blocked)
    finally:
        leave.set()
        thread.join(10)


def test_a_collected_runtimes_lifting_hook_lifts_no_other_runtimes_block() -> None:
    """Built at once, A's hooks and B's interleave; A is gone by the fork, so its block is
    skipped, and its lift must not undo B's while B's export thread restarts."""

    class Owner:
        pass

    owners = {"a": Owner(), "b": Owner()}
    seen: list[bool] = []
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()

    def build_a() -> None:
        with sigterm.stop_signals_blocked(after_fork_while=owners["a"]):
            a_inside.set()
            assert b_inside.wait(10)
        a_left.set()

    def probe() -> None:  # where B's export thread restarts in the child
        seen.append(_sigterm_blocked())

    thread = threading.Thread(target=build_a)
    thread.start()
    assert a_inside.wait(10)
    with sigterm.stop_signals_blocked(after_fork_while=owners["b"]):
        b_inside.set()
        assert a_left.wait(10)
        os.register_at_fork(after_in_child=probe)
    thread.join(10)
    del owners["a"]
    gc.collect()
    assert _in_a_forked_child(lambda: seen[-1])
