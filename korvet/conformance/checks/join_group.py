"""JoinGroup (key 11): the classic group protocol's membership and rebalance barrier.

Group checks create their own group; the first rebalance of a new group waits the broker's
group.initial.rebalance.delay.ms (Kafka's default 3 s), so each of these takes a few seconds.
"""

from __future__ import annotations

import time
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error, skip
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import (
    Member,
    describe_group,
    form_group,
    join_all,
    rebalance_signal,
    start_all,
    subscription,
)
from korvet.conformance.kafka.ops import Ops
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "JoinGroup (11)"
COORD = "Kafka group coordinator (GroupMetadataManager.classicGroupJoin*, ClassicGroup)"


def _member(ctx: CheckContext, ops: Ops | None = None, group: str | None = None, **kw: Any) -> Member:
    return Member(ctx, group or ctx.name("g"), ops=ops, **kw)


@check("join_group.session_timeout_below_min", api=API, group_protocol=True,
       asserts="JoinGroup with session_timeout 1000 ms (below group.min.session.timeout.ms, 6000 by "
               "default) answers INVALID_SESSION_TIMEOUT (26).",
       source=f"{COORD}; broker config group.min.session.timeout.ms",
       requires="group.min.session.timeout.ms > 1000 (Kafka's default is 6000)")
def session_below_min(ctx: CheckContext) -> None:
    member = _member(ctx, session_timeout_ms=1000)
    member.send_join(member_id="")
    expect_error(member.recv_join().error, ErrorCode.INVALID_SESSION_TIMEOUT,
                 "JoinGroup with a 1 s session timeout")


@check("join_group.session_timeout_above_max", api=API, group_protocol=True,
       asserts="JoinGroup with session_timeout above group.max.session.timeout.ms (30 min by default) "
               "answers INVALID_SESSION_TIMEOUT (26).",
       source=f"{COORD}; broker config group.max.session.timeout.ms",
       requires="group.max.session.timeout.ms < 2^31-1 ms (Kafka's default is 1800000)")
def session_above_max(ctx: CheckContext) -> None:
    member = _member(ctx, session_timeout_ms=2**31 - 1)
    member.send_join(member_id="")
    expect_error(member.recv_join().error, ErrorCode.INVALID_SESSION_TIMEOUT,
                 "JoinGroup with a huge session timeout")


@check("join_group.empty_group_id", api=API, group_protocol=True,
       asserts="JoinGroup with an empty group id answers INVALID_GROUP_ID (24).",
       source=f"{COORD} (validateGroupStatus / isGroupIdNotEmpty)")
def empty_group_id(ctx: CheckContext) -> None:
    member = _member(ctx)
    member.send_join(member_id="", group_id="")
    expect_error(member.recv_join().error, ErrorCode.INVALID_GROUP_ID, "JoinGroup with group id ''")


@check("join_group.unknown_member_id_new_group", api=API, group_protocol=True,
       asserts="JoinGroup naming a member id for a group that does not exist answers UNKNOWN_MEMBER_ID "
               "(25).",
       source=f"{COORD}: an unknown group only accepts members with an empty member id")
def unknown_member_new_group(ctx: CheckContext) -> None:
    member = _member(ctx)
    member.send_join(member_id="made-up-member")
    expect_error(member.recv_join().error, ErrorCode.UNKNOWN_MEMBER_ID, "JoinGroup with a made-up member id")


@check("join_group.member_id_required_v4", api=API, group_protocol=True,
       asserts="JoinGroup v4+ from a new member (empty member id) answers MEMBER_ID_REQUIRED (79) at "
               "once, with a broker-generated member id and generation -1; re-joining with it joins.",
       source="KIP-394 (JoinGroupRequest.requiresKnownMemberId)")
