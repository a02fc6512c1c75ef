"""The cleaner's script (korvet/storage/lua/clean.lua) driven call by call on a real broker's
Redis, the broker's own cleaner off: what runs between two calls of a pass (appends, a dying
cleaner, another broker) and how long one call holds Redis.

spec/Compaction.tla's steps, in the order a test chooses: ``begin`` (Begin, under the lease),
``step`` (MapChunk, CopyChunk, Swap) and a broker that stops calling (Abandon).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiokafka.record._crecords import DefaultRecordBatch
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from redis import Redis

from korvet.core.cleaner import CleanSettings
from korvet.core.topics import TopicInfo
from korvet.protocol.records import CONTROL_FLAG
from korvet.server import clean_batches
from korvet.server.clean_batches import _copy_chunk, _copy_plan, batches_step
from korvet.storage.cleaner import BatchReads, CleanerStore, StepResult, _lua
from korvet.storage.redis_store import RedisStore
from tests.conftest import KorvetProcess
from tests.integration import clients
from tests.integration.test_compaction import create, latest_per_key, read_all, stream, updates

pytestmark = pytest.mark.clients

CONFIGS = {"cleanup.policy": "compact", "max.compaction.lag.ms": "100"}


@pytest.fixture(scope="module")
def idle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    """A broker whose own cleaner does not run: the tests make every call themselves."""
    broker = KorvetProcess(tmp_path_factory.mktemp("idle-cleaner"),
                           extra_args=["--no-cleaner-enable"])
    broker.start()
    yield broker
    broker.stop()


class Driver:
    """clean.lua's calls for one partition, as one broker makes them."""

    def __init__(self, broker: KorvetProcess, topic: str, me: str = "1",
                 lease_ms: int = 30_000) -> None:
        self.url, self.topic_name, self.me, self.lease_ms = broker.redis_url, topic, me, lease_ms

    def _run(self, op: str, *args: Any) -> Any:
        async def call() -> Any:
            client = aioredis.Redis.from_url(self.url)
            try:
                store = RedisStore(client, "korvet")
                topic = await store.get_topic(self.topic_name, {})
                assert isinstance(topic, TopicInfo)
                cleaner = CleanerStore(store, self.me, self.lease_ms)
                settings = CleanSettings.of(topic.config)
                now = int(time.time() * 1000)
                if op == "begin":
                    return await cleaner.begin(topic, 0, settings, now)
                if op == "step" and topic.config.stores_batches:  # as the broker's task does
                    return await batches_step(cleaner, topic, 0, args[0], now, args[1])
                if op == "step":
                    return await cleaner.step(topic, 0, args[0], now, args[1])
                return await cleaner.status(topic, 0, settings, now)
            finally:
                await client.aclose()
        return asyncio.run(call())

    def begin(self) -> int | None:
        result: int | None = self._run("begin")
        return result

    def step(self, token: int, chunk: int) -> StepResult:
        result: StepResult = self._run("step", token, chunk)
        return result


def start_pass(driver: Driver) -> int:
    """Begin (the first call only rolls the active segment: the partition was all of it)."""
    deadline = time.monotonic() + 30
    while True:
        token = driver.begin()
        if token is not None:
            return token
        assert time.monotonic() < deadline, "no pass began"
        time.sleep(0.15)


def run_to_swap(driver: Driver, token: int, chunk: int) -> tuple[StepResult, int]:
    calls = 0
    while True:
        calls += 1
        step = driver.step(token, chunk)
        if step.outcome not in ("MAP", "COPY"):
            return step, calls


