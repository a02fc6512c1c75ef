"""SyncGroup (key 14): the leader's assignment reaches every member."""

from __future__ import annotations

import time

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import (
    Member,
    form_group,
    join_all,
    rebalance_signal,
)
from korvet.conformance.kafka.ops import Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "SyncGroup (14)"
COORD = "Kafka group coordinator (GroupMetadataManager.classicGroupSync)"


def _joined_pair(ctx: CheckContext) -> tuple[Member, Member]:
    ops = Ops(ctx)
    group = ctx.name("g")
    address = ops.coordinator_address(group)
    members = [Member(ctx, group, ops=ops, address=address, client_id=f"m{i}") for i in range(2)]
    join_all(members)
    leader = next(m for m in members if m.member_id == m.leader)
    follower = next(m for m in members if m is not leader)
    return leader, follower


@check("sync_group.assignments_distributed", api=API, group_protocol=True,
       asserts="After a rebalance of two members, the leader's SyncGroup assignments are delivered: "
               "each member's SyncGroup answers NONE with exactly the bytes the leader gave it.",
       source=f"{COORD}; Kafka protocol guide 'Group membership'")
def distributed(ctx: CheckContext) -> None:
    leader, follower = _joined_pair(ctx)
    plan = {leader.member_id: b"for-the-leader", follower.member_id: b"for-the-follower"}
    follower.send_sync({})
    leader.send_sync(plan)
    expect_eq(leader.recv_sync(), (ErrorCode.NONE, b"for-the-leader"), "leader's SyncGroup answer")
    expect_eq(follower.recv_sync(), (ErrorCode.NONE, b"for-the-follower"), "follower's SyncGroup answer")


@check("sync_group.follower_waits_for_leader", api=API, group_protocol=True,
       asserts="A follower's SyncGroup is held until the leader sends the assignment, then answered "
               "with its part.",
       source=f"{COORD} (CompletingRebalance parks follower syncs)")
def follower_waits(ctx: CheckContext) -> None:
    leader, follower = _joined_pair(ctx)
    follower.send_sync({})
    expect(not follower.conn.response_ready(1.0), "the follower's SyncGroup was answered before the leader's")
    leader.send_sync({leader.member_id: b"L", follower.member_id: b"F"})
    expect_eq(leader.recv_sync(), (ErrorCode.NONE, b"L"), "leader's answer")
    expect_eq(follower.recv_sync(), (ErrorCode.NONE, b"F"), "follower's answer")


@check("sync_group.missing_member_gets_empty_assignment", api=API, group_protocol=True,
       asserts="A member the leader's assignment leaves out gets NONE with an empty assignment.",
       source=f"{COORD} (missing members are filled with empty assignments)")
def missing_member(ctx: CheckContext) -> None:
    leader, follower = _joined_pair(ctx)
    follower.send_sync({})
    leader.send_sync({leader.member_id: b"all-mine"})
    expect_eq(leader.recv_sync(), (ErrorCode.NONE, b"all-mine"), "leader's answer")
    expect_eq(follower.recv_sync(), (ErrorCode.NONE, b""), "left-out follower's answer")


@check("sync_group.stable_returns_current_assignment", api=API, group_protocol=True,
       asserts="A SyncGroup repeated in a Stable group answers at once with the member's current "
               "assignment.",
       source=f"{COORD} (Stable: return the current assignment)")
def stable_repeat(ctx: CheckContext) -> None:
    members = form_group(ctx, 2)
    for member in members:
        expect_eq(member.sync({}), (ErrorCode.NONE, member.member_id.encode()),
                  f"repeated SyncGroup of {member.client_id}")


@check("sync_group.unknown_member", api=API, group_protocol=True,
       asserts="SyncGroup with a member id the group does not know answers UNKNOWN_MEMBER_ID (25).",
       source=f"{COORD} (validateCurrentMember)")
