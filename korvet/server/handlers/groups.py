"""The classic consumer-group APIs, wired to the pure coordinator (korvet/core/coordinator).

Each handler turns a kio request into a coordinator event (or a read-only query),
waits for the reply the machine produces (possibly much later: a JoinGroup held
until the rebalance completes) and builds the version's response. Version
differences become plain event fields: JoinGroup v4+ requires a known member id,
v5+ carries group instance ids, v9 may skip the assignment; OffsetCommit v9+
answers GROUP_ID_NOT_FOUND for an unknown group. With one broker, it coordinates
every group (FindCoordinator names it); with several on one Redis, the holder of a
group's lease does (korvet/server/ownership.py), the others answer NOT_COORDINATOR.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from redis.exceptions import RedisError

from korvet.core import coordinator as core
from korvet.core import placement
from korvet.core.security.access import NOT_REQUESTED
from korvet.core.security.acl import Operation, ResourceType
from korvet.protocol.kbuild import has_field, make, millis, nested, response_type
from korvet.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from korvet.protocol.registry import RequestContext
from korvet.server.coordinator import CoordinatorUnavailable, GroupCoordinator, NotCoordinator
from korvet.server.services import Services
from korvet.storage.leases import BrokerEntry

log = logging.getLogger("korvet.groups")

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_DELETE = 47
DESCRIBE_GROUPS, LIST_GROUPS, OFFSET_COMMIT, OFFSET_FETCH, DELETE_GROUPS = 15, 16, 8, 9, 42
FIND_COORDINATOR_VERSIONS = range(0, 7)
JOIN_GROUP_VERSIONS = range(0, 10)
HEARTBEAT_VERSIONS = range(0, 5)
LEAVE_GROUP_VERSIONS = range(0, 6)
SYNC_GROUP_VERSIONS = range(0, 6)
DESCRIBE_GROUPS_VERSIONS = range(0, 7)
LIST_GROUPS_VERSIONS = range(0, 6)
OFFSET_COMMIT_VERSIONS = range(2, 10)  # v10 identifies topics by id: not served
OFFSET_FETCH_VERSIONS = range(1, 10)  # v10 identifies topics by id: not served
DELETE_GROUPS_VERSIONS = range(0, 3)
OFFSET_DELETE_VERSIONS = range(0, 1)

GROUP_KEY, TRANSACTION_KEY = 0, 1


def _error(code: core.ErrorCode | int) -> ErrorCode:
    return ErrorCode(int(code))


async def _ask(coordinator: GroupCoordinator,
               event: core.RequestEvent) -> core.Reply | ErrorCode:
    """The machine's reply, or the error a request gets without one: NOT_COORDINATOR when
    several brokers share Redis and this one does not hold the group's lease (clients
    look the coordinator up again), else COORDINATOR_NOT_AVAILABLE (they retry)."""
    try:
        return await coordinator.request(event)
    except NotCoordinator:
        return ErrorCode.not_coordinator
    except CoordinatorUnavailable:
        return ErrorCode.coordinator_not_available


def _failure(reply: object) -> ErrorCode:
    return reply if isinstance(reply, ErrorCode) else ErrorCode.coordinator_not_available


def _owner_error(coordinator: GroupCoordinator, group_id: str) -> ErrorCode:
    """Queries answer from this broker's copy only for the groups it coordinates."""
    return ErrorCode.none if coordinator.owns(group_id) else ErrorCode.not_coordinator


# --- FindCoordinator ----------------------------------------------------------------------

