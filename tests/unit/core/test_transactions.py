"""The transaction coordinator's rules (korvet/core/transactions.py; spec/Transactions.tla)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core import transactions as rules
from korvet.core.errors import ErrorCode
from korvet.core.transactions import TxnRecord, TxnState

NOW = 1_000_000
MAX_TIMEOUT = 900_000
P0, P1 = ("t", 0), ("t", 1)


def fresh(pid: int = 7) -> TxnRecord:
    step = rules.init_producer_id(None, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW,
                                  fresh_pid=pid)
    assert step.error is ErrorCode.NONE and step.record is not None
    return replace(step.record, version=1)


def written(step: rules.Step, version: int) -> TxnRecord:
    assert step.record is not None
    return replace(step.record, version=version)


def ongoing(record: TxnRecord, tv2: bool = True) -> TxnRecord:
    step = rules.add(record, record.producer_id, record.producer_epoch, partitions=(P0,),
                     groups=("g",), now_ms=NOW, tv2=tv2)
    return written(step, record.version + 1)


def test_a_new_transactional_id_gets_a_new_producer_id_at_epoch_0() -> None:
    asked = rules.init_producer_id(None, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW)
    assert asked.needs_producer_id and asked.record is None
    record = fresh(pid=7)
    assert (record.producer_id, record.producer_epoch, record.state) == (7, 0, TxnState.EMPTY)


@pytest.mark.parametrize("timeout", [0, -1, MAX_TIMEOUT + 1])
def test_a_timeout_outside_the_bounds_is_refused(timeout: int) -> None:
    step = rules.init_producer_id(None, "tx", timeout, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW,
                                  fresh_pid=3)
    assert step.error is ErrorCode.INVALID_TRANSACTION_TIMEOUT and step.record is None


def test_a_second_producer_gets_the_next_epoch_and_the_open_transaction_is_fenced() -> None:
    """ClientInit: an open transaction is fenced (its epoch bumped, PrepareAbort) and the
    new producer told CONCURRENT_TRANSACTIONS; once complete, its retry gets the epoch after."""
    record = ongoing(fresh())
    fenced = rules.init_producer_id(record, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW)
    assert fenced.error is ErrorCode.CONCURRENT_TRANSACTIONS
    aborting = written(fenced, record.version + 1)
    assert (aborting.state, aborting.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    decision = rules.decision_of(aborting)
    assert not decision.commit and decision.partitions == {P0} and decision.groups == {"g"}
    assert decision.producer_epoch == 1 and decision.coordinator_epoch == aborting.version
    while_deciding = rules.init_producer_id(aborting, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT,
                                            now_ms=NOW)
    assert while_deciding.error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert while_deciding.record is None
    done = written(rules.complete(aborting, decision, NOW), aborting.version + 1)
    assert done.state is TxnState.COMPLETE_ABORT and not done.partitions
    again = rules.init_producer_id(done, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW)
    assert (again.error, again.producer_epoch) == (ErrorCode.NONE, 2)


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    record = replace(fresh(pid=7), producer_epoch=rules.MAX_EPOCH - 1)
    asked = rules.init_producer_id(record, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW)
    assert asked.needs_producer_id
    step = rules.init_producer_id(record, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW,
                                  fresh_pid=8)
    assert (step.producer_id, step.producer_epoch) == (8, 0)


def test_kip_360_only_the_current_producer_may_bump_and_a_lost_answer_is_recognised() -> None:
    record = fresh(pid=7)
    other = rules.init_producer_id(record, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW,
                                   expected_pid=9, expected_epoch=0)
    assert other.error is ErrorCode.PRODUCER_FENCED
    bumped = rules.init_producer_id(record, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT,
                                    now_ms=NOW, expected_pid=7, expected_epoch=0)
    assert bumped.producer_epoch == 1
    after = written(bumped, 2)
    retried = rules.init_producer_id(after, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT,
                                     now_ms=NOW, expected_pid=7, expected_epoch=0)
    assert (retried.error, retried.producer_epoch, retried.record) == (ErrorCode.NONE, 1, None)
    stale = rules.init_producer_id(written(rules.init_producer_id(
        after, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT, now_ms=NOW), 3), "tx", 60_000,
        max_timeout_ms=MAX_TIMEOUT, now_ms=NOW, expected_pid=7, expected_epoch=0)
    assert stale.error is ErrorCode.PRODUCER_FENCED


def test_adds_check_the_producer_and_wait_for_a_decision() -> None:
    record = fresh(pid=7)
    assert rules.add(record, 8, 0, partitions=(P0,), now_ms=NOW, tv2=True).error is \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    fenced = rules.add(record, 7, 3, partitions=(P0,), now_ms=NOW, tv2=True)
    assert fenced.error is ErrorCode.PRODUCER_FENCED
    assert fenced.partition_errors == {P0: ErrorCode.PRODUCER_FENCED}
    started = rules.add(record, 7, 0, partitions=(P0,), now_ms=NOW, tv2=True)
    assert started.record is not None and started.record.state is TxnState.ONGOING
    assert started.record.started_ms == NOW and started.record.partitions == {P0}
    again = rules.add(written(started, 2), 7, 0, partitions=(P0,), now_ms=NOW + 5, tv2=True)
    assert again.error is ErrorCode.NONE and again.record is None  # nothing new: no write
    grown = rules.add(written(started, 2), 7, 0, partitions=(P1,), now_ms=NOW, tv2=True)
    assert grown.record is not None and grown.record.partitions == {P0, P1}
    deciding = written(rules.end_txn(written(grown, 3), 7, 0, True, tv2=True, now_ms=NOW), 4)
    assert rules.add(deciding, 7, 1, partitions=(P0,), now_ms=NOW, tv2=True).error is \
        ErrorCode.CONCURRENT_TRANSACTIONS


def test_transactions_v2_end_bumps_the_epoch_and_recognises_its_retries() -> None:
    """EndVerdict: PREPARE with the bump; a retry (the old epoch) is CONCURRENT_TRANSACTIONS
    while deciding and NONE once complete; the other result is INVALID_TXN_STATE."""
    record = ongoing(fresh(pid=7))
    decided = rules.end_txn(record, 7, 0, True, tv2=True, now_ms=NOW)
    assert (decided.error, decided.producer_epoch) == (ErrorCode.NONE, 1)
    committing = written(decided, record.version + 1)
    assert committing.state is TxnState.PREPARE_COMMIT
    assert rules.end_txn(committing, 7, 0, True, tv2=True, now_ms=NOW).error is \
        ErrorCode.CONCURRENT_TRANSACTIONS
    assert rules.end_txn(committing, 7, 0, False, tv2=True, now_ms=NOW).error is \
        ErrorCode.INVALID_TXN_STATE
    done = written(rules.complete(committing, rules.decision_of(committing), NOW),
                   committing.version + 1)
    retry = rules.end_txn(done, 7, 0, True, tv2=True, now_ms=NOW)
    assert (retry.error, retry.producer_epoch, retry.record) == (ErrorCode.NONE, 1, None)


def test_a_late_end_of_the_last_transaction_never_commits_the_next_one() -> None:
    """spec CommitOnlyWhenAsked (KAFKA-17754): under v2 the next transaction has the new
    epoch, so a late EndTxn(commit) of the previous one is fenced, not taken for it."""
    record = ongoing(fresh(pid=7))
    committing = written(rules.end_txn(record, 7, 0, True, tv2=True, now_ms=NOW), 3)
    done = written(rules.complete(committing, rules.decision_of(committing), NOW), 4)
    nxt = written(rules.add(done, 7, 1, partitions=(P1,), now_ms=NOW, tv2=True), 5)
    late = rules.end_txn(nxt, 7, 0, True, tv2=True, now_ms=NOW)
    assert late.error is ErrorCode.PRODUCER_FENCED and late.record is None


def test_a_completed_transaction_keeps_its_start_until_the_next_init_producer_id() -> None:
    """As Kafka's coordinator: ListTransactions' duration filter and DescribeTransactions see
    a completed transaction's start; InitProducerId clears it (-1: passes every filter)."""
    record = ongoing(fresh(pid=7))
    committing = written(rules.end_txn(record, 7, 0, True, tv2=True, now_ms=NOW + 5), 3)
    done = written(rules.complete(committing, rules.decision_of(committing), NOW + 9), 4)
    assert (done.state, done.started_ms, done.updated_ms) == (TxnState.COMPLETE_COMMIT, NOW,
                                                              NOW + 9)
    again = rules.init_producer_id(done, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT,
                                   now_ms=NOW + 20)
    assert again.record is not None and again.record.started_ms == -1


