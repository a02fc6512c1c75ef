"""The classic consumer-group APIs, wired to the pure coordinator (korvet/core/coordinator).

Each handler has its request decoded into a coordinator event or a version-free value
(korvet/protocol/decoders/groups.py: version differences become plain fields there: JoinGroup
v4+ requires a known member id, v5+ carries group instance ids, v9 may skip the assignment;
OffsetCommit v9+ answers GROUP_ID_NOT_FOUND for an unknown group ...), asks the machine (or
reads its durable copy), waits for the reply the machine produces (possibly much later: a
JoinGroup held until the rebalance completes) and builds the version's response. With one
broker, it coordinates every group (FindCoordinator names it); with several on one Redis, the
holder of a group's lease does (korvet/server/ownership.py), the others answer NOT_COORDINATOR.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from typing import Any

from redis.exceptions import RedisError

from korvet.core import coordinator as core
from korvet.core import placement
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security.access import NOT_REQUESTED, Access
from korvet.core.security.acl import Operation, ResourceType
from korvet.core.security.rules import Need
from korvet.protocol import denials
from korvet.protocol.decoders.groups import (
    GROUP_KEY,
    TRANSACTION_KEY,
    FetchedGroup,
    ListGroupsCall,
    decode_describe_groups,
    decode_find_coordinator,
    decode_heartbeat,
    decode_join_group,
    decode_leave_group,
    decode_list_groups,
    decode_offset_commit,
    decode_offset_fetch,
    decode_sync_group,
    fetches_several_groups,
    fetches_several_keys,
    find_coordinator_key_type,
    mandatory_protocol_present,
)
from korvet.protocol.denials import (
    Check,
    Handled,
    Items,
    Shape,
    Whole,
    empty,
    every_partition,
    flat_answer,
    topic_answer,
    whole_error,
)
from korvet.protocol.kbuild import has_field, make, nested, response_type
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
from korvet.server.api import Api
from korvet.server.coordinator import CoordinatorUnavailable, GroupCoordinator, NotCoordinator
from korvet.server.handlers.metadata import live_brokers
from korvet.server.services import Services
from korvet.server.share_groups import ShareGroups
from korvet.server.transactions import TransactionCoordinator
from korvet.storage.leases import BrokerEntry

log = logging.getLogger("korvet.groups")


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
        return ErrorCode.NOT_COORDINATOR
    except CoordinatorUnavailable:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE


def _failure(reply: object) -> ErrorCode:
    return reply if isinstance(reply, ErrorCode) else ErrorCode.COORDINATOR_NOT_AVAILABLE


async def _share_group(services: Services, group_id: str) -> bool:
    """Whether the id is a share group's, which a classic group of that id would collide
    with (Kafka keeps one group per id; an existing classic group cannot be one)."""
    if group_id in services.groups.durable_view.groups:
        return False
    try:
        return await services.part(ShareGroups).is_share(group_id)
    except (RedisError, OSError) as exc:
        log.warning("is group %r a share group: %s", group_id, exc)
        return False


def _owner_error(coordinator: GroupCoordinator, group_id: str) -> ErrorCode:
    """Queries answer from this broker's copy only for the groups it coordinates."""
    return ErrorCode.NONE if coordinator.owns(group_id) else ErrorCode.NOT_COORDINATOR


# --- FindCoordinator ----------------------------------------------------------------------

