"""Micro-batching: calls that arrive within a few milliseconds are answered by one batched call (the local-fed
model's forward pass runs once for them all)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["MicroBatcher"]

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Collect items submitted within ``window_s`` (or until ``max_batch``) and run them as one batch.

    ``run`` is a blocking function from a list of items to a list of results (same order);
    it runs in a worker thread. An exception fails every item of its batch.
    """

    def __init__(self, run: Callable[[list[T]], list[R]], *, window_s: float = 0.005, max_batch: int = 64) -> None:
        if window_s < 0 or max_batch < 1:
            raise ValueError(f"need window_s >= 0 and max_batch >= 1, got {window_s}, {max_batch}")
        self._run, self.window_s, self.max_batch = run, window_s, max_batch
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (tests, restarts): forget the old one's state
            self._loop, self._pending, self._timer = loop, [], None
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _execute(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        live = [(item, future) for item, future in batch if not future.done()]  # skip cancelled callers
        if not live:
            return
        self.batches += 1
        try:
            results = await asyncio.to_thread(self._run, [item for item, _ in live])
        except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
            for _, future in live:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(live, results, strict=True):
            if not future.done():
                future.set_result(result)
