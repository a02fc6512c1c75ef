"""The OffsetCodec spec's invariants, checked against the real append script in Redis.

Hypothesis drives korvet/storage/lua/append.lua directly (the clock is an argument,
so it may stand still or step back) with batches from several producers and
sequence widths down to 1 bit, and requires:

- Mirror: every batch gets exactly the offsets korvet.core.offsets.OffsetCodec.reserve
  computes from the previous last offset and the clock (the script mirrors the pure rule);
- BatchConsecutive, StrictlyIncreasing, UniqueEntryIds, RoundTrip and FitsInt64 over
  the whole stream, read back with XRANGE.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from korvet.core.offsets import MAX_OFFSET, EntryId, OffsetCodec
from korvet.core.topics import TrimPolicy
from korvet.storage import entries
from korvet.storage.redis_store import AppendStatus, OldLayoutError, ProducerBatch, RedisStore
from tests.support.examples import examples
from tests.support.script_topics import one_partition_topic

NO_TRIM = TrimPolicy(-1, -1, False)
_counter = itertools.count()


async def _run(url: str, bits: int, batches: list[tuple[int, int]]) -> None:
    client = aioredis.from_url(url)
    store, topic = await one_partition_topic(client, f"prop{next(_counter)}", bits)
    name = topic.name
    codec = OffsetCodec(bits)
    last = 0  # a new stream's last-generated id is 0-0
    appended: list[range] = []
    for now, count in batches:
        packed = entries.pack_records([(now, None, b"%d" % i, []) for i in range(count)])
        result = await store.append(topic, 0, packed, count, now, NO_TRIM, ProducerBatch())
        assert result.status is AppendStatus.OK
        expected = codec.reserve(last, now, count)
        # Mirror: the script reserves exactly what the pure rule reserves.
        assert range(result.base_offset, result.last_offset + 1) == expected, (
            f"after {last} at clock {now}: script gave {result.base_offset}..{result.last_offset}, "
            f"the codec {expected.start}..{expected.stop - 1}")
        appended.append(expected)
        last = expected.stop - 1
    raw: list[list[bytes]] = await client.xrange(  # type: ignore[assignment]
        store.stream_key(name, 0))  # raw [id, fields] replies: RedisStore sets that callback
    ids = [EntryId.parse(entry[0]) for entry in raw]
    offsets = [codec.encode_id(i) for i in ids]
    # UniqueEntryIds / StrictlyIncreasing
    assert offsets == sorted(set(offsets))
    # BatchConsecutive: each batch is a run of consecutive offsets, in the stream in order.
    assert offsets == [o for batch in appended for o in batch]
    # RoundTrip and FitsInt64 on everything stored.
    assert all(codec.decode(o) == i and 0 <= o <= MAX_OFFSET for o, i in zip(offsets, ids, strict=True))
    await client.aclose()


clocks = st.integers(min_value=1, max_value=40)
batch_sizes = st.integers(min_value=1, max_value=9)


@pytest.mark.spec("OffsetCodec", "AppendBatch", "BatchConsecutive", "StrictlyIncreasing",
                  "UniqueEntryIds", "RoundTrip", "FitsInt64")
@settings(max_examples=examples(1.5), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bits=st.integers(min_value=1, max_value=4),
       batches=st.lists(st.tuples(clocks, batch_sizes), min_size=1, max_size=12))
def test_script_follows_the_offset_codec_on_small_widths(redis_url: str, bits: int,
                                                         batches: list[tuple[int, int]]) -> None:
    """Tiny clocks and widths make carries into the next millisecond and clocks that stand
    still or step back frequent."""
    asyncio.run(_run(redis_url, bits, batches))


@pytest.mark.spec("OffsetCodec", "AppendBatch", "BatchConsecutive", "StrictlyIncreasing",
                  "UniqueEntryIds", "RoundTrip", "FitsInt64")
@settings(max_examples=examples(0.4), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bits=st.integers(min_value=1, max_value=22),
       start=st.integers(min_value=1_600_000_000_000, max_value=2_100_000_000_000),
       steps=st.lists(st.tuples(st.integers(min_value=-5_000, max_value=5_000),
                                st.integers(min_value=1, max_value=600)), min_size=1, max_size=6))
def test_script_follows_the_offset_codec_at_real_clock_values(
        redis_url: str, bits: int, start: int, steps: list[tuple[int, int]]) -> None:
    """Real millisecond clocks: offsets beyond 2^53 (Lua numbers are doubles) stay exact."""
    batches, now = [], start
    for delta, count in steps:
        now = max(1, now + delta)
        batches.append((now, count))
    asyncio.run(_run(redis_url, bits, batches))


_headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
                   max_size=3)
_stamps = st.integers(0, 2**45)
_any_record: st.SearchStrategy[entries.Record] = st.tuples(
    _stamps, st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=40)), _headers)
_value_record: st.SearchStrategy[entries.Record] = st.tuples(
    _stamps, st.none(), st.binary(max_size=40), st.just([]))
_keyed_record: st.SearchStrategy[entries.Record] = st.tuples(
    _stamps, st.binary(max_size=12), st.binary(max_size=40), st.just([]))


@settings(max_examples=examples(0.6), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bits=st.integers(min_value=1, max_value=3),
       batches=st.lists(st.one_of(*(st.lists(r, min_size=1, max_size=9)
                                    for r in (_value_record, _keyed_record, _any_record))),
                        min_size=1, max_size=4),
       append_time=st.one_of(st.none(), st.integers(0, 2**45)))
def test_every_argument_layout_stores_the_entry_fields(
        redis_url: str, bits: int, batches: list[list[entries.Record]],
        append_time: int | None) -> None:
    """Whichever layout a batch's arguments travel in (values, keyed, fields), the stream holds
    one entry per record at its offset with exactly ``entries.entry_fields``: what a plain
    Redis client reads of the ``records`` format does not depend on it. Narrow widths make the
    per-record loop carry into the next millisecond."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store, topic = await one_partition_topic(client, f"prop{next(_counter)}", bits)
        codec = OffsetCodec(bits)
        expected: list[tuple[int, list[bytes]]] = []
        for now, batch in enumerate(batches, start=1):
            packed = entries.pack_records(batch, append_time)
            result = await store.append(topic, 0, packed, len(batch), now, NO_TRIM,
                                        ProducerBatch())
            assert result.status is AppendStatus.OK
            assert result.last_offset - result.base_offset == len(batch) - 1
            expected += [(result.base_offset + i, entries.entry_fields(record, append_time))
                         for i, record in enumerate(batch)]
        raw: list[list[Any]] = await client.xrange(  # type: ignore[assignment]
            store.stream_key("t", 0))
        stored = [(codec.encode_id(EntryId.parse(entry_id)), list(fields))
                  for entry_id, fields in raw]
        assert stored == expected
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.spec("OffsetCodec", "AppendBatch", "UniqueEntryIds")
def test_concurrent_appenders_never_share_an_offset(redis_url: str) -> None:
    """Several clients append to one partition at once (as several brokers would)."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url, max_connections=16)
        store, topic = await one_partition_topic(client, f"prop{next(_counter)}", 2)

        async def appender(writer: int) -> list[range]:
            got = []
            for round_ in range(30):
                packed = entries.pack_records([(1, None, b"%d-%d-%d" % (writer, round_, i), [])
                                               for i in range(5)])
                result = await store.append(topic, 0, packed, 5, 1_000 + round_ % 3, NO_TRIM,
                                            ProducerBatch())
                got.append(range(result.base_offset, result.last_offset + 1))
            return got

        results = await asyncio.gather(*(appender(w) for w in range(8)))
        every = [o for batches in results for batch in batches for o in batch]
        assert len(every) == len(set(every)) == 8 * 30 * 5
        assert all(len(batch) == 5 for batches in results for batch in batches)
        assert await client.xlen(store.stream_key("t", 0)) == len(every)
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.spec("OffsetCodec", "RejectBatch", "FitsInt64")
def test_script_refuses_a_batch_past_the_last_offset_and_clamps_a_late_clock(
        redis_url: str) -> None:
    """RejectBatch: at 22 bits the last millisecond is 2^41-1 (September 2039)."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store, topic = await one_partition_topic(client, f"prop{next(_counter)}", 22)
        codec = OffsetCodec(22)
        late = codec.max_ms + 5_000  # a clock past the last encodable millisecond

        def records(count: int) -> entries.PackedRecords:
            return entries.pack_records([(1, None, b"v", [])] * count)

        first = await store.append(topic, 0, records(3), 3, late, NO_TRIM, ProducerBatch())
        assert first.status is AppendStatus.OK
        assert first.base_offset == codec.reserve(0, late, 3).start == codec.encode(codec.max_ms, 0)
        # Leave room for exactly two more offsets before 2^63 - 1.
        await client.hset(store.meta_key("t", 0), "last", f"{codec.max_ms}-{codec.seq_limit - 3}")
        refused = await store.append(topic, 0, records(3), 3, late, NO_TRIM, ProducerBatch())
        assert refused.status is AppendStatus.FULL
        assert await client.xlen(store.stream_key("t", 0)) == 3, "a refused batch wrote records"
        last = await store.append(topic, 0, records(2), 2, late, NO_TRIM, ProducerBatch())
        assert (last.status, last.last_offset) == (AppendStatus.OK, MAX_OFFSET)
        await client.aclose()

    asyncio.run(scenario())


