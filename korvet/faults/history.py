"""The history of a fault run and the checker that judges it.

A run records what its clients saw, nothing of what the broker says about itself: every
produce attempt and its acknowledgement (partition, offset) or error, every record a
consumer-group member read (partition, offset, the record it found there), every
assignment (member, generation, partitions), every commit the coordinator accepted (with
the times its request left and its answer came back), and at the end what a fresh reader
finds in every partition (``Stored``) and the group's committed offsets (``CommittedRead``).
Records are told apart by their key, ``producer:seq``: a producer never sends one ``seq``
twice itself, so two copies of one key in the log are the client library's retries.

``check`` reads the whole history and reports, by kind, what Kafka's promises forbid:

- a record acknowledged with acks=all and not readable at the end (``LOST``), or readable
  at another offset than the one acknowledged (``MOVED``);
- a record of an idempotent producer stored twice (``DUPLICATE``); a non-idempotent
  producer's retries may store a record twice (Kafka's at-least-once), which is counted,
  not reported;
- in a partition, a producer's records in another order than it sent them (``OUT_OF_ORDER``;
  only for producers that promise order: idempotent ones. A non-idempotent producer keeps
  its order over one connection with one request in flight, but not when a partition moves
  to another broker while a request to the old one is unanswered: librdkafka sends the
  next records to the new broker and retries the old request after them. Such reorders
  are counted, not reported);
- a record a consumer read at an offset where the end finds another record or none
  (``READ_GONE``): what was read is no longer there;
- a consumer's offsets in a partition going back (or repeating) without an assignment in
  between (``WENT_BACK``);
- a partition given to two members in one generation (``TWO_OWNERS``);
- a committed offset going back: a commit accepted, or the committed offset read at the
  end, lower than one whose acceptance came back before it was sent (``COMMIT_BACK``);
  and a member starting to read a partition below an offset whose commit was accepted
  before its assignment (``COMMIT_IGNORED``).

The transactional workload adds what its producers handed over per transaction
(``TxnSent``: the records, each with its partition, and whether commit or abort is asked,
recorded before that call) and what the client was told (``TxnEnded``: committed when
commit_transaction returned, aborted when abort_transaction returned, unknown otherwise);
its readers, and the read-back at the end, read with ``isolation.level=read_committed``.
A transactional producer is idempotent, so its records take part in the duplicate and order
checks. For transactions, the checker reports:

- a read_committed read (during the run or at the end) of a record of a transaction whose
  abort was acknowledged, or, during the run, of one the end shows not committed
  (``ABORTED_READ``);
- a transaction the end shows in part: some of its records readable, others not
  (``TORN``); an unknown fate may end either way, but all or nothing;
- a transaction whose commit was acknowledged with a record not readable at the end
  (``LOST_COMMITTED``);
- a read_committed read of a record before its transaction's commit was even asked for:
  a read beyond the last stable offset (``UNCOMMITTED_READ``).

Apache Kafka, just after a restart, sometimes completes a transaction without writing its
marker to some partitions (``MarkersSkipped``, from its log: ``korvet.faults.kafka_log``);
the records there take the fate of the producer's next transaction in the partition. The
``TORN``, ``LOST_COMMITTED`` and ``ABORTED_READ`` of such a transaction whose records out
of place are all in those partitions are Kafka's: counted (``Report.allowed_unmarked``),
not reported.

Times are the recorder's monotonic seconds; the checker orders two events by time only
when one ended before the other began, so threads scheduled late cannot fake an anomaly.
The module is pure: events in, a report out (``to_json``/``from_json`` keep a history in
a file, one event a line, for ``korvet faults check``).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise

LOST = "lost"
MOVED = "moved"
DUPLICATE = "duplicate"
OUT_OF_ORDER = "out-of-order"
READ_GONE = "read-gone"
WENT_BACK = "went-back"
TWO_OWNERS = "two-owners"
COMMIT_BACK = "commit-back"
COMMIT_IGNORED = "commit-ignored"
ABORTED_READ = "aborted-read"
TORN = "torn"
LOST_COMMITTED = "lost-committed"
UNCOMMITTED_READ = "uncommitted-read"
KINDS: tuple[str, ...] = (LOST, MOVED, DUPLICATE, OUT_OF_ORDER, READ_GONE, WENT_BACK,
                          TWO_OWNERS, COMMIT_BACK, COMMIT_IGNORED, ABORTED_READ, TORN,
                          LOST_COMMITTED, UNCOMMITTED_READ)
KIND_TITLES = {
    LOST: "acknowledged, not readable at the end",
    MOVED: "acknowledged at one offset, stored at another",
    DUPLICATE: "an idempotent producer's record stored twice",
    OUT_OF_ORDER: "a producer's records stored out of order in a partition",
    READ_GONE: "read by a consumer, then gone from its offset",
    WENT_BACK: "a consumer's offset went back without a rebalance",
    TWO_OWNERS: "a partition owned by two members of one generation",
    COMMIT_BACK: "a committed offset went back",
    COMMIT_IGNORED: "a member started below an accepted commit",
    ABORTED_READ: "read_committed returned a record of an aborted transaction",
    TORN: "a transaction readable in part at the end",
    LOST_COMMITTED: "a transaction's commit acknowledged, a record not readable at the end",
    UNCOMMITTED_READ: "read_committed returned a record before its commit was asked for",
}

COMMITTED = "committed"
ABORTED = "aborted"
UNKNOWN = "unknown"


@dataclass(frozen=True, order=True)
class Rec:
    """A record's identity: who sent it, and its number in that producer's sending order."""

    producer: str
    seq: int

    @property
    def key(self) -> bytes:
        return f"{self.producer}:{self.seq}".encode()

    @staticmethod
    def from_key(key: bytes | None) -> Rec | None:
        """The record a key names; None for a key the workload did not write."""
        if key is None:
            return None
        producer, sep, seq = key.decode(errors="replace").rpartition(":")
        if not sep or not seq.isdigit():
            return None
        return Rec(producer, int(seq))


@dataclass(frozen=True)
class Sent:
    rec: Rec
    idempotent: bool
    ordered: bool  # the producer promises its order: idempotent, or one request in flight
    at: float


@dataclass(frozen=True)
class Acked:
    rec: Rec
    partition: int
    offset: int  # -1 when the client was not told (a duplicate's retry on some clients)
    at: float


@dataclass(frozen=True)
class SendFailed:
    """The client gave up on the record: it may or may not be stored."""

    rec: Rec
    error: str
    at: float


@dataclass(frozen=True)
class Assigned:
    consumer: str
    generation: int  # -1 when the client could not tell
    partitions: tuple[int, ...]
    at: float


@dataclass(frozen=True)
class Consumed:
    consumer: str
    partition: int
    offset: int
    rec: Rec | None
    at: float


@dataclass(frozen=True)
class Committed:
    """A commit the coordinator accepted: ``offset`` is the next offset to read."""

    consumer: str
    partition: int
    offset: int
    started: float
    ended: float


@dataclass(frozen=True)
class CommittedRead:
    """The group's committed offset of a partition, read at the end (-1: none)."""

    partition: int
    offset: int
    started: float
    ended: float


