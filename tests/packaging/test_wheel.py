"""A host installs a built wheel, not a clone: the wheel holds exactly the two packages
and their data files, and installed into a fresh venv it imports and runs.

The wheels are built as the README says (``pip wheel``); with hatchling importable the
build needs no network (``--no-build-isolation``), otherwise pip fetches it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("templiqx_core", "templiqx_langfuse")
STREAMING = REPO_ROOT / "examples" / "streaming_host"
PIP_INSTALL = (sys.executable, "-m", "pip")
#: One xdist worker takes the module, so the wheels are built once (a module fixture).
pytestmark = pytest.mark.xdist_group("wheels")


def build_wheel(source: Path, out: Path) -> Path:
    command = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w"]
    if importlib.util.find_spec("hatchling") is not None:
        command.insert(5, "--no-build-isolation")
    subprocess.run([*command, str(out)], check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("*.whl")  # one build per directory
    return wheel


def source_files(package: str) -> set[str]:
    """The package's files as the repository holds them (CI runs on a plain copy, not a
    git checkout, so this walks the tree; byte-code caches are what .gitignore drops)."""
    root = REPO_ROOT / package
    return {
        path.relative_to(REPO_ROOT).as_posix()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    main = build_wheel(REPO_ROOT, out / "main")
    streaming = build_wheel(STREAMING, out / "streaming")
    return {"main": main, "streaming": streaming}


def test_the_wheel_holds_exactly_the_two_packages_and_their_data_files(
    wheels: dict[str, Path],
) -> None:
    names = zipfile.ZipFile(wheels["main"]).namelist()
    dist_info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
    assert {n.split("/")[0] for n in names if n not in dist_info} == set(PACKAGES)
    expected = set().union(*(source_files(p) for p in PACKAGES))
    assert set(names) - dist_info == expected
    assert "templiqx_core/_compiler/contract.schema.json" in names
    assert {"templiqx_core/py.typed", "templiqx_langfuse/py.typed"} <= set(names)
    entry_points = next(n for n in dist_info if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheels["main"]).read(entry_points).decode()
    assert "templiqx = templiqx_core._cli:main" in text
    assert "scripted = templiqx_core._scripted:runtime_factory" in text


def test_the_streaming_host_wheel_holds_only_its_package(wheels: dict[str, Path]) -> None:
    names = zipfile.ZipFile(wheels["streaming"]).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"templiqx_streaming_host"}


def test_the_wheels_install_into_a_fresh_venv_and_run(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*PIP_INSTALL, "--python", str(python), "install", "-q", "--no-deps", *wheels.values()],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # The dependencies (pydantic, httpx, langfuse, ...) come from this environment, after
    # the fresh venv's own site-packages: the packages themselves are the wheel's.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import json, templiqx_core, templiqx_langfuse, templiqx_streaming_host;"
        "print(json.dumps([templiqx_core.__file__, templiqx_langfuse.__file__,"
        " templiqx_core.CONTRACT_SCHEMA_PATH.is_file()]))"
    )
    found = json.loads(
        subprocess.run(
            [str(python), "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout
    )
    assert all(str(path).startswith(site) for path in found[:2]), found
    assert found[2] is True
    runtimes = subprocess.run(
        [str(venv / "bin" / "templiqx"), "runtimes", "--json"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    )
    assert {"scripted", "langfuse", "openai-stream"} <= set(json.loads(runtimes.stdout)["result"])
    contract = tmp_path / "greeting.yaml"
    contract.write_text((REPO_ROOT / "examples" / "greeting.yaml").read_text())
    checked = subprocess.run(
        [str(venv / "bin" / "templiqx"), "check", str(contract), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
