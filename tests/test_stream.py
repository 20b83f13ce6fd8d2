"""``llmtap._core.stream``: the sync and async shells around a response body. Every byte passes untouched,
every exception is re-raised as it is, and the attempt ends exactly once, at the first of: the provider's
terminal event, the end of the body, ``close()``, an exception, or the garbage collector.

A unit with no wire: the shells wrap an in-memory body here (the SDK tests drive them over real sockets).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import tomllib
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import httpx
import httpx2
import pytest

import llmtap
from llmtap import Outcome
from llmtap._core import bytecode as _bytecode
from llmtap._core import handoff as _handoff
from llmtap._core import stream as _stream
from llmtap._core.observer import AttemptObserver
from llmtap._log import internal_errors
from llmtap.testing import Capture, capture
from tests.support.paths import ROOT

BASE = "http://llm.test"
SSE = [(b"content-type", b"text/event-stream")]


def _event(name: str, data: str) -> bytes:
    return f"event: {name}\ndata: {data}\n\n".encode()


BODY = [
    _event("message_start", '{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":3}}}'),
    _event("content_block_start", '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'),
    _event("content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}'),
    _event("message_delta", '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}'),
]
STOP = _event("message_stop", '{"type":"message_stop"}')
AFTER = b": a comment after the end\n\n"


class Body:
    """A response body in memory, sync and async; records whether it was closed, may raise mid-way."""

    def __init__(self, chunks: list[bytes], raise_after: BaseException | None = None) -> None:
        self.chunks = chunks
        self.raise_after = raise_after
        self.closed = 0

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.raise_after is not None:
            raise self.raise_after

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.raise_after is not None:
            raise self.raise_after

    def close(self) -> None:
        self.closed += 1

    async def aclose(self) -> None:
        self.closed += 1


@pytest.fixture
def cap() -> Iterator[Capture]:
    with capture(llmtap.Settings(base_urls=(BASE,), traces=False), patch=False) as captured:
        yield captured


def _shell(cap: Capture, body: Body, mode: str) -> Any:
    """``body`` as the response's stream of one observed send (``observe_sync`` / ``observe_async``, the
    hooks' entry points), wrapped in the shell the hooks would choose; what the app then reads."""
    request = httpx2.Request("POST", BASE + "/v1/messages", json={"model": "m", "stream": True, "max_tokens": 8})
    response = httpx2.Response(200, headers=dict(SSE), stream=body, request=request)  # type: ignore[arg-type]
    sync_shell, async_shell = _stream.shells_for(httpx2)
    if mode == "sync":
        _stream.observe_sync(cap.tap, request, lambda: response, sync_shell)
    else:

        async def send() -> httpx2.Response:
            return response

        asyncio.run(_stream.observe_async(cap.tap, request, send, async_shell))
    assert isinstance(response.stream, (sync_shell, async_shell))  # observed
    return response.stream


def _read(
    shell: Any, mode: str, count: int | None = None, seen: tuple[Capture, list[int]] | None = None
) -> list[bytes]:
    """Read ``count`` chunks (all when None) as the app would; ``seen``: how many records ``Capture`` had
    as each chunk arrived."""
    out: list[bytes] = []

    def keep(chunk: bytes) -> bool:
        out.append(chunk)
        if seen is not None:
            seen[1].append(len(seen[0].records))
        return count is not None and len(out) >= count

    if mode == "sync":
        for chunk in shell:
            if keep(chunk):
                break
        return out

    async def main() -> None:
        async for chunk in shell.__aiter__():
            if keep(chunk):
                break

    asyncio.run(main())
    return out


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
def test_bytes_pass_untouched_and_the_terminal_event_ends_the_attempt(cap: Capture, mode: str) -> None:
    chunks = [*BODY[:2], BODY[2][:7], BODY[2][7:] + BODY[3], STOP, AFTER]
    seen: list[int] = []
    assert _read(_shell(cap, Body(chunks), mode), mode, seen=(cap, seen)) == chunks
    # ended at the chunk holding message_stop, not at the end of the body after it
    assert seen == [0, 0, 0, 0, 1, 1]
    (record,) = cap.records
    assert (record.outcome, record.stop_reason, record.usage.output_tokens) == (Outcome.COMPLETED, "end_turn", 2)


@pytest.mark.parametrize("mode", MODES)
def test_the_end_of_a_body_without_its_terminal_event_is_incomplete(cap: Capture, mode: str) -> None:
    seen: list[int] = []
    _read(_shell(cap, Body(BODY), mode), mode, seen=(cap, seen))
    assert seen == [0, 0, 0, 0]  # not ended while the body was being read
    assert [r.outcome for r in cap.records] == [Outcome.INCOMPLETE]  # ended at its end