@dataclass(frozen=True)
class Stored:
    """What a fresh reader found at the end, from the first offset to the last."""

    partition: int
    offset: int
    rec: Rec | None


@dataclass(frozen=True)
class TxnSent:
    """One transaction as handed to a transactional producer, recorded before commit (or
    abort) was asked: its records with their partitions; ``commit`` what is asked."""

    producer: str  # the transactional.id
    txn: int  # the transaction's number for that id
    records: tuple[tuple[Rec, int], ...]
    commit: bool
    at: float


@dataclass(frozen=True)
class TxnEnded:
    """What the client was told of a transaction: ``COMMITTED`` (commit_transaction
    returned), ``ABORTED`` (abort_transaction returned) or ``UNKNOWN``; ``requested`` is
    when commit or abort was first asked for."""

    producer: str
    txn: int
    outcome: str
    requested: float
    at: float
    error: str = ""


@dataclass(frozen=True)
class MarkersSkipped:
    """Apache Kafka's coordinator said in its log that it completed a transaction of
    ``producer`` without writing its marker (``result``: COMMIT or ABORT) to ``partitions``:
    it found no leader for them in its metadata just after a restart and took them for
    deleted. ``started`` is the transaction's start by the coordinator's clock, on the run's
    clock: it names the transaction (``korvet.faults.kafka_log``)."""

    producer: str
    partitions: tuple[int, ...]
    result: str
    started: float


