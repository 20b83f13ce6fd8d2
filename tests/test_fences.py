"""``import llmtap`` and ``instrument()`` survive a private name of OpenTelemetry's moving: the context key
``suppress_instrumentation()`` sets, which ``_core/tap.py`` reads without importing that package."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# -- the private suppression key (_core/tap.py) -------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import json, sys

    import opentelemetry.sdk.trace.export  # these hold the key they imported, as an SDK moved with the API would
    import opentelemetry.sdk.trace.export.in_memory_span_exporter
    from opentelemetry import context
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    private = context._SUPPRESS_INSTRUMENTATION_KEY
    mode = sys.argv[1]
    if mode != "present":
        del context._SUPPRESS_INSTRUMENTATION_KEY  # the API moved it
    if mode == "gone":
        sys.modules["opentelemetry.instrumentation.utils"] = None  # and no public check to fall back on

    import httpx2

    import llmtap
    from llmtap._core import tap
    from llmtap.simulator import Scenario, Simulator
    from llmtap.testing import capture

    body = {"max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
    headers = {"x-api-key": "k", **Scenario(tokens=2).headers()}

    def send(model):
        with httpx2.Client() as client:
            assert client.post(sim.base_url + "/v1/messages", json={**body, "model": model}, headers=headers).is_success

    def under(key, model):
        token = context.attach(context.set_value(key, True))
        try:
            send(model)
        finally:
            context.detach(token)

    with Simulator() as sim, capture(llmtap.Settings(base_urls=(sim.base_url,))) as cap:
        if mode != "gone":
            with suppress_instrumentation():
                send("m-suppressed")
        under("suppress_instrumentation", "m-plain-key")
        under(private, "m-private-key")
        send("m-observed")
        cap.wait(1)
        models = sorted(record.request_model for record in cap.records)
    print(json.dumps({"fallback": tap._SUPPRESS_KEY != private, "models": models}))
    """
)


@pytest.mark.parametrize(
    ("mode", "fallback", "models"),
    [
        ("present", False, ["m-observed"]),  # the control: the key where it is today
        ("moved", True, ["m-observed"]),  # the public is_instrumentation_enabled() reads the key it moved to
        ("gone", True, ["m-observed", "m-private-key"]),  # no public check: the plain key alone
    ],
)
def test_import_and_instrument_survive_the_private_suppress_key_moving(
    mode: str, fallback: bool, models: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"fallback": fallback, "models": models}
