"""``llmtap._settings``: ``Settings`` validated at construction and read from ``LLMTAP_*`` variables, every
error naming the variable, its value and the format it takes (nothing of it on the request path)."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

import llmtap


def test_settings_are_validated_in_code_and_from_the_environment() -> None:
    with pytest.raises(ValidationError):
        llmtap.Settings(base_urls=("ftp://x",))
    with pytest.raises(ValidationError):
        llmtap.Settings(stall_threshold_seconds=0)
    with pytest.raises(ValidationError):
        llmtap.Settings(unknown=1)  # type: ignore[call-arg]
    env = {
        "LLMTAP_BASE_URLS": "http://a:1/v1, http://b:2",
        "LLMTAP_TRACES": "false",
        "LLMTAP_MAX_MODELS": "7",
        "LLMTAP_PROVIDER_NAMES": "http://b:2=vllm",
    }
    settings = llmtap.Settings.from_env(env)
    assert settings.base_urls == ("http://a:1/v1", "http://b:2")
    assert settings.traces is False and settings.max_models == 7
    assert settings.provider_names == {"http://b:2": "vllm"}


def test_label_bounds_are_validated() -> None:
    assert llmtap.Settings().max_stop_reasons == 30 and llmtap.Settings().max_error_types == 50
    for bad in ({"max_stop_reasons": 0}, {"max_error_types": -1}, {"overflow_value": ""}, {"overflow_value": "a\nb"}):
        with pytest.raises(ValidationError):
            llmtap.Settings(**bad)


TRUE_WORDS = ("true", "TRUE", "True", "1", "yes", "YES", "on", "On", " true ")
FALSE_WORDS = ("false", "FALSE", "0", "no", "No", "off", "OFF")


@pytest.mark.parametrize("word", TRUE_WORDS + FALSE_WORDS)
def test_boolean_spellings(word: str) -> None:
    expected = word in TRUE_WORDS
    assert llmtap.Settings.from_env({"LLMTAP_TRACES": word}).traces is expected
    assert llmtap.Settings.from_env({"LLMTAP_MATCH_ANY_HOST": word}).match_any_host is expected


@pytest.mark.parametrize("word", ["ture", "", "2", "enabled", "y", "t", "nope"])
def test_boolean_typos_are_rejected_with_variable_value_and_choices(word: str) -> None:
    with pytest.raises(ValidationError) as info:
        llmtap.Settings.from_env({"LLMTAP_TRACES": word})
    text = str(info.value)
    assert "LLMTAP_TRACES" in text
    assert f"input_value={word!r}" in text
    assert "true/false, 1/0, yes/no or on/off" in text


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LLMTAP_METRICS_PORT": "http"}, "LLMTAP_METRICS_PORT"),
        ({"LLMTAP_METRICS_PORT": "70000"}, "less than or equal to 65535"),
        ({"LLMTAP_METRICS_PORT": "-1"}, "greater than or equal to 0"),
        ({"LLMTAP_METRICS_ADDR": "localhost"}, "must be an IP address"),
        ({"LLMTAP_MAX_MODELS": "lots"}, "LLMTAP_MAX_MODELS"),
        ({"LLMTAP_STALL_THRESHOLD_SECONDS": "0"}, "greater than 0"),
        ({"LLMTAP_PROVIDER_NAMES": "http://a"}, "key=value pairs"),
        ({"LLMTAP_BASE_URLS": "ftp://x"}, "must start with http"),
        ({"LLMTAP_PROMETHEUS": "off", "LLMTAP_METRICS_PORT": "9464"}, "prometheus=False"),
    ],
)
def test_invalid_values_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        llmtap.Settings.from_env(env)


@pytest.mark.parametrize(
    ("env", "where", "says"),
    [
        ({"LLMTAP_BASE_URLS": '["http://a:1", 2]'}, "LLMTAP_BASE_URLS", "or a JSON array of strings"),
        ({"LLMTAP_BASE_URLS": '["http://a:1",'}, "LLMTAP_BASE_URLS", "or a JSON array of strings: Expecting value"),
        (
            {"LLMTAP_BASE_URLS": "http://a:1", "LLMTAP_PROVIDER_NAMES": "http://b=x"},
            "LLMTAP_PROVIDER_NAMES",
            "key 'http://b' is not one of base_urls (http://a:1)",
        ),
        ({"LLMTAP_PROMETHEUS": "off", "LLMTAP_METRICS_PORT": "9464"}, "LLMTAP_METRICS_PORT", "prometheus=False"),
    ],
)
def test_errors_are_located_at_the_variable_and_say_the_format(env: dict[str, str], where: str, says: str) -> None:
    with pytest.raises(ValidationError) as info:
        llmtap.Settings.from_env(env)
    (error,) = info.value.errors()
    assert error["loc"] == (where,)
    assert says in str(error["msg"])


def test_lists_and_mappings_take_commas_or_json() -> None:
    commas = llmtap.Settings.from_env(
        {"LLMTAP_BASE_URLS": "http://a:1,http://b:2", "LLMTAP_PROVIDER_NAMES": "http://a:1=x"}
    )
    as_json = llmtap.Settings.from_env(
        {"LLMTAP_BASE_URLS": '["http://a:1", "http://b:2"]', "LLMTAP_PROVIDER_NAMES": '{"http://a:1": "x"}'}
    )
    assert commas == as_json
    assert as_json.base_urls == ("http://a:1", "http://b:2") and as_json.provider_names == {"http://a:1": "x"}


def test_valid_values_parse() -> None:
    s = llmtap.Settings.from_env(
        {"LLMTAP_METRICS_PORT": "9464", "LLMTAP_METRICS_ADDR": "0.0.0.0", "LLMTAP_BASE_URLS": "http://a:1, http://b"}
    )
    assert (s.metrics_port, s.metrics_addr, s.base_urls) == (9464, "0.0.0.0", ("http://a:1", "http://b"))
    assert llmtap.Settings.from_env({"LLMTAP_METRICS_ADDR": "::1"}).metrics_addr == "::1"


def test_unknown_variables_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="llmtap"):
        llmtap.Settings.from_env(
            {"LLMTAP_TRACE": "false", "LLMTAP_TRACES": "false", "LLMTAPTEST_REQUIRE_FIXTURES": "1"}
        )
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["ignoring LLMTAP_TRACE: no such setting (did you mean LLMTAP_TRACES?)"]


def test_a_misspelt_keyword_gets_did_you_mean() -> None:
    """As a misspelt LLMTAP_* variable does; other errors are reported beside it unchanged, and a name close to
    nothing gets no guess. Control: the right keyword is accepted."""
    with pytest.raises(ValidationError) as raised:
        llmtap.Settings(base_url=["http://x"])  # type: ignore[call-arg]
    (error,) = raised.value.errors()
    assert error["loc"] == ("base_url",) and error["type"] == "extra_forbidden"
    assert error["msg"] == "no such setting (did you mean base_urls?)"
    with pytest.raises(ValidationError) as raised:
        llmtap.Settings(metrics_prot=9467, max_models=0, zzz=1)  # type: ignore[call-arg]
    said = {e["loc"][0]: e["msg"] for e in raised.value.errors()}
    assert said == {
        "max_models": "Input should be greater than or equal to 1",
        "metrics_prot": "no such setting (did you mean metrics_port?)",
        "zzz": "no such setting",
    }
    assert llmtap.Settings(base_urls=("http://x",)).base_urls == ("http://x",)


def test_a_name_from_before_0_1_0_is_refused_with_its_new_name(caplog: pytest.LogCaptureFixture) -> None:
    """The settings renamed before the first release are not accepted (no user can depend on them), as keyword
    or variable, but the error names the new one, which difflib alone would not (``metrics`` is closest to
    ``metrics_port``). Control: the new names are accepted."""
    with pytest.raises(ValidationError) as raised:
        llmtap.Settings(metrics=False)  # type: ignore[call-arg]
    assert raised.value.errors()[0]["msg"] == "no such setting (did you mean prometheus?)"
    with caplog.at_level(logging.WARNING, logger="llmtap"):
        s = llmtap.Settings.from_env({"LLMTAP_METRICS": "false", "LLMTAP_MODEL_OVERFLOW": "x"})
    assert [r.getMessage() for r in caplog.records] == [
        "ignoring LLMTAP_METRICS: no such setting (did you mean LLMTAP_PROMETHEUS?)",
        "ignoring LLMTAP_MODEL_OVERFLOW: no such setting (did you mean LLMTAP_OVERFLOW_VALUE?)",
    ]
    assert (s.prometheus, s.overflow_value) == (True, "_other")
    s = llmtap.Settings.from_env({"LLMTAP_PROMETHEUS": "false", "LLMTAP_OVERFLOW_VALUE": "x"})
    assert (s.prometheus, s.overflow_value) == (False, "x")


def test_otel_metrics_takes_a_boolean_or_auto() -> None:
    assert llmtap.Settings().otel_metrics == "auto"
    assert llmtap.Settings.from_env({"LLMTAP_OTEL_METRICS": "off"}).otel_metrics is False
    assert llmtap.Settings.from_env({"LLMTAP_OTEL_METRICS": " AUTO "}).otel_metrics == "auto"
    with pytest.raises(ValidationError, match=r"expected a boolean: .*, or auto"):
        llmtap.Settings.from_env({"LLMTAP_OTEL_METRICS": "sometimes"})
    with pytest.raises(ValidationError, match=r"any case\) \[type"):
        llmtap.Settings.from_env({"LLMTAP_TRACES": "auto"})  # control: a plain boolean takes no auto


def test_every_llmtap_variable_the_repository_names_is_a_setting() -> None:
    """Docs, examples, dashboards, the Makefile, CI and the library name only settings' variables (and
    ``LLMTAP_RUN``, llmtap's own): a renamed setting leaves no stale name behind, and the suite's knobs are
    ``LLMTAPTEST_*``, outside the namespace. Test modules are left out: they spell wrong names on purpose."""
    import re
    import subprocess
    from pathlib import Path

    from llmtap._settings import ENV_PREFIX, INTERNAL_ENV

    root = Path(__file__).resolve().parents[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    known = {ENV_PREFIX + name.upper() for name in llmtap.Settings.model_fields} | INTERNAL_ENV
    named: dict[str, set[str]] = {}
    for path in tracked:
        if re.match(r"tests/test_\w+\.py$", path) or path == "CHANGELOG.md" or not (root / path).is_file():
            continue
        try:
            text = (root / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for variable in re.findall(r"\bLLMTAP_[A-Z0-9_]*[A-Z0-9]\b", text):
            named.setdefault(variable, set()).add(path)
    assert "LLMTAP_METRICS_PORT" in named and "LLMTAP_RUN" in named  # control: the files were read
    assert {v: sorted(p) for v, p in named.items() if v not in known} == {}


def test_context_windows_in_code_and_from_the_environment() -> None:
    """Tokens by model: ``key=value`` pairs or JSON from ``LLMTAP_CONTEXT_WINDOWS``; a window that is not a
    positive whole number is refused at the variable. Control: the default is empty."""
    assert llmtap.Settings().context_windows == {}
    env = {"LLMTAP_CONTEXT_WINDOWS": "my-llama=131072, ft:gpt-4o-mini:org::x=128000"}
    assert llmtap.Settings.from_env(env).context_windows == {"my-llama": 131_072, "ft:gpt-4o-mini:org::x": 128_000}
    assert llmtap.Settings.from_env({"LLMTAP_CONTEXT_WINDOWS": '{"a": 8192}'}).context_windows == {"a": 8_192}
    for bad in ("a=0", "a=-1", "a=1.5", "a=lots"):
        with pytest.raises(ValidationError) as raised:
            llmtap.Settings.from_env({"LLMTAP_CONTEXT_WINDOWS": bad})
        assert [e["loc"] for e in raised.value.errors()] == [("LLMTAP_CONTEXT_WINDOWS",)], bad
    with pytest.raises(ValidationError, match="positive numbers of tokens"):
        llmtap.Settings(context_windows={"a": 0})
