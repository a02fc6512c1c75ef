"""ListOffsets (key 2) and OffsetForLeaderEpoch (key 23)."""

from __future__ import annotations

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import EARLIEST, LATEST, MAX_TIMESTAMP, Ops, Topic
from korvet.conformance.kafka.records import Rec, now_ms
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "ListOffsets (2)"
OFLE = "OffsetForLeaderEpoch (23)"
JSON = "ListOffsetsRequest.json / ListOffsetsResponse.json"
EARLIEST_LOCAL = -4


@check("list_offsets.empty_partition_earliest_equals_latest", api=API,
       asserts="On an empty partition ListOffsets EARLIEST and LATEST answer NONE with the same offset.",
       source=f"{JSON}; Kafka UnifiedLog.fetchOffsetByTimestamp")
def empty_equal(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    expect_eq(ops.offset_of(topic, 0, EARLIEST), ops.offset_of(topic, 0, LATEST), "EARLIEST vs LATEST")


@check("list_offsets.empty_partition_at_zero", api=API, kafka_exact=True,
       asserts="On a new, empty partition EARLIEST and LATEST are both 0.",
       source="Kafka log starts at offset 0")
def empty_zero(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    expect_eq((ops.offset_of(topic, 0, EARLIEST), ops.offset_of(topic, 0, LATEST)), (0, 0),
              "(EARLIEST, LATEST) of an empty partition")


@check("list_offsets.latest_is_high_watermark", api=API,
       asserts="After producing, LATEST equals the high watermark reported by Fetch, one past the last "
               "record's offset.",
       source="Kafka protocol guide: LATEST (-1) is the offset of the next message to be written")
def latest_hwm(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    offsets = ops.produce_values(topic, 0, ["a", "b", "c"])
    latest = ops.offset_of(topic, 0, LATEST)
    expect_eq(latest, offsets[-1] + 1, "LATEST vs last offset + 1")
    expect_eq(ops.fetch(topic, 0, offsets[0]).high_watermark, latest, "Fetch high watermark vs LATEST")


@check("list_offsets.earliest_is_first_record", api=API,
       asserts="EARLIEST is at or before the first record, and a Fetch there returns the first record.",
       source="Kafka protocol guide: EARLIEST (-2) is the log start offset")
def earliest_first(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    offsets = ops.produce_values(topic, 0, ["first", "second"])
    earliest = ops.offset_of(topic, 0, EARLIEST)
    expect(earliest <= offsets[0], f"EARLIEST {earliest} is after the first record {offsets[0]}")
    expect_eq(ops.fetch(topic, 0, earliest).values[:1], [b"first"], "record at EARLIEST")


def _timed_topic(ops: Ops) -> tuple[Topic, list[int], list[int]]:
    topic = ops.create_topic()
    base = now_ms() - 600_000
    stamps = [base, base + 1000, base + 2000]
    offsets = [ops.produce_ok(topic, 0, [Rec(f"t{i}".encode(), timestamp=t)]) for i, t in enumerate(stamps)]
    return topic, stamps, offsets


@check("list_offsets.by_timestamp_exact", api=API,
       asserts="ListOffsets v1+ with a record's exact CreateTime returns that record's offset and "
               "timestamp.",
       source="KIP-79 (ListOffsets by timestamp): the earliest offset whose timestamp >= the target")
def by_timestamp_exact(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, stamps, offsets = _timed_topic(ops)
    listed = ops.list_offsets(topic, 0, stamps[1], version=ops.v(ApiKey.LIST_OFFSETS, lo=1))
    expect_error(listed.error, ErrorCode.NONE, "ListOffsets by timestamp")
    expect_eq((listed.offset, listed.timestamp), (offsets[1], stamps[1]), "(offset, timestamp)")


@check("list_offsets.by_timestamp_between", api=API,
       asserts="ListOffsets with a timestamp between two records' timestamps returns the later record "
               "(the first with timestamp >= target).",
       source="KIP-79")
def by_timestamp_between(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, stamps, offsets = _timed_topic(ops)
    listed = ops.list_offsets(topic, 0, stamps[0] + 1)
    expect_eq((listed.offset, listed.timestamp), (offsets[1], stamps[1]), "(offset, timestamp)")


@check("list_offsets.by_timestamp_after_last", api=API,
       asserts="ListOffsets v1+ with a timestamp after every record answers NONE with offset -1 and "
               "timestamp -1.",
       source="KIP-79 (no such record: -1)")
def by_timestamp_after(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, stamps, _ = _timed_topic(ops)
    listed = ops.list_offsets(topic, 0, stamps[-1] + 1, version=ops.v(ApiKey.LIST_OFFSETS, lo=1))
    expect_error(listed.error, ErrorCode.NONE, "ListOffsets after the last timestamp")
    expect_eq((listed.offset, listed.timestamp), (-1, -1), "(offset, timestamp)")


@check("list_offsets.by_timestamp_before_first", api=API,
       asserts="ListOffsets with timestamp 0 (before every record) returns the first record.",
       source="KIP-79")
def by_timestamp_before(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, stamps, offsets = _timed_topic(ops)
    listed = ops.list_offsets(topic, 0, 0)
    expect_eq((listed.offset, listed.timestamp), (offsets[0], stamps[0]), "(offset, timestamp)")


@check("list_offsets.max_timestamp", api=API,
       asserts="ListOffsets v7+ with MAX_TIMESTAMP (-3) returns the offset and timestamp of the record "
               "with the largest timestamp, even when it is not the last record.",
       source="KIP-734 (MAX_TIMESTAMP spec)")
def max_timestamp(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    base = now_ms() - 60_000
    offsets = [ops.produce_ok(topic, 0, [Rec(f"m{i}".encode(), timestamp=t)])
               for i, t in enumerate((base, base + 5000, base + 1000))]
    listed = ops.list_offsets(topic, 0, MAX_TIMESTAMP, version=ops.v(ApiKey.LIST_OFFSETS, lo=7))
    expect_error(listed.error, ErrorCode.NONE, "ListOffsets MAX_TIMESTAMP")
    expect_eq((listed.offset, listed.timestamp), (offsets[1], base + 5000), "(offset, timestamp)")


@check("list_offsets.earliest_local", api=API,
       asserts="ListOffsets v8+ with EARLIEST_LOCAL (-4) answers NONE with EARLIEST's offset on a topic "
               "without tiered storage.",
       source="KIP-405 (tiered storage; earliest local timestamp -4)")
def earliest_local(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    ops.produce_values(topic, 0, ["a", "b"])
    listed = ops.list_offsets(topic, 0, EARLIEST_LOCAL, version=ops.v(ApiKey.LIST_OFFSETS, lo=8))
    expect_error(listed.error, ErrorCode.NONE, "ListOffsets EARLIEST_LOCAL")
    expect_eq(listed.offset, ops.offset_of(topic, 0, EARLIEST), "EARLIEST_LOCAL vs EARLIEST")


@check("list_offsets.unknown_topic_and_partition", api=API,
       asserts="ListOffsets for a missing topic, or a missing partition of an existing topic, answers "
               "UNKNOWN_TOPIC_OR_PARTITION (3).",
       source="Kafka ReplicaManager.fetchOffset")
def unknown(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    expect_error(ops.list_offsets(ctx.name("missing"), 0, LATEST).error, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "ListOffsets of a missing topic")
    topic = ops.create_topic()
    expect_error(ops.list_offsets(topic, 4, LATEST).error, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "ListOffsets of partition 4")


@check("list_offsets.every_version", api=API,
       asserts="Every ListOffsets version the broker advertises answers LATEST with the same offset.",
       source=f"{JSON} (all versions)")
def every_version(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    ops.produce_values(topic, 0, ["x"])
    versions = ctx.apis.versions(ApiKey.LIST_OFFSETS)
    ctx.note("versions", versions)
    answers = {v: ops.list_offsets(topic, 0, LATEST, version=v) for v in versions}
    for version, listed in answers.items():
        expect_error(listed.error, ErrorCode.NONE, f"ListOffsets v{version}")
    expect_eq(len({a.offset for a in answers.values()}), 1, "LATEST across versions")


@check("list_offsets.read_committed_latest_is_lso", api=API,
       asserts="ListOffsets v2+ with isolation_level=1 (read_committed) answers LATEST equal to the "
               "read_uncommitted LATEST when no transaction is open.",
       source="KIP-98 (ListOffsets v2 isolation level: LATEST is the last stable offset)")
def read_committed_latest(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    ops.produce_values(topic, 0, ["x", "y"])
    version = ops.v(ApiKey.LIST_OFFSETS, lo=2)
    committed = ops.list_offsets(topic, 0, LATEST, isolation_level=1, version=version)
    uncommitted = ops.list_offsets(topic, 0, LATEST, isolation_level=0, version=version)
    expect_error(committed.error, ErrorCode.NONE, "ListOffsets read_committed")
    expect_eq(committed.offset, uncommitted.offset, "read_committed LATEST vs read_uncommitted LATEST")


@check("list_offsets.leader_epoch_reported", api=API,
       asserts="ListOffsets v4+ answers LATEST with the partition's current leader epoch (as in Metadata).",
       source="KIP-320 (leader epoch in ListOffsets v4)")
def leader_epoch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    ops.produce_values(topic, 0, ["x"])
    listed = ops.list_offsets(topic, 0, LATEST, version=ops.v(ApiKey.LIST_OFFSETS, lo=4))
    expect_eq(listed.leader_epoch, ops.leader_epoch(topic.name),
              "leader epoch (ListOffsets vs Metadata)")


@check("offset_for_leader_epoch.position_taken_on_an_empty_partition_stands", api=OFLE,
       asserts="A consumer positioned on an empty partition (ListOffsets LATEST: offset and "
               "leader epoch) validates that position after records arrive: OffsetForLeaderEpoch "
               "for that epoch answers NONE, a defined epoch and an end offset at or after the "
               "position, so the consumer reads the first records instead of resetting past them.",
       source="KIP-320; Kafka LeaderEpochFileCache.endOffsetFor; the Java consumer's "
              "SubscriptionState.maybeCompleteValidation (an undefined answer resets)")
def empty_partition_position_stands(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    listed = ops.list_offsets(topic, 0, LATEST, version=ops.v(ApiKey.LIST_OFFSETS, lo=4))
    ctx.note("position_and_epoch", [listed.offset, listed.leader_epoch])
    ops.produce_values(topic, 0, ["first", "second"])
    p = ops.epoch_end(topic.name, listed.leader_epoch)
    expect_error(p.error_code, ErrorCode.NONE, "OffsetForLeaderEpoch")
    ctx.note("answer", [int(p.leader_epoch), int(p.end_offset)])
    expect(int(p.leader_epoch) >= 0 and int(p.end_offset) >= listed.offset,
           f"OffsetForLeaderEpoch({listed.leader_epoch}) answered epoch {int(p.leader_epoch)}, "
           f"end offset {int(p.end_offset)}: the consumer's position {listed.offset} would be "
           "reset by its policy")


@check("offset_for_leader_epoch.current_epoch_end_offset", api=OFLE,
       asserts="OffsetForLeaderEpoch for the current leader epoch answers NONE with that epoch and an "
               "end offset equal to the log end offset (LATEST).",
       source="KIP-101 / KIP-320 (consumers validate positions with OffsetForLeaderEpoch)")
def epoch_end_offset(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    ops.produce_values(topic, 0, ["a", "b"])
    epoch = ops.leader_epoch(topic.name)
    p = ops.epoch_end(topic.name, epoch, current_leader_epoch=epoch)
    expect_error(p.error_code, ErrorCode.NONE, "OffsetForLeaderEpoch")
    expect_eq((int(p.leader_epoch), int(p.end_offset)), (epoch, ops.offset_of(topic, 0, LATEST)),
              "(leader epoch, end offset)")
