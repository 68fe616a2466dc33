"""Contracts as Langfuse chat prompts, cached here: the SDK's cache is in its singleton."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import math
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import quote

import httpx

from templiqx_core import (
    Contract,
    Diagnostic,
    InvalidData,
    IoFailure,
    NotFound,
    PortError,
    Unsupported,
    check_output_model,
    fingerprint,
    parse_contract,
    read_contract,
)

from ._config import LangfuseConfig
from ._deadline import AsyncDeadlineTransport, DeadlineTransport, deadline
from ._tracing import PROMPT_EXTENSION, PROMPT_LINKS

if TYPE_CHECKING:
    from langfuse import Langfuse
    from langfuse.api import AsyncLangfuseAPI, LangfuseAPI
    from pydantic import BaseModel

CONFIG_KEY = "templiqx"
#: One attempt per request: the caller's timeout is the whole cost of a Langfuse outage.
ONCE: Any = {"max_retries": 0}
#: What is read of one answer (a contract is kilobytes): a larger one is refused.
MAX_PROMPT_BYTES = 4 * 2**20
# Langfuse's rules (packages/shared/src/features/prompts and utils/stringChecks.ts).
_VARIABLE = re.compile(r"[^\W\d_]\w*")
_LABEL = re.compile(r"[a-z0-9_\-.]{1,36}")
_BAD_NAME = re.compile(r"\||^/|/\Z|//|<[^<>]*>")
_RESERVED_NAMES = frozenset({"new", "metrics", "prompt-detail"})
# What keys a load configured by the environment (a config costs ~60 µs: built when fetching).
_ENV_READ = tuple(
    "LANGFUSE_" + n for n in ("PUBLIC_KEY", "SECRET_KEY", "BASE_URL", "HOST", "TIMEOUT")
)


def contract_document(contract: Contract) -> dict[str, Any]:
    return contract.model_dump(mode="json", by_alias=True)


def contract_digest(contract: Contract) -> str:
    return fingerprint(contract_document(contract))


def _node_text(node: dict[str, Any]) -> str:
    """Text, ``{{NAME}}`` for a plain ``inputs.NAME``/``context.NAME``, else a note."""
    kind = node["kind"]
    if kind == "text":
        return str(node["value"])
    expression = node.get("expression") or {}
    if kind == "interpolate" and not node.get("filters") and expression.get("kind") == "ref":
        head, _, name = str(expression["path"]).partition(".")
        if head in ("inputs", "context") and _VARIABLE.fullmatch(name):
            return "{{" + name + "}}"
    return f"[templiqx: {kind} node, rendered by the contract in this prompt's config]"


def chat_messages(contract: Contract) -> list[dict[str, str]]:
    return [
        {"role": message["role"], "content": "".join(map(_node_text, message["content"]))}
        for message in contract_document(contract)["messages"]
    ]


def check_publishable(contract: Contract) -> None:
    """Refuse what Langfuse cannot hold or would read otherwise than the contract means."""
    name = contract.id
    if name != name.strip() or name in _RESERVED_NAMES or len(name) > 255 or _BAD_NAME.search(name):
        raise InvalidData(f"contract id {name!r} is not a valid Langfuse prompt name")
    if PROMPT_EXTENSION in contract.extensions:  # a published one links to its own version
        raise Unsupported(f"{name}: remove the {PROMPT_EXTENSION} extension to publish")
    if clash := sorted(set(contract.inputs) & set(contract.context)):
        raise InvalidData(f"{name}: {', '.join(clash)}: one Langfuse variable for two values")


def check_label(label: str) -> str:
    if not _LABEL.fullmatch(label) or label == "latest":  # Langfuse moves 'latest' itself
        raise InvalidData(f"label {label!r}: up to 36 of a-z 0-9 _ - . and not 'latest'")
    return label


def invalid(where: str, diagnostics: Sequence[Diagnostic]) -> InvalidData:
    first = diagnostics[0]
    return InvalidData(f"{where}: {first.code} {first.json_pointer or ''}: {first.message}")


def path_name(name: str) -> str:
    """A prompt name as the API's path segment (folders' slashes encoded)."""
    return quote(name, safe="")


_Api = TypeVar("_Api")
_Keys = tuple[str, str, str, float]
_sync_apis: dict[_Keys, LangfuseAPI] = {}
# Per loop: an async pool's connections belong to the loop that opened them.
_async_apis: weakref.WeakKeyDictionary[Any, _LoopApis] = weakref.WeakKeyDictionary()


class _Client(httpx.Client):
    """Each request ends by the timeout, its body included (httpx bounds each read alone)."""

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        with deadline(self.timeout.read or math.inf):
            return super().send(request, **kwargs)


class _AsyncClient(httpx.AsyncClient):
    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        with deadline(self.timeout.read or math.inf):
            return await super().send(request, **kwargs)


def sync_api(config: LangfuseConfig | None, client: Langfuse | None) -> LangfuseAPI:
    """The host's client's API (never shut down), else the generated client per config."""
    from langfuse.api import LangfuseAPI

    if client is not None:
        return client.api
    return _own(_sync_apis, config, LangfuseAPI, _Client, DeadlineTransport)


def async_api(config: LangfuseConfig | None, client: Langfuse | None) -> AsyncLangfuseAPI:
    from langfuse.api import AsyncLangfuseAPI

    if client is not None:
        return client.async_api
    loop = asyncio.get_running_loop()
    if (mine := _async_apis.get(loop)) is None:
        mine = _async_apis[loop] = _LoopApis()
    return _own(mine.apis, config, AsyncLangfuseAPI, mine.opened, AsyncDeadlineTransport)


class _LoopApis:
    """One loop's API clients, closed as it shuts down (it closes its async generators)."""

    def __init__(self) -> None:
        self.apis: dict[_Keys, AsyncLangfuseAPI] = {}
        self.https: list[httpx.AsyncClient] = []
        self._closer = self._close_at_shutdown()
        with contextlib.suppress(StopIteration):  # runs to its yield: the loop holds it now
            next(self._closer.__anext__().__await__())

    def opened(self, **settings: Any) -> httpx.AsyncClient:
        self.https.append(_AsyncClient(**settings))
        return self.https[-1]

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            _async_apis.pop(asyncio.get_running_loop(), None)
            for http in self.https:
                with contextlib.suppress(Exception):
                    await http.aclose()


