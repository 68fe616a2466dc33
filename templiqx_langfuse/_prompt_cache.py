"""Contracts loaded from Langfuse by label or version: cached, refreshed in the background,
with a fallback file when Langfuse is down.

Within ``cache_ttl_s`` a load is a dictionary lookup (no request, no re-validation). After
it, the stale copy answers at once while one refresh runs in the background (a flag under a
lock: never two at once, from threads and tasks alike). A cold start that cannot fetch a
valid version serves the fallback file (one warning) and retries only in the background
after the TTL; a failed refresh keeps the last good copy and logs why. Hand-written: the
SDK's own cache lives in its ``Langfuse()`` singleton, which this package does not build.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from templiqx_core import Contract, Diagnostic, InvalidData, PortError

from ._config import LangfuseConfig
from ._prompts import (
    Fetched,
    api_failure,
    async_api,
    check_label,
    checked_version,
    env_config,
    path_name,
    sync_api,
)

if TYPE_CHECKING:
    from langfuse import Langfuse

__all__ = ["aload_contract", "contract_source", "load_contract"]

_log = logging.getLogger("templiqx_langfuse.prompts")
SCHEME = "langfuse:"
DEFAULT_LABEL = "production"  # Langfuse's default label
_REFERENCE = re.compile(r"langfuse:(?P<name>[^@#]+)(?:@(?P<label>[^@#]+)|#(?P<version>[0-9]+))?")
_ONCE: Any = {"max_retries": 0}


@dataclass(frozen=True)
class _Entry:
    contract: Contract
    expires: float  # time.monotonic() after which a load refreshes in the background


_Key = tuple[Any, ...]
_entries: dict[_Key, _Entry] = {}
_refreshing: set[_Key] = set()
_lock = threading.Lock()
_cold_locks: dict[_Key, threading.Lock] = {}
_tasks: set[asyncio.Task[None]] = set()  # background refreshes on an event loop, kept alive


@functools.lru_cache(maxsize=1024)
def _target(reference: str, label: str | None, version: int | None) -> tuple[str, str, int | None]:
    """``(name, label, version)`` of a ``langfuse:NAME[@LABEL|#VERSION]`` reference."""
    found = _REFERENCE.fullmatch(reference)
    if found is None or not found["name"].strip():
        raise InvalidData(f"{reference!r}: not langfuse:NAME, langfuse:NAME@LABEL or #VERSION")
    named_label, named_version = found["label"], found["version"]
    if sum(x is not None for x in (label, version, named_label, named_version)) > 1:
        raise InvalidData(f"{reference}: one label or one version, not both")
    if named_version is not None:
        version = int(named_version)
    if isinstance(version, bool) or (version is not None and not 1 <= version < 2**31):
        raise InvalidData(f"{reference}: a version is a whole number from 1")
    chosen = check_label(named_label or label or DEFAULT_LABEL)
    return found["name"], chosen if version is None else "", version


def _key(
    name: str, label: str, version: int | None, config: LangfuseConfig | None, client: Any
) -> _Key:
    if client is not None:
        return ("client", id(client), name, label, version)
    config = config or env_config()
    return (config.base_url, config.public_key, name, label, version)


def _where(name: str, label: str, version: int | None) -> str:
    return f"langfuse:{name}#{version}" if version is not None else f"langfuse:{name}@{label}"


def load_contract(
    reference: str,
    *,
    label: str | None = None,
    version: int | None = None,
    cache_ttl_s: float = 60.0,
    fallback: str | Path | None = None,
    config: LangfuseConfig | None = None,
    client: Langfuse | None = None,
) -> Contract:
    """The contract of prompt ``langfuse:NAME`` at ``label`` (default ``production``) or
    ``version``, from the cache when fresh (see the module's note)."""
    name, label, version = _target(reference, label, version)
    key = _key(name, label, version, config, client)
    entry = _entries.get(key)
    if entry is not None:
        if time.monotonic() >= entry.expires and _claim(key):
            thread = threading.Thread(
                target=_refresh,
                args=(key, name, label, version, cache_ttl_s, config, client),
                name="templiqx-langfuse-prompt-refresh",
                daemon=True,
            )
            thread.start()
        return entry.contract
    with _lock:
        cold = _cold_locks.setdefault(key, threading.Lock())
    with cold:  # concurrent cold loads of one key make one request
        entry = _entries.get(key)
        if entry is not None:
            return entry.contract
        try:
            fetched = _fetch(name, label, version, config, client)
        except PortError as error:
            return _fall_back(key, error, fallback, cache_ttl_s, _where(name, label, version))
        _store(key, fetched.contract, cache_ttl_s)
        return fetched.contract


async def aload_contract(
    reference: str,
    *,
    label: str | None = None,
    version: int | None = None,
    cache_ttl_s: float = 60.0,
    fallback: str | Path | None = None,
    config: LangfuseConfig | None = None,
    client: Langfuse | None = None,
) -> Contract:
    """``load_contract`` on an event loop: requests through the async API client, the
    background refresh as a task."""
    name, label, version = _target(reference, label, version)
    key = _key(name, label, version, config, client)
    entry = _entries.get(key)
    if entry is not None:
        if time.monotonic() >= entry.expires and _claim(key):
            task = asyncio.get_running_loop().create_task(
                _arefresh(key, name, label, version, cache_ttl_s, config, client)
            )
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)
        return entry.contract
    return await _acold(key, name, label, version, cache_ttl_s, fallback, config, client)