Event = (Sent | Acked | SendFailed | Assigned | Consumed | Committed | CommittedRead | Stored
         | TxnSent | TxnEnded | MarkersSkipped)
EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (Sent, Acked, SendFailed, Assigned, Consumed, Committed, CommittedRead, Stored,
                TxnSent, TxnEnded, MarkersSkipped)
}


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str
    unmarked: bool = False  # explained by a marker Kafka skipped (``MarkersSkipped``)


@dataclass(frozen=True)
class Report:
    sent: int
    acknowledged: int
    failed: int
    stored: int
    consumed: int
    commits: int
    allowed_duplicates: int  # copies of non-idempotent producers' records (at-least-once)
    allowed_reorders: int  # non-idempotent producers' records stored before earlier ones
    anomalies: tuple[Anomaly, ...]
    by_kind: dict[str, int] = field(default_factory=dict)
    transactions: dict[str, int] = field(default_factory=dict)  # by the fate the client was told
    in_transactions: int = 0  # records handed to transactional producers
    unmarked: int = 0  # transactions Kafka completed without a marker on some partition
    allowed_unmarked: tuple[Anomaly, ...] = ()  # what that did to them (Kafka's fault, known)

    @property
    def clean(self) -> bool:
        return not self.anomalies


def check(events: Iterable[Event]) -> Report:
    history = _Sorted(list(events))
    reorders: list[Anomaly] = []
    anomalies = [
        *_lost_and_moved(history),
        *_duplicates_and_order(history, reorders),
        *_reads_gone(history),
        *_went_back(history),
        *_two_owners(history),
        *_commits_back(history),
        *_commits_ignored(history),
        *_transactions_at_the_end(history),
        *_transactional_reads(history),
    ]
    unmarked = [a for a in anomalies if a.unmarked]
    anomalies = [a for a in anomalies if not a.unmarked]
    copies = Counter(s.rec for s in history.stored if s.rec is not None)
    allowed = sum(n - 1 for rec, n in copies.items() if n > 1 and not history.idempotent(rec))
    return Report(
        sent=len(history.sent), acknowledged=len(history.acked), failed=len(history.failed),
        stored=len(history.stored), consumed=len(history.consumed),
        commits=len(history.commits), allowed_duplicates=allowed, allowed_reorders=len(reorders),
        anomalies=tuple(anomalies), by_kind=dict(Counter(a.kind for a in anomalies)),
        transactions=dict(Counter(history.fate(key) for key in history.txns)),
        in_transactions=len(history.txn_of), unmarked=len(history.unmarked),
        allowed_unmarked=tuple(unmarked))


