"""Produce (key 0), versions 3..13: record batch v2 in; one stream entry per record, or per
batch for a topic whose ``korvet.storage.format`` is ``batches`` (the batch stored as it came).

Per partition: look the topic up, decode and validate every batch (CRC, magic,
counts, size, timestamps) before writing anything, then append each batch with
one atomic script call that reserves its offsets (korvet/storage/lua/append.lua).
A refused batch writes nothing. acks=0 gets no response; acks=1 and acks=-1 are
answered once Redis has executed the append (while it does, the connection's next
requests are already read and their appends sent behind it, in order; with the embedded Redis' AOF
``everysec`` that is Kafka's acks=1 durability; ``appendfsync always`` for more).
With ``redis.wait-replicas`` N, an acks=-1 append is answered once N replicas of its Redis
master have it (WAIT, storage/pipe.py), else NOT_ENOUGH_REPLICAS_AFTER_APPEND.

Idempotent producers (producer id >= 0): a retried batch that matches one of the
producer's last five batches is not stored again; its original base offset is
returned with NONE, as Kafka does. Sequence gaps answer OUT_OF_ORDER_SEQUENCE_NUMBER
and an old epoch INVALID_PRODUCER_EPOCH.

Transactional producers (a transactional id): before a transactional batch is appended its
partition joins the producer's transaction (Produce v12+, transactions v2: the implied
AddPartitionsToTxn of KIP-890 part 2) or is checked to be in it (older versions, which sent
AddPartitionsToTxn themselves), durably, on the transaction coordinator
(korvet/server/transactions.py); the append script then checks the producer's epoch against
the partition's own state in the step that appends (append.lua), so a write of a transaction
decided meanwhile is refused there.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import RedisError

from korvet.core import produce as produce_rules
from korvet.core import transactions as txn_rules
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.produce import AppendStatus, ProducePartition, ProduceTopic, Refusal
from korvet.core.topics import APPEND_TIMESTAMP_HEADER, TopicInfo, trim_policy
from korvet.protocol.decoders.produce import decode_produce, topic_id_of
from korvet.protocol.denials import Items, RefusedCount, Shape, Whole, empty, topic_answer
from korvet.protocol.kbuild import make, response_type
from korvet.protocol.messages import (
    ProduceRequest,
    ProduceResponse,
)
from korvet.protocol.records import (
    Batch,
    RecordBatchError,
    StoredBatch,
    decode_batches,
    scan_batches,
    stamp_log_append_time,
)
from korvet.protocol.registry import Deferred, RequestContext
from korvet.protocol.response_templates import (
    PartitionFields,
    ProduceAnswer,
    TopicShape,
    produce_response,
)
from korvet.server.api import Api, OnPart
from korvet.server.metrics import BrokerMetrics
from korvet.server.services import Services
from korvet.server.transactions import TransactionCoordinator
from korvet.storage import entries
from korvet.storage.redis_store import ProducerBatch

log = logging.getLogger("korvet.produce")


@dataclass(slots=True)
class PartitionOutcome:
    index: int
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()

    @classmethod
    def refused(cls, index: int, refusal: Refusal) -> PartitionOutcome:
        return cls(index, refusal.code, message=refusal.message,
                   record_errors=refusal.record_errors)


Outcome = PartitionOutcome | Awaitable[PartitionOutcome]


class ProduceHandler:
    """Produce for one broker. Owns the appends of acks=0 requests, which nobody awaits
    but which must run to their end."""

    def __init__(self, services: Services) -> None:
        """One per tenant (``services.part(ProduceHandler)``)."""
        self.services = services
        # a batch's records may hold at most what one request may: socket.request.max.bytes
        self.max_decompressed = services.settings.broker.max_request_bytes
        self.metrics = services.metrics
        self._unanswered: set[asyncio.Future[PartitionOutcome]] = set()
        self.gaps = produce_rules.SequenceGaps()  # rule 7 (korvet/core/produce.py)

    async def handle(self, ctx: RequestContext, request: ProduceRequest
                     ) -> ProduceResponse | Deferred | None:
        """Validates and sends every partition's append in request order, then answers with
        a Deferred response: the connection's next requests are read while Redis appends."""
        call = decode_produce(request)
        refused = produce_rules.check_request(call.acks, call.transactional_id)
        started = time.perf_counter()
        jobs: list[tuple[ProduceTopic, list[Outcome]]] = []
        waits_on: list[asyncio.Future[Any]] = []  # the appends' replies the response waits for
        txn = (_InTransaction(call.transactional_id, ctx.api_version)
               if call.transactional_id is not None else None)
        for wanted in call.topics:
            topic, unreachable = await self._look_up(wanted)
            results: list[Outcome] = []
            for partition in wanted.partitions:
                outcome = await self._send_partition(
                    refused, unreachable, topic, wanted.by_id, partition, started, waits_on,
                    replicated=call.acks == -1, txn=txn)
                if isinstance(outcome, PartitionOutcome):
                    self.metrics.produce_error(outcome.error)
                results.append(outcome)
            jobs.append((wanted, results))
        if call.acks == 0:
            for _, results in jobs:
                for result in results:
                    if not isinstance(result, PartitionOutcome):
                        self._drain(result)
            return None
        return Deferred(_respond(request, jobs), waits_on)

    async def _look_up(self, wanted: ProduceTopic) -> tuple[TopicInfo | None, Refusal | None]:
        """The topic (None: unknown), or the refusal when Redis could not be asked."""
        try:
            if wanted.topic_id is not None and wanted.name is None:
                return await self.services.topics.by_id(wanted.topic_id), None
            return (await self.services.topics.get(wanted.name) if wanted.name else None), None
        except (RedisError, OSError) as exc:  # e.g. the topic registry's master just died
            log.warning("produce: looking up topic %s failed: %s", wanted.name or wanted.topic_id,
                        exc)
            return None, produce_rules.storage_refusal(str(exc))

    async def close(self) -> None:
        """Let the appends of acks=0 requests finish (they were already sent)."""
        if self._unanswered:
            await asyncio.gather(*self._unanswered, return_exceptions=True)

    def _drain(self, outcome: Awaitable[PartitionOutcome]) -> None:
        task = asyncio.ensure_future(outcome)
        self._unanswered.add(task)
        task.add_done_callback(self._unanswered.discard)

    async def _send_partition(self, refused: Refusal | None, unreachable: Refusal | None,
                              topic: TopicInfo | None, by_id: bool, partition: ProducePartition,
                              started: float, waits_on: list[asyncio.Future[Any]], *,
                              replicated: bool = False,
                              txn: _InTransaction | None = None) -> Outcome:
        """Decide a partition's append (core/produce.py ``accept``) and send it. Returns the
        outcome when the partition is refused at once, else an awaitable of the outcome (the
        append is in flight)."""
        index = partition.index
        now = self.services.now_ms()
        verdict = produce_rules.accept(
            refused, unreachable, topic, index, by_id=by_id, now_ms=now,
            batches=lambda: self._decode(topic, partition.records), in_transaction=txn is not None)
        if isinstance(verdict, Refusal):
            return PartitionOutcome.refused(index, verdict)
        assert topic is not None
        if txn is not None and verdict.transactional:
            joined = await self._join(txn, topic.name, index, verdict)
            if joined is not None:
                self.metrics.produce_error(joined.code)
                return PartitionOutcome.refused(index, joined)
        return await self._append(topic, index, verdict, now, started, waits_on,
                                  replicated=replicated)

    async def _join(self, txn: _InTransaction, topic: str, index: int,
                    batch: Batch | StoredBatch) -> Refusal | None:
        """The partition added to (v12+) or checked against (older) the producer's
        transaction, before its batch is sent; a refusal when it cannot be."""
        coordinator = self.services.part(TransactionCoordinator)
        now = self.services.now_ms()
        pid, epoch = batch.producer_id, batch.producer_epoch
        try:
            if txn.version >= TV2_PRODUCE:
                step = await coordinator.run_when_decided(
                    txn.transactional_id, lambda record, _pid: txn_rules.add(
                        record, pid, epoch, partitions=((topic, index),), now_ms=now, tv2=True))
                error = step.partition_errors.get((topic, index), step.error)
                if error is ErrorCode.PRODUCER_FENCED:
                    error = ErrorCode.INVALID_PRODUCER_EPOCH  # Produce's word for it
            else:
                error = txn_rules.verify(await coordinator.record(txn.transactional_id), pid,
                                         epoch, (topic, index))
                if error is ErrorCode.TRANSACTION_ABORTABLE and txn.version < TV_ABORTABLE:
                    error = ErrorCode.INVALID_TXN_STATE
        except (RedisError, OSError) as exc:
            log.warning("produce: the transaction of %r could not be read: %s",
                        txn.transactional_id, exc)
            return produce_rules.storage_refusal(str(exc))
        if error is ErrorCode.NONE:
            return None
        return Refusal(error, f"partition {topic}-{index} is not in the open transaction of "
                              f"producer {pid} epoch {epoch}")

    def _decode(self, topic: TopicInfo | None, data: bytes | None
                ) -> Sequence[Batch | StoredBatch] | Refusal:
        assert topic is not None
        try:
            return (scan_batches(data, self.max_decompressed) if topic.config.stores_batches
                    else decode_batches(data, self.max_decompressed))
        except RecordBatchError as exc:
            return Refusal(ErrorCode(exc.code), str(exc))

    async def _append(self, topic: TopicInfo, index: int, batch: Batch | StoredBatch, now: int,
                      started: float, waits_on: list[asyncio.Future[Any]], *,
                      replicated: bool) -> Outcome:
        services = self.services
        if isinstance(batch, StoredBatch):
            count, packed = batch.count, _pack_stored(batch, topic, now)
            trim = trim_policy(topic.config, now, packed.size, count, entries=1)
        else:
            count, packed = len(batch.records), _pack_records(batch, topic, now)
            trim = trim_policy(topic.config, now, packed.size, count)
        producer = (ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                  batch.last_sequence, batch.transactional)
                    if batch.producer_id >= 0 and batch.base_sequence >= 0 else ProducerBatch())
        stream = services.store.stream_key(topic.name, index)
        services.notifier.changed(stream)  # a fetch's read from now on may miss this append
        try:
            sent = await services.store.append_send(topic, index, packed, count, now, trim,
                                                    producer, replicated=replicated)
        except (RedisError, OSError) as exc:
            services.notifier.changed(stream)
            self._failed(stream, batch)
            return _storage_error(services, topic, index, exc)
        waits_on.append(sent)
        return self._appended(topic, index, batch, count, now, sent, started, stream)

    async def _appended(self, topic: TopicInfo, index: int, batch: Batch | StoredBatch,
                        count: int, now: int, sent: asyncio.Future[Any],
                        started: float, stream: str) -> PartitionOutcome:
        try:
            result = await self.services.store.append_result(topic, sent)
        except (RedisError, OSError) as exc:
            self.metrics.produce_error(ErrorCode.KAFKA_STORAGE_ERROR)
            self._failed(stream, batch)
            return _storage_error(self.services, topic, index, exc)
        finally:  # before any answer: a fetch after the acknowledgement reads the stream
            self.services.notifier.changed(stream)
        if result.status in (AppendStatus.NO_TOPIC, AppendStatus.NO_PARTITION):
            self.services.topics.invalidate(topic.name)
        refusal = produce_rules.append_refusal(result.status, topic.name, index, batch.producer_id,
                                               batch.producer_epoch, batch.base_sequence)
        if result.status is AppendStatus.OUT_OF_ORDER and self.gaps.behind(
                stream, batch.producer_id, batch.producer_epoch, batch.base_sequence):
            refusal = produce_rules.gap_refusal(batch.producer_id, batch.base_sequence)
        elif refusal is None or result.status is AppendStatus.NOT_REPLICATED:
            self.gaps.stored(stream, batch.producer_id)
        if refusal is not None:
            self.metrics.produce_error(refusal.code)
            return PartitionOutcome.refused(index, refusal)
        self.metrics.produced(topic.name, count, started)
        return PartitionOutcome(index, base_offset=result.base_offset,
                                log_append_time=now if topic.config.log_append_time else -1,
                                log_start_offset=result.log_start_offset)


    def _failed(self, stream: str, batch: Batch | StoredBatch) -> None:
        if batch.producer_id >= 0 and batch.base_sequence >= 0:
            self.gaps.failed(stream, batch.producer_id, batch.producer_epoch, batch.base_sequence)


