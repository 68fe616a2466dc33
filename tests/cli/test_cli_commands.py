"""The ``templiqx.commands`` entry points: another package's command, run by the core CLI."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from templiqx_core._cli import main

_MODULE = """
import sys
from templiqx_core import InvalidData

def hello(argv):
    if argv == ["boom"]:
        raise InvalidData("no such greeting")
    print("hello", *argv)
    return 7
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution registering ``hello`` and a ``broken`` command that cannot import."""
    (tmp_path / "tqx_hello_cmd.py").write_text(_MODULE, encoding="utf-8")
    info = tmp_path / "tqx_hello-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tqx-hello\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[templiqx.commands]\nhello = tqx_hello_cmd:hello\nbroken = tqx_no_such_module:run\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit:  # the core parser's --help
            code = int(exit.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.usefixtures("installed")
def test_a_registered_command_runs_with_its_arguments_and_exit_code() -> None:
    assert _run("hello", "a", "--loud") == (7, "hello a --loud\n", "")
    code, out, _ = _run("--help")
    assert code == 0
    assert "hello" in out
    assert "see templiqx hello --help" in out


@pytest.mark.usefixtures("installed")
def test_a_failing_command_is_one_line_and_exit_1() -> None:
    code, _, err = _run("hello", "boom")
    assert (code, err) == (1, "templiqx: TQX_DATA_INVALID: no such greeting\n")
    code, _, err = _run("broken")
    assert code == 1
    assert err.count("\n") == 1
    assert "broken: cannot load tqx_no_such_module:run" in err


def test_an_unknown_command_is_a_usage_error() -> None:
    code, _, err = _run("no-such-command")
    assert code == 2
    assert "invalid choice" in err


def test_eval_hands_its_run_flags_to_the_eval_entry_point() -> None:
    code, out, _ = _run("eval", "examples/greeting.yaml", "--runtime", "x", "--help")
    assert code == 0
    assert "--min-pass-rate" in out  # the runner's parser, not the core self-check's
    code, _, err = _run("eval", "examples/greeting.yaml", "--shard", "1/2")
    assert code == 2
    assert "--shard runs cases against a model: add --runtime NAME" in err


def test_without_the_eval_runner_eval_run_flags_say_where_it_comes_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import templiqx_core._cli as cli

    monkeypatch.setattr(cli, "_plugins", dict)
    code, _, err = _run("eval", "examples/greeting.yaml", "--runtime", "langfuse")
    assert code == 2
    assert "the eval runner comes with templiqx-langfuse" in err
    assert _run("eval", "examples/greeting.yaml")[0] == 0  # the self-check is the core's
