"""Ends racing reads: the harness both metric exporters' "counted once" tests share."""

from __future__ import annotations

import threading
from collections.abc import Callable


def ends_racing_reads(end: Callable[[], None], read: Callable[[], float], threads: int, each: int) -> list[float]:
    """``end`` called ``each`` times on each of ``threads`` threads while another thread calls ``read`` until they
    are done; returns what the reads saw, in order."""
    done = threading.Event()
    seen: list[float] = []

    def ends() -> None:
        for _ in range(each):
            end()

    def reads() -> None:
        while not done.is_set():
            seen.append(read())

    reader = threading.Thread(target=reads)
    reader.start()
    workers = [threading.Thread(target=ends) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    done.set()
    reader.join()
    return seen
