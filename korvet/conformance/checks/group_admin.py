"""DescribeGroups (15), ListGroups (16), DeleteGroups (42)."""

from __future__ import annotations

import time

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import (
    Member,
    commit_offset,
    commit_offsets,
    committed,
    delete_groups,
    describe_group,
    form_group,
    list_groups,
    sync_all,
)
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.records import Rec
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

DESCRIBE = "DescribeGroups (15)"
LIST = "ListGroups (16)"
DELETE = "DeleteGroups (42)"
COORD = "Kafka group coordinator (ClassicGroup.describe / GroupMetadataManager.listGroups / deleteGroups)"


@check("describe_groups.stable_group_details", api=DESCRIBE, group_protocol=True,
       asserts="DescribeGroups of a Stable group answers NONE with state 'Stable', protocol type "
               "'consumer', the selected protocol, and each member with its client id, host, metadata "
               "and assignment.",
       source=f"{COORD}; DescribeGroupsResponse.json")
def stable_details(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    members = form_group(ctx, 2, ops=ops)
    group = describe_group(ops, members[0].group)
    expect_error(group.error_code, ErrorCode.NONE, "DescribeGroups")
    expect_eq((group.group_state, group.protocol_type, group.protocol_data), ("Stable", "consumer", "range"),
              "(state, protocol type, protocol)")
    described = {m.member_id: m for m in group.members}
    expect_eq(sorted(described), sorted(m.member_id for m in members), "member ids")
    for member in members:
        d = described[member.member_id]
        expect_eq(d.client_id, member.client_id, "client id")
        expect(bool(d.client_host), "client host is empty")
        expect_eq(bytes(d.member_metadata), member.protocols[0][1], "member metadata")
        expect_eq(bytes(d.member_assignment), member.member_id.encode(), "member assignment")


@check("describe_groups.absent_group_v6", api=DESCRIBE, group_protocol=True,
       asserts="DescribeGroups v6+ of a group that does not exist answers GROUP_ID_NOT_FOUND (69).",
       source="KIP-1043 / DescribeGroups v6 (GROUP_ID_NOT_FOUND for unknown groups)")
def absent_v6(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = describe_group(ops, ctx.name("g"), version=ops.v(ApiKey.DESCRIBE_GROUPS, lo=6))
    expect_error(group.error_code, ErrorCode.GROUP_ID_NOT_FOUND, "DescribeGroups v6 of an absent group")


@check("describe_groups.absent_group_before_v6", api=DESCRIBE, group_protocol=True,
       asserts="DescribeGroups v0-5 of a group that does not exist answers NONE with state 'Dead' and "
               "no members.",
       source="DescribeGroupsResponse.json (before v6 unknown groups are described as Dead)")
def absent_before_v6(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = describe_group(ops, ctx.name("g"), version=ops.v(ApiKey.DESCRIBE_GROUPS, hi=5))
    expect_error(group.error_code, ErrorCode.NONE, "DescribeGroups v5 of an absent group")
    expect_eq((group.group_state, len(group.members)), ("Dead", 0), "(state, members)")


@check("describe_groups.rebalance_states", api=DESCRIBE, group_protocol=True,
       asserts="DescribeGroups reports PreparingRebalance while a Stable group waits for its members to "
               "re-join (a new member asked to join), CompletingRebalance between the JoinGroup answers "
               "and the leader's SyncGroup, then Stable.",
       source="Kafka ClassicGroupState (anchors §2.1)")
def rebalance_states(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops)
    newcomer = Member(ctx, member.group, ops=ops, client_id="newcomer")
    newcomer.join_start()
    # The newcomer's join is held until the member re-joins (or its rebalance timeout, 5 s, ends).
    # DescribeGroups travels on another connection than the JoinGroup: allow it to overtake.
    states = []
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        states.append(describe_group(ops, member.group).group_state)
        if states[-1] != "Stable":
            break
        time.sleep(0.05)
    expect_eq(states[-1], "PreparingRebalance", "state while the group waits for its member to re-join")
    member.send_join()
    results = [member.recv_join(), newcomer.recv_join()]
    expect_eq([r.error for r in results], [ErrorCode.NONE] * 2,
              "JoinGroup errors of the member and the newcomer")
    expect_eq(describe_group(ops, member.group).group_state, "CompletingRebalance", "state before SyncGroup")
    sync_all([member, newcomer])
    expect_eq(describe_group(ops, member.group).group_state, "Stable", "state after SyncGroup")


@check("describe_groups.simple_group_is_empty", api=DESCRIBE,
       asserts="A group that only has committed offsets (no members) is described as 'Empty' with an "
               "empty protocol type and no members.",
       source=f"{COORD} (simple groups created by OffsetCommit)")
def simple_group_empty(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    offset = ops.produce_ok(topic, 0, [Rec(b"x")])
    group = ctx.name("g")
    expect_error(commit_offset(ops, group, topic.name, 0, offset), ErrorCode.NONE, "OffsetCommit")
    described = describe_group(ops, group)
    observed = (int(described.error_code), described.group_state, described.protocol_type,
                len(described.members))
    expect_eq(observed, (ErrorCode.NONE, "Empty", "", 0), "(error, state, protocol type, members)")


@check("list_groups.lists_active_group", api=LIST, group_protocol=True,
       asserts="ListGroups answers NONE and lists an active group with protocol type 'consumer' (and, "
               "v4+, its state 'Stable').",
       source=f"{COORD}; KIP-518 (state in ListGroups v4)")
def lists_active(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops)
    error, groups = list_groups(ops)
    expect_error(error, ErrorCode.NONE, "ListGroups")
    expect(member.group in groups, "the group is not listed")
    listed = groups[member.group]
    expect_eq(listed.protocol_type, "consumer", "protocol type")
    if ops.v(ApiKey.LIST_GROUPS) >= 4:
        expect_eq(listed.group_state, "Stable", "state (v4+)")


@check("list_groups.states_filter", api=LIST, group_protocol=True,
       asserts="ListGroups v4+ with a states filter lists only groups in those states (case-insensitive): "
               "a Stable group appears under ['stable'], not under ['Empty'], and an offsets-only group "
               "the other way round.",
       source="KIP-518 (ListGroups states filter)")
def states_filter(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    ops.v(ApiKey.LIST_GROUPS, lo=4)
    (member,) = form_group(ctx, 1, ops=ops)
    topic = ops.create_topic()
    simple = ctx.name("g")
    commit_offset(ops, simple, topic.name, 0, ops.produce_ok(topic, 0, [Rec(b"x")]))
    _, stable = list_groups(ops, states=["stable"])
    _, empty = list_groups(ops, states=["Empty"])
    expect(member.group in stable and member.group not in empty, "the Stable group is filtered wrongly")
    expect(simple in empty and simple not in stable, "the Empty group is filtered wrongly")


@check("list_groups.types_filter", api=LIST, group_protocol=True,
       asserts="ListGroups v5+ lists a JoinGroup-based group with group type 'classic', and a types "
               "filter ['classic'] keeps it while ['consumer'] (KIP-848 groups) drops it.",
       source="KIP-848 (group types in ListGroups v5)")
def types_filter(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    ops.v(ApiKey.LIST_GROUPS, lo=5)
    (member,) = form_group(ctx, 1, ops=ops)
    _, classic = list_groups(ops, types=["classic"])
    _, consumer = list_groups(ops, types=["consumer"])
    expect(member.group in classic, "the group is not listed under type 'classic'")
    expect_eq(classic[member.group].group_type, "classic", "group type")
    expect(member.group not in consumer, "a classic group is listed under type 'consumer'")


@check("delete_groups.empty_group_deleted", api=DELETE,
       asserts="DeleteGroups of a group without members answers NONE and removes its offsets: "
               "OffsetFetch then answers -1 and DescribeGroups v6+ GROUP_ID_NOT_FOUND.",
       source=f"{COORD} (Empty -> Dead, offsets removed); KIP-229")
def delete_empty(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    offset = ops.produce_ok(topic, 0, [Rec(b"x")])
    group = ctx.name("g")
    expect_error(commit_offset(ops, group, topic.name, 0, offset), ErrorCode.NONE, "OffsetCommit")
    expect_eq(delete_groups(ops, [group]), {group: ErrorCode.NONE}, "DeleteGroups result")
    expect_eq(committed(ops, group, topic.name, 0).offset, -1, "offset after the delete")
    if max(ops.apis.usable(ApiKey.DESCRIBE_GROUPS), default=0) >= 6:
        described = describe_group(ops, group, version=ops.v(ApiKey.DESCRIBE_GROUPS, lo=6))
        expect_error(described.error_code, ErrorCode.GROUP_ID_NOT_FOUND, "DescribeGroups v6 after the delete")


@check("delete_groups.active_group_refused", api=DELETE, group_protocol=True,
       asserts="DeleteGroups of a group with members answers NON_EMPTY_GROUP (68) and the group stays "
               "Stable.",
       source=f"{COORD}; KIP-229")
def delete_active(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    (member,) = form_group(ctx, 1, ops=ops)
    expect_eq(delete_groups(ops, [member.group]), {member.group: ErrorCode.NON_EMPTY_GROUP},
              "DeleteGroups result")
    expect_eq(describe_group(ops, member.group).group_state, "Stable", "state afterwards")


@check("delete_groups.absent_group", api=DELETE,
       asserts="DeleteGroups of a group that does not exist answers GROUP_ID_NOT_FOUND (69).",
       source=f"{COORD}; KIP-229")
def delete_absent(ctx: CheckContext) -> None:
    group = ctx.name("g")
    expect_eq(delete_groups(Ops(ctx), [group]), {group: ErrorCode.GROUP_ID_NOT_FOUND}, "DeleteGroups result")


@check("delete_groups.empty_commit_creates_no_group", api=DELETE,
       asserts="An OffsetCommit (generation -1) naming no partition answers with no topics and creates "
               "no group: a DeleteGroups of it then answers GROUP_ID_NOT_FOUND (69).",
       source="Kafka KafkaApis.handleOffsetCommitRequest (a commit with no partition to commit is "
              "answered before the group coordinator sees it); KIP-229")
def empty_commit_no_group(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    group = ctx.name("g")
    expect_eq(commit_offsets(ops, group, {}), {}, "OffsetCommit with no partition: partitions answered")
    expect_eq(delete_groups(ops, [group]), {group: ErrorCode.GROUP_ID_NOT_FOUND}, "DeleteGroups result")


@check("delete_groups.batch_mixed_results", api=DELETE, group_protocol=True,
       asserts="One DeleteGroups request for an empty, an active and an absent group answers each "
               "separately: NONE, NON_EMPTY_GROUP (68), GROUP_ID_NOT_FOUND (69).",
       source="KIP-229 (DeleteGroups is batched)")
def delete_batch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    empty = ctx.name("g")
    commit_offset(ops, empty, topic.name, 0, ops.produce_ok(topic, 0, [Rec(b"x")]))
    (member,) = form_group(ctx, 1, ops=ops)
    absent = ctx.name("g")
    expect_eq(delete_groups(ops, [empty, member.group, absent]),
              {empty: ErrorCode.NONE, member.group: ErrorCode.NON_EMPTY_GROUP,
               absent: ErrorCode.GROUP_ID_NOT_FOUND}, "DeleteGroups results")
