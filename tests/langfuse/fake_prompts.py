"""A loopback fake of Langfuse's public prompt API, validating requests as the server does.

Request bodies follow ``CreatePromptSchema`` (``packages/shared/src/features/prompts/
types.ts``: a chat prompt's name, labels, messages, config, tags, commit message) and the
label update of ``promptVersionHandler.ts`` (``newLabels``, never ``latest``); labels move
as ``updatePrompt`` moves them (added to the version, taken off any other). Unknown keys are
refused (zod would drop them) so a misspelt field fails a test. A refused request answers
400 and is recorded in ``refused``.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError

PUBLIC_KEY, SECRET_KEY = "pk-lf-prompts-1", "sk-lf-prompts-1"
PREFIX = "/api/public/v2/prompts"


def _prompt_name(value: str) -> str:
    # PromptNameSchema: no HTML, no '|', folder rules, trimmed, not reserved.
    if re.search(r"<[^<>]*>", value) or "|" in value:
        raise ValueError("invalid characters")
    if value.startswith("/") or value.endswith("/") or "//" in value:
        raise ValueError("invalid folder path")
    if not value.strip() or value in ("new", "metrics", "prompt-detail"):
        raise ValueError("empty or reserved")
    return value


Label = Annotated[str, Field(min_length=1, max_length=36, pattern=r"^[a-z0-9_\-.]+$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ChatMessage(Strict):
    role: str
    content: str
    type: None = None  # the SDK's model writes an unset type as null


class Placeholder(Strict):
    type: Literal["placeholder"]
    name: Annotated[str, Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_]*$")]


class CreateChatPrompt(Strict):
    name: Annotated[str, Field(min_length=1), AfterValidator(_prompt_name)]
    labels: list[Label] = Field(default_factory=list)
    type: Literal["chat"]
    prompt: list[ChatMessage | Placeholder]
    config: JsonValue = Field(default_factory=dict)
    tags: list[str] | None = None
    commitMessage: Annotated[str, Field(max_length=500)] | None = None


class UpdateLabels(Strict):
    newLabels: list[str]


class FakePromptApi:
    """Langfuse's prompt endpoints on 127.0.0.1. ``down``: every request answers 503;
    ``delay_s``: each GET waits first (a slow Langfuse)."""

    def __init__(self) -> None:
        self.versions: dict[str, list[dict[str, Any]]] = {}
        self.requests: Counter[str] = Counter()
        self.refused: list[str] = []
        self.down = False
        self.delay_s = 0.0
        self.lose_label_updates = False
        self.garbage = False  # a 200 whose body is no prompt (a proxy's page, say)
        self.compress = False  # gzip every answer to a client that accepts it (as a CDN)
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Langfuse: clients pool connections

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.handle(self, "GET")

            def do_POST(self) -> None:
                fake.handle(self, "POST")

            def do_PATCH(self) -> None:
                fake.handle(self, "PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakePromptApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    # -- what tests arrange ------------------------------------------------------------

    def gets(self) -> int:
        return sum(n for key, n in self.requests.items() if key.startswith("GET"))

    def latest(self, name: str) -> dict[str, Any]:
        return self.versions[name][-1]

    def add_version(self, name: str, messages: list[Any], config: Any, labels: list[str]) -> int:
        """A version as the UI would save it (an edit copies the config)."""
        with self.lock:
            return self._create(name, messages, config, labels, None)

    def edit_in_ui(self, name: str, labels: list[str]) -> int:
        last = self.latest(name)
        messages = copy.deepcopy(last["prompt"])
        messages[0]["content"] += " (edited in the playground)"
        return self.add_version(name, messages, copy.deepcopy(last["config"]), labels)

    def move_label(self, name: str, version: int, label: str) -> None:
        with self.lock:
            self._label(name, version, [label])

    def labelled(self, name: str, label: str) -> int | None:
        for found in self.versions.get(name, []):
            if label in found["labels"]:
                return int(found["version"])
        return None

    # -- the server --------------------------------------------------------------------

    def _create(
        self, name: str, messages: list[Any], config: Any, labels: list[str], message: str | None
    ) -> int:
        versions = self.versions.setdefault(name, [])
        for older in versions:
            older["labels"] = [x for x in older["labels"] if x not in (*labels, "latest")]
        version = len(versions) + 1
        versions.append(
            {
                "type": "chat",
                "name": name,
                "version": version,
                "prompt": messages,
                "config": config,
                "labels": sorted({*labels, "latest"}),
                "tags": [],
                "commitMessage": message,
            }
        )
        return version

    def _label(self, name: str, version: int, labels: list[str]) -> dict[str, Any] | None:
        target = next((v for v in self.versions.get(name, []) if v["version"] == version), None)
        if target is None or self.lose_label_updates:
            return None
        for other in self.versions[name]:
            if other is not target:
                other["labels"] = [x for x in other["labels"] if x not in labels]
        target["labels"] = sorted({*target["labels"], *labels})
        return target

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(request.path)
        length = int(request.headers.get("content-length") or 0)
        body = request.rfile.read(length) if length else b""
        with self.lock:
            self.requests[f"{method} {parts.path}"] += 1
        if self.delay_s and method == "GET":
            time.sleep(self.delay_s)
        token = base64.b64encode(f"{PUBLIC_KEY}:{SECRET_KEY}".encode()).decode()
        if self.down:
            status, answer = 503, {"message": "unavailable"}
        elif self.garbage:
            status, answer = 200, {"html": "<h1>sign in</h1>"}
        elif request.headers.get("authorization") != f"Basic {token}":
            status, answer = 401, {"message": "unauthorized"}
        else:
            with self.lock:
                status, answer = self._route(method, parts.path, parse_qs(parts.query), body)
        data = json.dumps(answer).encode()
        gzipped = self.compress and "gzip" in request.headers.get("accept-encoding", "")
        data = gzip.compress(data) if gzipped else data
        try:
            request.send_response(status)
            request.send_header("content-type", "application/json")
            if gzipped:
                request.send_header("content-encoding", "gzip")
            request.send_header("content-length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out first (a slow Langfuse)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[int, Any]:
        if not path.startswith(PREFIX):
            return 404, {"message": "no route"}
        rest = path.removeprefix(PREFIX)
        try:
            if method == "POST" and rest == "":
                create = CreateChatPrompt.model_validate_json(body)
                messages = [m.model_dump(exclude_none=True) for m in create.prompt]
                version = self._create(
                    create.name, messages, create.config, create.labels, create.commitMessage
                )
                return 201, self.versions[create.name][version - 1]
            found = re.fullmatch(r"/([^/]+)/versions/([0-9]+)", rest)
            if method == "PATCH" and found:
                update = UpdateLabels.model_validate_json(body)
                if "latest" in update.newLabels:
                    raise ValueError("Label 'latest' is always assigned to the latest version")
                target = self._label(unquote(found[1]), int(found[2]), update.newLabels)
                return (404, {"message": "not found"}) if target is None else (200, target)
            found = re.fullmatch(r"/([^/]+)", rest)
            if method == "GET" and found:
                return self._get(unquote(found[1]), query)
        except (ValidationError, ValueError) as error:
            self.refused.append(str(error))
            return 400, {"message": "invalid request"}
        return 404, {"message": "no route"}

    def _get(self, name: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        versions = self.versions.get(name, [])
        if "version" in query:
            wanted = int(query["version"][0])
            hit = [v for v in versions if v["version"] == wanted]
        else:
            label = query.get("label", ["production"])[0]
            hit = [v for v in versions if label in v["labels"]]
        return (200, hit[0]) if hit else (404, {"message": "prompt not found"})


def clear_cache() -> None:
    """Forget every cached contract (the cache is per process)."""
    from templiqx_langfuse import _prompts

    _prompts._entries.clear()
    _prompts._cold_locks.clear()
