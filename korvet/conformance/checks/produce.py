"""Produce (key 0) and InitProducerId (22): acks, batching, compression, idempotence, errors."""

from __future__ import annotations

import time

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.ops import EARLIEST, LATEST, Ops, produce_result
from korvet.conformance.kafka.records import (
    CODECS,
    LOG_APPEND_TIME,
    Rec,
    build_batch,
    corrupt_crc,
    now_ms,
)
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "Produce (0)"
IPI = "InitProducerId (22)"
JSON = "ProduceRequest.json / ProduceResponse.json"
KIP98 = "KIP-98 (idempotent producer)"



def _values(prefix: str, n: int) -> list[Rec]:
    return [Rec(f"{prefix}-{i}".encode(), key=f"k{i}".encode()) for i in range(n)]


@check("produce.acks_all.offsets_consecutive", api=API,
       asserts="A batch of 5 records produced with acks=-1 answers NONE with a base offset; the "
               "records are then fetched at base..base+4, in order, with their keys and values.",
       source=f"Kafka protocol guide (RecordBatch, offset deltas); {JSON}")
def acks_all_consecutive(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    records = _values("v", 5)
    base = ops.produce_ok(topic, 0, records, acks=-1)
    fetched = ops.read_all(topic, 0, base)
    expect_eq([r.offset for r in fetched], list(range(base, base + 5)), "fetched offsets")
    expect_eq([r.value for r in fetched], [r.value for r in records], "fetched values")
    expect_eq([r.key for r in fetched], [r.key for r in records], "fetched keys")


@check("produce.acks_1.appends", api=API,
       asserts="Produce with acks=1 answers NONE and the record is readable at the returned offset.",
       source=JSON)
def acks_one(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    base = ops.produce_ok(topic, 0, [Rec(b"one")], acks=1)
    fetched = ops.fetch(topic, 0, base)
    expect_eq(fetched.values[:1], [b"one"], "value at the returned offset")


@check("produce.acks_0.no_response", api=API,
       asserts="Produce with acks=0 gets no response at all (the next request on the connection gets "
               "the next response) and the record is still appended.",
       source=f"Kafka protocol guide: 'if acks is 0 the server will not send any response'; {JSON}")
def acks_zero(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    conn = ctx.client()
    before = ops.offset_of(topic, 0, LATEST)
    ops.produce(topic, 0, [Rec(b"fire-and-forget")], acks=0, conn=conn)
    # must be the ApiVersions answer, not a Produce one
    response = conn.call(build_request(ApiKey.API_VERSIONS, 0))
    expect_error(response.error_code, ErrorCode.NONE, "ApiVersions after an acks=0 Produce")
    deadline = time.monotonic() + 5
    while ops.offset_of(topic, 0, LATEST) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    records = ops.read_all(topic, 0, before)
    expect_eq([r.value for r in records], [b"fire-and-forget"], "records appended by acks=0")


@check("produce.invalid_acks_refused", api=API,
       asserts="Produce with acks=2 answers INVALID_REQUIRED_ACKS (21) and appends nothing.",
       source="Kafka ReplicaManager.isValidRequiredAcks (only -1, 0, 1)")
def invalid_acks(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    before = ops.offset_of(topic, 0, LATEST)
    result = ops.produce(topic, 0, [Rec(b"x")], acks=2)
    expect_error(result.error, ErrorCode.INVALID_REQUIRED_ACKS, "Produce with acks=2")
    expect_eq(ops.offset_of(topic, 0, LATEST), before, "latest offset afterwards")


@check("produce.compacted_topic.keyless_refused", api=API,
       asserts="A batch with a record without a key, produced to a topic with cleanup.policy=compact, "
               "answers INVALID_RECORD (87) naming that record (record_errors: its index) and "
               "appends nothing, not even the batch's keyed records; on a delete topic the same "
               "batch is stored.",
       source="Kafka LogValidator (a compacted topic cannot accept a message without a key); "
              "ProduceResponse.json RecordErrors")
def compacted_keyless(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs={"cleanup.policy": "compact"})
    before = ops.offset_of(topic, 0, LATEST)
    result = ops.produce(topic, 0, [Rec(b"keyed", key=b"k"), Rec(b"keyless")])
    expect_error(result.error, ErrorCode.INVALID_RECORD, "Produce of a keyless record")
    expect_eq([int(e.batch_index) for e in result.record_errors], [1], "record_errors' indexes")
    expect_eq(ops.offset_of(topic, 0, LATEST), before, "latest offset afterwards")
    plain = ops.create_topic()
    ops.produce_ok(plain, 0, [Rec(b"keyed", key=b"k"), Rec(b"keyless")])


@check("produce.offsets_increase_across_batches", api=API,
       asserts="Each produced batch gets a base offset greater than the last offset of the batch "
               "before it on the same partition.",
       source="Kafka log semantics: offsets are assigned in append order")
def increase_across_batches(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    previous_last = -1
    for size in (3, 1, 4, 2):
        base = ops.produce_ok(topic, 0, _values("b", size))
        expect(base > previous_last,
               f"batch of {size} got base offset {base} <= previous last {previous_last}")
        previous_last = base + size - 1


@check("produce.offsets_dense_from_zero", api=API, kafka_exact=True,
       asserts="On a new topic the first batch gets base offset 0 and each next batch starts right "
               "after the previous one (3 then 2 records: offsets 0 and 3).",
       source="Kafka Log.append: offsets assigned from the log end offset, starting at 0")
def dense_from_zero(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    first = ops.produce_ok(topic, 0, _values("a", 3))
    second = ops.produce_ok(topic, 0, _values("b", 2))
    expect_eq((first, second), (0, 3), "base offsets of the first two batches")


@check("produce.unknown_topic", api=API,
       asserts="Produce (v<=12, by name) to a missing topic answers UNKNOWN_TOPIC_OR_PARTITION (3) and "
               "does not create it.",
       source="Kafka ReplicaManager.appendToLocalLog (produce never auto-creates)")
def unknown_topic(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    name = ctx.name("missing")
    version = ops.v(ApiKey.PRODUCE, hi=12)
    result = ops.produce(name, 0, [Rec(b"x")], version=version)
    expect_error(result.error, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Produce v{version} to a missing topic")
    expect_error(ops.topic_metadata(name).error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "Metadata afterwards")


@check("produce.unknown_partition", api=API,
       asserts="Produce to partition 5 of a 1-partition topic (and to partition -1) answers "
               "UNKNOWN_TOPIC_OR_PARTITION (3).",
       source="Kafka ReplicaManager.appendToLocalLog")
def unknown_partition(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    for partition in (5, -1):
        result = ops.produce(topic, partition, [Rec(b"x")])
        expect_error(result.error, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Produce to partition {partition}")


@check("produce.topic_id.v13", api=API,
       asserts="Produce v13 addresses the topic by id: a known id appends (NONE), an unknown id answers "
               "UNKNOWN_TOPIC_ID (100).",
       source="KIP-516 / KIP-1102 (topic ids in Produce v13)")
def topic_id_v13(ctx: CheckContext) -> None:
    import uuid

    ops = Ops(ctx)
    version = ops.v(ApiKey.PRODUCE, lo=13)
    topic = ops.create_topic()
    base = ops.produce_ok(topic, 0, [Rec(b"by-id")], version=version)
    expect_eq(ops.fetch(topic, 0, base).values[:1], [b"by-id"], "record produced by topic id")
    response = ops.produce_raw(topic, {0: build_batch([Rec(b"x")])}, version=version, topic_id=uuid.uuid4())
    expect_error(produce_result(response).error, ErrorCode.UNKNOWN_TOPIC_ID,
                 "Produce v13 to an unknown topic id")


@check("produce.every_version_appends", api=API,
       asserts="Every Produce version the broker advertises (v3+: record batches) appends a batch and "
               "answers NONE with the base offset where it is then fetched.",
       source=f"{JSON} (all versions)")
def every_version(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    versions = ctx.apis.versions(ApiKey.PRODUCE, lo=3)
    ctx.note("versions", versions)
    for version in versions:
        value = f"v{version}".encode()
        base = ops.produce_ok(topic, 0, [Rec(value)], version=version)
        expect_eq(ops.fetch(topic, 0, base).values[:1], [value], f"record produced with v{version}")


@check("produce.corrupt_crc_refused", api=API,
       asserts="A batch whose CRC does not match answers CORRUPT_MESSAGE (2) and nothing is appended.",
       source="Kafka LogValidator (DefaultRecordBatch.ensureValid -> CorruptRecordException)")
def corrupt(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    before = ops.offset_of(topic, 0, LATEST)
    result = ops.produce(topic, 0, corrupt_crc(build_batch(_values("c", 3))))
    expect_error(result.error, ErrorCode.CORRUPT_MESSAGE, "Produce of a batch with a bad CRC")
    expect_eq(ops.offset_of(topic, 0, LATEST), before, "latest offset afterwards")


@check("produce.two_batches_in_one_partition_refused", api=API,
       asserts="Produce v3+ with two record batches for one partition answers INVALID_RECORD (87): "
               "exactly one batch per partition is allowed.",
       source="Kafka ProduceRequest.validateRecords ('Produce requests with version 3 or later must "
              "contain exactly one record batch per partition')")
def two_batches(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    before = ops.offset_of(topic, 0, LATEST)
    data = build_batch(_values("a", 2)) + build_batch(_values("b", 2))
    result = ops.produce(topic, 0, data)
    expect_error(result.error, ErrorCode.INVALID_RECORD, "Produce with two batches for one partition")
    expect_eq(ops.offset_of(topic, 0, LATEST), before, "latest offset afterwards")


@check("produce.multi_topic_request", api=API,
       asserts="One Produce request for two partitions of two topics answers NONE for each partition "
               "separately, and each record lands on its own partition.",
       source=JSON)
def multi_topic(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    a, b = ops.create_topic(partitions=2), ops.create_topic()
    version = ops.v(ApiKey.PRODUCE, hi=12)
    topic_data = [
        {"name": a.name, "partition_data": [{"index": 0, "records": build_batch([Rec(b"a0")])},
                                            {"index": 1, "records": build_batch([Rec(b"a1")])}]},
        {"name": b.name, "partition_data": [{"index": 0, "records": build_batch([Rec(b"b0")])}]},
    ]
    response = ops.conn.call(build_request(ApiKey.PRODUCE, version, acks=-1, timeout=30_000,
                                           topic_data=topic_data))
    seen = {}
    for t in response.responses:
        for p in t.partition_responses:
            seen[(t.name, int(p.index))] = (int(p.error_code), int(p.base_offset))
    expect_eq(sorted(seen), sorted([(a.name, 0), (a.name, 1), (b.name, 0)]), "partitions answered")
    for (name, partition), (code, base) in seen.items():
        expect_error(code, ErrorCode.NONE, f"Produce to {name}-{partition}")
        expected = f"{'a' if name == a.name else 'b'}{partition}".encode()
        expect_eq(ops.fetch(name, partition, base).values[:1], [expected], f"record on {name}-{partition}")


def _compression_roundtrip(ctx: CheckContext, codec: str) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    records = [Rec((f"{codec}-{i}-" + "x" * 200).encode(), key=f"k{i}".encode(),
                   headers=(("h", f"{i}".encode()),)) for i in range(20)]
    base = ops.produce_ok(topic, 0, records, compression=CODECS[codec])
    fetched = ops.read_all(topic, 0, base)
    expect_eq(len(fetched), 20, f"records fetched after a {codec} batch")
    expect_eq([r.value for r in fetched], [r.value for r in records], f"values after {codec}")
    expect_eq([r.headers for r in fetched], [r.headers for r in records], f"headers after {codec}")
    expect_eq([r.offset for r in fetched], list(range(base, base + 20)), f"offsets after {codec}")


def _register_compression(codec: str) -> None:
    def run(ctx: CheckContext) -> None:
        _compression_roundtrip(ctx, codec)

    check(f"produce.compression.{codec}_roundtrip", api=API,
          asserts=f"A {codec}-compressed batch of 20 records is accepted and its records are fetched "
                  "back unchanged (values, keys, headers) at consecutive offsets.",
          source="KIP-110 (zstd), Kafka CompressionType; RecordBatch attributes bits 0-2")(run)


for _codec in CODECS:
    _register_compression(_codec)


@check("produce.compression.codec_kept_on_fetch", api=API,
       asserts="A broker with compression.type=producer (the default) stores a gzip batch as sent: the "
               "fetched batch is still gzip-compressed.",
       source="Kafka broker config compression.type=producer; LogValidator keeps the producer's codec")
def codec_kept(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    base = ops.produce_ok(topic, 0, _values("g", 5), compression=CODECS["gzip"])
    result = ops.fetch(topic, 0, base)
    codecs = [b.compression for b in result.batches]
    ctx.note("fetched_batch_codecs", codecs)
    expect(bool(codecs) and codecs[0] == CODECS["gzip"], f"fetched batch codec {codecs}, expected gzip (1)")


@check("produce.headers_and_nulls_roundtrip", api=API,
       asserts="Record headers (several, repeated keys, a null header value), a null key and a null "
               "value (tombstone) are fetched back exactly.",
       source="KIP-82 (record headers); Kafka protocol guide 'Record'")
def headers_nulls(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    records = [
        Rec(b"v1", key=None, headers=(("a", b"1"), ("a", b"2"), ("empty", b""), ("nil", None))),
        Rec(None, key=b"tombstone"),
        Rec(b"", key=b""),
        Rec("ünïcødé ✓".encode(), key="ключ".encode(), headers=(("ключ", "значение".encode()),)),
    ]
    base = ops.produce_ok(topic, 0, records)
    fetched = ops.read_all(topic, 0, base)
    expect_eq([(r.key, r.value, r.headers) for r in fetched],
              [(r.key, r.value, r.headers) for r in records], "records fetched back")


@check("produce.create_time_preserved", api=API,
       asserts="With message.timestamp.type=CreateTime (default) each record keeps the producer's "
               "timestamp to the millisecond, also when timestamps in a batch go backwards.",
       source="KIP-32 (timestamps); TopicConfig message.timestamp.type")
def create_time(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    now = now_ms()
    stamps = [now - 5000, now - 1234, now - 60_000, now - 1]
    base = ops.produce_ok(topic, 0, [Rec(f"t{i}".encode(), timestamp=t) for i, t in enumerate(stamps)])
    fetched = ops.read_all(topic, 0, base)
    expect_eq([r.timestamp for r in fetched], stamps, "record timestamps")
    expect(all(r.timestamp_type == 0 for r in fetched), "timestamp type is not CreateTime (0)")


@check("produce.log_append_time", api=API,
       asserts="On a topic with message.timestamp.type=LogAppendTime, Produce answers the broker's "
               "append time and fetched records carry that time, not the producer's.",
       source="KIP-32; ProduceResponse LogAppendTimeMs (v2+)")
def log_append_time(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    result = ops.produce(topic, 0, [Rec(b"old", timestamp=before - 3_600_000)])
    expect_error(result.error, ErrorCode.NONE, "Produce")
    after = now_ms()
    ctx.note("log_append_time", result.log_append_time)
    expect(before - 2000 <= result.log_append_time <= after + 2000,
           f"log_append_time {result.log_append_time} is not the append time (~{before})")
    fetched = ops.fetch(topic, 0, result.base_offset)
    expect_eq(fetched.records[0].timestamp, result.log_append_time, "fetched record timestamp")
    expect_eq(fetched.batches[0].timestamp_type, LOG_APPEND_TIME, "fetched batch timestamp type")


@check("produce.future_timestamp_refused", api=API,
       asserts="A CreateTime record timestamped 2 hours ahead of the broker clock answers "
               "INVALID_TIMESTAMP (32) (log.message.timestamp.after.max.ms is 1 hour in Kafka 4).",
       source="KIP-937; Kafka 4.0 default log.message.timestamp.after.max.ms=3600000; LogValidator")
def future_timestamp(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    result = ops.produce(topic, 0, [Rec(b"future", timestamp=now_ms() + 2 * 3_600_000)])
    expect_error(result.error, ErrorCode.INVALID_TIMESTAMP, "Produce 2 h in the future")


@check("produce.message_too_large_refused", api=API,
       asserts="On a topic with max.message.bytes=2000, a batch of about 5000 bytes answers "
               "MESSAGE_TOO_LARGE (10) and nothing is appended; a small one is accepted.",
       source="TopicConfig max.message.bytes; Kafka LogValidator / UnifiedLog.analyzeAndValidateRecords")
def too_large(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs={"max.message.bytes": "2000"})
    result = ops.produce(topic, 0, [Rec(b"x" * 5000)])
    expect_error(result.error, ErrorCode.MESSAGE_TOO_LARGE,
                 "Produce of 5000 bytes with max.message.bytes=2000")
    ops.produce_ok(topic, 0, [Rec(b"small")])
    expect_eq(ops.fetch(topic, 0, ops.offset_of(topic, 0, EARLIEST)).values, [b"small"],
              "the log holds only the small record")


@check("produce.large_batch_offsets", api=API,
       asserts="A batch of 1000 records is appended whole: fetching from its base offset returns the "
               "1000 records at consecutive offsets.",
       source="Kafka RecordBatch: offsets base..base+lastOffsetDelta")
def large_batch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    records = [Rec(f"{i}".encode()) for i in range(1000)]
    base = ops.produce_ok(topic, 0, records)
    fetched = ops.read_all(topic, 0, base)
    expect_eq(len(fetched), 1000, "records fetched")
    expect_eq(fetched[-1].offset - fetched[0].offset, 999, "offset span of the batch")


@check("init_producer_id.allocates_distinct_ids", api=IPI,
       asserts="InitProducerId without a transactional id answers NONE with a producer id >= 0 and "
               "epoch >= 0; two calls get different producer ids.",
       source=f"{KIP98}; InitProducerIdRequest.json")
def distinct_ids(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    first, second = ops.init_producer_id(), ops.init_producer_id()
    for response in (first, second):
        expect_error(response.error_code, ErrorCode.NONE, "InitProducerId")
        expect(int(response.producer_id) >= 0 and int(response.producer_epoch) >= 0,
               f"producer id/epoch {int(response.producer_id)}/{int(response.producer_epoch)}")
    expect(int(first.producer_id) != int(second.producer_id), "two InitProducerId calls got the same id")


@check("init_producer_id.transactional_id_accepted", api=IPI,
       asserts="InitProducerId with a transactional id answers NONE with a producer id (the "
               "transaction coordinator registers the transactional producer).",
       source="KIP-98 (transactions); TransactionCoordinator.handleInitProducerId")
def transactional_id(ctx: CheckContext) -> None:
    response = Ops(ctx).init_producer_id(ctx.name("txn"))
    expect_error(response.error_code, ErrorCode.NONE, "InitProducerId with a transactional id")
    expect(int(response.producer_id) >= 0, "no producer id")


def _idempotent(ops: Ops) -> tuple[int, int]:
    response = ops.init_producer_id()
    expect_error(response.error_code, ErrorCode.NONE, "InitProducerId")
    return int(response.producer_id), int(response.producer_epoch)


@check("produce.idempotent.retry_deduplicated", api=API,
       asserts="An idempotent producer's batch sent twice with the same producer id, epoch and "
               "sequence is appended once: the retry answers NONE with the original base offset.",
       source=f"{KIP98}; ProducerStateManager (duplicate batch detection)")
def retry_dedup(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    pid, epoch = _idempotent(ops)
    batch = build_batch(_values("i", 3), producer_id=pid, producer_epoch=epoch, base_sequence=0)
    first = ops.produce(topic, 0, batch)
    expect_error(first.error, ErrorCode.NONE, "first send")
    retry = ops.produce(topic, 0, batch)
    expect_error(retry.error, ErrorCode.NONE, "retry of the same batch")
    expect_eq(retry.base_offset, first.base_offset, "base offset answered to the retry")
    fetched = ops.read_all(topic, 0, ops.offset_of(topic, 0, EARLIEST))
    expect_eq(len(fetched), 3, "records in the log after a retried batch")


@check("produce.idempotent.dedup_within_last_five", api=API,
       asserts="A retry of any of the last five batches of an idempotent producer is recognised: "
               "re-sending the 3rd of 5 batches answers NONE with its original offset and appends nothing.",
       source=f"{KIP98}; ProducerStateEntry keeps the metadata of the last 5 batches")
def dedup_last_five(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    pid, epoch = _idempotent(ops)
    batches, offsets = [], []
    for i in range(5):
        batch = build_batch(_values(f"b{i}", 2), producer_id=pid, producer_epoch=epoch, base_sequence=2 * i)
        result = ops.produce(topic, 0, batch)
        expect_error(result.error, ErrorCode.NONE, f"batch {i}")
        batches.append(batch)
        offsets.append(result.base_offset)
    latest = ops.offset_of(topic, 0, LATEST)
    retry = ops.produce(topic, 0, batches[2])
    expect_error(retry.error, ErrorCode.NONE, "retry of batch 2")
    expect_eq(retry.base_offset, offsets[2], "offset answered to the retry of batch 2")
    expect_eq(ops.offset_of(topic, 0, LATEST), latest, "latest offset after the retry")


@check("produce.idempotent.sequence_gap_refused", api=API,
       asserts="An idempotent batch whose sequence skips ahead (0..1 written, next starts at 5) answers "
               "OUT_OF_ORDER_SEQUENCE_NUMBER (45) and is not appended.",
       source=f"{KIP98}; ProducerAppendInfo.checkSequence")
def sequence_gap(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    pid, epoch = _idempotent(ops)
    first = ops.produce(topic, 0, _values("s", 2), producer_id=pid, producer_epoch=epoch, base_sequence=0)
    expect_error(first.error, ErrorCode.NONE, "batch with sequence 0")
    latest = ops.offset_of(topic, 0, LATEST)
    gap = ops.produce(topic, 0, _values("g", 1), producer_id=pid, producer_epoch=epoch, base_sequence=5)
    expect_error(gap.error, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "batch with sequence 5 after 0..1")
    expect_eq(ops.offset_of(topic, 0, LATEST), latest, "latest offset after the refused batch")


@check("produce.idempotent.next_sequence_accepted", api=API,
       asserts="Idempotent batches with consecutive sequences (0..2, 3..4) are all appended in order.",
       source=KIP98)
def next_sequence(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    pid, epoch = _idempotent(ops)
    a = ops.produce_ok(topic, 0, _values("a", 3), producer_id=pid, producer_epoch=epoch, base_sequence=0)
    b = ops.produce_ok(topic, 0, _values("b", 2), producer_id=pid, producer_epoch=epoch, base_sequence=3)
    expect(b > a + 2, f"second batch at {b} is not after the first (base {a}, 3 records)")
    fetched = ops.read_all(topic, 0, a)
    expect_eq([r.value for r in fetched], [r.value for r in _values("a", 3) + _values("b", 2)],
              "values in the log")
