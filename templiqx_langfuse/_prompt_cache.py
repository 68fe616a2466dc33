"""Contracts loaded from Langfuse by label or version: cached, refreshed in the background,
with a fallback file (docs/langfuse-prompts.md). Our own cache: the SDK's lives in its
``Langfuse()`` singleton, which this package never builds."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from templiqx_core import (
    Contract,
    Diagnostic,
    InvalidData,
    PortError,
    check_output_model,
    read_contract,
)

from ._config import LangfuseConfig
from ._prompts import (
    ONCE,
    Fetched,
    api_errors,
    async_api,
    check_label,
    checked_version,
    env_config,
    path_name,
    sync_api,
)
from ._tracing import link_prompt

if TYPE_CHECKING:
    from langfuse import Langfuse
    from pydantic import BaseModel

__all__ = ["aload_contract", "contract_source", "load_contract"]

_log = logging.getLogger("templiqx_langfuse.prompts")
SCHEME = "langfuse:"
DEFAULT_LABEL = "production"  # Langfuse's default label
_REFERENCE = re.compile(r"langfuse:(?P<name>[^@#]+)(?:@(?P<label>[^@#]+)|#(?P<version>[0-9]+))?")


# A contract and the time.monotonic() after which a load refreshes it in the background.
_entries: dict[tuple[Any, ...], tuple[Contract, float]] = {}
_refreshing: set[tuple[Any, ...]] = set()
_lock = threading.Lock()
_cold_locks: dict[tuple[Any, ...], threading.Lock] = {}
_pending: dict[tuple[Any, ...], asyncio.Task[Fetched]] = {}
_tasks: set[asyncio.Task[None]] = set()  # background refreshes on an event loop, kept alive


@dataclass(slots=True)
class _Source:
    """One prompt version or label, and how to fetch, check and cache it."""

    name: str
    label: str  # "" when a version is named
    version: int | None
    ttl: float
    config: LangfuseConfig | None
    client: Any
    model: type[BaseModel] | None  # a typed contract's output model, checked on each fetch
    key: tuple[Any, ...]

    @property
    def where(self) -> str:
        if self.version is not None:
            return f"langfuse:{self.name}#{self.version}"
        return f"langfuse:{self.name}@{self.label}"

    def cached(self) -> tuple[Contract | None, bool]:
        """The cached contract (the hot path: a few dictionary lookups), and True for the
        one caller that is to refresh it in the background."""
        entry = _entries.get(self.key)
        if entry is None or time.monotonic() < entry[1]:
            return (None if entry is None else entry[0]), False
        with _lock:
            claimed = self.key not in _refreshing
            _refreshing.add(self.key)
        return entry[0], claimed

    def _get(self, api: Any) -> Any:
        query = {"label": self.label or None, "version": self.version}
        return api.prompts.get(path_name(self.name), **query, request_options=ONCE)

    def fetch(self) -> Fetched:
        with api_errors(self.where):
            prompt = self._get(sync_api(self.config, self.client))
        return self.checked(prompt)

    async def afetch(self) -> Fetched:
        with api_errors(self.where):
            prompt = await self._get(async_api(self.config, self.client))
        return self.checked(prompt)

    def checked(self, prompt: Any) -> Fetched:
        """The version checked (against ``output_model`` too), linked to its prompt, cached."""
        fetched = checked_version(prompt, self.where)
        if self.model is not None:
            check_output_model(fetched.contract, self.model)
        link_prompt(fetched.contract.id, fetched.contract.version, fetched.name, fetched.version)
        self.store(fetched.contract)
        return fetched

    def store(self, contract: Contract) -> Contract:
        _entries[self.key] = (contract, time.monotonic() + self.ttl)
        return contract

    def fall_back(self, error: PortError, fallback: str | Path | None) -> Contract:
        """The fallback file for a failed cold start, cached for the TTL like a fetched copy
        (the next try is a background one); without one, the error."""
        if fallback is None:
            raise error
        contract, diagnostics = read_contract(fallback)
        if contract is None:
            first = diagnostics[0]
            raise InvalidData(f"{self.where}: {error}; fallback {fallback}: {first.message}")
        if self.model is not None:
            check_output_model(contract, self.model)
        note = "%s: %s; serving the fallback %s (retried in the background)"
        _log.warning(note, self.where, error, fallback)
        return self.store(contract)

    @contextmanager
    def refreshing(self) -> Iterator[None]:
        """A background refresh: a failure keeps the last good copy one more TTL (logged)."""
        try:
            yield
        except Exception as error:
            if (entry := _entries.get(self.key)) is not None:
                self.store(entry[0])
            _log.warning("%s: refresh failed, keeping the last good copy: %s", self.where, error)
        finally:
            with _lock:
                _refreshing.discard(self.key)

    def refresh(self) -> None:
        with self.refreshing():
            self.fetch()

    async def arefresh(self) -> None:
        with self.refreshing():
            await self.afetch()


@functools.lru_cache(maxsize=1024, typed=True)  # typed: True is not version 1
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


def _source(
    reference: str,
    label: str | None = None,
    version: int | None = None,
    ttl: float = 60.0,
    config: LangfuseConfig | None = None,
    client: Any = None,
    model: type[BaseModel] | None = None,
) -> _Source:
    name, label, version = _target(reference, label, version)
    if not 0.0 <= ttl <= 1e9:  # NaN too
        raise InvalidData("cache_ttl_s: a number of seconds from 0")
    if client is not None:
        where: tuple[Any, ...] = ("client", id(client))
    else:
        chosen = config or env_config()
        where = (chosen.base_url, chosen.keys()[0])
    key = (*where, name, label, version, model)
    return _Source(name, label, version, ttl, config, client, model, key)


def load_contract(
    reference: str,
    *,
    label: str | None = None,
    version: int | None = None,
    cache_ttl_s: float = 60.0,
    fallback: str | Path | None = None,
    output_model: type[BaseModel] | None = None,
    config: LangfuseConfig | None = None,
    client: Langfuse | None = None,
) -> Contract:
    """The contract of prompt ``langfuse:NAME`` at ``label`` (default ``production``) or
    ``version``, cached; a version whose ``output_schema`` ``output_model`` rejects is refused."""
    source = _source(reference, label, version, cache_ttl_s, config, client, output_model)
    contract, refresh = source.cached()
    if refresh:
        name = "templiqx-langfuse-prompt-refresh"
        threading.Thread(target=source.refresh, name=name, daemon=True).start()
    if contract is not None:
        return contract
    with _lock:
        cold = _cold_locks.setdefault(source.key, threading.Lock())
    with cold:  # concurrent cold loads of one key make one request
        if (entry := _entries.get(source.key)) is not None:
            return entry[0]
        try:
            return source.fetch().contract
        except PortError as error:
            return source.fall_back(error, fallback)


async def aload_contract(
    reference: str,
    *,
    label: str | None = None,
    version: int | None = None,
    cache_ttl_s: float = 60.0,
    fallback: str | Path | None = None,
    output_model: type[BaseModel] | None = None,
    config: LangfuseConfig | None = None,
    client: Langfuse | None = None,
) -> Contract:
    """``load_contract`` on an event loop, the refresh a task; concurrent cold loads on one
    loop share one request."""
    source = _source(reference, label, version, cache_ttl_s, config, client, output_model)
    contract, refresh = source.cached()
    loop = asyncio.get_running_loop()
    if refresh:
        task = loop.create_task(source.arefresh())
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)
    if contract is not None:
        return contract
    pending_key = (*source.key, loop)
    if (fetching := _pending.get(pending_key)) is None:  # shared: the request only
        fetching = _pending[pending_key] = loop.create_task(source.afetch())
        fetching.add_done_callback(lambda task: _forget(pending_key, task))
    try:
        # Shielded: one caller's cancellation is its own, never the request's or the others'.
        return (await asyncio.shield(fetching)).contract
    except PortError as error:
        entry = _entries.get(source.key)  # another caller's fallback, served already
        return entry[0] if entry is not None else source.fall_back(error, fallback)


def _forget(key: tuple[Any, ...], task: asyncio.Task[Fetched]) -> None:
    _pending.pop(key, None)
    if not task.cancelled():
        task.exception()  # retrieved: no "never retrieved" report when every caller left


def pin(reference: str, cache_ttl_s: float = 60.0) -> tuple[str, str, int]:
    """``(langfuse:NAME#VERSION, NAME, VERSION)``: the version ``reference`` resolves to now,
    fetched afresh and cached under its number (an eval must not follow a moving label)."""
    fetched = _source(reference, ttl=cache_ttl_s).fetch()
    pinned = f"langfuse:{fetched.name}#{fetched.version}"
    _source(pinned, ttl=cache_ttl_s).store(fetched.contract)
    return pinned, fetched.name, fetched.version


def clear_cache() -> None:
    """Forget every cached contract (tests; a host switching projects)."""
    with _lock:
        _entries.clear()
        _cold_locks.clear()


def contract_source(reference: str) -> tuple[Contract | None, list[Diagnostic]]:
    """Entry point of ``templiqx.contract_sources``: ``langfuse:NAME@LABEL|#VERSION`` wherever
    a contract path is taken (environment's Langfuse, default TTL); a failure is a diagnostic."""
    try:
        return load_contract(reference), []
    except PortError as error:
        return None, [Diagnostic(code=error.code, severity="error", message=str(error))]
