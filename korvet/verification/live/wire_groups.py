"""The group APIs on the wire, version by version, and the plain views compared.

A *view* is what a client can see of a reply, as plain JSON-able data, with lists a
broker may order as it likes (members, partitions) sorted. The broker's response and
the machine's reply are both turned into views of the request's version; the harness
compares the two (ids in the machine's reply translated to the broker's first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from korvet.conformance.kafka.messages import build_request
from korvet.core import coordinator as core
from korvet.core.api_keys import ApiKey
from korvet.core.coordinator.queries import GroupDescription
from korvet.core.errors import ErrorCode

View = dict[str, Any]
Wire = Callable[[str], str]  # the machine's member id -> the broker's


def rows_in_order(rows: Iterable[list[Any]]) -> list[list[Any]]:
    """Rows a broker may send in any order, in one order (None, as an absent instance id,
    sorts before every string)."""
    return sorted(rows, key=lambda row: [(x is not None, x if x is not None else "")
                                         for x in row])


def _hex(data: bytes | None) -> str:
    return (data or b"").hex()


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


# --- requests ------------------------------------------------------------------------------

def join_request(version: int, event: core.JoinGroup) -> Any:
    return build_request(
        ApiKey.JOIN_GROUP, version, group_id=event.group_id, session_timeout=event.session_timeout_ms,
        rebalance_timeout=event.rebalance_timeout_ms, member_id=event.member_id,
        group_instance_id=event.group_instance_id if version >= 5 else None,
        protocol_type=event.protocol_type,
        protocols=[{"name": p.name, "metadata": p.metadata} for p in event.protocols])


def sync_request(version: int, event: core.SyncGroup) -> Any:
    return build_request(
        ApiKey.SYNC_GROUP, version, group_id=event.group_id, generation_id=event.generation_id,
        member_id=event.member_id,
        group_instance_id=event.group_instance_id if version >= 3 else None,
        protocol_type=event.protocol_type if version >= 5 else None,
        protocol_name=event.protocol_name if version >= 5 else None,
        assignments=[{"member_id": a.member_id, "assignment": a.assignment}
                     for a in event.assignments])


def heartbeat_request(version: int, event: core.Heartbeat) -> Any:
    return build_request(
        ApiKey.HEARTBEAT, version, group_id=event.group_id, generation_id=event.generation_id,
        member_id=event.member_id,
        group_instance_id=event.group_instance_id if version >= 3 else None)


def leave_request(version: int, event: core.LeaveGroup) -> Any:
    if version < 3:
        (only,) = event.members
        return build_request(ApiKey.LEAVE_GROUP, version, group_id=event.group_id,
                             member_id=only.member_id)
    return build_request(ApiKey.LEAVE_GROUP, version, group_id=event.group_id, members=[
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
        for m in event.members])


def commit_request(version: int, event: core.OffsetCommit) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for item in event.offsets:
        topics.setdefault(item.topic, []).append({
            "partition_index": item.partition, "committed_offset": item.offset,
            "committed_leader_epoch": item.leader_epoch,
            "committed_metadata": item.metadata})
    return build_request(
        ApiKey.OFFSET_COMMIT, version, group_id=event.group_id,
        generation_id_or_member_epoch=event.generation_id, member_id=event.member_id,
        group_instance_id=event.group_instance_id if version >= 7 else None,
        retention_time=-1,
        topics=[{"name": name, "partitions": parts} for name, parts in topics.items()])


def fetch_request(version: int, group_id: str,
                  partitions: Sequence[core.TopicPartition] | None) -> Any:
    topics: list[dict[str, Any]] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    if version >= 8:
        return build_request(ApiKey.OFFSET_FETCH, version, require_stable=False, groups=[
            {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}])
    return build_request(ApiKey.OFFSET_FETCH, version, group_id=group_id, topics=topics,
                         require_stable=False)


def describe_request(version: int, group_ids: Sequence[str]) -> Any:
    return build_request(ApiKey.DESCRIBE_GROUPS, version, groups=list(group_ids),
                         include_authorized_operations=False)


# --- views of the broker's responses ---------------------------------------------------------

def join_view(version: int, response: Any) -> View:
    view: View = {
        "error": _code(response.error_code), "generation": int(response.generation_id),
        "protocol_name": response.protocol_name, "leader": response.leader,
        "member_id": response.member_id,
        "members": rows_in_order([m.member_id, getattr(m, "group_instance_id", None), _hex(m.metadata)]
                          for m in response.members)}
    if version >= 7:
        view["protocol_type"] = response.protocol_type
    if version >= 9:
        view["skip_assignment"] = bool(response.skip_assignment)
    return view


def sync_view(version: int, response: Any) -> View:
    view: View = {"error": _code(response.error_code), "assignment": _hex(response.assignment)}
    if version >= 5:
        view["protocol_type"] = response.protocol_type
        view["protocol_name"] = response.protocol_name
    return view


def heartbeat_view(version: int, response: Any) -> View:
    return {"error": _code(response.error_code)}


def leave_view(version: int, response: Any) -> View:
    if version < 3:
        return {"error": _code(response.error_code)}
    return {"error": _code(response.error_code), "members": rows_in_order(
        [m.member_id, m.group_instance_id, _code(m.error_code)] for m in response.members)}


def commit_view(version: int, response: Any) -> View:
    return {"partitions": sorted([t.name, int(p.partition_index), _code(p.error_code)]
                                 for t in response.topics for p in t.partitions)}


def fetch_view(version: int, response: Any) -> View:
    if version >= 8:
        (group,) = response.groups
        error, topics = _code(group.error_code), group.topics
    else:
        error, topics = _code(getattr(response, "error_code", 0)), response.topics
    rows = []
    for topic in topics:
        for p in topic.partitions:
            row = [topic.name, int(p.partition_index), int(p.committed_offset),
                   p.metadata or "", _code(p.error_code)]
            if version >= 5:
                row.append(int(p.committed_leader_epoch))
            rows.append(row)
    view: View = {"partitions": sorted(rows)}
    if version >= 2:
        view["error"] = error
    return view


def describe_view(version: int, response: Any) -> list[View]:
    groups = []
    for g in response.groups:
        groups.append({
            "group_id": g.group_id, "error": _code(g.error_code), "state": g.group_state,
            "protocol_type": g.protocol_type, "protocol_data": g.protocol_data,
            "members": rows_in_order([m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                               m.client_host.lstrip("/"), _hex(m.member_metadata),
                               _hex(m.member_assignment)] for m in g.members)})
    return groups


RESPONSE_VIEWS: dict[int, Callable[[int, Any], Any]] = {
    ApiKey.JOIN_GROUP: join_view, ApiKey.SYNC_GROUP: sync_view, ApiKey.HEARTBEAT: heartbeat_view,
    ApiKey.LEAVE_GROUP: leave_view, ApiKey.OFFSET_COMMIT: commit_view, ApiKey.OFFSET_FETCH: fetch_view,
    ApiKey.DESCRIBE_GROUPS: describe_view}


# --- views of the machine's replies ----------------------------------------------------------

def expected_join(version: int, reply: core.JoinGroupReply, wire: Wire) -> View:
    protocol_name = reply.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # a non-nullable string before v7
    view: View = {
        "error": int(reply.error), "generation": reply.generation_id,
        "protocol_name": protocol_name, "leader": wire(reply.leader) if reply.leader else "",
        "member_id": wire(reply.member_id) if reply.member_id else "",
        "members": rows_in_order([wire(m.member_id), m.group_instance_id if version >= 5 else None,
                           _hex(m.metadata)] for m in reply.members)}
    if version >= 7:
        view["protocol_type"] = reply.protocol_type
    if version >= 9:
        view["skip_assignment"] = reply.skip_assignment
    return view


def expected_sync(version: int, reply: core.SyncGroupReply, wire: Wire) -> View:
    view: View = {"error": int(reply.error), "assignment": _hex(reply.assignment)}
    if version >= 5:
        view["protocol_type"] = reply.protocol_type
        view["protocol_name"] = reply.protocol_name
    return view


def expected_heartbeat(version: int, reply: core.HeartbeatReply, wire: Wire) -> View:
    return {"error": int(reply.error)}


def expected_leave(version: int, reply: core.LeaveGroupReply, wire: Wire) -> View:
    if version < 3:
        error = reply.error
        if error is core.ErrorCode.NONE and reply.members:
            error = reply.members[0].error
        return {"error": int(error)}
    return {"error": int(reply.error), "members": rows_in_order(
        [wire(m.member_id) if m.member_id else "", m.group_instance_id, int(m.error)]
        for m in reply.members)}


def expected_commit(version: int, reply: core.OffsetCommitReply, wire: Wire) -> View:
    return {"partitions": sorted([p.topic, p.partition, int(p.error)] for p in reply.partitions)}


def expected_reply(version: int, reply: core.Reply, wire: Wire) -> View:
    match reply:
        case core.JoinGroupReply():
            return expected_join(version, reply, wire)
        case core.SyncGroupReply():
            return expected_sync(version, reply, wire)
        case core.HeartbeatReply():
            return expected_heartbeat(version, reply, wire)
        case core.LeaveGroupReply():
            return expected_leave(version, reply, wire)
        case core.OffsetCommitReply():
            return expected_commit(version, reply, wire)
    raise TypeError(f"the harness sends no request answered by {type(reply).__name__}")


def expected_fetch(version: int, offsets: Sequence[tuple[core.TopicPartition,
                                                         core.CommittedOffset | None]]) -> View:
    rows = []
    for tp, committed in offsets:
        row: list[Any] = [tp.topic, tp.partition, committed.offset if committed else -1,
                          committed.metadata if committed else "", int(ErrorCode.NONE)]
        if version >= 5:
            row.append(committed.leader_epoch if committed else -1)
        rows.append(row)
    view: View = {"partitions": sorted(rows)}
    if version >= 2:
        view["error"] = int(ErrorCode.NONE)
    return view


def expected_describe(version: int, described: GroupDescription, members: Sequence[list[Any]]
                      ) -> View:
    """``members``: [member id, instance id, client id, host, metadata hex, assignment hex]
    rows, already translated and with the assignment the broker's rule shows."""
    error = int(described.error)
    if error == int(core.ErrorCode.GROUP_ID_NOT_FOUND) and version < 6:
        error = 0  # v0-v5 describe an unknown group as Dead without an error
    return {"group_id": described.group_id, "error": error, "state": described.state,
            "protocol_type": described.protocol_type, "protocol_data": described.protocol_data,
            "members": rows_in_order([row[0], row[1] if version >= 4 else None, *row[2:]]
                              for row in members)}
