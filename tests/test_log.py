"""``llmtap._log``: an input problem is logged once per process, an internal failure is counted every time
and logged at most once a minute per kind (saying how many were not logged), and none of it ever raises."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from llmtap import _log


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    _log.reset()
    yield
    _log.reset()


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llmtap"]


def test_an_input_problem_is_logged_once_per_key(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "llmtap"):
        for _ in range(3):
            _log.log_once("bad-header", "llmtap: bad header %s", "x")
        _log.log_once("big-event", "llmtap: oversized event")  # another key: logged too
    assert _lines(caplog) == ["llmtap: bad header x", "llmtap: oversized event"]


def test_internal_errors_are_all_counted_and_logged_once_a_minute_per_kind(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("llmtap._log.time", SimpleNamespace(monotonic=lambda: clock[0]))  # its clock only
    before = _log.internal_errors()
    with caplog.at_level(logging.WARNING, "llmtap"):
        for _ in range(5):
            _log.internal_error("sink", "llmtap: sink failed: %r", "boom")
        _log.internal_error("parser", "llmtap: parser failed")  # another kind: its own line
        clock[0] += _log.LOG_INTERVAL  # a minute later: one line, with what was not logged
        _log.internal_error("sink", "llmtap: sink failed: %r", "again")
    after = _log.internal_errors()
    assert (after["sink"] - before["sink"], after["parser"] - before["parser"]) == (6, 1)
    assert _lines(caplog) == [
        "llmtap: sink failed: 'boom'",
        "llmtap: parser failed",
        "llmtap: sink failed: 'again' (4 more like it since the last report)",
    ]


def test_an_unknown_kind_is_counted_as_other() -> None:
    before = _log.internal_errors()
    _log.internal_error("no-such-place", "llmtap: x")
    after = _log.internal_errors()
    assert after["other"] == before["other"] + 1
    assert set(after) == set(_log.INTERNAL_WHERE)


def test_a_broken_log_handler_never_reaches_the_request_path() -> None:
    class Broken(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise RuntimeError("handler down")

        def handleError(self, record: logging.LogRecord) -> None:  # logging's own guard, off: raise through
            raise RuntimeError("handler down")

    handler = Broken()
    _log.logger.addHandler(handler)
    try:
        before = _log.internal_errors()["stream"]
        _log.internal_error("stream", "llmtap: clock failed")  # must not raise
        assert _log.internal_errors()["stream"] == before + 1  # and still counted
        with pytest.raises(RuntimeError):  # positive control: the handler does raise when called directly
            _log.logger.warning("direct")
    finally:
        _log.logger.removeHandler(handler)


def test_quiet_drops_llmtaps_records_only_inside_the_block(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "llmtap"):
        with _log.quiet():
            _log.logger.warning("llmtap: inside")
        _log.logger.warning("llmtap: outside")
    assert _lines(caplog) == ["llmtap: outside"]


def test_label_overflows_are_counted_by_label() -> None:
    before = _log.label_overflows()
    _log.label_overflow("request_model")
    _log.label_overflow("request_model")
    after = _log.label_overflows()
    assert after["request_model"] == before.get("request_model", 0) + 2
    assert {k: v for k, v in after.items() if k != "request_model"} == {
        k: v for k, v in before.items() if k != "request_model"
    }


def _stderr_of(code: str) -> str:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return out.stderr


TYPO = "from llmtap._settings import Settings; Settings.from_env({'LLMTAP_METRICS_PROT': '1'})"


def test_the_name_is_said_once_whatever_the_logging_setup() -> None:
    """Under ``logging.basicConfig`` the logger's name is not repeated in the message
    (``WARNING:llmtap:ignoring …``, not ``WARNING:llmtap:llmtap: ignoring …``); with no logging configured,
    Python's last-resort handler prints the message alone, and then it says whose it is; the command line
    says it once too, and a message naming a command is left as it is."""
    said = _stderr_of(f"import logging; logging.basicConfig(); {TYPO}")
    assert said == "WARNING:llmtap:ignoring LLMTAP_METRICS_PROT: no such setting (did you mean LLMTAP_METRICS_PORT?)\n"
    said = _stderr_of(TYPO)  # no logging configured
    assert said == "llmtap: ignoring LLMTAP_METRICS_PROT: no such setting (did you mean LLMTAP_METRICS_PORT?)\n"
    line = _log.without_prefix()
    record = logging.LogRecord("llmtap", logging.WARNING, __file__, 1, "ignoring %s", ("X",), None)
    assert line.format(record) == "WARNING llmtap: ignoring X"
    record = logging.LogRecord("llmtap", logging.WARNING, __file__, 1, "llmtap run: nothing is exported", (), None)
    assert line.format(record) == "WARNING llmtap run: nothing is exported"
    record = logging.LogRecord("other", logging.WARNING, __file__, 1, "hello", (), None)
    assert line.format(record) == "WARNING other: hello"


def test_no_message_repeats_the_loggers_name() -> None:
    """Every log call in the source: no message begins with ``llmtap: `` (exceptions may: they have no logger)."""
    import re
    from pathlib import Path

    source = Path(_log.__file__).parent
    repeated = [
        f"{path.relative_to(source)}:{n}"
        for path in sorted(source.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""(?<!Error\()f?["']llmtap: """, line)
    ]
    # ImportError messages (no logger), the package docstring, and the one place that adds the name
    allowed = {"_core/cost.py", "__init__.py", "_log.py"}
    assert [r for r in repeated if r.split(":")[0] not in allowed] == []
    assert {r.split(":")[0] for r in repeated} == allowed  # control: the pattern finds what it looks for
