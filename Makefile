# The two commands of the README: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint typecheck unit prometheus valgrind bench bench-check scale dashboards docs fuzz soak compat compat-legacy pythons clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the development toolchain: the SDKs, servers, linters and test tools (make test and the long runs)
$(STAMP): pyproject.toml tests/constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c tests/constraints.txt -e '.[dev]'
	touch $(STAMP)

# only what the demo runs: llmtap and its `demo` extra (the SDKs), not the toolchain
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

## demo: simulator + real anthropic and openai SDK traffic with llmtap on, /metrics on :9464, live view (Ctrl-C stops)
demo: $(DEMO_STAMP)
	$(BIN)/llmtap demo $(DEMO_ARGS)

# $(call apt_install,PACKAGE,CHECK): install Debian's PACKAGE unless the shell test CHECK passes (root or sudo -n)
apt_install = $(2) || { \
  echo "installing $(1) (Debian package)"; \
  SUDO=; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(1) >/dev/null 2>&1 || { \
    $$SUDO apt-get update -q >/dev/null && \
    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(1) >/dev/null; }; }

## prometheus: install Debian's prometheus/promtool when missing (the rule tests and live check need them)
prometheus:
	@$(call apt_install,prometheus,command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1)
	@promtool --version 2>&1 | head -1

## valgrind: install Debian's valgrind when missing (make bench counts instructions with it)
valgrind:
	@$(call apt_install,valgrind,command -v valgrind >/dev/null 2>&1)
	@valgrind --version

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

dashboards: $(STAMP)
	$(BIN)/python dashboards/build.py --check
	$(BIN)/python dashboards/slo.py --check

## docs: the documentation site in site/ (mkdocs build --strict: a broken link fails), after checking that the
## reference pages generated from the code (metrics, settings, CLI, API) are up to date (docs/gen_reference.py)
docs: $(STAMP)
	$(BIN)/python docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## test: ruff, mypy --strict, the dashboards and docs checks and pytest (real SDKs, simulator, real Prometheus)
test: $(STAMP) prometheus lint typecheck dashboards docs
	LLMTAPTEST_REQUIRE_PROMETHEUS=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

## bench: llmtap's cost inside the real SDKs (anthropic, openai, boto3's ConverseStream) as ratios to no
## instrumentation and to the peers (the Anthropic SDK's tracing, OpenInference's Bedrock), ~5 min (BENCH_ARGS=--quick:
## ~1 min), then the instruction-count gate (bench-check), then the tests' fixed timing budgets (pytest -m budget).
## Method and figures: benchmarks/README.md
bench: $(STAMP) valgrind
	$(BIN)/python benchmarks/sdk.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/instructions.py --check $(INSTR_ARGS)
	$(BIN)/python -m pytest -m budget -q

## bench-check: the regression gate alone: llmtap's instructions per request and per stream event under valgrind
## against benchmarks/instructions.json; fails when one grows by more than 2 % (~5 min of CPU). After a
## deliberate change: python benchmarks/instructions.py --record, and commit the file
bench-check: $(STAMP) valgrind
	$(BIN)/python benchmarks/instructions.py --check $(INSTR_ARGS)

## scale: 10,000 concurrent async streams and 64 threads on one sync client, in one process
scale: $(STAMP)
	$(BIN)/python benchmarks/scale.py $(SCALE_ARGS)

## compat: the tests of what other packages provide (the OpenTelemetry SDK and exporters, the SDKs' HTTP
## clients, prometheus-client, the price table) on the oldest versions pyproject.toml allows, in their own
## venv (~2 min; llmtap run's distro included). Left out: the tests marked current_otel (the fast paths' SDK internals, newer exporter
## APIs; outside its tested range, src/llmtap/_fences.py, a fast path falls back to the SDK's public calls,
## and tests/test_fences.py runs those fallbacks here). httpx2 and aiohttp first run at the
## SDKs' own floors, then (no pip resolution: the SDKs ask for more) at llmtap's, with the anthropic and
## aiohttp tests: httpx2 2.0.0, aiohttp 3.12.0 (before 3.13 aiohttp does not say whether it inflated a body)
COMPAT_VENV ?= .venv-compat
COMPAT_OTEL ?= 1.44.0
COMPAT_OTEL_CONTRIB ?= 0.65b0
COMPAT_ANTHROPIC ?= 2.0.0
COMPAT_OPENAI ?= 3.0.0
COMPAT_PROMETHEUS_CLIENT ?= 0.20.0
COMPAT_HTTPX ?= 0.27.0
COMPAT_HTTPX2 ?= 2.0.0
COMPAT_GENAI_PRICES ?= 0.2.3
COMPAT_AIOHTTP ?= 3.12.0
COMPAT_PYDANTIC ?= 2.10.0
COMPAT_ANTHROPIC_TESTS = tests/test_anthropic_sdk.py tests/test_clouds.py tests/test_httpx_transport.py \
  tests/test_transports.py
