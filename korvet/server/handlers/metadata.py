"""Metadata (key 3): brokers, topics, partitions; auto-creates topics clients ask for.

One broker leads every partition (replicas = ISR = [the leader], leader epoch 0):
Redis holds the data and its durability, so there is no replication to report.
With several brokers on one Redis (cluster.multi-broker) the brokers are the live
ones of the registry that have the listener the request came in on, each at that
listener's advertised address, and each partition's leader is picked among them by
rendezvous hashing (korvet/core/placement.py). Kafka answers LEADER_NOT_AVAILABLE
(LISTENER_NOT_FOUND from v6) for a partition whose leader lacks the listener; here
any broker serves any partition, so the leader is picked among the reachable ones
and that error never arises. Any broker serves any partition (the append
script is atomic in Redis), so a non-leader answers Produce and Fetch as the leader
would: a client with stale metadata is only less spread out, never wrong.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import RedisError

from korvet.core import placement
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.access import NOT_REQUESTED, Access
from korvet.core.security.acl import CLUSTER_NAME, Operation, ResourceType
from korvet.core.topics import TopicInfo, TopicNameError, is_internal, validate_topic_name
from korvet.protocol.decoders.metadata import MetadataCall, MetadataTopic, decode_metadata
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.services import Services
from korvet.storage.leases import BrokerEntry

log = logging.getLogger(__name__)


def live_brokers(services: Services, ctx: RequestContext) -> list[BrokerEntry]:
    """This broker alone, or the registry's live brokers with several on one Redis, every
    one named by the address of the listener the request came in on (Kafka's rule: the
    listener of the same name; a broker without it is left out)."""
    host, port = services.endpoint(ctx)
    me = BrokerEntry(services.node_id, host, port, services.rack)
    if services.membership is not None:
        return services.membership.on_listener(ctx.listener_name, me)
    return [me]


def partition_entries(response_type: type[Any], services: Services, ctx: RequestContext,
                      count: int, topic: str = "",
                      epochs: Sequence[int] | None = None) -> tuple[Any, ...]:
    """The partitions of a topic: their leader, and their leader epoch (a dense topic's from
    its partitions, ``epochs``; 0 otherwise)."""
    partition_type = nested(response_type, "MetadataResponsePartition")
    ids = [b.node_id for b in live_brokers(services, ctx)]
    entries = []
    for index in range(count):
        node = placement.leader(ids, topic, index) if len(ids) > 1 else services.node_id
        entries.append(make(partition_type, error_code=ErrorCode.NONE, partition_index=index,
                            leader_id=node, leader_epoch=epochs[index] if epochs else 0,
                            replica_nodes=(node,), isr_nodes=(node,), offline_replicas=()))
    return tuple(entries)


async def handle(services: Services, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    """Kafka's rules with an authorizer: a listing of all topics leaves out those the
    principal may not DESCRIBE; a topic asked for by name that it may not DESCRIBE (or, to be
    auto-created, CREATE on the topic or the cluster) is TOPIC_AUTHORIZATION_FAILED, whether
    it exists or not."""
    call = decode_metadata(request)
    access = ctx.access
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "MetadataResponseTopic")
    broker_cls = nested(response_cls, "MetadataResponseBroker")
    include_ops = call.include_topic_authorized_operations

    async def topic_entry(error: ErrorCode, name: str | None, topic: TopicInfo | None,
                          topic_id: uuid.UUID | None = None) -> Any:
        try:
            epochs = await services.store.current_epochs(topic) if topic is not None else None
        except (RedisError, OSError) as exc:
            # Redis down or failing over: the partitions' leader epochs cannot be read, and
            # a Metadata answer must not guess them. LEADER_NOT_AVAILABLE is retriable: the
            # client asks again (the connection stays open).
            log.warning("Metadata: the leader epochs of %s could not be read: %s", name, exc)
            error, topic, epochs = ErrorCode.LEADER_NOT_AVAILABLE, None, None
        return make(
            topic_cls,
            error_code=error,
            name=name,
            topic_id=uuid.UUID(topic.topic_id) if topic else (topic_id or uuid.UUID(int=0)),
            is_internal=bool(name and is_internal(name)),
            partitions=partition_entries(response_cls, services, ctx, topic.partitions,
                                         topic.name, epochs) if topic else (),
            topic_authorized_operations=(access.operations(ResourceType.TOPIC, name)
                                         if include_ops and topic and name else NOT_REQUESTED),
        )

    if call.topics is None:
        entries = [await topic_entry(ErrorCode.NONE, topic.name, topic)
                   for topic in await services.topics.all()
                   if access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)]
    else:
        entries = [await _requested_topic(services, access, call, wanted, topic_entry)
                   for wanted in call.topics]
    brokers = tuple(make(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                    for b in live_brokers(services, ctx))
    cluster_ops = NOT_REQUESTED
    if call.include_cluster_authorized_operations:
        cluster_ops = (access.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                       if access.cluster_allowed(Operation.DESCRIBE) else 0)
    return make(
        response_cls,
        throttle_time=0,
        brokers=brokers,
        cluster_id=services.cluster_id,
        controller_id=services.node_id,
        topics=tuple(entries),
        cluster_authorized_operations=cluster_ops,
        error_code=ErrorCode.NONE,
    )


async def _requested_topic(services: Services, access: Access, call: MetadataCall,
                           wanted: MetadataTopic, topic_entry: Callable[..., Awaitable[Any]]) -> Any:
    name, topic_id = wanted.name, wanted.topic_id
    if name is None and topic_id is not None:
        found = await services.topics.by_id(str(topic_id))
        if found is None:
            return await topic_entry(ErrorCode.UNKNOWN_TOPIC_ID, None, None, topic_id)
        if not access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, found.name):
            return await topic_entry(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, None, topic_id)
        return await topic_entry(ErrorCode.NONE, found.name, found)
    if name is None:
        return await topic_entry(ErrorCode.INVALID_REQUEST, None, None)
    if not access.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return await topic_entry(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, None)
    try:
        validate_topic_name(name)
    except TopicNameError:
        return await topic_entry(ErrorCode.INVALID_TOPIC_EXCEPTION, name, None)
    try:
        known = await services.topics.get(name)
    except (RedisError, OSError) as exc:  # as in topic_entry: retriable, the connection kept
        log.warning("Metadata: topic %s could not be read: %s", name, exc)
        return await topic_entry(ErrorCode.LEADER_NOT_AVAILABLE, name, None)
    allow_auto = call.allow_auto_topic_creation
    if known is None and allow_auto and services.settings.topics.auto_create:
        if not (access.cluster_allowed(Operation.CREATE)
                or access.allowed(Operation.CREATE, ResourceType.TOPIC, name)):
            return await topic_entry(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, None)
        known = await services.auto_create(name)
    if known is None:
        return await topic_entry(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, None)
    return await topic_entry(ErrorCode.NONE, name, known)


APIS = (
    Api(ApiKey.METADATA, range(0, 14), handle,
        "auto-creates requested topics (on by default, 1 partition)"),
)
