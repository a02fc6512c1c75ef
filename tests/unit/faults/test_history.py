"""The history checker on hand-written histories: each anomaly found, a clean history passes.

The Hypothesis laws build a correct run (producers' records appended in order, consumers
reading and committing forwards, rebalances handing partitions over) and then break it in
one place the way a broker could: the checker must stay silent on the first and name the
break on the second.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.faults.history import (
    COMMIT_BACK,
    COMMIT_IGNORED,
    DUPLICATE,
    LOST,
    MOVED,
    OUT_OF_ORDER,
    READ_GONE,
    TWO_OWNERS,
    WENT_BACK,
    Acked,
    Assigned,
    Committed,
    CommittedRead,
    Consumed,
    Cost,
    Event,
    Rec,
    Sent,
    Stored,
    check,
    cost,
    from_json,
    read_history,
    to_json,
)
from tests.support.examples import examples

A1, A2, A3 = Rec("idem", 0), Rec("idem", 1), Rec("idem", 2)
B1, B2 = Rec("plain", 0), Rec("plain", 1)


def _produced(rec: Rec, partition: int, offset: int, *, idempotent: bool = True) -> list[Event]:
    return [Sent(rec, idempotent=idempotent, ordered=True, at=0.0),
            Acked(rec, partition, offset, at=0.1)]


def clean() -> list[Event]:
    """Two producers on partition 0; c1 reads and commits, then c2 takes over in generation 2."""
    return [
        *_produced(A1, 0, 0), *_produced(A2, 0, 1), *_produced(B1, 0, 2, idempotent=False),
        *_produced(A3, 0, 3), *_produced(B2, 0, 4, idempotent=False),
        Assigned("c1", 1, (0,), at=1.0),
        Consumed("c1", 0, 0, A1, at=1.1), Consumed("c1", 0, 1, A2, at=1.2),
        Committed("c1", 0, 2, started=1.3, ended=1.4),
        Consumed("c1", 0, 2, B1, at=1.5),
        Assigned("c1", 2, (), at=2.0), Assigned("c2", 2, (0,), at=2.0),
        Consumed("c2", 0, 2, B1, at=2.1), Consumed("c2", 0, 3, A3, at=2.2),
        Consumed("c2", 0, 4, B2, at=2.3),
        Committed("c2", 0, 5, started=2.4, ended=2.5),
        CommittedRead(0, 5, started=3.0, ended=3.1),
        *[Stored(0, o, r) for o, r in enumerate((A1, A2, B1, A3, B2))],
    ]


def kinds(events: list[Event]) -> list[str]:
    return [a.kind for a in check(events).anomalies]


def test_a_clean_history_passes() -> None:
    report = check(clean())
    assert report.clean, report.anomalies
    assert (report.sent, report.acknowledged, report.stored, report.consumed, report.commits) == (
        5, 5, 5, 6, 2)


def test_an_acknowledged_record_missing_at_the_end_is_lost() -> None:
    events = [e for e in clean() if e != Stored(0, 3, A3)]
    assert kinds(events) == [LOST, READ_GONE]
    assert "idem:2 acknowledged at partition 0 offset 3" in check(events).anomalies[0].detail


def test_a_record_stored_elsewhere_than_acknowledged_is_moved() -> None:
    events = [*clean(), *_produced(Rec("idem", 3), 0, 7)]
    events.append(Stored(0, 5, Rec("idem", 3)))
    assert kinds(events) == [MOVED]


def test_an_idempotent_duplicate_is_reported_and_a_plain_one_is_allowed() -> None:
    assert kinds([*clean(), Stored(0, 5, A2)]) == [DUPLICATE]
    report = check([*clean(), Stored(0, 5, B2)])
    assert report.clean and report.allowed_duplicates == 1


def test_records_stored_out_of_their_producers_order() -> None:
    events: list[Event] = [e for e in clean()
                           if not isinstance(e, Stored | Consumed | Committed | CommittedRead)]
    events += [Stored(0, 0, A2), Stored(0, 1, A1), Stored(0, 2, B1), Stored(0, 3, A3),
               Stored(0, 4, B2)]
    events = [replace(e, offset={A1: 1, A2: 0}.get(e.rec, e.offset)) if isinstance(e, Acked) else e
              for e in events]
    assert kinds(events) == [OUT_OF_ORDER]
    unordered: list[Event] = [replace(e, ordered=False) if isinstance(e, Sent) else e
                              for e in events]
    assert kinds(unordered) == [] and check(unordered).allowed_reorders == 1


def test_a_read_whose_record_is_gone_at_the_end() -> None:
    events = [*clean(), Consumed("c2", 0, 9, Rec("ghost", 0), at=2.35)]
    assert kinds(events) == [READ_GONE]


def test_a_consumer_going_back_without_a_rebalance() -> None:
    events = [*clean(), Consumed("c2", 0, 3, A3, at=2.6)]
    assert kinds(events) == [WENT_BACK]
    # after an assignment, reading again from the committed offset is what Kafka does
    rebalanced = [*clean(), Assigned("c2", 3, (0,), at=2.55), Consumed("c2", 0, 5 - 1, B2, at=2.6)]
    assert kinds(rebalanced) == [COMMIT_IGNORED]  # but not below what was committed (5)


def test_two_members_owning_one_partition_in_one_generation() -> None:
    events = [*clean(), Assigned("c3", 2, (0,), at=2.05)]
    assert kinds(events) == [TWO_OWNERS]
    other_generation = [*clean(), Assigned("c3", 3, (0,), at=2.05)]
    assert kinds(other_generation) == []


def test_a_commit_going_back() -> None:
    events = [*clean(), Committed("c2", 0, 3, started=2.7, ended=2.8)]
    assert kinds(events) == [COMMIT_BACK]
    # overlapping in time with the higher commit: their order is unknown, nothing to report
    overlapping = [*clean(), Committed("c1", 0, 3, started=2.45, ended=2.8)]
    assert kinds(overlapping) == []


def test_the_committed_offset_read_at_the_end_going_back() -> None:
    events = [e for e in clean() if not isinstance(e, CommittedRead)]
    assert kinds([*events, CommittedRead(0, -1, started=3.0, ended=3.1)]) == [COMMIT_BACK]


def test_a_history_survives_its_file() -> None:
    events = clean()
    assert read_history(to_json(e) + "\n" for e in events) == events
    assert from_json(to_json(Stored(1, 2, None))) == Stored(1, 2, None)


def test_keys_name_records() -> None:
    assert Rec.from_key(Rec("p-1:x", 12).key) == Rec("p-1:x", 12)
    assert Rec.from_key(b"no-seq") is None and Rec.from_key(None) is None


# -- Hypothesis: a correct run of any shape passes; one break is named -----------------------

@st.composite
def runs(draw: st.DrawFn) -> list[Event]:
    """Producers append to partitions in order; members take partitions over at rebalances,
    each reading on from the committed offset and committing what it read."""
    partitions = draw(st.integers(1, 3))
    producers = draw(st.lists(st.booleans(), min_size=1, max_size=3))  # idempotent or not
    logs: list[list[Rec]] = [[] for _ in range(partitions)]
    events: list[Event] = []
    clock = 0.0
    for number, idempotent in enumerate(producers):
        for seq in range(draw(st.integers(1, 12))):
            rec = Rec(f"p{number}", seq)
            partition = draw(st.integers(0, partitions - 1))
            events.append(Sent(rec, idempotent, True, clock))
            events.append(Acked(rec, partition, len(logs[partition]), clock + 0.01))
            logs[partition].append(rec)
            clock += 0.02
    committed = [0] * partitions
    members = ["m0", "m1", "m2"]
    for generation in range(1, draw(st.integers(1, 4)) + 1):
        clock += 1.0
        owner = {p: draw(st.sampled_from(members)) for p in range(partitions)}
        for member in members:
            mine = tuple(p for p in range(partitions) if owner[p] == member)
            events.append(Assigned(member, generation, mine, clock))
        for p in range(partitions):
            end = draw(st.integers(committed[p], len(logs[p])))
            for offset in range(committed[p], end):
                clock += 0.01
                events.append(Consumed(owner[p], p, offset, logs[p][offset], clock))
            if end > committed[p]:
                events.append(Committed(owner[p], p, end, clock + 0.01, clock + 0.02))
                committed[p] = end
                clock += 0.03
    clock += 1.0
    for p in range(partitions):
        events.append(CommittedRead(p, committed[p] if committed[p] else -1, clock, clock + 0.01))
        events += [Stored(p, o, r) for o, r in enumerate(logs[p])]
    return events


@given(runs())
@settings(max_examples=examples(2))
def test_a_correct_run_of_any_shape_passes(events: list[Event]) -> None:
    assert check(events).clean


@given(runs(), st.data())
@settings(max_examples=examples(2))
def test_a_stored_record_taken_away_is_lost(events: list[Event], data: st.DataObject) -> None:
    stored = [e for e in events if isinstance(e, Stored)]
    gone = data.draw(st.sampled_from(stored))
    report = check([e for e in events if e != gone])
    assert gone.rec is not None
    assert [a for a in report.anomalies if a.kind == LOST] and f"{gone.rec.producer}:{gone.rec.seq} " in (
        next(a.detail for a in report.anomalies if a.kind == LOST))


@given(runs(), st.data())
@settings(max_examples=examples(2))
def test_a_second_owner_in_a_generation_is_found(events: list[Event], data: st.DataObject) -> None:
    assignments = [e for e in events if isinstance(e, Assigned) and e.partitions]
    taken = data.draw(st.sampled_from(assignments))
    intruder = replace(taken, consumer="intruder", partitions=taken.partitions[:1])
    assert [a.kind for a in check([*events, intruder]).anomalies] == [TWO_OWNERS]


def test_what_a_fault_cost() -> None:
    events: list[Event] = [
        Sent(A1, True, True, at=10.0), Acked(A1, 0, 0, at=10.5),
        Sent(A2, True, True, at=11.0), Acked(A2, 0, 1, at=14.0),  # waited 3 s
        Sent(A3, True, True, at=30.0), Acked(A3, 0, 2, at=40.0),  # after the fault: not counted
        Consumed("c", 0, 0, A1, at=10.6), Consumed("c", 0, 1, A2, at=14.1),
        Consumed("c", 0, 2, A3, at=40.1),
    ]
    assert cost(events, start=10.0, end=12.0, settle=5.0) == Cost(ack_wait=3.0, failed=0,
                                                                    read_gap=3.5)
