"""A FastAPI service that streams Claude's answer to its own HTTP clients, with no llmtap code in it.

llmtap is switched on from outside: ``llmtap run -- ...`` (zero code) or ``gunicorn.conf.py``'s
``post_fork`` hook. ``GET /metrics`` serves every worker's metrics (prometheus-client's multiprocess
mode: ``PROMETHEUS_MULTIPROC_DIR`` set before the server starts), llmtap's included.

    pip install -r requirements.txt                  # llmtap[run] from this checkout, fastapi, gunicorn, ...
    export PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) ANTHROPIC_API_KEY=...
    gunicorn -c gunicorn.conf.py app:app                                       # 4 uvicorn workers
    llmtap run -- uvicorn app:app --workers 4 --port 8000                      # or: uvicorn, zero code
    curl -N localhost:8000/chat -H 'content-type: application/json' -d '{"prompt": "Hello"}'

``ANTHROPIC_BASE_URL`` points it at another endpoint (the tests use llmtap's simulator); what the SDK
sends there is observed without configuration.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from pydantic import BaseModel

MODEL = os.environ.get("CHAT_MODEL", "claude-haiku-4-5")
SIMULATOR_HEADER = "x-llmtap-sim"  # forwarded so tests can inject faults end to end (llmtap's simulator)

app = FastAPI()
client = anthropic.AsyncAnthropic()  # ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL from the environment


class Chat(BaseModel):
    prompt: str
    max_tokens: int = 512


@app.post("/chat")
async def chat(chat: Chat, request: Request) -> StreamingResponse:
    """Stream the model's answer as plain text, chunk by chunk as it arrives."""
    forwarded = {SIMULATOR_HEADER: request.headers[SIMULATOR_HEADER]} if SIMULATOR_HEADER in request.headers else {}

    async def answer() -> AsyncIterator[str]:
        async with client.messages.stream(
            model=MODEL,
            max_tokens=chat.max_tokens,
            messages=[{"role": "user", "content": chat.prompt}],
            extra_headers=forwarded,
        ) as stream:
            try:
                async for text in stream.text_stream:
                    yield text
            except anthropic.APIError as exc:  # the model's stream failed mid-answer (e.g. overloaded_error)
                yield f"\n[the answer was cut short: {exc.__class__.__name__}]\n"

    return StreamingResponse(answer(), media_type="text/plain", headers={"x-worker-pid": str(os.getpid())})


@app.get("/metrics")
def metrics() -> Response:
    """Every worker's metrics in multiprocess mode (the documented way), else this process's."""
    registry = REGISTRY
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        forget_dead_workers(directory)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def forget_dead_workers(directory: str) -> None:
    """Drop the live gauges (in-flight streams) of workers that died. gunicorn does it in
    ``child_exit``; ``uvicorn --workers`` has no such hook. Same host only (pids are local)."""
    for path in Path(directory).glob("gauge_live*_*.db"):
        pid = int(path.stem.rpartition("_")[2])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
        except PermissionError:
            pass  # alive, another user's