COMPAT_TESTS = $(COMPAT_ANTHROPIC_TESTS) tests/test_openai_sdk.py tests/test_aiohttp.py tests/test_otlp.py \
  tests/test_otel_fork.py tests/test_tracing.py tests/test_exemplars.py tests/test_span_memory.py \
  tests/test_fences.py tests/test_otel_bulk.py tests/test_prometheus.py tests/test_prometheus_deferred.py tests/test_multiprocess.py \
  tests/test_lifecycle.py tests/test_cost.py tests/test_run.py tests/test_settings.py
compat:
	[ -x $(COMPAT_VENV)/bin/python ] || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet -e '.[otel]' pytest pytest-asyncio pyyaml \
	  'anthropic[aiohttp,bedrock,vertex]==$(COMPAT_ANTHROPIC)' 'openai[aiohttp]==$(COMPAT_OPENAI)' httpx2==2.7.0 \
	  prometheus-client==$(COMPAT_PROMETHEUS_CLIENT) httpx==$(COMPAT_HTTPX) genai-prices==$(COMPAT_GENAI_PRICES) \
  pydantic==$(COMPAT_PYDANTIC) \
	  opentelemetry-sdk==$(COMPAT_OTEL) opentelemetry-api==$(COMPAT_OTEL) opentelemetry-proto==$(COMPAT_OTEL) \
	  opentelemetry-exporter-otlp-proto-http==$(COMPAT_OTEL) opentelemetry-exporter-otlp-proto-common==$(COMPAT_OTEL) \
	  opentelemetry-semantic-conventions==$(COMPAT_OTEL_CONTRIB) opentelemetry-instrumentation==$(COMPAT_OTEL_CONTRIB) \
	  opentelemetry-exporter-prometheus==$(COMPAT_OTEL_CONTRIB) opentelemetry-instrumentation-httpx==$(COMPAT_OTEL_CONTRIB)
	$(COMPAT_VENV)/bin/python -c "import opentelemetry.sdk.version as v; assert v.__version__ == '$(COMPAT_OTEL)', v.__version__"
	LLMTAPTEST_REQUIRE_PROMETHEUS=1 $(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  -m 'not current_otel and not budget' $(COMPAT_TESTS)
	$(COMPAT_VENV)/bin/python -m pip install --quiet --no-deps httpx2==$(COMPAT_HTTPX2) httpcore2==$(COMPAT_HTTPX2) \
	  aiohttp==$(COMPAT_AIOHTTP)
	$(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider -m 'not current_otel and not budget' \
	  $(COMPAT_ANTHROPIC_TESTS) tests/test_aiohttp.py
	$(MAKE) --no-print-directory compat-legacy

## compat-legacy: the SDK tests on the legacy line many apps still pin, on legacy httpx, in their own venv
## (~2 min): anthropic 0.125 (the last 0.x) with openai 2.54 (the last 2.x) over httpx 0.28.1, then openai
## 1.109.1 (the last 1.x) over httpx 0.27.0; the ollama client (legacy httpx only) over both (the SDKs tested elsewhere at their own floors: google-genai, groq, mistralai, cohere, aiobotocore, LiteLLM, are left out). What differs
## there is the SDKs' (exception classes, no tracing of their own, httpx leaving a response open at a loop's
## break): tests/support/sdklines.py
COMPAT_LEGACY_VENV ?= .venv-legacy
COMPAT_LEGACY_ANTHROPIC ?= 0.125.0
COMPAT_LEGACY_OPENAI ?= 2.54.0
COMPAT_LEGACY_OPENAI_1 ?= 1.109.1
COMPAT_LEGACY_TESTS = tests/test_anthropic_sdk.py tests/test_openai_sdk.py tests/test_clouds.py tests/test_sdk_cases.py \
  tests/test_transports.py tests/test_ttft_accuracy.py
COMPAT_LEGACY_RUN = LLMTAPTEST_REQUIRE_PROMETHEUS=1 $(COMPAT_LEGACY_VENV)/bin/python -m pytest -q -p no:cacheprovider \
  -m 'not current_otel and not budget' -k 'not gemini and not groq and not mistral and not cohere and not aiobotocore and not litellm' $(COMPAT_LEGACY_TESTS)
compat-legacy:
	[ -x $(COMPAT_LEGACY_VENV)/bin/python ] || $(PYTHON) -m venv $(COMPAT_LEGACY_VENV)
	$(COMPAT_LEGACY_VENV)/bin/python -m pip install --quiet -e '.[otel]' pytest pytest-asyncio pyyaml \
	  'anthropic[aiohttp,bedrock,vertex]==$(COMPAT_LEGACY_ANTHROPIC)' 'openai[aiohttp]==$(COMPAT_LEGACY_OPENAI)' \
	  httpx==0.28.1 genai-prices opentelemetry-exporter-prometheus opentelemetry-exporter-otlp-proto-http 'ollama>=0.6'
	$(COMPAT_LEGACY_VENV)/bin/python -c "import anthropic, openai, httpx; print('legacy line:', anthropic.__version__, openai.__version__, httpx.__version__)"
	$(COMPAT_LEGACY_RUN)
	$(COMPAT_LEGACY_VENV)/bin/python -m pip install --quiet 'openai[aiohttp]==$(COMPAT_LEGACY_OPENAI_1)' httpx==0.27.0
	$(COMPAT_LEGACY_VENV)/bin/python -c "import anthropic, openai, httpx; print('legacy line:', anthropic.__version__, openai.__version__, httpx.__version__)"
	$(COMPAT_LEGACY_RUN)

## pythons: the core suite (the hooks, stream endings, the observer, every SDK case, reference cycles) on every
## Python pyproject.toml's classifiers declare, each in its own venv (.venv-py3.X, ~3 min each). A declared
## Python that is not installed (on PATH as python3.X, or under pyenv's versions) fails the target.
PYTHONS_TESTS = tests/test_stream.py tests/test_observer.py tests/test_decision.py tests/test_handoff.py \
  tests/test_tap.py tests/test_httpx_transport.py tests/test_transports.py tests/test_aiohttp.py \
  tests/test_providers.py tests/test_anthropic_sdk.py tests/test_openai_sdk.py tests/test_gemini.py \
  tests/test_clouds.py tests/test_more_sdks.py tests/test_sdk_cases.py \
  tests/test_abandoned_in_gc.py tests/test_cancel_storm.py
DECLARED_PYTHONS = $(shell $(PYTHON) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
  print(' '.join(c.rsplit(' ', 1)[1] for c in p['project']['classifiers'] if c.startswith('Programming Language :: Python :: 3.')))")
pythons:
	@set -e; [ -n "$(DECLARED_PYTHONS)" ] || { echo "make pythons: no Python declared in pyproject.toml"; exit 2; }; \
	for v in $(DECLARED_PYTHONS); do \
	  py=; for c in python$$v $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null); do \
	    if "$$c" -c 'import sys; assert sys.version_info[:2] == tuple(map(int, "'$$v'".split(".")))' 2>/dev/null; \
	    then py=$$c; break; fi; done; \
	  [ -n "$$py" ] || { echo "make pythons: Python $$v is declared but not installed (python$$v, pyenv)"; exit 2; }; \
	  venv=.venv-py$$v; echo "== Python $$v ($$py), $$venv"; \
	  [ -x $$venv/bin/python ] || "$$py" -m venv $$venv; \
	  [ $$venv/.installed -nt pyproject.toml ] && [ $$venv/.installed -nt tests/constraints.txt ] || { $$venv/bin/python -m pip install --quiet --upgrade pip && \
	    $$venv/bin/python -m pip install --quiet -c tests/constraints.txt -e '.[dev]' && touch $$venv/.installed; }; \
	  $$venv/bin/python -m pytest -q -p no:cacheprovider $(PYTHONS_TESTS); \
	done

## fuzz: long differential fuzz of the real SDKs with and without llmtap (LLMTAPTEST_FUZZ_EXAMPLES, default 5000)
fuzz: $(STAMP)
	LLMTAPTEST_FUZZ_EXAMPLES=$${LLMTAPTEST_FUZZ_EXAMPLES:-5000} LLMTAPTEST_REQUIRE_FIXTURES=1 $(BIN)/python -m pytest tests/test_fuzz.py -q -s

## soak: >= 10,000 mixed streams against the simulator, exact accounting, under garbage-collector pressure with
## streams abandoned in reference cycles and a stall watchdog (LLMTAPTEST_SOAK_STREAMS, default 10000; _THREADS 12;
## _STALL 60 s without progress; _GC thresholds 200,2,2)
soak: $(STAMP)
	LLMTAPTEST_SOAK_STREAMS=$${LLMTAPTEST_SOAK_STREAMS:-10000} $(BIN)/python -m pytest tests/test_soak.py -q -s

clean:
	rm -rf site $(VENV) $(COMPAT_VENV) $(COMPAT_LEGACY_VENV) .venv-py3.* .mypy_cache .ruff_cache .pytest_cache