def unknown_member(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    error, _ = member.sync({}, member_id="no-such-member")
    expect_error(error, ErrorCode.UNKNOWN_MEMBER_ID, "SyncGroup with an unknown member id")


@check("sync_group.illegal_generation", api=API, group_protocol=True,
       asserts="SyncGroup with a generation other than the group's answers ILLEGAL_GENERATION (22).",
       source=f"{COORD}")
def illegal_generation(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    error, _ = member.sync({}, generation=member.generation + 7)
    expect_error(error, ErrorCode.ILLEGAL_GENERATION, "SyncGroup with a wrong generation")


@check("sync_group.absent_group", api=API, group_protocol=True,
       asserts="SyncGroup for a group that does not exist answers UNKNOWN_MEMBER_ID (25).",
       source=f"{COORD} (unknown group -> UNKNOWN_MEMBER_ID)")
def absent_group(ctx: CheckContext) -> None:
    member = Member(ctx, ctx.name("g"))
    error, _ = member.sync({}, generation=1, member_id="someone", protocol_name="range")
    expect_error(error, ErrorCode.UNKNOWN_MEMBER_ID, "SyncGroup of an absent group")


@check("sync_group.empty_group_id", api=API, group_protocol=True,
       asserts="SyncGroup with an empty group id answers INVALID_GROUP_ID (24).",
       source=f"{COORD} (validateGroupStatus)")
def empty_group_id(ctx: CheckContext) -> None:
    member = Member(ctx, ctx.name("g"))
    error, _ = member.sync({}, group_id="", generation=1, member_id="someone", protocol_name="range")
    expect_error(error, ErrorCode.INVALID_GROUP_ID, "SyncGroup with group id ''")


@check("sync_group.during_rebalance", api=API, group_protocol=True,
       asserts="SyncGroup from a member of the previous generation while the group is preparing a "
               "rebalance answers REBALANCE_IN_PROGRESS (27).",
       source=f"{COORD} (PreparingRebalance: SyncGroup -> REBALANCE_IN_PROGRESS)")
def during_rebalance(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    newcomer = Member(ctx, member.group, client_id="newcomer")
    newcomer.join_start()  # the group goes to PreparingRebalance, waiting for the first member
    expect_error(rebalance_signal(member), ErrorCode.REBALANCE_IN_PROGRESS,
                 "heartbeat once the newcomer joined")
    error, _ = member.sync({})
    expect_error(error, ErrorCode.REBALANCE_IN_PROGRESS, "SyncGroup during a rebalance")


@check("sync_group.inconsistent_protocol_v5", api=API, group_protocol=True,
       asserts="SyncGroup v5+ naming a protocol other than the group's selected one answers "
               "INCONSISTENT_GROUP_PROTOCOL (23).",
       source="KIP-559 (protocol type and name in SyncGroup v5)")
def inconsistent_protocol(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    ops.v(ApiKey.SYNC_GROUP, lo=5)
    (member,) = form_group(ctx, 1, ops=ops)
    error, _ = member.sync({}, protocol_name="roundrobin")
    expect_error(error, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "SyncGroup v5 with another protocol name")


@check("sync_group.static_old_member_fenced", api=API, group_protocol=True,
       asserts="After a static member is replaced by a new member id, SyncGroup with the old id answers "
               "FENCED_INSTANCE_ID (82).",
       source="KIP-345")
def static_fenced(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.JOIN_GROUP, lo=5)
    instance = ctx.name("instance")
    (member,) = form_group(ctx, 1, ops=ops, instance_id=instance, join_version=version)
    replacement = Member(ctx, member.group, ops=ops, instance_id=instance, join_version=version)
    replacement.join()
    error, _ = member.sync({})
    expect_error(error, ErrorCode.FENCED_INSTANCE_ID, "SyncGroup with the replaced member id")


@check("sync_group.member_that_never_syncs_is_removed", slow=True, api=API, group_protocol=True,
       asserts="A member that does not send SyncGroup within the rebalance timeout after the join "
               "completes is removed and a new rebalance starts (the leader's heartbeat then answers "
               "REBALANCE_IN_PROGRESS).",
       source=f"{COORD} (pending-sync members expire after the rebalance timeout; KAFKA-13766)")
def never_syncs(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = ctx.name("g")
    address = ops.coordinator_address(group)
    # the rebalance timeout is both how long the follower may stay unsynced and how long the leader
    # then has to notice the new rebalance and rejoin: 2 s proved too short for a leader starved of
    # the CPU on a loaded machine (its heartbeat came after the rebalance had dropped it too)
    members = [Member(ctx, group, ops=ops, address=address, client_id=f"m{i}", rebalance_timeout_ms=5000)
               for i in range(2)]
    join_all(members)
    leader = next(m for m in members if m.member_id == m.leader)
    follower = next(m for m in members if m is not leader)
    expect_eq(leader.sync({leader.member_id: b"L", follower.member_id: b"F"}), (ErrorCode.NONE, b"L"),
              "leader's SyncGroup")
    deadline = time.monotonic() + 30
    code = 0
    while time.monotonic() < deadline:
        code = leader.heartbeat()
        if code != ErrorCode.NONE:
            break
        time.sleep(0.5)
    expect_error(code, ErrorCode.REBALANCE_IN_PROGRESS, "leader's heartbeat after the follower never synced")
    result = leader.join()
    expect_eq([m.member_id for m in result.members], [leader.member_id], "members after the rebalance")
