"""Fetch read-ahead: one connection's predicted next response, prepared while the client
is busy with the current one.

A consumer fetches a partition strictly in sequence: its next Fetch on the connection
asks for the same partitions at the offsets just past what it received. After a
response that carried data, the fetch handler reads and encodes that predicted next
response; if the next request is exactly the predicted one, it is answered from it.
Records below the high watermark do not change while they exist, so a response
prepared a moment early holds the same records; its high watermark may be a little
older, which Kafka clients accept (it only bounds what they may read next). Retention
may trim records in between: the prepared response then still holds records the
consumer asked for in order, which is what a fetch a moment earlier would have
returned.

Each connection owns one ``ReadAhead`` (in its ``ConnectionState``); closing the
connection cancels what was prepared for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PREDICTION_TTL = 5.0  # seconds a prepared response stays usable
PREDICTION_MAX_BYTES = 16 * 1024 * 1024  # larger responses are not read ahead (memory)


@dataclass(slots=True)
class _Prediction(Generic[T]):
    signature: Hashable
    task: asyncio.Task[T]
    created: float


class ReadAhead(Generic[T]):
    __slots__ = ("_prediction",)

    def __init__(self) -> None:
        self._prediction: _Prediction[T] | None = None

    def take(self, signature: Hashable | None) -> asyncio.Task[T] | None:
        """The prepared response if it answers a request of this signature (None: read)."""
        prediction, self._prediction = self._prediction, None
        if prediction is None:
            return None
        if signature is None or prediction.signature != signature or (
                time.monotonic() - prediction.created > PREDICTION_TTL):
            prediction.task.cancel()
            return None
        return prediction.task

    def prepare(self, signature: Hashable, work: Coroutine[Any, Any, T]) -> None:
        """Start preparing the response to a request of this signature."""
        self.close()
        self._prediction = _Prediction(signature, asyncio.create_task(work), time.monotonic())

    def close(self) -> None:
        if self._prediction is not None:
            self._prediction.task.cancel()
            self._prediction = None
