"""Share-group membership APIs (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

The rules are korvet/core/share_group.py's; korvet/server/share_groups.py keeps the groups
(membership in memory, existence and epoch in Redis) and says who coordinates them. v1 is
the only stable version of both (v0 was Kafka 4.0's early access, removed in 4.1). The
group APIs of korvet/server/handlers/groups.py list, describe and delete share groups
too; ShareFetch and ShareAcknowledge are the partition side's.
"""

from __future__ import annotations

import uuid
from typing import Any

from korvet.core import share_group as core
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.access import NOT_REQUESTED
from korvet.core.security.acl import ResourceType
from korvet.protocol import denials
from korvet.protocol.denials import Items, Shape, Whole, empty, flat_answer
from korvet.protocol.kbuild import make, nested, response_type
from korvet.protocol.messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.api import Api
from korvet.server.services import Services
from korvet.server.share_groups import ShareGroups


async def _topics(services: Services, names: set[str]) -> dict[str, tuple[int, str]]:
    """The partition count and id of each of ``names`` that exists."""
    found = {}
    for name in sorted(names):
        info = await services.topics.get(name)
        if info is not None:
            found[name] = (info.partitions, info.topic_id)
    return found


async def heartbeat(services: Services, ctx: RequestContext,
                    request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    response_cls = response_type(type(request))
    groups = services.part(ShareGroups)
    names = set(request.subscribed_topic_names or ()) | groups.subscribed(request.group_id)
    topics = await _topics(services, names)
    reply = await groups.heartbeat(core.Heartbeat(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, rack_id=request.rack_id,
        subscribed_topic_names=(None if request.subscribed_topic_names is None
                                else tuple(request.subscribed_topic_names)),
        client_id=ctx.client_id or "", client_host=ctx.client_host),
        {name: count for name, (count, _) in topics.items()})
    assignment = None
    if reply.assignment is not None:
        assignment_cls = nested(response_cls, "Assignment")
        partitions_cls = nested(response_cls, "TopicPartitions")
        assignment = make(assignment_cls, topic_partitions=tuple(
            make(partitions_cls, topic_id=uuid.UUID(topics[name][1]), partitions=parts)
            for name, parts in reply.assignment if name in topics))
    if reply.error is not ErrorCode.NONE:  # Kafka's refusal carries no member (id null)
        return _heartbeat_refused(response_cls, reply.error, reply.message)
    return make(response_cls, throttle_time=0, error_code=reply.error,
                error_message=reply.message, member_id=reply.member_id,
                member_epoch=reply.member_epoch,
                heartbeat_interval=reply.heartbeat_interval_ms, assignment=assignment)


async def describe(services: Services, ctx: RequestContext,
                   request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    response_cls = response_type(type(request))
    groups = services.part(ShareGroups)
    described = []
    for group_id in request.group_ids:
        found = await groups.describe(group_id)
        operations = (ctx.access.operations(ResourceType.GROUP, group_id)
                      if request.include_authorized_operations else NOT_REQUESTED)
        if isinstance(found, core.ShareGroup):
            described.append(await _described(services, response_cls, found, operations))
            continue
        if isinstance(found, ErrorCode):
            error, message = found, None
        elif not group_id:
            error, message = ErrorCode.INVALID_GROUP_ID, None
        else:
            error = ErrorCode.GROUP_ID_NOT_FOUND
            message = (f"Group {group_id} is not a share group." if groups.is_classic(group_id)
                       else f"Group {group_id} not found.")
        described.append(_refused(response_cls, group_id, error, message))
    return make(response_cls, throttle_time=0, groups=tuple(described))


def _refused(response_cls: type[Any], group_id: str, error: ErrorCode,
             message: str | None) -> Any:
    return make(nested(response_cls, "DescribedGroup"), error_code=error,
                error_message=message, group_id=group_id, group_state="", group_epoch=0,
                assignment_epoch=0, assignor_name="", members=(),
                authorized_operations=NOT_REQUESTED)


async def _described(services: Services, response_cls: type[Any], group: core.ShareGroup,
                     operations: int) -> Any:
    member_cls = nested(response_cls, "Member")
    assignment_cls = nested(response_cls, "Assignment")
    partitions_cls = nested(response_cls, "TopicPartitions")
    names = {t for m in group.members.values() for t, _ in m.assignment}
    topics = await _topics(services, names)
    members = tuple(make(
        member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=m.subscribed,
        assignment=make(assignment_cls, topic_partitions=tuple(
            make(partitions_cls, topic_id=uuid.UUID(topics[t][1]), topic_name=t,
                 partitions=parts)
            for t, parts in m.assignment if t in topics)))
        for _, m in sorted(group.members.items()))
    return make(nested(response_cls, "DescribedGroup"), error_code=ErrorCode.NONE,
                error_message=None, group_id=group.group_id, group_state=group.state,
                group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                assignor_name=core.ASSIGNOR, members=members, authorized_operations=operations)


def _heartbeat_refused(response_cls: type[Any], code: ErrorCode, message: str | None) -> Any:
    return make(response_cls, throttle_time=0, error_code=code, error_message=message,
                member_id=None, member_epoch=0, heartbeat_interval=0, assignment=None)


def _heartbeat_denied(response_cls: type[Any], request: Any, version: int,
                      code: ErrorCode) -> Any:
    return _heartbeat_refused(response_cls, code, None)


APIS = (
    Api(ApiKey.SHARE_GROUP_HEARTBEAT, range(1, 2), heartbeat,
        "share-group membership: join (epoch 0), heartbeat, leave (-1); the simple assignor "
        "(docs/implementers/share-group-membership.md)",
        Shape((Whole(denials.group_id, _heartbeat_denied),))),
    Api(ApiKey.SHARE_GROUP_DESCRIBE, range(1, 2), describe,
        "share groups' state, epochs, members and assignments; authorized operations",
        Shape((Items("group_ids", "groups", flat_answer(
            "DescribedGroup", "group_id", error_message=None, group_state="", group_epoch=0,
            assignment_epoch=0, assignor_name="", members=(),
            authorized_operations=NOT_REQUESTED),
            name_of=str, empty=empty(groups=())),))),
)
