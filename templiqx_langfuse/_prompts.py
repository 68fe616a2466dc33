"""Contracts as Langfuse chat prompts: a version holds the contract and its digest in its
``config``, and as messages the contract's in Langfuse's syntax, used only while they are still
the ones its contract renders (a version edited in the Langfuse UI is refused)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
    fingerprint,
    parse_contract,
    read_contract,
)

from ._bounded_http import AsyncBoundedTransport, BoundedTransport
from ._config import LangfuseConfig
from ._tracing import PROMPT_EXTENSION

if TYPE_CHECKING:
    from langfuse import Langfuse
    from langfuse.api import AsyncLangfuseAPI, LangfuseAPI

CONFIG_KEY = "templiqx"
#: One attempt per request: the caller's timeout is the whole cost of a Langfuse outage.
ONCE: Any = {"max_retries": 0}
#: What is read of one answer: a prompt holds one contract (kilobytes); a larger answer is
#: cut there and refused as a prompt that does not parse.
MAX_PROMPT_BYTES = 4 * 2**20
# Langfuse's rules (packages/shared/src/features/prompts and utils/stringChecks.ts).
_VARIABLE = re.compile(r"[^\W\d_]\w*")
_LABEL = re.compile(r"[a-z0-9_\-.]{1,36}")
_BAD_NAME = re.compile(r"\||^/|/\Z|//|<[^<>]*>")
_RESERVED_NAMES = frozenset({"new", "metrics", "prompt-detail"})
# Read per load (hot) when no configuration is given: one LangfuseConfig per distinct value.
_ENV_READ = tuple(
    "LANGFUSE_" + n for n in ("PUBLIC_KEY", "SECRET_KEY", "BASE_URL", "HOST", "TIMEOUT")
)


def contract_document(contract: Contract) -> dict[str, Any]:
    return contract.model_dump(mode="json", by_alias=True)


def contract_digest(contract: Contract) -> str:
    return fingerprint(contract_document(contract))


def _node_text(node: dict[str, Any]) -> str:
    """One content node in Langfuse's syntax: text, ``{{NAME}}`` for a plain ``inputs.NAME`` /
    ``context.NAME``; any other node said to be the contract's to render."""
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
    if PROMPT_EXTENSION in contract.extensions:
        raise Unsupported(
            f"{name}: the {PROMPT_EXTENSION} extension links a file to a prompt by hand; "
            "a published contract is linked to its own version (remove the extension)"
        )
    if clash := sorted(set(contract.inputs) & set(contract.context)):
        raise InvalidData(
            f"{name}: {', '.join(clash)} named both an input and a context value: "
            "both would be the same Langfuse variable"
        )


def check_label(label: str) -> str:
    if not _LABEL.fullmatch(label) or label == "latest":
        raise InvalidData(
            f"label {label!r}: lowercase letters, digits, '_', '-' or '.', at most 36 "
            "characters, and not 'latest' (Langfuse moves it itself)"
        )
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
# An async client's pooled connections belong to the loop that opened them: ours are per
# loop (a host may run asyncio.run more than once), closed when it shuts down.
_async_apis: weakref.WeakKeyDictionary[Any, _LoopApis] = weakref.WeakKeyDictionary()


def sync_api(config: LangfuseConfig | None, client: Langfuse | None) -> LangfuseAPI:
    """The host's client's API (never shut down here), else the SDK's generated client per
    configuration: no ``Langfuse()`` singleton, no tracer."""
    from langfuse.api import LangfuseAPI

    if client is not None:
        return client.api
    return _own(_sync_apis, config, LangfuseAPI, httpx.Client, BoundedTransport)


def async_api(config: LangfuseConfig | None, client: Langfuse | None) -> AsyncLangfuseAPI:
    from langfuse.api import AsyncLangfuseAPI

    if client is not None:
        return client.async_api
    loop = asyncio.get_running_loop()
    if (mine := _async_apis.get(loop)) is None:
        mine = _async_apis[loop] = _LoopApis()
    return _own(mine.apis, config, AsyncLangfuseAPI, mine.opened, AsyncBoundedTransport)


class _LoopApis:
    """One event loop's API clients, closed when it shuts down (``asyncio.run`` closes the
    async generators started on it): sockets a run opened never outlive it."""

    def __init__(self) -> None:
        self.apis: dict[_Keys, AsyncLangfuseAPI] = {}
        self.https: list[httpx.AsyncClient] = []
        self._closer = self._close_at_shutdown()
        with contextlib.suppress(StopIteration):  # runs to its yield: the loop holds it now
            next(self._closer.__anext__().__await__())

    def opened(self, **settings: Any) -> httpx.AsyncClient:
        self.https.append(httpx.AsyncClient(**settings))
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
    transport: Callable[[int], Any],
) -> _Api:
    config = config or env_config()
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
            httpx_client=http(transport=transport(MAX_PROMPT_BYTES), timeout=config.timeout_s),
        )
    return mine[key]


def env_config() -> LangfuseConfig:
    return _env_config(tuple(os.environ.get(name) for name in _ENV_READ))


@functools.lru_cache(maxsize=8)
def _env_config(values: tuple[str | None, ...]) -> LangfuseConfig:
    return LangfuseConfig.from_env({k: v for k, v in zip(_ENV_READ, values, strict=True) if v})


@contextmanager
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


class Fetched(NamedTuple):
    contract: Contract
    name: str
    version: int


def checked_version(prompt: Any, where: str) -> Fetched:
    """The contract a fetched version holds, checked as a file is, its digest and messages
    matching."""
    from langfuse.api import Prompt_Chat

    if not isinstance(prompt, Prompt_Chat):
        raise InvalidData(f"{where}: not a chat prompt")
    if not 1 <= prompt.version < 2**31:  # the server's column is a 32-bit integer
        raise InvalidData(f"{where}: version {prompt.version} is no prompt version")
    config = prompt.config
    held = config.get(CONFIG_KEY) if isinstance(config, dict) else None
    if not isinstance(held, dict) or not isinstance(held.get("contract"), dict):
        raise InvalidData(f"{where}: its config holds no templiqx contract")
    contract, diagnostics = parse_contract(json.dumps(held["contract"]), file=where)
    if contract is None:
        raise invalid(where, diagnostics)
    if held.get("digest") != contract_digest(contract):
        raise InvalidData(f"{where}: the contract in its config does not match its digest")
    messages = [
        {"role": getattr(m, "role", None), "content": getattr(m, "content", None)}
        for m in prompt.prompt
    ]
    if messages != chat_messages(contract):
        raise InvalidData(
            f"{where}: its messages differ from its contract's (edited in Langfuse?); "
            "edit the contract and publish it"
        )
    return Fetched(contract, prompt.name, prompt.version)


@dataclass(frozen=True)
class Published:
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
    """Create a version of the chat prompt named after the contract's id, unless the latest
    version holds the same contract (its labels are then added to that version)."""
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
        raise InvalidData(
            f"{where}#{latest.version} holds another contract with version "
            f"{contract.version!r}: bump the contract's version (generations are linked "
            "to a prompt version by contract id and version)"
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