def _own(
    mine: dict[_Keys, _Api],
    config: LangfuseConfig | None,
    api: Callable[..., _Api],
    http: Callable[..., Any],
    transport: Callable[..., Any],
) -> _Api:
    environ = {name: os.environ.get(name, "") for name in _ENV_READ}
    config = config or LangfuseConfig.from_env({k: v for k, v in environ.items() if v})
    if config.public_key is None or config.secret_key is None:
        raise InvalidData("Langfuse's API needs LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY")
    public, secret = config.keys()
    key = (config.base_url, public, secret, config.timeout_s)
    if key not in mine:
        mine[key] = api(
            base_url=config.base_url,
            username=public,
            password=secret,
            timeout=config.timeout_s,
            httpx_client=http(
                transport=transport(max_bytes=MAX_PROMPT_BYTES), timeout=config.timeout_s
            ),
        )
    return mine[key]


@contextlib.contextmanager
def api_errors(where: str) -> Iterator[None]:
    """A failed Langfuse request as a typed error (never its body: it may echo a key)."""
    from langfuse.api.core.api_error import ApiError

    try:
        yield
    except PortError:
        raise
    except Exception as error:
        kind = type(error).__name__
        status = error.status_code if isinstance(error, ApiError) else None
        if isinstance(error, httpx.HTTPError):
            raise IoFailure(f"{where}: Langfuse could not be reached ({kind})") from None
        if status == 404:
            raise NotFound(f"{where}: Langfuse has no such prompt version") from None
        if status is not None and not 200 <= status < 300:
            raise IoFailure(f"{where}: Langfuse answered HTTP {status}") from None
        raise InvalidData(f"{where}: Langfuse's answer could not be read ({kind})") from None


class Published(NamedTuple):
    """What ``publish_contract`` did (``created`` False: the latest version held it)."""

    name: str
    version: int
    created: bool
    digest: str


