"""The README's async test recipe, run as a host project runs it (pytest in a subprocess).

An async test (anyio's pytest plugin) drives the FastAPI example in-process through
``httpx.ASGITransport``; the app's model call is answered by the test's cassette. With
``ignore_hosts`` in ``vcr_config`` the ASGI request reaches the app (never recorded, never
replayed in its place); the model call is recorded once, then replayed offline.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.testing.conftest import Provider, readme_block, run

pytestmark = pytest.mark.slow
pytest.importorskip("fastapi")


def test_an_async_endpoint_test_records_the_model_call_only_and_replays_offline(
    host: pytest.Pytester, provider: Provider
) -> None:
    app_dir = host.path / "examples" / "fastapi_app"
    app_dir.mkdir()
    shutil.copy(REPO_ROOT / "examples" / "fastapi_app" / "app.py", app_dir / "app.py")
    (host.path / "tests" / "conftest.py").write_text(readme_block("def vcr_config("))
    (host.path / "tests" / "test_greeting.py").unlink()
    (host.path / "tests" / "test_endpoint.py").write_text(
        readme_block("async def test_greet_endpoint(")
    )

    result, calls = run(host, provider, "--record-mode=once")
    result.assert_outcomes(passed=1)
    assert calls == 1
    cassette = Path(host.path, "tests", "cassettes", "test_endpoint", "test_greet_endpoint.yaml")
    recorded = yaml.safe_load(cassette.read_text())["interactions"]
    # The model call only: the ASGI request to the app was neither recorded nor replayed.
    assert [i["request"]["uri"].rsplit("/v1", 1)[-1] for i in recorded] == ["/chat/completions"]

    provider.status = 401  # the provider refuses everything now: the replay must not ask it
    result, calls = run(host, provider)
    result.assert_outcomes(passed=1)
    assert calls == 0
