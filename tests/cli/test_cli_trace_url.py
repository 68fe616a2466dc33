"""After a live traced ``execute``, the CLI prints the trace URL when it can build one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MODEL_KEY, REPO_ROOT, closed_port
from tests.loopback import chat_completion, json_reply, serve


@pytest.mark.parametrize("project_id", ["proj-1", None], ids=["project", "no-project"])
def test_cli_prints_the_trace_url_when_it_can_build_one(
    project_id: str | None, reference_dir: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    base = f"http://127.0.0.1:{closed_port()}"
    env |= {"LANGFUSE_PUBLIC_KEY": "pk-lf-cli", "LANGFUSE_SECRET_KEY": "sk-lf-cli"}
    env |= {"LANGFUSE_BASE_URL": base, "LANGFUSE_PROJECT_ID": project_id or ""}
    env |= {"LANGFUSE_TIMEOUT": "1"}  # the refused export ends sooner at exit
    examples = REPO_ROOT / "examples"
    reply = json_reply(chat_completion({"greeting": "Hello Ryan"}))
    # A live run (a --replay traces nothing), against a loopback model.
    with serve(lambda _request: reply) as model:
        env |= {"TEMPLIQX_MODEL": "m", "TEMPLIQX_MODEL_API_KEY": MODEL_KEY}
        env |= {"TEMPLIQX_MODEL_BASE_URL": model.base_url}
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("templiqx")),
                "execute",
                str(examples / "greeting.yaml"),
                "--inputs",
                str(examples / "greeting.inputs.json"),
                "--context",
                str(examples / "greeting.context.json"),
                "--runtime",
                "langfuse",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    urls = re.findall(rf"^trace: {base}/project/proj-1/traces/[0-9a-f]{{32}}$", result.stderr, re.M)
    assert len(urls) == (1 if project_id else 0), result.stderr
