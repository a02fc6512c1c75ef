"""Korvet on a real Redis Cluster: three masters with a replica each, from Debian's
redis-server (korvet/faults/redis_cluster.py), one broker started with ``--redis-cluster``.

- Real clients through a failover: a confluent-kafka producer (acks=all, idempotent)
  produces while a consumer group reads and commits; midway one master is failed over to
  its replica (``CLUSTER FAILOVER``). Every acknowledged record is consumed; the committed
  offsets survive a broker restart (they are read back from the cluster). The test prints
  how long the failover interrupted produce.
- Topic-level operations across slots: a topic's partitions land on several masters;
  create, list, DeleteRecords on every partition, delete, and no key of the topic (streams,
  partition hashes, committed offsets) is left on any master.

One cluster and one broker for the module.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import hiredis
import pytest
import redis
import redis.cluster

from korvet.faults.redis_cluster import RedisCluster
from korvet.process import free_port
from tests.conftest import KORVET, ROOT, KorvetProcess
from tests.integration import clients
from tests.integration.test_clients import create_topic

pytestmark = pytest.mark.clients

PARTITIONS = 6


@dataclass
class OnCluster:
    cluster: RedisCluster
    broker: KorvetProcess

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.cluster.ports[0])

    def master_of(self, key: str) -> int:
        node = self.client().get_node_from_key(key)  # type: ignore[no-untyped-call]
        assert node is not None
        return int(node.port)

    def keys_everywhere(self, pattern: str) -> list[bytes]:
        """SCAN every master (a key lives on exactly one)."""
        found: list[bytes] = []
        for port in self.cluster.masters():
            found.extend(self.cluster.client(port).scan_iter(match=pattern, count=1000))
        return found


@pytest.fixture(scope="module")
def on_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnCluster]:
    folder: Path = tmp_path_factory.mktemp("redis-cluster")
    cluster = RedisCluster(folder / "redis")
    broker: KorvetProcess | None = None
    try:
        cluster.start()
        broker = KorvetProcess(folder / "korvet",
                               extra_args=["--redis-url", cluster.url, "--redis-cluster"])
        broker.start()
        yield OnCluster(cluster, broker)
    finally:
        if broker is not None:
            broker.stop()
        cluster.stop()


@dataclass
class Produced:
    acked: dict[bytes, float] = field(default_factory=dict)  # value -> when acknowledged
    sent: dict[bytes, float] = field(default_factory=dict)  # value -> when produced
    failed: list[str] = field(default_factory=list)


def _produce_until(bootstrap: str, topic: str, stop: threading.Event, out: Produced) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 60_000})

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            out.failed.append(str(err))
        else:
            out.acked[msg.value()] = time.monotonic()

    i = 0
    while not stop.is_set():
        value = b"v%06d" % i
        out.sent[value] = time.monotonic()
        producer.produce(topic, key=b"k%d" % i, value=value, on_delivery=delivered)
        producer.poll(0)
        i += 1
        time.sleep(0.002)
    assert producer.flush(60) == 0, "records still unacknowledged a minute after the end"


def _consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 10_000})


def _consume_until(consumer: Any, stop: threading.Event, got: set[bytes],
                   commit_errors: list[str]) -> None:
    from confluent_kafka import KafkaException

    def commit() -> None:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:  # retriable during the failover: the next commit
            commit_errors.append(str(exc))  # covers these records too

    while not stop.is_set():
        batch = consumer.consume(500, 0.2)
        for msg in batch:
            if msg.error() is None:
                got.add(msg.value())
        if batch:
            commit()
    commit()  # whatever a refused commit left behind ("no offset" when nothing is)


def _positions(consumer: Any, topic: str) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    parts = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
    return {tp.partition: tp.offset for tp in parts}


def _committed(consumer: Any, topic: str) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    return {tp.partition: tp.offset for tp in parts}


def test_every_acknowledged_record_is_consumed_through_a_master_failover(
        on_cluster: OnCluster) -> None:
    topic, group = f"failover-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    bootstrap = on_cluster.broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    stream0 = f"korvet:{{{topic}:0}}:stream"
    victim = on_cluster.master_of(stream0)

    produced, got, commit_errors = Produced(), set[bytes](), list[str]()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    producing = threading.Thread(target=_produce_until,
                                 args=(bootstrap, topic, stop_producing, produced))
    consuming = threading.Thread(target=_consume_until, args=(consumer, stop_consuming, got, commit_errors))
    producing.start()
    consuming.start()
    try:
        time.sleep(2.0)
        before = len(produced.acked)
        started = time.monotonic()
        promoted = on_cluster.cluster.failover(victim)
        failover_s = time.monotonic() - started
        time.sleep(2.0)
    finally:
        stop_producing.set()
        producing.join(90)
    assert on_cluster.master_of(stream0) == promoted, "partition 0's slot did not move"
    assert before > 0 and len(produced.acked) > before, "produce did not go on after the failover"
    assert not produced.failed, f"deliveries failed: {produced.failed[:3]}"

    deadline = time.monotonic() + 60
    while not set(produced.acked) <= got and time.monotonic() < deadline:
        time.sleep(0.1)
    stop_consuming.set()
    consuming.join(30)
    missing = set(produced.acked) - got
    assert not missing, f"{len(missing)} acknowledged records never consumed, e.g. {sorted(missing)[:3]}"
    committed = _committed(consumer, topic)
    assert committed == _positions(consumer, topic), "the committed offsets are not where it read"
    consumer.close()
    assert all(offset > 0 for offset in committed.values()), committed

    # The committed offsets are in the cluster: a restarted broker serves them unchanged.
    on_cluster.broker.restart()
    again = _consumer(bootstrap, group)
    try:
        assert _committed(again, topic) == committed
    finally:
        again.close()

    # How long the failover held produce up: the longest an acknowledged record waited.
    waits = sorted(produced.acked[v] - produced.sent[v] for v in produced.acked)
    calm = sorted(produced.acked[v] - produced.sent[v] for v in produced.acked
                  if produced.acked[v] < started)
    paused = max((produced.acked[v] for v in produced.acked if produced.sent[v] < started + 0.1),
                 default=started) - started
    print(f"\nfailover of {victim} to {promoted}: {failover_s:.2f} s until settled; "
          f"{len(produced.acked)} records acknowledged; produce-to-ack wait max "
          f"{waits[-1] * 1000:.0f} ms, p99 {waits[int(len(waits) * 0.99)] * 1000:.0f} ms, "
          f"median {waits[len(waits) // 2] * 1000:.1f} ms (before the failover: median "
          f"{calm[len(calm) // 2] * 1000:.1f} ms, max {calm[-1] * 1000:.0f} ms); the records "
          f"sent by its start were all acknowledged {paused * 1000:.0f} ms after it; "
          f"{len(commit_errors)} commits refused "
          f"meanwhile {commit_errors[:2]}")


def test_topic_operations_span_the_masters(on_cluster: OnCluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic, group = f"span-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    bootstrap = on_cluster.broker.bootstrap
    partitions = 8
    create_topic(bootstrap, topic, partitions)
    masters = {on_cluster.master_of(f"korvet:{{{topic}:{p}}}:stream") for p in range(partitions)}
    assert len(masters) >= 2, "all partitions hashed to one master: the test shows nothing"

    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert topic in admin.list_topics(timeout=10).topics

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(partitions):
        for i in range(3):
            producer.produce(topic, value=b"%d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 3 * partitions and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(100, 0.5) if m.error() is None)
    assert seen == 3 * partitions
    consumer.commit(asynchronous=False)
    assert on_cluster.keys_everywhere(f"korvet:{{group:{group}}}:commit:{topic}:*")

    # DeleteRecords up to each partition's high watermark: every partition empties.
    highs = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
    deleted = admin.delete_records([TopicPartition(topic, p, highs[p]) for p in range(partitions)])
    for future in deleted.values():
        future.result(30)
    for p, tp in enumerate(tps):
        assert consumer.get_watermark_offsets(tp, timeout=10) == (highs[p], highs[p])
    consumer.close()

    admin.delete_topics([topic])[topic].result(30)
    assert topic not in admin.list_topics(timeout=10).topics
    left = on_cluster.keys_everywhere(f"korvet:{{{topic}:*")
    # Only the fetches' waiting marks may outlive the topic: they expire within thirty
    # seconds (their life since caught-up reads rely on them: docs/implementers/broker.md).
    assert all(k.endswith(b":waiting") for k in left), left
    assert all(0 < on_cluster.client().pttl(k) <= 30_000 for k in left)
    assert on_cluster.keys_everywhere(f"korvet:{{group:{group}}}:commit:{topic}:*") == []


def test_a_transaction_spans_partitions_on_several_masters(on_cluster: OnCluster) -> None:
    """A transaction writes partitions whose slots are on different masters and sends a
    group's offsets (another slot again): its markers reach each partition, read_committed
    reads the committed transaction whole and none of the aborted one, the group's offset is
    the committed transaction's, and its transactional id's record has a slot of its own."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.integration.test_transactions import producer, read_all

    topic, group = f"txn-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    bootstrap = on_cluster.broker.bootstrap
    partitions = 4
    create_topic(bootstrap, topic, partitions)
    masters = {on_cluster.master_of(f"korvet:{{{topic}:{p}}}:stream") for p in range(partitions)}
    assert len(masters) >= 2, "all partitions hashed to one master: the test shows nothing"
    made = producer(bootstrap, f"tx-{topic}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        metadata = consumer.consumer_group_metadata()
        made.begin_transaction()
        for p in range(partitions):
            made.produce(topic, value=b"commit-%d" % p, partition=p)
        made.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], metadata, 30)
        made.commit_transaction(30)
        made.begin_transaction()
        for p in range(partitions):
            made.produce(topic, value=b"abort-%d" % p, partition=p)
        made.flush(30)
        made.abort_transaction(30)
        for p in range(partitions):
            assert [v for _, v in read_all(bootstrap, topic, "read_committed", p)] == \
                [b"commit-%d" % p]
            assert len(read_all(bootstrap, topic, "read_uncommitted", p)) == 2
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 7
    finally:
        consumer.close()
    assert on_cluster.keys_everywhere(f"korvet:{{txn:tx-{topic}}}:state")


