"""A scratch host project, a loopback provider that leaks its key, and README snippets."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)

#: A model key the provider echoes everywhere: body, a response header, the reason phrase.
HOST_KEY = "sk-host-SECRET-9f8e7d6c5b4a"
NAMES = ("Ryan", "Vee", "Zed")


_BLOCK = re.compile(
    r"^(<!-- snippet: (schematic|file) ?([^ \n]*)[^\n]*\n)?```python\n(.*?)^```", re.M | re.S
)


def python_blocks(path: Path, *, schematic: bool = False) -> list[str]:
    """The fenced ```python blocks of a Markdown file, in order: runnable ones, or those
    marked ``<!-- snippet: schematic … -->`` (a template whose names are the reader's)."""
    text = path.read_text(encoding="utf-8")
    return [
        code
        for marker, kind, _, code in _BLOCK.findall(text)
        if kind != "file" and bool(marker) == schematic
    ]


def file_blocks(path: Path) -> dict[str, str]:
    """Blocks marked ``<!-- snippet: file PATH -->``: a repository file shown verbatim."""
    text = path.read_text(encoding="utf-8")
    return {name: code for _, kind, name, code in _BLOCK.findall(text) if kind == "file"}


#: The pages a reader runs snippets from: the README and the docs site (the contract
#: language page has its own, stricter test: every example is compiled).
DOC_PAGES = [
    REPO_ROOT / "README.md",
    *sorted(p for p in (REPO_ROOT / "docs").glob("*.md") if p.name != "contracts.md"),
]


def readme_block(containing: str) -> str:
    """The one block of the README and docs that contains ``containing`` (a block shown on
    several pages must read the same on each)."""
    found = {b for page in DOC_PAGES for b in python_blocks(page) if containing in b}
    (block,) = found
    return block


@dataclass
class Provider:
    """A loopback OpenAI-compatible provider whose answers carry a version number."""

    server: LoopbackModelServer
    version: int = 1
    status: int = 200

    def respond(self, request: ServerRequest) -> Reply:
        name = next((n for n in NAMES if n.encode() in request.body), "nobody")
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.status != 200:  # OpenAI's 401 echoes the key it refused
            body = {"error": {"message": f"Incorrect API key provided: {key}."}}
            return Reply(
                status=self.status,
                reason=f"Unauthorized {key}",
                headers={"content-type": "application/json", "x-echo-key": key},
                body=json_reply(body).body,
            )
        reply = json_reply(
            chat_completion({"greeting": f"Hello {name} v{self.version}"}),
            headers={"x-echo-key": key, "set-cookie": f"session={key}"},
        )
        return Reply(status=200, reason=f"OK {key}", headers=reply.headers, body=reply.body)

    @property
    def calls(self) -> int:
        return len(self.server.requests)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Provider]:
    provider = Provider(LoopbackModelServer(lambda request: Reply()))
    provider.server.set_responder(provider.respond)
    provider.server.start()
    monkeypatch.setenv("TEMPLIQX_MODEL_BASE_URL", provider.server.base_url)
    monkeypatch.setenv("TEMPLIQX_MODEL_API_KEY", HOST_KEY)
    monkeypatch.setenv("TEMPLIQX_MODEL", "loopback-model")
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    yield provider
    provider.server.stop()


@pytest.fixture
def host(pytester: pytest.Pytester) -> pytest.Pytester:
    """A host project: the docs' conftest and test verbatim, plus the example contract."""
    examples = pytester.path / "examples"  # where the snippets find it, as in this repository
    examples.mkdir()
    shutil.copy(REPO_ROOT / "examples" / "greeting.yaml", examples / "greeting.yaml")
    tests = pytester.path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(readme_block("def vcr_config("))
    (tests / "test_greeting.py").write_text(readme_block("def test_greeting("))
    return pytester


#: A host test of the host's own runtime under ``@pytest.mark.vcr``: pytest-recording's side.
MARKED = """
import os

import pytest
from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
from templiqx_langfuse import LangfuseTracedRuntime


@pytest.mark.vcr
def test_marked():
    name = os.environ.get("GREETING_NAME", "Vee")
    interaction = compile_contract(
        "examples/greeting.yaml",
        RenderRequest(inputs={"name": name}, context={"organization": "Blinqx"}),
        ["structured_output"],
    ).interaction
    with LangfuseTracedRuntime.from_env() as runtime:
        receipt = runtime.execute(ExecutionRequest(interaction=interaction))
    assert receipt.output["greeting"].startswith(f"Hello {name}")
"""


def run(host: pytest.Pytester, provider: Provider, *args: str) -> tuple[pytest.RunResult, int]:
    before = provider.calls
    result = host.runpytest_inprocess(
        "tests", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args
    )
    return result, provider.calls - before


def passes(host: pytest.Pytester, provider: Provider, *args: str, calls: int) -> None:
    """Both host tests pass, and exactly ``calls`` requests reached the provider."""
    result, made = run(host, provider, *args)
    result.assert_outcomes(passed=2)
    assert made == calls, args


def cassette(host: pytest.Pytester, test: str) -> list[dict[str, object]]:
    path = Path(host.path, "tests", "cassettes", test, f"{test}.yaml")
    text = path.read_text()
    assert HOST_KEY not in text
    assert "Bearer" not in text
    interactions: list[dict[str, object]] = yaml.safe_load(text)["interactions"]
    return interactions


def greetings(host: pytest.Pytester, test: str) -> list[str]:
    found = []
    for interaction in cassette(host, test):
        body = interaction["response"]["body"]["string"]  # type: ignore[index]
        found += [v for v in ("v1", "v2", "v3") if v in body]
    return found
