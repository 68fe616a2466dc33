"""``flush_on_sigterm``: flush on SIGTERM (how containers and process managers stop a
process), then let the signal do what it would have done.

Python runs a handler on the main thread, and only once that thread runs bytecode again.
A signal that arrives just as that thread starts waiting in C (a ``Pool`` worker taking
its next task) leaves the handler pending for good: any Python SIGTERM handler makes
about one ``Pool.terminate()`` in a hundred hang that way. So the flush does not wait for
the handler: a flusher thread also wakes on the signal itself, through the wakeup fd
(when no one else holds it), and once done signals the main thread again until the
handler has run and handed the signal on. Threads started here and by the OTel processor
block SIGTERM/SIGINT, so a process-directed signal goes to the main thread.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Protocol

__all__ = ["flush_on_sigterm", "forget", "stop_signals_blocked"]

logger = logging.getLogger("templiqx_langfuse")

_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_HANDLER_WAKE = b"\xff"  # what the handler writes: no signal has this number
_HAND_ON_TRIES = 20  # signal the main thread again every 0.5 s, for 10 s at most
_WAIT_FOR_FLUSH_S = 60.0


class _Flushable(Protocol):
    def flush(self) -> None: ...
    def _begin_close(self) -> None: ...
    def _end_close(self) -> None: ...


_LIVE: weakref.WeakSet[_Flushable] = weakref.WeakSet()
#: The handlers ours was installed in front of, oldest first: a host's handler put between
#: two runtimes is the last, and may itself call ours (its own previous) when it is done.
_previous: list[Any] = []
#: Those ours is calling now: the frame it passed and the index of the handler called.
_handing_on: list[tuple[FrameType | None, int]] = []
_wake: tuple[int, int] | None = None  # the flusher's pipe (read, write)
_owns_wakeup_fd = False  # its write end is the wakeup fd: the signal itself wakes it
_flushing = False  # the flusher has been woken
_flushed = False  # done: the next SIGTERM goes where it would have gone
_flushes = 0  # how many flushes the flusher has finished
_handed_on = False  # the handler has run after the flush
_hook_numbers = itertools.count(1)
_child_hooks = 0  # the last of our after-fork hooks registered: it lifts the fork's block
_child_blocks = 0  # in a forked child: export-thread blocks not yet lifted
_child_mask: set[int | signal.Signals] | None = None  # the child's mask before them
_saved_masks = threading.local()  # each thread's mask while it starts threads (or forks)


def flush_on_sigterm(pipeline: _Flushable) -> None:
    """Flush ``pipeline`` (held weakly) on SIGTERM; installs the handler once per process
    (only the main thread may)."""
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is not _on_sigterm:  # first, or again after a host put its own
            signal.signal(signal.SIGTERM, _on_sigterm)
            if not any(current is known for known in _previous):
                _previous.append(current)
            _register_fork_hooks()
            if _wake is None:
                _start_flusher(inherited=None)
            else:  # the flusher stays: whether the signal itself wakes it may have changed
                _claim_wakeup_fd(_wake[1], inherited=None)
    except ValueError:  # not the main thread (or not the main interpreter)
        logger.warning(
            "Langfuse flush_on_sigterm needs the runtime built on the main thread; "
            "SIGTERM will not flush"
        )
        return
    _LIVE.add(pipeline)


def forget(pipeline: _Flushable) -> None:
    """``pipeline`` is closed: nothing of it to flush."""
    _LIVE.discard(pipeline)


def _start_flusher(*, inherited: int | None) -> None:
    """A new pipe (made the wakeup fd unless another one is set: asyncio's, a host's),
    and a daemon flusher reading it, started with the stop signals blocked."""
    global _wake
    read, write = os.pipe()
    os.set_blocking(write, False)
    _claim_wakeup_fd(write, inherited=inherited)
    _wake = (read, write)
    flusher = threading.Thread(
        target=_flush_when_told, args=(read,), name="templiqx-langfuse-sigterm", daemon=True
    )
    with stop_signals_blocked():
        flusher.start()


def _claim_wakeup_fd(write: int, *, inherited: int | None) -> None:
    """Make ``write`` the wakeup fd unless another one (not ours) is set."""
    global _owns_wakeup_fd
    previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _owns_wakeup_fd = previous_fd in (-1, write, inherited)
    if not _owns_wakeup_fd:
        signal.set_wakeup_fd(previous_fd)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Wake the flusher and return at once; after the flush (the flusher signals again),
    do what the previous handler would have: call it, ignore the signal, or die of it.

    It interrupts arbitrary code, so it takes no lock (an ``os.write`` to a pipe wakes
    the flusher) and waits for nothing, except when a handler put after ours calls it
    as its own previous one: then the flush is done before the one before ours runs.
    """
    global _flushing, _handed_on
    chained = _handing_on[-1][1] if _handing_on and frame is _handing_on[-1][0] else None
    if chained is None and signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        chained = len(_previous)  # a handler installed after our last runtime calls us
    if not _flushed and _LIVE and _wake is not None:
        if _flushing and chained is None:  # a second SIGTERM meanwhile: under way
            return
        if not _flushing:
            _flushing = True
            with contextlib.suppress(OSError):
                os.write(_wake[1], _HANDLER_WAKE)
        if chained is not None:
            _wait_for_flush(_flushes)
        elif _owns_wakeup_fd or not callable(_last_previous()):
            return
        # The wakeup fd's owner (asyncio's signal handlers) has heard this signal already,
        # through it: hand it on now, during the flush, since signalling again after the
        # flush would reach it twice.
    _handed_on = True
    index = len(_previous) - 1 if chained is None else chained - 1
    previous = _previous[index] if index >= 0 else signal.SIG_DFL
    if callable(previous):
        _handing_on.append((frame, index))  # it may call ours back with this frame
        try:
            previous(signum, frame)
        finally:
            _handing_on.pop()
    elif previous != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as before: the signal ends us
        os.kill(os.getpid(), signal.SIGTERM)


