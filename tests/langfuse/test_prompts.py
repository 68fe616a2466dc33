"""Contracts managed in Langfuse: publish, load by label or version (cached, refreshed in
the background, with a fallback), linked generations, against a loopback prompt API."""

from __future__ import annotations

import copy
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from templiqx_core import (
    InvalidData,
    IoFailure,
    RenderRequest,
    ScriptedRuntime,
    ScriptedSuccess,
    Unsupported,
    execute_contract,
)
from templiqx_core._compiler import read_contract
from templiqx_langfuse import LangfuseConfig, load_contract, publish_contract
from templiqx_langfuse._prompts import (
    CONFIG_KEY,
    contract_digest,
    publish_command,
)
from templiqx_langfuse._tracing import PROMPT_LINKS

from .fake_prompts import PUBLIC_KEY, SECRET_KEY, FakePromptApi, clear_cache

HERE = Path(__file__).parent
CONTRACT = HERE / "support.yaml"
NAME = "support-triage"
REQUEST = RenderRequest(inputs={"tier": "gold", "ticket": " refund "}, context={"org": "Acme"})


@pytest.fixture
def fake() -> Iterator[FakePromptApi]:
    clear_cache()
    with FakePromptApi() as api:
        yield api
    clear_cache()
    assert not api.refused, api.refused  # every request was valid for the server


@pytest.fixture
def config(fake: FakePromptApi) -> LangfuseConfig:
    return LangfuseConfig(
        public_key=PUBLIC_KEY, secret_key=SECRET_KEY, base_url=fake.base_url, timeout_s=1.0
    )


def edited(tmp_path: Path, version: str) -> Path:
    """The contract with another version string and system message (a new revision)."""
    text = CONTRACT.read_text("utf-8").replace("version: 1.0.0", f"version: {version}")
    target = tmp_path / f"support-{version}.yaml"
    target.write_text(text.replace("You triage", "You sort"), "utf-8")
    return target


def wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# -- publish ---------------------------------------------------------------------------


