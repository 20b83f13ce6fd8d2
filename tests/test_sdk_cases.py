"""Every case of the driver's table (``llmtap._drive.CASES``) through every official SDK, sync and async,
and each transport the SDK can choose: the outcome of each attempt, what the app saw, and that records,
metrics and spans agree with what the simulator served, exactly once; and, on the same run, what the attempt
left to the garbage collector (run with ``gc.DEBUG_SAVEALL``, ``tests/support/cycles.py``): nothing of
llmtap's in a reference cycle where the SDK makes none of its own, no ended span kept where it does.

SDK-specific properties (usage details, helpers, retry linking, cloud error types) are in the
per-provider files (``test_anthropic_sdk.py``, ``test_openai_sdk.py``, ``test_clouds.py``,
``test_gemini.py``, ``test_more_sdks.py``), which drive the SDKs through the same adapters.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from opentelemetry.sdk.trace import TracerProvider

import llmtap
from llmtap import Outcome
from llmtap._core.record import FAILED
from llmtap._drive import BOTOCORE, SDKS, Case, Mode, Result, adapter, cases, drive, fresh_model, served_for
from llmtap._drive import Config as DriveConfig
from llmtap.simulator import Scenario, Served, Simulator
from llmtap.testing import Capture
from tests.support.cycles import DROPPING, acyclic, cycles_of_llmtap, is_llmtap, spans_in_the_garbage
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


def _garbage_unsaved(sdk: str, case: Case) -> str | None:
    """Why the case runs without ``gc.DEBUG_SAVEALL`` (``None``: it runs with it, its garbage checked)."""
    if sys.version_info >= (3, 12) and case.name == "abandoned" and sdk in ("aiobotocore", "aiobotocore-invoke"):
        # from 3.12 aiobotocore's stream dropped unread is in a reference cycle of its own: only the collector
        # ends its attempt, and under DEBUG_SAVEALL the collector would keep it instead
        return "aiobotocore's dropped stream ends only when the collector frees its cycle (Python 3.12+)"
    return None


@pytest.mark.parametrize(("sdk", "mode", "transport", "case"), _params())
def test_case(sim: Simulator, cap: Capture, sdk: str, mode: Mode, transport: str | None, case: Case) -> None:
    cls = SDKS[sdk]
    model = fresh_model(cls.model)
    expected = list(case.outcomes)
    calls = 1 if cls.linked_retries else len(expected)
    unsaved = _garbage_unsaved(sdk, case)
    with warnings.catch_warnings(), cycles_of_llmtap(save=unsaved is None) as ours:
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
        raised = repr(result.error)[:300]  # (only its text: the exception would keep its frames alive)
        result.error = None  # the app lets go of what it caught
        del result
        try:
            cap.wait(len(expected), calls=calls)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the call raised {raised}") from None
        gc.collect()
        kept_spans = spans_in_the_garbage()
    # the garbage: see tests/support/cycles.py
    if unsaved is None and acyclic(sdk, case.name):
        assert ours == [], f"llmtap's objects in a reference cycle ({case.action}): {ours[:6]}"
    elif unsaved is None and case.action not in DROPPING:
        assert kept_spans == [], f"ended spans kept alive by the garbage ({case.action}): {kept_spans[:3]}"
    kept_spans.clear()
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


def test_the_garbage_check_finds_llmtap_objects_and_spans_in_a_cycle() -> None:
    """Positive control of both garbage checks of :func:`test_case`: an object of llmtap's and an ended span,
    kept in a reference cycle; and the switch that leaves the collector as it is."""
    provider = TracerProvider()
    span = provider.get_tracer("control").start_span("control")
    span.end()
    with cycles_of_llmtap() as ours:
        cycle: list[Any] = [llmtap.Settings(), span]
        cycle.append(cycle)
        del cycle, span
        gc.collect()
        spans = spans_in_the_garbage()
    assert [line.split(":")[0] for line in ours] == ["Settings"]
    assert len(spans) == 1 and is_llmtap(spans[0]) is False
    spans.clear()
    with cycles_of_llmtap(save=False) as unsaved:
        cycle = [llmtap.Settings()]
        cycle.append(cycle)
        del cycle
        gc.collect()
        assert gc.garbage == [] and spans_in_the_garbage() == []
    assert unsaved == []
    provider.shutdown()


def test_llmtap_code_is_told_by_the_package_directory_not_a_folder_name(tmp_path: Path) -> None:
    """A clone in a folder named ``llmtap`` (what ``git clone`` gives) holds a virtualenv whose files match
    ``*/llmtap/*``: none of them is llmtap's code. Positive control: a function of llmtap's own module."""
    venv_file = tmp_path / "llmtap" / ".venv" / "lib" / "python3.11" / "site-packages" / "pydantic" / "main.py"
    venv_file.parent.mkdir(parents=True)
    venv_file.write_text("def set_model_mocks():\n    return lambda: None\n")
    code = compile(venv_file.read_text(), str(venv_file), "exec")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert is_llmtap(namespace["set_model_mocks"]) is False
    assert is_llmtap(namespace["set_model_mocks"]()) is False
    assert is_llmtap(llmtap.instrument) is True  # positive control
