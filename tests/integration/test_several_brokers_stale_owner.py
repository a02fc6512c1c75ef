"""A paused former coordinator resumes and sends what it still had pending (``--multi-broker``).

Two brokers on one ``redis-server``: broker 1 reaches Redis through a proxy the test controls
(tests/support/redis_proxy.py), broker 2 directly. Broker 1 coordinates a group, a client
deletes it (DeleteGroups), and broker 1's clean-up of the group's Redis data is caught by the
network at one of three points:

- **held**: the DeleteGroups write (the Dead group's snapshot) reaches Redis, and everything
  broker 1 sends after it (its clean-up, its lease renewals) is held back;
- **in-flight**: the clean-up's own write is sent and held back, with everything after it;
- **answer-lost**: the clean-up's write reaches Redis, its answer is lost (the connection
  breaks) and everything broker 1 sends after it is held back.

Broker 1 is then paused (SIGSTOP) past its lease; broker 2 takes the group (a new token),
cleans up the Dead group it finds if broker 1 had not, and a consumer joins the group
anew through broker 2, reads and commits. Then the network lets broker 1's bytes through and
broker 1 resumes (SIGCONT): its own code goes on with whatever it had pending. The new
owner's committed offsets and snapshot must still be in Redis afterwards, and broker 1's
log says why (spec/CoordinatorLease.tla: CleanUp, Refuse, Lose; docs/implementers/
several-brokers.md): held, the resumed broker no longer holds the lease and never sends its
clean-up; in flight, Redis refuses it for its stale token; answer lost, the broker dropped
the group instead of retrying a write of unknown outcome.

Checked to fail without the fix, on this test: with the whole fix reverted (the tree of commit
02f0462), all three cuts fail: answer lost, broker 1's unfenced retry deletes broker 2's
snapshot, offsets and group-ids entry; held and in flight, broker 2 adopts the Dead group and
never cleans it up, so the consumer never gets in. With only the fence and the cancellation
taken out (``_delete_group_data`` retrying the unfenced ``GroupStore.delete_group``, never
cancelled; the new owner's clean-up of a Dead group kept), all three fail on the finding
itself: the resumed broker 1 deletes the new owner's snapshot, offsets and group-ids entry.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from kio.schema.errors import ErrorCode

from korvet.server.embedded_redis import EmbeddedRedis
from tests.conftest import KorvetProcess
from tests.integration.test_clients import create_topic
from tests.integration.test_several_brokers import (
    _find_coordinator,
    _offset_commit,
    _request,
    _wait_for,
)
from tests.support.redis_proxy import HoldingProxy

confluent_kafka = pytest.importorskip("confluent_kafka")

LEASE_MS = 3000
KEYSPACE = "korvet"
TOPIC, PARTITIONS, RECORDS = "stale-owner", 2, 20


@dataclass
class Pair:
    redis_url: str
    proxy: HoldingProxy
    old: KorvetProcess  # broker 1, behind the proxy
    new: KorvetProcess  # broker 2


def _broker(folder: Path, node_id: int, redis_url: str) -> KorvetProcess:
    return KorvetProcess(folder / f"b{node_id}", extra_args=[
        "--redis-url", redis_url, "--multi-broker", "--broker-id", str(node_id),
        "--cluster-lease-ms", str(LEASE_MS), "--cluster-lease-margin-ms", "500",
        "--cluster-broker-ttl-ms", "1500", "--groups-initial-rebalance-delay-ms", "0"])


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="everysec")
    url = server.start()
    proxy = HoldingProxy(url).start()
    old, new = _broker(tmp_path, 1, proxy.url), _broker(tmp_path, 2, url)
    try:
        old.start()
        new.start()
        yield Pair(url, proxy, old, new)
    finally:
        for broker in (old, new):
            if broker.process is not None:
                os.kill(broker.process.pid, signal.SIGCONT)
        proxy.release()
        new.stop()
        old.stop()
        proxy.stop()
        server.stop()


def _delete_group(bootstrap: str, group: str) -> int:
    response = _request(bootstrap, 42, 2, groups_names=(group,))
    return int(response.results[0].error_code)


def _produce(bootstrap: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=f"r{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _consume_and_commit(bootstrap: str, group: str, timeout: float) -> tuple[Any, dict[int, int]]:
    """A consumer of the group through ``bootstrap`` reads every record and commits; it is
    returned open (still a member), with the offsets it committed."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 10_000})
    consumer.subscribe([TOPIC])
    read = 0
    deadline = time.monotonic() + timeout
    while read < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
    if read < RECORDS:
        consumer.close()
        raise AssertionError(f"the consumer read {read} of {RECORDS} records through the new "
                             f"owner in {timeout:.0f} s")
    committed = consumer.commit(asynchronous=False)
    return consumer, {tp.partition: tp.offset for tp in committed}