class _Sorted:
    """The events by type, each list in recording order."""

    def __init__(self, events: list[Event]) -> None:
        self.sent = {e.rec: e for e in events if isinstance(e, Sent)}
        self.acked = {e.rec: e for e in events if isinstance(e, Acked)}
        self.failed = [e for e in events if isinstance(e, SendFailed)]
        self.assigned = [e for e in events if isinstance(e, Assigned)]
        self.consumed = [e for e in events if isinstance(e, Consumed)]
        self.commits = [e for e in events if isinstance(e, Committed)]
        self.committed_reads = [e for e in events if isinstance(e, CommittedRead)]
        self.stored = sorted((e for e in events if isinstance(e, Stored)),
                             key=lambda s: (s.partition, s.offset))
        self.log: dict[tuple[int, int], Rec | None] = {(s.partition, s.offset): s.rec
                                                        for s in self.stored}
        self.where: dict[Rec, list[tuple[int, int]]] = defaultdict(list)
        for s in self.stored:
            if s.rec is not None:
                self.where[s.rec].append((s.partition, s.offset))
        self.txns = {(e.producer, e.txn): e for e in events if isinstance(e, TxnSent)}
        self.txn_ends = {(e.producer, e.txn): e for e in events if isinstance(e, TxnEnded)}
        self.txn_of = {rec: key for key, sent in self.txns.items() for rec, _ in sent.records}
        self.unmarked = _unmarked(self.txns, self.txn_ends,
                                  [e for e in events if isinstance(e, MarkersSkipped)])
        self.blocked = _blocked(self.txns, self.txn_ends, self.unmarked)

    def idempotent(self, rec: Rec) -> bool:
        sent = self.sent.get(rec)
        return (sent is not None and sent.idempotent) or rec in self.txn_of

    def ordered(self, rec: Rec) -> bool:
        sent = self.sent.get(rec)
        return (sent is not None and sent.ordered) or rec in self.txn_of

    def fate(self, key: tuple[str, int]) -> str:
        ended = self.txn_ends.get(key)
        return UNKNOWN if ended is None else ended.outcome


def _unmarked(txns: dict[tuple[str, int], TxnSent], ends: dict[tuple[str, int], TxnEnded],
              skips: Sequence[MarkersSkipped]) -> dict[tuple[str, int], set[int]]:
    """Per transaction, the partitions where Kafka wrote none of its markers.

    One producer's transactions follow one another: the coordinator's start of a
    transaction (its first AddPartitionsToTxn) comes after the previous one ended for the
    client and before this one does, so the skipped transaction is the producer's first
    whose end was told after that start (by a millisecond: Kafka's clock has no finer
    grain), or the last, unended one. Only partitions it wrote to count."""
    unmarked: dict[tuple[str, int], set[int]] = defaultdict(set)
    for skip in skips:
        mine = sorted(key for key in txns if key[0] == skip.producer)
        later = [key for key in mine
                 if key not in ends or ends[key].at >= skip.started + 0.001]
        if not later:
            continue
        key = later[0]
        written = {partition for _, partition in txns[key].records}
        if written & set(skip.partitions):
            unmarked[key] |= written & set(skip.partitions)
    return dict(unmarked)


def _blocked(txns: dict[tuple[str, int], TxnSent], ends: dict[tuple[str, int], TxnEnded],
             unmarked: dict[tuple[str, int], set[int]]) -> dict[int, float]:
    """The partitions whose last stable offset a skipped marker held to the end of the run,
    each with the send time of the transaction that holds it.

    Kafka's partition keeps a transaction whose marker it never got open until the
    producer's next transaction there ends; read_committed readers read nothing past its
    first record meanwhile. When no later transaction of that producer wrote to the
    partition and was told its end, the records every transaction sent there after it stay
    unreadable: Kafka's fault too."""
    blocked: dict[int, float] = {}
    for key, partitions in unmarked.items():
        for partition in partitions:
            resolved = any(
                other[0] == key[0] and other[1] > key[1] and other in ends
                and ends[other].outcome in (COMMITTED, ABORTED)
                and any(p == partition for _, p in sent.records)
                for other, sent in txns.items())
            if not resolved:
                since = txns[key].at
                blocked[partition] = min(since, blocked.get(partition, since))
    return blocked


def _lost_and_moved(history: _Sorted) -> Iterable[Anomaly]:
    for rec, ack in sorted(history.acked.items()):
        places = history.where.get(rec, [])
        if not places:
            yield Anomaly(LOST, f"{rec.producer}:{rec.seq} acknowledged at partition "
                                f"{ack.partition} offset {ack.offset}, not readable at the end")
        elif ack.offset >= 0 and (ack.partition, ack.offset) not in places:
            found = ", ".join(f"{p}/{o}" for p, o in places)
            yield Anomaly(MOVED, f"{rec.producer}:{rec.seq} acknowledged at {ack.partition}/"
                                 f"{ack.offset}, stored at {found}")