def test_the_storage_layer_on_the_cluster(on_cluster: OnCluster) -> None:
    """RedisStore and GroupStore on a RedisCluster client, without the broker: a topic's
    appends, reads and stamps across masters, a recreated topic starting empty, a group's
    snapshot and offsets written, loaded and deleted in its slot."""
    import asyncio

    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from korvet.core.topics import TrimPolicy
    from korvet.storage import entries
    from korvet.storage.groups import GroupStore, PartitionRef
    from korvet.storage.redis_store import AppendStatus, ProducerBatch, RedisStore

    async def scenario() -> None:
        # The broker's way (korvet/server/app.py): a RedisCluster where a Redis is typed.
        client = cast(aioredis.Redis, AsyncCluster.from_url(on_cluster.cluster.url))
        store, groups = RedisStore(client, "unit"), GroupStore(client, "unit")
        await store.check_layout()
        now, no_trim = 1_800_000_000_000, TrimPolicy(-1, -1, False)
        await store.create_topic("s", 6, {}, now)
        old = await store.get_topic("s", {})
        assert old is not None
        packed = entries.pack_records([(now, None, b"v", [])] * 3)
        for p in range(6):
            result = await store.append(old, p, packed, 3, now, no_trim, ProducerBatch())
            assert result.status is AppendStatus.OK
        reads = await store.read([(old, p, 0, 10) for p in range(6)])
        assert [len(r.raw) for r in reads] == [3] * 6
        assert all(r.high_watermark == r.log_start_offset + 3 for r in reads)

        ref = PartitionRef("s", 2, store.stream_key("s", 2), 10)
        await groups.save_state({"g": '{"v": 1}'}, [], [("g", [(ref, reads[2].high_watermark,
                                                               None, -1)])], now)
        assert await groups.load_snapshots() == {"g": '{"v": 1}'}
        assert await client.hget(groups.commit_key(ref.stream_key, "g"), "offset") == \
            str(reads[2].high_watermark).encode()
        run_id, _ = await groups.redis_identity()
        assert len(run_id.split(",")) == 3, "the identity is the three masters' run ids"

        assert await store.delete_topic("s")
        assert not await client.exists(groups.commit_key(ref.stream_key, "g"))
        await store.create_topic("s", 6, {}, now)
        new = await store.get_topic("s", {})
        assert new is not None
        stale = await store.append(old, 0, packed, 3, now, no_trim, ProducerBatch())
        assert stale.status is AppendStatus.NO_TOPIC
        assert all(r.raw == [] for r in await store.read([(new, p, 0, 10) for p in range(6)]))

        await groups.delete_group("g")
        assert await groups.load_snapshots() == {}
        await store.delete_topic("s")
        assert [k async for k in client.scan_iter(match="unit:*")] == []
        await store.close()
        await client.aclose()

    asyncio.run(scenario())