def member_id_required(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    member = _member(ctx, ops, join_version=ops.v(ApiKey.JOIN_GROUP, lo=4))
    member.send_join(member_id="")
    started = time.monotonic()
    first = member.recv_join()
    expect_error(first.error, ErrorCode.MEMBER_ID_REQUIRED, "first JoinGroup v4+")
    expect(bool(first.member_id), "MEMBER_ID_REQUIRED carries no member id")
    expect_eq(first.generation, -1, "generation in MEMBER_ID_REQUIRED")
    expect(time.monotonic() - started < 2.5, "MEMBER_ID_REQUIRED was not immediate")
    member.send_join()
    expect_error(member.recv_join().error, ErrorCode.NONE, "JoinGroup with the given member id")
    expect_eq(member.member_id, first.member_id, "member id after joining")


@check("join_group.pre_v4_joins_without_member_id_round_trip", api=API, group_protocol=True,
       asserts="JoinGroup below v4 with an empty member id joins directly (no MEMBER_ID_REQUIRED) and "
               "gets a member id.",
       source="KIP-394 (only v4+ requires a known member id)")
def pre_v4(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    ctx.apis.pick(ApiKey.JOIN_GROUP)  # not advertised at all: a failure, not a skip
    versions = [v for v in ctx.apis.usable(ApiKey.JOIN_GROUP) if v < 4]
    if not versions:
        skip("the broker advertises no JoinGroup version below 4")
    member = _member(ctx, ops, join_version=max(versions))
    member.send_join(member_id="")
    result = member.recv_join()
    expect_error(result.error, ErrorCode.NONE, f"JoinGroup v{max(versions)} with an empty member id")
    expect(bool(result.member_id), "no member id assigned")


@check("join_group.single_member_becomes_leader", api=API, group_protocol=True,
       asserts="The only member of a new group is its leader: JoinGroup answers NONE, leader = its "
               "member id, the member list holds it with its metadata, the protocol is its only one "
               "and (v7+) the protocol type is echoed.",
       source=f"{COORD} (leader = first member; initNextGeneration)")
def single_leader(ctx: CheckContext) -> None:
    meta = subscription([ctx.name("t")])
    member = _member(ctx, protocols=[("range", meta)])
    result = member.join()
    expect_eq(result.leader, member.member_id, "leader")
    expect_eq([(m.member_id, bytes(m.metadata)) for m in result.members], [(member.member_id, meta)],
              "members given to the leader")
    expect_eq(result.protocol_name, "range", "protocol name")
    if member.join_version >= 7:
        expect_eq(result.protocol_type, "consumer", "protocol type (v7+)")


@check("join_group.first_generation_is_one", api=API, group_protocol=True,
       asserts="The first completed rebalance of a new group has generation 1 (it starts at 0 and "
               "each completed join phase adds one).",
       source=f"{COORD} (ClassicGroup.initNextGeneration: generationId++)")
def first_generation(ctx: CheckContext) -> None:
    member = _member(ctx)
    expect_eq(member.join().generation, 1, "generation of the first rebalance")


@check("join_group.initial_delay_gathers_members", slow=True, api=API, group_protocol=True,
       asserts="Two members joining a new group 0.3 s apart end up in the same first generation: the "
               "first rebalance waits group.initial.rebalance.delay.ms for more members, and the leader "
               "is given both.",
       source="Kafka broker config group.initial.rebalance.delay.ms (KIP-134); InitialDelayedJoin",
       requires="group.initial.rebalance.delay.ms >= 1000 (Kafka's default is 3000)")
def initial_delay(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = ctx.name("g")
    address = ops.coordinator_address(group)
    a = Member(ctx, group, ops=ops, address=address, client_id="a")
    b = Member(ctx, group, ops=ops, address=address, client_id="b")
    started = time.monotonic()
    start_all([a])
    time.sleep(0.3)
    start_all([b])
    ra, rb = a.recv_join(), b.recv_join()
    ctx.note("first_join_ms", round((time.monotonic() - started) * 1000))
    expect_error(ra.error, ErrorCode.NONE, "first member's JoinGroup")
    expect_error(rb.error, ErrorCode.NONE, "second member's JoinGroup")
    expect_eq(ra.generation, rb.generation, "generations of the two members")
    leader = ra if ra.leader == a.member_id else rb
    expect_eq(sorted(m.member_id for m in leader.members), sorted([a.member_id, b.member_id]),
              "members given to the leader")


@check("join_group.leader_gets_metadata_followers_get_none", api=API, group_protocol=True,
       asserts="In a rebalance of two members, the leader's JoinGroup answer lists every member with "
               "the metadata it sent; the follower's lists no members; both name the same leader.",
       source=f"{COORD} (only the leader runs the assignor)")
def leader_metadata(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = ctx.name("g")
    address = ops.coordinator_address(group)
    members = [Member(ctx, group, ops=ops, address=address, client_id=f"m{i}",
                      protocols=[("range", subscription([f"topic-{i}"]))]) for i in range(2)]
    results = join_all(members)
    leaders = {r.leader for r in results}
    expect_eq(len(leaders), 1, "distinct leaders named")
    for member, result in zip(members, results, strict=True):
        if member.member_id == result.leader:
            got = {m.member_id: bytes(m.metadata) for m in result.members}
            expect_eq(got, {m.member_id: m.protocols[0][1] for m in members}, "leader's member metadata")
        else:
            expect_eq(result.members, [], "members given to a follower")


@check("join_group.inconsistent_protocol_type", api=API, group_protocol=True,
       asserts="A member joining with protocol type 'connect' a group whose member uses 'consumer' "
               "answers INCONSISTENT_GROUP_PROTOCOL (23).",
       source=f"{COORD} (ClassicGroup.supportsProtocols)")
def inconsistent_type(ctx: CheckContext) -> None:
    members = form_group(ctx, 1)
    other = Member(ctx, members[0].group, client_id="other", protocol_type="connect")
    other.send_join(member_id="")
    result = other.recv_join()
    if result.error == ErrorCode.MEMBER_ID_REQUIRED:
        other.send_join()
        result = other.recv_join()
    expect_error(result.error, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup with another protocol type")


@check("join_group.no_common_protocol", api=API, group_protocol=True,
       asserts="A member whose protocols share none with the group's members ('roundrobin' vs "
               "'range') answers INCONSISTENT_GROUP_PROTOCOL (23).",
       source=f"{COORD} (ClassicGroup.supportsProtocols: non-empty intersection required)")
def no_common(ctx: CheckContext) -> None:
    members = form_group(ctx, 1)
    other = Member(ctx, members[0].group, client_id="other", protocols=[("roundrobin", b"")])
    other.send_join(member_id="")
    result = other.recv_join()
    if result.error == ErrorCode.MEMBER_ID_REQUIRED:
        other.send_join()
        result = other.recv_join()
    expect_error(result.error, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup with no common protocol")


@check("join_group.selects_common_protocol", api=API, group_protocol=True,
       asserts="With members supporting ['sticky', 'range'] and ['range'], the group selects 'range', "
               "the only protocol both support.",
       source=f"{COORD} (ClassicGroup.selectProtocol: vote among protocols all members support)")
def common_protocol(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = ctx.name("g")
    address = ops.coordinator_address(group)
    a = Member(ctx, group, ops=ops, address=address, protocols=[("sticky", b"s"), ("range", b"r")])
    b = Member(ctx, group, ops=ops, address=address, protocols=[("range", b"r")])
    results = join_all([a, b])
    expect_eq({r.protocol_name for r in results}, {"range"}, "selected protocol")


@check("join_group.follower_rejoin_keeps_generation", api=API, group_protocol=True,
       asserts="In a Stable group, a follower re-joining with unchanged metadata is answered at once "
               "with the current generation (no rebalance).",
       source=f"{COORD} (Stable: follower with same metadata gets the current generation)")
def follower_rejoin(ctx: CheckContext) -> None:
    members = form_group(ctx, 2)
    follower = next(m for m in members if m.member_id != m.leader)
    generation = follower.generation
    started = time.monotonic()
    result = follower.join()
    expect_eq(result.generation, generation, "generation after a follower's re-join")
    expect(time.monotonic() - started < 2.5, "the follower's re-join waited for a rebalance")


@check("join_group.leader_rejoin_rebalances", api=API, group_protocol=True,
       asserts="In a Stable one-member group, the leader re-joining starts a rebalance that completes "
               "at once with generation + 1.",
       source=f"{COORD} (Stable: a JoinGroup from the leader triggers a rebalance)")
def leader_rejoin(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    generation = member.generation
    expect_eq(member.join().generation, generation + 1, "generation after the leader re-joined")


@check("join_group.new_member_triggers_rebalance", api=API, group_protocol=True,
       asserts="A new member joining a Stable group starts a rebalance: the existing member's heartbeat "
               "answers REBALANCE_IN_PROGRESS (27); once it re-joins both get generation + 1.",
       source=f"{COORD} (addMemberAndRebalance; Heartbeat in PreparingRebalance)")
def new_member(ctx: CheckContext) -> None:
    (a,) = form_group(ctx, 1)
    generation = a.generation
    b = Member(ctx, a.group, client_id="newcomer")
    b.join_start()
    expect_error(rebalance_signal(a), ErrorCode.REBALANCE_IN_PROGRESS,
                 "existing member's heartbeat during the rebalance")
    a.send_join()
    ra, rb = a.recv_join(), b.recv_join()
    expect_eq((ra.error, rb.error), (ErrorCode.NONE, ErrorCode.NONE), "JoinGroup errors")
    expect_eq((ra.generation, rb.generation), (generation + 1, generation + 1), "generations")


@check("join_group.absent_dynamic_member_removed", slow=True, api=API, group_protocol=True,
       asserts="A dynamic member that does not re-join within the rebalance timeout is dropped: the "
               "rebalance completes with the members that did re-join, in the next generation.",
       source=f"{COORD} (onCompleteJoin removes dynamic members that did not re-join)")
def absent_member_removed(ctx: CheckContext) -> None:
    members = form_group(ctx, 2, rebalance_timeout_ms=3000)
    leader = next(m for m in members if m.member_id == m.leader)
    follower = next(m for m in members if m is not leader)
    generation = leader.generation
    result = leader.join(timeout=30)  # starts a rebalance; the follower stays away
    expect_eq(result.generation, generation + 1, "generation of the rebalance")
    expect_eq([m.member_id for m in result.members], [leader.member_id], "members after the rebalance")
    expect_error(follower.heartbeat(), (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION),
                 "heartbeat of the dropped member")


@check("join_group.static_member_replaced_without_rebalance", api=API, group_protocol=True,
       asserts="A static member (group.instance.id, v5+) re-joining with an empty member id in a Stable "
               "group gets a new member id and the current generation without a rebalance; its old "
               "member id is fenced (FENCED_INSTANCE_ID, 82).",
       source="KIP-345 (static membership)")
def static_replaced(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.JOIN_GROUP, lo=5)
    instance = ctx.name("instance")
    (member,) = form_group(ctx, 1, ops=ops, instance_id=instance, join_version=version)
    old_id, generation = member.member_id, member.generation
    restarted = Member(ctx, member.group, ops=ops, instance_id=instance, join_version=version,
                       client_id="restarted")
    restarted.send_join(member_id="")
    started = time.monotonic()
    result = restarted.recv_join()
    expect_error(result.error, ErrorCode.NONE, "JoinGroup of the restarted static member")
    expect(result.member_id != old_id, "the static member kept its old member id")
    expect_eq(result.generation, generation, "generation (no rebalance expected)")
    expect(time.monotonic() - started < 2.5, "the static re-join waited for a rebalance")
    expect_error(member.heartbeat(), ErrorCode.FENCED_INSTANCE_ID, "heartbeat with the old member id")


@check("join_group.static_wrong_member_id_fenced", api=API, group_protocol=True,
       asserts="JoinGroup with a known group.instance.id but a different (non-empty) member id answers "
               "FENCED_INSTANCE_ID (82).",
       source="KIP-345; ClassicGroup.validateMember")
def static_fenced(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.JOIN_GROUP, lo=5)
    instance = ctx.name("instance")
    (member,) = form_group(ctx, 1, ops=ops, instance_id=instance, join_version=version)
    member.send_join(member_id=f"{member.member_id}-impostor")
    expect_error(member.recv_join().error, ErrorCode.FENCED_INSTANCE_ID, "JoinGroup with a wrong member id")


@check("join_group.unknown_member_existing_group", api=API, group_protocol=True,
       asserts="JoinGroup with a member id the (existing) group does not know answers "
               "UNKNOWN_MEMBER_ID (25).",
       source=f"{COORD} (validateCurrentMember)")
def unknown_member_existing(ctx: CheckContext) -> None:
    (member,) = form_group(ctx, 1)
    stranger = Member(ctx, member.group, client_id="stranger")
    stranger.send_join(member_id="no-such-member")
    expect_error(stranger.recv_join().error, ErrorCode.UNKNOWN_MEMBER_ID,
                 "JoinGroup with an unknown member id")


@check("join_group.group_max_size_reached", api=API, group_protocol=True,
       asserts="When a group already has group.max.size members, another member's JoinGroup answers "
               "GROUP_MAX_SIZE_REACHED (81) while the others stay members.",
       source="KIP-389 (group.max.size)",
       requires="the broker reports group.max.size <= 16 through DescribeConfigs (broker resource); "
                "otherwise the check is skipped")
def max_size(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    meta = ops.metadata([])
    broker_id = str(int(meta.brokers[0].node_id))
    response = ops.call(ApiKey.DESCRIBE_CONFIGS, None,
                        resources=[{"resource_type": 4, "resource_name": broker_id,
                                    "configuration_keys": ["group.max.size"]}],
                        include_synonyms=False, include_documentation=False)
    values = {c.name: c.value for r in response.results for c in r.configs}
    limit_text = values.get("group.max.size")
    if limit_text is None or not limit_text.isdigit() or int(limit_text) > 16:
        skip(f"group.max.size is {limit_text!r}; set it to at most 16 to run this check")
    assert limit_text is not None
    limit = int(limit_text)
    ctx.note("group_max_size", limit)
    members = form_group(ctx, limit)
    extra = Member(ctx, members[0].group, client_id="one-too-many")
    extra.send_join(member_id="")
    result = extra.recv_join()
    if result.error == ErrorCode.MEMBER_ID_REQUIRED:
        extra.send_join()
        result = extra.recv_join()
    expect_error(result.error, ErrorCode.GROUP_MAX_SIZE_REACHED, f"JoinGroup of member {limit + 1}")
    group = describe_group(ops, members[0].group)
    expect_eq(len(group.members), limit, "members of the full group")
