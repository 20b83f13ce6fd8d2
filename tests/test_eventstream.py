"""The AWS event-stream framer (no wire: a pure unit), checked against botocore's own decoder, and
Bedrock streams through the attempt observer: bounded, CRC-checked, split anywhere."""

from __future__ import annotations

import base64
import itertools
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from llmtap._core.eventstream import EventStreamFramer, parse_headers
from llmtap._core.observer import AttemptObserver, Ending, ObserverConfig
from llmtap._core.record import Outcome
from llmtap._providers import anthropic as anthropic_provider
from llmtap._providers import bedrock, vertex_anthropic
from llmtap._providers._base import Provider
from llmtap.simulator._clouds import _chunk as compact_chunk
from llmtap.simulator._clouds import encode_event_stream_message
from tests.support import events as first_output
from tests.support.fixtures import recorded_fixtures, require_fixtures
from tests.support.replay import START, load

EVENT = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}


def chunk(event: dict[str, object]) -> bytes:
    data = base64.b64encode(json.dumps(event).encode()).decode()
    return encode_event_stream_message(EVENT, json.dumps({"bytes": data, "p": "abcdef"}).encode())


def messages(n: int) -> list[bytes]:
    return [encode_event_stream_message(EVENT, b'{"n":%d}' % i) for i in range(n)]


def botocore_decode(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(m.headers, m.payload) for m in buffer]


def test_simulator_encoding_is_what_botocore_decodes() -> None:
    data = b"".join(messages(3))
    assert botocore_decode(data) == [(EVENT, b'{"n":%d}' % i) for i in range(3)]
    assert EventStreamFramer(1024).feed(data) == [(EVENT, b'{"n":%d}' % i) for i in range(3)]


def test_split_at_every_byte() -> None:
    data = b"".join(messages(4))
    framer = EventStreamFramer(1024)
    frames = []
    for i in range(len(data)):
        frames += framer.feed(data[i : i + 1])
        assert len(framer._buf) <= max(len(m) for m in messages(4))  # never more than one message
    assert frames == [(EVENT, b'{"n":%d}' % i) for i in range(4)]
    assert framer.errors == 0


def test_bad_message_crc_is_dropped_and_counted_like_botocore_rejects_it() -> None:
    first, second, third = messages(3)
    bad = second[:-5] + bytes([second[-5] ^ 1]) + second[-4:]  # one payload bit flipped
    with pytest.raises(ChecksumMismatch):
        botocore_decode(bad)
    framer = EventStreamFramer(1024)
    frames = framer.feed(first + bad + third)
    assert [payload for _, payload in frames] == [b'{"n":0}', b'{"n":2}']  # the others still read
    assert framer.take_errors() == 1 and not framer.broken


def test_bad_prelude_loses_the_framing() -> None:
    first, second = messages(2)
    bad = bytes([first[0] ^ 1]) + first[1:]
    with pytest.raises(ChecksumMismatch):
        botocore_decode(bad)
    framer = EventStreamFramer(1024)
    assert framer.feed(bad + second) == []
    assert framer.broken and framer.errors == 1
    assert framer.feed(second) == []  # nothing after a lost framing is trusted


def test_oversized_message_is_skipped_unbuffered() -> None:
    big = encode_event_stream_message(EVENT, b"x" * 5000)
    small = messages(1)[0]
    framer = EventStreamFramer(1024)
    frames = []
    for i in range(0, len(big), 100):
        frames += framer.feed(big[i : i + 100])
        assert len(framer._buf) < 1024
    frames += framer.feed(small)
    assert frames == [(EVENT, b'{"n":0}')]  # positive control: the next message is read
    assert framer.errors == 1


def test_headers_of_every_type() -> None:
    raw = (
        b"\x02:a\x00"  # bool true
        + b"\x02:b\x04"
        + struct.pack(">i", 7)  # int32
        + b"\x02:c\x06"
        + struct.pack(">H", 3)
        + b"xyz"  # bytes
        + b"\x02:d\x09"
        + bytes(16)  # uuid
        + b"\x02:e\x07"
        + struct.pack(">H", 2)
        + b"ok"  # string
    )
    assert parse_headers(raw) == {":e": "ok"}
    with pytest.raises(ValueError):
        parse_headers(raw[:-1])  # a truncated value
    with pytest.raises(ValueError):
        parse_headers(b"\x02:z\x63")  # unknown type