def _wait_for_flush(done_before: int) -> None:
    """Until the flush under way is done. Bounded: each pipeline's flush has its own
    deadline; this is the backstop."""
    deadline = time.monotonic() + _WAIT_FOR_FLUSH_S
    while _flushes == done_before and time.monotonic() < deadline:
        time.sleep(0.01)


def _last_previous() -> Any:
    return _previous[-1] if _previous else None


def _told(data: bytes) -> bool:
    if _HANDLER_WAKE in data:
        return True
    # The signal itself (written by CPython's C handler): ours only while our handler is
    # the one installed; a host's own handler may mean to do something else.
    return (
        _owns_wakeup_fd
        and bytes([signal.SIGTERM]) in data
        and signal.getsignal(signal.SIGTERM) is _on_sigterm
    )


def _flush_when_told(read: int) -> None:
    """Each time it is told: flush every live pipeline (their deadlines run side by
    side), then signal the main thread until its handler has run. Where the signal ends
    the process the pipelines close; where a host's handler or SIG_IGN keeps it running
    (a graceful shutdown, or a kill after a grace period), they stay open and the next
    SIGTERM flushes again."""
    global _flushing, _flushed, _flushes, _handed_on
    while True:
        while not _told(data := os.read(read, 512)):
            if not data:  # the pipe closed: nobody can tell us any more
                return
        _flushing = True
        ending = _last_previous() in (signal.SIG_DFL, None)
        try:
            pipelines = list(_LIVE)
            if ending:
                for pipeline in pipelines:
                    pipeline._begin_close()
                for pipeline in pipelines:
                    pipeline._end_close()
            else:
                for pipeline in pipelines:
                    pipeline.flush()
        finally:
            _flushes += 1
            _flushed = True
            _hand_on()
        if ending:
            return
        _drain(read)  # what our own signals wrote there: they were not a new SIGTERM
        _flushing = _flushed = _handed_on = False


def _drain(read: int) -> None:
    os.set_blocking(read, False)
    try:
        while os.read(read, 512):
            pass
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(read, True)


def _hand_on() -> None:
    """Signal the main thread until the handler has run again and handed the signal on:
    it may have been about to wait in C again. Bounded: 10 s, and only while ours is
    still the handler (a host may have put its own since)."""
    main = threading.main_thread().ident
    if main is None:
        return
    for tick in range(_HAND_ON_TRIES * 10):
        if _handed_on or signal.getsignal(signal.SIGTERM) is not _on_sigterm:
            return
        if tick % 10 == 0:
            signal.pthread_kill(main, signal.SIGTERM)
        time.sleep(0.05)


