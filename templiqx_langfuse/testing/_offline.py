"""Network blocking while a cassette replays: only loopback reaches a socket.

vcrpy answers the HTTP clients it patches, but it lets ignored hosts (the Langfuse
endpoint) and every other client through; a forgotten re-record could then call a real
provider. This reuses pytest-recording's own guard (``--block-network``), which patches
``socket.socket.connect``/``connect_ex``, with loopback as the only allowed hosts, and
counts nested replays so the last one to end lifts the block. A block someone else put
in place (pytest-recording's ``--block-network``) is left alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import socket
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _network_guard() -> types.ModuleType:
    """pytest-recording's ``network`` module, without importing pytest when not under it.

    ``pytest_recording/__init__`` imports pytest (≈ 85 ms), which the CLI's ``--replay``
    must not pay. Under pytest (or once pytest-recording is loaded) the module is imported
    normally, so the guard and its state are the plugin's own; otherwise its file is
    loaded under the same module name, so a later normal import shares it.
    """
    name = "pytest_recording.network"
    if name in sys.modules or "pytest" in sys.modules or "pytest_recording" in sys.modules:
        return importlib.import_module(name)
    package = importlib.util.find_spec("pytest_recording")
    locations = package.submodule_search_locations if package is not None else None
    spec = (
        importlib.util.spec_from_file_location(name, f"{next(iter(locations))}/network.py")
        if locations
        else None
    )
    if spec is None or spec.loader is None:
        return importlib.import_module(name)  # an unusual install: the normal way
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


network = _network_guard()

__all__ = ["LOOPBACK_HOSTS", "lifted", "offline"]

#: Regular expressions (``re.match``) of the hosts a blocked process may still connect to.
LOOPBACK_HOSTS = (r"127(?:\.\d{1,3}){3}$", r"::1$", r"localhost$")

_lock = threading.Lock()
_depth = 0
_ours = False


@contextmanager
def offline() -> Iterator[None]:
    """Refuse every non-loopback connection until the outermost ``offline()`` ends."""
    global _depth, _ours
    with _lock:
        if _depth == 0:
            _ours = socket.socket.connect is network._original_connect
            if _ours:
                network.block(allowed_hosts=list(LOOPBACK_HOSTS))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _ours:
                network.unblock()
                _ours = False


@contextmanager
def lifted(**block: Any) -> Iterator[None]:
    """Lift pytest-recording's network block while a cassette may record, then put it back
    with ``block`` (its own ``allowed_hosts``/``allow_private_ips``): pytest-recording does
    not block a ``@pytest.mark.vcr`` test whose record mode is not ``none``. A block of
    ours (a replay in progress) or no block at all is left as it is."""
    with _lock:
        ours = _depth > 0
    if ours or socket.socket.connect is network._original_connect:
        yield
        return
    network.unblock()
    try:
        yield
    finally:
        network.block(**block)
