"""LeaveGroup (key 13): members leaving, one at a time or in a batch (v3+)."""

from __future__ import annotations

from korvet.conformance.harness.context import CheckContext, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import Member, describe_group, form_group
from korvet.conformance.kafka.ops import Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "LeaveGroup (13)"
COORD = "Kafka group coordinator (GroupMetadataManager.classicGroupLeave)"


def _member_error(top: int, members: list[int]) -> int:
    """The error a single-member leave reports: per member on v3+, top-level before."""
    return members[0] if members else top


@check("leave_group.member_leaves_and_group_rebalances", api=API, group_protocol=True,
       asserts="When one of two members leaves (NONE), the other's heartbeat answers "
               "REBALANCE_IN_PROGRESS (27) and its re-join completes alone in the next generation.",
       source=f"{COORD} (removeMemberAndUpdateGroup -> prepareRebalance)")
def leaves_and_rebalances(ctx: CheckContext) -> None:
    a, b = form_group(ctx, 2)
    generation = a.generation
    top, per_member = b.leave()
    expect_error(top, ErrorCode.NONE, "LeaveGroup top-level error")
    expect_error(_member_error(0, per_member), ErrorCode.NONE, "LeaveGroup member error")
    expect_error(a.heartbeat(), ErrorCode.REBALANCE_IN_PROGRESS, "remaining member's heartbeat")
    result = a.join()
    expect_eq(result.generation, generation + 1, "generation after the rebalance")
    expect_eq(a.member_id, result.leader, "the remaining member leads")


@check("leave_group.last_member_empties_group", api=API, group_protocol=True,
       asserts="When the only member leaves, the group is Empty (DescribeGroups) and keeps no members.",
       source=f"{COORD} (a group without members goes to Empty)")
def last_member(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops)
    top, per_member = member.leave()
    expect_error(_member_error(top, per_member), ErrorCode.NONE, "LeaveGroup")
    group = describe_group(ops, member.group)
    expect_eq((group.group_state, len(group.members)), ("Empty", 0), "(state, members) after leaving")


@check("leave_group.unknown_member", api=API, group_protocol=True,
       asserts="LeaveGroup with a member id the group does not know answers UNKNOWN_MEMBER_ID (25) "
               "(per member on v3+) and leaves the group as it was.",
       source=f"{COORD} (validateCurrentMember)")
def unknown_member(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops)
    top, per_member = member.leave(member_id="no-such-member")
    expect_error(_member_error(top, per_member), ErrorCode.UNKNOWN_MEMBER_ID,
                 "LeaveGroup of an unknown member")
    expect_eq(describe_group(ops, member.group).group_state, "Stable", "group state afterwards")


@check("leave_group.absent_group", api=API, group_protocol=True,
       asserts="LeaveGroup for a group that does not exist answers UNKNOWN_MEMBER_ID (25) for the "
               "member (at the top level before v3).",
       source=f"{COORD} (unknown group)")
def absent_group(ctx: CheckContext) -> None:
    member = Member(ctx, ctx.name("g"))
    top, per_member = member.leave(member_id="someone")
    ctx.note("top_level_error", top)
    expect_error(_member_error(top, per_member), ErrorCode.UNKNOWN_MEMBER_ID, "LeaveGroup of an absent group")


@check("leave_group.empty_group_id", api=API, group_protocol=True,
       asserts="LeaveGroup with an empty group id answers INVALID_GROUP_ID (24).",
       source=f"{COORD} (validateGroupStatus)")
def empty_group_id(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    member = Member(ctx, ctx.name("g"), ops=ops)
    version = ops.v(ApiKey.LEAVE_GROUP)
    if version >= 3:
        response = ops.call(ApiKey.LEAVE_GROUP, version, member.conn, group_id="",
                            members=[{"member_id": "someone", "group_instance_id": None}])
    else:
        response = ops.call(ApiKey.LEAVE_GROUP, version, member.conn, group_id="", member_id="someone")
    expect_error(response.error_code, ErrorCode.INVALID_GROUP_ID, "LeaveGroup with group id ''")


@check("leave_group.batch_of_static_members", api=API, group_protocol=True,
       asserts="LeaveGroup v3+ removes several static members at once by group.instance.id (empty "
               "member ids, as an admin does): each answers NONE and the group is Empty.",
       source="KIP-345 (batch leave by group.instance.id)")
def batch_static(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    join_version = ops.v(ApiKey.JOIN_GROUP, lo=5)
    version = ops.v(ApiKey.LEAVE_GROUP, lo=3)
    group = ctx.name("g")
    instances = [ctx.name("instance"), ctx.name("instance")]
    members = []
    from korvet.conformance.kafka.groups import join_and_sync

    address = ops.coordinator_address(group)
    for instance in instances:
        members.append(Member(ctx, group, ops=ops, address=address, instance_id=instance,
                              join_version=join_version))
    join_and_sync(members)
    response = ops.call(ApiKey.LEAVE_GROUP, version, members[0].conn, group_id=group, members=[
        {"member_id": "", "group_instance_id": i, "reason": "conformance batch"} for i in instances])
    expect_error(response.error_code, ErrorCode.NONE, "LeaveGroup top-level error")
    expect_eq(sorted((m.group_instance_id, int(m.error_code)) for m in response.members),
              sorted((i, ErrorCode.NONE) for i in instances), "per-member results")
    expect_eq(describe_group(ops, group).group_state, "Empty", "group state after the batch leave")


@check("leave_group.leader_leaves_new_leader", api=API, group_protocol=True,
       asserts="When the leader leaves, the remaining member becomes leader of the next generation.",
       source=f"{COORD} (a new leader is chosen among the remaining members)")
def leader_leaves(ctx: CheckContext) -> None:
    members = form_group(ctx, 2)
    leader = next(m for m in members if m.member_id == m.leader)
    follower = next(m for m in members if m is not leader)
    top, per_member = leader.leave()
    expect_error(_member_error(top, per_member), ErrorCode.NONE, "leader's LeaveGroup")
    result = follower.join()
    expect_eq(result.leader, follower.member_id, "leader after the old leader left")


@check("leave_group.static_wrong_member_id_fenced", api=API, group_protocol=True,
       asserts="LeaveGroup v3+ naming a static member's instance id with a different member id answers "
               "FENCED_INSTANCE_ID (82) for that member.",
       source="KIP-345 (validateCurrentMember)")
def static_fenced(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.LEAVE_GROUP, lo=3)
    instance = ctx.name("instance")
    (member,) = form_group(ctx, 1, ops=ops, instance_id=instance, join_version=ops.v(ApiKey.JOIN_GROUP, lo=5))
    response = ops.call(ApiKey.LEAVE_GROUP, version, member.conn, group_id=member.group, members=[
        {"member_id": "someone-else", "group_instance_id": instance}])
    expect_error(response.members[0].error_code, ErrorCode.FENCED_INSTANCE_ID,
                 "LeaveGroup with a wrong member id")