async def find_coordinator(services: Services, ctx: RequestContext,
                           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    response_cls = response_type(type(request))
    keys = list(getattr(request, "coordinator_keys", ()) or ())
    single = not has_field(type(request), "coordinator_keys")
    if single:
        keys = [getattr(request, "key", "")]
    key_type = getattr(request, "key_type", GROUP_KEY)

    owners = ({k: await _group_owner(services, ctx, k) for k in keys}
              if key_type == GROUP_KEY else {})

    def answer(key: str) -> dict[str, Any]:
        if key_type == GROUP_KEY:
            owner = owners[key]
            if isinstance(owner, str):
                return {"key": key, "node_id": -1, "host": "", "port": -1,
                        "error_code": ErrorCode.coordinator_not_available,
                        "error_message": owner}
            return {"key": key, "node_id": owner.node_id, "host": owner.host,
                    "port": owner.port, "error_code": ErrorCode.none, "error_message": None}
        message = ("Korvet does not support transactions" if key_type == TRANSACTION_KEY
                   else f"coordinator key type {key_type} is not supported")
        code = (ErrorCode.transactional_id_authorization_failed if key_type == TRANSACTION_KEY
                else ErrorCode.invalid_request)
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code,
                "error_message": message}

    if single:
        return make(response_cls, throttle_time=0, **answer(keys[0]))
    coordinator_cls = nested(response_cls, "Coordinator")
    return make(response_cls, throttle_time=0,
                coordinators=tuple(make(coordinator_cls, **answer(k)) for k in keys))


async def _group_owner(services: Services, ctx: RequestContext,
                       group_id: str) -> BrokerEntry | str:
    """The broker coordinating the group, at the address of the listener the request came
    in on: this one with one broker; with several, the holder of the group's lease,
    acquired here if it is free. Else why not (the client asks again): Redis did not
    answer, the owner is not in the registry, or (Kafka's rule) it has no listener of
    that name."""
    host, port = services.endpoint(ctx)
    me = BrokerEntry(services.node_id, host, port, services.rack)
    coordinator = services.coordinator
    if coordinator is None or coordinator.ownership is None or services.membership is None:
        return me
    try:
        mine, owner = await coordinator.ownership.acquire(group_id)
    except (RedisError, OSError) as exc:
        log.warning("FindCoordinator for group %r: %s", group_id, exc)
        return "the group's coordinator is not known yet"
    if mine:
        return me
    try:
        entry = services.membership.entry(int(owner))
    except ValueError:
        entry = None
    if entry is None:
        return "the group's coordinator is not known yet"
    reachable = entry.at(ctx.listener_name)
    if reachable is None:
        # debug: clients ask again and again; Metadata's listing warns once per broker
        log.debug("group %r is coordinated by broker %d, which has no listener %r",
                  group_id, entry.node_id, ctx.listener_name)
        return f"the group's coordinator has no listener {ctx.listener_name}"
    return reachable


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------

async def join_group(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                     request: JoinGroupRequest) -> JoinGroupResponse:
    version = ctx.api_version
    response_cls = response_type(type(request))
    session_ms = millis(request.session_timeout)
    # v0 has no rebalance timeout: the session timeout serves for both
    rebalance_ms = millis(getattr(request, "rebalance_timeout", request.session_timeout))
    instance = getattr(request, "group_instance_id", None)
    client_id = ctx.client_id or ""
    event = core.JoinGroup(
        request_id=coordinator.next_request_id(), group_id=request.group_id,
        member_id=request.member_id, group_instance_id=instance,
        protocol_type=request.protocol_type,
        protocols=tuple(core.Protocol(p.name, p.metadata) for p in request.protocols),
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        client_id=client_id, client_host=ctx.client_host,
        requires_known_member_id=version >= 4, supports_skip_assignment=version >= 9,
        new_member_id=core.new_member_id(client_id, instance, str(uuid.uuid4())),
    )
    reply = await _ask(coordinator, event)
    if not isinstance(reply, core.JoinGroupReply):
        return make(response_cls, throttle_time=0, error_code=_failure(reply),
                    generation_id=-1, protocol_type=None,
                    protocol_name=None if version >= 7 else "",  # not nullable before v7
                    leader="", skip_assignment=False, member_id=request.member_id,
                    members=())
    member_cls = nested(response_cls, "JoinGroupResponseMember")
    protocol_name = reply.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # a non-nullable string before v7
    return make(
        response_cls, throttle_time=0, error_code=_error(reply.error),
        generation_id=reply.generation_id, protocol_type=reply.protocol_type,
        protocol_name=protocol_name, leader=reply.leader, skip_assignment=reply.skip_assignment,
        member_id=reply.member_id,
        members=tuple(make(member_cls, member_id=m.member_id,
                           group_instance_id=m.group_instance_id, metadata=m.metadata)
                      for m in reply.members),
    )


