"""Adversary round 4: one probe per surface, each against the real thing.

Real forks, threads each with its own event loop, trio and uvloop hosts, a stalled loop,
hostile case and results files, a Langfuse refusing dataset and prompt calls, 1000
concurrent calls, malformed string templates, odd pydantic models, a repairing runtime
against huge answers, and hostile prompt API answers. Every input ends in a typed
``TQX_*`` error or a correct result.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import itertools
import json
import os
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import uvloop
from pydantic import BaseModel, create_model

from templiqx_core import (
    CompiledMessage,
    ExecutionRequest,
    InvalidData,
    IoFailure,
    RenderRequest,
    RepairingRuntime,
    RuntimeFailureError,
    ScriptedRuntime,
    ScriptedSuccess,
    TypedContract,
    Unsupported,
    codes,
    compile_contract,
)
from templiqx_core._cli import main
from templiqx_core._compiler import parse_contract
from templiqx_langfuse import (
    LangfuseConfig,
    LangfuseTracedRuntime,
    ModelConfig,
    load_contract,
    publish_contract,
)
from tests.conftest import MODEL_KEY
from tests.evals.conftest import GREETING, GreetingModel, write_cases
from tests.evals.fake_langfuse import PUBLIC_KEY as EVAL_PUBLIC_KEY
from tests.evals.fake_langfuse import SECRET_KEY as EVAL_SECRET_KEY
from tests.evals.fake_langfuse import FakeLangfuse
from tests.langfuse.fake_prompts import PUBLIC_KEY, SECRET_KEY, FakePromptApi, clear_cache
from tests.loopback import LoopbackModelServer, ServerRequest, chat_completion, json_reply
from tests.reliability.test_hostile_fork import run_in_child
from tests.slow_upstream import Upstream, slow_upstream

PROMPT_CONTRACT = Path(__file__).parents[1] / "langfuse" / "support.yaml"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with slow_upstream(0.05) as server:
        yield server


def runtime_for(base_url: str, timeout_s: float = 10.0) -> LangfuseTracedRuntime:
    model = ModelConfig(base_url=base_url, api_key=MODEL_KEY, model="m", timeout_s=timeout_s)
    return LangfuseTracedRuntime(model, LangfuseConfig(tracing=False))


def saying(request: ExecutionRequest, text: str) -> ExecutionRequest:
    """The request with its last message replaced (the echo upstream answers with it)."""
    interaction = request.interaction
    messages = [*interaction.messages[:-1], CompiledMessage(role="user", content=text)]
    return ExecutionRequest(interaction=interaction.model_copy(update={"messages": messages}))


# -- hosts: fork, threads with loops, trio, uvloop, a stalled loop, 1000 calls -----------


def test_children_forked_after_async_and_sync_use_each_call_on_pools_of_their_own(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    """A pre-fork server: the parent warmed both pools, then forks workers that call
    through the same runtime object, sync and async, while the parent keeps calling."""
    runtime = runtime_for(upstream.base_url)

    async def acall(text: str) -> object:
        return (await runtime.aexecute(saying(greeting_request, text))).output

    def worker(name: str) -> object:
        sync = runtime.execute(saying(greeting_request, f"{name} sync")).output
        return [sync, asyncio.run(acall(f"{name} async"))]

    assert asyncio.run(acall("parent")) == {"greeting": "parent"}
    assert runtime.execute(saying(greeting_request, "warm")).output == {"greeting": "warm"}
    children = [run_in_child(lambda n=n: worker(f"child{n}"))[1] for n in range(3)]  # type: ignore[misc]
    assert asyncio.run(acall("parent again")) == {"greeting": "parent again"}
    for n, outcome in enumerate(children):
        expected = [{"greeting": f"child{n} sync"}, {"greeting": f"child{n} async"}]
        assert outcome() == {"ok": expected}
    runtime.close()


def test_sixteen_threads_each_running_its_own_event_loops_share_one_runtime(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    runtime = runtime_for(upstream.base_url)
    outputs: list[object] = []
    errors: list[BaseException] = []

    async def burst(thread: int) -> list[object]:
        calls = (runtime.aexecute(saying(greeting_request, f"{thread}-{i}")) for i in range(20))
        return [receipt.output for receipt in await asyncio.gather(*calls)]

    def host(thread: int) -> None:
        try:
            for _ in range(2):  # a second loop on the same thread, as asyncio.run twice
                outputs.extend(asyncio.run(burst(thread)))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=host, args=(t,)) for t in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert len(outputs) == 16 * 2 * 20
    assert {"greeting": "15-19"} in outputs
    runtime.close()
    assert not runtime._wiring.clients._async  # every loop's pool released


def test_a_trio_host_gets_a_typed_error_naming_asyncio_and_the_thread_recipe_works(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    """Before: ``TQX_RUNTIME_PERMANENT unexpected RuntimeError``, and ``aclose`` raised
    ``RuntimeError`` with the pools left open (the close counted as done)."""
    runtime = runtime_for(upstream.base_url)
    seen: dict[str, Any] = {}

    async def host() -> None:
        with pytest.raises(Unsupported, match="asyncio") as refused:
            await runtime.aexecute(greeting_request)
        seen["code"] = refused.value.code
        seen["output"] = (
            await trio.to_thread.run_sync(runtime.execute, saying(greeting_request, "trio"))
        ).output
        await runtime.aclose()

    trio.run(host)
    assert seen == {"code": codes.UNSUPPORTED, "output": {"greeting": "trio"}}
    assert runtime.closed
    assert runtime._wiring.clients.sync.is_closed  # released, not only marked closed


def test_uvloop_hosts_run_concurrent_calls_and_close_on_their_loop(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    runtime = runtime_for(upstream.base_url)

    async def host() -> list[object]:
        calls = (runtime.aexecute(saying(greeting_request, f"uv {i}")) for i in range(50))
        outputs = [receipt.output for receipt in await asyncio.gather(*calls)]
        await runtime.aclose()
        return outputs

    assert uvloop.run(host()) == [{"greeting": f"uv {i}"} for i in range(50)]
    assert runtime.closed


def test_a_loop_stalled_past_the_deadline_ends_the_call_at_once_when_it_resumes(
    greeting_request: ExecutionRequest,
) -> None:
    """The loop blocked 2 s under a call with a 1 s deadline whose answer arrives at
    0.5 s: the call ends ``TQX_RUNTIME_TIMEOUT`` as soon as the loop runs again."""

    def late(request: ServerRequest) -> Any:
        time.sleep(0.5)
        return json_reply(chat_completion({"greeting": "late"}))

    server = LoopbackModelServer(late).start()
    runtime = runtime_for(server.base_url, timeout_s=1.0)

    async def host() -> tuple[str, float]:
        task = asyncio.create_task(runtime.aexecute(greeting_request))
        await asyncio.sleep(0.1)
        time.sleep(2.0)  # a host's blocking call on the loop
        resumed = time.monotonic()
        with pytest.raises(RuntimeFailureError) as failed:
            await task
        return failed.value.code, time.monotonic() - resumed

    try:
        code, after = asyncio.run(host())
    finally:
        runtime.close()
        server.stop()
    assert code == codes.RUNTIME_TIMEOUT
    assert after < 0.5


def test_one_thousand_concurrent_async_calls_all_get_their_own_answer(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    runtime = runtime_for(upstream.base_url, timeout_s=30.0)

    async def host() -> list[object]:
        calls = (runtime.aexecute(saying(greeting_request, f"c{i}")) for i in range(1000))
        return [receipt.output for receipt in await asyncio.gather(*calls)]

    assert asyncio.run(host()) == [{"greeting": f"c{i}"} for i in range(1000)]
    assert upstream.max_in_flight > 100  # truly concurrent, not serialised
    runtime.close()


# -- the eval command: case files, --merge, --shard, a Langfuse refusing datasets ----------


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[GreetingModel]:
    greeting = GreetingModel()
    server = LoopbackModelServer(greeting).start()
    for name in [k for k in os.environ if k.startswith(("LANGFUSE_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPLIQX_MODEL_BASE_URL", server.base_url)
    monkeypatch.setenv("TEMPLIQX_MODEL", "loopback-model")
    monkeypatch.setenv("TEMPLIQX_MODEL_API_KEY", "sk-loopback")
    yield greeting
    server.stop()


def cli(*args: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit:  # argparse's usage errors, as in the console script
            code = exit.code if isinstance(exit.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def case_line(case_id: str, **extra: Any) -> str:
    case = {"id": case_id, "inputs": {"name": "Ryan"}, "context": {"organization": "Blinqx"}}
    return json.dumps({**case, "expected_output": {"greeting": "Hello Ryan"}, **extra}) + "\n"


@pytest.mark.usefixtures("model")
def test_hostile_case_files_are_typed_errors_and_control_characters_keep_junit_valid(
    tmp_path: Path,
) -> None:
    """Before: a case id holding control characters (or a model answer quoting them) made
    a JUnit file no CI can parse."""
    nested = '{"id": "x", "inputs": {"name": ' + "[" * 5000 + "]" * 5000 + "}}\n"
    hostile = {
        "dup.jsonl": (case_line("a") + case_line("a"), "appears twice"),
        "nested.jsonl": (nested, "not a JSON object"),
        "nested.yaml": (
            "- id: x\n  inputs: {name: " + "[" * 20000 + "]" * 20000 + "}\n",
            "not YAML",
        ),
        "number-id.jsonl": ('{"id": 5}\n', "id: Input should be a valid string"),
        "nan.jsonl": ('{"id": "n", "metadata": {"x": NaN}}\n', "not a JSON object"),
        "not-list.yaml": ("cases: []\n", "expected a list of cases"),
    }
    for name, (text, why) in hostile.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        code, _, err = cli("eval", GREETING, "--runtime", "langfuse", "--cases", tmp_path / name)
        assert code == 1, name
        assert f"{codes.DATA_INVALID}:" in err, (name, err)
        assert why in err, (name, err)
    (tmp_path / "latin1.jsonl").write_bytes(
        case_line("l").replace("Ryan", "Ry\xe9n").encode("latin-1")
    )
    code, _, err = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", tmp_path / "latin1.jsonl"
    )
    assert code == 1
    assert "cannot read (UnicodeDecodeError)" in err

    (tmp_path / "ctrl.jsonl").write_text(case_line("a\x01b\x1b[31m\x00"), encoding="utf-8")
    report = tmp_path / "report.xml"
    code, _, _ = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", tmp_path / "ctrl.jsonl",
        "--format", "junit", "--output", report,
    )  # fmt: skip
    assert code == 0
    (case,) = ET.parse(report).getroot().iter("testcase")
    assert case.get("name") == "a\ufffdb\ufffd[31m\ufffd"


@pytest.mark.usefixtures("model")
def test_merging_another_version_or_a_summary_that_is_no_object_is_refused(
    tmp_path: Path,
) -> None:
    """Before: a shard of another contract version merged silently under this version's
    name, and a summary that is no object ended ``internal error (AttributeError)``."""
    cases = tmp_path / "cases.jsonl"
    write_cases(cases, ["Ryan", "Ada"])
    ran = tmp_path / "ran.json"
    args = ("--runtime", "langfuse", "--cases", cases, "--format", "json", "--output", ran)
    assert cli("eval", GREETING, *args)[0] == 0
    text = ran.read_text(encoding="utf-8")
    assert '"contract_version":"0.1.0"' in text
    (tmp_path / "v9.json").write_text(text.replace('"0.1.0"', '"9.9.9"'), encoding="utf-8")
    head = text.split('"summary"')[0]
    (tmp_path / "five.json").write_text(head + '"summary": 5}\n', encoding="utf-8")

    code, _, err = cli("eval", GREETING, "--merge", ran, "--merge", tmp_path / "v9.json")
    assert code == 1
    assert "holds results of version '9.9.9', not '0.1.0'" in err
    code, out, err = cli("eval", GREETING, "--merge", ran, "--merge", tmp_path / "five.json")
    assert code == 0, err  # read as a cut-short file: its cases count once
    assert "2/2 passed" in out
    # A shard cut short (no summary) of another contract: its first line says whose it is.
    other = tmp_path / "other-cut.json"
    other.write_text(text.split("\n", 2)[0].replace('"greeting"', '"triage"') + "\n")
    for flag in ("--merge", "--resume"):
        more = ("--merge", ran) if flag == "--merge" else ("--runtime", "langfuse")
        code, _, err = cli("eval", GREETING, *more, flag, other)
        assert code == 1
        assert f"{flag}: {other} holds results of 'triage', not 'greeting'" in err


@pytest.mark.usefixtures("model")
def test_shard_edge_values_are_refused_or_split_every_case_exactly_once(tmp_path: Path) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada", "Grace", "Linus", "Alan"])
    for bad in ["0/0", "1/0", "0/1", "2/1", "1/-1", "1/2/3", "", "/", "1.0/2", "a/b"]:
        code, out, err = cli(
            "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--shard", bad
        )
        assert (code, out) == (2, ""), bad  # a usage error, as every flag value out of range
        assert "argument --shard: shard" in err.splitlines()[-1], bad
    for count in (1, 3, 7, 10**20):
        ran: list[str] = []
        for index in range(1, min(count, 7) + 1):
            out = tmp_path / f"{count}-{index}.json"
            args = ("--cases", cases, "--shard", f"{index}/{count}", "--format", "json")
            code, _, err = cli("eval", GREETING, "--runtime", "langfuse", *args, "--output", out)
            assert code == 0 or (code == 5 and "no case ran" in err), err  # 5: an empty shard
            ran += [c["id"] for c in json.loads(out.read_text("utf-8"))["cases"]]
        if count <= 7:
            assert sorted(ran) == ["ada", "alan", "grace", "linus", "ryan"]
        else:
            assert len(ran) == len(set(ran))  # shards beyond the 7th hold the rest


@pytest.mark.parametrize("status", [401, 404, 503])
def test_a_langfuse_refusing_dataset_calls_is_an_io_error_or_one_warning(
    status: int, model: GreetingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading cases from a refused dataset is ``TQX_IO`` (was ``TQX_DATA_INVALID`` for
    an outage); an experiment Langfuse refuses changes no result."""
    langfuse = FakeLangfuse(fail_api=status).start()
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", EVAL_PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", EVAL_SECRET_KEY)
    monkeypatch.setenv("LANGFUSE_BASE_URL", langfuse.base_url)
    try:
        code, _, err = cli("eval", GREETING, "--runtime", "langfuse", "--cases", "langfuse:ds")
        assert code == 1
        assert f"{codes.IO}: Langfuse dataset 'ds': cannot read items (HTTP {status})" in err
        cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
        out = tmp_path / "results.json"
        args = ("--cases", cases, "--format", "json", "--output", out, "--no-progress")
        code, _, err = cli("eval", GREETING, "--runtime", "langfuse", *args)
        assert code == 0, err
        assert json.loads(out.read_text("utf-8"))["summary"]["passed"] == 2
    finally:
        langfuse.stop()


