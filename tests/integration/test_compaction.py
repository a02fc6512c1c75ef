"""Compacted topics (issue 34) through a real broker process, its embedded redis-server and real
clients: keyless records refused, and the log cleaner (korvet/server/cleaner.py,
korvet/storage/lua/clean.lua, spec/Compaction.tla) keeping the latest value of each key with
its original offset.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.request import urlopen

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka.admin import KafkaAdminClient
from redis import Redis

from korvet.jvm.java_clients import KafkaJavaTools
from korvet.protocol.records import stored_records
from tests.conftest import KorvetProcess
from tests.integration import clients

pytestmark = pytest.mark.clients


def create(broker: KorvetProcess, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, config=configs)])[name].result(30)


@pytest.mark.spec("Compaction", "Produce", "KeyedOnly")
@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_refuses_records_without_a_key(korvet: KorvetProcess,
                                                         policy: str) -> None:
    """Kafka's answer, INVALID_RECORD (87), reaches librdkafka's delivery report; a keyed
    record on the same topic is stored, and a keyless one on a `delete` topic too."""
    name = f"keyless-{uuid.uuid4().hex[:8]}"
    create(korvet, name, {"cleanup.policy": policy})
    create(korvet, name + "-delete", {"cleanup.policy": "delete"})
    producer = Producer({"bootstrap.servers": korvet.bootstrap, "retries": 0})
    reports: dict[str, KafkaError | None] = {}

    def report(tag: str):  # type: ignore[no-untyped-def]
        def done(err: KafkaError | None, _msg: object) -> None:
            reports[tag] = err
        return done

    producer.produce(name, value=b"v", on_delivery=report("keyless"))
    producer.flush(30)
    producer.produce(name, key=b"k", value=b"v", on_delivery=report("keyed"))
    producer.produce(name + "-delete", value=b"v", on_delivery=report("delete-topic"))
    producer.flush(30)
    keyless = reports["keyless"]
    assert keyless is not None and keyless.code() == KafkaError.INVALID_RECORD, keyless
    assert reports["keyed"] is None
    assert reports["delete-topic"] is None



# --- the log cleaner --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cleaning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    """A broker whose cleaner runs a round every 200 ms, in chunks of 100 entries (so that a
    pass over these tests' partitions takes many calls)."""
    broker = KorvetProcess(tmp_path_factory.mktemp("cleaning"), extra_args=[
        "--cleaner-backoff-ms", "200", "--cleaner-chunk-entries", "100"])
    broker.start()
    yield broker
    broker.stop()


def redis(broker: KorvetProcess) -> Redis:
    return Redis.from_url(broker.redis_url)


def stream(topic: str) -> str:
    return f"korvet:{{{topic}:0}}:stream"


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def read_all(broker: KorvetProcess, topic: str, offset: int = OFFSET_BEGINNING,
             idle: float = 3.0) -> list[Message]:
    """Every record from ``offset`` to the end of partition 0, as librdkafka returns them."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, offset)])
    got: list[Message] = []
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    quiet_since = time.monotonic()
    try:
        while time.monotonic() - quiet_since < idle:
            batch = consumer.consume(num_messages=1000, timeout=0.3)
            for msg in batch:
                assert not msg.error(), msg.error()
                got.append(msg)
            if batch:
                quiet_since = time.monotonic()
            if got and got[-1].offset() == high - 1:
                break
    finally:
        consumer.close()
    return got


def keys_in(r: Redis, topic: str) -> list[bytes | None]:
    """The keys of the records in the partition's stream, as Redis holds them (a batches
    entry's records decoded from its batch)."""
    entries: Any = r.xrange(stream(topic))
    keys: list[bytes | None] = []
    for _, fields in entries:
        if b"batch" in fields:
            keys += [key for _, key, _ in stored_records(fields[b"batch"]).records]
        else:
            keys.append(fields.get(b"key"))
    return keys


def scattered_updates(count: int, keys: int) -> list[clients.Rec]:
    """``updates`` with the keys in a fixed random order, so that each key's latest record
    sits anywhere in the last batches: a cleaned batch then loses records at its start, in its
    middle and at its end."""
    order = [i % keys for i in range(count)]
    random.Random(34).shuffle(order)
    now = int(time.time() * 1000)
    return [clients.Rec(0, b"key-%d" % k, f"v-{i}".encode() * 8, (), now)
            for i, k in enumerate(order)]


def records_in(r: Redis, topic: str) -> int:
    """The records the partition's stream holds: a batches entry's, decoded."""
    return len(keys_in(r, topic))


def latest_per_key(records: list[clients.Rec], told: list[tuple[int, int]]
                   ) -> dict[bytes | None, tuple[int, bytes | None]]:
    """Each key's last record as it was produced: its offset and value."""
    latest: dict[bytes | None, tuple[int, bytes | None]] = {}
    for rec, (_, offset) in zip(records, told, strict=True):
        latest[rec.key] = (offset, rec.value)
    return latest


def updates(count: int, keys: int, stamp: int | None = None, tag: str = "v") -> list[clients.Rec]:
    now = stamp if stamp is not None else int(time.time() * 1000)
    return [clients.Rec(0, b"key-%d" % (i % keys), f"{tag}-{i}".encode() * 8, (), now)
            for i in range(count)]


@pytest.mark.spec("Compaction", "Swap", "LatestPerKeyKept", "OffsetsStable", "FetchNextSurvivor",
                  "LogStartMovesOnlyByRetention")
@pytest.mark.parametrize("scheme", ["dense", "time"])
def test_a_compacted_topic_shrinks_to_its_live_keys(cleaning: KorvetProcess,
                                                    scheme: str) -> None:
    """3,000 updates of 30 keys: once the active segment has rolled (max.compaction.lag.ms
    300 ms), a pass leaves one entry per key (XLEN falls from 3,000 to 30) and the stream's
    memory with it; a consumer from the beginning sees each key's latest value at the offset it
    was written at, and a fetch from a removed offset starts at the next survivor. The cleaner's
    metrics count the pass and the records removed."""
    name = f"shrinks-{scheme}-{uuid.uuid4().hex[:8]}"
    # the lag is shortened once every record is in: a pass begun while the producer still
    # sends (a slow machine) would leave the late records to a second pass
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "3600000",
                            "korvet.offset.scheme": scheme})
    records = updates(3000, 30)
    told = clients.confluent_produce(cleaning.bootstrap, name, records)
    admin = AdminClient({"bootstrap.servers": cleaning.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("max.compaction.lag.ms", "300",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    r = redis(cleaning)
    wait_for("the pass", lambda: r.xlen(stream(name)) <= 30)
    assert r.xlen(stream(name)) == 30
    latest = latest_per_key(records, told)
    got = read_all(cleaning, name)
    assert [(m.key(), m.offset(), m.value()) for m in got] == sorted(
        ((k, o, v) for k, (o, v) in latest.items()), key=lambda t: t[1])
    # a fetch from an offset the cleaner removed starts at the next record kept
    first_kept = min(o for o, _ in latest.values())
    removed = told[len(told) // 2][1]
    assert removed not in {o for o, _ in latest.values()}
    from_removed = read_all(cleaning, name, removed)
    assert from_removed and from_removed[0].offset() == min(
        o for o, _ in latest.values() if o > removed)
    assert first_kept > told[0][1]
    metrics = urlopen(f"http://127.0.0.1:{cleaning.http_port}/metrics", timeout=10).read()
    assert f'korvet_cleaner_records_removed_total{{topic="{name}"}} 2970.0'.encode() in metrics
    assert f'korvet_cleaner_passes_total{{topic="{name}"}} 1.0'.encode() in metrics


@pytest.mark.spec("Compaction", "CopyChunk", note="memory returns")
def test_the_stream_memory_falls_with_the_records(cleaning: KorvetProcess) -> None:
    """What a Redis user and Kafka's tools see: MEMORY USAGE of the partition's stream, the
    partition's size DescribeLogDirs reports (kafka-python's describe_log_dirs, what
    kafka-log-dirs asks) and the korvet_storage_entries metric fall to a small part of what
    they were (the figures are printed)."""
    name = f"memory-{uuid.uuid4().hex[:8]}"
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"})
    r = redis(cleaning)
    clients.confluent_produce(cleaning.bootstrap, name, updates(20_000, 100))
    before = int(r.memory_usage(stream(name), samples=0) or 0)
    dir_before = log_dir_size(cleaning, name)
    wait_for("the pass", lambda: r.xlen(stream(name)) <= 100)
    after = int(r.memory_usage(stream(name), samples=0) or 0)
    dir_after = log_dir_size(cleaning, name)
    print(f"stream memory: {before} bytes for 20,000 records, {after} for the 100 kept; "
          f"DescribeLogDirs {dir_before} -> {dir_after}")
    assert after * 20 < before
    assert dir_after * 20 < dir_before
    metrics = urlopen(f"http://127.0.0.1:{cleaning.http_port}/metrics", timeout=10).read()
    assert f'korvet_storage_entries{{topic="{name}"}} 100.0'.encode() in metrics


def log_dir_size(broker: KorvetProcess, topic: str) -> int:
    """The partition's size as DescribeLogDirs answers it."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer: Any = admin.describe_log_dirs()
    finally:
        admin.close()
    return next(int(p["partition_size"]) for b in answer for d in b["log_dirs"]
                for t in d["topics"] if t["name"] == topic for p in t["partitions"])


@pytest.mark.spec("Compaction", "HeadUntouched", "Young", "MapChunk")
def test_the_head_younger_than_min_compaction_lag_is_kept(cleaning: KorvetProcess) -> None:
    """min.compaction.lag.ms one hour: of 100 updates of one key stamped two hours ago and
    100 stamped now, a pass removes only old ones (their latest stays) and keeps every young
    one, though each supersedes the old."""
    name = f"head-{uuid.uuid4().hex[:8]}"
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "300",
                            "min.compaction.lag.ms": "3600000"})
    old = updates(100, 1, int(time.time() * 1000) - 7_200_000, "old")
    young = updates(100, 1, tag="young")
    told = clients.confluent_produce(cleaning.bootstrap, name, old + young)
    r = redis(cleaning)
    wait_for("the pass", lambda: r.xlen(stream(name)) <= 101)
    got = read_all(cleaning, name)
    assert [m.offset() for m in got] == [told[99][1]] + [o for _, o in told[100:]]
    assert [m.value() for m in got] == [old[-1].value] + [y.value for y in young]


@pytest.mark.spec("Compaction", "Horizon", "ReaderSeesFinalState")
@pytest.mark.parametrize("storage", ["records", "batches"])
def test_tombstones_vanish_after_delete_retention(cleaning: KorvetProcess, storage: str) -> None:
    """A tombstone stays while its older values go, and for delete.retention.ms (2 s) after
    the pass that made it its key's visible latest; then it goes too. Writes to another key
    keep the partition dirty so that passes go on. Both storage formats (a batches topic's
    tombstone sits in a rewritten batch, its horizon on the batch's entry)."""
    name = f"tombstones-{storage}-{uuid.uuid4().hex[:8]}"
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "300",
                            "delete.retention.ms": "2000", "korvet.storage.format": storage})
    now = int(time.time() * 1000)
    doomed = [clients.Rec(0, b"doomed", b"value-%d" % i, (), now) for i in range(5)]
    tombstone = clients.Rec(0, b"doomed", None, (), now)
    producer = Producer({"bootstrap.servers": cleaning.bootstrap, "enable.idempotence": True})
    clients.confluent_produce(cleaning.bootstrap, name, [*doomed, tombstone])
    r = redis(cleaning)
    wait_for("the first pass", lambda: records_in(r, name) == 1)
    # the swap that made the tombstone its key's visible latest (nothing is dirty until the
    # writes below, so no other pass runs before this is read)
    swapped = int(r.hget(f"korvet:{{{name}:0}}:partition", "swapped") or 0)
    kept = read_all(cleaning, name)
    assert [(m.key(), m.value()) for m in kept] == [(b"doomed", None)]
    gone_at = 0
    for i in range(300):
        producer.produce(name, key=b"alive", value=b"%d" % i)
        producer.flush(10)
        if b"doomed" not in keys_in(r, name):
            gone_at = int(time.time() * 1000)
            break
        time.sleep(0.1)
    assert gone_at, "the tombstone was never removed"
    assert not any(m.key() == b"doomed" for m in read_all(cleaning, name))
    assert gone_at - swapped >= 2000, f"the tombstone went {gone_at - swapped} ms after the swap"


@pytest.mark.parametrize("storage", ["records", "batches"])
def test_an_idempotent_producer_keeps_working_across_passes(cleaning: KorvetProcess,
                                                            storage: str) -> None:
    """One idempotent librdkafka producer writes on while passes swap the stream under it:
    every record is acknowledged once, at consecutive offsets, and the end state is each
    key's last write. Both storage formats (a rewritten batch keeps its producer id, epoch
    and base sequence; the producer's state is the meta hash's, which no pass touches)."""
    name = f"idempotent-{storage}-{uuid.uuid4().hex[:8]}"
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "200",
                            "korvet.storage.format": storage})
    producer = Producer({"bootstrap.servers": cleaning.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    offsets: list[int] = []
    errors: list[KafkaError] = []

    def done(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(int(msg.offset() or 0))

    r = redis(cleaning)
    for round_ in range(6):
        for i in range(500):
            producer.produce(name, key=b"key-%d" % (i % 7), value=b"%d-%d" % (round_, i),
                             on_delivery=done)
            producer.poll(0)
        producer.flush(30)
        length = records_in(r, name)
        wait_for("a pass", lambda length=length: records_in(r, name) < length)  # type: ignore[misc]
    assert not errors, errors[:3]
    assert sorted(offsets) == list(range(offsets[0], offsets[0] + 3000))
    got = read_all(cleaning, name)
    assert {m.key(): m.value() for m in got} == {b"key-%d" % k: b"5-%d" % max(
        i for i in range(500) if i % 7 == k) for k in range(7)}


# --- batches topics (korvet.storage.format=batches; korvet/server/clean_batches.py) ----------

@pytest.mark.spec("Compaction", "Swap", "LatestPerKeyKept", "OffsetsStable", "FetchNextSurvivor",
                  note="Format batches: Rewrite keeps each survivor at its offset delta")
@pytest.mark.parametrize(("scheme", "compression"), [("dense", "none"), ("time", "none"),
                                                     ("dense", "zstd"), ("time", "lz4")])
def test_a_batches_topic_shrinks_to_its_live_keys(cleaning: KorvetProcess, scheme: str,
                                                  compression: str) -> None:
    """3,000 updates of 30 keys in random order, in librdkafka's batches of 50 (compressed or
    not), stored whole: once the active segment has rolled, a pass leaves 30 records in a few
    rewritten batches with gaps in their offset deltas (the stream's entries and memory
    fall); a consumer from the beginning sees each key's latest value at the offset it was
    written at, and a fetch from a removed offset starts at the next survivor; the batches
    keep their compression."""
    name = f"batches-{scheme}-{compression}-{uuid.uuid4().hex[:8]}"
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "300",
                            "korvet.offset.scheme": scheme, "korvet.storage.format": "batches"})
    records = scattered_updates(3000, 30)
    told = clients.confluent_produce(cleaning.bootstrap, name, records, extra={
        "compression.type": compression, "linger.ms": 20, "batch.num.messages": 50})
    r = redis(cleaning)
    entries_before = int(r.xlen(stream(name)))
    memory_before = int(r.memory_usage(stream(name), samples=0) or 0)
    wait_for("the pass", lambda: records_in(r, name) == 30)
    entries_after = int(r.xlen(stream(name)))
    memory_after = int(r.memory_usage(stream(name), samples=0) or 0)
    print(f"{name}: {entries_before} batches, {memory_before} bytes -> {entries_after} "
          f"batches, {memory_after} bytes")
    assert entries_after < entries_before and memory_after * 3 < memory_before
    codec = {"none": 0, "zstd": 4, "lz4": 3}[compression]
    stored: Any = r.xrange(stream(name))
    assert all(fields[b"batch"][22] & 0x07 == codec for _, fields in stored)
    latest = latest_per_key(records, told)
    got = read_all(cleaning, name)
    assert [(m.key(), m.offset(), m.value()) for m in got] == sorted(
        ((k, o, v) for k, (o, v) in latest.items()), key=lambda t: t[1])
    removed = told[len(told) // 2][1]
    assert removed not in {o for o, _ in latest.values()}
    from_removed = read_all(cleaning, name, removed)
    assert from_removed and from_removed[0].offset() == min(
        o for o, _ in latest.values() if o > removed)
    metrics = urlopen(f"http://127.0.0.1:{cleaning.http_port}/metrics", timeout=10).read()
    assert f'korvet_cleaner_records_removed_total{{topic="{name}"}} 2970.0'.encode() in metrics


def test_kafkas_console_consumer_reads_a_cleaned_batches_topic(cleaning: KorvetProcess) -> None:
    """The Java client (Kafka's kafka-console-consumer) reads a cleaned, zstd-compressed
    batches topic from the beginning: each key's latest value, at its offset, and no more."""
    name = f"batches-java-{uuid.uuid4().hex[:8]}"
    create(cleaning, name, {"cleanup.policy": "compact", "max.compaction.lag.ms": "300",
                            "korvet.storage.format": "batches"})
    records = scattered_updates(600, 12)
    told = clients.confluent_produce(cleaning.bootstrap, name, records, extra={
        "compression.type": "zstd", "linger.ms": 20, "batch.num.messages": 25})
    r = redis(cleaning)
    wait_for("the pass", lambda: records_in(r, name) == 12)
    tools = KafkaJavaTools(cleaning.bootstrap, timeout=180)
    result = tools.console_consume(name, max_messages=12)  # more would show in these 12
    latest = latest_per_key(records, told)
    assert [(rec.offset, (rec.key or "").encode(), (rec.value or "").encode())
            for rec in result.records] == sorted(
        ((o, k or b"", v or b"") for k, (o, v) in latest.items()))
