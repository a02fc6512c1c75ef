"""Wake long-polling fetches when records arrive, from this broker or any other.

The append script publishes the stream key on ``{ks}:appends`` after each batch,
and topic changes go to ``{ks}:topic-changes``. One pub/sub connection per broker
listens to both: appends wake the fetches waiting on that stream, topic changes
invalidate the topic cache. A fetch waits on an asyncio.Event, never in a loop;
if the pub/sub connection drops, it is re-established and, meanwhile, waiting
fetches simply run to their max_wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger("korvet.notifier")


class AppendNotifier:
    def __init__(self, client: aioredis.Redis, append_channel: str, topic_channel: str,
                 on_topic_change: Callable[[str], None]) -> None:
        self.client = client
        self.append_channel = append_channel
        self.topic_channel = topic_channel
        self.on_topic_change = on_topic_change
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="korvet-notifier")
        # Subscribed before the broker accepts clients, so no append is missed.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout=5)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def notify(self, stream_key: str) -> None:
        for event in self._waiters.get(stream_key, ()):
            event.set()

    async def wait(self, stream_keys: Iterable[str], timeout: float) -> bool:
        """Wait until any of the streams gets an append, or the timeout. True if woken."""
        if timeout <= 0:
            return False
        event = asyncio.Event()
        keys = list(stream_keys)
        for key in keys:
            self._waiters[key].add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[key]

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.append_channel, self.topic_channel)
                self._ready.set()
                backoff = 0.1
                while True:
                    message = await pubsub.get_message(timeout=30.0)
                    if message is None:
                        continue
                    channel = _text(message.get("channel"))
                    data = _text(message.get("data"))
                    if channel == self.append_channel:
                        self.notify(data)
                    elif channel == self.topic_channel:
                        self.on_topic_change(data)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.warning("append notifications interrupted (%s); reconnecting", exc)
                self.on_topic_change("")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value) if value is not None else ""