@pytest.mark.spec("Compaction", "CopyChunk", "Rest", "Swap", "Begin")
def test_records_appended_during_a_pass_are_kept(idle: KorvetProcess) -> None:
    """Appends between the copy's chunks go to the old stream; the copy goes on through them
    and the swap takes the rest, so nothing written during the pass is lost, and what it
    supersedes of the cleaned section is gone once the next pass runs."""
    name = f"interleave-{uuid.uuid4().hex[:8]}"
    create(idle, name, CONFIGS)
    first = updates(300, 10, tag="first")
    told = clients.confluent_produce(idle.bootstrap, name, first)
    driver = Driver(idle, name)
    token = start_pass(driver)
    assert driver.step(token, 50).outcome == "MAP"
    while driver.step(token, 50).outcome == "MAP":
        pass
    assert driver.step(token, 50).outcome == "COPY"
    during = updates(120, 12, tag="during")
    told += clients.confluent_produce(idle.bootstrap, name, during)
    swapped, calls = run_to_swap(driver, token, 50)
    assert swapped.outcome == "SWAPPED", swapped
    assert calls >= 3  # the copy went on in chunks through what was appended
    r = Redis.from_url(idle.redis_url)
    assert r.xlen(stream(name)) == 10 + 120  # the head (written during the pass) untouched
    got = read_all(idle, name)
    assert {m.key(): (m.offset(), m.value()) for m in got} == latest_per_key(first + during, told)
    swapped, _ = run_to_swap(driver, start_pass(driver), 50)
    assert r.xlen(stream(name)) == 12


@pytest.mark.spec("Compaction", "Abandon", "NoPass")
def test_a_pass_abandoned_by_a_dying_cleaner_is_harmless(idle: KorvetProcess) -> None:
    """Broker 1 begins a pass and stops mid-copy: readers see the whole log meanwhile; broker 2
    is refused until the lease expires, then takes the partition over (the half-built key
    deleted) and swaps; broker 1's later calls are refused and change nothing."""
    name = f"abandoned-{uuid.uuid4().hex[:8]}"
    create(idle, name, CONFIGS)
    # the first records' keys are written once: the copy's first chunk keeps them
    records = [*updates(3, 3, tag="once"), *updates(200, 5)]
    records[:3] = [clients.Rec(0, b"once-%d" % i, r.value, (), r.timestamp)
                   for i, r in enumerate(records[:3])]
    told = clients.confluent_produce(idle.bootstrap, name, records)
    one = Driver(idle, name, "1", lease_ms=1500)
    two = Driver(idle, name, "2", lease_ms=1500)
    token = start_pass(one)
    while one.step(token, 40).outcome == "MAP":
        pass
    assert one.step(token, 40).outcome == "COPY"
    r = Redis.from_url(idle.redis_url)
    new_key = stream(name).removesuffix(":stream") + ":clean:new"
    assert r.exists(new_key)
    assert two.begin() is None  # broker 1's lease still runs
    assert len(read_all(idle, name)) == len(records)  # nothing of the pass is visible before its swap
    time.sleep(1.6)
    taken = two.begin()
    assert taken is not None and taken > token
    assert not r.exists(new_key)  # broker 1's half-built copy is gone
    assert one.step(token, 40).outcome == "LOST"
    swapped, _ = run_to_swap(two, taken, 40)
    assert swapped.outcome == "SWAPPED"
    assert one.step(token, 1000).outcome == "LOST"
    got = read_all(idle, name)
    assert {m.key(): (m.offset(), m.value()) for m in got} == latest_per_key(records, told)


