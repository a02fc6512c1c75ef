"""Wake long-polling fetches when records arrive, from this broker or any other.

The append script publishes the stream key on ``{ks}:appends`` after a batch, but only
while the stream carries a waiting mark (``{ks}:waiting:{stream}``): a fetch about to
wait sets the mark (it lives ten seconds and is renewed by the next waits), so streams
nobody waits for cost no messages. Topic changes go to ``{ks}:topic-changes``. One
pub/sub connection per broker listens to both: appends wake the fetches waiting on
that stream, topic changes invalidate the topic cache. A fetch waits on an
asyncio.Event, never in a loop; if the pub/sub connection drops, it is re-established
and, meanwhile, waiting fetches simply run to their max_wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger("korvet.notifier")

_MARK_SECONDS = 10.0


class AppendNotifier:
    def __init__(self, client: aioredis.Redis, append_channel: str, topic_channel: str,
                 on_topic_change: Callable[[str], None],
                 waiting_key: Callable[[str], str] = lambda stream: f"waiting:{stream}") -> None:
        self.client = client
        self.waiting_key = waiting_key
        self._marked: dict[str, float] = {}  # stream -> when this broker last set its mark
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

    async def arm(self, stream_keys: Iterable[str]) -> bool:
        """Mark the streams as waited for, unless this broker did so recently. True when a
        mark was (re)written: an append between the caller's last read and the mark was not
        announced, so the caller reads once more before waiting."""
        now = time.monotonic()
        stale = [k for k in stream_keys if now - self._marked.get(k, -_MARK_SECONDS) >
                 _MARK_SECONDS / 2]
        if not stale:
            return False
        pipe = self.client.pipeline(transaction=False)
        for key in stale:
            pipe.set(self.waiting_key(key), 1, px=int(_MARK_SECONDS * 1000))
            self._marked[key] = now
        await pipe.execute()
        if len(self._marked) > 10_000:
            self._marked = {k: t for k, t in self._marked.items() if now - t < _MARK_SECONDS}
        return True

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
