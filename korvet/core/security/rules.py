"""Which ACL each Kafka API needs, as Apache Kafka's KafkaApis checks it: one row per API key
(korvet/core/api_keys.py).

A row lists the checks of a request, in Kafka's order. Each ``Need`` says which resources
of the request it applies to (``Scope``), the operation, and the error a denied resource
answers. The broker applies the rows at one check point (korvet/server/authz.py) before a
handler runs: denied items are taken out of the request and answered with the error,
a denied request-wide resource (a group, the cluster) answers the whole request with it.
APIs marked ``custom`` take their decisions inside the handler, because Kafka's answer
there is not an error but a filtered result (Metadata hides topics a principal may not
describe, ListGroups lists only describable groups, InitProducerId accepts WRITE on any
topic instead of IDEMPOTENT_WRITE on the cluster).

A new API adds its row here (its handler module declares the rest, korvet/server/api.py); an
API without a row is refused to every principal but the super users when an authorizer is on
(and a test lists every registered API without one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.acl import Operation, ResourceType


class Scope(Enum):
    TOPICS = "topics"  # every topic the request names (by name or id); per item
    GROUP = "group"  # the request's one group id; the whole request
    GROUPS = "groups"  # every group the request names; per item
    CLUSTER = "cluster"  # the cluster; the whole request
    CLUSTER_ITEMS = "cluster-items"  # the cluster, answered on every item (CreateAcls, ...)
    CONFIG_RESOURCES = "config-resources"  # topics, the broker, groups, per resource (configs APIs)
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
    key: ApiKey
    needs: tuple[Need, ...] = ()
    # what the handler decides itself with the connection's access (see module doc); empty: nothing
    custom: str = ""
    before_auth: bool = False  # served on a SASL listener before authentication

    @property
    def name(self) -> str:
        return self.key.kafka_name


_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

_READ_GROUP = Need(Scope.GROUP, Operation.READ, _GROUP_DENIED)


def _topics(operation: Operation) -> Need:
    return Need(Scope.TOPICS, operation, _TOPIC_DENIED)


_CLUSTER_DESCRIBE = Need(Scope.CLUSTER, Operation.DESCRIBE, _CLUSTER_DENIED)
_CLUSTER_ALTER_ITEMS = Need(Scope.CLUSTER_ITEMS, Operation.ALTER, _CLUSTER_DENIED)
_GROUPS_DESCRIBE = Need(Scope.GROUPS, Operation.DESCRIBE, _GROUP_DENIED)


def _configs(operation: Operation) -> Need:
    return Need(Scope.CONFIG_RESOURCES, operation, _TOPIC_DENIED)


_ROWS = (
    ApiRule(ApiKey.PRODUCE, (Need(Scope.TRANSACTIONAL_ID, Operation.WRITE, _TXN_DENIED),
                             _topics(Operation.WRITE))),
    ApiRule(ApiKey.FETCH, (_topics(Operation.READ),)),
    ApiRule(ApiKey.LIST_OFFSETS, (_topics(Operation.DESCRIBE),)),
    ApiRule(ApiKey.METADATA, custom="DESCRIBE on each topic (others hidden or denied); CREATE on "
                                     "the topic or the cluster to auto-create it"),
    ApiRule(ApiKey.OFFSET_COMMIT, (_READ_GROUP, _topics(Operation.READ))),
    ApiRule(ApiKey.OFFSET_FETCH, (_GROUPS_DESCRIBE, _topics(Operation.DESCRIBE))),
    ApiRule(ApiKey.FIND_COORDINATOR, (_GROUPS_DESCRIBE,)),
    ApiRule(ApiKey.JOIN_GROUP, (_READ_GROUP,)),
    ApiRule(ApiKey.HEARTBEAT, (_READ_GROUP,)),
    ApiRule(ApiKey.LEAVE_GROUP, (_READ_GROUP,)),
    ApiRule(ApiKey.SYNC_GROUP, (_READ_GROUP,)),
    ApiRule(ApiKey.DESCRIBE_GROUPS, (_GROUPS_DESCRIBE,),
            custom="each group's authorized operations"),
    ApiRule(ApiKey.LIST_GROUPS, custom="DESCRIBE on the cluster, else only the groups one may "
                                        "DESCRIBE are listed"),
    ApiRule(ApiKey.SASL_HANDSHAKE, before_auth=True),
    ApiRule(ApiKey.API_VERSIONS, before_auth=True),
    ApiRule(ApiKey.CREATE_TOPICS, (Need(Scope.TOPICS, Operation.CREATE, _TOPIC_DENIED,
                                        or_cluster=Operation.CREATE),)),
    ApiRule(ApiKey.DELETE_TOPICS, (_topics(Operation.DELETE),)),
    ApiRule(ApiKey.DELETE_RECORDS, (_topics(Operation.DELETE),)),
    ApiRule(ApiKey.INIT_PRODUCER_ID, custom="WRITE on the transactional id; without one, "
                                             "IDEMPOTENT_WRITE on the cluster or WRITE on any topic"),
    ApiRule(ApiKey.OFFSET_FOR_LEADER_EPOCH, (_topics(Operation.DESCRIBE),)),
    ApiRule(ApiKey.DESCRIBE_ACLS, (_CLUSTER_DESCRIBE,)),
    ApiRule(ApiKey.CREATE_ACLS, (_CLUSTER_ALTER_ITEMS,)),
    ApiRule(ApiKey.DELETE_ACLS, (_CLUSTER_ALTER_ITEMS,)),
    ApiRule(ApiKey.DESCRIBE_CONFIGS, (_configs(Operation.DESCRIBE_CONFIGS),)),
    ApiRule(ApiKey.ALTER_CONFIGS, (_configs(Operation.ALTER_CONFIGS),)),
    ApiRule(ApiKey.DESCRIBE_LOG_DIRS, (_CLUSTER_DESCRIBE,)),
    ApiRule(ApiKey.SASL_AUTHENTICATE, before_auth=True),
    ApiRule(ApiKey.CREATE_PARTITIONS, (_topics(Operation.ALTER),)),
    ApiRule(ApiKey.DELETE_GROUPS, (Need(Scope.GROUPS, Operation.DELETE, _GROUP_DENIED),)),
    ApiRule(ApiKey.ELECT_LEADERS, (Need(Scope.CLUSTER, Operation.ALTER, _CLUSTER_DENIED),)),
    ApiRule(ApiKey.INCREMENTAL_ALTER_CONFIGS, (_configs(Operation.ALTER_CONFIGS),)),
    ApiRule(ApiKey.LIST_PARTITION_REASSIGNMENTS, (_CLUSTER_DESCRIBE,)),
    ApiRule(ApiKey.OFFSET_DELETE, (Need(Scope.GROUP, Operation.DELETE, _GROUP_DENIED),
                                   _topics(Operation.READ))),
    ApiRule(ApiKey.SHARE_GROUP_HEARTBEAT, (_READ_GROUP,)),
    ApiRule(ApiKey.SHARE_GROUP_DESCRIBE, (_GROUPS_DESCRIBE,),
            custom="each group's authorized operations"),
    ApiRule(ApiKey.DESCRIBE_CLIENT_QUOTAS, (Need(Scope.CLUSTER, Operation.DESCRIBE_CONFIGS,
                                                 _CLUSTER_DENIED),)),
    ApiRule(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, (_CLUSTER_DESCRIBE,)),
    ApiRule(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (_CLUSTER_ALTER_ITEMS,)),
    ApiRule(ApiKey.DESCRIBE_CLUSTER, custom="the cluster's authorized operations"),
    ApiRule(ApiKey.DESCRIBE_PRODUCERS, (_topics(Operation.READ),)),
    ApiRule(ApiKey.LIST_TRANSACTIONS, custom="lists the transactional ids one may DESCRIBE"),
    ApiRule(ApiKey.ADD_PARTITIONS_TO_TXN, custom="WRITE on the transactional id, then on each "
                                                  "topic (TOPIC_AUTHORIZATION_FAILED per partition)"),
    ApiRule(ApiKey.ADD_OFFSETS_TO_TXN, custom="WRITE on the transactional id, READ on the group"),
    ApiRule(ApiKey.END_TXN, custom="WRITE on the transactional id"),
    ApiRule(ApiKey.WRITE_TXN_MARKERS, custom="CLUSTER_ACTION on the cluster, per partition"),
    ApiRule(ApiKey.TXN_OFFSET_COMMIT, custom="WRITE on the transactional id, READ on the group, "
                                              "READ on each topic"),
    ApiRule(ApiKey.DESCRIBE_TRANSACTIONS, custom="DESCRIBE on each transactional id"),
    ApiRule(ApiKey.DESCRIBE_TOPIC_PARTITIONS, custom="as Metadata: DESCRIBE on each topic"),
    ApiRule(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, (_GROUPS_DESCRIBE,),
            custom="DESCRIBE on each topic (others left out, or TOPIC_AUTHORIZATION_FAILED "
                   "when named)"),
    ApiRule(ApiKey.ALTER_SHARE_GROUP_OFFSETS, (_READ_GROUP,),
            custom="READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)"),
    ApiRule(ApiKey.DELETE_SHARE_GROUP_OFFSETS, (Need(Scope.GROUP, Operation.DELETE, _GROUP_DENIED),),
            custom="READ on each topic (TOPIC_AUTHORIZATION_FAILED per topic)"),
    ApiRule(ApiKey.SHARE_FETCH, (_READ_GROUP,),
            custom="READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)"),
    ApiRule(ApiKey.SHARE_ACKNOWLEDGE, (_READ_GROUP,),
            custom="READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)"),
)

RULES: Mapping[ApiKey, ApiRule] = {rule.key: rule for rule in _ROWS}

# Configs APIs: the broker resource is checked on the cluster, with this error.
CONFIG_BROKER_ERROR = _CLUSTER_DENIED
CONFIG_TOPIC_TYPE, CONFIG_BROKER_TYPES = 2, (4, 8)  # ConfigResource types: topic; broker, broker logger
CONFIG_GROUP_TYPE = 32  # ConfigResource type of a group's configs


def rule_for(key: ApiKey) -> ApiRule | None:
    return RULES.get(key)