def publish_contract(
    contract: Contract | str | Path,
    *,
    labels: Sequence[str] = (),
    message: str | None = None,
    config: LangfuseConfig | None = None,
    client: Langfuse | None = None,
) -> Published:
    """A new version of the prompt named after the contract's id, unless the latest holds it."""
    from langfuse.api import CreateChatPromptRequest, CreateChatPromptType

    if not isinstance(contract, Contract):
        parsed, diagnostics = read_contract(contract)
        if parsed is None:
            raise invalid(str(contract), diagnostics)
        contract = parsed
    check_publishable(contract)
    wanted = [check_label(label) for label in dict.fromkeys(labels)]
    if message is not None and len(message) > 500:
        raise InvalidData("--message: at most 500 characters (Langfuse's limit)")
    api, name, digest = sync_api(config, client), contract.id, contract_digest(contract)
    where = f"langfuse:{name}"
    try:
        with api_errors(where):
            latest: Any = api.prompts.get(path_name(name), label="latest", request_options=ONCE)
    except NotFound:
        latest = None
    held = latest.config.get(CONFIG_KEY) if latest and isinstance(latest.config, dict) else None
    if isinstance(held, dict) and held.get("digest") == digest:
        if missing := [label for label in wanted if label not in latest.labels]:
            promote_label(name, latest.version, missing, config=config, client=client)
        return Published(name, latest.version, False, digest)
    earlier = held.get("contract") if isinstance(held, dict) else None
    if isinstance(earlier, dict) and earlier.get("version") == contract.version:
        raise InvalidData(  # generations link to prompts by contract id and version
            f"{where}#{latest.version}: another contract, same version: bump the contract's version"
        )
    request = CreateChatPromptRequest(
        name=name,
        type=CreateChatPromptType("chat"),
        prompt=chat_messages(contract),
        config={CONFIG_KEY: {"digest": digest, "contract": contract_document(contract)}},
        labels=wanted,
        commit_message=message,
    )
    with api_errors(where):
        created: Any = api.prompts.create(request=request, request_options=ONCE)
    return Published(name, created.version, True, digest)


def promote_label(
    name: str,
    version: int,
    labels: str | Sequence[str],
    *,
    config: LangfuseConfig | None = None,
    client: Langfuse | None = None,
) -> None:
    """Move ``labels`` to version ``version`` of prompt ``name``."""
    wanted = [check_label(label) for label in ([labels] if isinstance(labels, str) else labels)]
    with api_errors(f"langfuse:{name}#{version}"):
        sync_api(config, client).prompt_version.update(
            path_name(name), version, new_labels=wanted, request_options=ONCE
        )


_log = logging.getLogger("templiqx_langfuse.prompts")
SCHEME = "langfuse:"
_REFERENCE = re.compile(r"langfuse:(?P<name>[^@#]+)(?:@(?P<label>[^@#]+)|#(?P<version>[0-9]+))?")


# A contract and the time.monotonic() after which a load refreshes it in the background.
_entries: dict[tuple[Any, ...], tuple[Contract, float]] = {}
_refreshing: set[tuple[Any, ...]] = set()
_lock = threading.Lock()
_cold_locks: dict[tuple[Any, ...], threading.Lock] = {}