CONFIG = ObserverConfig(stall_threshold=5.0, gap_bounds=(0.01, 0.1), max_event_bytes=2048, max_json_bytes=1 << 20)


def observer() -> AttemptObserver:
    start = START._replace(provider="aws.bedrock", url_path="/model/m/invoke-with-response-stream")
    obs = AttemptObserver(start, bedrock.PROVIDER, CONFIG)
    obs.on_response(200, [(b"content-type", b"application/vnd.amazon.eventstream"), (b"x-amzn-requestid", b"r-1")], 0.1)
    return obs


STREAM: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 9, "output_tokens": 1}},
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
    {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 9, "outputTokenCount": 3}},
]


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_bedrock_stream_through_the_observer(size: int) -> None:
    obs = observer()
    data = b"".join(chunk(e) for e in STREAM)
    for i in range(0, len(data), size):
        obs.on_chunk(data[i : i + size], 0.2 + i * 1e-6)
    record = obs.end(Ending.EOF, 1.0)
    assert record is not None
    assert record.outcome is Outcome.COMPLETED and record.streamed
    assert (record.usage.input_tokens, record.usage.output_tokens) == (9, 3)
    assert record.stop_reason == "end_turn" and record.request_id == "r-1" and record.response_id == "msg_1"
    assert record.first_token_at is not None and record.parse_errors == 0


def test_bedrock_exception_message_is_a_server_error() -> None:
    obs = observer()
    exception = encode_event_stream_message(
        {":message-type": "exception", ":exception-type": "throttlingException", ":content-type": "application/json"},
        b'{"message":"slow down"}',
    )
    obs.on_chunk(b"".join(chunk(e) for e in STREAM[:3]) + exception, 0.2)
    record = obs.end(Ending.EOF, 1.0)
    assert record is not None
    assert record.outcome is Outcome.SERVER_ERROR and record.error_type == "throttlingException"


def test_bedrock_oversized_and_corrupt_messages_are_parse_errors() -> None:
    obs = observer()
    huge = chunk({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x" * 4000}})
    garbage = encode_event_stream_message(EVENT, b'{"bytes":"not base64!"}')
    parts = [chunk(e) for e in STREAM]
    obs.on_chunk(b"".join(parts[:3]) + huge + garbage + b"".join(parts[3:]), 0.2)
    record = obs.end(Ending.EOF, 1.0)
    assert record is not None
    assert record.parse_errors == 2
    assert record.outcome is Outcome.COMPLETED  # positive control: what followed was read
    assert record.usage.output_tokens == 3


def test_bedrock_stream_cut_mid_message_is_incomplete() -> None:
    obs = observer()
    data = b"".join(chunk(e) for e in STREAM)
    obs.on_chunk(data[:-10], 0.2)
    record = obs.end(Ending.EOF, 1.0)
    assert record is not None and record.outcome is Outcome.INCOMPLETE
    assert record.stop_reason == "end_turn"  # the message_delta before the cut was read


def test_crc_is_zlib_crc32_of_the_whole_message() -> None:
    message = messages(1)[0]
    assert struct.unpack(">I", message[-4:])[0] == zlib.crc32(message[:-4])


@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=40))
def test_any_split_reads_what_one_read_does(cuts: list[int]) -> None:
    big = encode_event_stream_message(EVENT, b"y" * 1500)
    good = messages(6)
    bad = good[2][:-1] + bytes([good[2][-1] ^ 0xFF])
    data = good[0] + big + good[1] + bad + good[3] + big + good[4] + good[5]
    whole = EventStreamFramer(1024)
    expected = whole.feed(data)
    assert [p for _, p in expected] == [b'{"n":%d}' % i for i in (0, 1, 3, 4, 5)] and whole.errors == 3
    framer = EventStreamFramer(1024)
    frames = []
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        frames += framer.feed(data[a:b])
        assert len(framer._buf) <= 1024
    assert frames == expected and framer.errors == 3