def test_publish_makes_a_chat_prompt_with_variables_notes_config_and_labels(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    done = publish_contract(CONTRACT, labels=["staging"], message="first cut", config=config)
    assert (done.name, done.version, done.created) == (NAME, 1, True)
    stored = fake.latest(NAME)
    assert stored["prompt"][0] == {
        "role": "system",
        "content": "You triage support tickets for {{org}}.",
    }
    user = stored["prompt"][1]["content"]
    assert user.startswith("Tier {{tier}}: [templiqx: when node")
    assert "[templiqx: interpolate node" in user  # a filtered value: the contract renders it
    held = stored["config"][CONFIG_KEY]
    contract, _ = read_contract(CONTRACT)
    assert contract is not None
    assert held["digest"] == contract_digest(contract) == done.digest
    assert held["contract"]["id"] == NAME
    assert stored["labels"] == ["latest", "staging"]
    assert stored["commitMessage"] == "first cut"


def test_publishing_the_same_contract_twice_makes_no_version(
    fake: FakePromptApi, config: LangfuseConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert publish_contract(CONTRACT, config=config).created
    again = publish_contract(CONTRACT, labels=["production"], config=config)
    assert (again.version, again.created) == (1, False)
    assert len(fake.versions[NAME]) == 1
    assert fake.labelled(NAME, "production") == 1  # the asked label still lands
    newer = publish_contract(edited(tmp_path, "1.1.0"), config=config)
    assert (newer.version, newer.created) == (2, True)
    same_version = edited(tmp_path, "1.1.0")
    same_version.write_text(same_version.read_text("utf-8") + "description: other\n", "utf-8")
    with pytest.raises(InvalidData, match="bump the contract's version"):
        publish_contract(same_version, config=config)
    assert len(fake.versions[NAME]) == 2


def test_templiqx_publish_is_a_command(fake: FakePromptApi) -> None:
    env = {
        "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY,
        "LANGFUSE_SECRET_KEY": SECRET_KEY,
        "LANGFUSE_BASE_URL": fake.base_url,
    }
    argv = [sys.executable, "-m", "templiqx_core._cli", "publish", str(CONTRACT)]
    done = subprocess.run(
        [*argv, "--label", "staging"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"published langfuse:{NAME}#1 ")
    assert fake.labelled(NAME, "staging") == 1


def test_the_publish_command_says_what_it_did(
    fake: FakePromptApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("LANGFUSE_BASE_URL", fake.base_url)
    argv = [str(CONTRACT), "--label", "staging", "--message", "m"]
    assert publish_command(argv) == 0
    assert capsys.readouterr().out.startswith(f"published langfuse:{NAME}#1 ")
    assert publish_command(argv) == 0
    assert capsys.readouterr().out.startswith(f"unchanged langfuse:{NAME}#1 ")
    assert publish_command([str(CONTRACT), "--label", "Not A Label"]) == 1
    assert "TQX_DATA_INVALID" in capsys.readouterr().err
    assert publish_command([]) == 2


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ("extension", Unsupported),
        ("clash", InvalidData),
        ("name", InvalidData),
    ],
)
def test_publish_refuses_what_langfuse_would_read_otherwise(
    change: str, error: type[Exception], fake: FakePromptApi, config: LangfuseConfig
) -> None:
    contract, _ = read_contract(CONTRACT)
    assert contract is not None
    document = copy.deepcopy(contract.model_dump(mode="json", by_alias=True))
    if change == "extension":
        document["extensions"] = {
            "langfuse.prompt": {"capability": "langfuse_prompt", "schema": {}, "value": {}}
        }
    elif change == "clash":
        document["context"]["tier"] = document["inputs"]["tier"]
    else:
        document["id"] = "a|b"
    with pytest.raises(error):
        publish_contract(type(contract).model_validate(document), config=config)
    assert fake.requests == {}


# -- load ------------------------------------------------------------------------------


def test_a_cached_load_makes_no_request_and_costs_under_50_us(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    first = load_contract(f"langfuse:{NAME}", config=config)
    before = fake.gets()
    rounds, batches = 2000, []
    for _ in range(5):  # the best batch, as timeit: a loaded machine preempts some
        started = time.perf_counter()
        for _ in range(rounds):
            assert load_contract(f"langfuse:{NAME}", config=config) is first
        batches.append((time.perf_counter() - started) / rounds)
    per_load = min(batches)
    assert fake.gets() == before
    assert per_load < 50e-6, f"{per_load * 1e6:.1f} us per cached load"


def test_a_label_moved_while_cached_is_served_stale_then_refreshed_once(
    fake: FakePromptApi, config: LangfuseConfig, tmp_path: Path
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    ttl = 1.0
    loaded = time.monotonic()
    assert load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=ttl).version == "1.0.0"
    publish_contract(edited(tmp_path, "1.1.0"), labels=["production"], config=config)
    requests = fake.gets()
    assert load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=ttl).version == "1.0.0"
    assert fake.gets() == requests  # within the TTL: no request, the moved label unseen
    time.sleep(max(0.0, loaded + ttl + 0.05 - time.monotonic()))
    fake.delay_s = 0.8  # a slow Langfuse: the refresh takes 0.8 s
    started = time.monotonic()
    stale = load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=ttl)
    assert time.monotonic() - started < 0.4  # at once, not after the refresh
    assert stale.version == "1.0.0"
    wait_for(lambda: load_contract(f"langfuse:{NAME}", config=config).version == "1.1.0")
    assert PROMPT_LINKS[NAME, "1.1.0"] == (NAME, 2)


def test_by_version_and_the_reference_forms(fake: FakePromptApi, config: LangfuseConfig) -> None:
    publish_contract(CONTRACT, labels=["staging"], config=config)
    assert load_contract(f"langfuse:{NAME}", version=1, config=config).id == NAME
    assert load_contract(f"langfuse:{NAME}#1", config=config).id == NAME
    assert load_contract(f"langfuse:{NAME}", label="staging", config=config).id == NAME
    for bad in (f"langfuse:{NAME}@staging#1", "langfuse:", f"{NAME}@staging"):
        with pytest.raises(InvalidData):
            load_contract(bad, config=config)
    with pytest.raises(InvalidData):
        load_contract(f"langfuse:{NAME}@staging", version=1, config=config)
    for ttl in (-1.0, float("nan")):
        with pytest.raises(InvalidData):
            load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=ttl)


