"""InitProducerId (key 22) and DescribeCluster (key 60).

InitProducerId hands out producer ids from a Redis counter, so ids are unique
across broker processes and restarts; the idempotent producer state per
partition lives in the partition's meta hash (see the append script). An
existing producer asking again with its id and epoch (KIP-360) gets the next
epoch. When Redis cannot hand out an id (down, failing over, full), the answer is
COORDINATOR_NOT_AVAILABLE, which the producer retries; the connection stays open.
A transactional id goes to the transaction coordinator
(korvet/server/handlers/transactions.py).
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.access import NOT_REQUESTED
from korvet.core.security.acl import CLUSTER_NAME, Operation, ResourceType
from korvet.protocol.decoders.cluster import (
    BROKERS_ENDPOINT,
    decode_describe_cluster,
    decode_init_producer_id,
)
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.handlers.metadata import live_brokers
from korvet.server.handlers.transactions import init_transactional
from korvet.server.services import Services

log = logging.getLogger(__name__)

_MAX_EPOCH = 32767
CONTROLLERS_ENDPOINT = 2


async def init_producer_id(services: Services, ctx: RequestContext,
                           request: InitProducerIdRequest) -> InitProducerIdResponse:
    call = decode_init_producer_id(request)
    response_cls = response_type(type(request))
    if (call.producer_id < 0) != (call.producer_epoch < 0):
        # KIP-360: the producer id and epoch are both -1 (a new producer) or both valid, as
        # Kafka's KafkaApis checks before anything else (found by the differential mode)
        return make(response_cls, throttle_time=0, error_code=ErrorCode.INVALID_REQUEST,
                    producer_id=-1, producer_epoch=-1)
    if call.transactional_id is not None:
        return await init_transactional(services, ctx, call.transactional_id,
                                        call.transaction_timeout_ms, call.producer_id,
                                        call.producer_epoch, response_cls)
    access = ctx.access
    if not (access.cluster_allowed(Operation.IDEMPOTENT_WRITE)
            or access.allowed_on_some(Operation.WRITE, ResourceType.TOPIC)):
        return make(response_cls, throttle_time=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    producer_id=-1, producer_epoch=-1)
    producer_id, epoch = call.producer_id, call.producer_epoch
    if producer_id >= 0 and 0 <= epoch < _MAX_EPOCH:
        return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE,
                    producer_id=producer_id, producer_epoch=epoch + 1)
    try:
        new_id = await services.store.next_producer_id()
    except (RedisError, OSError) as exc:
        guard = services.redis_memory
        if guard is None or not guard.write_refused(exc):
            # Redis down or failing over (a full Redis is logged by the memory watch).
            log.warning("InitProducerId: Redis failed (%s); answering COORDINATOR_NOT_AVAILABLE",
                        exc)
        # A retriable error the producer retries InitProducerId on, as Kafka's when it
        # cannot write its state; the connection stays open.
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                    producer_epoch=-1)
    return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE,
                producer_id=new_id, producer_epoch=0)


async def describe_cluster(services: Services, ctx: RequestContext,
                           request: DescribeClusterRequest) -> DescribeClusterResponse:
    call = decode_describe_cluster(request)
    response_cls = response_type(type(request))
    broker_cls = nested(response_cls, "DescribeClusterBroker")
    endpoint = call.endpoint_type
    brokers = tuple(make(broker_cls, broker_id=b.node_id, host=b.host, port=b.port,
                         rack=b.rack, is_fenced=False) for b in live_brokers(services, ctx))
    operations = NOT_REQUESTED
    if call.include_cluster_authorized_operations:
        access = ctx.access  # Kafka: 0 without DESCRIBE on the cluster; no error
        operations = (access.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                      if access.cluster_allowed(Operation.DESCRIBE) else 0)
    if endpoint not in (BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT):
        return make(response_cls, throttle_time=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    # endpoint_type keeps the schema's default (1), as Kafka's error answer does
                    error_message=f"endpoint type {endpoint} is not known", endpoint_type=BROKERS_ENDPOINT,
                    cluster_id=services.cluster_id, controller_id=-1, brokers=(),
                    cluster_authorized_operations=operations)
    return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE, error_message=None,
                endpoint_type=endpoint, cluster_id=services.cluster_id,
                controller_id=services.node_id, brokers=brokers,
                cluster_authorized_operations=operations)


APIS = (
    Api(ApiKey.INIT_PRODUCER_ID, range(0, 7), init_producer_id,
        "ids from a Redis counter; KIP-360 epoch bump; a transactional id: the transaction "
        "coordinator (transactions.py)"),
    Api(ApiKey.DESCRIBE_CLUSTER, range(0, 3), describe_cluster,
        "this broker, as broker and controller"),
)