async def find_coordinator(services: Services, ctx: RequestContext,
                           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    response_cls = response_type(type(request))
    call = decode_find_coordinator(request)
    keys, key_type = call.keys, call.key_type

    owners = ({k: await _group_owner(services, ctx, k) for k in keys}
              if key_type == GROUP_KEY else {})

    def answer(key: str) -> dict[str, Any]:
        if key_type == GROUP_KEY:
            owner = owners[key]
            if isinstance(owner, str):
                return {"key": key, "node_id": -1, "host": "", "port": -1,
                        "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        "error_message": owner}
            return {"key": key, "node_id": owner.node_id, "host": owner.host,
                    "port": owner.port, "error_code": ErrorCode.NONE, "error_message": None}
        if key_type == TRANSACTION_KEY:
            return _transaction_coordinator(services, ctx, key)
        return {"key": key, "node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"coordinator key type {key_type} is not supported"}

    if not call.several:
        return make(response_cls, throttle_time=0, **answer(keys[0]))
    coordinator_cls = nested(response_cls, "Coordinator")
    return make(response_cls, throttle_time=0,
                coordinators=tuple(make(coordinator_cls, **answer(k)) for k in keys))


def _transaction_coordinator(services: Services, ctx: RequestContext,
                             transactional_id: str) -> dict[str, Any]:
    """Any broker coordinates any transactional id (each step is a compare-and-set on the
    id's record: korvet/server/transactions.py); with several, rendezvous hashing spreads the
    ids over the live ones. DESCRIBE on the transactional id is needed, as Kafka's."""
    if not ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                              transactional_id):
        return {"key": transactional_id, "node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "error_message": None}
    brokers = live_brokers(services, ctx)
    chosen = max(brokers, key=lambda b: (placement.group_weight(b.node_id, "txn\x00" +
                                                                transactional_id), -b.node_id))
    return {"key": transactional_id, "node_id": chosen.node_id, "host": chosen.host,
            "port": chosen.port, "error_code": ErrorCode.NONE, "error_message": None}


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

async def join_group(services: Services, ctx: RequestContext,
                     request: JoinGroupRequest) -> JoinGroupResponse:
    coordinator = services.groups
    version = ctx.api_version  # the response's layout: protocol_name is nullable from v7
    response_cls = response_type(type(request))
    event = decode_join_group(request, request_id=coordinator.next_request_id(),
                              client_id=ctx.client_id or "", client_host=ctx.client_host,
                              member_uuid=str(uuid.uuid4()))
    # Kafka's classicGroupJoin answers a join to a share group's id with this
    reply: core.Reply | ErrorCode = (ErrorCode.INCONSISTENT_GROUP_PROTOCOL
                                     if await _share_group(services, request.group_id)
                                     else await _ask(coordinator, event))
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


async def sync_group(services: Services, ctx: RequestContext,
                     request: SyncGroupRequest) -> SyncGroupResponse:
    coordinator = services.groups
    response_cls = response_type(type(request))
    if not mandatory_protocol_present(request):
        # Kafka (KafkaApis.handleSyncGroupRequest): from v5 both fields are mandatory; a
        # request without them is refused before the coordinator sees it (found by
        # korvet spec test-live against Apache Kafka)
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    protocol_type=None, protocol_name=None, assignment=b"")
    reply = await _ask(coordinator, decode_sync_group(
        request, request_id=coordinator.next_request_id()))
    if not isinstance(reply, core.SyncGroupReply):
        return make(response_cls, throttle_time=0, error_code=_failure(reply),
                    protocol_type=None, protocol_name=None, assignment=b"")
    return make(response_cls, throttle_time=0, error_code=_error(reply.error),
                protocol_type=reply.protocol_type, protocol_name=reply.protocol_name,
                assignment=reply.assignment)


async def heartbeat(services: Services, ctx: RequestContext,
                    request: HeartbeatRequest) -> HeartbeatResponse:
    coordinator = services.groups
    response_cls = response_type(type(request))
    reply = await _ask(coordinator, decode_heartbeat(
        request, request_id=coordinator.next_request_id()))
    error = (_error(reply.error) if isinstance(reply, core.HeartbeatReply)
             else _failure(reply))
    return make(response_cls, throttle_time=0, error_code=error)


async def leave_group(services: Services, ctx: RequestContext,
                      request: LeaveGroupRequest) -> LeaveGroupResponse:
    coordinator = services.groups
    response_cls = response_type(type(request))
    batch = has_field(response_cls, "members")  # v0-v2 answer for one member, v3+ for each
    reply = await _ask(coordinator, decode_leave_group(
        request, request_id=coordinator.next_request_id()))
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

async def offset_commit(services: Services, ctx: RequestContext,
                        request: OffsetCommitRequest) -> OffsetCommitResponse:
    coordinator = services.groups
    call = decode_offset_commit(request)
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "OffsetCommitResponseTopic")
    partition_cls = nested(response_cls, "OffsetCommitResponsePartition")
    known: list[core.OffsetToCommit] = []
    unknown: set[tuple[str, int]] = set()
    for topic in call.topics:
        info = await services.topics.get(topic.name)
        for offset in topic.offsets:
            if info is None or not 0 <= offset.partition < info.partitions:
                unknown.add((topic.name, offset.partition))
            else:
                known.append(offset)
    errors: dict[tuple[str, int], ErrorCode] = {
        key: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for key in unknown}
    if await _share_group(services, request.group_id):  # Kafka: not a classic group
        errors = {(t.name, o.partition): ErrorCode.GROUP_ID_NOT_FOUND
                  for t in call.topics for o in t.offsets}
        known = []
    elif known or not unknown:
        reply = await _ask(coordinator, call.event(coordinator.next_request_id(), tuple(known)))
        if isinstance(reply, core.OffsetCommitReply):
            for result in reply.partitions:
                errors[(result.topic, result.partition)] = _error(result.error)
        else:
            for item in known:
                errors[(item.topic, item.partition)] = _failure(reply)
    return make(response_cls, throttle_time=0, topics=tuple(
        make(topic_cls, name=topic.name, partitions=tuple(
            make(partition_cls, partition_index=o.partition,
                 error_code=errors.get((topic.name, o.partition), ErrorCode.NONE))
            for o in topic.offsets))
        for topic in call.topics))


def _fetched_offsets(coordinator: GroupCoordinator, group: FetchedGroup
                     ) -> list[tuple[str, list[tuple[int, core.CommittedOffset | None]]]]:
    """(topic, [(partition, committed or None)]) for the requested topics, or all committed."""
    if group.topics is None:
        by_topic: dict[str, list[tuple[int, core.CommittedOffset | None]]] = {}
        for tp, committed in core.offset_fetch(coordinator.durable_view, group.group_id):
            by_topic.setdefault(tp.topic, []).append((tp.partition, committed))
        return sorted(by_topic.items())
    wanted = [core.TopicPartition(t.name, p) for t in group.topics for p in t.partitions]
    found = dict(core.offset_fetch(coordinator.durable_view, group.group_id, wanted))
    return [(t.name, [(p, found.get(core.TopicPartition(t.name, p))) for p in t.partitions])
            for t in group.topics]


async def _open_transaction_offsets(services: Services, group_id: str) -> set[tuple[str, int]]:
    """The partitions an open transaction holds offsets of for the group, once the decided
    transactions' offsets are applied (korvet/server/transactions.py)."""
    try:
        left = await services.part(TransactionCoordinator).apply_decided(group_id)
    except (RedisError, OSError, CoordinatorUnavailable) as exc:
        log.warning("OffsetFetch: the transactions' offsets of group %r: %s", group_id, exc)
        return set()
    return {(topic, partition) for entry in left for topic, partition, *_ in entry.offsets}


async def offset_fetch(services: Services, ctx: RequestContext,
                       request: OffsetFetchRequest) -> OffsetFetchResponse:
    coordinator = services.groups
    groups = decode_offset_fetch(request)
    response_cls = response_type(type(request))
    several = has_field(response_cls, "groups")  # v1-v7 answer for one group, v8+ for each
    suffix = "s" if several else ""
    topic_cls = nested(response_cls, f"OffsetFetchResponseTopic{suffix}")
    partition_cls = nested(response_cls, f"OffsetFetchResponsePartition{suffix}")
    # Offsets of transactions: the decided ones applied first; with RequireStable (v7+), a
    # partition an open transaction has offsets for is UNSTABLE_OFFSET_COMMIT (retriable).
    unstable: dict[str, set[tuple[str, int]]] = {}
    for group in groups:
        if coordinator.owns(group.group_id):
            unstable[group.group_id] = await _open_transaction_offsets(services, group.group_id)
    require_stable = bool(getattr(request, "require_stable", False))

    def topics_of(group: FetchedGroup) -> tuple[Any, ...]:
        pending = unstable.get(group.group_id, set()) if require_stable else set()
        return tuple(
            make(topic_cls, name=name, partitions=tuple(
                make(partition_cls, partition_index=partition,
                     committed_offset=-1 if (name, partition) in pending
                     else committed.offset if committed else -1,
                     committed_leader_epoch=committed.leader_epoch if committed else -1,
                     metadata=committed.metadata if committed else "",
                     error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT if (name, partition) in pending
                     else ErrorCode.NONE)
                for partition, committed in partitions))
            for name, partitions in _fetched_offsets(coordinator, group))

    if not several:
        (single,) = groups
        error = _owner_error(coordinator, single.group_id)
        return make(response_cls, throttle_time=0, error_code=error,
                    topics=topics_of(single) if error == ErrorCode.NONE else ())
    group_cls = nested(response_cls, "OffsetFetchResponseGroup")
    return make(response_cls, throttle_time=0, groups=tuple(
        make(group_cls, group_id=g.group_id,
             topics=topics_of(g) if coordinator.owns(g.group_id) else (),
             error_code=_owner_error(coordinator, g.group_id)) for g in groups))


async def offset_delete(services: Services, ctx: RequestContext,
                        request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    coordinator = services.groups
    response_cls = response_type(type(request))
    topic_cls = nested(response_cls, "OffsetDeleteResponseTopic")
    partition_cls = nested(response_cls, "OffsetDeleteResponsePartition")
    known: list[core.TopicPartition] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic in request.topics:
        info = await services.topics.get(topic.name)
        for p in topic.partitions:
            if info is None or not 0 <= p.partition_index < info.partitions:
                errors[(topic.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
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
    if top != ErrorCode.NONE:
        return make(response_cls, error_code=top, throttle_time=0, topics=())
    return make(response_cls, error_code=ErrorCode.NONE, throttle_time=0, topics=tuple(
        make(topic_cls, name=topic.name, partitions=tuple(
            make(partition_cls, partition_index=p.partition_index,
                 error_code=errors.get((topic.name, p.partition_index), ErrorCode.NONE))
            for p in topic.partitions))
        for topic in request.topics))


# --- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------

async def describe_groups(services: Services, ctx: RequestContext,
                          request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coordinator = services.groups
    call = decode_describe_groups(request)
    response_cls = response_type(type(request))
    group_cls = nested(response_cls, "DescribedGroup")
    member_cls = nested(response_cls, "DescribedGroupMember")
    groups = []
    for group_id in call.groups:
        described = core.describe_group(coordinator.durable_view, group_id)
        error = _error(described.error)
        if not coordinator.owns(group_id):
            error = ErrorCode.NOT_COORDINATOR
        message = None
        if error == ErrorCode.GROUP_ID_NOT_FOUND:
            if call.unknown_group_is_error:
                message = (f"Group {group_id} is not a classic group."
                           if await _share_group(services, group_id)
                           else f"Group {group_id} not found.")
            else:
                error = ErrorCode.NONE  # v0-v5 describe an unknown group as Dead
        groups.append(make(
            group_cls, error_code=error, error_message=message, group_id=group_id,
            group_state=described.state, protocol_type=described.protocol_type,
            protocol_data=described.protocol_data,
            members=tuple(make(member_cls, member_id=m.member_id,
                               group_instance_id=m.group_instance_id, client_id=m.client_id,
                               client_host=m.client_host, member_metadata=m.metadata,
                               member_assignment=m.assignment) for m in described.members),
            authorized_operations=(ctx.access.operations(ResourceType.GROUP, group_id)
                                   if call.include_authorized_operations else NOT_REQUESTED)))
    return make(response_cls, throttle_time=0, groups=tuple(groups))


async def list_groups(services: Services, ctx: RequestContext,
                      request: ListGroupsRequest) -> ListGroupsResponse:
    coordinator = services.groups
    response_cls = response_type(type(request))
    group_cls = nested(response_cls, "ListedGroup")
    try:
        view = await _groups_listed_here(services, coordinator)
    except (RedisError, OSError) as exc:
        log.warning("ListGroups: %s", exc)
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=())
    wanted = decode_list_groups(request)
    listed = [(g, "classic") for g in core.list_groups(view, wanted.states, wanted.types)]
    try:
        listed += [(g, "share") for g in await _share_groups_listed_here(services, wanted)]
    except (RedisError, OSError) as exc:
        log.warning("ListGroups (share groups): %s", exc)
        return make(response_cls, throttle_time=0,
                    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=())
    access = ctx.access  # Kafka: DESCRIBE on the cluster lists every group, else the describable ones
    if not access.cluster_allowed(Operation.DESCRIBE):
        listed = [(g, kind) for g, kind in listed
                  if access.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    return make(response_cls, throttle_time=0, error_code=ErrorCode.NONE, groups=tuple(
        make(group_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
             group_type=kind) for g, kind in listed))


async def _share_groups_listed_here(services: Services, wanted: ListGroupsCall
                                    ) -> list[core.ListedGroup]:
    """The share groups this broker's ListGroups lists, as ``_groups_listed_here`` picks
    classic ones: all with one broker; with several, those whose lease it holds and those
    nobody live coordinates that rendezvous hashing gives it. A group's state is its
    coordinator's (Empty when no member came back to it since it took the group)."""
    types = {t.lower() for t in wanted.types}
    if types and "share" not in types:
        return []
    shares = services.part(ShareGroups)
    coordinator, membership = services.groups, services.membership
    try:
        ids = await shares.store.group_ids()
    except (RedisError, OSError):
        if coordinator.ownership is not None:
            raise
        # one broker lists classic groups from memory while Redis is away: share groups too
        ids = shares.known()
    leases = coordinator.leases
    if ids and coordinator.ownership is not None and leases is not None \
            and membership is not None:
        records, now_ms = await leases.every_lease(ids)
        live = [b.node_id for b in membership.brokers()]
        ids = [g for g in ids if coordinator.owns(g) or placement.lister(
            live, g, records[g].owner, records[g].expires_ms, now_ms) == services.node_id]
    states = {s.lower() for s in wanted.states}
    return [core.ListedGroup(g.group_id, "share", g.state) for g in await shares.listed(ids)
            if not states or g.state.lower() in states]


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


async def delete_groups(services: Services, ctx: RequestContext,
                        request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = services.groups
    response_cls = response_type(type(request))
    result_cls = nested(response_cls, "DeletableGroupResult")
    shares = services.part(ShareGroups)
    results: dict[str, ErrorCode] = {str(g): await shares.delete(g)
                                     for g in request.groups_names
                                     if await _share_group(services, g)}
    classic = tuple(g for g in request.groups_names if g not in results)
    reply: core.Reply | ErrorCode = core.DeleteGroupsReply(0, ())
    if classic:
        reply = await _ask(coordinator, core.DeleteGroups(
            request_id=coordinator.next_request_id(), group_ids=classic))
    if isinstance(reply, core.DeleteGroupsReply):
        results.update({r.group_id: _error(r.error) for r in reply.results})
    return make(response_cls, throttle_time=0, results=tuple(
        make(result_cls, group_id=g,
             error_code=results.get(g, _failure(reply)))
        for g in request.groups_names))


async def _offset_fetch_check(needs: tuple[Need, ...], access: Access, ctx: RequestContext,
                              request: Any, handler: Handled) -> Any:
    """OffsetFetch at the check point: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED),
    DESCRIBE on each topic (its partitions answered TOPIC_AUTHORIZATION_FAILED; left out of an
    all-topics answer). Its own check: from v8 the groups each carry their topics."""
    group_need, topic_need = needs
    response_cls = response_type(type(request))
    grouped = fetches_several_groups(request)
    suffix = "s" if grouped else ""
    topic_cls = nested(response_cls, f"OffsetFetchResponseTopic{suffix}")
    partition_cls = nested(response_cls, f"OffsetFetchResponsePartition{suffix}")

    def denied_topic(topic: Any) -> Any:
        return make(topic_cls, name=topic.name, partitions=tuple(
            make(partition_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                 metadata="", error_code=topic_need.error) for p in topic.partition_indexes))

    def topic_ok(name: str) -> bool:
        return access.allowed(topic_need.operation, ResourceType.TOPIC, name)

    def filtered(topics: Any) -> tuple[Any, list[Any]]:
        if topics is None:
            return None, []
        return (tuple(t for t in topics if topic_ok(t.name)), [t for t in topics if not topic_ok(t.name)])

    if not grouped:
        if not access.allowed(group_need.operation, ResourceType.GROUP, request.group_id):
            if has_field(response_cls, "error_code"):
                return make(response_cls, throttle_time=0, error_code=group_need.error, topics=())
            return make(response_cls, throttle_time=0, topics=tuple(
                make(topic_cls, name=t.name, partitions=tuple(
                    make(partition_cls, partition_index=p, committed_offset=-1, metadata="",
                         error_code=group_need.error) for p in t.partition_indexes))
                for t in request.topics or ()))
        kept, refused = filtered(request.topics)
        response: Any = await handler(ctx, dataclasses.replace(request, topics=kept))
        topics = tuple(t for t in response.topics if topic_ok(t.name))
        return dataclasses.replace(response, topics=topics + tuple(denied_topic(t) for t in refused))
    group_cls = nested(response_cls, "OffsetFetchResponseGroup")
    allowed_groups, answers = [], {}
    for group in request.groups:
        if access.allowed(group_need.operation, ResourceType.GROUP, group.group_id):
            kept, refused = filtered(group.topics)
            allowed_groups.append(dataclasses.replace(group, topics=kept))
            answers[group.group_id] = refused
    grouped_response: Any = await handler(ctx, dataclasses.replace(request,
                                                                   groups=tuple(allowed_groups)))
    by_id = {g.group_id: g for g in grouped_response.groups}
    out = []
    for group in request.groups:
        if group.group_id not in answers:
            out.append(make(group_cls, group_id=group.group_id, topics=(),
                            error_code=group_need.error))
            continue
        answered = by_id[group.group_id]
        topics = tuple(t for t in answered.topics if topic_ok(t.name))
        out.append(dataclasses.replace(answered, topics=topics + tuple(
            denied_topic(t) for t in answers[group.group_id])))
    return dataclasses.replace(grouped_response, groups=tuple(out))


def _join_denied(response_cls: type[Any], request: Any, version: int, code: ErrorCode) -> Any:
    return make(response_cls, throttle_time=0, error_code=code, generation_id=-1, protocol_type=None,
                protocol_name="" if version < 7 else None, leader="", skip_assignment=False,
                member_id="", members=())


def _coordinator_denied(response_cls: type[Any], key: Any, version: int, code: ErrorCode) -> Any:
    return make(nested(response_cls, "Coordinator"), key=key, node_id=-1, host="", port=-1,
                error_code=code, error_message=None)


_FIND_COORDINATOR_KEYS = Items(lambda r: "coordinator_keys", "coordinators", _coordinator_denied,
                               name_of=str, empty=empty(coordinators=()))
# FindCoordinator v0-3 names one key at the top level: a denied group answers the whole request.
_FIND_COORDINATOR_KEY = Whole(lambda r: str(r.key), whole_error(
    error_message=None, node_id=-1, host="", port=-1))


def _find_coordinator_checks(request: Any) -> tuple[Check | None, ...]:
    """Groups are checked; a transaction coordinator's key is not a group (its own handler
    refuses it)."""
    if find_coordinator_key_type(request) != GROUP_KEY:
        return (None,)
    return (_FIND_COORDINATOR_KEYS if fetches_several_keys(request) else _FIND_COORDINATOR_KEY,)


_GROUP_TOPIC_DENIED = topic_answer("OffsetCommitResponseTopic", "partitions",
                                   "OffsetCommitResponsePartition", "partitions", "partition_index",
                                   "partition_index")

APIS = (
    Api(ApiKey.OFFSET_COMMIT, range(2, 10), offset_commit,  # v10 names topics by id: not served
        "to the coordinator's offset store, persisted before the answer (docs/spec/group-coordinator.md)",
        Shape((Whole(denials.group_id, every_partition("OffsetCommitResponseTopic",
                                               "OffsetCommitResponsePartition", "partitions",
                                               "partition_index", "partition_index")),
               Items("topics", "topics", _GROUP_TOPIC_DENIED, empty=empty(topics=()))))),
    Api(ApiKey.OFFSET_FETCH, range(1, 10), offset_fetch,  # v10 names topics by id: not served
        "committed offsets of one or (v8+) several groups; RequireStable has nothing to wait for",
        Shape(custom=_offset_fetch_check)),
    Api(ApiKey.FIND_COORDINATOR, range(0, 7), find_coordinator,
        "this broker, or with several brokers the holder of the group's lease",
        Shape((_FIND_COORDINATOR_KEYS,), checks_for=_find_coordinator_checks)),
    Api(ApiKey.JOIN_GROUP, range(0, 10), join_group,
        "the classic protocol's rebalance (docs/spec/group-coordinator.md)",
        Shape((Whole(denials.group_id, _join_denied),))),
    Api(ApiKey.HEARTBEAT, range(0, 5), heartbeat, "keeps a member's session; tells of a rebalance",
        Shape((Whole(denials.group_id, whole_error()),))),
    Api(ApiKey.LEAVE_GROUP, range(0, 6), leave_group, "one member, or (v3+) several at once",
        Shape((Whole(denials.group_id, whole_error(members=())),))),
    Api(ApiKey.SYNC_GROUP, range(0, 6), sync_group, "the leader's assignment to every member",
        Shape((Whole(denials.group_id, whole_error(protocol_type=None, protocol_name=None,
                                           assignment=b"")),))),
    Api(ApiKey.DESCRIBE_GROUPS, range(0, 7), describe_groups,
        "state, protocol, members and their assignments; authorized operations",
        Shape((Items("groups", "groups", flat_answer(
            "DescribedGroup", "group_id", error_message=None, group_state="", protocol_type="",
            protocol_data="", members=(), authorized_operations=NOT_REQUESTED),
            name_of=str, empty=empty(groups=())),))),
    Api(ApiKey.LIST_GROUPS, range(0, 6), list_groups,
        "the groups this broker coordinates; state and type filters"),
    Api(ApiKey.DELETE_GROUPS, range(0, 3), delete_groups,
        "empty groups only (NON_EMPTY_GROUP), with their offsets and Redis consumer groups",
        Shape((Items("groups_names", "results", flat_answer("DeletableGroupResult", "group_id"),
                     name_of=str, empty=empty(results=())),))),
    Api(ApiKey.OFFSET_DELETE, range(0, 1), offset_delete,
        "one group's committed offsets of some partitions (GROUP_SUBSCRIBED_TO_TOPIC while consumed)",
        Shape((Whole(denials.group_id, whole_error(topics=())),
               Items("topics", "topics", topic_answer(
                   "OffsetDeleteResponseTopic", "partitions", "OffsetDeleteResponsePartition",
                   "partitions", "partition_index", "partition_index"),
                   empty=empty(error_code=ErrorCode.NONE, topics=()))))),
)