@pytest.mark.spec("Compaction", "Chunk", "MapChunk")
def test_one_call_reads_at_most_a_chunk(idle: KorvetProcess) -> None:
    """A pass over 50,000 records in chunks of 250 (the default): every call of the script, as Redis'
    SLOWLOG times it, is one bounded step (the figures are printed: the longest call, the
    stream's memory before and after)."""
    name = f"bounded-{uuid.uuid4().hex[:8]}"
    create(idle, name, CONFIGS)
    clients.confluent_produce(idle.bootstrap, name, updates(50_000, 500))
    r = Redis.from_url(idle.redis_url)
    before = int(r.memory_usage(stream(name), samples=0) or 0)
    driver = Driver(idle, name)
    token = start_pass(driver)
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 1_000_000)  # the commands a script runs are logged too
    r.slowlog_reset()
    swapped, calls = run_to_swap(driver, token, 250)
    log: Any = r.slowlog_get(1_000_000)
    r.config_set("slowlog-log-slower-than", 10_000)
    sha = hashlib.sha1(_lua("clean.lua").encode()).hexdigest().encode()
    scripts = [e["duration"] for e in log if e["command"].startswith(b"EVALSHA " + sha)]
    after = int(r.memory_usage(stream(name), samples=0) or 0)
    print(f"\n50,000 records, 500 keys, chunks of 250: {calls} calls, the longest "
          f"{max(scripts) / 1000:.1f} ms, median {sorted(scripts)[len(scripts) // 2] / 1000:.1f} ms "
          f"(Redis' SLOWLOG); stream memory {before:,} -> {after:,} bytes")
    assert swapped.outcome == "SWAPPED" and swapped.removed == 49_500
    assert r.xlen(stream(name)) == 500
    # 200 map calls and 200 copy calls of at most 250 entries each, the swap's tail
    assert len(scripts) == calls and 400 <= calls <= 403


@pytest.mark.spec("Compaction", "Fetch")
@pytest.mark.parametrize("scheme", ["dense", "time"])
def test_a_reader_reaches_the_end_past_removed_records(idle: KorvetProcess, scheme: str) -> None:
    """The last records of a compacted partition removed (XDEL, as a cleaner removes a tail of
    tombstones past their horizon): a fetch from them answers an empty batch up to the high
    watermark, as Kafka keeps a cleaned log's last batch, and librdkafka's position reaches
    the end (a Streams restore or a Connect worker waiting for the end would wait for ever)."""
    name = f"tail-{scheme}-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "korvet.offset.scheme": scheme})
    told = clients.confluent_produce(idle.bootstrap, name, updates(5, 5))
    r = Redis.from_url(idle.redis_url)
    ids = [entry_id for entry_id, _ in r.xrange(stream(name))]  # type: ignore[union-attr]
    r.xdel(stream(name), *(entry_id for entry_id in ids[3:] if entry_id is not None))
    # librdkafka tells the application it reached the end (enable.partition.eof) once its
    # fetch position is the high watermark
    consumer = Consumer({"bootstrap.servers": idle.bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(name, 0, told[3][1])])
    reached = False
    try:
        deadline = time.monotonic() + 20
        while not reached and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10, timeout=0.3):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    reached = True
                    assert msg.offset() == told[4][1] + 1
                    continue
                raise AssertionError(f"unexpected: {error or msg.offset()}")
    finally:
        consumer.close()
    assert reached, "the consumer never reached the end"


@pytest.mark.spec("Compaction", "LSO", "InMap", "AbortedData", "LatestPerKeyKept")
@pytest.mark.parametrize("storage", ["records", "batches"])
def test_an_open_transaction_bounds_the_pass_and_aborted_data_goes(idle: KorvetProcess,
                                                                   storage: str) -> None:
    """A key's committed value, then an update of it in a transaction still open when a pass
    runs: the pass stops at the last stable offset, so the committed value stays; the
    transaction aborts, and the next pass removes its data (not a value: the aborted index
    says so) and keeps the committed value and the abort marker. A read_committed reader
    ends with the committed value. Both storage formats (a batches topic's transactional
    batch and marker batch are whole entries)."""
    name = f"txn-{storage}-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "korvet.storage.format": storage})
    plain = [clients.Rec(0, b"k", b"committed", (), int(time.time() * 1000)),
             *updates(4, 2, tag="other")]
    clients.confluent_produce(idle.bootstrap, name, plain)
    txn = transactional_producer(idle.bootstrap, f"cleaner-{name}")
    txn.begin_transaction()
    txn.produce(name, key=b"k", value=b"in the transaction", partition=0)
    txn.flush(30)
    driver = Driver(idle, name)
    swapped, _ = run_to_swap(driver, start_pass(driver), 2)
    assert swapped.outcome == "SWAPPED"
    r = Redis.from_url(idle.redis_url)
    assert b"committed" in values_in(r, name)
    txn.abort_transaction(30)
    clients.confluent_produce(idle.bootstrap, name, updates(2, 2, tag="later"))
    swapped, _ = run_to_swap(driver, start_pass(driver), 2)
    assert swapped.outcome == "SWAPPED"
    held = values_in(r, name)
    assert b"committed" in held and b"in the transaction" not in held
    assert any(f.get(b"control") == b"ABORT" or is_abort_batch(f) for _, f in entries_of(r, name))
    got = dict(read_committed(idle.bootstrap, name))
    assert got == {b"k": b"committed", b"key-0": updates(2, 2, tag="later")[0].value,
                   b"key-1": updates(2, 2, tag="later")[1].value}