def _pack_records(batch: Batch, topic: TopicInfo, now: int) -> entries.PackedRecords:
    """Storage format ``records``: one entry per record (a transaction's tagged with its
    producer)."""
    records: Sequence[entries.Record] = batch.records
    if topic.config.append_timestamp_header:
        stamp = b"%d" % now
        records = [(s, k, v, [*h, (APPEND_TIMESTAMP_HEADER, stamp)]) for s, k, v, h in records]
    producer = (b"%d %d" % (batch.producer_id, batch.producer_epoch) if batch.transactional
                else None)
    return entries.pack_records(records, now if topic.config.log_append_time else None,
                                producer)


@dataclass(frozen=True, slots=True)
class _InTransaction:
    """A Produce request of a transactional producer: its id, and the request's version."""

    transactional_id: str
    version: int


TV2_PRODUCE = 12  # Produce v12+: the partition joins the transaction with the write (KIP-890)
TV_ABORTABLE = 11  # Produce v11+ knows TRANSACTION_ABORTABLE


def _pack_stored(batch: StoredBatch, topic: TopicInfo, now: int) -> entries.PackedRecords:
    """Storage format ``batches``: the batch as it came, in one entry (a LogAppendTime topic's
    batch with the broker's time in its header, as Kafka stores it)."""
    if topic.config.log_append_time:
        return entries.pack_batch(batch.count, now, stamp_log_append_time(batch.raw, now))
    return entries.pack_batch(batch.count, batch.max_timestamp, batch.raw)