def test_transactions_v1_end_keeps_the_epoch() -> None:
    record = ongoing(fresh(pid=7), tv2=False)
    decided = written(rules.end_txn(record, 7, 0, False, tv2=False, now_ms=NOW), 3)
    assert (decided.state, decided.producer_epoch) == (TxnState.PREPARE_ABORT, 0)
    assert rules.end_txn(decided, 7, 0, False, tv2=False, now_ms=NOW).error is \
        ErrorCode.CONCURRENT_TRANSACTIONS
    done = written(rules.complete(decided, rules.decision_of(decided), NOW), 4)
    assert rules.end_txn(done, 7, 0, False, tv2=False, now_ms=NOW).error is ErrorCode.NONE
    assert rules.end_txn(done, 7, 0, True, tv2=False, now_ms=NOW).error is \
        ErrorCode.INVALID_TXN_STATE
    assert rules.end_txn(fresh(7), 7, 0, True, tv2=False, now_ms=NOW).error is \
        ErrorCode.INVALID_TXN_STATE  # nothing open


def test_verification_of_a_v1_write() -> None:
    record = ongoing(fresh(pid=7), tv2=False)
    assert rules.verify(record, 7, 0, P0) is ErrorCode.NONE
    assert rules.verify(record, 7, 0, P1) is ErrorCode.TRANSACTION_ABORTABLE
    assert rules.verify(record, 7, 1, P0) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert rules.verify(None, 7, 0, P0) is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_a_completion_of_another_decision_changes_nothing() -> None:
    record = ongoing(fresh(pid=7))
    committing = written(rules.end_txn(record, 7, 0, True, tv2=True, now_ms=NOW), 3)
    stale = replace(rules.decision_of(committing), coordinator_epoch=2)
    assert rules.complete(committing, stale, NOW).record is None
    assert rules.complete(None, rules.decision_of(committing), NOW).record is None


