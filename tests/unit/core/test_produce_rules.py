"""Kafka's Produce rules as the pure core states them (korvet/core/produce.py)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from korvet.core import produce as rules
from korvet.core.errors import ErrorCode
from korvet.core.produce import AppendStatus
from korvet.core.topics import TopicConfig, TopicInfo

NOW = 1_700_000_000_000
Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class FakeBatch:
    size: int
    transactional: bool
    control: bool
    records: list[tuple[int, bytes | None, bytes | None, list[Header]]]

    @property
    def timestamps(self) -> list[int]:
        return [record[0] for record in self.records]

    @property
    def keyless(self) -> list[int]:
        return [i for i, record in enumerate(self.records) if record[1] is None]


def batch(stamps: list[int], size: int = 100, transactional: bool = False,
          control: bool = False) -> FakeBatch:
    return FakeBatch(size, transactional, control, [(t, None, b"v", []) for t in stamps])


@given(st.integers(min_value=-(2**15), max_value=2**15 - 1), st.none() | st.text(max_size=5))
def test_only_acks_refuse_the_whole_request(acks: int, txn: str | None) -> None:
    """A transactional id is no refusal of its own (the authorizer checks WRITE on it)."""
    refusal = rules.check_request(acks, txn)
    if acks not in (0, 1, -1):
        assert refusal is not None and refusal.code is ErrorCode.INVALID_REQUIRED_ACKS
    else:
        assert refusal is None


@given(st.integers(min_value=-5, max_value=20), st.integers(min_value=1, max_value=10),
       st.booleans())
def test_only_existing_partitions_of_known_topics_are_written(partition: int, partitions: int,
                                                              by_id: bool) -> None:
    unknown = rules.check_partition(None, partition, partitions, by_id=by_id)
    assert unknown is not None
    assert unknown.code is (ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    known = rules.check_partition("t", partition, partitions, by_id=by_id)
    if 0 <= partition < partitions:
        assert known is None
    else:
        assert known is not None and known.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@given(st.integers(min_value=0, max_value=5))
def test_exactly_one_batch_per_partition(count: int) -> None:
    refusal = rules.check_batch_count(count)
    assert (refusal is None) == (count == 1)
    if refusal is not None:
        assert refusal.code is ErrorCode.INVALID_RECORD


offsets_ms = st.integers(min_value=-10 * 3_600_000, max_value=10 * 3_600_000)


@given(st.lists(offsets_ms, min_size=1, max_size=20),
       st.integers(min_value=0, max_value=7_200_000), st.integers(min_value=0, max_value=7_200_000))
def test_timestamps_outside_the_topic_bounds_are_named_record_by_record(
        deltas: list[int], after: int, before: int) -> None:
    config = TopicConfig({"message.timestamp.after.max.ms": str(after),
                          "message.timestamp.before.max.ms": str(before)})
    refusal = rules.check_batch(batch([NOW + d for d in deltas]), config, NOW)
    bad = [i for i, d in enumerate(deltas) if d > after or d < -before]
    if not bad:
        assert refusal is None
    else:
        assert refusal is not None and refusal.code is ErrorCode.INVALID_TIMESTAMP
        assert [index for index, _ in refusal.record_errors] == bad


@given(st.lists(st.booleans(), min_size=1, max_size=10),
       st.sampled_from(["compact", "compact,delete", "delete", ""]))
def test_a_compacted_topic_refuses_records_without_a_key(keyed: list[bool], policy: str) -> None:
    """Kafka's LogValidator: a compacted topic's cleaner could not keep a keyless record, so
    the batch is refused whole (INVALID_RECORD), each keyless record named."""
    config = TopicConfig({"cleanup.policy": policy})
    records: list[tuple[int, bytes | None, bytes | None, list[Header]]] = [
        (NOW, b"k" if k else None, b"v", []) for k in keyed]
    refusal = rules.check_batch(FakeBatch(100, False, False, records), config, NOW)
    keyless = [i for i, k in enumerate(keyed) if not k]
    if "compact" in policy and keyless:
        assert refusal is not None and refusal.code is ErrorCode.INVALID_RECORD
        assert [index for index, _ in refusal.record_errors] == keyless
    else:
        assert refusal is None


@given(st.lists(offsets_ms, min_size=1, max_size=10))
def test_log_append_time_topics_ignore_the_producers_timestamps(deltas: list[int]) -> None:
    config = TopicConfig({"message.timestamp.type": "LogAppendTime",
                          "message.timestamp.after.max.ms": "0",
                          "message.timestamp.before.max.ms": "0"})
    assert rules.check_batch(batch([NOW + d for d in deltas]), config, NOW) is None


@given(st.integers(min_value=1, max_value=10_000), st.integers(min_value=1, max_value=10_000),
       st.booleans(), st.booleans(), st.booleans())
def test_size_and_transactions_are_checked_before_timestamps(size: int, limit: int,
                                                            transactional: bool,
                                                            control: bool,
                                                            in_transaction: bool) -> None:
    """A control batch is never a producer's; a transactional one only in a request with a
    transactional id."""
    config = TopicConfig({"max.message.bytes": str(limit)})
    ahead = NOW + 10 * 3_600_000  # ten hours ahead: beyond the default bound of one hour
    refusal = rules.check_batch(batch([ahead], size, transactional, control), config, NOW,
                                in_transaction)
    assert refusal is not None
    if control or (transactional and not in_transaction):
        assert refusal.code is ErrorCode.INVALID_RECORD
    elif size > limit:
        assert refusal.code is ErrorCode.MESSAGE_TOO_LARGE
    else:
        assert refusal.code is ErrorCode.INVALID_TIMESTAMP


def test_every_append_status_has_the_error_kafka_clients_expect() -> None:
    expected = {
        AppendStatus.OK: None,
        AppendStatus.DUPLICATE: None,  # the original offsets are the answer
        AppendStatus.NO_TOPIC: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        AppendStatus.NO_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        AppendStatus.OUT_OF_ORDER: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        AppendStatus.BAD_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
        AppendStatus.FULL: ErrorCode.KAFKA_STORAGE_ERROR,
        # a transaction marker below the last marker's coordinator epoch (WriteTxnMarkers)
        AppendStatus.FENCED: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        # on the master, not confirmed by redis.wait-replicas replicas: retriable
        AppendStatus.NOT_REPLICATED: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
    assert set(expected) == set(AppendStatus)
    for status, code in expected.items():
        refusal = rules.append_refusal(status, "t", 0, 7, 1, 5)
        assert (refusal.code if refusal else None) is code, status
    assert rules.storage_refusal("down").code is ErrorCode.KAFKA_STORAGE_ERROR


_UNREACHABLE = rules.storage_refusal("the topic registry's master is down")
_CORRUPT = rules.Refusal(ErrorCode.CORRUPT_MESSAGE, "CRC mismatch")


@given(acks=st.sampled_from([0, 1, -1, 2]), txn=st.none() | st.just("t-1"),
       lookup_fails=st.booleans(), known=st.booleans(), partition=st.integers(-1, 3),
       decoded=st.sampled_from(["corrupt", "none", "one", "two"]),
       too_large=st.booleans(), stamp_offset=st.sampled_from([0, 10**9]), by_id=st.booleans())
def test_a_partition_gets_the_first_refusal_in_kafkas_order(
        acks: int, txn: str | None, lookup_fails: bool, known: bool, partition: int, decoded: str,
        too_large: bool, stamp_offset: int, by_id: bool) -> None:
    """``accept`` answers what Kafka answers: the request's own error (acks), the topic
    lookup's failure, an unknown topic or partition, a batch that
    does not decode, not exactly one batch, then the batch's own checks (size before
    timestamps); and it decodes the records only when everything before that passed."""
    config = TopicConfig({"max.message.bytes": "1000"})
    topic = TopicInfo("t", "00000000-0000-0000-0000-000000000001", 3, config) if known else None
    good = batch([NOW + stamp_offset], size=5000 if too_large else 100)
    decodes: list[str] = []

    def batches() -> list[FakeBatch] | rules.Refusal:
        decodes.append(decoded)
        if decoded == "corrupt":
            return _CORRUPT
        return {"none": [], "one": [good], "two": [good, good]}[decoded]

    verdict = rules.accept(rules.check_request(acks, txn), _UNREACHABLE if lookup_fails else None,
                           topic, partition, by_id=by_id, batches=batches, now_ms=NOW)

    unknown = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    before_decoding = [  # Kafka's order: the first that holds is the answer
        (acks not in (0, 1, -1), ErrorCode.INVALID_REQUIRED_ACKS),
        (lookup_fails, ErrorCode.KAFKA_STORAGE_ERROR),
        (not known, unknown),
        (not 0 <= partition < 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    after_decoding = [
        (decoded == "corrupt", ErrorCode.CORRUPT_MESSAGE),
        (decoded != "one", ErrorCode.INVALID_RECORD),
        (too_large, ErrorCode.MESSAGE_TOO_LARGE),
        (stamp_offset != 0, ErrorCode.INVALID_TIMESTAMP)]
    refused_early = next((code for holds, code in before_decoding if holds), None)
    expected = refused_early or next((code for holds, code in after_decoding if holds), None)
    assert decodes == ([] if refused_early else [decoded])
    if expected is None:
        assert verdict is good
    else:
        assert isinstance(verdict, rules.Refusal) and verdict.code is expected


def test_a_gap_behind_a_failed_batch_is_retriable() -> None:
    """Rule 7: after producer 7's batch from sequence 10 failed on its way to Redis, a later
    batch of that partition that the script finds out of order is behind it (answered with
    the retriable error); once a batch of the producer is stored there, nothing is. Other
    partitions, producers and epochs are not concerned."""
    gaps = rules.SequenceGaps()
    gaps.failed("p0", 7, 0, 10)
    gaps.failed("p0", 7, 0, 15)  # a later failure keeps the first sequence to send again
    assert gaps.behind("p0", 7, 0, 11) and gaps.behind("p0", 7, 0, 16)
    assert not gaps.behind("p0", 7, 0, 10)  # the failed batch itself: a real refusal
    assert not gaps.behind("p1", 7, 0, 15) and not gaps.behind("p0", 8, 0, 15)
    assert not gaps.behind("p0", 7, 1, 15)
    gaps.stored("p0", 7)
    assert not gaps.behind("p0", 7, 0, 16)
    refusal = rules.gap_refusal(7, 15)
    assert refusal.code is ErrorCode.KAFKA_STORAGE_ERROR and "send it again" in refusal.message


def test_the_gaps_kept_are_bounded_and_the_oldest_failure_goes_first() -> None:
    """Rule 7's table does not grow for ever with producers that failed and went away: past
    its limit the oldest failure is forgotten (its producer gets the script's refusal back),
    and a producer failing again counts as the newest."""
    gaps = rules.SequenceGaps(limit=3)
    for producer in range(3):
        gaps.failed("p0", producer, 0, 10)
    gaps.failed("p0", 0, 1, 4)  # producer 0 fails again under a new epoch: now the newest
    gaps.failed("p0", 3, 0, 10)  # a fourth: producer 1's, the oldest, is forgotten
    assert len(gaps) == 3
    assert not gaps.behind("p0", 1, 0, 11)
    assert gaps.behind("p0", 0, 1, 5) and gaps.behind("p0", 2, 0, 11) and gaps.behind("p0", 3, 0, 11)
    broker = rules.SequenceGaps()  # the handler's: 10,000 kept
    for producer in range(10_001):
        broker.failed("p1", producer, 0, 1)
    assert len(broker) == 10_000
    assert not broker.behind("p1", 0, 0, 2) and broker.behind("p1", 10_000, 0, 2)