def _duplicates_and_order(history: _Sorted, allowed: list[Anomaly]) -> Iterable[Anomaly]:
    """Reorders of producers that do not promise order go to ``allowed``."""
    seen: set[Rec] = set()
    last: dict[tuple[int, str], tuple[int, int]] = {}  # (partition, producer) -> highest (seq, offset)
    for stored in history.stored:
        rec = stored.rec
        if rec is None:
            continue
        if rec in seen:
            if history.idempotent(rec):
                yield Anomaly(DUPLICATE, f"{rec.producer}:{rec.seq} (idempotent) stored again at "
                                         f"{stored.partition}/{stored.offset}")
            continue
        seen.add(rec)
        previous = last.get((stored.partition, rec.producer))
        if previous is not None and previous[0] > rec.seq:
            found = Anomaly(OUT_OF_ORDER, f"partition {stored.partition}: {rec.producer}:{rec.seq} "
                                          f"at offset {stored.offset}, after "
                                          f"{rec.producer}:{previous[0]} at {previous[1]}")
            if history.ordered(rec):
                yield found
            else:
                allowed.append(found)
        if previous is None or previous[0] < rec.seq:
            last[(stored.partition, rec.producer)] = (rec.seq, stored.offset)


def _reads_gone(history: _Sorted) -> Iterable[Anomaly]:
    reported: set[tuple[int, int]] = set()
    for read in history.consumed:
        place = (read.partition, read.offset)
        if place in reported:
            continue
        if place not in history.log or history.log[place] != read.rec:
            reported.add(place)
            now = history.log.get(place)
            found = "nothing" if place not in history.log else _name(now)
            yield Anomaly(READ_GONE, f"{read.consumer} read {_name(read.rec)} at "
                                     f"{read.partition}/{read.offset}; the end finds {found} there")


def _name(rec: Rec | None) -> str:
    return "a record of no producer" if rec is None else f"{rec.producer}:{rec.seq}"


def _went_back(history: _Sorted) -> Iterable[Anomaly]:
    """Per consumer and partition, in the consumer's own order (one thread records both the
    assignments and the reads, so recording order is its real order)."""
    timeline: list[Assigned | Consumed] = sorted(
        [*history.assigned, *history.consumed], key=lambda e: e.at)
    position: dict[tuple[str, int], int] = {}
    for event in timeline:
        if isinstance(event, Assigned):
            for key in [k for k in position if k[0] == event.consumer]:
                del position[key]
            continue
        key = (event.consumer, event.partition)
        before = position.get(key)
        if before is not None and event.offset <= before:
            yield Anomaly(WENT_BACK, f"{event.consumer} read partition {event.partition} at "
                                     f"offset {event.offset} after {before}, with no rebalance "
                                     "in between")
        position[key] = event.offset


def _two_owners(history: _Sorted) -> Iterable[Anomaly]:
    owners: dict[tuple[int, int], set[str]] = defaultdict(set)
    for assigned in history.assigned:
        if assigned.generation < 0:
            continue
        for partition in assigned.partitions:
            owners[(assigned.generation, partition)].add(assigned.consumer)
    for (generation, partition), members in sorted(owners.items()):
        if len(members) > 1:
            yield Anomaly(TWO_OWNERS, f"generation {generation}: partition {partition} given to "
                                      f"{', '.join(sorted(members))}")


class _AcceptedBefore:
    """A partition's accepted commits by the time their answers came back: the highest offset
    whose acceptance was known before a given moment."""

    def __init__(self, commits: Sequence[Committed]) -> None:
        ordered = sorted(commits, key=lambda c: c.ended)
        self.ends = [c.ended for c in ordered]
        self.best: list[Committed] = []
        for commit in ordered:
            if not self.best or commit.offset > self.best[-1].offset:
                self.best.append(commit)
            else:
                self.best.append(self.best[-1])

    def before(self, moment: float) -> Committed | None:
        index = bisect_left(self.ends, moment)
        return self.best[index - 1] if index else None


