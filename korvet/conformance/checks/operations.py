"""The admin APIs operators' tools call, and incremental fetch sessions:
DeleteRecords (21), DescribeLogDirs (35), DescribeProducers (61),
DescribeTopicPartitions (75), Fetch sessions (KIP-227).

No check assumes dense offsets: positions come from Produce, ListOffsets and Fetch.
"""

from __future__ import annotations

import uuid
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.ops import EARLIEST, LATEST, Ops, Topic, fetch_result
from korvet.conformance.kafka.records import Rec
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

DR = "DeleteRecords (21)"
DLD = "DescribeLogDirs (35)"
DP = "DescribeProducers (61)"
DTP = "DescribeTopicPartitions (75)"
SESSIONS = "Fetch sessions (KIP-227)"

ZERO_UUID = uuid.UUID(int=0)


# -- DeleteRecords -----------------------------------------------------------------------

def _delete(ops: Ops, topic: str, entries: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(error code, low watermark) per partition, in request order."""
    response = ops.call(ApiKey.DELETE_RECORDS, timeout=30_000, topics=[{
        "name": topic, "partitions": [{"partition_index": p, "offset": o} for p, o in entries]}])
    by_index = {int(p.partition_index): (int(p.error_code), int(p.low_watermark))
                for t in response.topics for p in t.partitions}
    return [by_index[p] for p, _ in entries]


def _five(ops: Ops) -> tuple[Topic, list[int]]:
    topic = ops.create_topic()
    return topic, [ops.produce_ok(topic, 0, [Rec(v.encode())]) for v in "abcde"]


@check("delete_records.moves_the_log_start", api=DR,
       asserts="DeleteRecords to a record's offset answers NONE with that offset as the low "
               "watermark; ListOffsets EARLIEST and Fetch's log start then say the same, a Fetch "
               "there returns that record first and a Fetch below it is OFFSET_OUT_OF_RANGE.",
       source="DeleteRecordsRequest.json; Kafka UnifiedLog.maybeIncrementLogStartOffset")
def delete_moves_start(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _five(ops)
    expect_eq(_delete(ops, topic.name, [(0, offsets[2])]), [(ErrorCode.NONE, offsets[2])],
              "DeleteRecords (error, low watermark)")
    expect_eq(ops.offset_of(topic, 0, EARLIEST), offsets[2], "ListOffsets EARLIEST afterwards")
    at = ops.fetch(topic, 0, offsets[2])
    expect_error(at.error, ErrorCode.NONE, "Fetch at the new log start")
    expect_eq(at.log_start_offset, offsets[2], "Fetch's log start offset")
    expect_eq([r.value for r in at.records if r.offset >= offsets[2]][:1], [b"c"],
              "first record at the new log start")
    below = ops.fetch(topic, 0, offsets[1])
    expect_error(below.error, ErrorCode.OFFSET_OUT_OF_RANGE, "Fetch below the new log start")


@check("delete_records.minus_one_is_the_high_watermark", api=DR,
       asserts="DeleteRecords with offset -1 deletes everything: the low watermark is the high "
               "watermark, and EARLIEST equals LATEST afterwards.",
       source="DeleteRecordsRequest.HIGH_WATERMARK (-1); ReplicaManager.deleteRecordsOnLocalLog")
def delete_all(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, _ = _five(ops)
    end = ops.offset_of(topic, 0, LATEST)
    expect_eq(_delete(ops, topic.name, [(0, -1)]), [(ErrorCode.NONE, end)], "DeleteRecords -1")
    expect_eq((ops.offset_of(topic, 0, EARLIEST), ops.offset_of(topic, 0, LATEST)), (end, end),
              "(EARLIEST, LATEST) afterwards")
    expect_eq(ops.fetch(topic, 0, end).records, [], "records left")


@check("delete_records.offsets_out_of_range", api=DR,
       asserts="DeleteRecords above the high watermark, or to a negative offset other than -1, "
               "answers OFFSET_OUT_OF_RANGE (1) with low watermark -1 and deletes nothing.",
       source="Partition.deleteRecordsOnLeader; UnifiedLog.maybeIncrementLogStartOffset")
def delete_out_of_range(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _five(ops)
    end = ops.offset_of(topic, 0, LATEST)
    expect_eq(_delete(ops, topic.name, [(0, end + 1)]), [(ErrorCode.OFFSET_OUT_OF_RANGE, -1)],
              "DeleteRecords one past the high watermark")
    expect_eq(_delete(ops, topic.name, [(0, -2)]), [(ErrorCode.OFFSET_OUT_OF_RANGE, -1)],
              "DeleteRecords to offset -2")
    expect(ops.offset_of(topic, 0, EARLIEST) <= offsets[0], "the log start moved")


@check("delete_records.log_start_never_moves_back", api=DR,
       asserts="DeleteRecords below the current log start answers NONE with the current log start "
               "as the low watermark; the log start stays where it was.",
       source="UnifiedLog.maybeIncrementLogStartOffset (only raises the log start)")
def delete_never_back(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _five(ops)
    _delete(ops, topic.name, [(0, offsets[3])])
    expect_eq(_delete(ops, topic.name, [(0, offsets[1])]), [(ErrorCode.NONE, offsets[3])],
              "DeleteRecords below the log start")
    expect_eq(ops.offset_of(topic, 0, EARLIEST), offsets[3], "EARLIEST afterwards")


@check("delete_records.compacted_topic", api=DR,
       asserts="DeleteRecords on a topic with cleanup.policy=compact answers POLICY_VIOLATION "
               "(44) and leaves the log start where it was; with an empty cleanup.policy (no "
               "cleanup: records kept until deleted) it deletes.",
       source="ReplicaManager.deleteRecordsOnLocalLog (a compacted log's records cannot be "
              "deleted)")
def delete_compacted(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs={"cleanup.policy": "compact"})
    offsets = [ops.produce_ok(topic, 0, [Rec(v.encode(), key=b"k")]) for v in "abc"]
    start = ops.offset_of(topic, 0, EARLIEST)
    expect_eq([code for code, _ in _delete(ops, topic.name, [(0, offsets[2])])],
              [ErrorCode.POLICY_VIOLATION], "DeleteRecords error with cleanup.policy=compact")
    expect_eq(ops.offset_of(topic, 0, EARLIEST), start, "EARLIEST afterwards")
    kept = ops.create_topic(configs={"cleanup.policy": ""})
    offsets = [ops.produce_ok(kept, 0, [Rec(v.encode(), key=b"k")]) for v in "abc"]
    expect_eq(_delete(ops, kept.name, [(0, offsets[2])]), [(ErrorCode.NONE, offsets[2])],
              "DeleteRecords (error, low watermark) with an empty cleanup.policy")


@check("delete_records.unknown_partition", api=DR,
       asserts="DeleteRecords on a partition or topic that does not exist answers "
               "UNKNOWN_TOPIC_OR_PARTITION (3) with low watermark -1.",
       source="KafkaApis.handleDeleteRecordsRequest")
def delete_unknown(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    expect_eq(_delete(ops, topic.name, [(3, 0)]), [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)],
              "DeleteRecords on partition 3 of a one-partition topic")
    expect_eq(_delete(ops, ctx.name("missing"), [(0, 0)]), [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)],
              "DeleteRecords on a topic that does not exist")


# -- DescribeLogDirs ---------------------------------------------------------------------

@check("describe_log_dirs.partitions_and_sizes", api=DLD,
       asserts="DescribeLogDirs for a topic lists its partitions in a log dir with error NONE: a "
               "partition holding records has a positive size, an empty one a smaller size, offset "
               "lag 0, not future; v4+ gives the volume's total and usable bytes (usable <= total). "
               "A topic that does not exist is left out.",
       source="DescribeLogDirsResponse.json; ReplicaManager.describeLogDirs")
def log_dirs(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    ops.produce_ok(topic, 0, [Rec(b"x" * 2000) for _ in range(10)])
    missing = ctx.name("missing")
    response = ops.call(ApiKey.DESCRIBE_LOG_DIRS, topics=[
        {"topic": topic.name, "partitions": [0, 1]}, {"topic": missing, "partitions": [0]}])
    expect_error(getattr(response, "error_code", 0), ErrorCode.NONE, "DescribeLogDirs top-level error")
    sizes: dict[int, int] = {}
    for result in response.results:
        expect_error(result.error_code, ErrorCode.NONE, f"log dir {result.log_dir}")
        total, usable = int(getattr(result, "total_bytes", -1)), int(getattr(result, "usable_bytes", -1))
        expect(total == -1 or 0 <= usable <= total, f"total {total}, usable {usable} bytes")
        for t in result.topics:
            expect(t.name != missing, "a topic that does not exist was described")
            if t.name == topic.name:
                for p in t.partitions:
                    sizes[int(p.partition_index)] = int(p.partition_size)
                    expect_eq(int(p.offset_lag), 0, "offset lag")
                    expect(not p.is_future_key, "a future replica")
    ctx.note("sizes", sizes)
    expect_eq(sorted(sizes), [0, 1], "partitions described")
    expect(sizes[0] > 0 and sizes[0] > sizes[1], f"sizes {sizes}: the partition with 20 KB of "
                                                 "records is not the larger one")


# -- DescribeTopicPartitions -------------------------------------------------------------

def _describe(ops: Ops, names: list[str], limit: int, cursor: tuple[str, int] | None) -> Any:
    return ops.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, topics=[{"name": n} for n in names],
                    response_partition_limit=limit,
                    cursor=None if cursor is None else {"topic_name": cursor[0],
                                                        "partition_index": cursor[1]})


def _page(response: Any) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    topics = [(str(t.name), [int(p.partition_index) for p in t.partitions]) for t in response.topics]
    cursor = response.next_cursor
    return topics, None if cursor is None else (str(cursor.topic_name), int(cursor.partition_index))


@check("describe_topic_partitions.pages_with_a_cursor", api=DTP,
       asserts="DescribeTopicPartitions answers topics in name order, at most "
               "response_partition_limit partitions a response, and a next cursor (topic, "
               "partition) to continue from; following it describes every partition once, each led "
               "by a broker that is in its replicas and ISR.",
       source="KIP-966 / DescribeTopicPartitionsRequest.json; KRaftMetadataCache.describeTopicResponse")
def pages(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    first, second = ops.create_topic(partitions=3), ops.create_topic(partitions=2)
    names = sorted([first.name, second.name])
    counts = {first.name: 3, second.name: 2}
    seen: list[tuple[str, int]] = []
    cursor: tuple[str, int] | None = None
    for page_number in range(5):
        response = _describe(ops, names, 2, cursor)
        topics, cursor = _page(response)
        ctx.note(f"page_{page_number}", [topics, cursor])
        expect(sum(len(p) for _, p in topics) <= 2, f"page {page_number} holds more than 2 partitions")
        expect_eq([n for n, _ in topics], sorted(n for n, _ in topics), "topic order")
        for t in response.topics:
            expect_error(t.error_code, ErrorCode.NONE, f"topic {t.name}")
            for p in t.partitions:
                expect(int(p.leader_id) in [int(r) for r in p.replica_nodes], "leader not a replica")
                expect(int(p.leader_id) in [int(r) for r in p.isr_nodes], "leader not in the ISR")
        seen.extend((n, p) for n, partitions in topics for p in partitions)
        if cursor is None:
            break
    expect_eq(seen, [(n, p) for n in names for p in range(counts[n])], "partitions described")


@check("describe_topic_partitions.unknown_topic_and_bad_cursor", api=DTP,
       asserts="A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (3) with the "
               "zero topic id; a cursor naming a topic the request does not list answers "
               "INVALID_REQUEST (42).",
       source="DescribeTopicPartitionsRequestHandler (cursor topic must be requested)")
def unknown_and_cursor(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    missing = ctx.name("missing")
    response = _describe(ops, [missing], 10, None)
    (entry,) = response.topics
    expect_error(entry.error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "a topic that does not exist")
    expect(entry.topic_id in (None, ZERO_UUID), f"topic id {entry.topic_id} of a missing topic")
    topic = ops.create_topic()
    refused = _describe(ops, [topic.name], 10, (missing, 0))
    codes = [int(t.error_code) for t in refused.topics]
    expect(codes != [] and all(c == ErrorCode.INVALID_REQUEST for c in codes),
           f"a cursor outside the request answered {codes}")


# -- DescribeProducers -------------------------------------------------------------------

@check("describe_producers.idempotent_producer", api=DP,
       asserts="After an idempotent producer (InitProducerId, then sequences 0..2) writes to a "
               "partition, DescribeProducers lists it with its id, epoch and last sequence 2, and "
               "coordinator epoch and transaction start -1; a partition that does not exist answers "
               "UNKNOWN_TOPIC_OR_PARTITION (3).",
       source="KIP-664; ReplicaManager.activeProducerState")
def producers(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    init = ops.init_producer_id()
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    result = ops.produce(topic, 0, [Rec(b"p0"), Rec(b"p1"), Rec(b"p2")], producer_id=pid,
                         producer_epoch=epoch, base_sequence=0)
    expect_error(result.error, ErrorCode.NONE, "idempotent Produce")
    response = ops.call(ApiKey.DESCRIBE_PRODUCERS, topics=[{"name": topic.name, "partition_indexes": [0, 7]}])
    parts = {int(p.partition_index): p for t in response.topics for p in t.partitions}
    expect_error(parts[0].error_code, ErrorCode.NONE, "partition 0")
    states = {int(s.producer_id): s for s in parts[0].active_producers}
    expect(pid in states, f"producer {pid} not listed: {sorted(states)}")
    state = states[pid]
    expect_eq((int(state.producer_epoch), int(state.last_sequence), int(state.coordinator_epoch),
               int(state.current_txn_start_offset)), (epoch, 2, -1, -1),
              "(epoch, last sequence, coordinator epoch, transaction start)")
    expect(int(state.last_timestamp) > 0, "no last timestamp")
    expect_error(parts[7].error_code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "partition 7 of a 1-partition topic")


# -- Fetch sessions ----------------------------------------------------------------------

class _Session:
    """One consumer's fetch session, driven by hand."""

    def __init__(self, ops: Ops, version: int) -> None:
        self.ops = ops
        self.version = version
        self.session_id = 0
        self.epoch = 0

    def fetch(self, parts: list[tuple[Topic, int, int]], *,
              forgotten: tuple[tuple[Topic, int], ...] = (), epoch: int | None = None,
              version: int | None = None) -> Any:
        ver = version or self.version
        key = "topic_id" if ver >= 13 else "topic"

        def ident(topic: Topic) -> Any:
            if ver < 13:
                return topic.name
            return topic.topic_id or self.ops.topic_id_of(topic.name)

        topics: dict[str, dict[str, Any]] = {}
        for topic, partition, offset in parts:
            topics.setdefault(topic.name, {key: ident(topic), "partitions": []})["partitions"].append({
                "partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1})
        request = build_request(
            ApiKey.FETCH, ver, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=50 << 20,
            isolation_level=0, session_id=self.session_id,
            session_epoch=self.epoch if epoch is None else epoch, topics=list(topics.values()),
            forgotten_topics_data=[{key: ident(t), "partitions": [p]} for t, p in forgotten],
            rack_id="")
        return self.ops.conn.call(request)

    def values(self, response: Any) -> dict[int, list[bytes | None]]:
        return {int(p.partition_index): fetch_result(response, p).values
                for t in response.responses for p in t.partitions}


def _open(ops: Ops, parts: list[tuple[Topic, int, int]], version: int | None = None) -> _Session:
    session = _Session(ops, version or ops.v(ApiKey.FETCH, lo=7))
    response = session.fetch(parts)
    expect_error(response.error_code, ErrorCode.NONE, "the full fetch that opens the session")
    session.session_id = int(response.session_id)
    expect(session.session_id != 0, "a full fetch with epoch 0 was given no session")
    session.epoch = 1
    return session


def _two_partitions(ops: Ops) -> tuple[Topic, list[int]]:
    topic = ops.create_topic(partitions=2)
    for p in (0, 1):
        ops.produce_ok(topic, p, [Rec(b"old")])
    return topic, [ops.offset_of(topic, p, LATEST) for p in (0, 1)]


@check("fetch_sessions.incremental_responses_leave_out_unchanged_partitions", api=SESSIONS,
       asserts="In a fetch session, an incremental Fetch naming no partitions reads the whole "
               "session: its response carries only the partition that got new records; the next, "
               "with that partition's new position, carries none.",
       source="KIP-227; CachedPartition.maybeUpdateResponseData")
def incremental_omits(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, ends = _two_partitions(ops)
    session = _open(ops, [(topic, 0, ends[0]), (topic, 1, ends[1])])
    ops.produce_ok(topic, 1, [Rec(b"new")])
    first = session.fetch([])
    expect_error(first.error_code, ErrorCode.NONE, "incremental fetch (epoch 1)")
    expect_eq(int(first.session_id), session.session_id, "session id of the incremental response")
    expect_eq(session.values(first), {1: [b"new"]}, "partitions in the incremental response")
    session.epoch = 2
    position = ops.offset_of(topic, 1, LATEST)
    second = session.fetch([(topic, 1, position)])
    expect_error(second.error_code, ErrorCode.NONE, "incremental fetch (epoch 2)")
    expect_eq(session.values(second), {}, "partitions in a response with no news")


@check("fetch_sessions.epoch_errors", api=SESSIONS,
       asserts="A session's epoch must be the next one: an incremental Fetch repeating a used epoch "
               "answers INVALID_FETCH_SESSION_EPOCH (71) with session id 0 and no partitions; one "
               "naming a session that was closed with epoch -1 answers FETCH_SESSION_ID_NOT_FOUND (70).",
       source="KIP-227; FetchManager.newContext")
def epoch_errors(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, ends = _two_partitions(ops)
    session = _open(ops, [(topic, 0, ends[0])])
    expect_error(session.fetch([]).error_code, ErrorCode.NONE, "incremental fetch (epoch 1)")
    repeated = session.fetch([], epoch=1)
    expect_error(repeated.error_code, ErrorCode.INVALID_FETCH_SESSION_EPOCH, "epoch 1 again")
    expect_eq((int(repeated.session_id), list(repeated.responses)), (0, []),
              "(session id, partitions) of the error")
    closing = session.fetch([(topic, 0, ends[0])], epoch=-1)
    expect_error(closing.error_code, ErrorCode.NONE, "a full fetch with epoch -1 naming the session")
    expect_eq(int(closing.session_id), 0, "session id after closing")
    gone = session.fetch([], epoch=2)
    expect_error(gone.error_code, ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                 "an incremental fetch of the closed session")


@check("fetch_sessions.forgotten_partitions_are_not_read", api=SESSIONS,
       asserts="A partition named in forgotten_topics_data leaves the session: later incremental "
               "responses never carry it, however many records it gets.",
       source="KIP-227 (ForgottenTopicsData); FetchSession.update")
def forgotten(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, ends = _two_partitions(ops)
    session = _open(ops, [(topic, 0, ends[0]), (topic, 1, ends[1])])
    expect_error(session.fetch([], forgotten=((topic, 0),)).error_code, ErrorCode.NONE,
                 "forgetting partition 0")
    session.epoch = 2
    for p in (0, 1):
        ops.produce_ok(topic, p, [Rec(b"after")])
    response = session.fetch([])
    expect_error(response.error_code, ErrorCode.NONE, "incremental fetch (epoch 2)")
    expect_eq(session.values(response), {1: [b"after"]}, "partitions after forgetting partition 0")


@check("fetch_sessions.topic_ids_and_names_do_not_mix", api=SESSIONS,
       asserts="A session opened with Fetch v13+ (topics by id) answers an incremental Fetch below "
               "v13 (topics by name) with FETCH_SESSION_TOPIC_ID_ERROR (106).",
       source="KIP-516; FetchManager.newContext (usesTopicIds)")
def topic_id_mix(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, ends = _two_partitions(ops)
    session = _open(ops, [(topic, 0, ends[0])], version=ops.v(ApiKey.FETCH, lo=13))
    by_name = session.fetch([], version=ops.v(ApiKey.FETCH, lo=7, hi=12))
    expect_error(by_name.error_code, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
                 "an incremental fetch by topic name")
