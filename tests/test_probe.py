"""``llmtap probe`` against the simulator with known injected behaviour: it must recover what was
injected, put every abort in its true outcome class, and say which claims hold (with positive
controls), through the real SDKs with llmtap instrumented."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmtap import Outcome
from llmtap.probe import ProbeOptions, ProbeReport, render_html, render_svgs, render_text, run_probe
from llmtap.probe._claims import ClaimError, check_latency, check_ttft, parse_band, parse_formula
from llmtap.probe._stats import betainc, f_quantile, fit_line, median_ci, t_quantile
from llmtap.simulator import Scenario, Simulator

REQUESTS = 24
TTFT, JITTER, PREFILL, GAP = 0.03, 0.002, 0.00005, 0.004
INJECTED = f"fill,count_input,ttft={TTFT},jitter={JITTER},prefill={PREFILL},gap={GAP}"
ARTICLE_HEADER, ARTICLE_TTFT, ARTICLE_LATENCY = "X-Anthropic-RRSM", "0.42±0.03", "0.42+0.008*tokens"
ABORTS = {
    "close": Outcome.CLIENT_CLOSED,
    "cancel": Outcome.CANCELLED,
    "drop": Outcome.ABANDONED,
    "timeout": Outcome.TIMEOUT,
}


# ---------------------------------------------------------------------- statistics and claim parsing


def test_quantiles_match_tables() -> None:
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-5)
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    assert t_quantile(0.025, 30) == pytest.approx(-2.042272, abs=1e-5)
    assert f_quantile(0.95, 2, 10) == pytest.approx(4.102821, abs=1e-5)
    assert f_quantile(0.95, 2, 100) == pytest.approx(3.087296, abs=1e-5)
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-4)


def test_median_ci_and_fit() -> None:
    xs = [float(i) for i in range(1, 21)]
    assert median_ci(xs) == (6.0, 15.0)  # n=20: the 6th and 15th order statistics (coverage 95.9 %)
    ys = [0.5 + 0.01 * x + (0.001 if i % 2 else -0.001) for i, x in enumerate(xs)]
    fit = fit_line(xs, ys)
    assert fit is not None
    assert fit.b == pytest.approx(0.01, rel=0.02) and fit.a_ci[0] < 0.5 < fit.a_ci[1]
    assert fit.band(fit.x_mean) < fit.band(fit.x_max)
    assert fit_line([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # one x value: not identifiable


@pytest.mark.parametrize(
    ("text", "tokens", "expected", "tolerance"),
    [
        ("0.42+0.008*tokens", 10, 0.5, 0.0),
        ("0.42 + 0.008 \u00d7 tokens ± 0.05", 10, 0.5, 0.05),
        ("0.42+0.008*tokens+-0.05", 10, 0.5, 0.05),
        ("(0.4 + 0.02) + output_tokens / 125", 10, 0.5, 0.0),
        ("0.1 + 0.001*tokens**2", 10, 0.2, 0.0),
    ],
)
def test_formula_parses(text: str, tokens: int, expected: float, tolerance: float) -> None:
    formula = parse_formula(text)
    assert formula(tokens) == pytest.approx(expected)
    assert formula.tolerance == tolerance


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('touch /tmp/pwned')",
        "tokens.real",
        "abs(tokens)",
        "0.42 + x",
        "tokens ** tokens",
        "2 ** 100",
        "lambda: 1",
        "[1][0]",
        "0.42 if tokens else 1",
        "1" * 300,
        "",
    ],
)
def test_formula_rejects_anything_but_arithmetic(text: str) -> None:
    with pytest.raises(ClaimError):
        parse_formula(text)


def test_band_parses() -> None:
    assert (parse_band("0.42±0.03").center, parse_band("0.42±0.03").tolerance) == (0.42, 0.03)
    assert parse_band("0.42+-0.03").low == pytest.approx(0.39)
    assert parse_band("0.42 s").tolerance == 0.0
    with pytest.raises(ClaimError):
        parse_band("fast")
    with pytest.raises(ValueError):  # a bad claim fails before any request
        ProbeOptions(expect_latency="os.system('x')")


def test_report_url_keeps_no_credentials() -> None:
    from llmtap.probe._run import _clean_url

    assert _clean_url("https://user:pw@gw.example:8443/v1/?key=s3cret#x") == "https://gw.example:8443/v1"
    assert _clean_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


# ---------------------------------------------------------------------- the probe against the simulator


@pytest.fixture(scope="module")
def report() -> ProbeReport:
    return run_probe(
        ProbeOptions(
            requests=REQUESTS,
            max_tokens=80,
            prompt_words=400,
            simulate=True,
            sim_scenario=INJECTED,
            expect_headers=(ARTICLE_HEADER, "request-id"),
            expect_ttft=ARTICLE_TTFT,
            expect_latency=ARTICLE_LATENCY,
            throttle=True,
        )
    )


def test_recovers_the_injected_ttft(report: ProbeReport) -> None:
    """Per request, the probe's TTFT is within 1 ms (median) of the moment the simulator wrote the
    first token (same process, same clock): that is the probe's own measurement error. Against the
    injected TTFT (which the simulator counts from the end of its preamble) the probe also sees the
    request's trip, the simulator's own work and its thread scheduling on this shared machine
    (measured 1-4 ms under load): that offset is only bounded loosely, as a sanity check that the
    probe times the first token and not the headers or the end."""
    (m,) = report.latency
    assert m.completed == REQUESTS and m.truth is not None and m.time_to_first_token is not None
    lags = [s.first_token_lag for s in report.samples if s.first_token_lag is not None]
    assert len(lags) == REQUESTS and min(lags) >= 0
    assert statistics.median(lags) <= 0.001
    assert m.truth.first_token_lag_p50 <= 0.001
    offsets = [
        s.time_to_first_token - s.injected_ttft
        for s in report.samples
        if s.time_to_first_token is not None and s.injected_ttft is not None
    ]
    assert 0 <= statistics.median(offsets) <= 0.010
    injected = [s.injected_ttft for s in report.samples if s.injected_ttft is not None]
    assert all(TTFT - JITTER <= t <= TTFT + JITTER + PREFILL * 500 for t in injected)


def test_recovers_the_per_token_time_and_prefill(report: ProbeReport) -> None:
    (m,) = report.latency
    fit = m.duration_fit
    assert fit is not None and fit.n == REQUESTS
    assert abs(fit.b - GAP) / GAP <= 0.05, fit.b
    assert fit.x_max - fit.x_min >= 60  # lengths were varied: the fit is identifiable
    ttft_fit = m.ttft_fit
    assert ttft_fit is not None
    assert abs(ttft_fit.b - PREFILL) / PREFILL <= 0.25, ttft_fit.b  # ~5 standard errors
    assert m.tokens_per_second is not None
    assert abs(m.tokens_per_second.p50 - 1 / GAP) / (1 / GAP) <= 0.05


def test_aborts_land_in_their_true_class(report: ProbeReport) -> None:
    assert {a.mode: a.outcome for a in report.aborts} == {mode: o.value for mode, o in ABORTS.items()}
    for abort in report.aborts:
        assert abort.as_expected and abort.status == 200 and not abort.final_usage
        assert abort.server_saw == "client_disconnected"
    by_mode = {a.mode: a for a in report.aborts}
    assert by_mode["cancel"].client_exception == "asyncio.CancelledError"
    assert by_mode["close"].client_exception is None and by_mode["drop"].client_exception is None
    assert by_mode["timeout"].client_exception is not None and "Timeout" in by_mode["timeout"].client_exception


def test_claims(report: ProbeReport) -> None:
    claims = {c.claim: c for c in report.claims}
    assert claims[f"header {ARTICLE_HEADER}"].holds is False
    assert "absent" in claims[f"header {ARTICLE_HEADER}"].finding
    assert claims["header request-id"].holds is True  # positive control
    assert claims[f"TTFT {ARTICLE_TTFT} s"].holds is False
    assert claims[f"duration = {ARTICLE_LATENCY}"].holds is False
    # positive controls through the same tests, on the same measurements
    (m,) = report.latency
    ttfts = [s.time_to_first_token for s in report.samples if s.time_to_first_token is not None]
    assert m.truth is not None
    assert check_ttft(parse_band(f"{m.truth.injected_ttft_p50:.4f}±0.004"), ttfts).holds is True
    inputs = [s.input_tokens for s in report.samples if s.input_tokens is not None]
    true_line = parse_formula(f"{TTFT} + {PREFILL}*input_tokens + {GAP}*(tokens-1) ± 0.005")
    assert check_latency(true_line, m.duration_fit, statistics.median(inputs)).holds is True
    # ...and a claim only 25 % off in the per-token time is caught
    wrong_slope = parse_formula(f"{TTFT} + {PREFILL}*input_tokens + {GAP * 1.25}*(tokens-1) ± 0.005")
    assert check_latency(wrong_slope, m.duration_fit, statistics.median(inputs)).holds is False


def test_throttling_compares_retry_after_with_the_sdk_backoff(report: ProbeReport) -> None:
    assert report.throttle is not None and report.throttle.throttled_calls == 1
    steps = report.throttle.steps
    assert [s.status for s in steps] == [429, 429, 200]
    # refused, then answered: the probe reports the throttled attempts as rejected, not as server errors
    assert [s.outcome for s in steps] == ["rejected", "rejected", "completed"]
    for step in steps[:2]:
        assert step.advised == pytest.approx(0.25)
        assert step.waited is not None and 0.25 <= step.waited < 0.25 + 0.05
    assert steps[0].retry_after_header == "1" and steps[0].retry_after_ms_header == "250"


def test_headers_unseen_and_metrics(report: ProbeReport) -> None:
    names = {h.name for h in report.headers.headers}
    assert {"request-id", "anthropic-ratelimit-requests-remaining", "retry-after-ms", "server"} <= names
    # every attempt llmtap counted, plus the GET /v1/metrics (not an LLM API call, so not counted)
    attempts = sum(v for k, v in report.metrics.items() if k.startswith("llmtap_attempts"))
    assert attempts == 1 + REQUESTS + 4 + 3  # warm-up, latency, aborts, throttle
    assert report.headers.responses == attempts + 1
    assert report.metrics['llmtap_streams_total{outcome="completed"}'] >= REQUESTS
    assert report.metrics['llmtap_streams_total{outcome="rejected"}'] == 2  # the throttle phase's two 429s
    assert 'llmtap_streams_total{outcome="server_error"}' not in report.metrics  # zeros are left out
    for outcome in ABORTS.values():
        assert report.metrics[f'llmtap_streams_total{{outcome="{outcome.value}"}}'] == 1
    unseen = " ".join(u.what for u in report.unseen)
    assert "GPU utilisation" in unseen and "kernel launch" in unseen and "/v1/metrics" in unseen
    assert any(u.measured and "answered 404" in u.measured for u in report.unseen)


def test_outputs(report: ProbeReport, tmp_path: Path) -> None:
    data = json.loads(report.to_json())
    assert data["target"]["simulated"] is True and len(data["samples"]) == REQUESTS
    assert all(a["as_expected"] for a in data["aborts"])
    text = render_text(report)
    assert "DOES NOT HOLD" in text and "HOLDS" in text and "Aborts" in text
    page = render_html(report)
    assert page.count("<svg") == 2 and "<script" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "").replace(report.target.base_url, "")
    svgs = render_svgs(report)
    assert set(svgs) == {"ttft-sim-model.svg", "duration-sim-model.svg"}
    assert all(s.startswith("<svg") for s in svgs.values())


# ---------------------------------------------------------------------- a black box with a key, and openai


@pytest.fixture
def black_box() -> Iterator[Simulator]:
    with Simulator(default=Scenario.parse(f"fill,ttft=0.02,gap={GAP}")) as sim:
        yield sim


def test_endpoint_with_a_key_never_leaks_it(black_box: Simulator) -> None:
    secret = "sk-ant-probe-secret-0123456789"
    report = run_probe(
        ProbeOptions(base_url=black_box.base_url, api_key=secret, models=("claude-x",), requests=8, aborts=False)
    )
    assert not report.target.simulated and report.target.models == ("claude-x",)
    served = black_box.served
    assert served and all(s.auth_present for s in served)  # the key was sent...
    for output in (report.to_json(), render_text(report), render_html(report), repr(report)):
        assert secret not in output  # ...and is nowhere in the report
    fit = report.latency[0].duration_fit
    assert fit is not None and abs(fit.b - GAP) / GAP <= 0.05


def test_a_refused_key_stops_after_one_request() -> None:
    with Simulator(default=Scenario(fail=99, fail_status=401)) as sim:
        report = run_probe(ProbeOptions(base_url=sim.base_url, api_key="wrong", throttle=True))
        assert len(sim.served) == 1 and sim.served[0].status == 401
    assert report.samples == () and report.aborts == () and report.throttle is None
    assert any("401" in note and "API key" in note for note in report.notes)
    # positive control: a key that works gets past the warm-up (test_endpoint_with_a_key_never_leaks_it)


def test_openai_sdk_aborts() -> None:
    report = run_probe(ProbeOptions(provider="openai", simulate=True, sim_scenario=INJECTED, requests=6, max_tokens=80))
    assert report.target.sdk.startswith("openai")
    assert report.latency[0].completed == 6
    assert {a.mode: a.outcome for a in report.aborts} == {mode: o.value for mode, o in ABORTS.items()}


def test_budget_bounds_the_probe() -> None:
    t0 = time.monotonic()
    report = run_probe(ProbeOptions(simulate=True, requests=200, timeout=1.5))
    assert time.monotonic() - t0 < 1.5 + 2.0
    assert report.target.stopped_early is not None
    assert 0 < report.latency[0].requests < 200


# ---------------------------------------------------------------------- the command, end to end


def test_cli_end_to_end(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    html_path, svg_dir = tmp_path / "probe.html", tmp_path / "svg"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llmtap", "probe", "--expect-header", ARTICLE_HEADER, "--expect-ttft", "0.42+-0.03",
         "--expect-latency", ARTICLE_LATENCY, "--html", str(html_path), "--svg", str(svg_dir)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr  # claims that do not hold
    assert elapsed < 60
    out = proc.stdout
    assert "embedded simulator" in out and "no API key" in proc.stderr, (out, proc.stderr)
    for expected in (
        f"[DOES NOT HOLD] header {ARTICLE_HEADER}",
        "absent",
        "[DOES NOT HOLD] TTFT 0.42+-0.03 s",
        "[DOES NOT HOLD] duration = 0.42+0.008*tokens",
        "close    → client_closed   (as expected)",
        "cancel   → cancelled       (as expected)",
        "drop     → abandoned       (as expected)",
        "timeout  → timeout         (as expected)",
    ):
        assert expected in out, out
    # the default simulator injects 50 ms TTFT and 4 ms per token: the report says so
    fit_line_text = next(line for line in out.splitlines() if line.strip().startswith("duration ≈"))
    per_token_ms = float(fit_line_text.split("+ ")[1].split(" ms")[0])
    # (5 % is checked with less TTFT noise above; the default injects ±5 ms jitter and 20 requests)
    assert math.isclose(per_token_ms, 4.0, rel_tol=0.10), fit_line_text
    assert html_path.read_text().count("<svg") == 2
    assert sorted(p.name for p in svg_dir.iterdir()) == ["duration-sim-model.svg", "ttft-sim-model.svg"]
