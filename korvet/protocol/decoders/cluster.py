"""InitProducerId (v0-6) and DescribeCluster (v0-2) as version-free values.

InitProducerId names an existing producer (KIP-360) from v3: before, every request asks for a
new one. DescribeCluster asks for brokers or controllers from v1: before, for brokers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from korvet.protocol.kbuild import has_field
from korvet.protocol.messages import DescribeClusterRequest, InitProducerIdRequest

NO_PRODUCER = -1  # a producer id or epoch a request leaves unset
BROKERS_ENDPOINT = 1  # DescribeCluster's endpoint types: brokers (1), controllers (2)


@dataclass(frozen=True, slots=True)
class InitProducerIdCall:
    transactional_id: str | None
    producer_id: int  # NO_PRODUCER: a new producer
    producer_epoch: int
    transaction_timeout_ms: int = 60_000


def decode_init_producer_id(request: InitProducerIdRequest) -> InitProducerIdCall:
    shaped: Any = request  # the producer's id and epoch are asked for here, once
    timeout_ms = round(request.transaction_timeout.total_seconds() * 1000)
    if not has_field(type(request), "producer_id"):
        return InitProducerIdCall(request.transactional_id, NO_PRODUCER, NO_PRODUCER, timeout_ms)
    return InitProducerIdCall(request.transactional_id, int(shaped.producer_id),
                              int(shaped.producer_epoch), timeout_ms)


@dataclass(frozen=True, slots=True)
class DescribeClusterCall:
    include_cluster_authorized_operations: bool
    endpoint_type: int  # as sent: a type Kafka does not know is answered with an error


def decode_describe_cluster(request: DescribeClusterRequest) -> DescribeClusterCall:
    shaped: Any = request
    return DescribeClusterCall(
        bool(request.include_cluster_authorized_operations),
        int(shaped.endpoint_type) if has_field(type(request), "endpoint_type") else BROKERS_ENDPOINT)
