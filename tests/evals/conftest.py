"""Eval fixtures: a loopback model that greets whoever the prompt names, and the CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from templiqx_core._cli import main
from tests.conftest import REPO_ROOT
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)

GREETING = REPO_ROOT / "examples" / "greeting.yaml"
_NAME = re.compile(r"Hello (\w+) for")


@dataclass
class GreetingModel:
    """Answers ``{"greeting": "Hello <name>"}``; names in ``fail`` get that status (a
    429 with a retry-after once per name in ``limit_once``, prose that is not JSON once per
    name in ``prose_once``)."""

    fail: dict[str, int] = field(default_factory=dict)
    limit_once: set[str] = field(default_factory=set)
    prose_once: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: ServerRequest) -> Reply:
        body = request.json()
        said = body["messages"][-1]["content"]
        if said.startswith("JUDGE"):  # a judge contract's call
            with self.lock:
                self.seen.append("judge")
            verdict = {"score": "Hello Ryan" in said, "comment": "judged the greeting"}
            return json_reply(chat_completion(verdict))
        # The prompt names whom to greet (a repair's feedback follows it).
        found = _NAME.search(" ".join(m["content"] for m in body["messages"]))
        name = found.group(1) if found else "nobody"
        with self.lock:
            self.seen.append(name)
            limited, prose = name in self.limit_once, name in self.prose_once
            self.limit_once.discard(name)
            self.prose_once.discard(name)
        if prose:
            return json_reply(chat_completion(f"Sure! Hello {name}."))
        if limited:
            error = {"error": {"message": "slow down", "type": "rate_limit"}}
            return json_reply(error, status=429, headers={"retry-after-ms": "50"})
        if name in self.fail:
            return json_reply({"error": {"message": "no"}}, status=self.fail[name])
        return json_reply(chat_completion({"greeting": f"Hello {name}"}))


@pytest.fixture
def greeting_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[GreetingModel]:
    model = GreetingModel()
    server = LoopbackModelServer(model).start()
    for name in [k for k in os.environ if k.startswith(("LANGFUSE_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPLIQX_MODEL_BASE_URL", server.base_url)
    monkeypatch.setenv("TEMPLIQX_MODEL", "loopback-model")
    monkeypatch.setenv("TEMPLIQX_MODEL_API_KEY", "sk-loopback")
    yield model
    server.stop()


def write_cases(path: Path, names: list[str], **extra: object) -> Path:
    lines = [
        json.dumps(
            {
                "id": name.lower(),
                "inputs": {"name": name},
                "context": {"organization": "Blinqx"},
                "expected_output": {"greeting": f"Hello {name}"},
                **extra,
            }
        )
        for name in names
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


Cli = Callable[..., Ran]


@pytest.fixture
def cli() -> Cli:
    """``templiqx`` in-process (``main(argv)``): exit code, stdout, stderr."""

    def run(*args: str | Path) -> Ran:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code if isinstance(exit.code, int) else 1
        return Ran(code, out.getvalue(), err.getvalue())

    return run