@pytest.mark.fixtures
@pytest.mark.parametrize("path", recorded_fixtures("anthropic-messages-stream-*.json"), ids=lambda p: p.stem)
def test_recorded_streams_read_the_same_inside_bedrock_frames(path: Path) -> None:
    """Every recorded real Anthropic stream, re-framed as Bedrock sends it, one event per read at the
    same clock readings: the record (tokens, stop reason, ids, TTFT) equals the SSE one."""
    require_fixtures()
    fixture = load(path)
    text: str = fixture["response"]["body_text"]
    events = [block for block in text.replace("\r\n", "\n").split("\n\n") if "data:" in block]
    records = []
    framings = ((anthropic_provider.PROVIDER, "sse"), (bedrock.PROVIDER, "bedrock"), (bedrock.PROVIDER, "verbatim"))
    for provider, framing in framings:
        start = START._replace(provider=provider.name)
        obs = AttemptObserver(start, provider, CONFIG)
        ctype = b"text/event-stream" if framing == "sse" else b"application/vnd.amazon.eventstream"
        obs.on_response(200, [(b"content-type", ctype)], 0.5)
        for i, block in enumerate(events):
            if framing == "sse":
                obs.on_chunk(block.encode() + b"\n\n", 1.0 + i)
            else:
                data = next(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
                if framing == "verbatim":  # the API's own bytes, as Bedrock wraps them: content deltas skipped
                    obs.on_chunk(compact_chunk(data.encode()), 1.0 + i)
                else:  # re-encoded with spaces: every message decoded
                    obs.on_chunk(chunk(json.loads(data)), 1.0 + i)
        record = obs.end(Ending.EOF, 1000.0)
        assert record is not None
        records.append(record._replace(provider=""))
    sse, framed, verbatim = records
    assert framed == sse and verbatim == sse
    assert sse.outcome is Outcome.COMPLETED and sse.first_token_at is not None  # positive control


def test_bedrock_chunk_with_escaped_slashes_is_read() -> None:
    """JSON may escape "/" (base64 has them): the compact scan falls back to a full parse."""
    obs = observer()
    parts = [chunk(e) for e in STREAM]
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "???"}}
    encoded = base64.b64encode(json.dumps(delta).encode()).decode()
    assert "/" in encoded
    escaped = json.dumps({"bytes": encoded}).replace("/", "\\/").encode()
    obs.on_chunk(b"".join(parts[:2]) + encode_event_stream_message(EVENT, escaped) + b"".join(parts[3:]), 0.2)
    record = obs.end(Ending.EOF, 1.0)
    assert record is not None and record.parse_errors == 0 and record.outcome is Outcome.COMPLETED
    assert record.first_token_at is not None  # the escaped chunk carried the first token


# The one TTFT rule and the terminal-event ending, with the table of event kinds every other provider is
# checked against (tests/support/events.py, tests/test_providers.py): Claude's events, framed as Bedrock and
# as Vertex send them.
CLAUDE_KINDS = [
    pytest.param(kind, event, id=f"{kind}-{n}")
    for kind in first_output.KINDS
    if kind != "none"
    for n, event in enumerate(first_output.TABLE[anthropic_provider.PROVIDER][kind])
]


def _framed(provider: Provider, event: first_output.Event) -> bytes:
    if provider is bedrock.PROVIDER:
        _, payload = event
        assert isinstance(payload, dict)
        return chunk(payload)
    return first_output.sse(event)


def _cloud_observer(provider: Provider) -> AttemptObserver:
    obs = AttemptObserver(START._replace(provider=provider.name), provider, CONFIG)
    ctype = b"application/vnd.amazon.eventstream" if provider is bedrock.PROVIDER else b"text/event-stream"
    obs.on_response(200, [(b"content-type", ctype)], 0.0)
    return obs


CLOUDS = [pytest.param(bedrock.PROVIDER, id="bedrock"), pytest.param(vertex_anthropic.PROVIDER, id="vertex")]


