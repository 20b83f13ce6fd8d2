"""The framers: whole events out of a streamed body read in any pieces, bounded in memory."""

from __future__ import annotations

import base64
import random

import pytest

from llmtap._core.framer import FrameFeed, NdjsonFramer, SseFramer, split_events
from llmtap._providers import bedrock
from llmtap._providers._catalog import ENTRIES, parser
from llmtap.simulator._clouds import encode_event_stream_message
from tests.support.replay import splits

EVENTS = [(b"message_start", b'{"a":1}'), (b"ping", b"{}"), (b"content_block_delta", b'{"t":"x"}')] * 3
BODY = b"".join(b"event: " + name + b"\ndata: " + data + b"\n\n" for name, data in EVENTS)


Seen = list[tuple[bytes | None, bytes]]


def framed(pieces: list[bytes], scan_all: bool = True, max_event: int = 1 << 16) -> tuple[SseFramer, Seen]:
    seen: list[tuple[bytes | None, bytes]] = []
    framer = SseFramer(lambda event, data: seen.append((event, data)), (b"message_",), max_event, "test")
    framer.scan_all = scan_all
    for piece in pieces:
        framer.feed(piece)
    framer.finish()
    return framer, seen


@pytest.mark.parametrize("seed", range(5))
def test_any_split_gives_the_same_events(seed: int) -> None:
    framer, seen = framed(splits(BODY, random.Random(seed), max_piece=7))
    assert seen == EVENTS and framer.errors == 0 and framer.pending == b""


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_cr_framing(newline: bytes) -> None:
    body = BODY.replace(b"\n", newline)
    assert framed(splits(body, random.Random(1), max_piece=5))[1] == EVENTS


def test_after_the_first_token_only_regions_with_a_marker_are_parsed() -> None:
    seen: list[tuple[bytes | None, bytes]] = []
    framer = SseFramer(lambda event, data: seen.append((event, data)), (b"message_",), 1 << 16, "test")
    framer.feed(b"event: ping\ndata: {}\n\n")
    assert seen == [(b"ping", b"{}")]  # positive control: everything while scan_all
    framer.scan_all = False
    framer.feed(b"event: ping\ndata: {}\n\n")
    framer.feed(b"event: ping\ndata: {}\n\n")  # the fast path now
    framer.feed(b"event: content_block_delta\ndata: {}\n\nevent: mess")
    framer.feed(b"age_stop\ndata: {}\n\n")
    assert seen == [(b"ping", b"{}"), (b"message_stop", b"{}")]
    framer.feed(b"event: content_block_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n")
    assert seen[-2:] == [(b"content_block_delta", b"{}"), (b"message_stop", b"{}")]  # a region is parsed whole


def test_an_oversized_event_is_dropped_and_framing_resumes() -> None:
    big = b"event: content_block_delta\ndata: " + b"x" * 200 + b"\n\n"
    framer, seen = framed([BODY[:30], BODY[30:], *splits(big, random.Random(0), 13), BODY], max_event=100)
    assert seen == EVENTS + EVENTS and framer.errors == 1


def test_pending_never_exceeds_the_bound() -> None:
    seen: list[tuple[bytes | None, bytes]] = []
    framer = SseFramer(lambda event, data: seen.append((event, data)), (), 64, "test")
    for _ in range(100):
        framer.feed(b"data: " + b"y" * 50)
        assert len(framer.pending) <= 64
    assert framer.errors == 1 and seen == []


def test_an_unterminated_last_event_is_not_dispatched() -> None:
    assert framed([BODY + b"event: message_stop\ndata: {}\n"])[1] == EVENTS


def test_split_events_joins_data_lines_and_skips_comments() -> None:
    seen: list[tuple[bytes | None, bytes]] = []
    split_events(b": comment\n\ndata: a\ndata:b\n\nevent: e\ndata: c", lambda e, d: seen.append((e, d)))
    assert seen == [(None, b"a\nb"), (b"e", b"c")]


def _bedrock_chunk(json_event: bytes) -> bytes:
    payload = b'{"bytes":"' + base64.b64encode(json_event) + b'"}'
    return encode_event_stream_message({":message-type": "event", ":event-type": "chunk"}, payload)


def test_event_stream_messages_are_dispatched_and_filtered_by_marker() -> None:
    seen: list[tuple[bytes | None, bytes]] = []
    feed = FrameFeed(lambda event, data: seen.append((event, data)), bedrock.PROVIDER, 1 << 16)
    delta = b'{"type":"content_block_delta"}'
    stop = b'{"type":"message_stop"}'
    body = _bedrock_chunk(delta) + _bedrock_chunk(delta) + _bedrock_chunk(stop)
    feed.feed(body[:7])
    feed.feed(body[7:40])
    assert seen == [] and feed.errors == 0  # nothing whole yet
    feed.feed(body[40:])
    assert seen == [(None, delta), (None, delta), (None, stop)]  # positive control: everything while scan_all
    feed.scan_all = False
    feed.feed(body)
    assert seen[3:] == [(None, stop)]


def test_event_stream_errors_are_counted() -> None:
    feed = FrameFeed(lambda event, data: None, bedrock.PROVIDER, 1 << 16)
    message = bytearray(_bedrock_chunk(b"{}"))
    message[-1] ^= 1  # a bad message CRC
    feed.feed(bytes(message))
    assert feed.errors == 1


