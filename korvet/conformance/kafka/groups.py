"""Classic consumer-group members on the raw wire: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

A ``Member`` has its own connection to the group's coordinator (Kafka answers
one connection's requests in order, and holds a JoinGroup back until the
rebalance completes, so members must not share a connection). Sending and
receiving are separate steps so one thread can have several members waiting in
the same rebalance. ``form_group`` runs the whole dance for n members and
returns them Stable.

Timing: the first rebalance of an empty group waits ``group.initial.rebalance.delay.ms``
(Kafka's default 3000 ms). The members here ask for a rebalance timeout of 5 s, so the
initial delay is extended by at most 2 s when several members join together, and
a member that must re-join gets 5 s to do so.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from korvet.conformance.kafka.messages import build_request, error_name
from korvet.conformance.kafka.ops import COORDINATOR_STARTING, Ops
from korvet.conformance.kafka.session import KafkaCallFailed, Session
from korvet.conformance.kafka.wire import WireClient
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

# OffsetCommit's answers while the group's coordinator loads or moves: look it up and retry.
COORDINATOR_RETRIABLE = COORDINATOR_STARTING | {ErrorCode.NOT_COORDINATOR}
DEFAULT_SESSION_MS = 10_000
DEFAULT_REBALANCE_MS = 5_000
# How long a parked JoinGroup may take: initial delay (3 s) + extension + slack on a busy machine.
JOIN_WAIT_S = 25.0


def subscription(topics: Sequence[str], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0: the metadata a Java consumer sends in JoinGroup."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    return out


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: the bytes a leader hands each member in SyncGroup."""
    out = struct.pack(">hi", 0, len(parts))
    for topic, partitions in parts.items():
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data + struct.pack(">i", len(partitions))
        out += b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


@dataclass
class JoinResult:
    error: int
    generation: int
    protocol_name: str | None
    protocol_type: str | None
    leader: str
    member_id: str
    members: list[Any]
    skip_assignment: bool
    raw: Any


