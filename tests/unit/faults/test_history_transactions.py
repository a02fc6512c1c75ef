"""The history checker on transactional histories: each transactional anomaly is named, a
clean history passes.

The clean history has one producer's four transactions over two partitions: one whose
commit was acknowledged, one whose abort was, and two of unknown fate (the first ended
committed, the second aborted; both are allowed). Its markers take offsets, so the
read_committed read-back skips offsets, as Kafka's does.

Apache Kafka sometimes completes a transaction without writing its marker to a partition
(``MarkersSkipped``, read from its log: korvet.faults.kafka_log): what that does to that
transaction on that partition is allowed, and nothing else.
"""

from __future__ import annotations

from korvet.faults.history import (
    ABORTED,
    ABORTED_READ,
    COMMITTED,
    DUPLICATE,
    LOST_COMMITTED,
    READ_GONE,
    TORN,
    UNCOMMITTED_READ,
    UNKNOWN,
    Assigned,
    Consumed,
    Event,
    MarkersSkipped,
    Rec,
    Stored,
    TxnEnded,
    TxnSent,
    check,
    cost,
    read_history,
    to_json,
)

X = [Rec("txn0", seq) for seq in range(7)]


def _txn(txn: int, records: list[tuple[Rec, int]], commit: bool, outcome: str,
         at: float) -> list[Event]:
    return [TxnSent("txn0", txn, tuple(records), commit, at),
            TxnEnded("txn0", txn, outcome, requested=at + 0.1, at=at + 0.2)]


def clean() -> list[Event]:
    return [
        *_txn(1, [(X[0], 0), (X[1], 1)], True, COMMITTED, at=1.0),
        *_txn(2, [(X[2], 0), (X[3], 1)], False, ABORTED, at=2.0),
        *_txn(3, [(X[4], 0), (X[5], 1)], True, UNKNOWN, at=3.0),
        *_txn(4, [(X[6], 0)], True, UNKNOWN, at=4.0),
        Assigned("reader0", -1, (0, 1), at=0.0),
        Consumed("reader0", 0, 0, X[0], at=1.3), Consumed("reader0", 1, 0, X[1], at=1.3),
        Consumed("reader0", 0, 4, X[4], at=3.5),
        # partition 0: X0, marker, X2 (aborted), marker, X4, marker, X6 (aborted), marker
        Stored(0, 0, X[0]), Stored(0, 4, X[4]),
        Stored(1, 0, X[1]), Stored(1, 4, X[5]),
    ]


def kinds(events: list[Event]) -> list[str]:
    return [a.kind for a in check(events).anomalies]


def without(*dropped: Event) -> list[Event]:
    return [e for e in clean() if e not in dropped]


def test_a_clean_transactional_history_passes() -> None:
    report = check(clean())
    assert report.clean, report.anomalies
    assert report.transactions == {COMMITTED: 1, ABORTED: 1, UNKNOWN: 2}


def test_a_record_of_an_acknowledged_abort_read_during_the_run() -> None:
    events = [*clean(), Consumed("reader0", 0, 2, X[2], at=2.5)]
    assert kinds(events) == [READ_GONE, ABORTED_READ]
    assert "abort was acknowledged" in check(events).anomalies[1].detail


def test_an_aborted_transaction_readable_at_the_end() -> None:
    events = [*clean(), Stored(0, 2, X[2]), Stored(1, 2, X[3])]
    assert kinds(events) == [ABORTED_READ]
    assert "txn0#2: abort acknowledged" in check(events).anomalies[0].detail


def test_a_read_of_an_unknown_transaction_the_end_shows_not_committed() -> None:
    events = [*clean(), Consumed("reader0", 0, 6, X[6], at=4.5)]
    assert kinds(events) == [READ_GONE, ABORTED_READ]


def test_a_transaction_readable_in_part_is_torn() -> None:
    assert kinds(without(Stored(1, 4, X[5]))) == [TORN]


def test_a_committed_transaction_missing_a_record_is_lost_and_torn() -> None:
    events = without(Stored(1, 0, X[1]), Consumed("reader0", 1, 0, X[1], at=1.3))
    assert kinds(events) == [TORN, LOST_COMMITTED]
    lost = without(Stored(0, 0, X[0]), Stored(1, 0, X[1]),
                   Consumed("reader0", 0, 0, X[0], at=1.3),
                   Consumed("reader0", 1, 0, X[1], at=1.3))
    assert kinds(lost) == [LOST_COMMITTED]


def test_a_read_before_the_commit_was_asked_for_is_beyond_the_lso() -> None:
    early = [*without(Consumed("reader0", 0, 0, X[0], at=1.3)),
             Consumed("reader0", 0, 0, X[0], at=1.05)]
    assert kinds(early) == [UNCOMMITTED_READ]
    # after the commit was asked for, before it returned: the commit may be done already
    meanwhile = [*without(Consumed("reader0", 0, 0, X[0], at=1.3)),
                 Consumed("reader0", 0, 0, X[0], at=1.15)]
    assert kinds(meanwhile) == []


def test_a_transactional_record_stored_twice_is_a_duplicate() -> None:
    assert kinds([*clean(), Stored(0, 8, X[0])]) == [DUPLICATE]


def test_a_transactional_history_survives_its_file() -> None:
    events = clean()
    assert read_history(to_json(e) + "\n" for e in events) == events


