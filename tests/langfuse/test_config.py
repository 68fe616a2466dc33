from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr, ValidationError

from templiqx_core import InvalidData
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from templiqx_langfuse._config import (
    ENV_LANGFUSE_PUBLIC_KEY,
    ENV_LANGFUSE_SECRET_KEY,
    ENV_MODEL_API_KEY,
    ENV_OPENAI_API_KEY,
)

ENV_MODEL, ENV_MODEL_STRICT, ENV_MODEL_TIMEOUT_S = (
    "TEMPLIQX_MODEL",
    "TEMPLIQX_MODEL_STRICT",
    "TEMPLIQX_MODEL_TIMEOUT_S",
)
ENV_MODEL_BASE_URL, ENV_OPENAI_BASE_URL = "TEMPLIQX_MODEL_BASE_URL", "OPENAI_BASE_URL"
ENV_LANGFUSE_BASE_URL, ENV_LANGFUSE_HOST = "LANGFUSE_BASE_URL", "LANGFUSE_HOST"

SECRET = "sk-do-not-echo-0123456789"


def test_env_precedence_and_defaults() -> None:
    env = {
        ENV_OPENAI_API_KEY: "sk-openai-xyz",
        ENV_MODEL: "gpt-4o-mini",
        ENV_OPENAI_BASE_URL: "https://gateway.example/v1/",
    }
    config = ModelConfig.from_env(env)
    key = config.api_key.get_secret_value()
    assert (config.base_url, key, config.model, config.timeout_s, config.strict) == (
        "https://gateway.example/v1",
        "sk-openai-xyz",
        "gpt-4o-mini",
        60.0,
        "auto",
    )
    env |= {
        ENV_MODEL_API_KEY: "sk-templiqx",
        ENV_MODEL_BASE_URL: "http://127.0.0.1:8000/v1",
        ENV_MODEL_TIMEOUT_S: "2.5",
    }
    config = ModelConfig.from_env(env)
    assert (config.base_url, config.api_key.get_secret_value(), config.timeout_s) == (
        "http://127.0.0.1:8000/v1",
        "sk-templiqx",
        2.5,
    )
    assert ModelConfig.from_env({ENV_MODEL_API_KEY: "k", ENV_MODEL: "m"}).base_url == (
        "https://api.openai.com/v1"
    )


def test_langfuse_env() -> None:
    assert LangfuseConfig.from_env({}).base_url == "https://cloud.langfuse.com"
    assert not LangfuseConfig.from_env({}).enabled
    config = LangfuseConfig.from_env(
        {
            ENV_LANGFUSE_HOST: "https://eu.cloud.langfuse.com",
            ENV_LANGFUSE_PUBLIC_KEY: "pk-lf-1",
            ENV_LANGFUSE_SECRET_KEY: "sk-lf-1",
        }
    )
    assert config.enabled
    assert config.base_url == "https://eu.cloud.langfuse.com"
    assert LangfuseConfig.from_env(
        {ENV_LANGFUSE_HOST: "https://a.example", ENV_LANGFUSE_BASE_URL: "https://b.example"}
    ).base_url == ("https://b.example")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/v1", "http:// or https://"),
        ("https:///v1", "name a host"),
        (f"https://user:{SECRET}@host/v1", "user-info"),
        (f"https://host/v1?key={SECRET}", "query or fragment"),
        ("https://host/v1#frag", "query or fragment"),
        ("https://host:notaport/v1", "not a valid URL"),
    ],
)
def test_bad_urls_name_the_field_never_the_value(url: str, message: str) -> None:
    with pytest.raises(InvalidData) as raised:
        ModelConfig(base_url=url, api_key="k", model="m")
    assert message in str(raised.value)
    assert "model base_url" in str(raised.value)
    assert SECRET not in str(raised.value)
    with pytest.raises(InvalidData, match="langfuse base_url"):
        LangfuseConfig(base_url=url)


def test_missing_key_and_model_are_named() -> None:
    with pytest.raises(InvalidData, match="TEMPLIQX_MODEL_API_KEY"):
        ModelConfig.from_env({ENV_MODEL: "m"})
    with pytest.raises(InvalidData, match="TEMPLIQX_MODEL must be set"):
        ModelConfig.from_env({ENV_MODEL_API_KEY: "k"})
    with pytest.raises(InvalidData, match="TEMPLIQX_MODEL_TIMEOUT_S"):
        ModelConfig.from_env({ENV_MODEL_API_KEY: "k", ENV_MODEL: "m", ENV_MODEL_TIMEOUT_S: "x"})
    with pytest.raises(InvalidData, match="timeout_s"):
        ModelConfig(base_url="https://h/v1", api_key="k", model="m", timeout_s=0)


