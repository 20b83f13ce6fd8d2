"""Every recorded real provider response, replayed through the parser (random read splits, plain and
gzip) and through the real SDK over HTTP: usage, stop reasons and ids must come out exact."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import pytest

from llmtap import Outcome
from llmtap._providers import anthropic as anthropic_provider
from llmtap._providers import openai_chat, openai_responses
from llmtap.testing import Capture
from tests.support.fixtures import recorded_fixtures, require_fixtures
from tests.support.replay import (
    body_bytes,
    expected_anthropic,
    expected_openai_chat,
    expected_openai_responses,
    load,
    replay,
    splits,
    wire_headers,
)

ANTHROPIC = recorded_fixtures("anthropic-*.json")
IDS = [p.stem for p in ANTHROPIC]
OPENAI = recorded_fixtures("openai-*.json")
OPENAI_IDS = [p.stem for p in OPENAI]
PARSERS = {
    "messages": (anthropic_provider.PROVIDER, expected_anthropic),
    "chat.completions": (openai_chat.PROVIDER, expected_openai_chat),
    "responses": (openai_responses.PROVIDER, expected_openai_responses),
}

pytestmark = pytest.mark.fixtures


def test_fixtures_present() -> None:
    require_fixtures()
    assert len(ANTHROPIC) >= 20
    assert len(OPENAI) >= 15


def _check_openai(record: Any, fixture: dict[str, Any]) -> None:
    expected = PARSERS[fixture["api"]][1](fixture)
    status = fixture["response"]["status"]
    headers = {k.lower(): v for k, v in fixture["response"]["headers"].items()}
    assert record.status_code == status
    assert record.parse_errors == 0
    if status >= 400:
        assert record.outcome is Outcome.REJECTED
        assert record.error_type == expected["error_type"]
    else:
        assert record.outcome is Outcome.COMPLETED, record
        assert record.response_id == expected["id"]
        assert record.response_model == expected["model"]
        assert record.stop_reasons == expected["stop_reasons"]
        for field in ("input", "output", "cache_read", "reasoning", "cache_write"):
            attr = {"input": "input_tokens", "output": "output_tokens"}.get(field, f"{field}_tokens")
            assert getattr(record.usage, attr) == expected[field], field
        if fixture["streaming"]:
            assert record.first_token_at is not None
    assert record.request_id == headers.get("x-request-id")
    if "openai-processing-ms" in headers:
        assert record.server_time == float(headers["openai-processing-ms"]) / 1000
    if "retry-after-ms" in headers:
        assert record.retry_after == float(headers["retry-after-ms"]) / 1000
    limits = {rl.resource: rl for rl in record.rate_limits}
    for resource in ("requests", "tokens"):
        if f"x-ratelimit-limit-{resource}" in headers:
            assert limits[resource].limit == float(headers[f"x-ratelimit-limit-{resource}"])
            assert limits[resource].remaining == float(headers[f"x-ratelimit-remaining-{resource}"])
            assert limits[resource].reset_seconds is not None


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("path", OPENAI, ids=OPENAI_IDS)
def test_openai_parser_replay(path: Path, compress: bool) -> None:
    fixture = load(path)
    provider = PARSERS[fixture["api"]][0]
    for seed in range(5):
        _check_openai(replay(fixture, provider, seed, compress), fixture)


def _check(record: Any, fixture: dict[str, Any]) -> None:
    expected = expected_anthropic(fixture)
    status = fixture["response"]["status"]
    headers = {k.lower(): v for k, v in fixture["response"]["headers"].items()}
    assert record.status_code == status
    # some sources replaced header values with placeholders ("...-XXX"): counted, never a crash
    placeholders = [k for k, v in headers.items() if k.startswith("anthropic-ratelimit-") and v.endswith("XXX")]
    assert record.parse_errors == len(placeholders)
    if status >= 400:
        assert record.outcome is Outcome.REJECTED
        assert record.error_type == expected["error_type"]
    else:
        assert record.outcome is Outcome.COMPLETED
        assert record.error_type is None
        assert record.response_id == expected["id"]
        assert record.response_model == expected["model"]
        assert record.stop_reason == expected["stop_reason"]
        assert record.usage.input_tokens == expected["input"]
        assert record.usage.output_tokens == expected["output"]
        assert record.usage.cache_read_tokens == expected["cache_read"]
        assert record.usage.cache_write_tokens == expected["cache_write"]
        assert record.usage.reasoning_tokens == expected["reasoning"]
    assert record.request_id == headers.get("request-id")
    if "retry-after" in headers:
        assert record.retry_after == float(headers["retry-after"])
    limits = {rl.resource: rl for rl in record.rate_limits}
    for resource in ("requests", "tokens", "input_tokens", "output_tokens"):
        name = f"anthropic-ratelimit-{resource.replace('_', '-')}-limit"
        if name in headers and not headers[name].endswith("XXX"):
            assert limits[resource].limit == float(headers[name])
            remaining = headers[f"anthropic-ratelimit-{resource.replace('_', '-')}-remaining"]
            assert limits[resource].remaining == float(remaining)
    if fixture["streaming"] and status == 200:
        assert record.streamed and record.first_token_at is not None


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("path", ANTHROPIC, ids=IDS)
def test_parser_replay(path: Path, compress: bool) -> None:
    fixture = load(path)
    for seed in range(5):
        _check(replay(fixture, anthropic_provider.PROVIDER, seed, compress), fixture)


class _ReplayHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fixture: ClassVar[dict[str, Any]] = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        fixture = type(self).fixture
        compress = fixture["response"]["status"] == 200 and fixture["streaming"]
        self.send_response(fixture["response"]["status"])
        for name, value in wire_headers(fixture, compress):
            self.send_header(name.decode(), value.decode("latin-1"))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        import random

        for piece in splits(body_bytes(fixture, compress), random.Random(7), 40):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client closing early (as the SDKs do after the final event) is not an error here


@pytest.fixture
def replay_server() -> Iterator[tuple[str, type[_ReplayHandler]]]:
    handler = type("Handler", (_ReplayHandler,), {})
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("path", ANTHROPIC, ids=IDS)
def test_sdk_replay(path: Path, replay_server: tuple[str, type[_ReplayHandler]]) -> None:
    """The real SDK reads the recorded bytes (gzip for streams) from a real server on 127.0.0.1."""
    import llmtap
    from llmtap.testing import capture

    base_url, handler = replay_server
    fixture = load(path)
    handler.fixture = fixture
    request = fixture["request"]["body"] or {}
    if not request.get("messages"):
        request = {"messages": [{"role": "user", "content": "hi"}]}
    cap: Capture
    with capture(llmtap.Settings(base_urls=(base_url,))) as cap:
        client = anthropic.Anthropic(base_url=base_url, api_key="test", max_retries=0)
        # the server ignores the request; the SDK only needs a valid one
        params: dict[str, Any] = {"model": "claude-test", "max_tokens": 64, "messages": request["messages"][:1]}
        try:
            if fixture["streaming"]:
                with client.messages.stream(**params) as stream:
                    stream.until_done()
            else:
                client.messages.create(**params)
        except anthropic.APIStatusError:
            assert fixture["response"]["status"] >= 400
        client.close()
        cap.wait(1)
        (record,) = cap.records
        _check(record, fixture)


@pytest.mark.parametrize("path", OPENAI, ids=OPENAI_IDS)
def test_openai_sdk_replay(path: Path, replay_server: tuple[str, type[_ReplayHandler]]) -> None:
    """The real openai SDK reads the recorded bytes (gzip for streams) from a real server on 127.0.0.1."""
    import openai

    import llmtap
    from llmtap.testing import capture

    base_url, handler = replay_server
    fixture = load(path)
    handler.fixture = fixture
    streaming = fixture["streaming"]
    with capture(llmtap.Settings(base_urls=(base_url,))) as cap:
        client = openai.OpenAI(base_url=base_url + "/v1", api_key="test", max_retries=0)
        try:
            if fixture["api"] == "chat.completions":
                messages: Any = [{"role": "user", "content": "hi"}]
                if streaming:
                    for _ in client.chat.completions.create(model="gpt-test", messages=messages, stream=True):
                        pass
                else:
                    client.chat.completions.create(model="gpt-test", messages=messages)
            elif streaming:
                for _ in client.responses.create(model="gpt-test", input="hi", stream=True):
                    pass
            else:
                client.responses.create(model="gpt-test", input="hi")
        except openai.APIStatusError:
            assert fixture["response"]["status"] >= 400
        client.close()
        cap.wait(1)
        (record,) = cap.records
        _check_openai(record, fixture)