@pytest.mark.parametrize("provider", CLOUDS)
@pytest.mark.parametrize(("kind", "event"), CLAUDE_KINDS)
def test_first_token_is_the_first_output_event(provider: Provider, kind: str, event: first_output.Event) -> None:
    obs = _cloud_observer(provider)
    for n, quiet in enumerate(first_output.TABLE[anthropic_provider.PROVIDER]["none"]):
        obs.on_chunk(_framed(provider, quiet), 0.01 * (n + 1))
    assert obs.first_token_at is None  # positive control: no output yet
    obs.on_chunk(_framed(provider, event), 1.0)
    obs.on_chunk(_framed(provider, first_output.TABLE[anthropic_provider.PROVIDER]["text"][0]), 2.0)
    record = obs.end(Ending.EOF, 3.0)
    assert record is not None and record.first_token_at == 1.0 and record.parse_errors == 0


@pytest.mark.parametrize(
    ("provider", "which"),
    [
        *((bedrock.PROVIDER, which) for which in ("final", "error", "exception")),  # only Bedrock has exceptions
        *((vertex_anthropic.PROVIDER, which) for which in ("final", "error")),
    ],
)
def test_terminal_event_ends_the_attempt(provider: Provider, which: str) -> None:
    final, error = first_output.TERMINAL[anthropic_provider.PROVIDER]
    obs = _cloud_observer(provider)
    rows = first_output.TABLE[anthropic_provider.PROVIDER]
    for n, event in enumerate([*rows["none"], rows["text"][0]]):
        assert obs.on_chunk(_framed(provider, event), 0.1 + n / 100) is False
    if which == "exception":
        last = encode_event_stream_message(
            {":message-type": "exception", ":exception-type": "modelStreamErrorException"}, b'{"message":"x"}'
        )
    else:
        last = _framed(provider, final if which == "final" else error)
    assert obs.on_chunk(last, 1.0) is True
    record = obs.end(Ending.TERMINAL, 1.0)
    assert record is not None and record.ended_at == 1.0
    assert record.outcome is (Outcome.COMPLETED if which == "final" else Outcome.SERVER_ERROR)


# Past the first token, whole content-delta messages are only checked, never decoded (EventStreamFramer.skip)

DELTA = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok "}}'
COMPACT = [json.dumps(e, separators=(",", ":")).encode() for e in STREAM]


def test_quiet_frame_prefix_is_how_a_content_delta_is_wrapped() -> None:
    (prefix,) = bedrock.PROVIDER.quiet_frames
    for event in [DELTA, *COMPACT]:  # only the content delta begins so
        ((_, payload),) = EventStreamFramer(1024).feed(compact_chunk(event))
        assert payload.startswith(prefix) == event.startswith(b'{"type":"content_block_delta",')
        assert bedrock.PROVIDER.event_from_frame(EVENT, payload) == (None, event)
    with pytest.raises(ValueError, match="multiple of 3"):
        bedrock._quiet_chunk(b'{"type":"x"')


def _read_framer(*messages: bytes, max_frame: int = 1024) -> EventStreamFramer:
    framer = EventStreamFramer(max_frame, bedrock.PROVIDER.quiet_frames)
    for message in messages:
        assert len(framer.feed(message)) == 1  # its header block is now the last one read
    return framer


def test_skip_consumes_whole_intact_quiet_messages_only() -> None:
    (prefix,) = bedrock.PROVIDER.quiet_frames
    delta, stop = compact_chunk(DELTA), compact_chunk(COMPACT[-1])
    assert EventStreamFramer(1024, (prefix,)).skip(delta) == 0  # no message read yet: no header block known
    framer = _read_framer(delta)
    assert framer.skip(delta) == len(delta)  # positive control: one whole message, the common read
    assert framer.skip(delta + delta) == 2 * len(delta)
    assert framer.skip(delta + stop + delta) == len(delta)  # stops at a message that is needed
    assert framer.skip(delta[:-1]) == 0  # not whole
    bad = delta[:-5] + bytes([delta[-5] ^ 1]) + delta[-4:]
    assert framer.skip(bad + delta) == 2 * len(delta)  # CRCs are the client's decoder's to check (not read here)
    assert framer.feed(bad) == [] and framer.take_errors() == 1  # control: a message read is checked
    for length in (len(delta) - 4, len(delta) + 4):  # a length gone wrong: the message after it fails the checks
        wrong = length.to_bytes(4, "big") + delta[4:]
        assert framer.skip(wrong + delta) == length
        reader = _read_framer(delta)
        assert reader.feed((wrong + delta)[length:]) == [] and reader.broken and reader.take_errors() == 1
    ((_, payload),) = EventStreamFramer(1024).feed(delta)
    other = encode_event_stream_message({":message-type": "event", ":event-type": "chunk"}, payload)
    assert framer.skip(other) == 0  # another header block: feed parses it
    assert _read_framer(delta, max_frame=len(delta)).skip(delta) == len(delta)  # control: within max_frame
    assert _read_framer(delta, max_frame=len(delta)).skip(delta + delta + b"x") == 2 * len(delta)
    small = _read_framer(delta)
    small.max_frame = len(delta) - 1
    assert small.skip(delta) == 0  # over max_frame: feed skips and counts it
    plain = EventStreamFramer(1024)
    assert len(plain.feed(delta)) == 1 and plain.skip(delta) == 0  # no quiet prefix: nothing is ever skipped
    short = encode_event_stream_message(EVENT, prefix[:20])  # a payload shorter than the prefix
    assert framer.skip(short + delta) == 0 and framer.skip(delta + short) == len(delta)
    framer.feed(delta[:50])  # a partial message held: nothing is skipped until it completes
    assert framer.skip(delta) == 0
    assert [p for _, p in framer.feed(delta[50:])] == [payload] and framer.errors == 0


