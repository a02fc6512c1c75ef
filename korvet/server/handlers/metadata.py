"""Metadata (key 3): brokers, topics, partitions; auto-creates topics clients ask for.

One broker leads every partition (replicas = ISR = [the leader], leader epoch 0):
Redis holds the data and its durability, so there is no replication to report.
With several brokers on one Redis (cluster.multi-broker) the brokers are the live
ones of the registry and each partition's leader is picked among them by rendezvous
hashing (korvet/core/placement.py). Any broker serves any partition (the append
script is atomic in Redis), so a non-leader answers Produce and Fetch as the leader
would: a client with stale metadata is only less spread out, never wrong.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from korvet.core import placement
from korvet.core.topics import TopicInfo, TopicNameError, is_internal, validate_topic_name
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.services import Services
from korvet.storage.leases import BrokerEntry

API_KEY = 3
VERSIONS = range(0, 14)

NOT_REQUESTED = -(2**31)
# Kafka AclOperation codes a topic allows when there is no authorizer:
# READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
# IDEMPOTENT_WRITE 12
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def live_brokers(services: Services) -> list[BrokerEntry]:
    """This broker alone, or the registry's live brokers with several on one Redis."""
    if services.membership is not None:
        return services.membership.brokers()
    return [BrokerEntry(services.node_id, services.advertised_host, services.advertised_port,
                        services.rack)]


def partition_entries(response_type: type[Any], services: Services, count: int,
                      topic: str = "") -> tuple[Any, ...]:
    partition_type = nested(response_type, "MetadataResponsePartition")
    ids = [b.node_id for b in live_brokers(services)]
    entries = []
    for index in range(count):
        node = placement.leader(ids, topic, index) if len(ids) > 1 else services.node_id
        entries.append(make(partition_type, error_code=ErrorCode.none, partition_index=index,
                            leader_id=node, leader_epoch=0, replica_nodes=(node,),
                            isr_nodes=(node,), offline_replicas=()))
    return tuple(entries)


async def handle(services: Services, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    version = ctx.api_version
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "MetadataResponseTopic")
    broker_cls = nested(response_cls, "MetadataResponseBroker")
    include_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    allow_auto = bool(getattr(request, "allow_auto_topic_creation", True))

    def topic_entry(error: ErrorCode, name: str | None, topic: TopicInfo | None,
                    topic_id: uuid.UUID | None = None) -> Any:
        return make(
            topic_cls,
            error_code=error,
            name=name,
            topic_id=uuid.UUID(topic.topic_id) if topic else (topic_id or uuid.UUID(int=0)),
            is_internal=bool(name and is_internal(name)),
            partitions=partition_entries(response_cls, services, topic.partitions,
                                         topic.name) if topic else (),
            topic_authorized_operations=TOPIC_OPERATIONS if include_ops and topic else NOT_REQUESTED,
        )

    entries: list[Any] = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        for topic in await services.topics.all():
            entries.append(topic_entry(ErrorCode.none, topic.name, topic))
    else:
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                found = await services.topics.by_id(str(topic_id))
                if found is None:
                    entries.append(topic_entry(ErrorCode.unknown_topic_id, None, None, topic_id))
                else:
                    entries.append(topic_entry(ErrorCode.none, found.name, found))
                continue
            if name is None:
                entries.append(topic_entry(ErrorCode.invalid_request, None, None))
                continue
            try:
                validate_topic_name(name)
            except TopicNameError:
                entries.append(topic_entry(ErrorCode.invalid_topic_exception, name, None))
                continue
            known = await services.topics.get(name)
            if known is None and allow_auto:
                known = await services.auto_create(name)
            if known is None:
                entries.append(topic_entry(ErrorCode.unknown_topic_or_partition, name, None))
            else:
                entries.append(topic_entry(ErrorCode.none, name, known))

    brokers = tuple(make(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                    for b in live_brokers(services))
    return make(
        response_cls,
        throttle_time=0,
        brokers=brokers,
        cluster_id=services.cluster_id,
        controller_id=services.node_id,
        topics=tuple(entries),
        cluster_authorized_operations=(CLUSTER_OPERATIONS if getattr(
            request, "include_cluster_authorized_operations", False) else NOT_REQUESTED),
        error_code=ErrorCode.none,
    )
