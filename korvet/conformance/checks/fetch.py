"""Fetch (key 1): long polling, size limits, out-of-range offsets, gaps, sessions."""

from __future__ import annotations

import threading
import time
import uuid

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error, wait_until
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import EARLIEST, LATEST, Ops, Topic, fetch_result
from korvet.conformance.kafka.records import Rec
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "Fetch (1)"
JSON = "FetchRequest.json / FetchResponse.json"


def _topic_with(ops: Ops, values: list[str], partitions: int = 1) -> tuple[Topic, list[int]]:
    topic = ops.create_topic(partitions=partitions)
    offsets = ops.produce_values(topic, 0, values)
    return topic, offsets


@check("fetch.returns_produced_records", api=API,
       asserts="Fetching from the first produced offset returns the records in produce order, with "
               "the high watermark one past the last record's offset.",
       source=f"{JSON}; Kafka replication docs (high watermark = offset after the last committed record)")
def returns_records(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["a", "b", "c"])
    result = ops.fetch(topic, 0, offsets[0])
    expect_error(result.error, ErrorCode.NONE, "Fetch")
    expect_eq(result.values, [b"a", b"b", b"c"], "fetched values")
    expect_eq(result.offsets, offsets, "fetched offsets vs produce answers")
    expect_eq(result.high_watermark, offsets[-1] + 1, "high watermark")


@check("fetch.log_start_offset_reported", api=API,
       asserts="Fetch v5+ reports a log start offset <= the first record's offset and equal to "
               "ListOffsets EARLIEST.",
       source="KIP-107 (log start offset in Fetch v5)")
def log_start(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["a", "b"])
    result = ops.fetch(topic, 0, offsets[0], version=ops.v(ApiKey.FETCH, lo=5))
    expect(result.log_start_offset <= offsets[0],
           f"log start offset {result.log_start_offset} is after the first record {offsets[0]}")
    expect_eq(result.log_start_offset, ops.offset_of(topic, 0, EARLIEST), "log start vs EARLIEST")


@check("fetch.mid_batch_offset_returns_rest", api=API,
       asserts="Fetching at an offset in the middle of a produced batch returns the record at that "
               "offset and every later one (the broker may also return the batch's earlier records, "
               "which the client drops), never skipping the batch.",
       source="Kafka protocol guide (fetch may return records before the fetch offset in the first "
              "batch); Tansu compat notes: fetch at a mid-batch offset skipping the batch is a known bug")
def mid_batch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    base = ops.produce_ok(topic, 0, [Rec(f"m{i}".encode()) for i in range(5)])
    result = ops.fetch(topic, 0, base + 2)
    tail = [r for r in result.records if r.offset >= base + 2]
    expect_eq([r.value for r in tail], [b"m2", b"m3", b"m4"], "records at and after the mid-batch offset")


@check("fetch.long_poll.waits_for_max_wait", api=API,
       asserts="A Fetch at the end of the log with min_bytes=1 and max_wait=800 ms is answered no "
               "sooner than about max_wait, with no records.",
       source="Kafka protocol guide, Fetch MaxWaitMs/MinBytes; DelayedFetch")
