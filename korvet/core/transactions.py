"""The transaction coordinator's rules (spec/Transactions.tla), as pure functions.

One durable record per transactional id (``TxnRecord``: Kafka's ``TransactionLogValue``)
and the transitions Kafka's coordinator makes on it: InitProducerId, the adds of partitions
and groups (explicit under transactions v1, implied by Produce v12 and TxnOffsetCommit v5
under v2, KIP-890 part 2), EndTxn, the completion once every participant has its marker, the
timeout abort and the expiry of an idle id. Each function takes the record as read (None: no
record) and returns a ``Step``: the error the client gets, the record to write in its place
(None: nothing to write), and the decision whose markers go out after that write.

The handlers (korvet/server/transactions.py) run a step and write its record with a
compare-and-set on the record's ``version`` (storage/transactions.py): a step is one atomic
transition of ``coord[t]`` in the spec whichever broker runs it, and a broker that raced
another reads the record again and decides again. A decision carries the version it was
written at as its coordinator epoch (the spec's lease token): a marker of a later decision of
the same producer id always carries a higher one.

Under transactions v2 the decision bumps the producer epoch (``DECISION_BUMP``): the markers
and the next transaction carry a newer epoch than the data of the one decided, so a late
write or a late EndTxn of one transaction is never taken for the next one's (the spec's
``CommitOnlyWhenAsked`` and ``NoHangingTxn``). Transactions v1 clients (explicit
AddPartitionsToTxn, EndTxn v4 or older) keep their epoch across transactions, as Kafka's do.

Tests: tests/unit/core/test_transactions.py; tests/spec/Transactions/test_transactions_replay.py
replays TLC's state graphs of the spec through these rules (every transition, every reply): the
transactions v1 paths and the KIP-360 and KAFKA-18401 extensions are beyond the spec
(docs/spec/transactions.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

from korvet.core.errors import ErrorCode

MAX_EPOCH = 32767  # Short.MAX_VALUE
# The wire's bound on an epoch (Short.MAX_VALUE), for the bump of transactions v2's decisions:
# the replays narrow MAX_EPOCH to their models' bound, where the spec has clients start over
# instead (docs/spec/transactions.md: "TV2's epoch overflow ... left out").
WIRE_MAX_EPOCH = 32767
DECISION_BUMP = 1
NO_PRODUCER = -1

Participant = tuple[str, int]  # (topic, partition)


class TxnState(Enum):
    """Kafka's states (DescribeTransactions names them so). PrepareEpochFence is not one of
    them here: the fence and its abort are one transition (docs/spec/transactions.md)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def idle(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def ending(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def commits(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


def _prepare(commit: bool) -> TxnState:
    return TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT


def _finish(state: TxnState) -> TxnState:
    return TxnState.COMPLETE_COMMIT if state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT


def exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: a fence must still be able to bump once."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A transactional id's durable record. ``version`` counts its writes (the
    compare-and-set's token, and a decision's coordinator epoch)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[Participant] = frozenset()
    groups: frozenset[str] = frozenset()
    # the last transaction's start, kept after it completes as Kafka keeps it (ListTransactions'
    # duration filter and DescribeTransactions show it); -1: none since InitProducerId
    started_ms: int = -1
    updated_ms: int = 0
    tv2: bool = False  # the open or last transaction was started under transactions v2
    last_epoch: int = -1  # the epoch before the last InitProducerId (its retry is recognised)
    version: int = 0
    # transactions v2 at the end of the epochs: the producer id a decision hands the producer
    # (taken on at the completion), and the one it had before (its EndTxn retry is recognised)
    next_pid: int = NO_PRODUCER
    last_pid: int = NO_PRODUCER

    def to_json(self) -> str:
        return json.dumps({
            "pid": self.producer_id, "epoch": self.producer_epoch, "timeout": self.timeout_ms,
            "state": self.state.value, "partitions": sorted(map(list, self.partitions)),
            "groups": sorted(self.groups), "started": self.started_ms,
            "updated": self.updated_ms, "tv2": self.tv2, "last_epoch": self.last_epoch,
            "next_pid": self.next_pid, "last_pid": self.last_pid,
        }, separators=(",", ":"))

    @staticmethod
    def from_json(transactional_id: str, text: str, version: int) -> TxnRecord:
        raw = json.loads(text)
        return TxnRecord(
            transactional_id, int(raw["pid"]), int(raw["epoch"]), int(raw["timeout"]),
            TxnState(raw["state"]), frozenset((str(t), int(p)) for t, p in raw["partitions"]),
            frozenset(map(str, raw["groups"])), int(raw["started"]), int(raw["updated"]),
            bool(raw["tv2"]), int(raw.get("last_epoch", -1)), version,
            int(raw.get("next_pid", NO_PRODUCER)), int(raw.get("last_pid", NO_PRODUCER)))


@dataclass(frozen=True, slots=True)
class Decision:
    """A durable decision whose markers go to every participant: the producer id, the
    epoch the markers carry, commit or abort, the coordinator epoch."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[Participant]
    groups: frozenset[str]
    tv2: bool


@dataclass(frozen=True, slots=True)
class Step:
    """A transition's outcome: the error the client gets (NONE: success), the record to write
    (None: nothing; ``delete``: remove it), the producer id and epoch the client is told,
    and per partition the errors of an add."""

    error: ErrorCode
    record: TxnRecord | None = None
    delete: bool = False
    producer_id: int = NO_PRODUCER
    producer_epoch: int = -1
    needs_producer_id: bool = False  # run again with a freshly allocated producer id
    partition_errors: dict[Participant, ErrorCode] = field(default_factory=dict)

    def decision(self) -> Decision | None:
        """The decision this step writes, when it writes one (its markers go out once the
        write is durable; the coordinator epoch is the version the record is written at)."""
        record = self.record
        if record is None or not record.state.ending:
            return None
        return decision_of(record, record.version + 1)


def decision_of(record: TxnRecord, version: int | None = None) -> Decision:
    """The decision a Prepare* record holds (``version``: the record's, once written)."""
    return Decision(record.transactional_id, record.producer_id, record.producer_epoch,
                    record.state is TxnState.PREPARE_COMMIT,
                    record.version if version is None else version, record.partitions,
                    record.groups, record.tv2)


def _fail(error: ErrorCode) -> Step:
    return Step(error)


# --- InitProducerId ---------------------------------------------------------------------

def init_producer_id(record: TxnRecord | None, transactional_id: str, timeout_ms: int, *,
                     max_timeout_ms: int, now_ms: int, expected_pid: int = NO_PRODUCER,
                     expected_epoch: int = -1, fresh_pid: int | None = None) -> Step:
    """InitProducerId with a transactional id (spec: ClientInit). A new id gets a new
    producer id at epoch 0; an idle one the next epoch, or a new producer id once the epoch
    is exhausted; an open transaction is fenced: its epoch bumped and aborted (the markers
    follow), and the client told CONCURRENT_TRANSACTIONS, which it retries; a transaction
    being decided: CONCURRENT_TRANSACTIONS. KIP-360 (``expected_pid``): only the current
    producer id and epoch, or a retry of the bump just made, may ask."""
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return _fail(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if record is None:
        if expected_pid != NO_PRODUCER:
            return _fail(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if fresh_pid is None:
            return Step(ErrorCode.NONE, needs_producer_id=True)
        new = TxnRecord(transactional_id, fresh_pid, 0, timeout_ms, updated_ms=now_ms)
        return Step(ErrorCode.NONE, new, producer_id=fresh_pid, producer_epoch=0)
    if expected_pid != NO_PRODUCER:
        known = _expected(record, expected_pid, expected_epoch)
        if known is not None:
            return known
    if record.state.ending:
        return _fail(ErrorCode.CONCURRENT_TRANSACTIONS)
    if record.state is TxnState.ONGOING:
        fenced = replace(record, state=TxnState.PREPARE_ABORT,
                         producer_epoch=record.producer_epoch + 1, updated_ms=now_ms)
        return Step(ErrorCode.CONCURRENT_TRANSACTIONS, fenced)
    if exhausted(record.producer_epoch):
        if fresh_pid is None:
            return Step(ErrorCode.NONE, needs_producer_id=True)
        new = replace(record, producer_id=fresh_pid, producer_epoch=0, timeout_ms=timeout_ms,
                      state=TxnState.EMPTY, partitions=frozenset(), groups=frozenset(),
                      started_ms=-1, updated_ms=now_ms, last_epoch=-1)
        return Step(ErrorCode.NONE, new, producer_id=fresh_pid, producer_epoch=0)
    bumped = replace(record, producer_epoch=record.producer_epoch + 1, timeout_ms=timeout_ms,
                     state=TxnState.EMPTY, partitions=frozenset(), groups=frozenset(),
                     started_ms=-1, updated_ms=now_ms, last_epoch=record.producer_epoch)
    return Step(ErrorCode.NONE, bumped, producer_id=bumped.producer_id,
                producer_epoch=bumped.producer_epoch)


def _expected(record: TxnRecord, expected_pid: int, expected_epoch: int) -> Step | None:
    """KIP-360: the answer to an InitProducerId naming a producer id and epoch, when it is
    not the ordinary bump (None)."""
    if record.producer_id != expected_pid:
        return _fail(ErrorCode.PRODUCER_FENCED)
    if (record.state is TxnState.EMPTY and record.last_epoch == expected_epoch
            and record.producer_epoch == expected_epoch + 1):
        # the same request again (its answer was lost): the bump already made
        return Step(ErrorCode.NONE, producer_id=record.producer_id,
                    producer_epoch=record.producer_epoch)
    if record.producer_epoch != expected_epoch:
        return _fail(ErrorCode.PRODUCER_FENCED)
    return None


# --- adds -----------------------------------------------------------------------------

def _check_producer(record: TxnRecord | None, producer_id: int, epoch: int) -> ErrorCode:
    if record is None or record.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if record.producer_epoch != epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def add(record: TxnRecord | None, producer_id: int, epoch: int, *,
        partitions: Iterable[Participant] = (), groups: Iterable[str] = (), now_ms: int,
        tv2: bool) -> Step:
    """AddPartitionsToTxn, AddOffsetsToTxn, or the add a Produce v12 or TxnOffsetCommit v5
    implies (spec: ClientWrite): the participants join the open transaction, an idle id
    starts one. A transaction being decided: CONCURRENT_TRANSACTIONS (the client retries
    once it is complete). Nothing new to add: no write."""
    wanted_parts, wanted_groups = frozenset(partitions), frozenset(groups)
    error = _check_producer(record, producer_id, epoch)
    if error is ErrorCode.NONE:
        assert record is not None
        if record.state.ending:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
    if error is not ErrorCode.NONE:
        return Step(error, partition_errors=dict.fromkeys(wanted_parts, error))
    assert record is not None
    ok = dict.fromkeys(wanted_parts, ErrorCode.NONE)
    if record.state is TxnState.ONGOING:
        if wanted_parts <= record.partitions and wanted_groups <= record.groups:
            return Step(ErrorCode.NONE, partition_errors=ok)
        grown = replace(record, partitions=record.partitions | wanted_parts,
                        groups=record.groups | wanted_groups, updated_ms=now_ms)
        return Step(ErrorCode.NONE, grown, partition_errors=ok)
    started = replace(record, state=TxnState.ONGOING, partitions=wanted_parts,
                      groups=wanted_groups, started_ms=now_ms, updated_ms=now_ms, tv2=tv2)
    return Step(ErrorCode.NONE, started, partition_errors=ok)


def verify(record: TxnRecord | None, producer_id: int, epoch: int,
           partition: Participant) -> ErrorCode:
    """A transactions v1 Produce (v11 and older): its partition must be in the open
    transaction of that producer id and epoch (Kafka's verification, KIP-890 part 1).
    TRANSACTION_ABORTABLE when it is not; the handler maps it for older versions."""
    error = _check_producer(record, producer_id, epoch)
    if error is not ErrorCode.NONE:
        return ErrorCode.INVALID_PRODUCER_EPOCH if error is ErrorCode.PRODUCER_FENCED else error
    assert record is not None
    if record.state is not TxnState.ONGOING or partition not in record.partitions:
        return ErrorCode.TRANSACTION_ABORTABLE
    return ErrorCode.NONE


# --- EndTxn ---------------------------------------------------------------------------

def end_txn(record: TxnRecord | None, producer_id: int, epoch: int, commit: bool, *,
            tv2: bool, now_ms: int, fresh_pid: int | None = None) -> Step:
    """EndTxn (spec: EndTxnArrives). Ongoing with the transaction's epoch: the durable
    decision (under v2 with the epoch bumped), answered at once, the markers after. A retry
    of a decided transaction: CONCURRENT_TRANSACTIONS until it is complete, then NONE; the
    other result: INVALID_TXN_STATE; anything else is fenced. Under v2 an abort with nothing
    open is allowed (the client may not know the state; KAFKA-18401): it bumps the epoch.
    Under v2 a decision whose bump leaves no epoch for the next one hands the producer a new
    producer id at epoch 0 (``fresh_pid``; KIP-890), taken on when the decision completes;
    the markers carry the old id and the bumped epoch."""
    if record is not None and record.producer_id != producer_id and tv2 \
            and record.last_pid == producer_id and epoch + DECISION_BUMP == record.last_epoch \
            and record.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        return _retry(record, commit)  # the decision that handed out the new producer id
    if record is None or record.producer_id != producer_id:
        return _fail(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    bump = DECISION_BUMP if tv2 else 0
    if epoch == record.producer_epoch:
        overflow = tv2 and record.producer_epoch + bump >= WIRE_MAX_EPOCH
        if overflow and fresh_pid is None and (record.state is TxnState.ONGOING
                                               or (record.state.idle and not commit)):
            return Step(ErrorCode.NONE, needs_producer_id=True)
        handed = (fresh_pid, 0) if overflow and fresh_pid is not None else None
        if record.state is TxnState.ONGOING:
            decided = replace(record, state=_prepare(commit),
                              producer_epoch=record.producer_epoch + bump, updated_ms=now_ms,
                              tv2=tv2, next_pid=handed[0] if handed else NO_PRODUCER)
            pid, told = handed or (producer_id, decided.producer_epoch)
            return Step(ErrorCode.NONE, decided, producer_id=pid, producer_epoch=told)
        if tv2 and record.state.idle:
            if commit:
                return _fail(ErrorCode.INVALID_TXN_STATE)
            aborted = replace(record, state=TxnState.COMPLETE_ABORT, partitions=frozenset(),
                              groups=frozenset(), started_ms=-1,
                              producer_epoch=record.producer_epoch + bump, updated_ms=now_ms,
                              tv2=tv2)
            if handed:
                aborted = replace(aborted, producer_id=handed[0], producer_epoch=0,
                                  last_pid=producer_id, last_epoch=aborted.producer_epoch)
            return Step(ErrorCode.NONE, aborted, producer_id=aborted.producer_id,
                        producer_epoch=aborted.producer_epoch)
        if not tv2:  # v1: the epoch stays, so a retry arrives with the record's own
            return _retry(record, commit)
        return _fail(ErrorCode.INVALID_TXN_STATE)
    if (tv2 and epoch + DECISION_BUMP == record.producer_epoch
            and (record.state.ending or record.state in (TxnState.COMPLETE_COMMIT,
                                                         TxnState.COMPLETE_ABORT))):
        return _retry(record, commit)
    return _fail(ErrorCode.PRODUCER_FENCED)


def _retry(record: TxnRecord, commit: bool) -> Step:
    """An EndTxn again for the transaction already decided."""
    if record.state is TxnState.EMPTY or record.state is TxnState.ONGOING:
        return _fail(ErrorCode.INVALID_TXN_STATE)
    if record.state.commits != commit:
        return _fail(ErrorCode.INVALID_TXN_STATE)
    if record.state.ending:
        return _fail(ErrorCode.CONCURRENT_TRANSACTIONS)
    return Step(ErrorCode.NONE, producer_id=record.producer_id,
                producer_epoch=record.producer_epoch)


# --- the coordinator's own transitions ----------------------------------------------

def complete(record: TxnRecord | None, decision: Decision, now_ms: int) -> Step:
    """Every participant has the decision's marker (spec: CompleteTxn): CompleteCommit or
    CompleteAbort. Nothing when the record moved on (another broker completed it)."""
    if (record is None or not record.state.ending or record.producer_id != decision.producer_id
            or record.producer_epoch != decision.producer_epoch
            or record.version != decision.coordinator_epoch):
        return Step(ErrorCode.NONE)
    done = replace(record, state=_finish(record.state), partitions=frozenset(),
                   groups=frozenset(), updated_ms=now_ms)  # the start stays, as in Kafka
    if record.next_pid != NO_PRODUCER:  # the producer goes on with the id the decision gave
        done = replace(done, producer_id=record.next_pid, producer_epoch=0,
                       next_pid=NO_PRODUCER, last_pid=record.producer_id,
                       last_epoch=record.producer_epoch)
    return Step(ErrorCode.NONE, done)


def time_out(record: TxnRecord | None, now_ms: int) -> Step:
    """transaction.timeout.ms (spec: TimeoutAbort): an open transaction older than its
    timeout is fenced (its epoch bumped: the producer's late writes and requests are
    refused) and aborted."""
    if (record is None or record.state is not TxnState.ONGOING
            or now_ms - record.started_ms < record.timeout_ms):
        return Step(ErrorCode.NONE)
    fenced = replace(record, state=TxnState.PREPARE_ABORT,
                     producer_epoch=record.producer_epoch + 1, updated_ms=now_ms)
    return Step(ErrorCode.NONE, fenced)


def expire(record: TxnRecord | None, now_ms: int, expiration_ms: int) -> Step:
    """transactional.id.expiration.ms (spec: Expire): an idle id unused for that long is
    removed; its next InitProducerId gets a new producer id."""
    if record is None or not record.state.idle or now_ms - record.updated_ms < expiration_ms:
        return Step(ErrorCode.NONE)
    return Step(ErrorCode.NONE, delete=True)


def fence_error(error: ErrorCode, *, new_enough: bool) -> ErrorCode:
    """PRODUCER_FENCED as an older client knows it (Kafka maps it to INVALID_PRODUCER_EPOCH
    for InitProducerId v3 and older, AddPartitionsToTxn v1 and older, AddOffsetsToTxn v1 and
    older, EndTxn v1 and older, TxnOffsetCommit v2 and older)."""
    if error is ErrorCode.PRODUCER_FENCED and not new_enough:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