@pytest.mark.spec("Compaction", "Horizon", "Mark", "CopyChunk", note="transaction markers")
@pytest.mark.parametrize("storage", ["records", "batches"])
def test_transaction_markers_go_after_their_delete_horizon(idle: KorvetProcess,
                                                           storage: str) -> None:
    """A compacted topic written in transactions (Kafka Streams' changelogs and Connect's
    topics under exactly-once: a marker per transaction and partition) does not keep every
    marker for ever: a marker's first pass sets its horizon pending, the next fixes it at
    that swap's time plus delete.retention.ms (0 here), and the pass after it has passed
    removes it, as Kafka's cleaner does; the aborted transaction, nothing of it left, leaves
    the aborted index. Readers, read_committed or not, still end with each key's committed
    value; the aborted one is never seen."""
    name = f"markers-{storage}-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "korvet.storage.format": storage, "delete.retention.ms": "0"})
    txn = transactional_producer(idle.bootstrap, f"markers-{name}")
    for number in range(3):
        txn.begin_transaction()
        txn.produce(name, key=b"k", value=f"committed-{number}".encode(), partition=0)
        txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(name, key=b"k", value=b"aborted", partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    r = Redis.from_url(idle.redis_url)

    def markers() -> int:
        return sum(1 for _, f in entries_of(r, name)
                   if b"control" in f or (b"batch" in f and DefaultRecordBatch(
                       f[b"batch"]).attributes & CONTROL_FLAG))

    assert markers() == 4
    driver = Driver(idle, name)
    seen = []
    for round_ in range(4):  # each pass needs dirty records: another key's update
        clients.confluent_produce(idle.bootstrap, name, updates(1, 1, tag=f"round-{round_}"))
        time.sleep(0.2)  # the active segment rolls (max.compaction.lag.ms 100)
        swapped, _ = run_to_swap(driver, start_pass(driver), 3)
        assert swapped.outcome == "SWAPPED", swapped
        seen.append(markers())
        if seen[-1] == 0:
            break
    assert seen[0] == 4 and seen[-1] == 0, f"markers left after each pass: {seen}"
    # the aborted transaction, its data and its marker gone, leaves the aborted index too
    assert r.zcard(stream(name).removesuffix(":stream") + ":aborted") == 0
    expected = {b"k": b"committed-2", b"key-0": updates(1, 1, tag=f"round-{len(seen) - 1}")[0].value}
    assert dict(read_committed(idle.bootstrap, name)) == expected
    assert {m.key(): m.value() for m in read_all(idle, name)} == expected


@pytest.mark.spec("Compaction", "Begin", note="max.compaction.lag.ms, both formats")
@pytest.mark.parametrize("storage", ["records", "batches"])
def test_a_record_dirty_past_the_max_lag_starts_a_pass(idle: KorvetProcess, storage: str) -> None:
    """max.compaction.lag.ms: one update among twenty clean keys is far below
    min.cleanable.dirty.ratio (0.5), yet once it has been dirty for longer than the lag a pass
    begins, as Kafka's LogCleanerManager does (the first dirty batch's max timestamp). A
    batches topic's entries carry their timestamp as max-timestamp: read as none, the lag
    never passed and such a topic was cleaned by the ratio alone."""
    name = f"lag-{storage}-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "korvet.storage.format": storage})
    clients.confluent_produce(idle.bootstrap, name, updates(20, 20))
    driver = Driver(idle, name)
    assert run_to_swap(driver, start_pass(driver), 50)[0].outcome == "SWAPPED"
    clients.confluent_produce(idle.bootstrap, name, updates(1, 20, tag="late"))
    time.sleep(0.3)
    deadline = time.monotonic() + 10
    while (token := driver.begin()) is None:
        assert time.monotonic() < deadline, "the overdue record started no pass"
        time.sleep(0.15)
    assert run_to_swap(driver, token, 50)[0].outcome == "SWAPPED"


@pytest.mark.spec("Compaction", "Keep", "CopyChunk", note="records without a key")
@pytest.mark.parametrize("storage", ["records", "batches"])
def test_records_without_a_key_go_once_the_topic_is_compacted(idle: KorvetProcess,
                                                             storage: str) -> None:
    """A `delete` topic holds records without a key; switched to `compact`, its next pass
    drops them, as Apache Kafka 4.3.1's cleaner does (measured: a:1 b:1 a:2 b:2 a:3 and two
    keyless records, then compact: b:2, a:3 and the next record are left), and keeps each
    key's latest at its offset."""
    name = f"keyless-{storage}-{uuid.uuid4().hex[:8]}"
    create(idle, name, {"cleanup.policy": "delete", "korvet.storage.format": storage})
    now = int(time.time() * 1000)
    written = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2"), (b"a", b"3"),
               (None, b"nokey1"), (None, b"nokey2")]
    clients.confluent_produce(idle.bootstrap, name, [
        clients.Rec(0, key, value, (), now) for key, value in written])
    admin = AdminClient({"bootstrap.servers": idle.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry(config, value, incremental_operation=AlterConfigOpType.SET)
        for config, value in (("cleanup.policy", "compact"), ("max.compaction.lag.ms", "100"))])
    admin.incremental_alter_configs([resource])[resource].result(30)
    clients.confluent_produce(idle.bootstrap, name, [clients.Rec(0, b"c", b"1", (), now)])
    time.sleep(0.2)
    driver = Driver(idle, name)
    assert run_to_swap(driver, start_pass(driver), 50)[0].outcome == "SWAPPED"
    left = [(m.offset(), m.key(), m.value()) for m in read_all(idle, name)]
    assert left == [(3, b"b", b"2"), (4, b"a", b"3"), (7, b"c", b"1")], left