def test_default_retention_reads_nothing_while_nothing_expires(redis_url: str) -> None:
    """With retention.ms far in the past of every entry, an append neither trims nor looks
    for entries to trim: no XTRIM, no XREVRANGE (which walks a whole stream in Redis 7.0
    when it finds nothing), however long the stream."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store = RedisStore(client, keyspace=f"prop{next(_counter)}")
        await store.create_topic("t", 1, {}, 0)
        topic = await store.get_topic("t", {})
        assert topic is not None
        now = 1_800_000_000_000
        policy = TrimPolicy(now - 604_800_000, -1, False)  # the default 7 days
        await client.config_resetstat()
        for round_ in range(20):
            packed = entries.pack_records([(now, None, b"v", [])] * 500)
            await store.append(topic, 0, packed, 500, now + round_, policy, ProducerBatch())
        stats: dict[str, Any] = await client.info("commandstats")
        assert "cmdstat_xrevrange" not in stats and "cmdstat_xtrim" not in stats, stats.keys()
        assert await client.xlen(store.stream_key("t", 0)) == 10_000
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.spec("OffsetCodec", "RejectBatch")
@pytest.mark.parametrize("bits", [1, 5, 9, 10, 22])
def test_a_full_partition_refuses_the_next_batch_at_every_width(redis_url: str,
                                                                bits: int) -> None:
    """The last offset, 2^63 - 1, is the id (max_ms, 2^bits - 1); the next batch is FULL.
    For bits < 10, 2^(63 - bits) - 1 is not a double: the script once computed max_ms one too
    high and handed out the offset 2^63 (spec/PartitionLog.tla, OffsetsFit)."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store, topic = await one_partition_topic(client, f"prop{next(_counter)}", bits)
        codec = OffsetCodec(bits)
        await client.hset(store.meta_key("t", 0), mapping={
            "last": f"{codec.max_ms}-{codec.seq_limit - 1}", "start": "1-0"})
        packed = entries.pack_records([(1, None, b"v", [])])
        result = await store.append(topic, 0, packed, 1, 1_800_000_000_000, NO_TRIM,
                                    ProducerBatch())
        assert result.status is AppendStatus.FULL
        assert await client.xlen(store.stream_key("t", 0)) == 0, "a refused batch wrote records"
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.spec("OffsetCodec", "XAddAccepted")
def test_an_append_after_a_foreign_xadd_continues_above_it(redis_url: str) -> None:
    """Something else writes to the partition with XADD * after the broker's last append (its
    id is above the meta hash's `last`): the next append continues above it instead of
    failing with 'ID equal or smaller than the target stream top item'."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store, topic = await one_partition_topic(client, f"prop{next(_counter)}", 2)
        codec = OffsetCodec(2)
        packed = entries.pack_records([(1, None, b"v", [])])
        first = await store.append(topic, 0, packed, 1, 5_000, NO_TRIM, ProducerBatch())
        assert first.status is AppendStatus.OK
        stream = store.stream_key("t", 0)
        for _ in range(5):  # 5000-1 .. 5000-5: the last two have no offset at 2 bits
            await client.xadd(stream, {"x": "1"}, id="5000-*")
        after = await store.append(topic, 0, packed, 1, 4_000, NO_TRIM, ProducerBatch())
        assert after.status is AppendStatus.OK
        assert after.base_offset == codec.encode(5_001, 0)
        read = (await store.read([(topic, 0, first.base_offset, 100)]))[0]
        assert read.high_watermark == after.base_offset + 1
        assert [o for o, _ in read.entries(2)] == [first.base_offset, *range(
            codec.encode(5_000, 1), codec.encode(5_000, 3) + 1), after.base_offset]
        # A foreign entry above the high watermark is held back until an append covers it.
        await client.xadd(stream, {"x": "1"}, id="5001-*")
        held = (await store.read([(topic, 0, after.base_offset, 100)]))[0]
        assert [o for o, _ in held.entries(2)] == [after.base_offset]
        assert held.high_watermark == after.base_offset + 1
        await client.aclose()

    asyncio.run(scenario())


def test_an_append_for_a_deleted_or_recreated_topic_writes_nothing(redis_url: str) -> None:
    """The scripts check the partition's stamp (its own hash slot), not the topic hash: an
    append that still names a deleted topic, or the earlier topic of a recreated name,
    answers NO_TOPIC and leaves no key behind; the recreated topic starts empty."""

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store = RedisStore(client, keyspace=f"prop{next(_counter)}")
        await store.create_topic("t", 2, {}, 0)
        old = await store.get_topic("t", {})
        assert old is not None
        packed = entries.pack_records([(1_800_000_000_000, None, b"v", [])])
        now = 1_800_000_000_000
        first = await store.append(old, 1, packed, 1, now, NO_TRIM, ProducerBatch())
        assert first.status is AppendStatus.OK
        assert await store.delete_topic("t")
        late = await store.append(old, 1, packed, 1, now, NO_TRIM, ProducerBatch())
        assert late.status is AppendStatus.NO_TOPIC
        assert not await client.exists(store.stream_key("t", 1), store.meta_key("t", 1))
        await store.create_topic("t", 2, {}, 0)
        new = await store.get_topic("t", {})
        assert new is not None and new.topic_id != old.topic_id
        stale = await store.append(old, 1, packed, 1, now, NO_TRIM, ProducerBatch())
        assert stale.status is AppendStatus.NO_TOPIC
        assert (await store.read([(new, 1, 0, 10)]))[0].raw == []
        assert (await store.append(new, 1, packed, 1, now, NO_TRIM, ProducerBatch())).status \
            is AppendStatus.OK
        await client.aclose()

    asyncio.run(scenario())


def test_data_in_the_layout_before_hash_tags_is_refused_by_name(redis_url: str) -> None:
    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        store = RedisStore(client, keyspace=f"prop{next(_counter)}")
        await store.check_layout()  # an empty keyspace is fine
        await client.sadd(f"{store.ks}:topics", "demo")
        with pytest.raises(OldLayoutError, match=rf"{store.ks}:topics exist"):
            await store.check_layout()
        await client.aclose()

    asyncio.run(scenario())
