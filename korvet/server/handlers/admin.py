"""The admin APIs operators' tools call: DeleteRecords (21), DescribeLogDirs (35),
ElectLeaders (43), ListPartitionReassignments (46), DescribeProducers (61), ListTransactions
(66), DescribeTopicPartitions (75).

Kafka's rules are in korvet/core/admin.py; Redis access in korvet/storage/admin_store.py;
ElectLeaders' request, whose versions differ, is decoded by korvet/protocol/decoders/admin.py.

- DeleteRecords (``kafka-delete-records``, ``Admin.deleteRecords``): the partition's log
  start moves up to the requested offset (-1: the high watermark) and the entries below it
  leave the stream (XTRIM MINID), so ListOffsets EARLIEST, Fetch's log start and
  OFFSET_OUT_OF_RANGE below it agree at once. ``timeout_ms`` is not waited on: there are no
  replicas to catch up.
- DescribeLogDirs (``kafka-log-dirs --describe``): one "log dir", the Redis the broker
  writes to (its address without credentials, and the keyspace), each partition's size the
  stream's ``MEMORY USAGE`` (an estimate Redis makes by sampling), offset lag 0 (no future
  replicas), and Redis' memory limit as the volume's total and usable bytes (v4+).
- DescribeTopicPartitions (Kafka 4's ``kafka-topics --describe`` and Admin.describeTopics):
  paged by the core rule; one replica, this broker, leads every partition at epoch 0.
- ElectLeaders (``kafka-leader-election``), ListPartitionReassignments
  (``kafka-reassign-partitions --list``), ListTransactions (``kafka-transactions list``): what
  Kafka answers for a cluster where one replica, the broker asked, leads every partition and
  no transaction exists: no election is needed (ELECTION_NOT_NEEDED for each partition named;
  none listed when all are asked), no reassignment is in progress, no transaction is listed.
- DescribeProducers (``kafka-transactions describe-producers``): the idempotent producers
  the append script remembers for the partition: id, epoch, last sequence and the broker's
  clock at their last append (Kafka reports the batch's max timestamp there). No
  transactions: coordinator epoch and transaction start offset are -1.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.exceptions import RedisError

from korvet.core import admin as rules
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import CLUSTER_NAME, Operation, ResourceType
from korvet.core.topics import TopicInfo, is_internal, records_deletable
from korvet.protocol.decoders.admin import PREFERRED, UNCLEAN, decode_elect_leaders
from korvet.protocol.denials import Items, Shape, Whole, empty, topic_answer, whole_error
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api, OnPart
from korvet.server.handlers.fetch import FetchHandler
from korvet.server.redis_urls import split_seeds
from korvet.server.services import Services
from korvet.storage.admin_store import AdminStore, LogStartOutcome

log = logging.getLogger("korvet.admin")


def log_dir_name(redis_url: str, keyspace: str) -> str:
    """The Redis the data lives in, as DescribeLogDirs names it: no user or password."""
    parts = urlsplit(split_seeds(redis_url)[0])  # a cluster's first seed node
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, f"keyspace={keyspace}", ""))


class AdminHandler:
    """The admin APIs of one tenant (``services.part(AdminHandler)``)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = AdminStore(services.store)
        self.log_dir = log_dir_name(services.redis_url, services.store.ks)  # the tenant's keyspace

    def log_start_moved(self) -> None:
        """The Fetch handler drops the read-ahead it prepared below the old log start."""
        self.services.part(FetchHandler).log_start_moved()

    # -- DeleteRecords -------------------------------------------------------------------

    async def delete_records(self, ctx: RequestContext,
                             request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        response_cls = response_type(type(request))
        topic_cls = nested(response_cls, "DeleteRecordsTopicResult")
        partition_cls = nested(response_cls, "DeleteRecordsPartitionResult")
        topics = []
        for name, partitions in rules.delete_records_targets(
                (t.name, [(p.partition_index, p.offset) for p in t.partitions]) for t in request.topics):
            topic = await self.services.topics.get(name)
            results = []
            for index, offset in partitions:
                error, low = await self._delete(topic, index, offset)
                results.append(make(partition_cls, partition_index=index, low_watermark=low,
                                    error_code=error))
            topics.append(make(topic_cls, name=name, partitions=tuple(results)))
        return make(response_cls, throttle_time=0, topics=tuple(topics))

    async def _delete(self, topic: TopicInfo | None, partition: int,
                      offset: int) -> tuple[int, int]:
        if topic is None or not 0 <= partition < topic.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, rules.NO_LOW_WATERMARK
        if not records_deletable(topic.config):
            return ErrorCode.POLICY_VIOLATION, rules.NO_LOW_WATERMARK
        try:
            start, high_watermark = await self.services.store.offsets(topic, partition)
            outcome = rules.delete_records(offset, start, high_watermark)
            if not outcome.ok or outcome.low_watermark <= start:
                return outcome.error, outcome.low_watermark
            stream = self.services.store.stream_key(topic.name, partition)
            self.services.notifier.changed(stream)
            try:
                done, low = await self.store.raise_log_start(topic, partition,
                                                             outcome.low_watermark)
            finally:
                self.services.notifier.changed(stream)
            self.log_start_moved()
        except (RedisError, OSError) as exc:
            log.warning("DeleteRecords on %s-%d failed: %s", topic.name, partition, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR, rules.NO_LOW_WATERMARK
        if done in (LogStartOutcome.NO_TOPIC, LogStartOutcome.NO_PARTITION):
            self.services.topics.invalidate(topic.name)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, rules.NO_LOW_WATERMARK
        log.info("DeleteRecords: %s-%d starts at offset %d", topic.name, partition, low)
        return ErrorCode.NONE, low

    # -- DescribeLogDirs -----------------------------------------------------------------

    async def describe_log_dirs(self, ctx: RequestContext,
                                request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
        response_cls = response_type(type(request))
        result_cls = nested(response_cls, "DescribeLogDirsResult")
        topic_cls = nested(response_cls, "DescribeLogDirsTopic")
        partition_cls = nested(response_cls, "DescribeLogDirsPartition")
        existing = {t.name: t.partitions for t in await self.services.topics.all()}
        requested = (None if request.topics is None else
                     [(t.topic, tuple(t.partitions)) for t in request.topics])
        chosen = rules.log_dir_partitions(requested, existing)
        pairs = [(name, p) for name, partitions in chosen.items() for p in partitions]
        try:
            sizes = dict(zip(pairs, await self.store.partition_sizes(pairs), strict=True))
            total, usable = await self.store.memory()
        except (RedisError, OSError) as exc:
            log.warning("DescribeLogDirs failed: %s", exc)
            failed = make(result_cls, error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                          log_dir=self.log_dir, topics=(), total_bytes=-1, usable_bytes=-1,
                          is_cordoned=False)
            return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE,
                        results=(failed,))
        topics = tuple(
            make(topic_cls, name=name, partitions=tuple(
                make(partition_cls, partition_index=p, partition_size=sizes[(name, p)],
                     offset_lag=0, is_future_key=False) for p in partitions))
            for name, partitions in chosen.items())
        result = make(result_cls, error_code=ErrorCode.NONE, log_dir=self.log_dir, topics=topics,
                      total_bytes=total, usable_bytes=usable, is_cordoned=False)
        return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE, results=(result,))

    # -- DescribeTopicPartitions ---------------------------------------------------------

    async def describe_topic_partitions(
            self, ctx: RequestContext,
            request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
        response_cls = response_type(type(request))
        topic_cls = nested(response_cls, "DescribeTopicPartitionsResponseTopic")
        partition_cls = nested(response_cls, "DescribeTopicPartitionsResponsePartition")
        cursor_cls = nested(response_cls, "Cursor")
        access = ctx.access
        requested = [t.name for t in request.topics]
        # With an authorizer (as Kafka): a listing leaves out the topics the principal may not
        # DESCRIBE; one named in the request is answered TOPIC_AUTHORIZATION_FAILED, existing or not.
        denied = {n for n in requested
                  if not access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)}
        known = {t.name: t for t in await self.services.topics.all()
                 if access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.name)}
        cursor = ((request.cursor.topic_name, request.cursor.partition_index)
                  if request.cursor is not None else None)
        page = rules.describe_topic_partitions(
            requested, {name: t.partitions for name, t in known.items()}, cursor,
            request.response_partition_limit)
        node = self.services.node_id
        epochs = {t.name: await self.services.store.current_epochs(known[t.name])
                  for t in page.topics if t.name in known and known[t.name].config.dense}

        def topic_entry(entry: rules.TopicPartitions) -> Any:
            if entry.name in denied:
                return make(topic_cls, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            name=entry.name, topic_id=uuid.UUID(int=0), is_internal=False,
                            partitions=(), topic_authorized_operations=-(2**31))
            info = known.get(entry.name)
            leader_epochs = epochs.get(entry.name)
            partitions = tuple(
                make(partition_cls, error_code=ErrorCode.NONE, partition_index=p, leader_id=node,
                     leader_epoch=leader_epochs[p] if leader_epochs else 0,
                     replica_nodes=(node,), isr_nodes=(node,),
                     eligible_leader_replicas=(), last_known_elr=(), offline_replicas=())
                for p in entry.partitions)
            return make(topic_cls, error_code=entry.error, name=entry.name,
                        topic_id=uuid.UUID(info.topic_id) if info else uuid.UUID(int=0),
                        is_internal=is_internal(entry.name), partitions=partitions,
                        topic_authorized_operations=ctx.access.operations(
                            ResourceType.TOPIC, entry.name))

        if page.error is not ErrorCode.NONE:
            refused = tuple(make(topic_cls, error_code=page.error, name=name,
                                 topic_id=uuid.UUID(int=0), is_internal=False, partitions=(),
                                 topic_authorized_operations=-(2**31))
                            for name in requested)  # each entry, as Kafka's getErrorResponse
            return make(response_cls, throttle_time=0, topics=refused, next_cursor=None)
        next_cursor = (make(cursor_cls, topic_name=page.next_cursor[0],
                            partition_index=page.next_cursor[1])
                       if page.next_cursor is not None else None)
        return make(response_cls, throttle_time=0,
                    topics=tuple(topic_entry(t) for t in page.topics), next_cursor=next_cursor)

    # -- ElectLeaders, ListPartitionReassignments, ListTransactions ------------------------

    async def elect_leaders(self, ctx: RequestContext,
                            request: ElectLeadersRequest) -> ElectLeadersResponse:
        response_cls = response_type(type(request))
        result_cls = nested(response_cls, "ReplicaElectionResult")
        partition_cls = nested(response_cls, "PartitionResult")
        call = decode_elect_leaders(request)
        if call.election_type not in (PREFERRED, UNCLEAN):
            return make(response_cls, throttle_time=0, error_code=ErrorCode.INVALID_REQUEST,
                        replica_election_results=())
        results = []
        # All partitions asked (null): Kafka lists only those whose election was needed.
        for name, indexes in call.topic_partitions or ():
            topic = await self.services.topics.get(name)
            partitions = []
            for index in indexes:
                if topic is None or not 0 <= index < topic.partitions:
                    partitions.append(make(
                        partition_cls, partition_id=index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=(f"No such topic as {name}" if topic is None
                                       else f"No such partition as {name}-{index}")))
                else:
                    partitions.append(make(
                        partition_cls, partition_id=index,
                        error_code=ErrorCode.ELECTION_NOT_NEEDED,
                        error_message="Leader election not needed for topic partition."))
            results.append(make(result_cls, topic=name, partition_result=tuple(partitions)))
        return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE,
                    replica_election_results=tuple(results))

    async def list_partition_reassignments(
            self, ctx: RequestContext,
            request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
        """Nothing is ever being reassigned (every partition has its one replica)."""
        return make(response_type(type(request)), throttle_time=0, error_code=ErrorCode.NONE,
                    error_message=None, topics=())

    # -- DescribeProducers ---------------------------------------------------------------

    async def describe_producers(self, ctx: RequestContext,
                                 request: DescribeProducersRequest) -> DescribeProducersResponse:
        response_cls = response_type(type(request))
        topic_cls = nested(response_cls, "TopicResponse")
        partition_cls = nested(response_cls, "PartitionResponse")
        state_cls = nested(response_cls, "ProducerState")
        topics = []
        for entry in request.topics:
            topic = await self.services.topics.get(entry.name)
            partitions = []
            # Kafka answers one entry per requested index, a partition named twice twice.
            for index in entry.partition_indexes:
                if topic is None or not 0 <= index < topic.partitions:
                    # Kafka validates the name first: INVALID_TOPIC_EXCEPTION for an invalid one.
                    missing = rules.config_topic_error(entry.name, exists=False)
                    partitions.append(make(
                        partition_cls, partition_index=index,
                        error_code=(ErrorCode(int(missing)) if topic is None
                                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        error_message="This server does not host this topic-partition.",
                        active_producers=()))
                    continue
                try:
                    states = await self.store.producers(topic, index)
                except (RedisError, OSError) as exc:
                    log.warning("DescribeProducers on %s-%d failed: %s", topic.name, index, exc)
                    partitions.append(make(partition_cls, partition_index=index,
                                           error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                                           error_message=str(exc), active_producers=()))
                    continue
                partitions.append(make(partition_cls, partition_index=index,
                                       error_code=ErrorCode.NONE, error_message=None,
                                       active_producers=tuple(
                    make(state_cls, producer_id=s.producer_id, producer_epoch=s.epoch,
                         last_sequence=s.last_sequence, last_timestamp=s.last_append_ms,
                         coordinator_epoch=s.coordinator_epoch,
                         current_txn_start_offset=s.txn_start_offset)
                    for s in states)))
            topics.append(make(topic_cls, name=entry.name, partitions=tuple(partitions)))
        return make(response_cls, throttle_time=0, topics=tuple(topics))


def _admin(method: Any) -> OnPart[AdminHandler]:
    return OnPart(AdminHandler, method)


APIS = (
    Api(ApiKey.DELETE_RECORDS, range(0, 3), _admin(AdminHandler.delete_records),
        "raises the log start: XTRIM MINID and the meta hash's `start` in one script "
        "(`storage/lua/delete_records.lua`)",
        Shape((Items("topics", "topics", topic_answer(
            "DeleteRecordsTopicResult", "partitions", "DeleteRecordsPartitionResult", "partitions",
            "partition_index", "partition_index", low_watermark=-1), empty=empty(topics=())),))),
    Api(ApiKey.DESCRIBE_LOG_DIRS, range(1, 6), _admin(AdminHandler.describe_log_dirs),
        "one \"log dir\", the Redis; sizes are `MEMORY USAGE` of each stream",
        Shape((Whole(lambda r: CLUSTER_NAME, whole_error(results=())),))),
    Api(ApiKey.ELECT_LEADERS, range(0, 3), _admin(AdminHandler.elect_leaders),
        "ELECTION_NOT_NEEDED for each partition named (its one replica leads it); none listed "
        "when all are asked, as Kafka (`kafka-leader-election`)",
        Shape((Whole(lambda r: CLUSTER_NAME, whole_error(replica_election_results=())),))),
    Api(ApiKey.LIST_PARTITION_REASSIGNMENTS, range(0, 1),
        _admin(AdminHandler.list_partition_reassignments),
        "always empty (`kafka-reassign-partitions --list`)",
        Shape((Whole(lambda r: CLUSTER_NAME, whole_error(error_message=None, topics=())),))),
    Api(ApiKey.DESCRIBE_PRODUCERS, range(0, 1), _admin(AdminHandler.describe_producers),
        "the producers in the partition's meta hash, with their open transaction's start",
        Shape((Items("topics", "topics", topic_answer(
            "TopicResponse", "partitions", "PartitionResponse", "partition_indexes",
            "partition_index", "partition_index", error_message=None, active_producers=()),
            empty=empty(topics=())),))),
    Api(ApiKey.DESCRIBE_TOPIC_PARTITIONS, range(0, 1), _admin(AdminHandler.describe_topic_partitions),
        "paged by topic name and partition (Kafka 4's `kafka-topics --describe`)"),
)
