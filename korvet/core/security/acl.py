"""Kafka's ACL model and its authorizer's decision, as Apache Kafka's StandardAuthorizer decides.

An ACL binding allows or denies one principal (``User:alice``, or ``User:*`` for anyone),
from one host (an IP address, or ``*``), one operation on resources of one type whose
names match a pattern (LITERAL: the name, or ``*`` for every name; PREFIXED: names that
start with it). Deciding one action (principal, host, operation, resource):

1. a super user is allowed everything;
2. an ACL that matches the resource, the principal (or ``User:*``), the host (or ``*``)
   and the operation (or ALL) decides: any DENY wins over every ALLOW;
3. an ALLOW for READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one for
   ALTER_CONFIGS also allows DESCRIBE_CONFIGS (a DENY implies nothing);
4. when no ACL at all names the resource (for any principal), the answer is
   ``allow_everyone_if_no_acl_found`` (false by default);
5. otherwise, denied.

The numbers are Kafka's wire codes (ResourceType, PatternType, AclOperation,
AclPermissionType); filters (DescribeAcls, DeleteAcls) match as Kafka's AclBindingFilter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations each resource type supports (Kafka's AclEntry.supportedOperations): what
# "authorized operations" fields (Metadata, DescribeGroups, DescribeCluster) may list.
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE, Operation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}

_IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                               Operation.DELETE, Operation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})
_CONCRETE_TYPES = frozenset(SUPPORTED_OPERATIONS)


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type is PatternType.PREFIXED and name.startswith(self.resource_name)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (or ANY) matches everything in that field; pattern MATCH
    matches every pattern that would apply to a resource of that literal name."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if (self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
                and self.pattern_type != acl.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type is PatternType.LITERAL:  # MATCH
            return acl.resource_name in (self.resource_name, WILDCARD)
        return acl.pattern_type is PatternType.PREFIXED and self.resource_name.startswith(
            acl.resource_name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation is Operation.ANY or self.operation == acl.operation)
                and (self.permission is Permission.ANY or self.permission == acl.permission))

    def invalid_reason(self) -> str | None:
        """Why Kafka refuses this filter in DeleteAcls/DescribeAcls (UNKNOWN values), or None."""
        if ResourceType.UNKNOWN in (self.resource_type,) or self.pattern_type is PatternType.UNKNOWN:
            return "Filter contains UNKNOWN elements"
        if self.operation is Operation.UNKNOWN or self.permission is Permission.UNKNOWN:
            return "Filter contains UNKNOWN elements"
        return None


def invalid_binding_reason(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), or None when it is valid."""
    if acl.resource_type not in _CONCRETE_TYPES:
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (Operation.UNKNOWN, Operation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permissionType {acl.permission.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type is ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present "
                "separating the principal type from the principal name)")
    return None


@dataclass(frozen=True, slots=True)
class Policy:
    """How a broker with an authorizer decides what no ACL covers."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


@dataclass(frozen=True, slots=True)
class AclSet:
    """Every ACL of the cluster, indexed by resource type (a snapshot: immutable)."""

    bindings: frozenset[AclBinding] = frozenset()
    by_type: Mapping[ResourceType, tuple[AclBinding, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, bindings: Iterable[AclBinding]) -> AclSet:
        frozen = frozenset(bindings)
        index: dict[ResourceType, list[AclBinding]] = {}
        for acl in sorted(frozen):
            index.setdefault(acl.resource_type, []).append(acl)
        return cls(frozen, {k: tuple(v) for k, v in index.items()})

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [acl for acl in sorted(self.bindings) if acl_filter.matches(acl)]


def _entry_applies(acl: AclBinding, principal: str, host: str, operation: Operation) -> bool:
    if acl.principal not in (principal, WILDCARD_PRINCIPAL):
        return False
    if acl.host not in (host, WILDCARD):
        return False
    if acl.operation is Operation.ALL or acl.operation == operation:
        return True
    if acl.permission is not Permission.ALLOW:
        return False
    if operation is Operation.DESCRIBE:
        return acl.operation in _IMPLIES_DESCRIBE
    if operation is Operation.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def authorize(acls: AclSet, policy: Policy, principal: str, host: str, operation: Operation,
              resource_type: ResourceType, name: str) -> bool:
    """Kafka's decision for one action on one resource (a literal name)."""
    if principal in policy.super_users:
        return True
    named = False
    allowed = False
    for acl in acls.by_type.get(resource_type, ()):
        if not acl.matches_resource(resource_type, name):
            continue
        named = True
        if not _entry_applies(acl, principal, host, operation):
            continue
        if acl.permission is Permission.DENY:
            return False
        allowed = allowed or acl.permission is Permission.ALLOW
    if allowed:
        return True
    return not named and policy.allow_everyone_if_no_acl_found


def authorized_operations(acls: AclSet, policy: Policy, principal: str, host: str,
                          resource_type: ResourceType, name: str) -> frozenset[Operation]:
    return frozenset(op for op in SUPPORTED_OPERATIONS.get(resource_type, ())
                     if authorize(acls, policy, principal, host, op, resource_type, name))


def operations_bitfield(operations: Iterable[Operation]) -> int:
    """The int32 bit field of the wire's ``*_authorized_operations`` (bit n = operation code n)."""
    return sum(1 << int(op) for op in set(operations))


def authorize_by_resource_type(acls: AclSet, policy: Policy, principal: str, host: str,
                               operation: Operation, resource_type: ResourceType) -> bool:
    """Whether the principal may do ``operation`` on *some* resource of the type (Kafka's
    Authorizer.authorizeByResourceType: an ALLOW not shadowed by a DENY of the same literal
    name or of a prefix of it; a DENY on the wildcard literal denies the type)."""
    if authorize(acls, policy, principal, host, operation, resource_type, "hardcode"):
        return True
    deny_literal: set[str] = set()
    deny_prefix: set[str] = set()
    allow: list[tuple[PatternType, str]] = []
    for acl in acls.by_type.get(resource_type, ()):
        if acl.host not in (host, WILDCARD) or acl.principal not in (principal, WILDCARD_PRINCIPAL):
            continue
        if acl.operation not in (operation, Operation.ALL):
            continue
        if acl.permission is Permission.DENY:
            if acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                return False
            (deny_literal if acl.pattern_type is PatternType.LITERAL else deny_prefix).add(
                acl.resource_name)
        elif acl.permission is Permission.ALLOW:
            if acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                return True
            allow.append((acl.pattern_type, acl.resource_name))
    for pattern, name in allow:
        if pattern is PatternType.LITERAL and name in deny_literal:
            continue
        if any(name[:i] in deny_prefix for i in range(1, len(name) + 1)):
            continue
        return True
    return False


def principal_parts(principal: str) -> tuple[str, str]:
    """("User", "alice") from "User:alice"."""
    kind, _, name = principal.partition(":")
    return kind, name