def entries_of(r: Redis, topic: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    found: Any = r.xrange(stream(topic))
    return list(found)


def values_in(r: Redis, topic: str) -> list[bytes]:
    """The values of the partition's data records (a batches entry's decoded)."""
    values: list[bytes] = []
    for _, f in entries_of(r, topic):
        if b"batch" not in f:
            values.append(f.get(b"value", b""))
        elif not DefaultRecordBatch(f[b"batch"]).attributes & CONTROL_FLAG:
            values += [rec.value or b"" for rec in DefaultRecordBatch(f[b"batch"])]
    return values


def is_abort_batch(fields: dict[bytes, bytes]) -> bool:
    """A batches entry holding an ABORT marker (a control record whose key's type is 0)."""
    if b"batch" not in fields:
        return False
    batch = DefaultRecordBatch(fields[b"batch"])
    return bool(batch.attributes & CONTROL_FLAG) and all(
        (rec.key or b"")[2:4] == b"\x00\x00" for rec in batch)


def transactional_producer(bootstrap: str, transactional_id: str) -> Any:
    made = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "linger.ms": 5})
    made.init_transactions(30)
    return made


def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record a read_committed consumer reads from the start, to the end
    (partition EOF)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                break
            assert error is None, error
            found.append((msg.key() or b"", msg.value() or b""))
    finally:
        consumer.close()
    return found