def test_repr_hides_keys() -> None:
    assert SECRET not in repr(ModelConfig(base_url="https://h/v1", api_key=SECRET, model="m"))
    assert SECRET not in repr(LangfuseConfig(public_key=SECRET, secret_key=SECRET))


def test_missing_langfuse_keys_disable_tracing_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {ENV_MODEL_API_KEY: "k", ENV_MODEL: "m"}
    with caplog.at_level(logging.WARNING, logger="templiqx_langfuse"):
        runtime = LangfuseTracedRuntime.from_env(env)
    try:
        assert runtime.tracing.pipeline is None
        warnings = [r for r in caplog.records if r.name == "templiqx_langfuse"]
        assert len(warnings) == 1
        assert "tracing disabled" in warnings[0].getMessage()
    finally:
        runtime.close()


def test_trace_url_is_built_locally() -> None:
    config = LangfuseConfig(base_url="https://cloud.langfuse.com", project_id="proj1")
    assert config.trace_url("abc") == "https://cloud.langfuse.com/project/proj1/traces/abc"
    assert LangfuseConfig().trace_url("abc") is None


@pytest.mark.parametrize(
    "project_id", ["../../x?y#z", "p\x1b[31mred", "p\nq", "", "a/b", "p" * 129, "é"]
)
def test_project_id_is_refused_naming_the_field_never_the_value(project_id: str) -> None:
    with pytest.raises(InvalidData) as raised:
        LangfuseConfig(project_id=project_id)
    assert "project_id" in str(raised.value)
    assert "\x1b" not in str(raised.value)
    assert "x?y" not in str(raised.value)
    with pytest.raises(InvalidData, match="project_id"):
        LangfuseConfig.from_env({"LANGFUSE_PROJECT_ID": project_id or "a b"})
    assert (
        LangfuseConfig(project_id="cm1abc-DEF_9").trace_url("t").endswith("/cm1abc-DEF_9/traces/t")
    )


def test_environment_follows_langfuse_naming() -> None:
    assert LangfuseConfig(environment="prod-eu_1").environment == "prod-eu_1"
    for bad in ("Prod", "langfuse-internal", "with space", ""):
        with pytest.raises(InvalidData, match="langfuse environment"):
            LangfuseConfig(environment=bad)


# -- refused at construction, naming the field and never the value (issue 12) -------

KEY = "sk-padded-0123456789"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"api_key": KEY + "\n"}, "model api_key"),
        ({"api_key": " " + KEY}, "model api_key"),
        ({"api_key": KEY[:4] + " " + KEY[4:]}, "model api_key"),
        ({"api_key": KEY + "é"}, "model api_key"),
        ({"api_key": KEY + "\ud800"}, "model api_key"),
        ({"model": "gpt-4o-mini\n"}, "model"),
        ({"model": " gpt-4o-mini"}, "model"),
        ({"model": "gpt\x00-4o"}, "model"),
        ({"model": "gpt\ud800"}, "model"),
        ({"timeout_s": True}, "model timeout_s"),
        ({"timeout_s": "30"}, "model timeout_s"),
        ({"timeout_s": float("nan")}, "model timeout_s"),
        ({"timeout_s": float("inf")}, "model timeout_s"),
        ({"strict": "yes"}, "model strict"),
        ({"strict": 1}, "model strict"),
        ({"max_connections": 1.5}, "model max_connections"),
        ({"max_connections": True}, "model max_connections"),
        ({"unknown": 1}, "model unknown"),
        ({"base_url": "https://api.example/v1\n"}, "model base_url"),
        ({"base_url": "https://api.exa\tmple/v1"}, "model base_url"),
        ({"base_url": "https://api.example/v\x001"}, "model base_url"),
        ({"base_url": "https://api.example/\x7fv1"}, "model base_url"),
        ({"base_url": "https://exa mple/v1"}, "model base_url"),
        ({"base_url": "https://h:99999/v1"}, "model base_url"),
        ({"proxy": "socks9://proxy:1080"}, "model proxy"),
        ({"proxy": "http://proxy:3128/path"}, "model proxy"),
    ],
)
def test_hostile_model_config_is_refused_naming_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    config: dict[str, object] = {"base_url": "https://h/v1", "api_key": KEY, "model": "m"}
    config.update(kwargs)
    with pytest.raises(InvalidData) as raised:
        ModelConfig(**config)  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith(field + " ")
    for value in (KEY, "gpt", "example"):
        assert value not in message