def _storage_error(services: Services, topic: TopicInfo, index: int,
                   exc: Exception) -> PartitionOutcome:
    """KAFKA_STORAGE_ERROR, retriable: Kafka's answer when its log directory cannot take a
    write (a full disk). A full Redis (OOM) is logged by the memory watch, once per
    interval; any other failure here."""
    guard = services.redis_memory
    if guard is None or not guard.write_refused(exc):
        log.warning("append to %s-%d failed: %s", topic.name, index, exc)
    return PartitionOutcome.refused(index, produce_rules.storage_refusal(str(exc)))


async def _respond(request: ProduceRequest, jobs: list[tuple[ProduceTopic, list[Outcome]]]
                   ) -> ProduceResponse | ProduceAnswer:
    """The response once every append is answered: a ``ProduceAnswer`` (written from its
    shape's template, response_templates.py) when no partition has a message, per-record
    errors or a LogAppendTime; kio's object otherwise."""
    shapes: list[TopicShape] = []
    answered: list[list[PartitionOutcome]] = []
    plain = True
    for wanted, results in jobs:
        outcomes = [r if isinstance(r, PartitionOutcome) else await r for r in results]
        for o in outcomes:
            if o.message is not None or o.record_errors or o.log_append_time != -1:
                plain = False
        shapes.append((wanted.name, uuid.UUID(wanted.topic_id) if wanted.topic_id else None,
                       tuple(o.index for o in outcomes)))
        answered.append(outcomes)
    response_cls = response_type(type(request))
    if plain:
        return ProduceAnswer(response_cls, tuple(shapes), [
            (o.error, o.base_offset, o.log_start_offset) for outcomes in answered for o in outcomes])
    return cast(ProduceResponse, produce_response(response_cls, [
        (name, topic_id, [PartitionFields(o.index, o.error, o.base_offset, o.log_append_time,
                                          o.log_start_offset, o.message, o.record_errors)
                          for o in outcomes])
        for (name, topic_id, _), outcomes in zip(shapes, answered, strict=True)]))



_DENIED_TOPIC = topic_answer(
    "TopicProduceResponse", "partition_responses", "PartitionProduceResponse", "partition_data",
    "index", "index", base_offset=-1, log_append_time=-1, log_start_offset=-1, record_errors=(),
    error_message=None)


def _every_partition_denied(response_cls: type[Any], request: Any, version: int,
                            code: ErrorCode) -> Any:
    return make(response_cls, throttle_time=0, responses=tuple(
        _DENIED_TOPIC(response_cls, item, version, code) for item in request.topic_data))


APIS = (
    Api(ApiKey.PRODUCE, range(3, 14), OnPart(ProduceHandler, ProduceHandler.handle),
        "acks 0/1/-1; batches validated whole before any write; idempotent dedupe",
        Shape((Whole(lambda r: r.transactional_id, _every_partition_denied),
               Items("topic_data", "responses", _DENIED_TOPIC,
                     id_of=topic_id_of, empty=empty(responses=()))),
              refused_count=RefusedCount(BrokerMetrics.produce_error, "partition_data"))),
)