def waits(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    end = ops.offset_of(topic, 0, LATEST)
    started = time.monotonic()
    result = ops.fetch(topic, 0, end, max_wait_ms=800, min_bytes=1)
    elapsed = time.monotonic() - started
    ctx.note("elapsed_ms", round(elapsed * 1000))
    expect_error(result.error, ErrorCode.NONE, "Fetch at the end of the log")
    expect_eq(result.records, [], "records from an empty long poll")
    expect(elapsed >= 0.7, f"answered after {elapsed * 1000:.0f} ms, before max_wait 800 ms")


@check("fetch.long_poll.returns_when_data_arrives", api=API,
       asserts="A long poll (max_wait=15 s, min_bytes=1) at the end of the log is answered soon after "
               "another connection produces a record, with that record.",
       source="Kafka DelayedFetch (completed when min_bytes are available)")
def returns_on_data(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    end = ops.offset_of(topic, 0, LATEST)
    producer = Ops(ctx)
    errors: list[BaseException] = []

    def produce_later() -> None:
        try:
            time.sleep(0.5)
            producer.produce_ok(topic, 0, [Rec(b"wake-up")])
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=produce_later, daemon=True)
    started = time.monotonic()
    thread.start()
    result = ops.fetch(topic, 0, end, max_wait_ms=15_000, min_bytes=1, timeout=30)
    elapsed = time.monotonic() - started
    thread.join(10)
    if errors:
        raise CheckFailed(f"producing during the long poll failed: {errors[0]}")
    ctx.note("elapsed_ms", round(elapsed * 1000))
    expect_eq(result.values, [b"wake-up"], "records answered to the long poll")
    expect(elapsed < 10, f"the long poll took {elapsed:.1f} s although a record arrived after 0.5 s")


@check("fetch.min_bytes_zero_immediate", api=API,
       asserts="A Fetch at the end of the log with min_bytes=0 is answered at once even with "
               "max_wait=10 s.",
       source="Kafka ReplicaManager.fetchMessages (respond immediately when min_bytes <= 0)")
def min_bytes_zero(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    end = ops.offset_of(topic, 0, LATEST)
    started = time.monotonic()
    result = ops.fetch(topic, 0, end, max_wait_ms=10_000, min_bytes=0)
    elapsed = time.monotonic() - started
    expect_error(result.error, ErrorCode.NONE, "Fetch")
    expect(elapsed < 5, f"answered after {elapsed:.1f} s with min_bytes=0")


@check("fetch.offset_beyond_end_out_of_range", api=API,
       asserts="A Fetch at an offset past the high watermark answers OFFSET_OUT_OF_RANGE (1).",
       source="Kafka UnifiedLog.read / Errors.OFFSET_OUT_OF_RANGE")
def beyond_end(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["a"])
    hw = offsets[-1] + 1
    for offset in (hw + 1, hw + 1_000_000):
        result = ops.fetch(topic, 0, offset)
        expect_error(result.error, ErrorCode.OFFSET_OUT_OF_RANGE, f"Fetch at high watermark + {offset - hw}")


@check("fetch.negative_offset_out_of_range", api=API,
       asserts="A Fetch at a negative offset answers OFFSET_OUT_OF_RANGE (1).",
       source="Kafka UnifiedLog.read (offset below the log start offset)")
def negative_offset(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, _ = _topic_with(ops, ["a"])
    result = ops.fetch(topic, 0, -5)
    expect_error(result.error, ErrorCode.OFFSET_OUT_OF_RANGE, "Fetch at offset -5")


@check("fetch.at_high_watermark_empty", api=API,
       asserts="A Fetch exactly at the high watermark is not out of range: it answers NONE with no "
               "records.",
       source="Kafka UnifiedLog.read (reading at the log end offset returns an empty set)")
def at_hwm(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["a", "b"])
    result = ops.fetch(topic, 0, offsets[-1] + 1)
    expect_error(result.error, ErrorCode.NONE, "Fetch at the high watermark")
    expect_eq(result.records, [], "records at the high watermark")


@check("fetch.empty_partition_earliest_not_out_of_range", api=API,
       asserts="A Fetch at ListOffsets EARLIEST of an empty partition answers NONE with no records "
               "(a new consumer starting at 'earliest' is not told out of range).",
       source="Kafka UnifiedLog.read at the log start offset of an empty log")
def empty_topic(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    earliest = ops.offset_of(topic, 0, EARLIEST)
    result = ops.fetch(topic, 0, earliest)
    expect_error(result.error, ErrorCode.NONE, "Fetch at EARLIEST of an empty partition")
    expect_eq(result.records, [], "records of an empty partition")


@check("fetch.unknown_topic_and_partition", api=API,
       asserts="A Fetch (v<=12, by name) for a missing topic, or for partition 7 of a 1-partition topic, "
               "answers UNKNOWN_TOPIC_OR_PARTITION (3) for that partition.",
       source="Kafka ReplicaManager.readFromLog / KafkaApis.handleFetchRequest")
def unknown_topic(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.FETCH, hi=12)
    result = ops.fetch(ctx.name("missing"), 0, 0, version=version)
    expect_error(result.error, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Fetch v{version} of a missing topic")
    topic = ops.create_topic()
    result = ops.fetch(topic, 7, 0, version=version)
    expect_error(result.error, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Fetch of partition 7")


@check("fetch.topic_id.unknown_id", api=API,
       asserts="A Fetch v13+ for a topic id no topic has answers UNKNOWN_TOPIC_ID (100).",
       source="KIP-516 (topic ids in Fetch v13)")
def unknown_topic_id(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.FETCH, lo=13)
    ghost = Topic(ctx.name("ghost"), 1, uuid.uuid4())
    result = ops.fetch(ghost, 0, 0, version=version)
    expect_error(result.error, ErrorCode.UNKNOWN_TOPIC_ID, f"Fetch v{version} of an unknown topic id")


@check("fetch.every_version_reads", api=API,
       asserts="Every Fetch version the broker advertises (by name up to v12, by topic id from v13) "
               "returns the produced records.",
       source=f"{JSON} (all versions)")
def every_version(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["x", "y"])
    versions = ctx.apis.versions(ApiKey.FETCH)
    ctx.note("versions", versions)
    for version in versions:
        result = ops.fetch(topic, 0, offsets[0], version=version)
        expect_error(result.error, ErrorCode.NONE, f"Fetch v{version}")
        expect_eq(result.values, [b"x", b"y"], f"Fetch v{version} values")


@check("fetch.partition_max_bytes.first_batch_always", api=API,
       asserts="With partition_max_bytes=1 (smaller than any batch) the first batch is still returned "
               "whole, so a consumer always makes progress.",
       source="KIP-74 (the first record batch is returned even if larger than the limit)")
def first_batch_always(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    base = ops.produce_ok(topic, 0, [Rec(b"z" * 3000)])
    result = ops.fetch(topic, 0, base, partition_max_bytes=1, max_bytes=1)
    expect_eq(result.values[:1], [b"z" * 3000], "first record despite a 1-byte limit")


@check("fetch.partition_max_bytes.limits_and_resumes", api=API,
       asserts="With partition_max_bytes=2500 over ten 1 KB batches, a Fetch returns fewer than all "
               "(but at least one) complete records, and fetching on from the next offset returns the "
               "rest without a gap.",
       source="Kafka protocol guide (partition_max_bytes; a trailing partial batch may be returned)")
def limits_and_resumes(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    values = [f"{i:02d}".encode() + b"." * 1000 for i in range(10)]
    first = ops.produce_values(topic, 0, [v.decode() for v in values])[0]
    result = ops.fetch(topic, 0, first, partition_max_bytes=2500)
    got = len(result.records)
    ctx.note("records_in_first_fetch", got)
    ctx.note("partial_bytes", result.partial_bytes)
    expect(1 <= got < 10, f"first fetch returned {got} complete records with a 2500-byte limit")
    rest = ops.read_all(topic, 0, result.records[-1].offset + 1, partition_max_bytes=2500)
    expect_eq([r.value for r in result.records + rest], values, "records across size-limited fetches")


@check("fetch.max_bytes.limits_response", api=API,
       asserts="With max_bytes=1 over two partitions that both have data, the response holds the "
               "first partition's first batch and no records for the second (response-wide limit).",
       source="KIP-74 (max_bytes for the whole response; partitions filled in request order)")
def max_bytes(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=2)
    a = ops.produce_ok(topic, 0, [Rec(b"p0" * 500)])
    b = ops.produce_ok(topic, 1, [Rec(b"p1" * 500)])
    _, results = ops.fetch_many([(topic, 0, a), (topic, 1, b)], max_bytes=1, partition_max_bytes=1 << 20)
    by_values = [r.values for r in results]
    ctx.note("values_per_partition", [[len(v or b"") for v in vs] for vs in by_values])
    expect_eq(len(results), 2, "partitions answered")
    expect_eq(by_values[0][:1], [b"p0" * 500], "records of the first partition")
    expect_eq(by_values[1], [], "records of the second partition past max_bytes")


@check("fetch.multiple_partitions", api=API,
       asserts="One Fetch for three partitions returns each partition's own records.",
       source=JSON)
def multiple_partitions(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(partitions=3)
    starts = [ops.produce_ok(topic, p, [Rec(f"p{p}".encode())]) for p in range(3)]
    _, results = ops.fetch_many([(topic, p, starts[p]) for p in range(3)])
    expect_eq(sorted(r.values[0] for r in results if r.values), [b"p0", b"p1", b"p2"], "values per partition")


@check("fetch.gaps.next_offset_after_last_record", api=API,
       asserts="Fetching from (offset of the last record received) + 1 returns the next produced "
               "record, whether or not offsets are dense; this is how every consumer advances.",
       source="Kafka consumer position semantics (position = last consumed offset + 1); Jepsen notes "
              "that offsets may be sparse")
def next_after_last(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    ops.produce_values(topic, 0, ["one"])
    time.sleep(0.01)
    ops.produce_values(topic, 0, ["two"])
    first = ops.fetch(topic, 0, ops.offset_of(topic, 0, EARLIEST))
    expect(bool(first.records), "no record at EARLIEST")
    one = [r for r in first.records if r.value == b"one"]
    expect(bool(one), "first record missing")
    nxt = ops.fetch(topic, 0, one[0].offset + 1)
    expect_eq(nxt.values[:1], [b"two"], "record after last offset + 1")


@check("fetch.gaps.transaction_marker_occupies_offset", api=API, kafka_exact=True,
       asserts="After a committed transaction of 3 records, the commit marker takes the next offset: "
               "the high watermark is 4 past the first record, the next produce lands there, and a "
               "consumer reading across the gap skips the marker.",
       source="KIP-98 (control records occupy offsets); Jepsen 'offsets may be sparse'")
def transaction_marker_gap(ctx: CheckContext) -> None:
    from korvet.conformance.harness.drivers import confluent_transaction

    ops = Ops(ctx)
    topic = ops.create_topic()
    confluent_transaction(ctx, topic.name, [b"t1", b"t2", b"t3"], commit=True)
    first = ops.offset_of(topic, 0, EARLIEST)
    # The commit marker is written just after EndTxn returns (KIP-890): wait for it to land.
    wait_until(lambda: ops.offset_of(topic, 0, LATEST) >= first + 4, 15,
               "the commit marker taking the offset after the 3 records")
    after = ops.produce_ok(topic, 0, [Rec(b"after")])
    ctx.note("first_offset", first)
    ctx.note("next_produce_offset", after)
    expect_eq(after, first + 4, "offset of the record produced after a 3-record transaction")
    records = ops.read_all(topic, 0, first, isolation_level=1)
    expect_eq([r.value for r in records], [b"t1", b"t2", b"t3", b"after"], "records read across the marker")
    expect_eq([r.offset for r in records], [first, first + 1, first + 2, first + 4], "their offsets")


@check("fetch.read_committed.lists_aborted_transactions", api=API,
       asserts="After an aborted transaction, a read_committed Fetch lists it in aborted_transactions "
               "(its producer id and first offset) so the client drops its records, and the abort "
               "marker batch follows them; read_uncommitted lists no aborted transactions.",
       source="KIP-98 (isolation levels, aborted transaction index; FetchResponse AbortedTransactions)")
def lists_aborted(ctx: CheckContext) -> None:
    from korvet.conformance.harness.drivers import confluent_transaction

    ops = Ops(ctx)
    topic = ops.create_topic()
    confluent_transaction(ctx, topic.name, [b"aborted-1", b"aborted-2"], commit=False)
    start = ops.offset_of(topic, 0, EARLIEST)
    # The abort marker is written just after EndTxn returns (KIP-890): wait for it to land.
    wait_until(lambda: ops.offset_of(topic, 0, LATEST, isolation_level=1) >= start + 3, 15,
               "the abort marker closing the transaction (read_committed LATEST past it)")
    ops.produce_ok(topic, 0, [Rec(b"visible")])
    committed = ops.fetch(topic, 0, start, isolation_level=1)
    aborted = [(int(a.producer_id), int(a.first_offset)) for a in committed.aborted]
    ctx.note("aborted_transactions", aborted)
    data_batches = [b for b in committed.batches if not b.control]
    expect(bool(data_batches) and data_batches[0].transactional, "the first batch is not transactional")
    expect_eq(aborted, [(data_batches[0].producer_id, start)],
              "aborted transactions (producer id, first offset)")
    expect(any(b.control for b in committed.batches), "no control (abort marker) batch was fetched")
    uncommitted = ops.fetch(topic, 0, start, isolation_level=0)
    expect_eq(uncommitted.aborted, [], "aborted transactions listed to read_uncommitted")
    expect_eq(uncommitted.values, [b"aborted-1", b"aborted-2", b"visible"], "read_uncommitted values")


@check("fetch.last_stable_offset_equals_hwm", api=API,
       asserts="Without open transactions, Fetch v4+ reports last_stable_offset equal to the high "
               "watermark, for read_committed and read_uncommitted.",
       source="KIP-98 (LastStableOffset in Fetch v4)")
def lso(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["a", "b"])
    for isolation in (0, 1):
        result = ops.fetch(topic, 0, offsets[0], isolation_level=isolation)
        expect_eq(result.last_stable_offset, result.high_watermark,
                  f"last stable offset (isolation {isolation})")


@check("fetch.sessions.full_fetch_without_session", api=API,
       asserts="A Fetch v7+ with session_id=0 and session_epoch=-1 (no session) is a full fetch: it "
               "answers with session_id 0 and the records.",
       source="KIP-227 (fetch sessions: epoch -1 = sessionless full fetch)")
def sessionless(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["s"])
    result = ops.fetch(topic, 0, offsets[0], session_id=0, session_epoch=-1,
                       version=ops.v(ApiKey.FETCH, lo=7))
    expect_eq(result.session_id, 0, "session id of a sessionless fetch")
    expect_eq(result.values, [b"s"], "records")


@check("fetch.sessions.incremental_fetch_sees_new_data", api=API,
       asserts="A Fetch v7+ with session_epoch=0 either opens a session (session_id != 0; the next "
               "incremental fetch with epoch 1 and no partitions returns the session partition's new "
               "records) or answers session_id 0 (no session, which KIP-227 allows).",
       source="KIP-227 (incremental fetch requests)")
def incremental(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.FETCH, lo=7)
    topic = ops.create_topic()
    end = ops.offset_of(topic, 0, LATEST)
    _, results = ops.fetch_many([(topic, 0, end)], session_id=0, session_epoch=0, version=version)
    session = results[0].session_id
    ctx.note("session_id", session)
    if session == 0:
        return
    ops.produce_ok(topic, 0, [Rec(b"incremental")])
    request = ops.fetch_request([], session_id=session, session_epoch=1, version=version)
    response = ops.conn.call(request)
    expect_error(response.error_code, ErrorCode.NONE, "incremental fetch")
    values = [r.value for t in response.responses for p in t.partitions
              for r in fetch_result(response, p).records]
    expect_eq(values, [b"incremental"], "records from the incremental fetch")


@check("fetch.sessions.unknown_session_refused", api=API,
       asserts="An incremental Fetch (epoch 1) naming a session id the broker never gave answers "
               "FETCH_SESSION_ID_NOT_FOUND (70) at the top level.",
       source="KIP-227; FetchSessionCache / Errors.FETCH_SESSION_ID_NOT_FOUND")
def unknown_session(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    request = ops.fetch_request([], session_id=123_456_789, session_epoch=1,
                                version=ops.v(ApiKey.FETCH, lo=7))
    response = ops.conn.call(request)
    expect_error(response.error_code, ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                 "incremental fetch of an unknown session")


@check("fetch.leader_epoch.future_epoch_refused", api=API,
       asserts="A Fetch v9+ with current_leader_epoch above the partition's leader epoch (from "
               "Metadata) answers UNKNOWN_LEADER_EPOCH (75); with the current epoch it answers NONE.",
       source="KIP-320 (leader epoch fencing in Fetch)")
def future_epoch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["e"])
    epoch = ops.leader_epoch(topic.name)
    ctx.note("leader_epoch", epoch)
    result = ops.fetch(topic, 0, offsets[0], current_leader_epoch=epoch + 5,
                       version=ops.v(ApiKey.FETCH, lo=9))
    expect_error(result.error, ErrorCode.UNKNOWN_LEADER_EPOCH, f"Fetch with current_leader_epoch {epoch + 5}")
    ok = ops.fetch(topic, 0, offsets[0], current_leader_epoch=epoch, version=ops.v(ApiKey.FETCH, lo=9))
    expect_error(ok.error, ErrorCode.NONE, f"Fetch with the current leader epoch {epoch}")


@check("fetch.last_fetched_epoch.past_its_end_diverges", api=API,
       asserts="A Fetch v12+ naming the partition's current epoch as the epoch it last fetched "
               "reads on from an offset inside the log; from an offset past the log's end it "
               "answers NONE, no records and diverging_epoch (that epoch, the log end offset): "
               "the fetcher's log goes further than the partition's.",
       source="KIP-595 (diverging epoch in Fetch); Kafka Partition.readRecords")
def last_fetched_epoch_diverges(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with(ops, ["a", "b"])
    hw = offsets[-1] + 1
    epoch = ops.leader_epoch(topic.name)
    version = ops.v(ApiKey.FETCH, lo=12)
    inside = ops.fetch(topic, 0, offsets[1], current_leader_epoch=epoch, last_fetched_epoch=epoch,
                       version=version)
    expect_error(inside.error, ErrorCode.NONE, f"Fetch at offset {offsets[1]}, last epoch {epoch}")
    expect_eq(([r.value for r in inside.records if r.offset >= offsets[1]], inside.diverging),
              ([b"b"], None), "(records, diverging epoch) inside the log")
    past = ops.fetch(topic, 0, hw + 3, current_leader_epoch=epoch, last_fetched_epoch=epoch,
                     version=version)
    expect_error(past.error, ErrorCode.NONE, f"Fetch at offset {hw + 3}, last epoch {epoch}")
    expect_eq((past.records, past.diverging), ([], (epoch, hw)),
              "(records, diverging epoch) past the log's end")


@check("fetch.position_from_empty_partition_reads_first_record", api=API,
       asserts="A consumer that took its position on an empty partition (ListOffsets EARLIEST and "
               "LATEST) and fetches there after records arrive gets the first record, not "
               "OFFSET_OUT_OF_RANGE: a consumer started before its producer misses nothing.",
       source="Kafka log semantics (an empty log's start and end offset is where its first record "
              "goes); auto.offset.reset=earliest/latest on a new topic")
def position_from_empty(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    earliest = ops.offset_of(topic, 0, EARLIEST)
    latest = ops.offset_of(topic, 0, LATEST)
    ctx.note("empty_partition_earliest_latest", [earliest, latest])
    ops.produce_values(topic, 0, ["first", "second"])
    for name, position in (("EARLIEST", earliest), ("LATEST", latest)):
        result = ops.fetch(topic, 0, position)
        expect_error(result.error, ErrorCode.NONE,
                     f"Fetch at the {name} offset taken while the partition was empty")
        expect_eq([r.value for r in result.records if r.offset >= position][:1], [b"first"],
                  f"first record fetched from the empty partition's {name}")