def _by_partition(commits: Iterable[Committed]) -> dict[int, _AcceptedBefore]:
    grouped: dict[int, list[Committed]] = defaultdict(list)
    for commit in commits:
        grouped[commit.partition].append(commit)
    return {partition: _AcceptedBefore(items) for partition, items in grouped.items()}


def _commits_back(history: _Sorted) -> Iterable[Anomaly]:
    accepted = _by_partition(history.commits)
    observations: list[Committed | CommittedRead] = [*history.commits, *history.committed_reads]
    for seen in observations:
        index = accepted.get(seen.partition)
        earlier = index.before(seen.started) if index is not None else None
        if earlier is not None and seen.offset < earlier.offset:
            what = (f"{seen.consumer}'s commit" if isinstance(seen, Committed)
                    else "the committed offset read at the end")
            yield Anomaly(COMMIT_BACK, f"partition {seen.partition}: {what} of {seen.offset} "
                                       f"came after {earlier.consumer}'s accepted commit of "
                                       f"{earlier.offset}")


def _commits_ignored(history: _Sorted) -> Iterable[Anomaly]:
    """The first read of each partition after each assignment, against the commits accepted
    before that assignment was recorded."""
    accepted = _by_partition(history.commits)
    timeline: list[Assigned | Consumed] = sorted(
        [*history.assigned, *history.consumed], key=lambda e: e.at)
    waiting: dict[tuple[str, int], Assigned] = {}  # (consumer, partition) -> its assignment
    for event in timeline:
        if isinstance(event, Assigned):
            for key in [k for k in waiting if k[0] == event.consumer]:
                del waiting[key]
            for partition in event.partitions:
                waiting[(event.consumer, partition)] = event
            continue
        assignment = waiting.pop((event.consumer, event.partition), None)
        index = accepted.get(event.partition)
        if assignment is None or index is None:
            continue
        earlier = index.before(assignment.at)
        if earlier is not None and event.offset < earlier.offset:
            yield Anomaly(COMMIT_IGNORED, f"{event.consumer} started partition {event.partition} "
                                          f"at offset {event.offset}, below {earlier.consumer}'s "
                                          f"commit of {earlier.offset} accepted before its "
                                          "assignment")


def _txn_name(key: tuple[str, int]) -> str:
    return f"transaction {key[0]}#{key[1]}"


def _transactions_at_the_end(history: _Sorted) -> Iterable[Anomaly]:
    """Each transaction against the read_committed read-back: all or nothing, and the
    fate the client was told."""
    for key, sent in sorted(history.txns.items()):
        fate = history.fate(key)
        shown = [(rec, p) for rec, p in sent.records if rec in history.where]
        missing = [(rec, p) for rec, p in sent.records if rec not in history.where]
        # Where Kafka skipped a marker the records take the fate of the producer's next
        # transaction on that partition: explained when every record out of place is there.
        skipped = history.unmarked.get(key, set())
        # ... and hold back the records sent after them on that partition while unresolved
        hidden = skipped | {p for p, since in history.blocked.items() if sent.at >= since}
        if shown and missing:
            odd = {COMMITTED: [missing], ABORTED: [shown]}.get(fate, [missing, shown])
            yield Anomaly(TORN, f"{_txn_name(key)} ({fate}): readable {_places(history, shown)}; "
                                f"not readable {_records(missing)}",
                          unmarked=(any(_within(records, skipped) for records in odd)
                                    or (fate != ABORTED and _within(missing, hidden))))
        if fate == COMMITTED and missing:
            yield Anomaly(LOST_COMMITTED, f"{_txn_name(key)}: commit acknowledged, not readable "
                                          f"{_records(missing)}",
                          unmarked=_within(missing, hidden))
        if fate == ABORTED and shown:
            yield Anomaly(ABORTED_READ, f"{_txn_name(key)}: abort acknowledged, the read-back "
                                        f"reads {_places(history, shown)}",
                          unmarked=_within(shown, skipped))


def _within(records: Sequence[tuple[Rec, int]], partitions: set[int]) -> bool:
    return bool(partitions) and all(p in partitions for _, p in records)