def test_appends_to_one_key_keep_their_order_across_a_redirect(on_cluster: OnCluster) -> None:
    """An append sent while an earlier one to the same key is following a MOVED (the slot
    table already read again, here by the client itself) does not overtake it. It did: found
    by `korvet faults run --topology cluster`, where an idempotent producer's next batch then
    reached the new master first, was refused as out of order, and librdkafka's epoch bump
    stored the earlier batch a second time."""
    import asyncio

    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from korvet.storage.cluster_pipe import ClusterPipes

    def pack(*args: str) -> bytes:
        packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
        return packed

    async def one_round() -> list[bytes]:
        client = await AsyncCluster.from_url(on_cluster.cluster.url).initialize()
        pipes = ClusterPipes(client)
        key = f"order:{{{uuid.uuid4().hex}}}"
        await (await pipes.send(key, pack("RPUSH", key, "before")))
        node = client.get_node_from_key(key)
        assert node is not None
        await asyncio.to_thread(on_cluster.cluster.failover, int(node.port))
        first = await pipes.send(key, pack("RPUSH", key, "first"))  # the old master: MOVED
        await client.nodes_manager.initialize()  # the slot table is read again meanwhile
        second = await pipes.send(key, pack("RPUSH", key, "second"))
        await first
        await second
        found = await cast(aioredis.Redis, client).lrange(key, 0, -1)
        await pipes.close()
        await client.aclose()
        return [bytes(item) for item in found if isinstance(item, bytes)]

    for _ in range(3):
        assert asyncio.run(one_round()) == [b"before", b"first", b"second"]


