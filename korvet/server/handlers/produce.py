"""Produce (key 0), versions 3..13: record batch v2 in, one stream entry per record.

Per partition: look the topic up, decode and validate every batch (CRC, magic,
counts, size, timestamps) before writing anything, then append each batch with
one atomic script call that reserves its offsets (korvet/storage/lua/append.lua).
A refused batch writes nothing. acks=0 gets no response; acks=1 and acks=-1 are
answered once Redis has executed the append (while it does, the connection's next
requests are already read and their appends sent behind it, in order; with the embedded Redis' AOF
``everysec`` that is Kafka's acks=1 durability; ``appendfsync always`` for more).

Idempotent producers (producer id >= 0): a retried batch that matches one of the
producer's last five batches is not stored again; its original base offset is
returned with NONE, as Kafka does. Sequence gaps answer OUT_OF_ORDER_SEQUENCE_NUMBER
and an old epoch INVALID_PRODUCER_EPOCH. Transactional batches are refused:
Korvet has no transactions.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from redis.exceptions import RedisError

from korvet.core.topics import TopicInfo, trim_policy
from korvet.protocol.kbuild import make, maybe_nested, nested, response_type
from korvet.protocol.records import Batch, RecordBatchError, decode_batches
from korvet.protocol.registry import Deferred, RequestContext
from korvet.server.services import Services
from korvet.storage import entries
from korvet.storage.redis_store import AppendStatus, ProducerBatch

log = logging.getLogger("korvet.produce")

API_KEY = 0
VERSIONS = range(3, 14)


@dataclass(slots=True)
class PartitionOutcome:
    index: int
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.record_errors = record_errors or []


def _check_batch(batch: Batch, topic: TopicInfo, now: int) -> None:
    config = topic.config
    if batch.transactional or batch.control:
        raise _Refused(ErrorCode.invalid_record,
                       "transactional and control batches are not supported: Korvet has no "
                       "transactions")
    if batch.size > config.get_int("max.message.bytes"):
        raise _Refused(ErrorCode.message_too_large,
                       f"record batch of {batch.size} bytes exceeds max.message.bytes "
                       f"{config.get_int('max.message.bytes')}")
    if config.log_append_time:
        return
    after = config.get_int("message.timestamp.after.max.ms")
    before = config.get_int("message.timestamp.before.max.ms")
    bad = []
    earliest = now - before if before < now else -(2**63)
    for index, record in enumerate(batch.records):
        stamp = record[0]
        if stamp > now + after or stamp < earliest:
            bad.append((index, f"timestamp {stamp} is out of range "
                               f"(broker time {now}, allowed -{before} / +{after} ms)"))
    if bad:
        raise _Refused(ErrorCode.invalid_timestamp,
                       "one or more records have a timestamp outside the topic's bounds", bad)


async def _send_partition(services: Services, topic: TopicInfo, index: int,
                          data: bytes | None) -> PartitionOutcome | Awaitable[PartitionOutcome]:
    """Validate a partition's batch and send its append. Returns the outcome when the batch
    is refused at once, else an awaitable of the outcome (the append is in flight)."""
    try:
        if not 0 <= index < topic.partitions:
            raise _Refused(ErrorCode.unknown_topic_or_partition,
                           f"topic {topic.name} has no partition {index}")
        try:
            batches = decode_batches(data)
        except RecordBatchError as exc:
            raise _Refused(ErrorCode(exc.code), str(exc)) from None
        if len(batches) != 1:
            # Produce v3+ carries exactly one batch per partition (Kafka: INVALID_RECORD).
            raise _Refused(ErrorCode.invalid_record,
                           f"{len(batches)} record batches for one partition; Produce v3+ "
                           "allows exactly one")
        (batch,) = batches
        now = services.now_ms()
        _check_batch(batch, topic, now)
        packed = entries.pack_records(batch.records,
                                      now if topic.config.log_append_time else None)
        producer = (ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                  batch.last_sequence)
                    if batch.producer_id >= 0 and batch.base_sequence >= 0 else ProducerBatch())
        trim = trim_policy(topic.config, now, packed.size, len(batch.records))
        sent = await services.store.append_send(topic, index, packed, len(batch.records), now,
                                                trim, producer)
    except _Refused as refused:
        return _refused(index, refused)
    except (RedisError, OSError) as exc:
        return _storage_error(topic, index, exc)
    return _appended(services, topic, index, batch, now, sent)


async def _appended(services: Services, topic: TopicInfo, index: int, batch: Batch, now: int,
                    sent: asyncio.Future[Any]) -> PartitionOutcome:
    try:
        result = await services.store.append_result(topic, sent)
        if result.status in (AppendStatus.NO_TOPIC, AppendStatus.NO_PARTITION):
            services.topics.invalidate(topic.name)
            raise _Refused(ErrorCode.unknown_topic_or_partition,
                           f"topic {topic.name} partition {index} no longer exists")
        if result.status is AppendStatus.OUT_OF_ORDER:
            raise _Refused(ErrorCode.out_of_order_sequence_number,
                           f"producer {batch.producer_id} sent sequence {batch.base_sequence} "
                           "out of order")
        if result.status is AppendStatus.FULL:
            raise _Refused(ErrorCode.kafka_storage_error,
                           f"partition {index} of {topic.name} has no offsets left below 2^63")
        if result.status is AppendStatus.BAD_EPOCH:
            raise _Refused(ErrorCode.invalid_producer_epoch,
                           f"producer {batch.producer_id} epoch {batch.producer_epoch} is "
                           "older than the partition's")
    except _Refused as refused:
        return _refused(index, refused)
    except (RedisError, OSError) as exc:
        return _storage_error(topic, index, exc)
    return PartitionOutcome(index, base_offset=result.base_offset,
                            log_append_time=now if topic.config.log_append_time else -1,
                            log_start_offset=result.log_start_offset)


def _refused(index: int, refused: _Refused) -> PartitionOutcome:
    return PartitionOutcome(index, refused.code, message=str(refused),
                            record_errors=refused.record_errors)


def _storage_error(topic: TopicInfo, index: int, exc: Exception) -> PartitionOutcome:
    log.warning("append to %s-%d failed: %s", topic.name, index, exc)
    return PartitionOutcome(index, ErrorCode.kafka_storage_error,
                            message=f"Redis did not take the append: {exc}")


async def handle(services: Services, ctx: RequestContext, request: Any) -> Any:
    """Validates and sends every partition's append in request order, then answers with a
    Deferred response: the connection's next requests are read while Redis appends."""
    acks = request.acks
    jobs: list[tuple[Any, list[PartitionOutcome | Awaitable[PartitionOutcome]]]] = []
    for topic_data in request.topic_data:
        name = getattr(topic_data, "name", None)
        topic_id = getattr(topic_data, "topic_id", None)
        if name is None and topic_id is not None:
            topic = await services.topics.by_id(str(topic_id))
            unknown = ErrorCode.unknown_topic_id
        else:
            topic = await services.topics.get(name) if name else None
            unknown = ErrorCode.unknown_topic_or_partition
        results: list[PartitionOutcome | Awaitable[PartitionOutcome]] = []
        for partition in topic_data.partition_data:
            if acks not in (0, 1, -1):
                results.append(PartitionOutcome(partition.index, ErrorCode.invalid_required_acks,
                                                message=f"acks={acks} is not 0, 1 or -1"))
            elif request.transactional_id is not None:
                results.append(PartitionOutcome(
                    partition.index, ErrorCode.transactional_id_authorization_failed,
                    message="Korvet does not support transactions"))
            elif topic is None:
                results.append(PartitionOutcome(partition.index, unknown,
                                                message="unknown topic"))
            else:
                results.append(await _send_partition(services, topic, partition.index,
                                                     partition.records))
        jobs.append((topic_data, results))
    if acks == 0:
        for _, results in jobs:
            for result in results:
                if not isinstance(result, PartitionOutcome):
                    _drain(result)
        return None
    return Deferred(_respond(request, jobs))


