"""The bounded buffer of a non-streaming body."""

from __future__ import annotations

from llmtap._core.bodybuffer import BodyBuffer


def test_pieces_come_back_whole_once() -> None:
    buffer = BodyBuffer(10)
    assert buffer.add(b"abc") and buffer.add(b"def")
    assert buffer.take() == b"abcdef"
    assert buffer.take() is None  # taken
    assert BodyBuffer(10).take() is None  # nothing kept


def test_one_piece_is_not_copied() -> None:
    piece = b"x" * 8
    buffer = BodyBuffer(10)
    buffer.add(piece)
    assert buffer.take() is piece


def test_the_bound_drops_the_body_and_reports_once() -> None:
    buffer = BodyBuffer(5)
    assert buffer.add(b"12345") and not buffer.overflowed  # positive control: exactly the bound fits
    assert buffer.add(b"6") is False and buffer.overflowed
    assert buffer.add(b"7") is True  # reported once only
    assert buffer.take() is None