def test_an_idempotent_batch_waits_for_an_earlier_one_refused_while_the_cluster_was_down(
        on_cluster: OnCluster) -> None:
    """While a master is down and not yet replaced, every master answers CLUSTERDOWN; an
    append refused so is sent again after a pause. A producer's next batch to the same
    partition, sent once the cluster is back, waits for it instead of reaching the same
    master first. It did not wait: found by `korvet faults run --topology cluster`, where
    the next batch was refused as out of order after librdkafka had seen the earlier one
    acknowledged, which librdkafka takes for a fatal "sequence desynchronization". Here the
    slot is taken from its master (``CLUSTER DELSLOTS``: CLUSTERDOWN for it alone) and given
    back while the first batch waits to be sent again."""
    import asyncio

    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from korvet.core.topics import TrimPolicy
    from korvet.storage import entries
    from korvet.storage.redis_store import AppendStatus, ProducerBatch, RedisStore

    async def scenario() -> None:
        client = cast(aioredis.Redis, AsyncCluster.from_url(on_cluster.cluster.url))
        store = RedisStore(client, f"seq{uuid.uuid4().hex[:8]}")
        await store.check_layout()
        now, no_trim = 1_800_000_000_000, TrimPolicy(-1, -1, False)
        await store.create_topic("t", 1, {}, now)
        topic = await store.get_topic("t", {})
        assert topic is not None

        def batch(seq: int) -> tuple[entries.PackedRecords, ProducerBatch]:
            return (entries.pack_records([(now, None, b"%d" % seq, [])]),
                    ProducerBatch(7, 0, seq, seq))

        packed, producer = batch(0)
        assert (await store.append(topic, 0, packed, 1, now, no_trim, producer)
                ).status is AppendStatus.OK
        stream = store.stream_key("t", 0)
        owner = on_cluster.cluster.client(on_cluster.master_of(stream))
        slot = on_cluster.client().keyslot(stream)  # type: ignore[no-untyped-call]
        owner.execute_command("CLUSTER", "DELSLOTS", slot)  # type: ignore[no-untyped-call]
        try:
            packed, producer = batch(1)
            first = await store.append_send(topic, 0, packed, 1, now, no_trim, producer)
            await asyncio.sleep(0.4)  # refused, and refused again on its first resends
        finally:
            owner.execute_command("CLUSTER", "ADDSLOTS", slot)  # type: ignore[no-untyped-call]
        packed, producer = batch(2)
        second = await store.append_send(topic, 0, packed, 1, now, no_trim, producer)
        statuses = [(await store.append_result(topic, sent)).status for sent in (first, second)]
        read = (await store.read([(topic, 0, 0, 10)]))[0]
        values = [bytes(fields[fields.index(b"value") + 1]) for _, fields in read.raw]
        await store.delete_topic("t")
        await store.close()
        await client.aclose()
        assert statuses == [AppendStatus.OK, AppendStatus.OK]
        assert values == [b"0", b"1", b"2"]

    asyncio.run(scenario())