async def sync_group(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                     request: SyncGroupRequest) -> SyncGroupResponse:
    response_cls = response_type(type(request))
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        # Kafka (KafkaApis.handleSyncGroupRequest): from v5 both fields are mandatory; a
        # request without them is refused before the coordinator sees it (found by
        # korvet spec test-live against Apache Kafka)
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.inconsistent_group_protocol,
                    protocol_type=None, protocol_name=None, assignment=b"")
    event = core.SyncGroup(
        request_id=coordinator.next_request_id(), group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id,
        protocol_type=protocol_type, protocol_name=protocol_name,
        assignments=tuple(core.MemberAssignment(a.member_id, a.assignment)
                          for a in request.assignments),
    )
    reply = await _ask(coordinator, event)
    if not isinstance(reply, core.SyncGroupReply):
        return make(response_cls, throttle_time=0, error_code=_failure(reply),
                    protocol_type=None, protocol_name=None, assignment=b"")
    return make(response_cls, throttle_time=0, error_code=_error(reply.error),
                protocol_type=reply.protocol_type, protocol_name=reply.protocol_name,
                assignment=reply.assignment)


async def heartbeat(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                    request: HeartbeatRequest) -> HeartbeatResponse:
    response_cls = response_type(type(request))
    event = core.Heartbeat(
        request_id=coordinator.next_request_id(), group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id,
    )
    reply = await _ask(coordinator, event)
    error = (_error(reply.error) if isinstance(reply, core.HeartbeatReply)
             else _failure(reply))
    return make(response_cls, throttle_time=0, error_code=error)


async def leave_group(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                      request: LeaveGroupRequest) -> LeaveGroupResponse:
    response_cls = response_type(type(request))
    shaped: Any = request  # v0-v2 name one member, v3+ a batch
    batch = has_field(type(request), "members")
    if batch:
        members = tuple(core.MemberIdentity(m.member_id, m.group_instance_id)
                        for m in shaped.members)
    else:
        members = (core.MemberIdentity(shaped.member_id, None),)
    reply = await _ask(coordinator, core.LeaveGroup(
        request_id=coordinator.next_request_id(), group_id=request.group_id, members=members))
    if not isinstance(reply, core.LeaveGroupReply):
        return make(response_cls, throttle_time=0, error_code=_failure(reply),
                    members=())
    if not batch:
        error = reply.error
        if error is core.ErrorCode.NONE and reply.members:
            error = reply.members[0].error
        return make(response_cls, throttle_time=0, error_code=_error(error))
    member_cls = nested(response_cls, "MemberResponse")
    return make(response_cls, throttle_time=0, error_code=_error(reply.error),
                members=tuple(make(member_cls, member_id=m.member_id,
                                   group_instance_id=m.group_instance_id,
                                   error_code=_error(m.error)) for m in reply.members))


# --- offsets ------------------------------------------------------------------------------

async def offset_commit(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                        request: OffsetCommitRequest) -> OffsetCommitResponse:
    version = ctx.api_version
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "OffsetCommitResponseTopic")
    partition_cls = nested(response_cls, "OffsetCommitResponsePartition")
    generation = getattr(request, "generation_id_or_member_epoch",
                         getattr(request, "generation_id", -1))
    known: list[core.OffsetToCommit] = []
    unknown: set[tuple[str, int]] = set()
    for topic in request.topics:
        info = await services.topics.get(topic.name)
        for p in topic.partitions:
            if info is None or not 0 <= p.partition_index < info.partitions:
                unknown.add((topic.name, p.partition_index))
                continue
            known.append(core.OffsetToCommit(
                topic.name, p.partition_index, p.committed_offset,
                p.committed_metadata if p.committed_metadata is not None else "",
                getattr(p, "committed_leader_epoch", -1)))
    errors: dict[tuple[str, int], ErrorCode] = {
        key: ErrorCode.unknown_topic_or_partition for key in unknown}
    if known or not unknown:
        reply = await _ask(coordinator, core.OffsetCommit(
            request_id=coordinator.next_request_id(), group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            generation_id=generation, offsets=tuple(known),
            unknown_group_is_not_found=version >= 9))
        if isinstance(reply, core.OffsetCommitReply):
            for result in reply.partitions:
                errors[(result.topic, result.partition)] = _error(result.error)
        else:
            for item in known:
                errors[(item.topic, item.partition)] = _failure(reply)
    topics = []
    for topic in request.topics:
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(
            make(partition_cls, partition_index=p.partition_index,
                 error_code=errors.get((topic.name, p.partition_index), ErrorCode.none))
            for p in topic.partitions)))
    return make(response_cls, throttle_time=0, topics=tuple(topics))