# -- signal masks and fork ----------------------------------------------------------
#
# In a forked child every hook runs on the one thread that forked, in the order they were
# registered, whichever threads registered them: the child's blocks are counted, not kept
# per thread. The parent's are per thread: two threads may fork at once.


@contextlib.contextmanager
def stop_signals_blocked(*, after_fork_while: object = None) -> Iterator[None]:
    """Threads started inside never take SIGTERM/SIGINT (threads inherit the mask): a
    signal landing on a background thread would leave the handler (ours, the host's, a
    ``KeyboardInterrupt``) waiting for a main thread that may wait in C for good.

    ``after_fork_while``: so are the ones the fork hooks registered inside start in a
    forked child (the OTel processor restarts its thread from its own), for as long as
    this object lives. Hooks cannot be unregistered: a dead owner's cost nothing. The
    lifting hook always runs (a no-op when nothing was blocked): the owner may be
    collected between the two."""
    if after_fork_while is not None:
        alive = weakref.ref(after_fork_while)
        blocked = [False]  # in a forked child: whether this pair's block was made
        _register_numbered(functools.partial(_block_in_child, alive, blocked))
    _saved_masks.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, _saved_masks.mask)
        if after_fork_while is not None:
            _register_numbered(functools.partial(_lift_in_child, blocked))


def _register_numbered(hook: Callable[[int], None]) -> None:
    """Registers ``hook(number)``; the number is published only once it is registered, so
    a fork in between leaves an earlier hook the last (it never waits for one it lacks)."""
    global _child_hooks
    number = next(_hook_numbers)
    os.register_at_fork(after_in_child=functools.partial(hook, number))
    _child_hooks = max(_child_hooks, number)


def _block_in_child(alive: weakref.ref[object], blocked: list[bool], number: int) -> None:
    global _child_blocks, _child_mask
    if alive() is not None:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        if _child_blocks == 0:
            _child_mask = mask
        _child_blocks += 1
        blocked[0] = True
    _fork_hooks_done(number)  # the last if the fork came before its lifting hook


def _lift_in_child(blocked: list[bool], number: int) -> None:
    global _child_blocks
    if blocked[0]:
        blocked[0] = False
        _child_blocks -= 1
        if _child_blocks == 0 and _child_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, _child_mask)
    _fork_hooks_done(number)


def _before_fork() -> None:
    """The child starts with SIGTERM blocked until our last fork hook has run: one sent
    to it before it has its own pipe would reach the parent's flusher through the shared
    one, and one that came before an OTel processor's hook has restarted its thread
    would flush a processor that is half-way through that."""
    _saved_masks.fork = None
    if _wake is not None:
        _saved_masks.fork = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)


def _after_fork_in_parent() -> None:
    mask = getattr(_saved_masks, "fork", None)
    if mask is not None:
        _saved_masks.fork = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _fork_hooks_done(number: int) -> None:
    """After the last of our hooks nothing lifts a block: each is lifted, and a signal
    held back arrives now."""
    global _child_blocks
    if number >= _child_hooks:
        if _child_blocks and _child_mask is not None:
            _child_blocks = 0
            signal.pthread_sigmask(signal.SIG_SETMASK, _child_mask)
        _after_fork_in_parent()


def _after_fork_in_child(number: int) -> None:
    """A forked child has no flush under way, whatever its parent was doing, and no
    flusher thread: it gets its own, on its own pipe (without one, if it cannot have
    one: the child must never be left with the stop signals blocked)."""
    global _flushing, _flushed, _handed_on, _wake
    _flushing = _flushed = _handed_on = False
    inherited, _wake = _wake, None
    try:
        if inherited is not None:
            with contextlib.suppress(ValueError):  # not the main interpreter
                _start_flusher(inherited=inherited[1])
    except OSError as error:  # e.g. out of file descriptors
        logger.warning("Langfuse flush_on_sigterm: no flusher in this child (%s)", error)
    finally:
        for fd in inherited or ():
            with contextlib.suppress(OSError):
                os.close(fd)
        _fork_hooks_done(number)


@functools.cache
def _register_fork_hooks() -> None:
    """Once, when first installed. asyncio's own hook (3.12+) clears the wakeup fd in a
    forked child: imported first, it registers first, and ours runs after it."""
    import asyncio  # noqa: F401

    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
    _register_numbered(_after_fork_in_child)