class _Source(NamedTuple):
    """One prompt version or label, and how to fetch, check and cache it."""

    name: str
    label: str  # "" when a version is named
    version: int | None
    ttl: float
    config: LangfuseConfig | None
    client: Any
    model: type[BaseModel] | None  # a typed contract's output model, checked on each fetch
    key: tuple[Any, ...]
    where: str  # langfuse:NAME#VERSION or langfuse:NAME@LABEL

    def cached(self) -> Contract | None:
        """The cached contract (a few lookups); once stale, one caller starts a refresh."""
        entry = _entries.get(self.key)
        if entry is None or time.monotonic() < entry[1]:
            return None if entry is None else entry[0]
        with _lock:
            claimed = self.key not in _refreshing
            _refreshing.add(self.key)
        if claimed:
            name = "templiqx-langfuse-prompt-refresh"
            threading.Thread(target=self.refresh, name=name, daemon=True).start()
        return entry[0]

    def fetch(self) -> tuple[Contract, Any]:
        """The version's contract, checked as a file is and more, then linked and cached."""
        from langfuse.api import Prompt_Chat

        query = {"label": self.label or None, "version": self.version}
        where = self.where
        with api_errors(where):
            api = sync_api(self.config, self.client)
            prompt = api.prompts.get(path_name(self.name), **query, request_options=ONCE)
        if not isinstance(prompt, Prompt_Chat):
            raise InvalidData(f"{where}: not a chat prompt")
        if not 1 <= prompt.version < 2**31:  # the server's column is a 32-bit integer
            raise InvalidData(f"{where}: version {prompt.version} is no prompt version")
        config = prompt.config
        held = config.get(CONFIG_KEY) if isinstance(config, dict) else None
        if not isinstance(held, dict) or not isinstance(held.get("contract"), dict):
            raise InvalidData(f"{where}: its config holds no templiqx contract")
        try:  # JSON is YAML to the compiler (its numbers too), which locates what is wrong
            text = json.dumps(held["contract"])
        except RecursionError:
            raise InvalidData(f"{where}: its contract is nested too deeply") from None
        contract, diagnostics = parse_contract(text, file=where)
        if contract is None:
            raise invalid(where, diagnostics)
        if held.get("digest") != contract_digest(contract):
            raise InvalidData(f"{where}: the contract in its config does not match its digest")
        messages = [
            {"role": getattr(m, "role", None), "content": getattr(m, "content", None)}
            for m in prompt.prompt
        ]
        if messages != chat_messages(contract):
            raise InvalidData(f"{where}: its messages differ from its contract's (edited?)")
        if self.model is not None:
            check_output_model(contract, self.model)
        PROMPT_LINKS[contract.id, contract.version] = (prompt.name, prompt.version)
        self.store(contract)
        return contract, prompt

    def store(self, contract: Contract) -> Contract:
        _entries[self.key] = (contract, time.monotonic() + self.ttl)
        return contract

    def refresh(self) -> None:
        """A failure keeps the last good copy one more TTL (logged)."""
        try:
            self.fetch()
        except Exception as error:
            if (entry := _entries.get(self.key)) is not None:
                self.store(entry[0])
            _log.warning("%s: refresh failed, keeping the last good copy: %s", self.where, error)
        finally:
            with _lock:
                _refreshing.discard(self.key)

    def cold(self, fallback: str | Path | None) -> Contract:
        """One request for concurrent cold loads; ``fallback`` is then cached for the TTL."""
        with _lock:
            cold = _cold_locks.setdefault(self.key, threading.Lock())
        with cold:
            if (entry := _entries.get(self.key)) is not None:
                return entry[0]
            try:
                return self.fetch()[0]
            except PortError as error:
                if fallback is None:
                    raise
                contract, diagnostics = read_contract(fallback)
                if contract is None:
                    why = diagnostics[0].message
                    raise InvalidData(f"{self.where}: {error}; {fallback}: {why}") from None
                if self.model is not None:
                    check_output_model(contract, self.model)
                note = "%s: %s; serving the fallback %s (retried in the background)"
                _log.warning(note, self.where, error, fallback)
                return self.store(contract)


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
    chosen = check_label(named_label or label or "production")  # Langfuse's default
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
    elif config is not None:
        where = (config.base_url, config.keys()[0])
    else:
        where = tuple(os.environ.get(name) for name in _ENV_READ)
    key = (*where, name, label, version, model)
    named = f"langfuse:{name}#{version}" if version is not None else f"langfuse:{name}@{label}"
    return _Source(name, label, version, ttl, config, client, model, key, named)


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
    cached = source.cached()
    return cached if cached is not None else source.cold(fallback)


def pin(reference: str, cache_ttl_s: float = 60.0) -> tuple[str, str, int]:
    """The version ``reference`` resolves to now, fetched afresh (evals follow no label)."""
    contract, prompt = _source(reference, ttl=cache_ttl_s).fetch()
    pinned = f"langfuse:{prompt.name}#{prompt.version}"
    _source(pinned, ttl=cache_ttl_s).store(contract)
    return pinned, prompt.name, prompt.version


def contract_source(reference: str) -> tuple[Contract | None, list[Diagnostic]]:
    """The ``templiqx.contract_sources`` entry point: a failure is a diagnostic."""
    try:
        return load_contract(reference), []
    except PortError as error:
        return None, [Diagnostic(code=error.code, severity="error", message=str(error))]


def publish_command(argv: list[str]) -> int:
    """``templiqx publish``: exit 0 saying what happened, 1 on failure, 2 on bad usage."""
    about = "publish a contract as a version of the Langfuse chat prompt named after its id"
    parser = argparse.ArgumentParser(prog="templiqx publish", description=about)
    parser.add_argument("contract", help="contract YAML (templiqx/v1alpha1)")
    parser.add_argument(
        "--label", action="append", default=[], help="a label the version gets (repeatable)"
    )
    parser.add_argument("--message", help="the version's commit message")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse's own exit: --help 0, a usage error 2
        return int(stop.code or 0)
    try:
        done = publish_contract(args.contract, labels=args.label, message=args.message)
    except PortError as error:
        sys.stderr.write(f"templiqx: publish: {error.code}: {error}\n")
        return 1
    where, digest = f"langfuse:{done.name}#{done.version}", f"digest {done.digest[:12]}"
    print(f"{'published' if done.created else 'unchanged'} {where} ({digest})")
    return 0