@pytest.mark.parametrize("text", ["\u0663\u0660", "1_0", "inf", "nan", "1e3", "-5", "\uff13\uff10"])
def test_timeout_env_must_be_ascii_seconds(text: str) -> None:
    with pytest.raises(InvalidData, match=ENV_MODEL_TIMEOUT_S):
        ModelConfig.from_env(
            {ENV_MODEL_API_KEY: "k-123", ENV_MODEL: "m", ENV_MODEL_TIMEOUT_S: text}
        )
    env = {ENV_MODEL_API_KEY: "k-123", ENV_MODEL: "m", ENV_MODEL_TIMEOUT_S: " 2.5 "}
    assert ModelConfig.from_env(env).timeout_s == 2.5


def test_secret_file_newline_in_the_environment_is_refused() -> None:
    with pytest.raises(InvalidData) as raised:
        ModelConfig.from_env({ENV_MODEL_API_KEY: KEY + "\n", ENV_MODEL: "m"})
    assert "model api_key" in str(raised.value)
    assert KEY not in str(raised.value)


@pytest.mark.parametrize("name", ["public_key", "secret_key"])
def test_langfuse_keys_are_refused_naming_the_field(name: str) -> None:
    for bad in (KEY + "\n", KEY + "é", " " + KEY):
        with pytest.raises(InvalidData) as raised:
            LangfuseConfig(**{name: bad})  # type: ignore[arg-type]
        assert f"langfuse {name}" in str(raised.value)
        assert KEY not in str(raised.value)


def test_a_non_ascii_key_never_reaches_httpx() -> None:
    """It used to raise UnicodeEncodeError at call time, with the key in its text."""
    with pytest.raises(InvalidData) as raised:
        LangfuseTracedRuntime(
            ModelConfig(base_url="https://h/v1", api_key="sk-ключ-1234", model="m")
        )
    assert "ключ" not in str(raised.value)


def test_proxy_credentials_are_secrets_and_hidden_from_repr() -> None:
    config = ModelConfig(
        base_url="https://h/v1", api_key=KEY, model="m", proxy="http://user:p%40ss-word@proxy:3128"
    )
    for shown in (repr(config), str(config.model_dump()), config.model_dump_json()):
        assert "p%40ss-word" not in shown  # a SecretStr, as the API key
    assert {"p%40ss-word", "p@ss-word", KEY} <= set(config.secrets())
    proxy = ModelConfig.from_env(
        {ENV_MODEL_API_KEY: KEY, ENV_MODEL: "m", "TEMPLIQX_MODEL_PROXY": "http://proxy:3128"}
    ).proxy
    assert proxy is not None
    assert proxy.get_secret_value() == "http://proxy:3128"


def test_the_proxy_authorization_value_is_a_secret_too() -> None:
    """A proxy's 407, or httpx's and httpcore2's loggers, may show the very header sent:
    ``Basic base64(user:password)`` is redacted like the credentials in it."""
    import base64

    from templiqx_langfuse import Redactor

    config = ModelConfig(
        base_url="https://h/v1", api_key=KEY, model="m", proxy="http://user:PROXYPASS99@proxy:3128"
    )
    header = "Basic " + base64.b64encode(b"user:PROXYPASS99").decode()
    assert "PROXYPASS99" not in Redactor(config.secrets()).text(f"407 {header}")
    assert base64.b64encode(b"user:PROXYPASS99").decode() not in Redactor(config.secrets()).text(
        header
    )


