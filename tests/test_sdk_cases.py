"""Every case of the driver's table (``llmtap._drive.CASES``) through every official SDK, sync and async,
and each transport the SDK can choose: the outcome of each attempt, what the app saw, and that records,
metrics and spans agree with what the simulator served, exactly once.

SDK-specific properties (usage details, helpers, retry linking, cloud error types) are in the
per-provider files (``test_anthropic_sdk.py``, ``test_openai_sdk.py``, ``test_clouds.py``,
``test_gemini.py``, ``test_more_sdks.py``), which drive the SDKs through the same adapters.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest

from llmtap import Outcome
from llmtap._core.record import FAILED
from llmtap._drive import BOTOCORE, SDKS, Case, Mode, Result, adapter, cases, drive, fresh_model, served_for
from llmtap._drive import Config as DriveConfig
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture
from tests.support.sdklines import ANTHROPIC_ON_HTTPX

SECRET = "sk-llmtap-test-secret-0123456789"
# google-genai subclasses aiohttp.ClientSession, which aiohttp warns about
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

# Bedrock names the error in x-amzn-errortype; Vertex in the body (Claude's or Google's), which the SDK
# reads only when it gives up (a retried attempt is closed unread: the status stands in)
BEDROCK_ERROR_TYPES = {
    400: "ValidationException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
VERTEX_ERROR_TYPES = {429: "RESOURCE_EXHAUSTED", 500: "api_error", 503: "api_error", 529: "overloaded_error"}
IN_BAND = {
    "bedrock": "serviceUnavailableException",
    "boto3": "serviceUnavailableException",
    "boto3-invoke": "serviceUnavailableException",
    "aiobotocore": "serviceUnavailableException",
    "aiobotocore-invoke": "serviceUnavailableException",
    "vertex": "overloaded_error",
}
BEDROCKS = ("bedrock", *BOTOCORE)  # Bedrock's own error types: x-amzn-errortype


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # no profile or base URL of the machine's leaks into the cloud clients
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    yield


def _params() -> list[Any]:
    return list(_each())


def _each() -> Iterator[Any]:
    for sdk, cls in SDKS.items():
        for mode, transports in cls.transports.items():
            for transport in transports:
                for c in cases(sdk, mode):
                    label = f"{sdk}-{mode}" + (f"-{transport or 'default'}" if len(transports) > 1 else "")
                    yield pytest.param(sdk, mode, transport, c, id=f"{label}-{c.name}")


def _check_raised(sdk: str, case: Case, result: Result) -> None:
    if case.raised == "unchecked":
        return
    if case.raised == "nothing":
        assert result.error is None, repr(result.error)
        return
    assert result.error is not None, f"{sdk} raised nothing"
    raised: str = case.raised
    if sdk == "bedrock" and case.name == "error_event" and ANTHROPIC_ON_HTTPX:
        raised = "other"  # the legacy line's Bedrock decoder raises a ValueError for an exception frame
    assert SDKS[sdk].classify(result.error) == raised, repr(result.error)


def _check_text(case: Case, result: Result) -> None:
    if result.error is not None or case.raised != "nothing":
        return
    if case.action in ("stream", "create", "helper", "raw") and case.outcomes[-1] is Outcome.COMPLETED:
        assert result.text == case.scenario.expected_text()
    elif case.action in ("close", "drop_read"):
        assert result.pieces[:2] == ["tok0 ", "tok1 "] and len(result.pieces) == 2
    elif case.action == "cancel":
        assert result.cancelled and 1 <= len(result.pieces) < case.scenario.tokens


def _check_error_type(sdk: str, cap: Capture, record: Any, seen: Served) -> None:
    if record.outcome is Outcome.SERVER_ERROR and seen.status == 200 and sdk in IN_BAND:
        assert record.error_type == IN_BAND[sdk]  # the in-band error, read from its own framing
    if seen.status >= 400 and sdk in BEDROCKS:
        assert record.error_type == BEDROCK_ERROR_TYPES[seen.status]
    elif seen.status >= 400 and sdk == "vertex":
        expected = VERTEX_ERROR_TYPES[seen.status] if record is cap.records[-1] else str(seen.status)
        assert record.error_type == expected


@pytest.mark.parametrize(("sdk", "mode", "transport", "case"), _params())
def test_case(
    sim: Simulator, cap: Capture, sdk: str, mode: Mode, transport: str | None, case: Case, monkeypatch: Any
) -> None:
    cls = SDKS[sdk]
    model = fresh_model(cls.model)
    with warnings.catch_warnings():
        if sdk in BOTOCORE and case.action in ("drop", "drop_read", "cancel"):
            # (aio)botocore leaves the connection of a stream the app dropped (or whose reading task it cancelled)
            # to the collector, with or without llmtap
            warnings.simplefilter("ignore", ResourceWarning)
        result = drive(
            sdk, sim.base_url, case.action, mode=mode, model=model, api_key=SECRET, transport=transport,
            headers=case.scenario.headers(), **case.config(),
        )  # fmt: skip
    _check_raised(sdk, case, result)
    _check_text(case, result)
    expected = list(case.outcomes)
    calls = 1 if cls.linked_retries else len(expected)
    cap.wait(len(expected), calls=calls)
    served = served_for(sim, model, len(expected))
    assert [r.outcome for r in cap.records] == expected
    assert len(served) == len(cap.records) == len(expected)  # exactly once: one record per request served
    assert len(cap.calls) == calls
    if cls.linked_retries:
        assert cap.calls[0].attempts == len(expected)
        assert cap.calls[0].outcome is expected[-1]
    else:
        assert [c.attempts for c in cap.calls] == [1] * len(expected)
    for record, seen in zip(cap.records, served, strict=True):
        assert record.provider == cls.provider
        assert record.operation == cls.operation
        assert record.request_model == model == seen.model
        assert record.status_code == seen.status
        assert record.resend_count == seen.retry_count
        assert record.request_stream is seen.stream or (record.request_stream is None and not seen.stream)
        # decoded, as the HTTP clients' URLs give it (the boto3 adapters' model has a ':' the client quotes)
        assert record.url_path == unquote(seen.path) and (cls.path is None or seen.path == cls.path)
        assert seen.api == cls.api and seen.auth_present  # the key was sent ...
        assert SECRET not in repr(record)  # ... and never recorded
        assert record.parse_errors == 0
        _check_error_type(sdk, cap, record, seen)
        if record.outcome is Outcome.COMPLETED:  # tokens exactly as the server sent them
            assert record.usage.output_tokens == seen.output_tokens
            assert record.usage.input_tokens == seen.input_tokens + seen.cache_read + seen.cache_write
            assert (record.first_token_at is not None) == bool(record.streamed)  # TTFT for every completed stream
        if case.scenario.stall_until_closed:
            assert seen.outcome_sent == "client_disconnected"  # the app left before the end, as intended
    # metrics: one attempt and one stream per record, by outcome
    assert cap.sample("llmtap_attempts_total") == len(expected)
    for outcome in set(expected):
        streams = expected.count(outcome) if case.action != "create" else 0
        assert cap.sample("llmtap_streams_total", outcome=outcome.value) == streams
    assert cap.sample("llmtap_streams_in_flight") == 0
    assert cap.sample("llmtap_retries_total") == (len(expected) - 1 if cls.linked_retries else 0)
    # spans: one per attempt, errors only for rejections and service-side outcomes, no secret anywhere
    spans = sorted(cap.spans, key=lambda s: s.start_time or 0)
    assert [s.attributes["llmtap.outcome"] if s.attributes else None for s in spans] == [o.value for o in expected]
    assert [s.status.status_code.name == "ERROR" for s in spans] == [o in FAILED for o in expected]
    for span in spans:
        assert span.attributes is not None and span.attributes["gen_ai.provider.name"] == cls.provider
        assert span.name == f"{cls.operation} {model}"
        assert SECRET not in repr(dict(span.attributes)) + repr([e.attributes for e in span.events])


def test_every_sdk_has_cases_and_every_case_runs() -> None:
    """The table is not silently empty for an SDK, and every case applies to one SDK at least."""
    applied = {c.name for sdk, cls in SDKS.items() for mode in cls.transports for c in cases(sdk, mode)}
    from llmtap._drive import CASES

    assert applied == {c.name for c in CASES}
    for sdk, cls in SDKS.items():
        assert len([c for mode in cls.transports for c in cases(sdk, mode)]) >= 10, sdk


def test_quirks_name_known_adapters_and_fields() -> None:
    from llmtap._drive import CASES

    for c in CASES:
        for key, changes in c.quirks.items():
            assert key.split("/")[0] in SDKS, key
            assert set(changes) <= set(Case.__dataclass_fields__), changes
        for name in (*(c.only or ()), *c.skip):
            assert name in SDKS, name


def test_the_config_reaches_the_client(sim: Simulator) -> None:
    """A positive control of the adapter: the scenario header, retries and timeout are what it sends."""
    sdk = adapter("anthropic", DriveConfig(sim.base_url, max_retries=3, timeout=1.5, headers=Scenario().headers()))
    try:
        assert sdk.client.max_retries == 3 and sdk.client.timeout == 1.5
    finally:
        sdk.close()


def test_the_sdks_are_imported_only_when_an_adapter_is_made() -> None:
    import subprocess
    import sys

    sdks = "{'anthropic', 'openai', 'google.genai', 'groq', 'mistralai', 'cohere', 'ollama'}"
    code = (
        "import sys, llmtap._drive as d\n"
        f"assert not {sdks} & set(sys.modules), {sdks} & set(sys.modules)\n"
        "d.adapter('openai-chat', d.Config('http://127.0.0.1:9')).close()\n"
        "assert 'openai' in sys.modules and 'anthropic' not in sys.modules\n"  # positive control
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