def test_close_before_the_end_is_client_closed_once(cap: Capture) -> None:
    body = Body([*BODY, STOP])
    shell = _shell(cap, body, "sync")
    assert len(_read(shell, "sync", count=2)) == 2
    shell.close()
    shell.close()
    assert body.closed == 2  # every close reaches the body
    assert [r.outcome for r in cap.records] == [Outcome.CLIENT_CLOSED]


def test_aclose_before_the_end_is_client_closed_once(cap: Capture) -> None:
    body = Body([*BODY, STOP])
    shell = _shell(cap, body, "async")

    async def main() -> None:
        chunks = shell.__aiter__()
        await chunks.__anext__()
        await chunks.__anext__()
        await shell.aclose()
        await shell.aclose()
        await chunks.aclose()  # the iteration unwound after the close: no second ending

    asyncio.run(main())
    assert body.closed == 2
    assert [r.outcome for r in cap.records] == [Outcome.CLIENT_CLOSED]


@pytest.mark.parametrize("mode", MODES)
def test_close_after_the_end_adds_nothing(cap: Capture, mode: str) -> None:
    shell = _shell(cap, Body([*BODY, STOP]), mode)
    _read(shell, mode)
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]
    shell.close() if mode == "sync" else asyncio.run(shell.aclose())
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (httpx2.ReadTimeout("slow"), Outcome.TIMEOUT),
        (httpx2.RemoteProtocolError("peer closed"), Outcome.CONNECTION_ERROR),
        (asyncio.CancelledError(), Outcome.CANCELLED),
    ],
    ids=["timeout", "dropped", "cancelled"],
)
def test_an_exception_from_the_body_passes_untouched(
    cap: Capture, mode: str, exc: BaseException, outcome: Outcome
) -> None:
    shell = _shell(cap, Body(BODY[:2], raise_after=exc), mode)
    with pytest.raises(type(exc)) as raised:
        _read(shell, mode)
    assert raised.value is exc
    assert [r.outcome for r in cap.records] == [outcome]


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_parser_leaves_the_bytes_alone(cap: Capture, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shell = _shell(cap, Body([*BODY, STOP]), mode)

    def broken(self: AttemptObserver, chunk: bytes, now: float) -> bool:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(AttemptObserver, "on_chunk", broken)
    errors = internal_errors().get("stream", 0)
    assert _read(shell, mode) == [*BODY, STOP]
    assert internal_errors().get("stream", 0) == errors + len(BODY) + 1  # each failure counted
    assert len(cap.records) == 1  # still ended, at the end of the body


def test_a_body_nobody_closed_is_ended_by_the_garbage_collector(cap: Capture) -> None:
    shell = _shell(cap, Body([*BODY, STOP]), "sync")  # watched since the send (``watch_drop``)
    assert cap.records == []
    del shell
    gc.collect()
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [Outcome.ABANDONED]


def test_a_body_read_whole_then_closed_and_dropped_ends_once_and_hands_nothing_off(
    cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close after the end of the body, and the shell's collection, find the attempt ended: nothing is
    handed off (the test above is the positive control: an unended attempt's shell is)."""
    deferred: list[object] = []
    monkeypatch.setattr(_handoff, "defer", lambda *args: deferred.append(args))
    shell = _shell(cap, Body([*BODY[:2]]), "sync")  # no terminal event: the end of the body ends it
    assert list(shell) == BODY[:2]
    shell.close()
    del shell
    gc.collect()
    assert [r.outcome for r in cap.records] == [Outcome.INCOMPLETE]
    assert deferred == []
    dropped = _shell(cap, Body([*BODY]), "sync")
    del dropped
    gc.collect()
    assert len(deferred) == 1  # positive control: the same watch on an attempt not ended


STOPPED = {
    # how the app stops reading -> (outcome over httpx2, over httpx)
    "close": (Outcome.CLIENT_CLOSED, Outcome.CLIENT_CLOSED),  # close() on its generator
    "with_break": (Outcome.CLIENT_CLOSED, Outcome.CLIENT_CLOSED),  # break, then the with block closes
    "break": (Outcome.CLIENT_CLOSED, Outcome.ABANDONED),  # httpx2 closes at the break; httpx leaves it open
    "drop": (Outcome.ABANDONED, Outcome.ABANDONED),  # del, with no loop left and no close
}


@pytest.mark.parametrize("how", list(STOPPED))
@pytest.mark.parametrize("module", [httpx, httpx2], ids=lambda m: m.__name__)
def test_how_the_app_stops_reading_through_generators_over_the_body(cap: Capture, module: Any, how: str) -> None:
    """The app reads through generators over the response (``iter_lines()`` under an SDK's own, as
    google-genai's sync client does) and stops early. httpx2's ``iter_raw()`` closes the response as they
    unwind, httpx's closes nothing: a ``close()`` of the app's generator is ``client_closed`` over both
    (read where llmtap's own generator unwinds), and so is leaving a ``with`` block; a loop left by
    ``break`` alone is a close over httpx2 (done at once) and over httpx leaves the response open until
    the garbage collector (``abandoned``), as a dropped generator does over both."""
    request = module.Request("POST", BASE + "/v1/messages", json={"model": "m", "stream": True, "max_tokens": 8})
    response = module.Response(200, headers=dict(SSE), stream=Body([*BODY, STOP]), request=request)
    _stream.observe_sync(cap.tap, request, lambda: response, _stream.shells_for(module)[0])

    def sdk_stream() -> Generator[str, None, None]:
        yield from response.iter_lines()

    if how == "close":
        stream = sdk_stream()
        assert next(stream) == "event: message_start"
        stream.close()
        assert response.is_closed is (module is httpx2)  # what closed the response, if anything
    elif how == "with_break":
        with contextlib.closing(response):  # as ``with client.stream(...) as response`` ends
            for _ in sdk_stream():
                break
    elif how == "break":
        for _ in sdk_stream():
            break
        assert response.is_closed is (module is httpx2)
        del response  # over httpx nothing else ends the attempt
        gc.collect()
    else:
        stream = sdk_stream()
        assert next(stream) == "event: message_start"
        del stream, response
        gc.collect()
    cap.wait(1)
    assert [r.outcome for r in cap.records] == [STOPPED[how][0 if module is httpx2 else 1]]


@pytest.mark.parametrize("module", [httpx, httpx2], ids=lambda m: m.__name__)
def test_shells_are_the_clients_own_stream_kinds(module: Any) -> None:
    sync_shell, async_shell = _stream.shells_for(module)
    assert issubclass(sync_shell, module.SyncByteStream) and issubclass(async_shell, module.AsyncByteStream)
    assert _stream.shells_for(module) == (sync_shell, async_shell)  # made once per module


def _response(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers=dict(SSE), content=b"".join([*BODY, STOP]), request=request)


def test_a_send_inside_an_observed_send_is_observed_once(cap: Capture) -> None:
    """An explicit llmtap transport inside a patched client: the inner observation passes through."""
    request = httpx2.Request("POST", BASE + "/v1/messages", json={"model": "m"})
    shell = _stream.shells_for(httpx2)[0]

    def inner() -> httpx2.Response:
        response: httpx2.Response = _stream.observe_sync(cap.tap, request, lambda: _response(request), shell)
        return response

    response = _stream.observe_sync(cap.tap, request, inner, shell)
    assert response.status_code == 200
    assert [r.outcome for r in cap.records] == [Outcome.COMPLETED]
    # and the inner one alone is observed (the positive control)
    _stream.observe_sync(cap.tap, request, lambda: _response(request), shell)
    assert len(cap.records) == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_send_raises_the_apps_exception(cap: Capture, mode: str) -> None:
    request = httpx2.Request("POST", BASE + "/v1/messages", json={"model": "m"})
    error = httpx2.ConnectError("refused")

    def send() -> httpx2.Response:
        raise error

    async def asend() -> httpx2.Response:
        raise error

    shell = _stream.shells_for(httpx2)[0 if mode == "sync" else 1]
    with pytest.raises(httpx2.ConnectError) as raised:
        if mode == "sync":
            _stream.observe_sync(cap.tap, request, send, shell)
        else:
            asyncio.run(_stream.observe_async(cap.tap, request, asend, shell))
    assert raised.value is error
    assert [(r.outcome, r.status_code) for r in cap.records] == [(Outcome.CONNECTION_ERROR, None)]


class _PairsOnly:
    """Response headers that keep no httpx ``(raw, lower-case, value)`` items, only their raw pairs."""

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw


@pytest.mark.parametrize("items", [True, False], ids=["httpx-items", "raw-pairs"])
def test_response_headers_are_read_from_httpx_items_or_raw_pairs(cap: Capture, items: bool) -> None:
    """The shells read httpx's own header items; headers without them are read from their raw pairs, alike."""
    request = httpx2.Request("POST", BASE + "/v1/messages", json={"model": "m"})
    raw = [(b"Content-Type", b"text/event-stream"), (b"Request-Id", b"req_9"), (b"retry-after", b"2")]
    response = httpx2.Response(200, headers=raw, stream=Body([*BODY, STOP]), request=request)  # type: ignore[arg-type]
    if not items:
        response.headers = _PairsOnly(raw)  # type: ignore[assignment]
    shell = _stream.shells_for(httpx2)[0]
    _stream.observe_sync(cap.tap, request, lambda: response, shell)
    assert b"".join(response.stream) == b"".join([*BODY, STOP])  # type: ignore[arg-type]
    [record] = cap.records
    assert (record.outcome, record.streamed, record.request_id, record.retry_after) == (
        Outcome.COMPLETED,
        True,
        "req_9",
        2.0,
    )


# -- how a close is told from a drop, on this Python ----------------------------------------------------


def _read_at_unwind(readings: list[bool]) -> Generator[int, None, None]:
    """A generator that, as it is unwound, reads what unwound it (as the shells do)."""
    try:
        yield 1
        yield 2
    except GeneratorExit:
        readings.append(_bytecode.closed_by_the_app(stops=True))
        raise


def _over(inner: Generator[int, None, None]) -> Generator[int, None, None]:
    yield from inner  # an SDK's generator over llmtap's


def _leave_by_break(readings: list[bool]) -> None:
    for _ in _over(_read_at_unwind(readings)):
        break


def _leave_by_return(readings: list[bool]) -> int:
    for item in _over(_read_at_unwind(readings)):
        return item
    return 0


def _close(readings: list[bool]) -> None:
    stream = _over(_read_at_unwind(readings))
    next(stream)
    stream.close()


def _closing(readings: list[bool]) -> None:
    with contextlib.closing(_over(_read_at_unwind(readings))) as stream:
        next(stream)


def _drop(readings: list[bool]) -> None:
    stream = _over(_read_at_unwind(readings))
    next(stream)
    del stream


def _rebind(readings: list[bool]) -> None:
    stream = _over(_read_at_unwind(readings))
    next(stream)
    stream = _over(iter(()))  # type: ignore[arg-type]
    assert stream is not None


def _function_end(readings: list[bool]) -> None:
    stream = _over(_read_at_unwind(readings))
    next(stream)


READINGS = {  # how the app stops -> read as a close
    "break": (_leave_by_break, True),
    "return": (_leave_by_return, True),
    "close": (_close, True),
    "closing": (_closing, True),
    "del": (_drop, False),
    "rebind": (_rebind, False),
    "function_end": (_function_end, False),
}


@pytest.mark.parametrize("how", list(READINGS))
def test_what_unwound_the_generators_is_read_on_this_python(how: str) -> None:
    """The reading the shells make of a stream's end, pinned on the Python running the suite (``make pythons``
    runs it on each declared one): leaving a ``for`` loop and a ``close()`` are the app's close, a dropped
    generator is not."""
    stop, closed = READINGS[how]
    readings: list[bool] = []
    stop(readings)
    gc.collect()
    assert readings == [closed]


def test_on_an_untested_python_no_loop_exit_is_read_and_instrument_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An interpreter whose loop-exit opcode llmtap does not know: a ``break`` reads as no close (the
    conservative ``abandoned``) and nothing raises; a ``close()`` is still read (positive control), and
    ``instrument()`` logs it once."""
    monkeypatch.setattr(_bytecode, "_LOOP_EXITS", frozenset())
    monkeypatch.setattr(_bytecode, "LOOP_EXITS", {})
    monkeypatch.setattr("llmtap._log._seen", set())
    readings: list[bool] = []
    _leave_by_break(readings)
    _close(readings)
    assert readings == [False, True]
    with caplog.at_level("WARNING", logger="llmtap"):
        _bytecode.python_checked()
        _bytecode.python_checked()
    lines = [r.getMessage() for r in caplog.records if "is not one llmtap is tested on" in r.getMessage()]
    assert len(lines) == 1 and "`abandoned`" in lines[0]


def test_a_reading_that_fails_is_no_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytecode the reading cannot decode: no close, and nothing raises into the app's ``break``."""

    def broken(frame: Any, stops: bool) -> bool:
        raise IndexError("an interpreter laid out otherwise")

    monkeypatch.setattr(_bytecode, "_at_a_close", broken)
    readings: list[bool] = []
    _leave_by_break(readings)
    assert readings == [False]


def test_this_python_is_declared_and_every_declared_python_has_its_reading() -> None:
    """pyproject.toml's classifiers and ``requires-python`` say exactly the Pythons whose loop exits are known."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: 3."
    declared = {(3, int(c[len(prefix) :])) for c in project["classifiers"] if c.startswith(prefix)}
    assert declared == set(_bytecode.LOOP_EXITS)
    low, high = min(declared), max(declared)
    assert project["requires-python"] == f">={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}"
    assert sys.version_info[:2] in declared
