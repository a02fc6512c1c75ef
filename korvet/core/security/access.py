"""What one request may do: its principal and host against a snapshot of the ACLs.

An ``Access`` is a value (the ACL snapshot is immutable), made for each request from the
connection's principal and the broker's current snapshot; handlers that decide for
themselves (Metadata, ListGroups, ...) ask it, and the broker's check point applies the
rule table (korvet.core.security.rules) with it. Without an authorizer every question is
answered yes, and "authorized operations" fields list every operation the resource type
supports, as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from korvet.core.security import acl
from korvet.core.security.acl import AclSet, Operation, Policy, ResourceType

NOT_REQUESTED = -(2**31)  # the wire's "authorized operations were not asked for"


@dataclass(frozen=True, slots=True)
class Access:
    principal: str = acl.ANONYMOUS
    host: str = ""
    acls: AclSet | None = None  # None: no authorizer, everything is allowed
    policy: Policy = field(default_factory=Policy)

    @property
    def enabled(self) -> bool:
        return self.acls is not None

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if self.acls is None:
            return True
        return acl.authorize(self.acls, self.policy, self.principal, self.host, operation,
                             resource_type, name)

    def cluster_allowed(self, operation: Operation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, acl.CLUSTER_NAME)

    def allowed_on_some(self, operation: Operation, resource_type: ResourceType) -> bool:
        if self.acls is None:
            return True
        return acl.authorize_by_resource_type(self.acls, self.policy, self.principal, self.host,
                                              operation, resource_type)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        """The ``*_authorized_operations`` bit field for one resource."""
        if self.acls is None:
            return acl.operations_bitfield(acl.SUPPORTED_OPERATIONS[resource_type])
        return acl.operations_bitfield(acl.authorized_operations(
            self.acls, self.policy, self.principal, self.host, resource_type, name))


OPEN = Access()