@pytest.mark.spec("Compaction", "DeleteRecords", "NothingBelowStart", "KeepFrom")
def test_records_deleted_during_a_pass_stay_deleted(idle: KorvetProcess) -> None:
    """cleanup.policy=compact,delete: DeleteRecords moves the log start while a pass has
    already copied the records below it into its new key; the swap trims them, so nothing
    below the log start comes back, and the start stays where DeleteRecords put it."""
    name = f"deleted-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "cleanup.policy": "compact,delete", "retention.ms": "-1"})
    now = int(time.time() * 1000)
    once = [clients.Rec(0, b"once-%d" % i, b"kept", (), now) for i in range(10)]
    told = clients.confluent_produce(idle.bootstrap, name, [*once, *updates(90, 5)])
    driver = Driver(idle, name)
    token = start_pass(driver)
    while driver.step(token, 20).outcome == "MAP":
        pass
    assert driver.step(token, 20).outcome == "COPY"  # the ten kept ones are in the new key
    cut = told[15][1]
    admin = AdminClient({"bootstrap.servers": idle.bootstrap})
    done = admin.delete_records([TopicPartition(name, 0, cut)])
    for future in done.values():
        future.result(30)
    swapped, _ = run_to_swap(driver, token, 20)
    assert swapped.outcome == "SWAPPED"
    got = read_all(idle, name)
    assert got and min(int(m.offset() or 0) for m in got) >= cut
    # in Redis too: the ten copied before the cut are not back (the five latest updates are)
    assert Redis.from_url(idle.redis_url).xlen(stream(name)) == 5
    consumer = Consumer({"bootstrap.servers": idle.bootstrap, "group.id": "assign-only"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
    finally:
        consumer.close()
    assert low == cut


@pytest.mark.spec("Compaction", "CopyChunk", "DeleteRecords", "KeepFrom",
                  note="Format batches: the call stops before an entry the broker did not read")
def test_a_batches_copy_decided_before_delete_records_stays_correct(idle: KorvetProcess) -> None:
    """A batches topic: the broker decides a copy chunk (4 batches), then DeleteRecords removes
    the first two before the call is made, so the call's own chunk reaches batches the broker
    never judged: the call copies the two it did judge and stops there (no swap), the next
    steps go on, and the end is each key's latest from the log start on."""
    name = f"batches-deleted-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "cleanup.policy": "compact,delete", "retention.ms": "-1",
                        "korvet.storage.format": "batches"})
    records = updates(100, 5)
    told = clients.confluent_produce(idle.bootstrap, name, records, extra={
        "linger.ms": 50, "batch.num.messages": 10})
    r = Redis.from_url(idle.redis_url)
    assert r.xlen(stream(name)) == 10
    driver = Driver(idle, name)
    token = start_pass(driver)
    while driver.step(token, 4).outcome == "MAP":
        pass
    cut = told[20][1]  # the third batch's first offset

    async def decide_then_call() -> StepResult:
        client = aioredis.Redis.from_url(idle.redis_url)
        try:
            store = RedisStore(client, "korvet")
            topic = await store.get_topic(name, {})
            assert isinstance(topic, TopicInfo)
            cleaner = CleanerStore(store, driver.me, driver.lease_ms)
            reads = BatchReads(cleaner)
            view = await reads.view(topic, 0, token)
            assert view is not None and view.phase == "copy"
            got = await _copy_chunk(reads, topic, 0, view.cursor, 4)
            plan = await _copy_plan(reads, topic, 0, view, int(time.time() * 1000), got)
            admin = AdminClient({"bootstrap.servers": idle.bootstrap})
            for future in admin.delete_records([TopicPartition(name, 0, cut)]).values():
                future.result(30)
            return await cleaner.step(topic, 0, token, int(time.time() * 1000), 4, plan)
        finally:
            await client.aclose()

    assert asyncio.run(decide_then_call()).outcome == "COPY"
    swapped, _ = run_to_swap(driver, token, 4)
    assert swapped.outcome == "SWAPPED"
    got = read_all(idle, name)
    assert [(m.key(), m.offset(), m.value()) for m in got] == sorted(
        ((k, o, v) for k, (o, v) in latest_per_key(records, told).items()), key=lambda t: t[1])
    assert min(m.offset() or 0 for m in got) >= cut