@pytest.mark.parametrize("reads", ["message", "whole", 7])
def test_compact_bedrock_stream_decodes_only_what_it_needs(reads: str | int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's (and the API's) compact events: past the first token, content deltas read whole never
    reach the provider's decoding; every other message does, and the record is the one a full read gives."""
    seen: list[bytes] = []
    original = bedrock.PROVIDER.event_from_frame

    def spy(headers: dict[str, str], payload: bytes) -> tuple[bytes | None, bytes] | None:
        converted = original(headers, payload)
        if converted is not None:
            seen.append(converted[1])
        return converted

    monkeypatch.setattr(bedrock.PROVIDER, "event_from_frame", spy)
    events = [*COMPACT[:3], DELTA, DELTA, DELTA, *COMPACT[3:]]
    parts = [compact_chunk(e) for e in events]
    data = b"".join(parts)
    if reads == "message":
        chunks = parts
    elif reads == "whole":
        chunks = [b"".join(parts[:3]), b"".join(parts[3:])]
    else:
        chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    obs = observer()
    for n, part in enumerate(chunks):
        obs.on_chunk(part, 1.0 + n)
    record = obs.end(Ending.EOF, 1000.0)
    assert record is not None
    assert record.outcome is Outcome.COMPLETED and record.parse_errors == 0
    assert (record.usage.input_tokens, record.usage.output_tokens) == (9, 3) and record.stop_reason == "end_turn"
    first_token_read = {"message": 2, "whole": 0, 7: (len(b"".join(parts[:3])) - 1) // 7}[reads]
    assert record.first_token_at == 1.0 + first_token_read
    if reads == 7:  # a read rarely starts at a message boundary: (nearly) every message is decoded
        assert seen[:3] == COMPACT[:3] and seen[-3:] == COMPACT[3:] and DELTA in seen  # positive control
    else:
        assert seen == COMPACT


def test_a_skipped_content_delta_is_not_crc_checked_but_a_length_gone_wrong_is_counted() -> None:
    """Past the first token a content delta with a bad CRC is skipped unread (the client's decoder checks CRCs:
    ``test_clouds.py``); one with a wrong length breaks the framing, which is counted."""
    parts = [compact_chunk(e) for e in COMPACT]
    delta = compact_chunk(DELTA)
    bad_crc = delta[:-5] + bytes([delta[-5] ^ 1]) + delta[-4:]
    bad_length = (len(delta) + 4).to_bytes(4, "big") + delta[4:]
    for bad, errors in ((bad_crc, 0), (bad_length, 1)):
        obs = observer()
        for n, part in enumerate([*parts[:3], delta, bad + delta, delta, *parts[3:]]):
            obs.on_chunk(part, 0.2 + n / 100)
        record = obs.end(Ending.EOF, 1.0)
        assert record is not None and record.parse_errors == errors
        if errors:  # the framing lost: the end was not read
            assert record.outcome is Outcome.INCOMPLETE
        else:  # the messages after it were read
            assert record.outcome is Outcome.COMPLETED and record.usage.output_tokens == 3
