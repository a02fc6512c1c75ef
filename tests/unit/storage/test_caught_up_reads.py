"""When a fetch may answer from an earlier read instead of reading a partition again
(korvet/storage/notifier.py, ``caught_up``), on a real redis-server and a real subscription.

A read that found a partition caught up is trusted only while every later append to it is
sure to reach this broker first: as an append this broker sends or answers (``changed``), or
as an announcement, which the append script publishes only while the stream's waiting mark
stands. So it is trusted when the mark was written before the read was sent, the
subscription was confirmed, nothing changed between the read's sending and its answer, and
not beyond the mark's life; a later change, a topic change or a lost subscription ends it.
Each rule below fails if its check in ``note_caught_up`` or ``caught_up`` is taken out."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from redis import asyncio as aioredis

from korvet.server.embedded_redis import EmbeddedRedis
from korvet.storage.notifier import AppendNotifier

CHANNEL, TOPICS = "appends", "topic-changes"
HWM, START = 1_000, 10

Scenario = Callable[[AppendNotifier, aioredis.Redis], Awaitable[None]]


async def _subscribed(notifier: AppendNotifier) -> None:
    await notifier.start()
    deadline = time.monotonic() + 5
    while notifier.ticket("s").generation < 0:  # Redis has confirmed the subscription
        assert time.monotonic() < deadline, "the subscription was never confirmed"
        await asyncio.sleep(0.01)


async def _trusted_after_a_confirmed_mark(notifier: AppendNotifier, _: aioredis.Redis) -> None:
    early = notifier.ticket("s")  # a read sent before the stream was marked
    notifier.note_caught_up(early, HWM, START)
    assert notifier.caught_up("s", HWM) is None, "an append before the mark is not announced"
    await notifier.arm(["s"])
    notifier.note_caught_up(early, HWM, START)  # answered after the mark: still sent before
    assert notifier.caught_up("s", HWM) is None, "an append before the mark is not announced"
    read = notifier.ticket("s")
    notifier.note_caught_up(read, HWM, START)
    assert notifier.caught_up("s", HWM) == (HWM, START)
    assert notifier.caught_up("s", HWM - 1) is None, "a fetch from below the end must read"
    assert notifier.caught_up("other", HWM) is None


async def _a_change_during_the_read_is_not_missed(notifier: AppendNotifier,
                                                  _: aioredis.Redis) -> None:
    await notifier.arm(["s"])
    read = notifier.ticket("s")
    notifier.changed("s")  # an append answered while the read was on its way
    notifier.note_caught_up(read, HWM, START)
    assert notifier.caught_up("s", HWM) is None
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    notifier.changed("t")  # another stream's change leaves this one alone
    assert notifier.caught_up("s", HWM) == (HWM, START)
    notifier.changed("s")
    assert notifier.caught_up("s", HWM) is None


async def _an_announced_append_ends_the_trust(notifier: AppendNotifier,
                                              client: aioredis.Redis) -> None:
    await notifier.arm(["s"])
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) is not None
    await client.publish(CHANNEL, "s")  # another broker's append
    deadline = time.monotonic() + 5
    while notifier.caught_up("s", HWM) is not None:
        assert time.monotonic() < deadline, "the announcement did not end the trust"
        await asyncio.sleep(0.01)


async def _a_topic_change_ends_every_trust(notifier: AppendNotifier,
                                           client: aioredis.Redis) -> None:
    await notifier.arm(["s", "t"])
    for stream in ("s", "t"):
        notifier.note_caught_up(notifier.ticket(stream), HWM, START)
    stale = notifier.ticket("s")
    await client.publish(TOPICS, "some-topic")
    deadline = time.monotonic() + 5
    while notifier.caught_up("t", HWM) is not None:
        assert time.monotonic() < deadline, "a topic change left a read trusted"
        await asyncio.sleep(0.01)
    assert notifier.caught_up("s", HWM) is None
    notifier.note_caught_up(stale, HWM, START)  # a read sent before the change
    assert notifier.caught_up("s", HWM) is None


async def _a_lost_subscription_ends_every_trust(notifier: AppendNotifier,
                                                client: aioredis.Redis) -> None:
    await notifier.arm(["s"])
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    before = notifier.ticket("s")
    await client.client_kill_filter(_type="pubsub")
    deadline = time.monotonic() + 5
    while notifier.caught_up("s", HWM) is not None:
        assert time.monotonic() < deadline, "announcements could be lost: nothing is trusted"
        await asyncio.sleep(0.001)
    await notifier.arm(["s"])  # a wait during the 0.1 s back-off writes the mark again
    during = notifier.ticket("s")  # and a read is sent while not subscribed
    assert during.generation < 0
    notifier.note_caught_up(during, HWM, START)  # and answered before subscribing again
    assert notifier.caught_up("s", HWM) is None
    await _subscribed(notifier)  # subscribed again: reads sent before it stay untrusted
    for ticket in (before, during):
        notifier.note_caught_up(ticket, HWM, START)
        assert notifier.caught_up("s", HWM) is None
    await notifier.arm(["s"])  # the next wait: writes the mark if the loss forgot it
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) == (HWM, START)


async def _not_beyond_the_marks_life(notifier: AppendNotifier, client: aioredis.Redis) -> None:
    await notifier.arm(["s"])  # a 0.6 s mark: trusted for 0.5 s from its writing
    assert 0 < await client.pttl("waiting:s") <= 600
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) is not None
    await asyncio.sleep(0.55)
    assert notifier.caught_up("s", HWM) is None, "trusted after the mark could have lapsed"
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) is None, "a read after the mark's trust is not kept"


async def _a_redis_error_forgets_the_marks_too(notifier: AppendNotifier,
                                                _: aioredis.Redis) -> None:
    await notifier.arm(["s"])
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) is not None
    notifier.forget_reads()  # a fetch met a Redis error: a failover may have lost the mark
    assert notifier.caught_up("s", HWM) is None
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) is None, "trusted on a mark Redis may have lost"
    assert await notifier.arm(["s"]), "the next wait must write the mark again"
    notifier.note_caught_up(notifier.ticket("s"), HWM, START)
    assert notifier.caught_up("s", HWM) == (HWM, START)


async def _many_streams_cost_linear_time(notifier: AppendNotifier,
                                         _: aioredis.Redis) -> None:
    streams = [f"s{n}" for n in range(30_000)]  # more than the tables' pruning size
    await notifier.arm(streams)
    started = time.monotonic()
    for stream in streams:
        notifier.note_caught_up(notifier.ticket(stream), HWM, START)
    took = time.monotonic() - started
    assert all(notifier.caught_up(s, HWM) is not None for s in streams)
    assert took < 5.0, f"{took:.1f} s to note 30,000 caught-up reads (the loop stalls)"


async def _run(url: str, scenario: Scenario) -> None:
    client = aioredis.from_url(url)
    notifier = AppendNotifier(client, CHANNEL, TOPICS, lambda name: None, mark_seconds=0.6
                              if scenario is _not_beyond_the_marks_life else 30.0)
    try:
        await _subscribed(notifier)
        await scenario(notifier, client)
    finally:
        await notifier.close()
        await client.aclose()


@pytest.mark.integration  # starts a redis-server
@pytest.mark.parametrize("scenario", [
    _trusted_after_a_confirmed_mark, _a_change_during_the_read_is_not_missed,
    _an_announced_append_ends_the_trust, _a_topic_change_ends_every_trust,
    _a_lost_subscription_ends_every_trust, _not_beyond_the_marks_life,
    _a_redis_error_forgets_the_marks_too, _many_streams_cost_linear_time],
    ids=lambda scenario: scenario.__name__.strip("_"))
def test_a_caught_up_read_is_trusted_only_while_no_append_can_be_missed(
        scenario: Scenario) -> None:
    with tempfile.TemporaryDirectory() as folder:
        server = EmbeddedRedis(Path(folder), appendfsync="off")
        url = server.start()
        try:
            asyncio.run(_run(url, scenario))
        finally:
            server.stop()
