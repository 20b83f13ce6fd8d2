"""Everything the test modules share, one module a concern; test modules import from here, never from each other.

* ``fixtures``: the recorded provider responses (where they are, skip or fail when absent);
* ``paths``: where the repository is, and the folders the tests read;
* ``scripts``: the repository's scripts (dashboards, benchmarks, examples' apps) loaded as modules;
* ``replay``: feeding recorded or synthetic bodies through the pure attempt observer;
* ``records``: attempt starts, records and calls built by hand, for the units that take one;
* ``events``: the output-event table every provider fills (the first-token rule), its terminal events, framed;
* ``sse``: an Anthropic SSE stream written by hand and a driver feeding it to a bare observer;
* ``spans``: the tracing exporter as a unit (records in, spans read from an in-memory exporter);
* ``race``: ends racing reads, the harness both metric exporters' "counted once" tests share;
* ``rawserver``: a raw-socket HTTP server sending exactly the bytes a test gives it;
* ``delayproxy``: a TCP proxy that holds every byte it forwards for a fixed time (a network path of known latency);
* ``prom``: dashboards and rule files, and the rule for a missing ``prometheus`` / ``promtool``;
* ``promlive``: a real Prometheus and the processes around it (start, stop, wait, its HTTP API);
* ``otlp``: an OTLP/HTTP receiver on 127.0.0.1 that decodes what it gets;
* ``nativeprom``: a Collector stand-in: OTLP in, Prometheus' protobuf exposition out, exponential histograms as
  native ones (what a Prometheus 2.42 with native histograms scrapes);
* ``deploy``: free ports, waiting for servers, scraping ``/metrics``, reading the OTLP receiver;
* ``own``: what is llmtap's own code (by the package's directory, never a name pattern);
* ``cycles``: the reference cycles llmtap leaves behind, and what each SDK case must leave (test_sdk_cases);
* ``layers``: one request through two hooked layers (the control that takes the "observing" flag away);
* ``sdklines``: what differs on the legacy SDK line;
* ``imports``: the package's import graph, read from its source (the import-contract tests);
* ``gcwatch``: the soak's instruments (a stall watchdog, code run inside the garbage collector), and a sink
  with a lock and a collection on another thread holding it (the hand-off tests).

``conftest.py`` holds only the pytest fixtures.
"""