_pending: dict[tuple[_Key, asyncio.AbstractEventLoop], asyncio.Future[Contract]] = {}


async def _acold(
    key: _Key,
    name: str,
    label: str,
    version: int | None,
    ttl: float,
    fallback: str | Path | None,
    config: LangfuseConfig | None,
    client: Any,
) -> Contract:
    loop = asyncio.get_running_loop()
    pending = _pending.get((key, loop))
    if pending is not None:  # concurrent cold loads on this loop share one request
        return await asyncio.shield(pending)
    future: asyncio.Future[Contract] = loop.create_future()
    _pending[key, loop] = future
    try:
        try:
            fetched = await _afetch(name, label, version, config, client)
        except PortError as error:
            contract = _fall_back(key, error, fallback, ttl, _where(name, label, version))
        else:
            contract = _store(key, fetched.contract, ttl)
        future.set_result(contract)
        return contract
    except BaseException as error:
        future.set_exception(error)
        future.exception()  # retrieved: no "never retrieved" warning when none waited
        raise
    finally:
        del _pending[key, loop]


def _claim(key: _Key) -> bool:
    """True for the one caller that starts a refresh of ``key``."""
    with _lock:
        if key in _refreshing:
            return False
        _refreshing.add(key)
        return True


def _store(key: _Key, contract: Contract, ttl: float) -> Contract:
    _entries[key] = _Entry(contract, time.monotonic() + ttl)
    return contract


def _fall_back(
    key: _Key, error: PortError, fallback: str | Path | None, ttl: float, where: str
) -> Contract:
    """The fallback file for a failed cold start, cached for the TTL like a fetched copy;
    without one, the typed error."""
    if fallback is None:
        raise error
    from templiqx_core._compiler import read_contract

    contract, diagnostics = read_contract(fallback)
    if contract is None:
        first = diagnostics[0]
        raise InvalidData(f"{where}: {error}; fallback {fallback}: {first.message}") from None
    _log.warning(
        "%s: %s; serving the fallback %s, retried in the background", where, error, fallback
    )
    return _store(key, contract, ttl)


def _keep_last(key: _Key, error: Exception, ttl: float, where: str) -> None:
    """A failed refresh: the last good copy serves one more TTL; logged why."""
    entry = _entries.get(key)
    if entry is not None:
        _entries[key] = _Entry(entry.contract, time.monotonic() + ttl)
    _log.warning("%s: refresh failed, keeping the last good copy: %s", where, error)


def _fetch(
    name: str, label: str, version: int | None, config: LangfuseConfig | None, client: Any
) -> Fetched:
    where = _where(name, label, version)
    try:
        prompt = sync_api(config, client).prompts.get(
            path_name(name),
            label=None if version else label,
            version=version,
            request_options=_ONCE,
        )
    except Exception as error:
        raise api_failure(where, error) from None
    return checked_version(prompt, where)


async def _afetch(
    name: str, label: str, version: int | None, config: LangfuseConfig | None, client: Any
) -> Fetched:
    where = _where(name, label, version)
    try:
        prompt = await async_api(config, client).prompts.get(
            path_name(name),
            label=None if version else label,
            version=version,
            request_options=_ONCE,
        )
    except Exception as error:
        raise api_failure(where, error) from None
    return checked_version(prompt, where)


def _refresh(
    key: _Key,
    name: str,
    label: str,
    version: int | None,
    ttl: float,
    config: LangfuseConfig | None,
    client: Any,
) -> None:
    try:
        _store(key, _fetch(name, label, version, config, client).contract, ttl)
    except Exception as error:
        _keep_last(key, error, ttl, _where(name, label, version))
    finally:
        with _lock:
            _refreshing.discard(key)


async def _arefresh(
    key: _Key,
    name: str,
    label: str,
    version: int | None,
    ttl: float,
    config: LangfuseConfig | None,
    client: Any,
) -> None:
    try:
        fetched = await _afetch(name, label, version, config, client)
        _store(key, fetched.contract, ttl)
    except Exception as error:
        _keep_last(key, error, ttl, _where(name, label, version))
    finally:
        with _lock:
            _refreshing.discard(key)


def pin(reference: str, cache_ttl_s: float = 60.0) -> tuple[str, str, int]:
    """``(langfuse:NAME#VERSION, NAME, VERSION)``: the version ``reference`` resolves to
    now, fetched afresh and cached under its number (a run that must not follow a label
    moving under it, an eval gating a promotion)."""
    name, label, version = _target(reference, None, None)
    fetched = _fetch(name, label, version, None, None)
    pinned = f"langfuse:{name}#{fetched.version}"
    _store(_key(name, "", fetched.version, None, None), fetched.contract, cache_ttl_s)
    return pinned, name, fetched.version


def clear_cache() -> None:
    """Forget every cached contract (tests; a host switching projects)."""
    with _lock:
        _entries.clear()
        _cold_locks.clear()


def contract_source(reference: str) -> tuple[Contract | None, list[Diagnostic]]:
    """Entry point ``langfuse`` of ``templiqx.contract_sources``: ``langfuse:NAME@LABEL``
    or ``langfuse:NAME#VERSION`` wherever a contract path is taken (the environment's
    Langfuse, the default TTL, no fallback); a failure is a diagnostic, as a file's."""
    try:
        return load_contract(reference), []
    except PortError as error:
        return None, [Diagnostic(code=error.code, severity="error", message=str(error))]