def _fetched_offsets(coordinator: GroupCoordinator, group_id: str,
                     topics: Any) -> list[tuple[str, list[tuple[int, core.CommittedOffset | None]]]]:
    """(topic, [(partition, committed or None)]) for the requested topics, or all committed."""
    if topics is None:
        by_topic: dict[str, list[tuple[int, core.CommittedOffset | None]]] = {}
        for tp, committed in core.offset_fetch(coordinator.durable_view, group_id):
            by_topic.setdefault(tp.topic, []).append((tp.partition, committed))
        return sorted(by_topic.items())
    wanted = [core.TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    found = dict(core.offset_fetch(coordinator.durable_view, group_id, wanted))
    return [(t.name, [(p, found.get(core.TopicPartition(t.name, p)))
                      for p in t.partition_indexes]) for t in topics]


async def offset_fetch(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                       request: OffsetFetchRequest) -> OffsetFetchResponse:
    response_cls = response_type(type(request))
    grouped = has_field(type(request), "groups")
    suffix = "s" if grouped else ""
    topic_cls = nested(response_cls, f"OffsetFetchResponseTopic{suffix}")
    partition_cls = nested(response_cls, f"OffsetFetchResponsePartition{suffix}")

    def topics_of(group_id: str, topics: Any) -> tuple[Any, ...]:
        return tuple(
            make(topic_cls, name=name, partitions=tuple(
                make(partition_cls, partition_index=partition,
                     committed_offset=committed.offset if committed else -1,
                     committed_leader_epoch=committed.leader_epoch if committed else -1,
                     metadata=committed.metadata if committed else "",
                     error_code=ErrorCode.none)
                for partition, committed in partitions))
            for name, partitions in _fetched_offsets(coordinator, group_id, topics))

    if not grouped:
        single: Any = request  # v1-v7: one group, at the top level
        error = _owner_error(coordinator, single.group_id)
        return make(response_cls, throttle_time=0, error_code=error,
                    topics=topics_of(single.group_id, single.topics)
                    if error == ErrorCode.none else ())
    group_cls = nested(response_cls, "OffsetFetchResponseGroup")
    batch: Any = request  # v8+: a list of groups
    return make(response_cls, throttle_time=0, groups=tuple(
        make(group_cls, group_id=g.group_id,
             topics=topics_of(g.group_id, g.topics)
             if coordinator.owns(g.group_id) else (),
             error_code=_owner_error(coordinator, g.group_id)) for g in batch.groups))


async def offset_delete(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                        request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "OffsetDeleteResponseTopic")
    partition_cls = nested(response_cls, "OffsetDeleteResponsePartition")
    known: list[core.TopicPartition] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic in request.topics:
        info = await services.topics.get(topic.name)
        for p in topic.partitions:
            if info is None or not 0 <= p.partition_index < info.partitions:
                errors[(topic.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                known.append(core.TopicPartition(topic.name, p.partition_index))
    reply = await _ask(coordinator, core.OffsetDelete(
        request_id=coordinator.next_request_id(), group_id=request.group_id,
        partitions=tuple(known)))
    if not isinstance(reply, core.OffsetDeleteReply):
        top = _failure(reply)
    else:
        top = _error(reply.error)
        for result in reply.partitions:
            errors[(result.topic, result.partition)] = _error(result.error)
    if top != ErrorCode.none:
        return make(response_cls, error_code=top, throttle_time=0, topics=())
    return make(response_cls, error_code=ErrorCode.none, throttle_time=0, topics=tuple(
        make(topic_cls, name=topic.name, partitions=tuple(
            make(partition_cls, partition_index=p.partition_index,
                 error_code=errors.get((topic.name, p.partition_index), ErrorCode.none))
            for p in topic.partitions))
        for topic in request.topics))


# --- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------

async def describe_groups(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                          request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    version = ctx.api_version
    response_cls = response_type(type(request))
    group_cls = nested(response_cls, "DescribedGroup")
    member_cls = nested(response_cls, "DescribedGroupMember")
    include_ops = bool(getattr(request, "include_authorized_operations", False))
    groups = []
    for group_id in request.groups:
        described = core.describe_group(coordinator.durable_view, group_id)
        error = _error(described.error)
        if not coordinator.owns(group_id):
            error = ErrorCode.not_coordinator
        message = None
        if error == ErrorCode.group_id_not_found:
            if version >= 6:
                message = f"Group {group_id} not found."
            else:
                error = ErrorCode.none  # v0-v5 describe an unknown group as Dead
        groups.append(make(
            group_cls, error_code=error, error_message=message, group_id=group_id,
            group_state=described.state, protocol_type=described.protocol_type,
            protocol_data=described.protocol_data,
            members=tuple(make(member_cls, member_id=m.member_id,
                               group_instance_id=m.group_instance_id, client_id=m.client_id,
                               client_host=m.client_host, member_metadata=m.metadata,
                               member_assignment=m.assignment) for m in described.members),
            authorized_operations=(ctx.access.operations(ResourceType.GROUP, group_id)
                                   if include_ops else NOT_REQUESTED)))
    return make(response_cls, throttle_time=0, groups=tuple(groups))


async def list_groups(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                      request: ListGroupsRequest) -> ListGroupsResponse:
    response_cls = response_type(type(request))
    group_cls = nested(response_cls, "ListedGroup")
    try:
        view = await _groups_listed_here(services, coordinator)
    except (RedisError, OSError) as exc:
        log.warning("ListGroups: %s", exc)
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.coordinator_not_available, groups=())
    listed = core.list_groups(view, getattr(request, "states_filter", ()) or (),
                              getattr(request, "types_filter", ()) or ())
    access = ctx.access  # Kafka: DESCRIBE on the cluster lists every group, else the describable ones
    if not access.cluster_allowed(Operation.DESCRIBE):
        listed = tuple(g for g in listed
                       if access.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id))
    return make(response_cls, throttle_time=0, error_code=ErrorCode.none, groups=tuple(
        make(group_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
             group_type="classic") for g in listed))


async def _groups_listed_here(services: Services,
                              coordinator: GroupCoordinator) -> core.CoordinatorState:
    """The groups this broker's ListGroups lists: with one broker, all; with several,
    those it coordinates (from its durable copy) and the ones nobody live coordinates
    that rendezvous hashing gives it (from their snapshot in Redis), so that Kafka's
    AdminClient, which asks every broker and merges, lists every group once
    (``placement.lister``)."""
    view = coordinator.durable_view
    membership, leases = services.membership, coordinator.leases
    if coordinator.ownership is None or leases is None or membership is None:
        return view
    held = {g: group for g, group in view.groups.items() if coordinator.owns(g)}
    records, now_ms = await leases.every_lease()
    live = [b.node_id for b in membership.brokers()]
    unheld = [g for g, record in records.items() if g not in held and placement.lister(
        live, g, record.owner, record.expires_ms, now_ms) == services.node_id]
    groups = dict(held)
    for group_id, text in (await leases.snapshots(unheld)).items():
        try:
            groups[group_id] = core.read_group(json.loads(text))
        except (ValueError, core.SnapshotError) as exc:
            log.error("unreadable snapshot of group %r not listed: %s", group_id, exc)
    return dataclasses.replace(view, groups=groups)


async def delete_groups(services: Services, coordinator: GroupCoordinator, ctx: RequestContext,
                        request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "DeletableGroupResult")
    reply = await _ask(coordinator, core.DeleteGroups(
        request_id=coordinator.next_request_id(), group_ids=tuple(request.groups_names)))
    if isinstance(reply, core.DeleteGroupsReply):
        results = {r.group_id: _error(r.error) for r in reply.results}
    else:
        results = {}
    return make(response_cls, throttle_time=0, results=tuple(
        make(result_cls, group_id=g,
             error_code=results.get(g, _failure(reply)))
        for g in request.groups_names))