@pytest.mark.spec("Compaction", "Chunk", note="Format batches: a copy call's bytes bounded too")
def test_a_batches_copy_call_takes_only_the_batches_that_fit(
        idle: KorvetProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of batch entries may be a chunk of large batches: a copy call takes only as many
    as fit in ``CALL_BYTES`` (at least one). With the bound below one batch, a pass over 10
    batches makes a copy call per batch, and the end is the same."""
    monkeypatch.setattr(clean_batches, "CALL_BYTES", 1)
    name = f"batches-bytes-{uuid.uuid4().hex[:8]}"
    create(idle, name, {**CONFIGS, "korvet.storage.format": "batches"})
    records = updates(100, 5)
    told = clients.confluent_produce(idle.bootstrap, name, records, extra={
        "linger.ms": 50, "batch.num.messages": 10})
    assert Redis.from_url(idle.redis_url).xlen(stream(name)) == 10
    driver = Driver(idle, name)
    token = start_pass(driver)
    assert driver.step(token, 250).outcome == "COPY"  # the whole map in one call
    swapped, calls = run_to_swap(driver, token, 250)
    assert swapped.outcome == "SWAPPED" and calls >= 10, calls
    got = read_all(idle, name)
    assert [(m.key(), m.offset(), m.value()) for m in got] == sorted(
        ((k, o, v) for k, (o, v) in latest_per_key(records, told).items()), key=lambda t: t[1])


@pytest.mark.spec("Compaction", "Swap")
def test_a_share_groups_records_in_flight_survive_a_pass(idle: KorvetProcess) -> None:
    """A share consumer holds records of a compacted topic while a pass swaps the stream: the
    records the pass keeps stay acquired by the same member with the same delivery count (its
    ACCEPT of them is taken, nothing is offered to another member), and those it removed are
    gone from the group's pending entries."""
    from korvet.bench.clients import alter_group_configs
    from tests.integration.test_share_partitions import acquired, share_ack, share_fetch, topic_id
    from tests.support.wire import WireClient

    name, group = f"shared-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create(idle, name, CONFIGS)
    records = updates(30, 10)
    told = clients.confluent_produce(idle.bootstrap, name, records)
    latest = sorted(offset for offset, _ in latest_per_key(records, told).values())
    alter_group_configs(idle.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    with WireClient(idle.bootstrap) as wire:
        tid = topic_id(wire, name)
        runs = acquired(share_fetch(wire, "m-1", 0, tid, group=group, max_records=100))
        assert runs == [(0, 29, 1)], runs
        driver = Driver(idle, name)
        swapped, _ = run_to_swap(driver, start_pass(driver), 50)
        assert swapped.outcome == "SWAPPED", swapped
        r = Redis.from_url(idle.redis_url)
        pending: list[dict[str, Any]] = r.xpending_range(stream(name), f"share:{group}", "-",
                                                         "+", 100)
        assert [(int(p["message_id"].split(b"-")[0]), p["consumer"], p["times_delivered"])
                for p in pending] == [(o, b"m:m-1", 1) for o in latest]
        reply = share_ack(wire, "m-1", 1, tid, [(o, o, 1) for o in latest], group=group)
        assert int(reply.responses[0].partitions[0].error_code) == 0, reply
        assert r.xpending(stream(name), f"share:{group}")["pending"] == 0
        assert acquired(share_fetch(wire, "m-2", 0, tid, group=group)) == []