# -- wrong types and values: InvalidData naming the field, at construction (issue 36, 7) --


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sample_rate": "0.5"}, "langfuse sample_rate"),
        ({"sample_rate": 1.5}, "langfuse sample_rate"),
        ({"sample_rate": float("nan")}, "langfuse sample_rate"),
        ({"timeout_s": "5"}, "langfuse timeout_s"),
        ({"flush_timeout_s": None}, "langfuse flush_timeout_s"),
        ({"flush_timeout_s": 0}, "langfuse flush_timeout_s"),
        ({"schema_score_name": 5}, "langfuse schema_score_name"),
        ({"schema_score_name": " "}, "langfuse schema_score_name"),
        ({"flush_at": 1.5}, "langfuse flush_at"),
        ({"flush_at": True}, "langfuse flush_at"),
        ({"flush_at": 0}, "langfuse flush_at"),
        ({"flush_interval_s": "1"}, "langfuse flush_interval_s"),
        ({"tags": "one-tag"}, "langfuse tags"),
        ({"tags": ["ok", 5]}, "langfuse tags"),
        ({"tags": ["ok", "lone\ud800"]}, "langfuse tags"),
        ({"release": "r\udfff"}, "langfuse release"),
        ({"session_id": 7}, "langfuse session_id"),
        ({"tracing": "false"}, "langfuse tracing"),
        ({"flush_on_sigterm": 1}, "langfuse flush_on_sigterm"),
        ({"mask": "not callable"}, "langfuse mask"),
        ({"public_key": 5}, "langfuse public_key"),
        ({"hostt": "typo"}, "langfuse hostt"),
    ],
)
def test_wrong_langfuse_types_and_values_are_invalid_data_naming_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidData) as raised:
        LangfuseConfig(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value).startswith(field + " ")
    assert "typo" not in str(raised.value)


def test_a_bad_flush_at_never_reaches_the_export_thread() -> None:
    """``flush_at=1.5`` used to be accepted, then the export thread raised and every
    generation was lost: it is refused where the host wrote it."""
    with pytest.raises(InvalidData, match="langfuse flush_at"):
        LangfuseConfig(public_key="pk-lf-1", secret_key="sk-lf-1", flush_at=1.5)  # type: ignore[arg-type]


def test_configs_are_frozen_and_keys_are_secret_strings() -> None:
    config = LangfuseConfig(public_key="pk-lf-1", secret_key=SECRET)
    with pytest.raises(ValidationError):
        config.flush_at = 3  # type: ignore[misc]
    assert config.keys() == ("pk-lf-1", SECRET)
    assert config.secrets() == ("pk-lf-1", SECRET)
    assert SECRET not in str(config)
    assert SECRET not in repr(config)
    assert LangfuseConfig().keys() == ("", "")
    model = ModelConfig(base_url="https://h/v1", api_key=SecretStr(SECRET), model="m")
    assert model.secrets() == (SECRET,)
    assert SECRET not in str(model)


@pytest.mark.parametrize(
    ("text", "strict"),
    [("", "auto"), ("auto", "auto"), ("TRUE", True), ("true", True), (" false ", False)],
)
def test_strict_from_the_environment(text: str, strict: object) -> None:
    env = {ENV_MODEL_API_KEY: KEY, ENV_MODEL: "m", ENV_MODEL_STRICT: text}
    assert ModelConfig.from_env(env).strict == strict


def test_a_bad_strict_value_is_named() -> None:
    env = {ENV_MODEL_API_KEY: KEY, ENV_MODEL: "m", ENV_MODEL_STRICT: "yes"}
    with pytest.raises(InvalidData, match="model strict "):
        ModelConfig.from_env(env)
    with pytest.raises(InvalidData, match="model strict "):
        ModelConfig(base_url="https://h/v1", api_key=KEY, model="m", strict="yes")  # type: ignore[arg-type]


def test_langfuse_numbers_from_the_environment_keep_the_sdk_meaning() -> None:
    config = LangfuseConfig.from_env(
        {
            "LANGFUSE_SAMPLE_RATE": "0.5",
            "LANGFUSE_FLUSH_AT": "64",
            "LANGFUSE_FLUSH_INTERVAL": "2",
            "LANGFUSE_TIMEOUT": "7",
            "LANGFUSE_TRACING_ENABLED": "False",
        }
    )
    assert (config.sample_rate, config.flush_at, config.flush_interval_s, config.timeout_s) == (
        0.5,
        64,
        2.0,
        7.0,
    )
    assert config.tracing is False
    with pytest.raises(InvalidData, match="langfuse flush_at"):
        LangfuseConfig.from_env({"LANGFUSE_FLUSH_AT": "1.5"})


def test_configs_cross_process_boundaries_intact() -> None:
    """A Pool worker or a forked server receives the same configuration, keys included."""
    import pickle

    langfuse = LangfuseConfig(public_key="pk-lf-1", secret_key=SECRET, tags=["a"])
    model = ModelConfig(base_url="https://h/v1", api_key=KEY, model="m", strict=True)
    for config in (langfuse, model):
        assert pickle.loads(pickle.dumps(config)) == config
    assert pickle.loads(pickle.dumps(langfuse)).keys() == ("pk-lf-1", SECRET)
