"""A TCP proxy on 127.0.0.1 that holds every byte it forwards for a fixed time, each way: a network path of known
latency between an SDK and the simulator (the server's own timers never see it)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

__all__ = ["DelayProxy"]


class DelayProxy:
    """Forwards each connection to ``upstream`` (``host:port``), every chunk read delivered ``delay`` seconds after
    it arrived, in order, in both directions (a latency, not a bandwidth limit: chunks are not held back by the
    ones before them beyond their own due time). A request and its answer therefore cross ``2 * delay`` of path.

    Use as a context manager; :attr:`url` is ``http://127.0.0.1:<port>``."""

    def __init__(self, upstream: str, delay: float) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host.removeprefix("http://"), int(port))
        self.delay = delay
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self.url = ""

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        server = self._server
        if server is not None:

            async def stop() -> None:
                server.close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(self._pipe(client_reader, upstream_writer), self._pipe(upstream_reader, client_writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the peer left, or the proxy stops (a cancelled connection task would be logged by asyncio)
        finally:
            for writer in (client_writer, upstream_writer):
                writer.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await writer.wait_closed()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read; the end of the stream
        too (a half close)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            try:
                while data := await reader.read(65536):
                    queue.put_nowait((loop.time() + self.delay, data))
            finally:
                queue.put_nowait((loop.time() + self.delay, b""))

        async def write() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not data:
                    if writer.can_write_eof():
                        with contextlib.suppress(OSError):
                            writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        await asyncio.gather(read(), write())