# -- string templates, typed contracts, repair -----------------------------------------

TEMPLATE_CONTRACT = """api_version: templiqx/v1alpha1
id: t
version: "1"
inputs:
  subject: {schema: {type: string}, required: true}
output_schema: {type: object}
messages:
  - role: user
    content: CONTENT
"""


def test_malformed_or_huge_string_templates_are_typed_and_linear() -> None:
    def parsed(content: str) -> tuple[Any, list[str]]:
        contract, found = parse_contract(TEMPLATE_CONTRACT.replace("CONTENT", json.dumps(content)))
        return contract, [f"{d.code}: {d.message}" for d in found]

    deep = "[" * 100_000 + "]" * 100_000
    malformed = {
        "{{ inputs.subject | format_date(format=" + deep + ") }}": "expected a JSON literal",
        "{{ inputs.subject | format_number(decimals=NaN) }}": "expected a JSON literal",
        "{{ inputs.subject | format_number(decimals=1, decimals=2) }}": "given twice",
        "{{ inputs.subject | nope }}": "unknown filter 'nope'",
        "{{ inputs.subject | trim": "unclosed or malformed placeholder",
        "{{" * 200_000: "expected a reference path",
    }
    for content, why in malformed.items():
        contract, found = parsed(content)
        assert contract is None
        assert found[0].startswith(f"{codes.TEMPLATE_SYNTAX}: ")
        assert why in found[0]

    request = RenderRequest(inputs={"subject": "s"})
    elapsed = []
    for count in (10_000, 40_000):
        started = time.monotonic()
        contract, found = parsed("{{ inputs.subject }}" * count)
        compiled = compile_contract(contract, request)
        elapsed.append(time.monotonic() - started)
        assert compiled.interaction is not None
        assert compiled.interaction.messages[0].content == "s" * count
    assert elapsed[1] < 10 * elapsed[0] + 1.0  # 4x the placeholders: linear, not quadratic


