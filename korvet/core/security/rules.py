"""Which ACL each Kafka API needs, as Apache Kafka's KafkaApis checks it: one row per API key.

A row lists the checks of a request, in Kafka's order. Each ``Need`` says which resources
of the request it applies to (``Scope``), the operation, and the error a denied resource
answers. The broker applies the rows at one check point (korvet/server/authz.py) before a
handler runs: denied items are taken out of the request and answered with the error,
a denied request-wide resource (a group, the cluster) answers the whole request with it.
APIs marked ``custom`` take their decisions inside the handler, because Kafka's answer
there is not an error but a filtered result (Metadata hides topics a principal may not
describe, ListGroups lists only describable groups, InitProducerId accepts WRITE on any
topic instead of IDEMPOTENT_WRITE on the cluster).

A new API adds its row here; an API without a row is refused to every principal but the
super users when an authorizer is on (and a test lists every registered API without one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from korvet.core.errors import ErrorCode
from korvet.core.security.acl import Operation, ResourceType


class Scope(Enum):
    TOPICS = "topics"  # every topic the request names (by name or id); per item
    GROUP = "group"  # the request's one group id; the whole request
    GROUPS = "groups"  # every group the request names; per item
    CLUSTER = "cluster"  # the cluster; the whole request
    CLUSTER_ITEMS = "cluster-items"  # the cluster, answered on every item (CreateAcls, ...)
    CONFIG_RESOURCES = "config-resources"  # topics and the broker, per resource (configs APIs)
    TRANSACTIONAL_ID = "transactional-id"  # the request's transactional id, when it has one


@dataclass(frozen=True, slots=True)
class Need:
    scope: Scope
    operation: Operation
    error: ErrorCode
    # TOPICS only: the resource is also granted by this operation on the cluster (CreateTopics:
    # CREATE on the cluster or on the topic).
    or_cluster: Operation | None = None

    @property
    def resource_type(self) -> ResourceType:
        return {
            Scope.TOPICS: ResourceType.TOPIC, Scope.GROUP: ResourceType.GROUP,
            Scope.GROUPS: ResourceType.GROUP, Scope.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
            Scope.CONFIG_RESOURCES: ResourceType.TOPIC,
        }.get(self.scope, ResourceType.CLUSTER)


@dataclass(frozen=True, slots=True)
class ApiRule:
    name: str
    needs: tuple[Need, ...] = ()
    custom: bool = False  # the handler decides with the connection's access (see module doc)
    before_auth: bool = False  # served on a SASL listener before authentication


_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

_READ_GROUP = Need(Scope.GROUP, Operation.READ, _GROUP_DENIED)


def _topics(operation: Operation) -> Need:
    return Need(Scope.TOPICS, operation, _TOPIC_DENIED)


RULES: Mapping[int, ApiRule] = {
    0: ApiRule("Produce", (Need(Scope.TRANSACTIONAL_ID, Operation.WRITE, _TXN_DENIED),
                           _topics(Operation.WRITE))),
    1: ApiRule("Fetch", (_topics(Operation.READ),)),
    2: ApiRule("ListOffsets", (_topics(Operation.DESCRIBE),)),
    3: ApiRule("Metadata", custom=True),  # DESCRIBE topic (hidden/denied), CREATE to auto-create
    8: ApiRule("OffsetCommit", (_READ_GROUP, _topics(Operation.READ))),
    9: ApiRule("OffsetFetch", (Need(Scope.GROUPS, Operation.DESCRIBE, _GROUP_DENIED),
                               _topics(Operation.DESCRIBE))),
    10: ApiRule("FindCoordinator", (Need(Scope.GROUPS, Operation.DESCRIBE, _GROUP_DENIED),)),
    11: ApiRule("JoinGroup", (_READ_GROUP,)),
    12: ApiRule("Heartbeat", (_READ_GROUP,)),
    13: ApiRule("LeaveGroup", (_READ_GROUP,)),
    14: ApiRule("SyncGroup", (_READ_GROUP,)),
    15: ApiRule("DescribeGroups", (Need(Scope.GROUPS, Operation.DESCRIBE, _GROUP_DENIED),),
                custom=True),  # plus the authorized operations of each group
    16: ApiRule("ListGroups", custom=True),  # DESCRIBE cluster, else only describable groups
    17: ApiRule("SaslHandshake", before_auth=True),
    18: ApiRule("ApiVersions", before_auth=True),
    19: ApiRule("CreateTopics", (Need(Scope.TOPICS, Operation.CREATE, _TOPIC_DENIED,
                                      or_cluster=Operation.CREATE),)),
    20: ApiRule("DeleteTopics", (_topics(Operation.DELETE),)),
    21: ApiRule("DeleteRecords", (_topics(Operation.DELETE),)),
    22: ApiRule("InitProducerId", custom=True),  # WRITE txn id; IDEMPOTENT_WRITE or WRITE any topic
    23: ApiRule("OffsetForLeaderEpoch", (_topics(Operation.DESCRIBE),)),
    29: ApiRule("DescribeAcls", (Need(Scope.CLUSTER, Operation.DESCRIBE, _CLUSTER_DENIED),)),
    30: ApiRule("CreateAcls", (Need(Scope.CLUSTER_ITEMS, Operation.ALTER, _CLUSTER_DENIED),)),
    31: ApiRule("DeleteAcls", (Need(Scope.CLUSTER_ITEMS, Operation.ALTER, _CLUSTER_DENIED),)),
    32: ApiRule("DescribeConfigs", (Need(Scope.CONFIG_RESOURCES, Operation.DESCRIBE_CONFIGS,
                                         _TOPIC_DENIED),)),
    33: ApiRule("AlterConfigs", (Need(Scope.CONFIG_RESOURCES, Operation.ALTER_CONFIGS,
                                      _TOPIC_DENIED),)),
    35: ApiRule("DescribeLogDirs", (Need(Scope.CLUSTER, Operation.DESCRIBE, _CLUSTER_DENIED),)),
    36: ApiRule("SaslAuthenticate", before_auth=True),
    37: ApiRule("CreatePartitions", (_topics(Operation.ALTER),)),
    42: ApiRule("DeleteGroups", (Need(Scope.GROUPS, Operation.DELETE, _GROUP_DENIED),)),
    43: ApiRule("ElectLeaders", (Need(Scope.CLUSTER, Operation.ALTER, _CLUSTER_DENIED),)),
    44: ApiRule("IncrementalAlterConfigs", (Need(Scope.CONFIG_RESOURCES, Operation.ALTER_CONFIGS,
                                                 _TOPIC_DENIED),)),
    46: ApiRule("ListPartitionReassignments", (Need(Scope.CLUSTER, Operation.DESCRIBE,
                                                    _CLUSTER_DENIED),)),
    47: ApiRule("OffsetDelete", (Need(Scope.GROUP, Operation.DELETE, _GROUP_DENIED),
                                 _topics(Operation.READ))),
    48: ApiRule("DescribeClientQuotas", (Need(Scope.CLUSTER, Operation.DESCRIBE_CONFIGS,
                                              _CLUSTER_DENIED),)),
    50: ApiRule("DescribeUserScramCredentials", (Need(Scope.CLUSTER, Operation.DESCRIBE,
                                                      _CLUSTER_DENIED),)),
    51: ApiRule("AlterUserScramCredentials", (Need(Scope.CLUSTER_ITEMS, Operation.ALTER,
                                                   _CLUSTER_DENIED),)),
    60: ApiRule("DescribeCluster", custom=True),  # only its authorized-operations field
    61: ApiRule("DescribeProducers", (_topics(Operation.READ),)),
    66: ApiRule("ListTransactions", ()),  # lists the ids one may DESCRIBE: none exist
    75: ApiRule("DescribeTopicPartitions", custom=True),  # as Metadata: DESCRIBE topic
}

# Configs APIs: the broker resource is checked on the cluster, with this error.
CONFIG_BROKER_ERROR = _CLUSTER_DENIED
CONFIG_TOPIC_TYPE, CONFIG_BROKER_TYPES = 2, (4, 8)  # ConfigResource types: topic; broker, broker logger


def rule_for(api_key: int) -> ApiRule | None:
    return RULES.get(api_key)
