"""Running ``LangfuseTracedRuntime`` offline from a cassette (the CLI's ``--replay``)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import yaml
from vcr.errors import CannotOverwriteExistingCassetteException

from templiqx_core import ExecutionReceipt, ExecutionRequest, InvalidData, PortError
from templiqx_core.adapters import WrappingRuntime

from .._config import LangfuseConfig, ModelConfig
from .._runtime import LangfuseTracedRuntime
from .cassettes import no_match_error, use_cassette

__all__ = ["ReplayingRuntime", "recorded_endpoint", "replaying_runtime"]

_REPLAY_KEY = "replay-no-key"


def recorded_endpoint(path: Path) -> tuple[str, str]:
    """The base URL and model of a cassette's first chat-completions interaction."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        request = data["interactions"][0]["request"]
        uri, body = request["uri"], request["body"]
        model = orjson.loads(body.encode() if isinstance(body, str) else body)["model"]
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError, orjson.JSONDecodeError):
        raise InvalidData(f"{path} is not a cassette of chat-completions calls") from None
    parts = urlsplit(uri)
    if not parts.path.endswith("/chat/completions"):
        raise InvalidData(f"{path}: first interaction is not a chat-completions call")
    base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len('/chat/completions')]}"
    return base, str(model)


class ReplayingRuntime(WrappingRuntime):
    """A ``LangfuseTracedRuntime`` whose HTTP calls are answered by a cassette."""

    def __init__(self, cassette: Path, runtime: LangfuseTracedRuntime) -> None:
        super().__init__(runtime)
        self.cassette = cassette
        self.runtime = runtime
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(use_cassette(cassette, require_all_played=False))

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        try:
            return self.runtime.execute(request)
        except PortError as error:
            # The runtime maps the unexpected; a replay miss stays its cause.
            if isinstance(error.__cause__, CannotOverwriteExistingCassetteException):
                raise no_match_error(error.__cause__) from None
            raise

    def last_trace_url(self) -> str | None:
        return self.runtime.last_trace_url()

    def release(self) -> None:
        try:
            self.runtime.close()
        finally:
            self._stack.close()


def replaying_runtime(cassette: Path, *, env: Mapping[str, str]) -> ReplayingRuntime:
    """Keyless and offline: endpoint and model come from the cassette itself.

    Langfuse tracing follows the environment as usual (it is never recorded).
    """
    base_url, model = recorded_endpoint(Path(cassette))
    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url=base_url, api_key=_REPLAY_KEY, model=model),
        LangfuseConfig.from_env(env),
    )
    return ReplayingRuntime(Path(cassette), runtime)