def test_group_leases_fence_each_groups_write_in_its_slot(on_cluster: OnCluster) -> None:
    """Several brokers' lease scripts (cluster.multi-broker) on the cluster: a group's lease
    sits in its slot, acquiring returns its snapshot, a step over groups on different
    masters is one fenced script per group, and a stale token refuses that group's write
    only; the clean-up of a deleted group (``LeaseStore.delete_group``) is fenced alike."""
    import asyncio

    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from korvet.storage.groups import GroupStore
    from korvet.storage.leases import LeaseStore

    async def scenario() -> None:
        client = cast(aioredis.Redis, AsyncCluster.from_url(on_cluster.cluster.url))
        groups = GroupStore(client, "lease")
        leases = LeaseStore(groups)
        names = [f"g{i}" for i in range(8)]
        masters = {on_cluster.master_of(groups.lease_key(g)) for g in names}
        assert len(masters) > 1, "the groups spread over several masters"
        assert all(on_cluster.master_of(groups.lease_key(g))
                   == on_cluster.master_of(groups.snapshot_key(g)) for g in names)
        tokens = {}
        for g in names:
            grant = await leases.acquire(g, "1", 30_000)
            assert grant.granted and grant.snapshot is None
            tokens[g] = grant.token
        assert await leases.save_state(tokens, {g: f'{{"{g}": 1}}' for g in names},
                                       [], [], 0, []) == []
        assert await groups.load_snapshots() == {g: f'{{"{g}": 1}}' for g in names}
        again = await leases.acquire("g0", "2", 30_000)
        assert not again.granted and again.owner == "1"
        await leases.release("g0", tokens["g0"])
        taken = await leases.acquire("g0", "2", 30_000)
        assert taken.granted and taken.snapshot == '{"g0": 1}'
        # broker 1's step, with g0's stale token, deletes g1 and rewrites g0
        stale = await leases.save_state({"g0": tokens["g0"], "g1": tokens["g1"]},
                                        {"g0": "{}"}, ["g1"], [], 0, [])
        assert stale == ["g0"]
        loaded = await groups.load_snapshots()
        assert loaded["g0"] == '{"g0": 1}' and "g1" not in loaded
        # a deleted group's clean-up is fenced the same way, in its slot; group-ids after it
        committed, _ = await groups.group_data("g0")
        assert not await leases.delete_group("g0", tokens["g0"], committed)
        assert (await groups.load_snapshots())["g0"] == '{"g0": 1}'
        assert await leases.delete_group("g0", taken.token, committed)
        assert "g0" not in await groups.load_snapshots()
        assert not await client.sismember(groups.group_ids_key, "g0")
        for g in names:
            await groups.delete_group(g)
            await client.delete(groups.lease_key(g))
        assert await groups.load_snapshots() == {}
        await client.aclose()

    asyncio.run(scenario())