class _Anything(BaseModel):
    x: Any = None


class _Raw(BaseModel):
    data: bytes


def test_odd_pydantic_models_are_typed_errors_at_definition_or_compile() -> None:
    """Before: bytes that are not UTF-8 raised ``UnicodeDecodeError`` and a model nested
    300 deep raised ``RecursionError``, both untyped."""
    typed = TypedContract.define(
        id="odd", version="1", output=_Anything, inputs=_Raw, messages=[("user", "hi")]
    )
    runtime = ScriptedRuntime([ScriptedSuccess(output={"x": 1})])
    with pytest.raises(InvalidData, match=r"inputs: a value JSON cannot hold"):
        typed.run(runtime, _Raw(data=b"\xff\x00"))
    assert typed.run(runtime, _Raw(data=b"fine")) == _Anything(x=1)

    nested: type[BaseModel] = create_model("Level0", v=(int, ...))
    for level in range(300):
        nested = create_model(f"Level{level + 1}", inner=(nested, ...))
    with pytest.raises(InvalidData, match="nested too deeply"):
        TypedContract.define(id="deep", version="1", output=nested, messages=[("user", "hi")])


def test_repair_bounds_each_echoed_answer_and_refuses_a_deadline_that_is_no_number(
    greeting_request: ExecutionRequest,
) -> None:
    """Before: a schema-invalid answer of 1.5 MB was echoed whole, so each try's request
    grew by 1.5 MB (4 tries: 4.5 MB sent); ``deadline_s="5"`` raised ``TypeError``."""
    sizes: list[int] = []

    def huge_and_invalid(request: ServerRequest) -> Any:
        sizes.append(len(request.body))
        return json_reply(chat_completion({"greeting": 5, "pad": ["y" * 10] * 100_000}))

    server = LoopbackModelServer(huge_and_invalid).start()
    runtime = runtime_for(server.base_url)
    for wrong in ("5", True, float("nan"), -1):
        with pytest.raises(InvalidData, match="deadline_s"):
            RepairingRuntime(runtime, deadline_s=wrong)  # type: ignore[arg-type]
    repairing = RepairingRuntime(runtime, attempts=4, deadline_s=30.0)
    try:
        assert not repairing.execute(greeting_request).output_schema_valid
        assert not asyncio.run(repairing.aexecute(greeting_request)).output_schema_valid
    finally:
        repairing.close()
        server.stop()
    assert len(sizes) == 8
    growth = [later - earlier for earlier, later in itertools.pairwise(sizes[:4])]
    assert all(step < 100_000 for step in growth), sizes  # 64 KiB of answer per try


