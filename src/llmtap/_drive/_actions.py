"""What an app does with one call, written once for every SDK (:mod:`._sdks`), sync and async.

An action is one of :data:`ACTIONS`. :func:`run` does it with a sync client, :func:`arun` with an async
one; neither raises what the SDK raised: it is in :attr:`Result.error`. :func:`drive` makes the client,
does the action in the client's mode and closes the client: one call of a test.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ._base import Config, Mode, Sdk
from ._sdks import adapter

__all__ = ["ACTIONS", "Action", "Result", "arun", "drive", "run"]

Action = Literal["create", "stream", "close", "drop", "drop_read", "hold", "cancel", "helper", "raw", "exit"]

#: what each action does with the call
ACTIONS: Final[dict[Action, str]] = {
    "create": "a non-streaming call",
    "stream": "a stream read to its end",
    "close": "a stream read to its `early`-th content piece, then closed (stream.close())",
    "drop": "a stream dropped unread and unclosed (del, then the garbage collector)",
    "drop_read": "a stream read to its `early`-th content piece, then dropped unclosed (del + gc)",
    "hold": "a stream read to its `early`-th content piece (0: unread) and handed back unclosed in "
    "Result.value as (stream, iterator): the caller abandons it its own way",
    "cancel": "async only: the task reading the stream is cancelled after the first content piece",
    "helper": "the SDK's stream helper (anthropic, openai: `with ....stream() as s`), read to the end",
    "raw": "openai: with_raw_response.create(stream=True), its parse() read to the end",
    "exit": "anthropic: the stream helper's `with` block left after the first text",
}


@dataclass
class Result:
    """What the app saw of one call."""

    #: what the SDK raised (never re-raised), None when nothing
    error: BaseException | None = None
    #: stream events read
    events: int = 0
    #: the content pieces read (a non-streaming call: its whole text)
    pieces: list[str] = field(default_factory=list)
    #: the task was cancelled (``cancel``)
    cancelled: bool = False
    #: the non-streaming response; ``hold``: (stream, iterator)
    value: Any = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def first_token(self) -> bool:
        return any(self.pieces)


def _read(sdk: Sdk, stream: Any, result: Result, until: int | None) -> Any:
    """Read ``stream``'s events until ``until`` content pieces arrived (None: to the end); returns its
    iterator (a generator that is still alive when the action drops it)."""
    if until is not None and until <= 0:
        return None
    iterator = iter(sdk.events(stream))
    for event in iterator:
        result.events += 1
        piece = sdk.piece(event)
        if piece is not None:
            result.pieces.append(piece)
            if until is not None and len(result.pieces) >= until:
                break
    return iterator


async def _aread(sdk: Sdk, stream: Any, result: Result, until: int | None) -> Any:
    if until is not None and until <= 0:
        return None
    iterator = sdk.events(stream).__aiter__()
    async for event in iterator:
        result.events += 1
        piece = sdk.piece(event)
        if piece is not None:
            result.pieces.append(piece)
            if until is not None and len(result.pieces) >= until:
                break
    return iterator


def run(
    sdk: Sdk, action: Action, model: str | None = None, *, headers: Mapping[str, str] | None = None, early: int = 2,
    **params: Any,
) -> Result:  # fmt: skip
    """Do ``action`` with the sync client ``sdk``; ``early``: content pieces before ``close``/``drop_read``."""
    result = Result()
    model = model or sdk.model
    try:
        if action == "create":
            result.value = sdk.create(model, headers=headers, **params)
            result.pieces.append(sdk.text(result.value))
        elif action in ("helper", "exit"):
            with sdk.helper(model, headers=headers, **params) as stream:
                _read(sdk, stream, result, 1 if action == "exit" else None)
        elif action == "raw":
            _read(sdk, sdk.raw(model, headers=headers, **params).parse(), result, None)
        elif action == "cancel":
            raise ValueError("cancel needs an async client")
        else:
            stream = sdk.open(model, headers=headers, **params)
            if action == "stream":
                _read(sdk, stream, result, None)
            elif action == "close":
                _read(sdk, stream, result, early)
                sdk.close_stream(stream)
            elif action == "hold":
                result.value = (stream, _read(sdk, stream, result, early))
            else:  # drop, drop_read
                iterator = _read(sdk, stream, result, early if action == "drop_read" else 0)
                del stream, iterator
                gc.collect()
    except Exception as exc:
        result.error = exc
    return result


async def arun(
    sdk: Sdk, action: Action, model: str | None = None, *, headers: Mapping[str, str] | None = None, early: int = 2,
    **params: Any,
) -> Result:  # fmt: skip
    """:func:`run` with the async client ``sdk``; ``cancel`` too."""
    result = Result()
    model = model or sdk.model
    try:
        if action == "create":
            result.value = await sdk.create(model, headers=headers, **params)
            result.pieces.append(sdk.text(result.value))
        elif action in ("helper", "exit"):
            async with sdk.helper(model, headers=headers, **params) as stream:
                await _aread(sdk, stream, result, 1 if action == "exit" else None)
        elif action == "raw":
            raw = await sdk.raw(model, headers=headers, **params)
            await _aread(sdk, raw.parse(), result, None)
        elif action == "cancel":
            await _cancel(sdk, model, headers, params, result)
        else:
            stream = await sdk.open(model, headers=headers, **params)
            if action == "stream":
                await _aread(sdk, stream, result, None)
            elif action == "close":
                await _aread(sdk, stream, result, early)
                await sdk.close_stream(stream)
            elif action == "hold":
                result.value = (stream, await _aread(sdk, stream, result, early))
            else:
                iterator = await _aread(sdk, stream, result, early if action == "drop_read" else 0)
                del stream, iterator
                gc.collect()
    except Exception as exc:
        result.error = exc
    return result


async def _cancel(sdk: Sdk, model: str, headers: Mapping[str, str] | None, params: Any, result: Result) -> None:
    """A task reads the stream; it is cancelled once the first content piece arrived (or it ended)."""
    first = asyncio.Event()

    async def consume() -> None:
        stream = await sdk.open(model, headers=headers, **params)
        async for event in sdk.events(stream):
            result.events += 1
            piece = sdk.piece(event)
            if piece is not None:
                result.pieces.append(piece)
                first.set()

    task = asyncio.create_task(consume())
    waiter = asyncio.create_task(first.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        result.cancelled = True


def drive(
    name: str | type[Sdk], base_url: str, action: Action, *, mode: Mode = "sync", model: str | None = None,
    headers: Mapping[str, str] | None = None, early: int = 2, params: Mapping[str, Any] | None = None,
    **config: Any,
) -> Result:  # fmt: skip
    """One call: a client of SDK ``name`` (an adapter's name or class; ``config``: the rest of
    :class:`Config`) does ``action`` in ``mode`` and is closed; the garbage collector runs after it (a
    dropped stream is found)."""
    settings = Config(base_url, mode, **config)
    call = dict(params or {})
    try:
        if mode == "sync":
            sdk = adapter(name, settings)
            try:
                return run(sdk, action, model, headers=headers, early=early, **call)
            finally:
                sdk.close()
        return asyncio.run(_adrive(name, settings, action, model, headers, early, call))
    finally:
        gc.collect()


async def _adrive(
    name: str | type[Sdk], config: Config, action: Action, model: str | None, headers: Mapping[str, str] | None,
    early: int, params: dict[str, Any],
) -> Result:  # fmt: skip
    sdk = adapter(name, config)
    try:
        return await arun(sdk, action, model, headers=headers, early=early, **params)
    finally:
        await sdk.close()
