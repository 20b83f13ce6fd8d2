"""What llmtap leaves to the garbage collector: every case of the driver's table, through every SDK, mode and
transport, collected with ``gc.DEBUG_SAVEALL`` (``tests/support/cycles.py``).

* Over the SDKs that make no reference cycle of their own (the anthropic and openai SDKs, Bedrock and Vertex
  included, over httpx2), nothing of llmtap's is garbage: llmtap makes no reference cycle on any path, errors,
  retries, timeouts, closes, cancellations and dropped streams included. A cycle would keep an attempt's
  state (its span, its parts) alive until a collection finds it, the oldest generation's for a long stream.
* Where the client or its retry library does keep each response in a cycle (``httpx``'s response and its
  bound stream refer to each other: google-genai over httpx, groq, cohere; tenacity keeps the tracebacks of
  google-genai's retried errors), llmtap's shell sits in that cycle: what it keeps alive there is the ended
  attempt's small record parts, not its span (1.3-2.4 KB a request, against 4.2-5.3 KB with the span's
  attribute dict, lock and event and link lists: tracemalloc around one collection). The ended
  attempt lets its span and its sinks' states go.

The app in these tests lets go of the exception it caught (``Result.error``): a caught exception kept in a
frame of its own traceback is a cycle of the app's, through every frame the exception passed, llmtap's too.
"""

from __future__ import annotations

import gc
import sys
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

import llmtap
from llmtap._drive import BOTOCORE, SDKS, Case, Mode, drive, fresh_model
from llmtap.simulator import Simulator
from llmtap.testing import Capture
from tests.support.cycles import cycles_of_llmtap, is_llmtap
from tests.test_sdk_cases import SECRET, _aws_env, _params  # noqa: F401 (_aws_env: an autouse fixture)

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

ACYCLIC = frozenset({"anthropic", "bedrock", "vertex", "openai-chat", "openai-responses"})
"""The SDKs whose clients make no reference cycle of their own in any case of the table on Python 3.11."""
CYCLIC_FROM_312 = {
    "anthropic": frozenset({"timeout", "dropped", "dropped_unary"}),
    "bedrock": frozenset({"timeout", "dropped", "dropped_unary"}),
    "vertex": frozenset({"timeout", "dropped", "dropped_unary"}),
    "openai-chat": frozenset({"timeout", "dropped", "dropped_unary", "abandoned"}),
    "openai-responses": frozenset({"timeout", "dropped", "dropped_unary", "abandoned"}),
}
"""The cases of those SDKs that, from Python 3.12 on, leave a reference cycle of the SDK's own with no llmtap
in the process: a timeout's or a dropped stream's traceback keeps the frames of httpx2 / httpcore2 and the
SDK's generators (21 to 25 frames in the garbage for anthropic's sync timeout, dropped and dropped_unary; none
on 3.11), an OpenAI stream left unread keeps its ``httpx2.Response`` in its own cycle. llmtap's shell and
frames are in those cycles because the response or the traceback holds them, not because llmtap made one: the
ended-span check still applies to them. Measured with each case driven with no instrumentation and the
collector's ``DEBUG_SAVEALL``, as :func:`cycles_of_llmtap` does."""


def _acyclic(sdk: str, case: Case) -> bool:
    if sdk not in ACYCLIC:
        return False
    return sys.version_info < (3, 12) or case.name not in CYCLIC_FROM_312[sdk]


DROPPING = frozenset({"drop", "drop_read"})
"""The actions after which the attempt is ended by the garbage collector (its span is in the garbage then)."""


def _spans_in_the_garbage() -> list[object]:
    return [obj for obj in gc.garbage if _is_span(obj)]


def _is_span(obj: object) -> bool:
    # a weakref.proxy (botocore's garbage holds some) is no span, and asking a dead one raises
    return not isinstance(obj, weakref.ProxyTypes) and isinstance(obj, ReadableSpan)


@pytest.mark.parametrize(("sdk", "mode", "transport", "case"), _params())
def test_what_an_attempt_leaves_to_the_garbage_collector(
    sim: Simulator, cap: Capture, sdk: str, mode: Mode, transport: str | None, case: Case
) -> None:
    if sys.version_info >= (3, 12) and case.name == "abandoned" and sdk in ("aiobotocore", "aiobotocore-invoke"):
        # from 3.12 aiobotocore's stream dropped unread is in a reference cycle of its own: only the collector
        # ends its attempt, and under DEBUG_SAVEALL the collector keeps it instead (test_sdk_cases checks its end)
        pytest.skip("aiobotocore's dropped stream ends only when the collector frees its cycle (Python 3.12+)")
    model = fresh_model(SDKS[sdk].model)
    spans: list[object] = []
    with warnings.catch_warnings(), cycles_of_llmtap() as ours:
        if sdk in BOTOCORE and (case.action in DROPPING or case.action == "cancel"):
            # (aio)botocore leaves the connection of a stream the app dropped (or whose reading task it cancelled)
            # to the collector, with or without llmtap
            warnings.simplefilter("ignore", ResourceWarning)
        result = drive(
            sdk, sim.base_url, case.action, mode=mode, model=model, api_key=SECRET, transport=transport,
            headers=case.scenario.headers(), **case.config(),
        )  # fmt: skip
        raised = repr(result.error)[:300]  # (only its text: the exception would keep its frames alive)
        result.error = None  # the app lets go of what it caught
        del result
        try:
            cap.wait(len(case.outcomes), calls=1 if SDKS[sdk].linked_retries else len(case.outcomes))
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the call raised {raised}") from None
        gc.collect()
        spans = _spans_in_the_garbage()
    assert len(cap.records) == len(case.outcomes)  # observed: each attempt ended
    if _acyclic(sdk, case):
        assert ours == [], f"llmtap's objects in a reference cycle ({case.action}): {ours[:6]}"
    elif case.action not in DROPPING:
        assert spans == [], f"ended spans kept alive by the garbage ({case.action}): {spans[:3]}"
    spans.clear()


def test_the_garbage_check_finds_llmtap_objects_and_spans_in_a_cycle() -> None:
    """Positive control of both checks: an object of llmtap's and an ended span, kept in a reference cycle."""
    provider = TracerProvider()
    span = provider.get_tracer("control").start_span("control")
    span.end()
    with cycles_of_llmtap() as ours:
        cycle: list[Any] = [llmtap.Settings(), span]
        cycle.append(cycle)
        del cycle, span
        gc.collect()
        spans = _spans_in_the_garbage()
    assert [line.split(":")[0] for line in ours] == ["Settings"]
    assert len(spans) == 1 and is_llmtap(spans[0]) is False
    spans.clear()
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