# -- Langfuse prompts: hostile answers to load_contract, a refusing publish ----------------


class HostilePrompts(FakePromptApi):
    """The prompt API answering a GET with ``edit`` applied, or ``status``."""

    def __init__(self) -> None:
        super().__init__()
        self.edit: Any = None
        self.status = 0

    def _get(self, name: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        status, answer = super()._get(name, query)
        if self.status:
            return self.status, {"message": "refused"}
        if self.edit is None or status != 200:
            return status, answer
        answer = copy.deepcopy(answer)
        self.edit(answer)
        return status, answer

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[int, Any]:
        if method == "POST" and self.status:
            return self.status, {"message": "refused"}
        return super()._route(method, path, query, body)


def _set(key: str, value: Any) -> Any:
    return lambda answer: answer.__setitem__(key, value)


@pytest.fixture
def prompts() -> Iterator[tuple[HostilePrompts, LangfuseConfig]]:
    clear_cache()
    with HostilePrompts() as api:
        config = LangfuseConfig(
            public_key=PUBLIC_KEY, secret_key=SECRET_KEY, base_url=api.base_url, timeout_s=2.0
        )
        publish_contract(PROMPT_CONTRACT, labels=["production"], config=config)
        yield api, config
    clear_cache()


def test_hostile_prompt_answers_are_invalid_data_and_the_fallback_serves(
    prompts: tuple[HostilePrompts, LangfuseConfig],
) -> None:
    """Before: a version past any integer Langfuse stores (10**30) was accepted and every
    generation's prompt link then failed OTel's encoding (logged, link dropped)."""
    api, config = prompts
    edits = {
        "version out of range": (_set("version", 10**30), "is no prompt version"),
        "version zero": (_set("version", 0), "is no prompt version"),
        "version text": (_set("version", "abc"), "could not be read"),
        "prompt a number": (_set("prompt", 5), "could not be read"),
        "labels null": (_set("labels", None), "could not be read"),
        "config a list": (_set("config", [1, 2]), "holds no templiqx contract"),
        "a text prompt": (_set("type", "text"), "could not be read"),
        "huge config": (  # read up to MAX_PROMPT_BYTES (4 MiB), not 20 MB into memory
            lambda a: a["config"].__setitem__("pad", "x" * 20_000_000),
            "could not be read",
        ),
        "config within the bound": (
            lambda a: a["config"].__setitem__("pad", "x" * 2_000_000),
            None,  # the contract is still the published one: loads
        ),
    }
    for name, (edit, why) in edits.items():
        api.edit = edit
        clear_cache()
        if why is None:
            assert load_contract("langfuse:support-triage", config=config).id == "support-triage"
            continue
        with pytest.raises(InvalidData, match=why):
            load_contract("langfuse:support-triage", config=config)
        clear_cache()
        fallback = load_contract("langfuse:support-triage", config=config, fallback=PROMPT_CONTRACT)
        assert fallback.id == "support-triage", name


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_a_langfuse_refusing_prompt_calls_is_an_io_error_for_load_and_publish(
    status: int, prompts: tuple[HostilePrompts, LangfuseConfig], tmp_path: Path
) -> None:
    api, config = prompts
    api.status = status
    clear_cache()
    with pytest.raises(IoFailure, match=f"HTTP {status}"):
        load_contract("langfuse:support-triage", config=config)
    assert (
        load_contract("langfuse:support-triage", config=config, fallback=PROMPT_CONTRACT).id
        == "support-triage"
    )
    with pytest.raises(IoFailure, match=f"HTTP {status}"):
        publish_contract(PROMPT_CONTRACT, labels=["production"], config=config)


def test_langfuse_api_calls_read_no_proxy_from_the_environment(
    prompts: tuple[HostilePrompts, LangfuseConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every model and export call: a proxy is opt-in. (httpx mounts no environment
    proxy beside a transport it is given; one would bypass the 4 MiB answer bound.)"""
    api, config = prompts
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    away = config.model_copy(update={"timeout_s": 2.5})  # clients are per configuration
    clear_cache()
    asked = api.gets()
    assert load_contract("langfuse:support-triage", config=away).id == "support-triage"
    assert api.gets() > asked  # Langfuse itself answered
    assert publish_contract(PROMPT_CONTRACT, labels=["staging"], config=away).version == 1