def _fetch_all(client: Any, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, bytes]]:
    """One Fetch for several partitions (their reads go to several masters): partition ->
    (error code, record bytes)."""
    import datetime

    from kio.index import load_request_schema

    from korvet.protocol.kbuild import make, nested

    cls = load_request_schema(1, 12)
    parts = tuple(make(nested(cls, "FetchPartition"), partition=p, current_leader_epoch=-1,
                       fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                       partition_max_bytes=1024 * 1024) for p, o in offsets.items())
    response = client.request(make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=50 * 1024 * 1024, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(make(nested(cls, "FetchTopic"), topic=topic, partitions=parts),),
        forgotten_topics_data=(), rack_id=""))
    return {p.partition_index: (int(p.error_code), bytes(p.records or b""))
            for p in response.responses[0].partitions}


def test_the_batches_format_across_masters_and_a_failover(on_cluster: OnCluster) -> None:
    """A ``korvet.storage.format=batches`` topic on the cluster: produce, fetch from inside a
    batch (its fetch script, loaded with SCRIPT LOAD, runs on every master), ListOffsets by
    time and DeleteRecords on every partition; then the master of partition 0 fails over and
    the new master lacks the fetch script (Redis 7 does not replicate SCRIPT LOAD; a
    restarted master has none either): the next fetches still answer, from the new master."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from korvet.protocol.records import Record, build_batch
    from tests.integration.test_broker_behaviour import list_offsets, produce_request
    from tests.support.wire import WireClient

    topic, partitions = f"batches-{uuid.uuid4().hex[:8]}", 6
    bootstrap = on_cluster.broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  config={"korvet.storage.format": "batches"})])[topic].result(30)
    stream = [f"korvet:{{{topic}:{p}}}:stream" for p in range(partitions)]
    assert len({on_cluster.master_of(s) for s in stream}) >= 2
    base = int(time.time() * 1000) - 60_000

    def batch(p: int, tag: str, at: int) -> bytes:
        return build_batch([Record(at + i * 1000, f"{tag}{i}".encode(),
                                   f"{p}-{tag}{i}".encode(), []) for i in range(10)])

    first: dict[int, int] = {}  # partition -> base offset of its first batch
    second: dict[int, int] = {}  # ... and of its second
    with WireClient(bootstrap) as client:
        for p in range(partitions):
            for tag, at, bases in (("a", base, first), ("b", base + 20_000, second)):
                reply = client.request(produce_request(topic, {p: batch(p, tag, at)}))
                answer = reply.responses[0].partition_responses[0]
                assert answer.error_code == 0
                bases[p] = int(answer.base_offset)
        assert [on_cluster.client().xlen(s) for s in stream] == [2] * partitions
        # from inside each partition's first batch: Kafka answers with the whole batch
        fetched = _fetch_all(client, topic, {p: first[p] + 4 for p in range(partitions)})
        for p, (error, raw) in fetched.items():
            assert error == 0 and int.from_bytes(raw[:8], "big") == first[p], p
            assert int.from_bytes(raw[57:61], "big") == 10, "the batch's record count"
        for p in range(partitions):
            assert list_offsets(client, topic, p, base + 2500) == (first[p] + 3, base + 3000)
            assert list_offsets(client, topic, p, base + 15_000) == (second[p], base + 20_000)

        victim = on_cluster.master_of(stream[0])
        promoted = on_cluster.cluster.failover(victim)
        new_master = on_cluster.cluster.client(promoted)
        new_master.script_flush()
        assert on_cluster.master_of(stream[0]) == promoted
        fetched = _fetch_all(client, topic, {p: second[p] + 3 for p in range(partitions)})
        for p, (error, raw) in fetched.items():
            assert error == 0 and int.from_bytes(raw[:8], "big") == second[p], p
        assert new_master.script_exists(_holder_sha()) == [True], "the broker loaded it again"

    start = {p: second[p] + 2 + p % 2 for p in range(partitions)}
    deleted = admin.delete_records([TopicPartition(topic, p, start[p]) for p in range(partitions)])
    assert {tp.partition: f.result(30).low_watermark for tp, f in deleted.items()} == start
    with WireClient(bootstrap) as client:
        for p in range(partitions):
            assert list_offsets(client, topic, p, -2)[0] == start[p]
        fetched = _fetch_all(client, topic, {p: first[p] + 2 for p in range(partitions)})
        assert {error for error, _ in fetched.values()} == {1}, "below the start: out of range"
        fetched = _fetch_all(client, topic, start)
        assert all(error == 0 and int.from_bytes(raw[:8], "big") == second[p]
                   for p, (error, raw) in fetched.items())
    admin.delete_topics([topic])[topic].result(30)


def _holder_sha() -> str:
    """The fetch script's id (SHA-1 of its text, as Redis names scripts)."""
    import hashlib
    from importlib import resources

    text = (resources.files("korvet.storage") / "lua" / "batch_holder.lua").read_text()
    return hashlib.sha1(text.encode()).hexdigest()