def test_the_timeout_fences_and_aborts_only_an_open_transaction_past_it() -> None:
    record = ongoing(fresh(pid=7))
    assert rules.time_out(record, NOW + 59_999).record is None
    fenced = rules.time_out(record, NOW + 60_000)
    assert fenced.record is not None
    assert (fenced.record.state, fenced.record.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert rules.time_out(fresh(), NOW + 10**9).record is None  # nothing open


def test_an_idle_id_expires_after_its_expiration() -> None:
    record = fresh()
    assert not rules.expire(record, NOW + 99, 100).delete
    assert rules.expire(record, NOW + 100, 100).delete
    assert not rules.expire(ongoing(record), NOW + 10**9, 100).delete


def test_older_clients_hear_of_fencing_as_an_invalid_epoch() -> None:
    assert rules.fence_error(ErrorCode.PRODUCER_FENCED, new_enough=False) is \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert rules.fence_error(ErrorCode.PRODUCER_FENCED, new_enough=True) is \
        ErrorCode.PRODUCER_FENCED
    assert rules.fence_error(ErrorCode.NONE, new_enough=False) is ErrorCode.NONE


_ops = st.lists(st.tuples(st.sampled_from(["init", "add", "commit", "abort", "complete",
                                           "timeout", "expire"]),
                          st.integers(min_value=-1, max_value=2), st.booleans()),
                max_size=30)


@given(_ops)
def test_epochs_never_go_back_and_a_decision_is_only_ever_completed(ops: list[tuple[str, int,
                                                                                   bool]]) -> None:
    """Any sequence of requests (right or stale epochs, either protocol): a producer id's
    epoch never goes back, a decision is left only by its completion (or the expiry it cannot
    meet), and every record survives its JSON round trip."""
    record: TxnRecord | None = None
    now = NOW
    next_pid = 1
    for op, epoch_shift, tv2 in ops:
        now += 10_000
        epoch = (record.producer_epoch + epoch_shift) if record is not None else 0
        pid = record.producer_id if record is not None else 1
        if op == "init":
            step = rules.init_producer_id(record, "tx", 60_000, max_timeout_ms=MAX_TIMEOUT,
                                          now_ms=now, fresh_pid=next_pid)
            next_pid += 1
        elif op == "add":
            step = rules.add(record, pid, epoch, partitions=(P0,), now_ms=now, tv2=tv2)
        elif op in ("commit", "abort"):
            step = rules.end_txn(record, pid, epoch, op == "commit", tv2=tv2, now_ms=now)
        elif op == "complete" and record is not None and record.state.ending:
            step = rules.complete(record, rules.decision_of(record), now)
        elif op == "timeout":
            step = rules.time_out(record, now)
        else:
            step = rules.expire(record, now, 50_000)
        if step.delete:
            assert record is not None and record.state.idle
            record = None
            continue
        if step.record is None:
            continue
        new = replace(step.record, version=(record.version if record else 0) + 1)
        if record is not None and new.producer_id == record.producer_id:
            assert new.producer_epoch >= record.producer_epoch
        if record is not None and record.state.ending:
            assert op == "complete" and new.state is not TxnState.ONGOING
        assert TxnRecord.from_json("tx", new.to_json(), new.version) == new
        record = new


def test_transactions_v2_at_the_end_of_the_epochs_hands_out_a_new_producer_id() -> None:
    """KIP-890: a decision whose bump would leave no epoch for the next transaction gives the
    producer a new producer id at epoch 0 (in EndTxn's answer); the markers carry the old id
    and the bumped epoch; the record takes the new id on at completion, and a retry of that
    EndTxn with the old id is recognised."""
    top = rules.WIRE_MAX_EPOCH - 1
    record = replace(ongoing(fresh(pid=7)), producer_epoch=top)
    asked = rules.end_txn(record, 7, top, True, tv2=True, now_ms=NOW)
    assert asked.needs_producer_id and asked.record is None
    decided = rules.end_txn(record, 7, top, True, tv2=True, now_ms=NOW, fresh_pid=8)
    assert (decided.error, decided.producer_id, decided.producer_epoch) == (ErrorCode.NONE, 8, 0)
    committing = written(decided, record.version + 1)
    decision = rules.decision_of(committing)
    assert (decision.producer_id, decision.producer_epoch) == (7, rules.WIRE_MAX_EPOCH)
    assert rules.end_txn(committing, 7, top, True, tv2=True, now_ms=NOW).error is \
        ErrorCode.CONCURRENT_TRANSACTIONS
    done = written(rules.complete(committing, decision, NOW), committing.version + 1)
    assert (done.producer_id, done.producer_epoch, done.state) == (8, 0,
                                                                   TxnState.COMPLETE_COMMIT)
    retry = rules.end_txn(done, 7, top, True, tv2=True, now_ms=NOW)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.NONE, 8, 0)
    nxt = rules.add(done, 8, 0, partitions=(P0,), now_ms=NOW, tv2=True)
    assert nxt.error is ErrorCode.NONE and nxt.record is not None
    assert TxnRecord.from_json("tx", done.to_json(), done.version) == done
    below = replace(ongoing(fresh(pid=7)), producer_epoch=top - 1)
    plain = rules.end_txn(below, 7, top - 1, True, tv2=True, now_ms=NOW)
    assert (plain.producer_id, plain.producer_epoch) == (7, top)  # room left: no new id
