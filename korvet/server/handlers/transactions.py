"""The transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27, Kafka's admin abort), TxnOffsetCommit (28), DescribeTransactions (65),
ListTransactions (66); InitProducerId with a transactional id comes here from
korvet/server/handlers/cluster.py.

Each decodes its request, runs one step of the rules (korvet/core/transactions.py) through
the tenant's transaction coordinator (korvet/server/transactions.py: the step's record is
durable before the answer) and maps the step's error to what the request's version knows
(PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to older clients, TRANSACTION_ABORTABLE is
INVALID_TXN_STATE to clients before KIP-890). Redis not answering: COORDINATOR_NOT_AVAILABLE,
which clients retry. Every transactional id is coordinated by any broker (the record's
compare-and-set keeps the steps atomic): FindCoordinator spreads them over the live brokers.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from korvet.core import transactions as rules
from korvet.core.api_keys import ApiKey
from korvet.core.coordinator.state import GroupState
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import Operation, ResourceType
from korvet.core.transactions import Step, TxnRecord, TxnState
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.coordinator import CoordinatorUnavailable, NotCoordinator
from korvet.server.services import Services
from korvet.server.transactions import TransactionCoordinator

log = logging.getLogger(__name__)

_STATE_NAMES = {s.value for s in TxnState} | {"PrepareEpochFence", "Dead"}
# DescribeTransactions' start time of no transaction: -1 ms (kio writes a datetime; the
# response builder's -1 would be null, which the field is not)
_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)


def _coordinator(services: Services) -> TransactionCoordinator:
    return services.part(TransactionCoordinator)


async def _step(services: Services, transactional_id: str,
                decide: Callable[[TxnRecord | None, int | None], Step]) -> Step:
    try:
        return await _coordinator(services).run(transactional_id, decide)
    except (RedisError, OSError) as exc:
        log.warning("transactional id %r: Redis failed (%s); answering "
                    "COORDINATOR_NOT_AVAILABLE", transactional_id, exc)
        return Step(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.access.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


# --- InitProducerId ------------------------------------------------------------------------

async def init_transactional(services: Services, ctx: RequestContext, transactional_id: str,
                             timeout_ms: int, producer_id: int, producer_epoch: int,
                             response_cls: type[Any]) -> Any:
    """InitProducerId with a transactional id (its handler in cluster.py sends it here)."""
    def answer(error: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return make(response_cls, throttle_time=0, error_code=error, producer_id=pid,
                    producer_epoch=epoch)

    if not transactional_id:
        return answer(ErrorCode.INVALID_REQUEST)
    if not _may_write(ctx, transactional_id):
        return answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator = _coordinator(services)
    now = services.now_ms()
    step = await _step(services, transactional_id, lambda record, fresh: rules.init_producer_id(
        record, transactional_id, timeout_ms, max_timeout_ms=coordinator.max_timeout_ms,
        now_ms=now, expected_pid=producer_id, expected_epoch=producer_epoch, fresh_pid=fresh))
    if step.error is ErrorCode.CONCURRENT_TRANSACTIONS and step.record is not None \
            and step.record.state is TxnState.PREPARE_ABORT:
        log.info("transactional id %r: InitProducerId fenced the open transaction of producer %d "
                 "(now epoch %d) and aborts it", transactional_id, step.record.producer_id,
                 step.record.producer_epoch)
    error = rules.fence_error(step.error, new_enough=ctx.api_version >= 4)
    if error is not ErrorCode.NONE:
        return answer(error)
    return answer(error, step.producer_id, step.producer_epoch)


# --- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------

async def add_partitions_to_txn(services: Services, ctx: RequestContext, request: Any) -> Any:
    """Versions 0-3, the clients' (a transactions v1 producer names its partitions first)."""
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(response_cls, "AddPartitionsToTxnPartitionResult")
    transactional_id = request.v3_and_below_transactional_id
    pid, epoch = int(request.v3_and_below_producer_id), int(request.v3_and_below_producer_epoch)
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    if not _may_write(ctx, transactional_id):
        errors = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        for name, index in wanted:
            if not ctx.access.allowed(Operation.WRITE, ResourceType.TOPIC, name):
                errors[(name, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            topic = await services.topics.get(name)
            if topic is None or not 0 <= index < topic.partitions:
                errors[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:  # Kafka adds none when one fails; the others: OPERATION_NOT_ATTEMPTED
            errors = {k: errors.get(k, ErrorCode.OPERATION_NOT_ATTEMPTED) for k in wanted}
        else:
            now = services.now_ms()
            step = await _step(services, transactional_id, lambda record, _pid: rules.add(
                record, pid, epoch, partitions=wanted, now_ms=now, tv2=False))
            error = rules.fence_error(step.error, new_enough=ctx.api_version >= 2)
            errors = dict.fromkeys(wanted, error)
    by_topic: dict[str, list[Any]] = {}
    for (name, index), error in errors.items():
        by_topic.setdefault(name, []).append(make(partition_cls, partition_index=index,
                                                  partition_error_code=error))
    return make(response_cls, throttle_time=0, results_by_topic_v3_and_below=tuple(
        make(topic_cls, name=name, results_by_partition=tuple(parts))
        for name, parts in by_topic.items()))


async def add_offsets_to_txn(services: Services, ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(type(request))
    transactional_id, group = request.transactional_id, request.group_id
    if not _may_write(ctx, transactional_id):
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.access.allowed(Operation.READ, ResourceType.GROUP, group):
        return make(response_cls, throttle_time=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    pid, epoch = int(request.producer_id), int(request.producer_epoch)
    now = services.now_ms()
    step = await _step(services, transactional_id, lambda record, _pid: rules.add(
        record, pid, epoch, groups=(group,), now_ms=now, tv2=False))
    return make(response_cls, throttle_time=0,
                error_code=rules.fence_error(step.error, new_enough=ctx.api_version >= 2))


# --- EndTxn ------------------------------------------------------------------------------

TV2_END_TXN = 5  # EndTxn v5+: the decision bumps the epoch (KIP-890 part 2)


async def end_txn(services: Services, ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(type(request))
    transactional_id = request.transactional_id
    if not _may_write(ctx, transactional_id):
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    pid, epoch, commit = int(request.producer_id), int(request.producer_epoch), request.committed
    tv2 = ctx.api_version >= TV2_END_TXN
    now = services.now_ms()
    step = await _step(services, transactional_id, lambda record, fresh: rules.end_txn(
        record, pid, epoch, commit, tv2=tv2, now_ms=now, fresh_pid=fresh))
    error = rules.fence_error(step.error, new_enough=ctx.api_version >= 2)
    if error is ErrorCode.TRANSACTION_ABORTABLE and ctx.api_version < 4:
        error = ErrorCode.INVALID_TXN_STATE
    if error in (ErrorCode.INVALID_TXN_STATE, ErrorCode.PRODUCER_FENCED,
                 ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
        # what the producer hears is fatal to it: say why on this side too
        log.info("transactional id %r: EndTxn(%s) of producer %d epoch %d refused with %s "
                 "(the transaction: %s)", transactional_id, "commit" if commit else "abort", pid,
                 epoch, error.name, await _describe_record(services, transactional_id))
    ok = error is ErrorCode.NONE
    return make(response_cls, throttle_time=0, error_code=error,
                producer_id=step.producer_id if ok else -1,
                producer_epoch=step.producer_epoch if ok else -1)


async def _describe_record(services: Services, transactional_id: str) -> str:
    try:
        record = await _coordinator(services).record(transactional_id)
    except (RedisError, OSError) as exc:
        return f"not read: {exc}"
    if record is None:
        return "none"
    return (f"{record.state.value}, producer {record.producer_id} epoch {record.producer_epoch}, "
            f"{len(record.partitions)} partition(s)")


# --- TxnOffsetCommit -----------------------------------------------------------------------

TV2_TXN_OFFSET_COMMIT = 5  # v5+: the group joins the transaction with the commit (KIP-890)


def _member_error(services: Services, group_id: str, member_id: str,
                  instance_id: str | None, generation: int) -> ErrorCode:
    """KIP-447: a TxnOffsetCommit from a member of another generation is a zombie's."""
    coordinator = services.coordinator
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if not coordinator.owns(group_id):
        return ErrorCode.NOT_COORDINATOR
    group = coordinator.durable_view.groups.get(group_id)
    if group is None:
        return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and not group.members:
        return ErrorCode.NONE
    if generation < 0 and not member_id:
        return ErrorCode.NONE  # a producer outside the group's generations (v0-2)
    member = group.members.get(member_id)
    if member is None:
        if instance_id is not None and any(m.group_instance_id == instance_id
                                           for m in group.members.values()):
            return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


async def txn_offset_commit(services: Services, ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "TxnOffsetCommitResponseTopic")
    partition_cls = nested(response_cls, "TxnOffsetCommitResponsePartition")
    group_id, transactional_id = request.group_id, request.transactional_id
    wanted = [(t.name, p) for t in request.topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    request_error = ErrorCode.NONE
    if not _may_write(ctx, transactional_id):
        request_error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.access.allowed(Operation.READ, ResourceType.GROUP, group_id):
        request_error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        request_error = _member_error(
            services, group_id, getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None), int(getattr(request, "generation_id", -1)))
    offsets: list[tuple[str, int, int, str, int]] = []
    if request_error is ErrorCode.NONE:
        for name, p in wanted:
            topic = await services.topics.get(name)
            key = (name, int(p.partition_index))
            if not ctx.access.allowed(Operation.READ, ResourceType.TOPIC, name):
                errors[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= key[1] < topic.partitions:
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets.append((name, key[1], int(p.committed_offset),
                                p.committed_metadata or "",
                                int(getattr(p, "committed_leader_epoch", -1))))
        if offsets:
            request_error = await _commit_pending(services, ctx, transactional_id, group_id,
                                                  int(request.producer_id),
                                                  int(request.producer_epoch), offsets)
    by_topic: dict[str, list[Any]] = {}
    for name, p in wanted:
        key = (name, int(p.partition_index))
        by_topic.setdefault(name, []).append(make(
            partition_cls, partition_index=key[1], error_code=errors.get(key, request_error)))
    return make(response_cls, throttle_time=0, topics=tuple(
        make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))


async def _commit_pending(services: Services, ctx: RequestContext, transactional_id: str,
                          group_id: str, pid: int, epoch: int,
                          offsets: list[tuple[str, int, int, str, int]]) -> ErrorCode:
    """The group joins the transaction (durably), then its offsets are pending in the
    group's slot until the transaction's marker decides them."""
    coordinator = _coordinator(services)
    now = services.now_ms()
    try:
        step = await coordinator.run_when_decided(transactional_id, lambda record, _pid: rules.add(
            record, pid, epoch, groups=(group_id,), now_ms=now,
            tv2=ctx.api_version >= TV2_TXN_OFFSET_COMMIT))
    except (RedisError, OSError) as exc:
        log.warning("TxnOffsetCommit for %r: %s", transactional_id, exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if step.error is ErrorCode.PRODUCER_FENCED and ctx.api_version >= TV2_TXN_OFFSET_COMMIT:
        # Kafka adds the group through its broker-side verification, which turns
        # PRODUCER_FENCED into INVALID_PRODUCER_EPOCH (as for a Produce v12): found by
        # `korvet spec test-live --part transactions` against Kafka 4.3.1
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if step.error is not ErrorCode.NONE:
        return rules.fence_error(step.error, new_enough=ctx.api_version >= 3)
    try:
        verdict = await coordinator.offsets.write(group_id, pid, epoch, offsets)
        if verdict == "UNAPPLIED":  # the producer's previous transaction: applied first
            await coordinator.apply_decided(group_id)
            verdict = await coordinator.offsets.write(group_id, pid, epoch, offsets)
    except (RedisError, OSError) as exc:
        log.warning("TxnOffsetCommit for group %r: %s", group_id, exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    except NotCoordinator:
        return ErrorCode.NOT_COORDINATOR
    except CoordinatorUnavailable:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if verdict == "BAD_EPOCH":
        return rules.fence_error(ErrorCode.PRODUCER_FENCED, new_enough=ctx.api_version >= 3)
    if verdict != "OK":
        return ErrorCode.CONCURRENT_TRANSACTIONS  # still unapplied: the client retries
    return ErrorCode.NONE


# --- WriteTxnMarkers (admin abort) ------------------------------------------------------------

async def write_txn_markers(services: Services, ctx: RequestContext, request: Any) -> Any:
    """Kafka's admin abort of a hanging transaction (``kafka-transactions abort``): an ABORT
    marker written to each partition named, as the coordinator would."""
    response_cls = response_type(type(request))
    marker_cls = nested(response_cls, "WritableTxnMarkerResult")
    topic_cls = nested(response_cls, "WritableTxnMarkerTopicResult")
    partition_cls = nested(response_cls, "WritableTxnMarkerPartitionResult")
    coordinator = _coordinator(services)
    allowed = ctx.access.cluster_allowed(Operation.CLUSTER_ACTION)
    results = []
    for marker in request.markers:
        decision = rules.Decision("", int(marker.producer_id), int(marker.producer_epoch),
                                  bool(marker.transaction_result), int(marker.coordinator_epoch),
                                  frozenset(), frozenset(),
                                  int(getattr(marker, "transaction_version", 0)) >= 2)
        topics = []
        for topic in marker.topics:
            parts = []
            for index in topic.partition_indexes:
                error = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not allowed
                         else await coordinator.write_marker(decision, topic.name, int(index)))
                parts.append(make(partition_cls, partition_index=index, error_code=error))
            topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
        results.append(make(marker_cls, producer_id=marker.producer_id, topics=tuple(topics)))
    return make(response_cls, markers=tuple(results))


# --- DescribeTransactions, ListTransactions ---------------------------------------------

def _state_name(record: TxnRecord) -> str:
    return record.state.value


async def describe_transactions(services: Services, ctx: RequestContext, request: Any) -> Any:
    response_cls = response_type(type(request))
    state_cls = nested(response_cls, "TransactionState")
    topic_cls = nested(response_cls, "TopicData")
    coordinator = _coordinator(services)
    answers = []
    for transactional_id in request.transactional_ids:
        def empty(error: ErrorCode, tid: str = transactional_id) -> Any:
            return make(state_cls, error_code=error, transactional_id=tid, transaction_state="",
                        transaction_timeout=0, transaction_start_time=_NO_TIME, producer_id=-1,
                        producer_epoch=-1, topics=())
        if not ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                  transactional_id):
            answers.append(empty(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        try:
            record = await coordinator.record(transactional_id)
        except (RedisError, OSError):
            answers.append(empty(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        if record is None:
            answers.append(empty(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        by_topic: dict[str, list[int]] = {}
        for name, index in sorted(record.partitions):
            by_topic.setdefault(name, []).append(index)
        answers.append(make(
            state_cls, error_code=ErrorCode.NONE, transactional_id=transactional_id,
            transaction_state=_state_name(record), transaction_timeout=record.timeout_ms,
            transaction_start_time=(_NO_TIME if record.started_ms < 0 else record.started_ms),
            producer_id=record.producer_id,
            producer_epoch=record.producer_epoch, topics=tuple(
                make(topic_cls, topic=name, partitions=tuple(parts))
                for name, parts in by_topic.items())))
    return make(response_cls, throttle_time=0, transaction_states=tuple(answers))


async def list_transactions(services: Services, ctx: RequestContext, request: Any) -> Any:
    """Every transactional id one may DESCRIBE, filtered by state, producer id, how long ago
    its last transaction started (v1+: as Kafka's, a completed transaction keeps its start and
    an id with none since InitProducerId passes every duration) and a regular expression on
    the id (v2+)."""
    response_cls = response_type(type(request))
    state_cls = nested(response_cls, "TransactionState")
    unknown = tuple(s for s in request.state_filters if s not in _STATE_NAMES)
    pattern_text = getattr(request, "transactional_id_pattern", None)
    pattern = None
    if pattern_text:
        try:
            pattern = re.compile(pattern_text)
        except re.error:
            return make(response_cls, throttle_time=0,
                        error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                        unknown_state_filters=unknown, transaction_states=())
    coordinator = _coordinator(services)
    try:
        ids = await coordinator.records.ids()
        records = [r for r in [await coordinator.record(i) for i in ids] if r is not None]
    except (RedisError, OSError):
        return make(response_cls, throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    unknown_state_filters=unknown, transaction_states=())
    now = services.now_ms()
    duration = int(getattr(request, "duration_filter", -1))
    states = set(request.state_filters)
    pids = set(map(int, request.producer_id_filters))
    listed = [r for r in records
              if ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                    r.transactional_id)
              and (not states or r.state.value in states)
              and (not pids or r.producer_id in pids)
              and (duration < 0 or now - r.started_ms > duration)
              and (pattern is None or pattern.fullmatch(r.transactional_id) is not None)]
    return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE,
                unknown_state_filters=unknown, transaction_states=tuple(
                    make(state_cls, transactional_id=r.transactional_id,
                         producer_id=r.producer_id, transaction_state=r.state.value)
                    for r in listed))


APIS = (
    Api(ApiKey.ADD_PARTITIONS_TO_TXN, range(0, 4), add_partitions_to_txn,
        "transactions v1: the partitions join the transaction, durably (the record's "
        "compare-and-set, `storage/lua/txn_write.lua`)"),
    Api(ApiKey.ADD_OFFSETS_TO_TXN, range(0, 5), add_offsets_to_txn,
        "transactions v1: the group joins the transaction"),
    Api(ApiKey.END_TXN, range(0, 6), end_txn,
        "the durable decision, answered at once; markers after, then the completion "
        "(v5: the epoch bumped, KIP-890)"),
    Api(ApiKey.WRITE_TXN_MARKERS, range(1, 3), write_txn_markers,
        "Kafka's admin abort (`kafka-transactions abort`): a marker per partition"),
    Api(ApiKey.TXN_OFFSET_COMMIT, range(0, 6), txn_offset_commit,
        "pending offsets in the group's slot until the marker (v5: the group joins the "
        "transaction)"),
    Api(ApiKey.DESCRIBE_TRANSACTIONS, range(0, 1), describe_transactions,
        "the transactional id's record"),
    Api(ApiKey.LIST_TRANSACTIONS, range(0, 3), list_transactions,
        "every transactional id, filtered by state, producer id, duration and pattern"),
)