def test_a_langfuse_that_compresses_what_its_client_accepts_is_read(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    """The prompt API's client asks for ``identity``: it reads answers undecoded (bounded),
    so a gzip httpx asked for by default failed every publish and load as unreadable."""
    fake.compress = True
    publish_contract(CONTRACT, labels=["staging"], config=config)
    assert load_contract(f"langfuse:{NAME}", label="staging", config=config).id == NAME
    assert load_contract(f"langfuse:{NAME}", version=1, config=config).id == NAME


def test_a_bool_version_is_refused_even_after_version_1_was_loaded(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    publish_contract(CONTRACT, config=config)
    assert load_contract(f"langfuse:{NAME}", version=1, config=config).id == NAME
    with pytest.raises(InvalidData, match="whole number"):  # True == 1 to a plain cache key
        load_contract(f"langfuse:{NAME}", version=True, config=config)


def test_a_cold_start_with_langfuse_down_serves_the_fallback_within_the_timeout(
    fake: FakePromptApi, config: LangfuseConfig, caplog: pytest.LogCaptureFixture
) -> None:
    fake.down = True
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "templiqx_langfuse"):
        contract = load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT)
        again = load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT)
    assert time.monotonic() - started < config.timeout_s + 0.5
    assert contract.id == again.id == NAME
    assert fake.gets() == 1  # one attempt: no retry, and the second load waits on nothing
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "fallback" in warnings[0].getMessage()
    with pytest.raises(IoFailure):
        load_contract(f"langfuse:{NAME}@staging", config=config)


def test_a_slow_langfuse_costs_the_configured_timeout_once(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    fake.delay_s = 3.0
    started = time.monotonic()
    load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT)
    assert time.monotonic() - started < config.timeout_s + 0.5
    started = time.monotonic()
    load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT)
    assert time.monotonic() - started < 0.5  # no second wait on Langfuse (1 s timeout)


@pytest.mark.parametrize("fault", ["invalid-config", "ui-edit", "digest", "text-prompt"])
def test_a_version_that_is_not_its_contract_is_refused_cold_and_on_refresh(
    fault: str, fake: FakePromptApi, config: LangfuseConfig, caplog: pytest.LogCaptureFixture
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    good = load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=0.01)
    last = fake.latest(NAME)
    if fault == "ui-edit":
        fake.edit_in_ui(NAME, ["production", "staging"])
    else:
        document = copy.deepcopy(last["config"])
        if fault == "invalid-config":
            document[CONFIG_KEY]["contract"]["messages"] = []
        elif fault == "digest":
            document[CONFIG_KEY]["contract"]["description"] = "changed in the UI"
        fake.add_version(NAME, last["prompt"], document, ["production", "staging"])
        if fault == "text-prompt":
            fake.latest(NAME)["type"] = "text"
            fake.latest(NAME)["prompt"] = "a text prompt"
    time.sleep(0.02)
    with caplog.at_level(logging.WARNING, "templiqx_langfuse"):
        assert load_contract(f"langfuse:{NAME}", config=config) is good
        wait_for(lambda: fake.gets() >= 2 and caplog.records != [])
        wait_for(lambda: any("keeping the last good" in r.getMessage() for r in caplog.records))
    assert load_contract(f"langfuse:{NAME}", config=config) is good
    # Cold, the same version is refused: the fallback serves, or the typed error.
    assert load_contract(f"langfuse:{NAME}@staging", config=config, fallback=CONTRACT).id == NAME
    diagnostics = read_contract(f"langfuse:{NAME}#2")[1]
    assert diagnostics
    assert diagnostics[0].code == "TQX_DATA_INVALID"


