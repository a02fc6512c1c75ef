"""Three brokers on one Redis (``--multi-broker``): registry, coordinator leases, failover.

One redis-server (started here, not embedded in a broker, so that killing a broker
leaves it running) and three ``korvet serve`` processes with their own broker ids and
short leases (3 s, renewed every second). The tests, in order, share them:

- Metadata and DescribeCluster through each broker list the three, with the same
  partition leaders (rendezvous hashing);
- FindCoordinator through each broker names the one broker holding the group's lease;
- the SIGSTOP split: the owner is paused past its lease, another broker takes the group
  (a new token) and commits; a write carrying the paused owner's token is refused by
  Redis' script (the committed offset stays the new owner's), and the resumed broker
  answers NOT_COORDINATOR. The takeover time is printed;
- confluent-kafka consumers of one group, bootstrapped through the three brokers,
  read every acknowledged record while the coordinator's broker is killed with -9;
  the committed offsets in Redis never go back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.protocol.kbuild import make, nested
from korvet.server.embedded_redis import EmbeddedRedis
from korvet.storage.groups import GroupStore
from korvet.storage.leases import LeaseStore
from tests.conftest import KorvetProcess
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")

LEASE_MS = 3000
KEYSPACE = "korvet"


@dataclass
class Cluster:
    redis_url: str
    brokers: list[KorvetProcess]

    def by_id(self, node_id: int) -> KorvetProcess:
        return self.brokers[node_id - 1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("several-brokers")
    server = EmbeddedRedis(folder / "redis", appendfsync="everysec")
    url = server.start()
    brokers = [KorvetProcess(folder / f"b{i}", extra_args=[
        "--redis-url", url, "--multi-broker", "--broker-id", str(i),
        "--cluster-lease-ms", str(LEASE_MS), "--cluster-lease-margin-ms", "500",
        "--cluster-broker-ttl-ms", "1500", "--groups-initial-rebalance-delay-ms", "0"])
        for i in (1, 2, 3)]
    try:
        for broker in brokers:
            broker.start()
        yield Cluster(url, brokers)
    finally:
        for broker in brokers:
            if broker.process is not None:
                os.kill(broker.process.pid, signal.SIGCONT)
            broker.stop()
        server.stop()


def _request(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    cls = load_request_schema(api_key, version)
    with WireClient(bootstrap) as client:
        return client.request(make(cls, **fields))


def _metadata(bootstrap: str, topics: list[str] | None) -> Any:
    cls = load_request_schema(3, 12)
    topic_cls = nested(cls, "MetadataRequestTopic")
    wanted = None if topics is None else tuple(make(topic_cls, name=t, topic_id=None)
                                               for t in topics)
    with WireClient(bootstrap) as client:
        return client.request(make(cls, topics=wanted, allow_auto_topic_creation=True,
                                   include_topic_authorized_operations=False))


def _find_coordinator(bootstrap: str, group: str) -> tuple[int, ErrorCode]:
    response = _request(bootstrap, 10, 3, key=group, key_type=0)
    return response.node_id, response.error_code


def _offset_commit(bootstrap: str, group: str, topic: str, offset: int) -> ErrorCode:
    cls = load_request_schema(8, 8)
    topic_cls = nested(cls, "OffsetCommitRequestTopic")
    partition_cls = nested(cls, "OffsetCommitRequestPartition")
    with WireClient(bootstrap) as client:
        response = client.request(make(
            cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=(make(topic_cls, name=topic, partitions=(
                make(partition_cls, partition_index=0, committed_offset=offset,
                     committed_leader_epoch=-1, committed_metadata=None),)),)))
    return ErrorCode(response.topics[0].partitions[0].error_code)


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_metadata_lists_every_live_broker_with_the_same_leaders(cluster: Cluster) -> None:
    ports = {b.port for b in cluster.brokers}

    def listed(bootstrap: str) -> set[int]:
        return {b.port for b in _metadata(bootstrap, []).brokers}

    for broker in cluster.brokers:
        _wait_for(lambda b=broker: listed(b.bootstrap) == ports, 10,
                  f"broker {broker.bootstrap} to list all three")
    topic = "spread"
    create_topic(cluster.brokers[0].bootstrap, topic, 12)
    leaders = [tuple(p.leader_id for p in _metadata(b.bootstrap, [topic]).topics[0].partitions)
               for b in cluster.brokers]
    assert leaders[0] == leaders[1] == leaders[2]
    assert set(leaders[0]) == {1, 2, 3}, f"12 partitions should spread over 3 brokers: {leaders}"
    cluster_view = _request(cluster.brokers[2].bootstrap, 60, 0,
                            include_cluster_authorized_operations=False)
    assert {b.broker_id for b in cluster_view.brokers} == {1, 2, 3}


def test_find_coordinator_names_one_owner_through_every_broker(cluster: Cluster) -> None:
    answers = {_find_coordinator(b.bootstrap, "one-owner") for b in cluster.brokers}
    assert len(answers) == 1, answers
    ((owner, error),) = answers
    assert error == ErrorCode.none and owner in (1, 2, 3)
    held_by, token, _ = asyncio.run(_lease("one-owner", cluster.redis_url))
    assert held_by == str(owner) and token >= 1
    others = [b for b in cluster.brokers if b is not cluster.by_id(owner)]
    # a broker that does not hold the lease refuses the group's requests
    assert _offset_commit(others[0].bootstrap, "one-owner", "spread", 1) == \
        ErrorCode.not_coordinator
    assert _offset_commit(cluster.by_id(owner).bootstrap, "one-owner", "spread", 1) == \
        ErrorCode.none


async def _lease(group: str, url: str) -> tuple[str, int, int]:
    client = aioredis.Redis.from_url(url)
    try:
        return await LeaseStore(GroupStore(client, KEYSPACE)).owner(group)
    finally:
        await client.aclose()


async def _stale_write(group: str, url: str, token: int, snapshot: str) -> list[str]:
    client = aioredis.Redis.from_url(url)
    try:
        return await LeaseStore(GroupStore(client, KEYSPACE)).save_state(
            {group: token}, {group: snapshot}, [], [], 0, [])
    finally:
        await client.aclose()


def test_a_paused_owner_is_fenced_off_after_a_takeover(cluster: Cluster) -> None:
    group, topic = "split", "spread"
    owner_id, _ = _find_coordinator(cluster.brokers[0].bootstrap, group)
    assert _offset_commit(cluster.by_id(owner_id).bootstrap, group, topic, 5) == ErrorCode.none
    _, old_token, _ = asyncio.run(_lease(group, cluster.redis_url))
    paused = cluster.by_id(owner_id)
    other = next(b for b in cluster.brokers if b is not paused)
    assert paused.process is not None
    os.kill(paused.process.pid, signal.SIGSTOP)
    started = time.monotonic()
    try:
        new_owner = 0

        def taken() -> bool:
            nonlocal new_owner
            node, error = _find_coordinator(other.bootstrap, group)
            new_owner = node if error == ErrorCode.none and node != owner_id else 0
            return new_owner != 0
        _wait_for(taken, 3 * LEASE_MS / 1000, "another broker to take the group")
        takeover = time.monotonic() - started
        print(f"\ntakeover after SIGSTOP: {takeover:.2f} s (lease {LEASE_MS} ms)")
        assert _offset_commit(cluster.by_id(new_owner).bootstrap, group, topic, 9) == \
            ErrorCode.none
        holder, new_token, _ = asyncio.run(_lease(group, cluster.redis_url))
        assert holder == str(new_owner) and new_token > old_token
        # the paused owner's write, carrying its token, is refused inside Redis
        assert asyncio.run(_stale_write(group, cluster.redis_url, old_token, "{}")) == [group]
        r = redis.Redis.from_url(cluster.redis_url)
        commit_keys = [k for k in r.scan_iter(f"{KEYSPACE}:{{group:{group}}}:commit:*")]
        assert commit_keys, "the new owner's commit is in Redis"
        assert {int(r.hget(k, "offset") or -1) for k in commit_keys} == {9}
        assert r.get(f"{KEYSPACE}:{{group:{group}}}:snapshot") != b"{}"
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    # resumed, the old owner no longer coordinates the group
    assert _offset_commit(paused.bootstrap, group, topic, 3) == ErrorCode.not_coordinator
    r = redis.Redis.from_url(cluster.redis_url)
    assert {int(r.hget(k, "offset") or -1)
            for k in r.scan_iter(f"{KEYSPACE}:{{group:{group}}}:commit:*")} == {9}


def _produce_all(bootstrap: str, topic: str, count: int) -> set[str]:
    acked: set[str] = set()
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 5})

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acked.add(message.value().decode())

    for i in range(count):
        producer.produce(topic, value=f"r{i}".encode(), key=str(i).encode(),
                         on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


@dataclass
class GroupRun:
    """Consumers of one group and a watcher of its committed offsets in Redis."""

    redis_url: str
    topic: str
    group: str
    seen: set[str] = field(default_factory=set)
    regressions: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def consume(self, bootstrap: str) -> None:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": self.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 60000})
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                with self.lock:
                    self.seen.add(message.value().decode())
                # a rebalance or a coordinator move fails a commit: the next one carries it
                with contextlib.suppress(confluent_kafka.KafkaException):
                    consumer.commit(message=message, asynchronous=False)
        finally:
            consumer.close()

    def watch_commits(self) -> None:
        r = redis.Redis.from_url(self.redis_url)
        last: dict[bytes, int] = {}
        while not self.stop.is_set():
            for key in r.scan_iter(f"{KEYSPACE}:{{group:{self.group}}}:commit:*"):
                value = r.hget(key, "offset")
                if value is None:
                    continue
                offset = int(value)
                if offset < last.get(key, -1):
                    self.regressions.append(f"{key!r}: {last[key]} -> {offset}")
                last[key] = offset
            time.sleep(0.05)


def test_a_group_survives_its_coordinator_killed(cluster: Cluster) -> None:
    topic, group, count = "failover", "failover-group", 3000
    create_topic(cluster.brokers[0].bootstrap, topic, 3)
    live = [b for b in cluster.brokers if b.process is not None]
    acked = _produce_all(",".join(b.bootstrap for b in live), topic, count)
    assert len(acked) == count
    run = GroupRun(cluster.redis_url, topic, group)
    threads = [threading.Thread(target=run.consume, args=(b.bootstrap,)) for b in live]
    threads.append(threading.Thread(target=run.watch_commits))
    for thread in threads:
        thread.start()
    try:
        _wait_for(lambda: len(run.seen) >= count // 3, 60, "a third of the records")
        owner_id, _ = _find_coordinator(live[0].bootstrap, group)
        killed_at = time.monotonic()
        cluster.by_id(owner_id).kill()
        # the members find a new coordinator: the group's lease goes to a live broker
        _wait_for(lambda: asyncio.run(_lease(group, cluster.redis_url))[0] != str(owner_id),
                  30, "a live broker to hold the group's lease")
        moved = time.monotonic() - killed_at
        _wait_for(lambda: len(run.seen) >= count, 90, "every acknowledged record")
        print(f"\nkill -9 of the coordinator (broker {owner_id}): a live broker held the "
              f"group {moved:.2f} s later; all {count} records consumed after "
              f"{time.monotonic() - killed_at:.2f} s")
    finally:
        run.stop.set()
        for thread in threads:
            thread.join(30)
    assert acked <= run.seen, f"{len(acked - run.seen)} acknowledged records never consumed"
    assert not run.regressions, run.regressions
