"""Heartbeat (key 12): liveness, and how members learn of a rebalance."""

from __future__ import annotations

import time

from korvet.conformance.harness.context import CheckContext, expect_eq, expect_error
from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import Member, describe_group, form_group, rebalance_signal
from korvet.conformance.kafka.ops import Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "Heartbeat (12)"
COORD = "Kafka group coordinator (GroupMetadataManager.classicGroupHeartbeat)"


@check("heartbeat.stable_member_ok", api=API, group_protocol=True,
       asserts="A heartbeat from a member of a Stable group with its generation answers NONE.",
       source=COORD)
def stable_ok(ctx: CheckContext) -> None:
    for member in form_group(ctx, 2):
        expect_error(member.heartbeat(), ErrorCode.NONE, f"heartbeat of {member.client_id}")


@check("heartbeat.unknown_member", api=API, group_protocol=True,
       asserts="A heartbeat with a member id the group does not know answers UNKNOWN_MEMBER_ID (25).",
       source=f"{COORD} (validateCurrentMember)")
def unknown_member(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    expect_error(member.heartbeat(member_id="no-such-member"), ErrorCode.UNKNOWN_MEMBER_ID, "heartbeat")


@check("heartbeat.illegal_generation", api=API, group_protocol=True,
       asserts="A heartbeat with another generation than the group's answers ILLEGAL_GENERATION (22).",
       source=COORD)
def illegal_generation(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    expect_error(member.heartbeat(generation=member.generation + 1), ErrorCode.ILLEGAL_GENERATION,
                 "heartbeat")


@check("heartbeat.absent_group", api=API, group_protocol=True,
       asserts="A heartbeat for a group that does not exist answers UNKNOWN_MEMBER_ID (25).",
       source=f"{COORD} (unknown group -> UNKNOWN_MEMBER_ID)")
def absent_group(ctx: CheckContext) -> None:
    member = Member(ctx, ctx.name("g"))
    expect_error(member.heartbeat(generation=1, member_id="someone"), ErrorCode.UNKNOWN_MEMBER_ID,
                 "heartbeat")


@check("heartbeat.empty_group_id", api=API, group_protocol=True,
       asserts="A heartbeat with an empty group id answers INVALID_GROUP_ID (24).",
       source=f"{COORD} (validateGroupStatus)")
def empty_group_id(ctx: CheckContext) -> None:
    member = Member(ctx, ctx.name("g"))
    code = member.heartbeat(group_id="", generation=1, member_id="someone")
    expect_error(code, ErrorCode.INVALID_GROUP_ID, "heartbeat")


@check("heartbeat.rebalance_in_progress", api=API, group_protocol=True,
       asserts="While the group prepares a rebalance, a member's heartbeat answers REBALANCE_IN_PROGRESS "
               "(27) (this is how members learn they must re-join).",
       source=f"{COORD} (PreparingRebalance)")
def rebalance_in_progress(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    Member(ctx, member.group, client_id="newcomer").join_start()
    expect_error(rebalance_signal(member), ErrorCode.REBALANCE_IN_PROGRESS,
                 "heartbeat during PreparingRebalance")


@check("heartbeat.completing_rebalance_ok", api=API, group_protocol=True,
       asserts="Between the JoinGroup answer and the leader's SyncGroup (CompletingRebalance), a "
               "heartbeat with the new generation answers NONE.",
       source=f"{COORD} (CompletingRebalance answers NONE; brokers before 2.x answered 27)")
def completing_rebalance(ctx: CheckContext) -> None:
    member = Member(ctx, ctx.name("g"))
    member.join()
    expect_error(member.heartbeat(), ErrorCode.NONE, "heartbeat before SyncGroup")


@check("heartbeat.session_expiry_removes_member", slow=True, api=API, group_protocol=True,
       asserts="A member that stops heartbeating is removed after its session timeout (6 s here): "
               "the group becomes Empty and the member's heartbeat answers UNKNOWN_MEMBER_ID (25).",
       source=f"{COORD} (session timeout expiry); KIP-62",
       requires="group.min.session.timeout.ms <= 6000 (Kafka's default)")
def session_expiry(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops, session_timeout_ms=6000)
    time.sleep(6.0)
    deadline = time.monotonic() + 15
    state = ""
    while time.monotonic() < deadline:
        state = describe_group(ops, member.group).group_state
        if state == "Empty":
            break
        time.sleep(0.5)
    expect_eq(state, "Empty", "group state after the session timeout")
    expect_error(member.heartbeat(), (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION),
                 "heartbeat of the expired member")


@check("heartbeat.keeps_member_alive", slow=True, api=API, group_protocol=True,
       asserts="A member heartbeating every 1.5 s stays in the group (NONE, group Stable) well past its "
               "6 s session timeout.",
       source=f"{COORD}; KIP-62",
       requires="group.min.session.timeout.ms <= 6000 (Kafka's default)")
def keeps_alive(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops, session_timeout_ms=6000)
    until = time.monotonic() + 9
    while time.monotonic() < until:
        code = member.heartbeat()
        if code != ErrorCode.NONE:
            raise CheckFailed(f"heartbeat answered {code} while heartbeating every 1.5 s")
        time.sleep(1.5)
    expect_eq(describe_group(ops, member.group).group_state, "Stable", "group state")


@check("heartbeat.static_old_member_fenced", api=API, group_protocol=True,
       asserts="After a static member is replaced, a heartbeat with its old member id answers "
               "FENCED_INSTANCE_ID (82); the new member id heartbeats NONE.",
       source="KIP-345")
def static_fenced(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.JOIN_GROUP, lo=5)
    instance = ctx.name("instance")
    (member,) = form_group(ctx, 1, ops=ops, instance_id=instance, join_version=version)
    replacement = Member(ctx, member.group, ops=ops, instance_id=instance, join_version=version)
    replacement.join()
    expect_error(member.heartbeat(), ErrorCode.FENCED_INSTANCE_ID, "heartbeat with the old member id")
    expect_error(replacement.heartbeat(), ErrorCode.NONE, "heartbeat with the new member id")

