"""The demo's own parts: its copy of the alert rules and the live view's outcome lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import yaml

import llmtap
from llmtap.demo import DEMO_FOR, _demo_rules, _find_rules, _View
from llmtap.simulator import Scenario, Simulator
from llmtap.testing import capture

from ._prom import ALERTS


def test_demo_rules_cut_every_for_and_keep_the_expressions(tmp_path: Path) -> None:
    shipped = _find_rules()
    assert shipped is not None and shipped.resolve() == ALERTS.resolve()
    copy = yaml.safe_load(_demo_rules(shipped, tmp_path).read_text())
    original = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in copy["groups"] for r in g["rules"]]
    before = [r for g in original["groups"] for r in g["rules"]]
    assert [r.get("alert") or r["record"] for r in rules] == [r.get("alert") or r["record"] for r in before]
    assert [r["expr"] for r in rules] == [r["expr"] for r in before]
    alerts = [r for r in rules if "alert" in r]
    assert alerts and all(r["for"] == DEMO_FOR for r in alerts)
    assert any(r["for"] != DEMO_FOR for r in before if "alert" in r)  # positive control: the shipped ones differ


def test_live_view_tells_rejected_from_interrupted(sim: Simulator) -> None:
    """One 529 retried to success: the view shows rejected 1 (50% of the stream requests), completed 1 (100% of
    those not rejected), no server_error, and no call failed after the retries."""
    settings = llmtap.Settings(base_urls=(sim.base_url,), traces=False)
    with capture(settings) as cap:
        view = _View(cap.registry)
        view.snapshot()
        client = anthropic.Anthropic(base_url=sim.base_url, api_key="sk-test", max_retries=2)
        try:
            headers = Scenario(tokens=3, fail=1, fail_status=529, retry_after=0.01).headers()
            msg: Any = [{"role": "user", "content": "hi"}]
            for _ in client.messages.create(
                model="claude-view", max_tokens=16, messages=msg, stream=True, extra_headers=headers
            ):
                pass
        finally:
            client.close()
        cap.wait(2, calls=1)
        view.snapshot()
        text = view.render("http://127.0.0.1:1", 1.0, "http://127.0.0.1:2/classic/alerts")
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.startswith("    ")}
    assert lines["rejected"][:2] == ["1", "50.0%"]
    assert lines["completed"][:2] == ["1", "100.0%"]
    assert lines["server_error"][:2] == ["0", "0.0%"]
    assert "failed after the SDK's retries     0" in text
    assert "alerts: http://127.0.0.1:2/classic/alerts" in text
