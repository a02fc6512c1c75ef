"""Wake long-polling fetches when records arrive, from this broker or any other.

The append script publishes the stream key on ``{ks}:appends`` after a batch, but only
while the stream carries a waiting mark (``{ks}:waiting:{stream}``): a fetch about to
wait sets the mark (it lives thirty seconds and is renewed by the next waits), so streams
nobody waits for cost no messages. Topic changes go to ``{ks}:topic-changes``. One
pub/sub connection per broker listens to both: appends wake the fetches waiting on
that stream, topic changes invalidate the topic cache. A fetch waits on an
asyncio.Event, never in a loop; if the pub/sub connection drops, it is re-established
and, meanwhile, waiting fetches simply run to their max_wait.

The same messages let a fetch skip the partitions it already knows are caught up
(``caught_up``): a read that found nothing past the fetch offset, made while the stream's
waiting mark stood (written before the read was sent) and the subscription listened, stays
true until an append to that stream is announced, sent or answered here (``changed``), the
subscription drops, topics change, or the mark could have lapsed: the mark's thirty seconds
less five (docs/implementers/broker.md, "Caught-up partitions"). An idle consumer of
thousands of partitions then costs Redis one read of each every few seconds, not one per
fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger("korvet.notifier")

_MARK_SECONDS = 30.0
_MAX_TRACKED = 10_000  # tracked streams before the expired ones are dropped


@dataclass(frozen=True, slots=True)
class ReadTicket:
    """What the notifier knew when a read of ``stream`` was sent (``AppendNotifier.ticket``)."""

    stream: str
    clock: int  # the notifier's change clock then
    generation: int  # the subscription's generation then (-1: not listening)
    started: float  # time.monotonic() then


class AppendNotifier:
    def __init__(self, client: aioredis.Redis, append_channel: str, topic_channel: str,
                 on_topic_change: Callable[[str], None],
                 waiting_key: Callable[[str], str] = lambda stream: f"waiting:{stream}",
                 mark_seconds: float = _MARK_SECONDS) -> None:
        self.client = client
        self.mark_seconds = mark_seconds
        # A caught-up read is trusted while the mark it relied on surely stands (25 of 30 s).
        self.trust_seconds = mark_seconds * 5 / 6
        self.waiting_key = waiting_key
        self._marked: dict[str, float] = {}  # stream -> when this broker last set its mark
        # stream -> (sent, acknowledged): the last mark Redis confirmed, by local clock
        self._confirmed: dict[str, tuple[float, float]] = {}
        # Caught-up reads: stream -> (high watermark, log start, trusted until).
        self._quiet: dict[str, tuple[int, int, float]] = {}
        self._clock = 0  # counts changes; _changed[stream] is the clock at its last one
        self._changed: dict[str, int] = {}
        self._floor = 0  # tickets older than this clock are not trusted (_changed was cleared)
        self._generation = -1  # the subscription's; -1 while not listening
        self._prune_at = _MAX_TRACKED  # sizes at which expired entries are dropped: twice
        self._marks_prune_at = _MAX_TRACKED  # what a pruning kept, so pruning stays linear
        self._generations = 0
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
        self.changed(stream_key)
        for event in self._waiters.get(stream_key, ()):
            event.set()

    def changed(self, stream_key: str) -> None:
        """The stream got (or may have got) records, or its log start moved: what a read of
        it found before no longer holds. Called for every append this broker sends and every
        answer to one, whatever the outcome, and for each one announced."""
        self._clock += 1
        self._changed[stream_key] = self._clock
        self._quiet.pop(stream_key, None)
        if len(self._changed) > 8 * _MAX_TRACKED:
            self._changed.clear()
            self._floor = self._clock

    def forget_reads(self) -> None:
        """Trust no earlier read (topics changed, or announcements may have been lost), nor
        an earlier mark: a Redis that failed over or restarted may have lost it, so the next
        wait writes every mark again before a read is trusted."""
        self._quiet.clear()
        self._confirmed.clear()
        self._marked.clear()
        self._floor = self._clock = self._clock + 1

    def ticket(self, stream_key: str) -> ReadTicket:
        """Take before sending a read of the stream; give to ``note_caught_up`` after."""
        return ReadTicket(stream_key, self._clock, self._generation, time.monotonic())

    def note_caught_up(self, ticket: ReadTicket, high_watermark: int, log_start: int) -> None:
        """The read of ``ticket`` found no record at or past ``high_watermark``: remember it
        if any later append to the stream is sure to be announced to this broker."""
        stream = ticket.stream
        confirmed = self._confirmed.get(stream)
        if (ticket.generation < 0 or ticket.generation != self._generation
                or ticket.clock < self._floor or self._changed.get(stream, 0) > ticket.clock
                or confirmed is None or confirmed[1] > ticket.started):
            return
        self._quiet[stream] = (high_watermark, log_start, confirmed[0] + self.trust_seconds)
        if len(self._quiet) > self._prune_at:
            now = time.monotonic()
            self._quiet = {k: v for k, v in self._quiet.items() if v[2] > now}
            self._prune_at = max(_MAX_TRACKED, 2 * len(self._quiet))

    def caught_up(self, stream_key: str, offset: int) -> tuple[int, int] | None:
        """(high watermark, log start) of the stream if a trusted read found nothing at or
        past ``offset`` and nothing changed since; None when it must be read."""
        known = self._quiet.get(stream_key)
        if known is None or known[0] != offset:
            return None
        if known[2] <= time.monotonic():
            del self._quiet[stream_key]
            return None
        return known[0], known[1]

    async def arm(self, stream_keys: Iterable[str]) -> bool:
        """Mark the streams as waited for, unless this broker did so recently. True when a
        mark was (re)written: an append between the caller's last read and the mark was not
        announced, so the caller reads once more before waiting."""
        now = time.monotonic()
        mark = self.mark_seconds
        stale = [k for k in stream_keys if now - self._marked.get(k, -mark) > mark / 2]
        if not stale:
            return False
        pipe = self.client.pipeline(transaction=False)
        for key in stale:
            pipe.set(self.waiting_key(key), 1, px=int(mark * 1000))
            self._marked[key] = now
        await pipe.execute()
        done = time.monotonic()
        for key in stale:
            self._confirmed[key] = (now, done)
        if len(self._marked) > self._marks_prune_at:
            self._marked = {k: t for k, t in self._marked.items() if now - t < mark}
            self._confirmed = {k: t for k, t in self._confirmed.items() if now - t[0] < mark}
            self._marks_prune_at = max(_MAX_TRACKED, 2 * len(self._marked))
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
            pubsub = self.client.pubsub()
            try:
                await pubsub.subscribe(self.append_channel, self.topic_channel)
                self._ready.set()
                backoff = 0.1
                while True:
                    message = await pubsub.get_message(timeout=30.0)
                    if message is None:
                        continue
                    channel = _text(message.get("channel"))
                    if message.get("type") != "message":
                        if message.get("type") == "subscribe" and channel == self.append_channel:
                            # Redis confirmed: every append from now on is announced here.
                            self._generations += 1
                            self._generation = self._generations
                        continue
                    data = _text(message.get("data"))
                    if channel == self.append_channel:
                        self.notify(data)
                    elif channel == self.topic_channel:
                        self.forget_reads()
                        self.on_topic_change(data)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                self._generation = -1  # announcements may be missed until subscribed again
                self.forget_reads()
                log.warning("append notifications interrupted (%s); reconnecting", exc)
                self.on_topic_change("")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                self._generation = -1
                self.forget_reads()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value) if value is not None else ""