def test_acks_all_waits_for_the_masters_replica(on_cluster: OnCluster) -> None:
    """``redis.wait-replicas``: an append sent as acks=all is confirmed by the partition's
    master's replica (WAIT 1: OK); asking for more replicas than the master has answers
    NOT_REPLICATED after the wait, with the batch stored on the master all the same (a
    retry of the same idempotent batch is a duplicate, as in Kafka)."""
    import asyncio

    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from korvet.core.topics import TrimPolicy
    from korvet.storage import entries
    from korvet.storage.redis_store import AppendStatus, ProducerBatch, RedisStore

    async def scenario() -> None:
        client = cast(aioredis.Redis, AsyncCluster.from_url(on_cluster.cluster.url))
        one = RedisStore(client, "wait", wait_replicas=1, wait_timeout_ms=5000)
        two = RedisStore(client, "wait", wait_replicas=2, wait_timeout_ms=200)
        now, no_trim = 1_800_000_000_000, TrimPolicy(-1, -1, False)
        await one.create_topic("w", 3, {}, now)
        topic = await one.get_topic("w", {})
        assert topic is not None
        packed = entries.pack_records([(now, None, b"v", [])] * 2)
        results = await asyncio.gather(*(
            one.append(topic, p, packed, 2, now, no_trim, ProducerBatch(), replicated=True)
            for p in range(3)))
        assert [r.status for r in results] == [AppendStatus.OK] * 3
        producer = ProducerBatch(7, 0, 0, 1)
        started = time.monotonic()
        refused = await two.append(topic, 0, packed, 2, now, no_trim, producer, replicated=True)
        assert refused.status is AppendStatus.NOT_REPLICATED
        assert time.monotonic() - started >= 0.2, "WAIT waited for its timeout"
        again = await one.append(topic, 0, packed, 2, now, no_trim, producer, replicated=True)
        assert again.status is AppendStatus.DUPLICATE, "the refused batch was stored"
        assert (await one.read([(topic, 0, 0, 10)]))[0].high_watermark == \
            results[0].last_offset + 3
        unreplicated = await two.append(topic, 1, packed, 2, now, no_trim, ProducerBatch())
        assert unreplicated.status is AppendStatus.OK, "acks=1 does not wait"
        await one.delete_topic("w")
        await one.close()
        await two.close()
        await client.aclose()

    asyncio.run(scenario())


def test_a_duplicate_is_confirmed_only_once_the_replica_has_the_batch(
        on_cluster: OnCluster) -> None:
    """acks=all with ``redis.wait-replicas``: a retried idempotent batch that the script finds
    stored (a duplicate, nothing written) is answered only once the master's replica has that
    batch, also when the retry comes on another connection than the first write (another
    broker, or after a reconnection): else a master crash could lose an acknowledged batch.
    It holds because the duplicate's answer is also checked against WAIT, and Redis' WAIT
    (7.0 here) waits for the server's replication offset even on a connection that wrote
    nothing (checked for issue 35: the replica is stopped here, so it lacks the batch)."""
    import asyncio
    import os
    import signal

    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from korvet.core.topics import TrimPolicy
    from korvet.storage import entries
    from korvet.storage.redis_store import AppendStatus, ProducerBatch, RedisStore

    async def scenario() -> None:
        clients = [cast(aioredis.Redis, await AsyncCluster.from_url(on_cluster.cluster.url)
                        .initialize()) for _ in range(2)]
        space = f"dup{uuid.uuid4().hex[:8]}"
        first, other = (RedisStore(c, space, wait_replicas=1, wait_timeout_ms=300)
                        for c in clients)
        now, no_trim = 1_800_000_000_000, TrimPolicy(-1, -1, False)
        await first.create_topic("t", 1, {}, now)
        topic = await first.get_topic("t", {})
        assert topic is not None
        packed = entries.pack_records([(now, None, b"v", [])])
        producer = ProducerBatch(7, 0, 0, 0)
        replica = on_cluster.cluster.replica_of(on_cluster.master_of(first.stream_key("t", 0)))
        stopped = on_cluster.cluster.processes[on_cluster.cluster.ports.index(replica)].pid
        os.kill(stopped, signal.SIGSTOP)
        try:
            written = await first.append(topic, 0, packed, 1, now, no_trim, producer,
                                         replicated=True)
            retried = await other.append(topic, 0, packed, 1, now, no_trim, producer,
                                         replicated=True)
        finally:
            os.kill(stopped, signal.SIGCONT)
        assert written.status is AppendStatus.NOT_REPLICATED
        assert retried.status is AppendStatus.NOT_REPLICATED, "no replica has the batch"
        again = await other.append(topic, 0, packed, 1, now, no_trim, producer, replicated=True)
        assert again.status is AppendStatus.DUPLICATE, "confirmed once the replica has it"
        await first.delete_topic("t")
        for store in (first, other):
            await store.close()
        for c in clients:
            await c.aclose()

    asyncio.run(scenario())