def _in_redis(url: str, group: str) -> tuple[dict[str, Any] | None, dict[int, int], bool]:
    """The group's snapshot, committed offsets (commit hashes) and whether group-ids has it."""
    r = redis.Redis.from_url(url)
    text = r.get(f"{KEYSPACE}:{{group:{group}}}:snapshot")
    offsets = {}
    for key in r.scan_iter(f"{KEYSPACE}:{{group:{group}}}:commit:{TOPIC}:*"):
        offsets[int(key.decode().rsplit(":", 1)[1])] = int(r.hget(key, "offset") or -1)
    listed = bool(r.sismember(f"{KEYSPACE}:group-ids", group))
    r.close()
    return (json.loads(text) if text is not None else None), offsets, listed


# Where the network catches the old owner's clean-up: the markers (all in one chunk the old
# owner sends) of the write caught, whether it reaches Redis, whether its answer is lost,
# and what broker 1's log says once it has resumed.
CLEAN_UP = (b"}:redis-groups", b"}:snapshot")  # the one write naming both keys of the group
CUTS: dict[str, tuple[tuple[bytes, ...], bool, bool, str]] = {
    # the DeleteGroups write itself: its fenced script names the group's snapshot key
    "held": ((b"}:snapshot",), True, False, "no longer coordinating group"),
    # the clean-up reaches Redis on release, after broker 2's writes: its token is refused
    # there (broker 1, resumed, may have forgotten the group before the answer came)
    "in-flight": (CLEAN_UP, False, False, "no longer coordinating group"),
    "answer-lost": (CLEAN_UP, True, True, "dropping its lease"),
}


@pytest.mark.spec("CoordinatorLease", "Delete", "CleanUp", "Refuse", "Lose", "LocalExpiry",
                  note="a paused former owner resumes")
@pytest.mark.parametrize("cut", sorted(CUTS))
def test_a_resumed_former_owner_leaves_the_new_owners_group_alone(pair: Pair, cut: str) -> None:
    group = f"deleted-then-taken-{cut}"
    create_topic(pair.new.bootstrap, TOPIC, PARTITIONS)
    _produce(pair.new.bootstrap)
    assert _find_coordinator(pair.old.bootstrap, group) == (1, ErrorCode.none)
    assert _offset_commit(pair.old.bootstrap, group, TOPIC, 5) == ErrorCode.none
    markers, forward, lose_answer, says = CUTS[cut]
    pair.proxy.hold(tuple(f"{{group:{group}".encode() + m for m in markers), forward=forward,
                    lose_answer=lose_answer)
    assert _delete_group(pair.old.bootstrap, group) == 0
    _wait_for(lambda: pair.proxy.holding, 10, "the network to catch the old owner's write")
    assert pair.old.process is not None
    os.kill(pair.old.process.pid, signal.SIGSTOP)
    paused = time.monotonic()

    def taken() -> bool:
        node, error = _find_coordinator(pair.new.bootstrap, group)
        return error == ErrorCode.none and node == 2
    _wait_for(taken, 3 * LEASE_MS / 1000, "broker 2 to take the group")
    print(f"\n{cut}: broker 2 took the group {time.monotonic() - paused:.2f} s after the pause")
    before = _in_redis(pair.redis_url, group)
    try:
        consumer, committed = _consume_and_commit(pair.new.bootstrap, group, 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; in Redis when broker 2 took the group: {before}; "
                             f"broker 2's log:\n{pair.new.log_tail()}") from None
    try:
        assert set(committed) == set(range(PARTITIONS)) and min(committed.values()) > 0
        snapshot, offsets, listed = _in_redis(pair.redis_url, group)
        assert snapshot is not None and offsets == committed and listed, (snapshot, offsets)
        # The old owner's bytes reach Redis, and it runs again: whatever it had pending goes.
        held = pair.proxy.held_chunks
        pair.proxy.release()
        os.kill(pair.old.process.pid, signal.SIGCONT)
        print(f"{cut}: {held} chunk(s) of broker 1 were held; released and resumed")
        _wait_for(lambda: _find_coordinator(pair.old.bootstrap, group) == (2, ErrorCode.none), 10,
                  "the resumed broker 1 to name broker 2 as the coordinator")
        _wait_for(lambda: pair.proxy.caught_sent, 10, "the caught write to reach Redis")
        time.sleep(2)  # its retries' first back-off is 0.2 s
        after = _in_redis(pair.redis_url, group)
        assert after == (snapshot, committed, True), (
            f"the new owner's group in Redis (snapshot, committed offsets, in group-ids) was "
            f"{(snapshot, committed, True)}, is {after} after broker 1 resumed; broker 1's "
            f"log:\n{pair.old.log_tail(12)}")
        assert says in pair.old.log_tail(40), pair.old.log_tail(12)
    finally:
        consumer.close()