def _drain(outcome: Awaitable[PartitionOutcome]) -> None:
    """acks=0: nobody waits for the append, but it must still run to its end."""
    task = asyncio.ensure_future(outcome)
    _unanswered.add(task)
    task.add_done_callback(_unanswered.discard)


_unanswered: set[asyncio.Future[PartitionOutcome]] = set()


async def _respond(request: Any,
                   jobs: list[tuple[Any, list[PartitionOutcome | Awaitable[PartitionOutcome]]]]
                   ) -> Any:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "TopicProduceResponse")
    partition_cls = nested(response_cls, "PartitionProduceResponse")
    error_cls = maybe_nested(response_cls, "BatchIndexAndErrorMessage")
    topics = []
    for topic_data, results in jobs:
        outcomes = [r if isinstance(r, PartitionOutcome) else await r for r in results]
        partitions = tuple(
            make(partition_cls, index=o.index, error_code=o.error, base_offset=o.base_offset,
                 log_append_time=o.log_append_time, log_start_offset=o.log_start_offset,
                 record_errors=tuple(make(error_cls, batch_index=i, batch_index_error_message=m)
                                     for i, m in o.record_errors) if error_cls else (),
                 error_message=o.message)
            for o in outcomes
        )
        topics.append(make(topic_cls, name=getattr(topic_data, "name", None),
                           topic_id=getattr(topic_data, "topic_id", None) or uuid.UUID(int=0),
                           partition_responses=partitions))
    return make(response_cls, responses=tuple(topics), throttle_time=0)