def test_several_seed_nodes_and_a_clear_error_when_none_answers(on_cluster: OnCluster,
                                                                  tmp_path: Path) -> None:
    """Like Kafka's bootstrap.servers, the cluster's URL may name several seed nodes: a broker
    whose first seed is down starts from the next one. When none answers, `korvet serve`
    says so and exits 2, without a traceback."""
    dead = free_port()
    live = on_cluster.cluster.ports[1]
    # its own keyspace: the module's broker claims the default one alone (server/claim.py)
    broker = KorvetProcess(tmp_path / "seeds", extra_args=[
        "--redis-url", f"redis://127.0.0.1:{dead},127.0.0.1:{live}", "--redis-cluster",
        "--keyspace", "seeds"]).start()
    try:
        topic = f"seeds-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, 2)
        records = [clients.Rec(i % 2, b"k", f"v{i}".encode(), (), int(time.time() * 1000))
                   for i in range(10)]
        clients.confluent_produce(broker.bootstrap, topic, records)
        got = clients.confluent_consume(broker.bootstrap, topic, 2, 10, timeout=30)
        assert sorted(g.value or b"" for g in got) == sorted(r.value or b"" for r in records)
    finally:
        broker.stop()
    refused = subprocess.run(
        [*KORVET, "serve", "--redis-url", f"redis://127.0.0.1:{dead},127.0.0.1:{free_port()}",
         "--redis-cluster", "--port", "0", "--no-http-enabled",
         "--data-dir", str(tmp_path / "none")], capture_output=True, text=True, timeout=120,
        cwd=ROOT, check=False)
    assert refused.returncode == 2, refused.stderr
    assert "cannot reach Redis at redis://127.0.0.1:" in refused.stderr
    assert "several seed nodes" in refused.stderr and "Traceback" not in refused.stderr
    malformed = subprocess.run(
        [*KORVET, "serve", "--redis-url", f"redis://127.0.0.1:{live},127.0.0.1:port",
         "--redis-cluster", "--redis-password", "secret", "--port", "0", "--no-http-enabled",
         "--data-dir", str(tmp_path / "malformed")], capture_output=True, text=True, timeout=120,
        cwd=ROOT, check=False)
    assert malformed.returncode == 2, malformed.stderr
    assert "a seed node must be host:port, got '127.0.0.1:port'" in malformed.stderr
    assert "Traceback" not in malformed.stderr and "secret" not in malformed.stderr


def test_the_memory_watch_reads_every_master(on_cluster: OnCluster) -> None:
    """Redis' eviction policy is read from every master (server/redis_memory.py): readiness
    names the policy of each, so an evicting master cannot hide behind the others."""
    url = f"http://127.0.0.1:{on_cluster.broker.http_port}/health/readiness"
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.loads(answer.read())
    details = body["components"]["redisMemory"]["details"]
    assert details["eviction"] == "safe", details
    assert details["maxmemoryPolicy"] == ["noeviction"]
    assert details["nodes"] == len(on_cluster.cluster.masters())