def test_a_read_of_one_quiet_event_is_skipped_without_the_marker_search() -> None:
    quiet = b'event: delta\ndata: {"type":"delta",'
    seen: Seen = []
    framer = SseFramer(lambda event, data: seen.append((event, data)), (b"message_",), 1 << 16, "test", (quiet,))
    framer.scan_all = False
    framer.feed(b"data: {}\n\n")  # into the fast path
    framer.feed(quiet + b'"text":"message_"}\n\n')  # a marker inside a quiet event: skipped
    assert seen == []
    framer.feed(quiet + b'"text":"message_"}\n\nevent: x\ndata: {}\n\n')  # two events: searched, so parsed
    framer.feed(b'event: delta\ndata: {"type":"message_stop"}\n\n')  # another type: searched
    assert [data for _, data in seen] == [b'{"type":"delta","text":"message_"}', b"{}", b'{"type":"message_stop"}']


def test_every_providers_quiet_events_name_their_data_line() -> None:
    declared = [p for p in map(parser, ENTRIES) if p.quiet_events]
    assert declared  # positive control: some provider has quiet events
    for provider in declared:
        for prefix in provider.quiet_events:
            assert prefix.startswith(b"event: ") and b"\ndata: {" in prefix, provider.name
            assert prefix.count(b"\n") == 1 and not any(marker in prefix for marker in provider.markers)


def test_quiet_prefixes_must_reach_into_their_data_line() -> None:
    with pytest.raises(ValueError, match="data line"):
        SseFramer(lambda event, data: None, (), 100, "test", (b"event: a\ndata: {", b"event: longer_name\ndata: {"))
    with pytest.raises(ValueError):
        SseFramer(lambda event, data: None, (), 100, "test", (b"event: no data line",))
    fine = (b'event: a\ndata: {"type":"a",', b'event: bb\ndata: {"type":')
    SseFramer(lambda event, data: None, (), 100, "test", fine)


# -- JSON lines (ollama) ------------------------------------------------------------------------------

LINES = [b'{"message":{"content":"a"},"done":false}', b'{"message":{"content":"b"},"done":false}'] * 3 + [
    b'{"done":true,"done_reason":"stop"}'
]
NDJSON = b"".join(line + b"\n" for line in LINES)


def lines_framed(
    pieces: list[bytes], scan_all: bool = True, max_line: int = 1 << 16
) -> tuple[NdjsonFramer, list[bytes]]:
    seen: list[bytes] = []

    def dispatch(event: bytes | None, data: bytes) -> None:
        assert event is None
        seen.append(data)

    framer = NdjsonFramer(dispatch, (b'"done":true', b'"error"'), max_line, "test")
    framer.scan_all = scan_all
    for piece in pieces:
        framer.feed(piece)
    framer.finish()
    return framer, seen


@pytest.mark.parametrize("seed", range(5))
def test_json_lines_any_split_gives_the_same_lines(seed: int) -> None:
    framer, seen = lines_framed(splits(NDJSON, random.Random(seed), max_piece=7))
    assert seen == LINES and framer.errors == 0 and framer.pending == b""


def test_json_lines_crlf_blank_lines_and_a_last_line_without_its_newline() -> None:
    body = NDJSON.replace(b"\n", b"\r\n").replace(LINES[1], b"\r\n" + LINES[1])[:-2]  # a blank line; no last CRLF
    framer, seen = lines_framed(splits(body, random.Random(2), max_piece=5))
    assert [line.rstrip(b"\r") for line in seen] == LINES and framer.errors == 0


def test_json_lines_after_the_first_output_only_reads_with_a_marker_are_parsed() -> None:
    seen: list[bytes] = []
    framer = NdjsonFramer(lambda event, data: seen.append(data), (b'"done":true',), 1 << 16, "test")
    framer.feed(LINES[0] + b"\n")
    assert seen == [LINES[0]]  # positive control: everything while scan_all
    framer.scan_all = False
    framer.feed(LINES[1] + b"\n" + LINES[0] + b"\n")
    framer.feed(b'{"done":tr')
    assert seen == [LINES[0]]
    framer.feed(b'ue,"done_reason":"stop"}\n')
    assert seen == [LINES[0], LINES[-1]]


def test_json_lines_an_oversized_line_is_dropped_and_framing_resumes() -> None:
    big = b'{"message":{"content":"' + b"x" * 200 + b'"},"done":false}\n'
    framer, seen = lines_framed([NDJSON[:30], NDJSON[30:], *splits(big, random.Random(0), 13), NDJSON], max_line=100)
    assert seen == LINES + LINES and framer.errors == 1


def test_json_lines_pending_never_exceeds_the_bound() -> None:
    seen: list[bytes] = []
    framer = NdjsonFramer(lambda event, data: seen.append(data), (), 64, "test")
    for _ in range(100):
        framer.feed(b"y" * 50)
        assert len(framer.pending) <= 64
    framer.finish()
    assert framer.errors == 1 and seen == []
    framer.feed(b"\n" + LINES[0] + b"\n")  # the dropped line ends: the next one is whole again
    assert seen == [LINES[0]]
