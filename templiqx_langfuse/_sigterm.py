"""``flush_on_sigterm``: on SIGTERM, flush every live runtime's export within its bound,
then let the signal do what it would have done (the handler before ours, ignoring it, or
the default action, which ends the process past ``atexit``).

One chained handler and nothing more: hosts that turn SIGTERM into a graceful shutdown
(uvicorn, gunicorn, Celery) run ``close()`` and ``atexit`` themselves. Python runs it on
the main thread between bytecodes; the flush runs on threads of its own and is waited
for with a deadline, so a lock the interrupted code holds can delay it, never hang it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import weakref
from types import FrameType
from typing import Any, Protocol

__all__ = ["flush_on_sigterm", "forget"]

logger = logging.getLogger("templiqx_langfuse")


class _Flushable(Protocol):
    @property
    def config(self) -> Any: ...
    def start_flush(self) -> threading.Thread: ...


_LIVE: weakref.WeakSet[_Flushable] = weakref.WeakSet()
#: The handlers ours was put in front of, oldest first (a host may put its own between two
#: runtimes, and call ours back as its previous one).
_previous: list[Any] = []
_depth = 0  # how many of our calls are under way: the one to hand on to is that far back
_flushing = False


def flush_on_sigterm(pipeline: _Flushable) -> None:
    """Flush ``pipeline`` (held weakly) on SIGTERM; only the main thread may install."""
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is not _on_sigterm:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _previous.append(current)
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


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _depth, _flushing
    # Not called back by a host handler we handed on to, nor a second SIGTERM during the
    # flush (that one means now: it is handed on at once).
    if _depth == 0 and not _flushing:
        _flushing = True
        try:
            pipelines = list(_LIVE)
            flushes = [pipeline.start_flush() for pipeline in pipelines]
            bound = max((p.config.flush_timeout_s for p in pipelines), default=0.0)
            deadline = time.monotonic() + bound
            for flushing in flushes:
                flushing.join(max(0.0, deadline - time.monotonic()))
        except Exception as error:  # e.g. no thread at interpreter exit: hand on anyway
            logger.warning("Langfuse flush on SIGTERM failed (%s)", type(error).__name__)
        finally:
            _flushing = False
    index = len(_previous) - 1 - _depth
    previous = _previous[index] if index >= 0 else signal.SIG_DFL
    _depth += 1
    try:
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default (or a C handler's None): it ends us
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        _depth -= 1