def test_what_a_fault_cost_transactions() -> None:
    """A fault from 3.0 to 3.15 s: transaction 3's end was asked for at 3.1 and told at 3.2
    (unknown: given up); transaction 4's end was asked for after the heal."""
    found = cost(clean(), start=3.0, end=3.15, settle=1.0)
    assert (round(found.ack_wait, 3), found.failed) == (0.1, 1)
    assert round(found.read_gap, 3) == 0.65  # from the read at 3.5 to 1 s after the heal
    blocked = cost(clean(), start=4.15, end=4.16, settle=0.0)  # transaction 4 waits through it
    assert (round(blocked.ack_wait, 3), blocked.failed) == (0.1, 1)


def _lost_on_partition_1() -> list[Event]:
    """Transaction 1 (commit acknowledged) without its record on partition 1."""
    return without(Stored(1, 0, X[1]), Consumed("reader0", 1, 0, X[1], at=1.3))


def test_a_commit_whose_marker_kafka_skipped_is_allowed_as_kafkas() -> None:
    """Kafka's coordinator started transaction 1 at 1.05 s and skipped its marker on
    partition 1: the record there took the fate of the producer's next transaction."""
    events = [*_lost_on_partition_1(), MarkersSkipped("txn0", (1,), "COMMIT", started=1.05)]
    report = check(events)
    assert report.clean, report.anomalies
    assert report.unmarked == 1
    assert [a.kind for a in report.allowed_unmarked] == [TORN, LOST_COMMITTED]


def test_a_skipped_marker_explains_only_its_own_partitions_and_transaction() -> None:
    other_partition = MarkersSkipped("txn0", (0,), "COMMIT", started=1.05)
    next_transaction = MarkersSkipped("txn0", (1,), "ABORT", started=2.05)
    other_producer = MarkersSkipped("txn1", (1,), "COMMIT", started=1.05)
    for skip in (other_partition, next_transaction, other_producer):
        report = check([*_lost_on_partition_1(), skip])
        assert [a.kind for a in report.anomalies] == [TORN, LOST_COMMITTED], skip
        assert report.allowed_unmarked == (), skip


def _held_back(resolved: bool, sent_at: float = 2.0) -> list[Event]:
    """txn0's transaction 1 (partitions 0 and 1) lost its marker on partition 1, and txn1's
    transaction sent at ``sent_at`` wrote there too; with ``resolved`` txn0's next
    transaction writes to partition 1 and commits (its marker ends the open one)."""
    a, b = [Rec("txn0", 0), Rec("txn0", 1)], [Rec("txn1", 0), Rec("txn1", 1)]
    events: list[Event] = [
        TxnSent("txn0", 1, ((a[0], 0), (a[1], 1)), True, 1.0),
        TxnEnded("txn0", 1, COMMITTED, requested=1.1, at=1.2),
        TxnSent("txn1", 1, ((b[0], 0), (b[1], 1)), True, sent_at),
        TxnEnded("txn1", 1, COMMITTED, requested=sent_at + 0.1, at=sent_at + 0.2),
        Stored(0, 0, a[0]), Stored(0, 2, b[0]),
        MarkersSkipped("txn0", (1,), "COMMIT", started=1.05)]
    if resolved:
        c = Rec("txn0", 2)
        events += [TxnSent("txn0", 2, ((c, 1),), True, 3.0),
                   TxnEnded("txn0", 2, COMMITTED, requested=3.1, at=3.2), Stored(1, 5, c)]
    return events


def test_a_partition_a_skipped_marker_left_open_hides_what_others_wrote_after() -> None:
    """Kafka's partition 1 keeps txn0's transaction open (its marker skipped) and its last
    stable offset there: txn1's committed record sent after it is never readable (a fault
    run on Kafka 4.3.1, 2026-11-30: txn2#122 behind txn0#119). Kafka's fault, allowed; not
    once txn0 ended a later transaction on partition 1, nor for a record sent before."""
    report = check(_held_back(resolved=False))
    assert report.clean, report.anomalies
    assert sorted(a.kind for a in report.allowed_unmarked) == [LOST_COMMITTED, LOST_COMMITTED,
                                                                TORN, TORN]
    for events in (_held_back(resolved=True), _held_back(resolved=False, sent_at=0.5)):
        found = check(events)
        assert sorted(a.kind for a in found.anomalies) == [LOST_COMMITTED, TORN]
        assert all("txn1#1" in a.detail for a in found.anomalies)


def test_an_abort_whose_marker_kafka_skipped_may_be_read() -> None:
    """Transaction 2's abort was acknowledged; Kafka skipped its marker on partition 0 and
    the producer's next transaction there committed it: read during the run and at the
    end. The same read on partition 1, where the marker was written, is an aborted read."""
    skip = MarkersSkipped("txn0", (0,), "ABORT", started=2.05)
    read = [*clean(), Consumed("reader0", 0, 2, X[2], at=2.5), Stored(0, 2, X[2]), skip]
    report = check(read)
    assert report.clean, report.anomalies
    assert sorted(a.kind for a in report.allowed_unmarked) == [ABORTED_READ, ABORTED_READ, TORN]
    elsewhere = [*clean(), Consumed("reader0", 1, 2, X[3], at=2.5), Stored(1, 2, X[3]), skip]
    assert sorted(kinds(elsewhere)) == [ABORTED_READ, ABORTED_READ, TORN]