class Member:
    """One group member with its own coordinator connection."""

    def __init__(
        self,
        session: Session,
        group: str,
        *,
        ops: Ops | None = None,
        client_id: str = "korvet-conformance",
        session_timeout_ms: int = DEFAULT_SESSION_MS,
        rebalance_timeout_ms: int = DEFAULT_REBALANCE_MS,
        instance_id: str | None = None,
        protocol_type: str = "consumer",
        protocols: Sequence[tuple[str, bytes]] = (("range", b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"),),
        address: tuple[str, int] | None = None,
        join_version: int | None = None,
    ) -> None:
        self.session = session
        self.ops = ops or Ops(session)
        self.group = group
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.instance_id = instance_id
        self.protocol_type = protocol_type
        self.protocols = list(protocols)
        host, port = address or self.ops.coordinator_address(group)
        self.conn: WireClient = session.client(host, port, client_id=client_id, timeout=JOIN_WAIT_S)
        self.join_version = join_version if join_version is not None else self.ops.v(ApiKey.JOIN_GROUP)
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.protocol_name: str | None = None
        self.last_join: JoinResult | None = None

    # -- JoinGroup -----------------------------------------------------------

    def send_join(self, *, member_id: str | None = None, protocols: Sequence[tuple[str, bytes]] | None = None,
                  protocol_type: str | None = None, session_timeout_ms: int | None = None,
                  group_id: str | None = None, reason: str | None = None) -> None:
        request = build_request(
            ApiKey.JOIN_GROUP, self.join_version,
            group_id=self.group if group_id is None else group_id,
            session_timeout=self.session_timeout_ms if session_timeout_ms is None else session_timeout_ms,
            rebalance_timeout=self.rebalance_timeout_ms,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id,
            protocol_type=self.protocol_type if protocol_type is None else protocol_type,
            protocols=[{"name": n, "metadata": m} for n, m in (protocols or self.protocols)],
            reason=reason,
        )
        self.conn.send(request)

    def recv_join(self, timeout: float = JOIN_WAIT_S) -> JoinResult:
        response = self.conn.receive(timeout)
        result = JoinResult(
            error=int(response.error_code), generation=int(response.generation_id),
            protocol_name=response.protocol_name, protocol_type=getattr(response, "protocol_type", None),
            leader=response.leader, member_id=response.member_id, members=list(response.members),
            skip_assignment=bool(getattr(response, "skip_assignment", False)), raw=response,
        )
        if result.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED) and result.member_id:
            self.member_id = result.member_id
        if result.error == ErrorCode.NONE:
            self.generation = result.generation
            self.leader = result.leader
            self.protocol_name = result.protocol_name
        self.last_join = result
        return result

    @property
    def needs_member_id(self) -> bool:
        """JoinGroup v4+ from a new dynamic member must first fetch a member id (KIP-394);
        static members (group.instance.id) join directly."""
        return not self.member_id and self.join_version >= 4 and self.instance_id is None

    def join_start(self) -> None:
        """First half of a join: with JoinGroup v4+ and no member id, get one (MEMBER_ID_REQUIRED)
        and send the real join; returns with the join in flight."""
        if self.needs_member_id:
            self.send_join(member_id="")
            first = self.recv_join()
            if first.error == ErrorCode.NONE:
                raise KafkaCallFailed("JoinGroup v4+ with an empty member id joined at once; "
                                      "expected MEMBER_ID_REQUIRED (79) and a member id (KIP-394)")
            if first.error != ErrorCode.MEMBER_ID_REQUIRED:
                raise KafkaCallFailed(f"JoinGroup with an empty member id: expected MEMBER_ID_REQUIRED (79), "
                                      f"got {error_name(first.error)}")
            if not first.member_id:
                raise KafkaCallFailed("MEMBER_ID_REQUIRED came without a member id")
        self.send_join()

    def join(self, timeout: float = JOIN_WAIT_S) -> JoinResult:
        """Join (or re-join) and require NONE."""
        self.join_start()
        result = self.recv_join(timeout)
        if result.error != ErrorCode.NONE:
            raise KafkaCallFailed(f"JoinGroup of {self.group}: {error_name(result.error)}")
        return result

    # -- SyncGroup -----------------------------------------------------------

    def send_sync(self, assignments: dict[str, bytes] | None = None, *, generation: int | None = None,
                  member_id: str | None = None, protocol_name: str | None = None,
                  protocol_type: str | None = None, group_id: str | None = None) -> None:
        version = self.ops.v(ApiKey.SYNC_GROUP)
        request = build_request(
            ApiKey.SYNC_GROUP, version,
            group_id=self.group if group_id is None else group_id,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id,
            protocol_type=self.protocol_type if protocol_type is None else protocol_type,
            protocol_name=self.protocol_name if protocol_name is None else protocol_name,
            assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        )
        self.conn.send(request)

    def recv_sync(self, timeout: float = JOIN_WAIT_S) -> tuple[int, bytes]:
        response = self.conn.receive(timeout)
        return int(response.error_code), bytes(response.assignment)

    def sync(self, assignments: dict[str, bytes] | None = None, **kw: Any) -> tuple[int, bytes]:
        self.send_sync(assignments, **kw)
        return self.recv_sync()

    # -- Heartbeat, LeaveGroup, commits --------------------------------------

    def heartbeat(self, *, generation: int | None = None, member_id: str | None = None,
                  group_id: str | None = None, instance_id: str | None = None) -> int:
        response = self.ops.call(
            ApiKey.HEARTBEAT, None, self.conn, group_id=self.group if group_id is None else group_id,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id if instance_id is None else instance_id,
        )
        return int(response.error_code)

    def leave(self, *, member_id: str | None = None) -> tuple[int, list[int]]:
        """(top-level error, per-member errors) of leaving with this member's id."""
        ver = self.ops.v(ApiKey.LEAVE_GROUP)
        mid = self.member_id if member_id is None else member_id
        if ver >= 3:
            response = self.ops.call(ApiKey.LEAVE_GROUP, ver, self.conn, group_id=self.group, members=[
                {"member_id": mid, "group_instance_id": self.instance_id, "reason": "conformance"}])
            return int(response.error_code), [int(m.error_code) for m in response.members]
        response = self.ops.call(ApiKey.LEAVE_GROUP, ver, self.conn, group_id=self.group, member_id=mid)
        return int(response.error_code), []

    def commit(self, topic: str, partition: int, offset: int, *, metadata: str | None = "",
               generation: int | None = None, member_id: str | None = None) -> int:
        return commit_offset(self.ops, self.group, topic, partition, offset, metadata=metadata,
                             generation=self.generation if generation is None else generation,
                             member_id=self.member_id if member_id is None else member_id,
                             instance_id=self.instance_id, conn=self.conn)


def rebalance_signal(member: Member, timeout: float = 3.0) -> int:
    """Heartbeat until the answer is not NONE (or ``timeout``): what tells a Stable member that a
    rebalance started. Another member's JoinGroup travels on another connection, so the broker
    may see a heartbeat sent right after it first; a client heartbeats again, and so does this."""
    deadline = time.monotonic() + timeout
    while True:
        code = member.heartbeat()
        if code != ErrorCode.NONE or time.monotonic() > deadline:
            return code
        time.sleep(0.05)


def start_all(members: Sequence[Member]) -> None:
    """Every member gets its id (v4+) and sends its real JoinGroup; answers still to receive."""
    fetching = [m for m in members if m.needs_member_id]
    for member in fetching:
        member.send_join(member_id="")
    for member in fetching:
        first = member.recv_join()
        if first.error != ErrorCode.MEMBER_ID_REQUIRED:
            raise KafkaCallFailed(f"JoinGroup with an empty member id: expected MEMBER_ID_REQUIRED (79), "
                                  f"got {error_name(first.error)}")
    for member in members:
        member.send_join()


# How long a member whose JoinGroup was answered waits for the other members' answers before it
# joins again (see join_all). Only the number of rejoins depends on it, never the outcome.
REJOIN_GRACE_S = 1.0


def join_all(members: Sequence[Member], timeout: float = JOIN_WAIT_S) -> list[JoinResult]:
    """All members joined in one generation; returns their JoinGroup answers (NONE required).

    What the protocol promises is that members who keep joining end up in one generation, not
    that the first rebalance gathers everyone: Kafka holds the first join of an empty group for
    group.initial.rebalance.delay.ms (3 s) to gather members, a broker without that delay answers
    the first member at once and rebalances again for the next. So, as a client does when its
    next request answers REBALANCE_IN_PROGRESS: a member whose join was answered while another
    member's join is still held joins again (after ``REJOIN_GRACE_S``), a member whose generation
    is behind the others' joins again, and one the group no longer knows (UNKNOWN_MEMBER_ID)
    joins anew, until every member has the same generation.
    """
    start_all(members)
    deadline = time.monotonic() + timeout
    waiting = set(range(len(members)))
    answered: dict[int, tuple[JoinResult, float]] = {}
    rejoins = 0
    while True:
        for i in sorted(waiting):
            member = members[i]
            if not member.conn.response_ready(0):
                continue
            result = member.recv_join()
            waiting.discard(i)
            if result.error == ErrorCode.UNKNOWN_MEMBER_ID:
                member.member_id = ""
                member.join_start()
                waiting.add(i)
                rejoins += 1
                continue
            if result.error != ErrorCode.NONE:
                raise KafkaCallFailed(f"JoinGroup of {member.group}: {error_name(result.error)}")
            answered[i] = (result, time.monotonic())
        if not waiting:
            generations = {result.generation for result, _ in answered.values()}
            if len(generations) == 1:
                if rejoins:
                    members[0].session.note("join_all_rejoins", rejoins)
                return [answered[i][0] for i in range(len(members))]
            behind = [i for i, (result, _) in answered.items() if result.generation < max(generations)]
        else:
            now = time.monotonic()
            behind = [i for i, (_, at) in answered.items() if now - at >= REJOIN_GRACE_S]
        for i in behind:
            del answered[i]
            members[i].send_join()
            waiting.add(i)
            rejoins += 1
        if time.monotonic() > deadline:
            seen = sorted({result.generation for result, _ in answered.values()})
            raise KafkaCallFailed(f"the members of {members[0].group} did not settle in one generation "
                                  f"within {timeout:.0f} s ({len(waiting)} joins still held, "
                                  f"generations {seen}, {rejoins} rejoins)")
        if waiting:
            members[min(waiting)].conn.response_ready(0.02)


class Rebalancing(KafkaCallFailed):
    """A SyncGroup answered REBALANCE_IN_PROGRESS: the members must join again."""


def sync_all(members: Sequence[Member], assignments: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """Followers sync, then the leader with ``assignments`` (default: each member gets its own id).
    Raises ``Rebalancing`` when a SyncGroup answers REBALANCE_IN_PROGRESS (see ``join_and_sync``)."""
    leader = next((m for m in members if m.member_id == m.leader), None)
    if leader is None:
        raise KafkaCallFailed("no member of the group was told it is the leader",
                              leader=members[0].leader, members=[m.member_id for m in members])
    plan = assignments if assignments is not None else {m.member_id: m.member_id.encode() for m in members}
    for member in members:
        if member is not leader:
            member.send_sync({})
    leader.send_sync(plan)
    got: dict[str, bytes] = {}
    errors: dict[str, int] = {}
    for member in [leader, *[m for m in members if m is not leader]]:
        errors[member.member_id], got[member.member_id] = member.recv_sync()
    if ErrorCode.REBALANCE_IN_PROGRESS in errors.values():
        raise Rebalancing(f"SyncGroup answered REBALANCE_IN_PROGRESS for {members[0].group}")
    for member_id, error in errors.items():
        if error != ErrorCode.NONE:
            raise KafkaCallFailed(f"SyncGroup of {member_id}: {error_name(error)}")
    return got


def join_and_sync(members: Sequence[Member], assignments: dict[str, bytes] | None = None,
                  attempts: int = 4) -> dict[str, bytes]:
    """``join_all`` then ``sync_all``; on REBALANCE_IN_PROGRESS everyone joins again, as clients do."""
    for attempt in range(attempts):
        join_all(members)
        try:
            return sync_all(members, assignments)
        except Rebalancing:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def form_group(session: Session, n: int = 1, *, group: str | None = None, ops: Ops | None = None,
               **member_kw: Any) -> list[Member]:
    """n members joined and synced: the group is Stable. Members are in join order."""
    group_id = group or session.name("g")
    shared = ops or Ops(session)
    address = shared.coordinator_address(group_id)
    members = [Member(session, group_id, ops=shared, address=address, client_id=f"member-{i}", **member_kw)
               for i in range(n)]
    join_and_sync(members)
    return members


# -- offsets and group admin -------------------------------------------------


def commit_offsets(ops: Ops, group: str, offsets: dict[tuple[str, int], int], *, metadata: str | None = "",
                   generation: int = -1, member_id: str = "", instance_id: str | None = None,
                   conn: WireClient | None = None, version: int | None = None,
                   leader_epoch: int = -1, retention_ms: int = -1) -> dict[tuple[str, int], int]:
    ver = ops.v(ApiKey.OFFSET_COMMIT, version, hi=None if version is not None else 9)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset, "committed_metadata": metadata,
            "committed_leader_epoch": leader_epoch, "commit_timestamp": -1,
        })
    deadline = time.monotonic() + 20.0
    while True:
        response = ops.call(ApiKey.OFFSET_COMMIT, ver, conn, group_id=group, generation_id=generation,
                            generation_id_or_member_epoch=generation, member_id=member_id,
                            group_instance_id=instance_id, retention_time=retention_ms,
                            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
        errors = {(t.name, int(p.partition_index)): int(p.error_code)
                  for t in response.topics for p in t.partitions}
        # A fresh broker may not have loaded the group's coordinator yet (Kafka creates
        # __consumer_offsets on first use): as a client does, look the coordinator up and retry.
        if not errors or not set(errors.values()) <= COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return errors
        ops.find_coordinator(group)
        time.sleep(0.2)


def commit_offset(ops: Ops, group: str, topic: str, partition: int, offset: int, **kw: Any) -> int:
    errors = commit_offsets(ops, group, {(topic, partition): offset}, **kw)
    if (topic, partition) not in errors:
        raise KafkaCallFailed(f"OffsetCommit response does not list {topic}-{partition}", errors=str(errors))
    return errors[(topic, partition)]


@dataclass(frozen=True)
class Committed:
    error: int  # partition-level error
    offset: int
    metadata: str | None
    leader_epoch: int
    group_error: int = 0


def fetch_offsets(ops: Ops, group: str, parts: list[tuple[str, int]] | None, *,
                  require_stable: bool = False, version: int | None = None,
                  conn: WireClient | None = None) -> tuple[int, dict[tuple[str, int], Committed]]:
    """(group error, committed offsets) from OffsetFetch; ``parts=None`` asks for all."""
    ver = ops.v(ApiKey.OFFSET_FETCH, version, hi=None if version is not None else 9)
    topics: list[dict[str, Any]] | None = None
    if parts is not None:
        grouped: dict[str, list[int]] = {}
        for topic, partition in parts:
            grouped.setdefault(topic, []).append(partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in grouped.items()]
    if ver >= 8:
        response = ops.call(ApiKey.OFFSET_FETCH, ver, conn, require_stable=require_stable,
                            groups=[{"group_id": group, "topics": topics}])
        body = response.groups[0]
        group_error = int(body.error_code)
        topic_list = body.topics
    else:
        response = ops.call(ApiKey.OFFSET_FETCH, ver, conn, group_id=group, topics=topics,
                            require_stable=require_stable)
        group_error = int(getattr(response, "error_code", 0))
        topic_list = response.topics
    out = {}
    for t in topic_list:
        for p in t.partitions:
            out[(t.name, int(p.partition_index))] = Committed(
                int(p.error_code), int(p.committed_offset), p.metadata,
                int(getattr(p, "committed_leader_epoch", -1)), group_error)
    return group_error, out


def committed(ops: Ops, group: str, topic: str, partition: int, **kw: Any) -> Committed:
    group_error, offsets = fetch_offsets(ops, group, [(topic, partition)], **kw)
    if group_error != ErrorCode.NONE:
        raise KafkaCallFailed(f"OffsetFetch({group}): {error_name(group_error)}")
    if (topic, partition) not in offsets:
        raise KafkaCallFailed(f"OffsetFetch({group}) does not list {topic}-{partition}")
    return offsets[(topic, partition)]


def describe_group(ops: Ops, group: str, version: int | None = None) -> Any:
    response = ops.call(ApiKey.DESCRIBE_GROUPS, version, groups=[group], include_authorized_operations=False)
    return response.groups[0]


def list_groups(ops: Ops, *, states: list[str] | None = None, types: list[str] | None = None,
                version: int | None = None) -> tuple[int, dict[str, Any]]:
    response = ops.call(ApiKey.LIST_GROUPS, version, states_filter=states or [], types_filter=types or [])
    return int(response.error_code), {g.group_id: g for g in response.groups}


def delete_groups(ops: Ops, groups: list[str], version: int | None = None) -> dict[str, int]:
    response = ops.call(ApiKey.DELETE_GROUPS, version, groups_names=groups)
    return {r.group_id: int(r.error_code) for r in response.results}


def offset_delete(ops: Ops, group: str,
                  parts: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in parts:
        grouped.setdefault(topic, []).append(partition)
    response = ops.call(ApiKey.OFFSET_DELETE, None, group_id=group, topics=[
        {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in grouped.items()])
    return int(response.error_code), {(t.name, int(p.partition_index)): int(p.error_code)
                                      for t in response.topics for p in t.partitions}