def _transactional_reads(history: _Sorted) -> Iterable[Anomaly]:
    """The readers' reads during the run (all read_committed), one report per kind and
    transaction."""
    reported: set[tuple[str, tuple[str, int], bool]] = set()
    for read in history.consumed:
        key = history.txn_of.get(read.rec) if read.rec is not None else None
        if key is None:
            continue
        fate = history.fate(key)
        where = f"{read.consumer} read {_name(read.rec)} at {read.partition}/{read.offset}"
        found: list[Anomaly] = []
        if fate == ABORTED:
            found.append(Anomaly(ABORTED_READ, f"{where}, of {_txn_name(key)}, whose abort was "
                                               "acknowledged",
                                 unmarked=read.partition in history.unmarked.get(key, ())))
        elif not any(rec in history.where for rec, _ in history.txns[key].records):
            found.append(Anomaly(ABORTED_READ, f"{where}, of {_txn_name(key)} ({fate}), of which "
                                               "the read-back reads nothing"))
        ended = history.txn_ends.get(key)
        if ended is not None and read.at < ended.requested:
            found.append(Anomaly(UNCOMMITTED_READ, f"{where}, of {_txn_name(key)}, "
                                                   f"{ended.requested - read.at:.3f} s before its "
                                                   f"{'commit' if history.txns[key].commit else 'abort'}"
                                                   " was asked for"))
        for anomaly in found:
            if (anomaly.kind, key, anomaly.unmarked) not in reported:
                reported.add((anomaly.kind, key, anomaly.unmarked))
                yield anomaly


def _records(records: Sequence[tuple[Rec, int]]) -> str:
    return ", ".join(f"{_name(rec)} (partition {p})" for rec, p in records)


def _places(history: _Sorted, records: Sequence[tuple[Rec, int]]) -> str:
    return ", ".join(f"{_name(rec)} at " + " and ".join(f"{p}/{o}" for p, o in history.where[rec])
                     for rec, _ in records)


@dataclass(frozen=True)
class Cost:
    """What a fault cost the clients: the longest a record sent from its start until it was
    healed waited for its acknowledgement (a transaction whose end was asked for before the
    heal and told after the start: for its fate), those of them the producers gave up on (a
    transaction's fate unknown), and the
    longest the readers went without reading a record from its start until ``settle``
    seconds after it was healed."""

    ack_wait: float
    failed: int
    read_gap: float


def cost(events: Sequence[Event], start: float, end: float, settle: float = 10.0) -> Cost:
    sent = {e.rec: e.at for e in events if isinstance(e, Sent) and start <= e.at <= end}
    acked = {e.rec: e.at for e in events if isinstance(e, Acked) and e.rec in sent}
    failed = sum(1 for e in events if isinstance(e, SendFailed) and e.rec in sent)
    waits = [acked[r] - at for r, at in sent.items() if r in acked]
    # A transaction's end asked for before the heal and told after the fault began: a
    # producer blocked in commit_transaction through the whole fault counts too.
    for ended in (e for e in events if isinstance(e, TxnEnded)):
        if ended.requested <= end and ended.at >= start:
            waits.append(ended.at - ended.requested)
            failed += ended.outcome == UNKNOWN
    reads = sorted(e.at for e in events if isinstance(e, Consumed) and start <= e.at <= end + settle)
    moments = [start, *reads, end + settle]
    return Cost(ack_wait=max(waits, default=0.0), failed=failed,
                read_gap=max(b - a for a, b in pairwise(moments)))


def to_json(event: Event) -> str:
    return json.dumps({"type": type(event).__name__, **asdict(event)}, separators=(",", ":"))


def from_json(line: str) -> Event:
    data = json.loads(line)
    cls = EVENT_TYPES[data.pop("type")]
    if isinstance(data.get("rec"), dict):
        data["rec"] = Rec(**data["rec"])
    if "partitions" in data:
        data["partitions"] = tuple(data["partitions"])
    if "records" in data:
        data["records"] = tuple((Rec(**rec), partition) for rec, partition in data["records"])
    return cls(**data)


def read_history(lines: Iterable[str]) -> list[Event]:
    return [from_json(line) for line in lines if line.strip()]