def test_a_failing_refresh_keeps_the_last_good_copy(
    fake: FakePromptApi, config: LangfuseConfig, caplog: pytest.LogCaptureFixture
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    good = load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=0.01)
    fake.down = True
    time.sleep(0.02)
    with caplog.at_level(logging.WARNING, "templiqx_langfuse"):
        assert load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=0.01) is good
        wait_for(lambda: any("refresh failed" in r.getMessage() for r in caplog.records))
    assert load_contract(f"langfuse:{NAME}", config=config) is good


def test_1000_threads_after_the_ttl_make_one_refresh_request(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    load_contract(f"langfuse:{NAME}", config=config, cache_ttl_s=0.05)
    fake.delay_s = 0.2  # the refresh is in flight while every thread loads
    time.sleep(0.06)
    before = fake.gets()
    barrier = threading.Barrier(50)
    results: list[str] = []

    def load() -> None:
        barrier.wait(timeout=10)
        for _ in range(20):
            results.append(load_contract(f"langfuse:{NAME}", config=config).id)

    threads = [threading.Thread(target=load) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 1000
    wait_for(lambda: fake.gets() == before + 1)
    time.sleep(0.3)
    assert fake.gets() == before + 1


def test_concurrent_cold_loads_share_one_request(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    fake.delay_s = 0.1

    with ThreadPoolExecutor(50) as pool:
        list(pool.map(lambda _: load_contract(f"langfuse:{NAME}", config=config), range(50)))
    assert fake.gets() == 2  # publish's look at the latest version, then one load


# -- what runs ---------------------------------------------------------------------------


def test_the_same_fingerprint_from_langfuse_the_file_and_the_fallback(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    fetched = load_contract(f"langfuse:{NAME}", config=config)
    clear_cache()
    fake.down = True
    fallback = load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT)
    runtime = ScriptedRuntime([ScriptedSuccess(output={"queue": "billing"})])
    receipts = [
        execute_contract(source, REQUEST, runtime=runtime).result
        for source in (fetched, fallback, CONTRACT)
    ]
    assert all(r is not None for r in receipts)
    assert len({r.model_dump_json() for r in receipts if r is not None}) == 1
    assert PROMPT_LINKS[NAME, "1.0.0"] == (NAME, 1)


def test_the_cli_takes_a_langfuse_reference_where_it_takes_a_contract_path(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    publish_contract(CONTRACT, labels=["staging"], config=config)
    env = {
        "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY,
        "LANGFUSE_SECRET_KEY": SECRET_KEY,
        "LANGFUSE_BASE_URL": fake.base_url,
    }

    def execute(reference: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "templiqx_core._cli", "execute", reference]
        return subprocess.run(
            [*command, "--eval", "billing", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    envelopes = set()
    for reference in (f"langfuse:{NAME}@staging", f"langfuse:{NAME}#1", str(CONTRACT)):
        done = execute(reference)  # the scripted runtime (--eval) runs it
        assert done.returncode == 0, done.stderr
        envelopes.add(done.stdout)
    assert len(envelopes) == 1  # the same receipt, fingerprints and all
    missing = execute(f"langfuse:{NAME}@nope")
    assert missing.returncode != 0
    assert "TQX_NOT_FOUND" in missing.stdout + missing.stderr


# -- gate a label ------------------------------------------------------------------------


def failing(tmp_path: Path) -> Path:
    """A revision whose eval fixture fails its own assertion (the gate fails)."""
    text = edited(tmp_path, "2.0.0").read_text("utf-8")
    target = tmp_path / "failing.yaml"
    target.write_text(text.replace("equals: billing}", "equals: tech}"), "utf-8")
    return target


@pytest.mark.parametrize("gate", ["passing", "failing"])
def test_eval_promotes_the_version_it_ran_only_when_the_gate_passes(
    gate: str,
    fake: FakePromptApi,
    config: LangfuseConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from templiqx_core._cli import main

    for name, value in (
        ("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY),
        ("LANGFUSE_SECRET_KEY", SECRET_KEY),
        ("LANGFUSE_BASE_URL", fake.base_url),
        ("LANGFUSE_TRACING_ENABLED", "false"),
    ):
        monkeypatch.setenv(name, value)
    publish_contract(CONTRACT, labels=["production"], config=config)
    candidate = edited(tmp_path, "1.1.0") if gate == "passing" else failing(tmp_path)
    staged = publish_contract(candidate, labels=["staging"], config=config).version
    argv = ["eval", f"langfuse:{NAME}@staging", "--runtime", "scripted", "--no-progress"]
    code = main([*argv, "--min-pass-rate", "1", "--promote", "production"])
    if gate == "passing":
        assert code == 0, capsys.readouterr()
        assert fake.labelled(NAME, "production") == staged
    else:
        assert code == 2
        assert fake.labelled(NAME, "production") == 1  # nothing moved


def test_promote_is_refused_with_a_shard_and_a_failed_promotion_exits_1(
    fake: FakePromptApi, config: LangfuseConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from templiqx_core._cli import main

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("LANGFUSE_BASE_URL", fake.base_url)
    monkeypatch.setenv("LANGFUSE_TRACING_ENABLED", "false")
    publish_contract(CONTRACT, labels=["staging"], config=config)
    argv = ["eval", f"langfuse:{NAME}@staging", "--runtime", "scripted", "--no-progress"]
    assert main([*argv, "--promote", "production", "--shard", "1/2"]) == 1
    assert main([*argv, "--promote", "latest"]) == 1  # Langfuse moves 'latest' itself
    assert fake.requests["PATCH /api/public/v2/prompts/support-triage/versions/1"] == 0
    fake.lose_label_updates = True  # the version vanished meanwhile: the server says 404
    assert main([*argv, "--promote", "production"]) == 1
    assert fake.labelled(NAME, "production") is None


def test_a_generation_from_a_fetched_contract_links_to_its_prompt_version(
    fake: FakePromptApi,
    config: LangfuseConfig,
    make_runtime: Any,
    exporter: Any,
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    contract = load_contract(f"langfuse:{NAME}", config=config)
    runtime = make_runtime()
    assert execute_contract(contract, REQUEST, runtime=runtime).result is not None
    runtime.tracing.close()  # flush the adapter-owned processor
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    # What the server's OTel ingestion reads to link a GENERATION to a prompt version.
    assert attributes["langfuse.observation.type"] == "generation"
    assert attributes["langfuse.observation.prompt.name"] == NAME
    assert attributes["langfuse.observation.prompt.version"] == 1


def test_merged_shards_promote_the_version_they_name(
    fake: FakePromptApi, config: LangfuseConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from templiqx_core._cli import main

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("LANGFUSE_BASE_URL", fake.base_url)
    monkeypatch.setenv("LANGFUSE_TRACING_ENABLED", "false")
    publish_contract(CONTRACT, labels=["staging"], config=config)
    pinned = f"langfuse:{NAME}#1"
    shards, codes = [], []
    for shard in ("1/2", "2/2"):
        output = tmp_path / f"shard-{shard[0]}.json"
        argv = ["eval", pinned, "--runtime", "scripted", "--shard", shard, "--no-progress"]
        codes.append(main([*argv, "--format", "json", "--output", str(output)]))
        shards += ["--merge", str(output)]
    assert sorted(codes) == [0, 5]  # the contract's one case: the other shard ran none
    staged = f"langfuse:{NAME}@staging"
    assert main(["eval", staged, *shards, "--promote", "production"]) == 1  # which version?
    assert main(["eval", pinned, *shards, "--min-pass-rate", "1", "--promote", "production"]) == 0
    assert fake.labelled(NAME, "production") == 1


class Triage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: Literal["billing", "tech"]


def test_a_typed_contract_keeps_the_last_copy_its_model_accepts(
    fake: FakePromptApi, config: LangfuseConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    publish_contract(CONTRACT, labels=["production"], config=config)
    ref = f"langfuse:{NAME}"
    good = load_contract(ref, config=config, cache_ttl_s=0.01, output_model=Triage)
    widened = edited(tmp_path, "1.1.0")
    widened.write_text(widened.read_text("utf-8").replace("[billing, tech]", "[billing]"))
    publish_contract(widened, labels=["production"], config=config)
    time.sleep(0.02)
    with caplog.at_level(logging.WARNING, "templiqx_langfuse"):
        assert load_contract(ref, config=config, output_model=Triage) is good
        wait_for(lambda: any("does not match Triage" in r.getMessage() for r in caplog.records))
    assert load_contract(ref, config=config, output_model=Triage) is good
    assert load_contract(ref, config=config).version == "1.1.0"  # untyped: the new one


def test_a_host_langfuse_client_is_used_and_left_open(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    from langfuse import Langfuse

    # One client per test process: the SDK keeps one per public key, first settings win.
    publish_contract(CONTRACT, labels=["production", "staging"], config=config)
    host = Langfuse(
        public_key=PUBLIC_KEY,
        secret_key=SECRET_KEY,
        base_url=fake.base_url,
        tracing_enabled=False,
    )
    try:
        assert load_contract(f"langfuse:{NAME}", client=host).id == NAME
        assert load_contract(f"langfuse:{NAME}@staging", client=host).id == NAME
        assert host.api.prompts.get(NAME).version == 1  # still open, still usable
    finally:
        host.shutdown()


def test_concurrent_cold_loads_with_langfuse_down_serve_the_fallback_once(
    fake: FakePromptApi, config: LangfuseConfig, caplog: pytest.LogCaptureFixture
) -> None:
    fake.delay_s = 3.0

    def load(_: int) -> str:
        return load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT).id

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "templiqx_langfuse"), ThreadPoolExecutor(20) as pool:
        assert set(pool.map(load, range(20))) == {NAME}
    assert time.monotonic() - started < config.timeout_s + 0.5
    assert fake.gets() == 1
    assert len([r for r in caplog.records if "fallback" in r.getMessage()]) == 1


def test_an_answer_that_is_no_prompt_is_invalid_data(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    fake.garbage = True
    with pytest.raises(InvalidData, match="could not be read"):
        load_contract(f"langfuse:{NAME}", config=config)
    assert load_contract(f"langfuse:{NAME}", config=config, fallback=CONTRACT).id == NAME


def test_a_contract_with_an_exponent_float_loads_as_published(
    fake: FakePromptApi, config: LangfuseConfig
) -> None:
    """JSON writes 0.00001 as 1e-05, which YAML 1.1 reads as a string: numbers stay numbers
    and strings strings, so the digest holds."""
    contract, _ = read_contract(CONTRACT)
    assert contract is not None
    document = copy.deepcopy(contract.model_dump(mode="json", by_alias=True))
    document["output_schema"]["properties"]["scale"] = {"type": "number", "multipleOf": 0.00001}
    document["runtime_policy"]["ceiling"] = 1e20
    document["runtime_policy"]["note"] = "1e5"  # a string that reads as a number unquoted
    published = type(contract).model_validate(document)
    publish_contract(published, labels=["production"], config=config)
    loaded = load_contract(f"langfuse:{NAME}", config=config)
    assert loaded.model_dump() == published.model_dump()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_langfuse_trickling_its_answer_costs_the_timeout_not_a_read_timeout_per_byte(
    asynchronous: bool,
) -> None:
    import asyncio

    import httpx

    from templiqx_langfuse._prompts import async_api
    from tests.loopback import LoopbackModelServer, Reply

    trickle = Reply(headers={"content-type": "application/json"}, body=b"{}" * 50, trickle_s=0.2)
    server = LoopbackModelServer(lambda request: trickle).start()
    base_url = server.base_url.removesuffix("/v1")
    config = LangfuseConfig(
        public_key=PUBLIC_KEY, secret_key=SECRET_KEY, base_url=base_url, timeout_s=1.0
    )

    async def get() -> object:  # the dataset API of an eval: a client of the running loop
        return await async_api(config, None).datasets.get("d")

    started = time.monotonic()
    try:
        if asynchronous:
            with pytest.raises(httpx.TimeoutException):
                asyncio.run(get())
        else:
            with pytest.raises(IoFailure):
                load_contract(f"langfuse:{NAME}", config=config)
    finally:
        server.stop()
    assert time.monotonic() - started < 3.0  # 100 bytes at 0.2 s each would take 20 s
