"""The produce path packs records straight into RESP (``entries.pack_records``). It must
send Redis exactly the command that packing the readable argument layout
(``entries.append_arguments``) with hiredis sends, for every kind of record, or stored
records would differ from what was produced. (That append.lua stores what
``entries.entry_fields`` says, whichever layout the arguments came in, is checked on a real
Redis in tests/spec/OffsetCodec/test_append_script.py.)"""

from __future__ import annotations

import hiredis
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from korvet.core.topics import TopicConfig, TopicInfo, TrimPolicy
from korvet.storage import entries
from korvet.storage.redis_store import ProducerBatch, RedisStore

_header_names = st.text(max_size=12)
_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_records = st.lists(
    st.tuples(st.integers(-1, 2**63 - 1), _bytes_or_none, _bytes_or_none,
              st.lists(st.tuples(_header_names, _bytes_or_none), max_size=4)),
    max_size=20)


# Batches of one shape (most of the produced ones: each of the three layouts) and of any.
_stamps = st.integers(-1, 2**63 - 1)
_plain: st.SearchStrategy[entries.Record] = st.tuples(
    _stamps, st.none(), st.binary(max_size=300), st.just([]))
_keyed: st.SearchStrategy[entries.Record] = st.tuples(
    _stamps, st.binary(max_size=30), st.binary(max_size=300), st.just([]))
_batches = st.one_of(_records, st.lists(_plain, max_size=20), st.lists(_keyed, max_size=20))


@given(_batches, st.one_of(st.none(), st.integers(0, 2**45)),
       st.one_of(st.none(), st.binary(min_size=1, max_size=24)))
def test_pack_records_sends_what_hiredis_packs_of_the_append_arguments(
        records: list[entries.Record], timestamp: int | None, producer: bytes | None) -> None:
    """Every layout, and a transactional producer's records (tagged with it) too."""
    fields, size = entries.append_arguments(records, timestamp, producer)
    packed = entries.pack_records(records, timestamp, producer)
    head = ("EVALSHA", "0" * 40, 1, "k")
    expected = hiredis.pack_command((*head, *fields))  # type: ignore[arg-type]
    assert packed.args == len(fields)
    assert packed.size == size
    sent = hiredis.pack_command(head)  # type: ignore[arg-type]
    assert b"*%d\r\n" % (len(head) + packed.args) + sent[sent.index(b"\r\n") + 2:] \
        + packed.body == expected


def test_a_null_value_and_a_null_header_stay_distinguishable_from_empty_ones() -> None:
    null_value = entries.pack_records([(5, None, None, [("h", None)])])
    empty_value = entries.pack_records([(5, None, b"", [("h", b"")])])
    assert null_value.body != empty_value.body
    assert b"header-null.h" in null_value.body and b"header.h" in empty_value.body
    assert null_value.args == 6 and empty_value.args == 8  # the layout, k, then the pairs


def test_each_layout_is_chosen_for_the_batches_it_fits() -> None:
    """The layouts without field names serve the common batches; any other goes as fields."""
    assert entries.pack_records([(5, None, b"a", []), (6, None, b"", [])]).body == (
        b"$6\r\nvalues\r\n$1\r\n5\r\n$1\r\na\r\n$1\r\n6\r\n$0\r\n\r\n")
    assert entries.pack_records([(5, b"k", b"a", [])]).body.startswith(b"$5\r\nkeyed\r\n")
    mixed: list[list[entries.Record]] = [
        [(5, None, b"a", []), (5, b"k", b"a", [])], [(5, None, None, [])],
        [(5, b"k", None, [])], [(5, None, b"a", [("h", b"x")])]]
    for batch in mixed:
        assert entries.pack_records(batch).body.startswith(b"$6\r\nfields\r\n")


_INT64 = st.integers(-(2**63), 2**63 - 1)


@given(partition=st.integers(0, 1000), bits=st.integers(1, 20),
       now=st.integers(0, 2**45), trim=st.tuples(_INT64, _INT64, st.booleans()),
       producer=st.tuples(_INT64, st.integers(-1, 2**15), st.integers(-1, 2**31 - 1),
                          st.integers(-1, 2**31 - 1)),
       count=st.integers(1, 10_000), records=_batches)
def test_the_append_command_is_what_hiredis_packs_of_its_arguments(
        partition: int, bits: int, now: int, trim: tuple[int, int, bool],
        producer: tuple[int, int, int, int], count: int, records: list[entries.Record]) -> None:
    """``RedisStore.append_command`` packs a partition's fixed arguments once and the rest per
    append; Redis must get the very command hiredis packs of append.lua's argument list."""
    store = RedisStore(aioredis.Redis(), keyspace="ks")  # packs only: never connects
    topic = TopicInfo("orders", "0b7c9b2e-0d5f-4e33-9f0a-3d4b3b1c2a10", partition + 1,
                      TopicConfig({"korvet.sequence.bits": str(bits)}))
    packed = entries.pack_records(records)
    for _ in range(2):  # the second from the cached fixed parts
        stream, command = store.append_command(
            topic, partition, packed, count, now, TrimPolicy(*trim), ProducerBatch(*producer))
        fields, _ = entries.append_arguments(records)
        meta = store.meta_key(topic.name, partition)
        expected = hiredis.pack_command((  # type: ignore[arg-type]
            "EVALSHA", store._append.sha, 4, stream, meta, meta,
            store.waiting_key(stream), now, bits, partition, topic.topic_id, trim[0], trim[1],
            1 if trim[2] else 0, *producer, count, store.append_channel, *fields))
        assert stream == store.stream_key(topic.name, partition)
        assert command == expected
