"""OffsetCommit (8), OffsetFetch (9), OffsetDelete (47): committed offsets and their rules.

Seed 004's point is pinned here too: a consumer owns its fetch position, so a failed
commit changes neither the committed offset nor what the consumer can fetch next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect_eq, expect_error, wait_until
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.groups import (
    Member,
    commit_offset,
    commit_offsets,
    committed,
    fetch_offsets,
    form_group,
    offset_delete,
    rebalance_signal,
    subscription,
)
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.records import Rec
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

COMMIT = "OffsetCommit (8)"
FETCH = "OffsetFetch (9)"
DELETE = "OffsetDelete (47)"
OMM = "Kafka OffsetMetadataManager (commitOffset / fetchOffsets / deleteOffsets)"


def _topic_with_records(ops: Ops, n: int = 10, partitions: int = 1) -> tuple[str, list[int]]:
    topic = ops.create_topic(partitions=partitions)
    base = ops.produce_ok(topic, 0, [Rec(f"r{i}".encode()) for i in range(n)])
    return topic.name, list(range(base, base + n))


@check("offset_commit.simple_group_roundtrip", api=COMMIT,
       asserts="A commit with generation -1 and an empty member id (manual assignment, no group "
               "membership) answers NONE, and OffsetFetch returns the offset and metadata committed.",
       source=f"{OMM} (generation < 0 on an unknown group creates a simple group)")
def simple_roundtrip(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops)
    group = ctx.name("g")
    expect_error(commit_offset(ops, group, topic, 0, offsets[4], metadata="checkpoint-4"), ErrorCode.NONE,
                 "OffsetCommit")
    got = committed(ops, group, topic, 0)
    expect_error(got.error, ErrorCode.NONE, "OffsetFetch partition error")
    expect_eq((got.offset, got.metadata), (offsets[4], "checkpoint-4"), "(offset, metadata) fetched")


@check("offset_commit.leader_epoch_roundtrip", api=COMMIT,
       asserts="OffsetCommit v6+ stores committed_leader_epoch and OffsetFetch v5+ returns it.",
       source="KIP-320 (leader epoch in committed offsets)")
def leader_epoch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 2)
    group = ctx.name("g")
    errors = commit_offsets(ops, group, {(topic, 0): offsets[1]}, leader_epoch=0,
                            version=ops.v(ApiKey.OFFSET_COMMIT, lo=6, hi=9))
    expect_error(errors[(topic, 0)], ErrorCode.NONE, "OffsetCommit v6+")
    got = committed(ops, group, topic, 0, version=ops.v(ApiKey.OFFSET_FETCH, lo=5, hi=9))
    expect_eq((got.offset, got.leader_epoch), (offsets[1], 0), "(offset, leader epoch) fetched")


@check("offset_commit.any_retention_accepted", api=COMMIT,
       asserts="OffsetCommit v2-v4 takes any int64 retention_time: one of 2.7 million years commits "
               "NONE on the same connection (the connection stays open) and OffsetFetch returns the offset.",
       source="OffsetCommitRequest.json (RetentionTimeMs int64, versions 2-4); "
              f"{OMM} (any retention other than -1 sets an expiry)")
def any_retention(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops)
    group = ctx.name("g")
    version = ops.v(ApiKey.OFFSET_COMMIT, lo=2, hi=4)
    # Beyond what a timedelta of microseconds in an int64 holds (~292,000 years); the longest
    # duration Python's timedelta (which builds the request) holds.
    errors = commit_offsets(ops, group, {(topic, 0): offsets[2]}, version=version,
                            retention_ms=86_399_999_913_599_999)
    expect_eq(errors, {(topic, 0): ErrorCode.NONE},
              f"OffsetCommit v{version} with a 2.7-million-year retention")
    expect_eq(committed(ops, group, topic, 0).offset, offsets[2], "offset fetched")


# -- refused commits, one table ----------------------------------------------------
#
# Each row: how a commit is refused, and that the refusal stores nothing (OffsetFetch still
# answers -1). ``member``: the commit comes from a group formed by one member (its id and
# generation are what the row changes), else from no group at all.


@dataclass(frozen=True)
class RefusedCommit:
    name: str
    asserts: str
    source: str
    expected: tuple[int, ...]
    what: str
    # OffsetCommit arguments (commit_offset's keywords); given the member when the row has one
    arguments: Callable[[Member | None], dict[str, Any]]
    member: bool = False  # the commit goes to a group formed by one member, and uses its connection
    group_protocol: bool = False
    requires: str = ""


REFUSED_COMMITS = (
    RefusedCommit(
        "offset_commit.metadata_too_large",
        "A commit whose metadata string exceeds offset.metadata.max.bytes (4096 by default) answers "
        "OFFSET_METADATA_TOO_LARGE (12) for that partition and stores nothing.",
        f"{OMM}; broker config offset.metadata.max.bytes", (ErrorCode.OFFSET_METADATA_TOO_LARGE,),
        "OffsetCommit with 10000 bytes of metadata", lambda _: {"metadata": "m" * 10_000},
        requires="offset.metadata.max.bytes < 10000 (Kafka's default is 4096)"),
    RefusedCommit(
        "offset_commit.absent_group_with_generation",
        "A commit carrying a generation >= 0 and a member id for a group that does not exist is refused "
        "and stores nothing: Kafka 4 answers GROUP_ID_NOT_FOUND (69); the coordinator before 4.0 answered "
        "ILLEGAL_GENERATION (22), which is accepted too.",
        f"{OMM} (validateOffsetCommit on an unknown group: GroupIdNotFoundException); "
        "pre-4.0 GroupCoordinator.handleCommitOffsets",
        (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.ILLEGAL_GENERATION),
        "OffsetCommit gen 3 to an absent group", lambda _: {"generation": 3, "member_id": "someone"},
        group_protocol=True),
    RefusedCommit(
        "offset_commit.unknown_member",
        "A commit to an active group with a member id it does not know answers UNKNOWN_MEMBER_ID (25) and "
        "stores nothing.",
        f"{OMM} (validateOffsetCommit)", (ErrorCode.UNKNOWN_MEMBER_ID,),
        "OffsetCommit with an unknown member id",
        lambda m: {"member_id": "no-such-member"}, member=True),
    RefusedCommit(
        "offset_commit.illegal_generation",
        "A member's commit with a stale generation answers ILLEGAL_GENERATION (22) and stores nothing.",
        f"{OMM} (validateOffsetCommit)", (ErrorCode.ILLEGAL_GENERATION,),
        "OffsetCommit with a stale generation",
        lambda m: {"generation": _generation(m) - 1}, member=True),
    RefusedCommit(
        "offset_commit.simple_commit_to_active_group_refused",
        "A commit with generation -1 and no member id to a group that has members is refused "
        "(UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION) and stores nothing: only a member may commit for an "
        "active group.",
        f"{OMM} (validateOffsetCommit: simple commits only to empty groups)",
        (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION), "simple OffsetCommit to an active group",
        lambda _: {"generation": -1, "member_id": ""}, member=True),
)


def _generation(member: Member | None) -> int:
    assert member is not None
    return member.generation


def _refused_commit(row: RefusedCommit) -> Callable[[CheckContext], None]:
    def run(ctx: CheckContext) -> None:
        ops = Ops(ctx)
        topic, offsets = _topic_with_records(ops, 2)
        member = form_group(ctx, 1, ops=ops)[0] if row.member else None
        group = member.group if member is not None else ctx.name("g")
        arguments = row.arguments(member)
        if member is not None:
            arguments.setdefault("generation", member.generation)
            arguments.setdefault("member_id", member.member_id)
            arguments.update(instance_id=member.instance_id, conn=member.conn)
        code = commit_offset(ops, group, topic, 0, offsets[1], **arguments)
        ctx.note("error", code)
        expect_error(code, row.expected, row.what)
        _, got = fetch_offsets(ops, group, [(topic, 0)])
        stored = got[(topic, 0)].offset if (topic, 0) in got else -1
        expect_eq(stored, -1, "offset stored by the refused commit")
    return run


for _row in REFUSED_COMMITS:
    check(_row.name, api=COMMIT, asserts=_row.asserts, source=_row.source, requires=_row.requires,
          group_protocol=_row.member or _row.group_protocol)(_refused_commit(_row))


@check("offset_commit.member_commit_stable", api=COMMIT, group_protocol=True,
       asserts="A member of a Stable group commits with its member id and generation (NONE) and the "
               "offset is fetched back.",
       source=OMM)
def member_commit(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 3)
    (member,) = form_group(ctx, 1, ops=ops)
    expect_error(member.commit(topic, 0, offsets[2]), ErrorCode.NONE, "member's OffsetCommit")
    expect_eq(committed(ops, member.group, topic, 0).offset, offsets[2], "committed offset")


@check("offset_commit.completing_rebalance_refused", api=COMMIT, group_protocol=True,
       asserts="A commit after the JoinGroup answer but before SyncGroup completes (CompletingRebalance) "
               "answers REBALANCE_IN_PROGRESS (27).",
       source=f"{OMM} (CompletingRebalance: the member has no assignment yet)")
def completing_rebalance(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 1)
    member = Member(ctx, ctx.name("g"), ops=ops)
    member.join()
    expect_error(member.commit(topic, 0, offsets[0]), ErrorCode.REBALANCE_IN_PROGRESS,
                 "OffsetCommit before SyncGroup")


@check("offset_commit.allowed_while_preparing_rebalance", api=COMMIT, group_protocol=True,
       asserts="While the group prepares a rebalance, a member of the previous generation can still "
               "commit (NONE), so it can save its progress before giving up partitions.",
       source=f"{OMM} (PreparingRebalance accepts commits of the current generation)")
def preparing_rebalance(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 3)
    (member,) = form_group(ctx, 1, ops=ops)
    Member(ctx, member.group, ops=ops, client_id="newcomer").join_start()
    expect_error(rebalance_signal(member), ErrorCode.REBALANCE_IN_PROGRESS,
                 "heartbeat (the rebalance has started)")
    expect_error(member.commit(topic, 0, offsets[2]), ErrorCode.NONE,
                 "OffsetCommit during PreparingRebalance")
    expect_eq(committed(ops, member.group, topic, 0).offset, offsets[2], "committed offset")


@check("offset_commit.unknown_topic", api=COMMIT,
       asserts="A commit for a partition of a topic that does not exist answers "
               "UNKNOWN_TOPIC_OR_PARTITION (3) for it.",
       source="Kafka KafkaApis.handleOffsetCommitRequest (authorized but unknown topics)")
def commit_unknown_topic(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    code = commit_offset(ops, ctx.name("g"), ctx.name("missing"), 0, 5)
    expect_error(code, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "OffsetCommit for a missing topic")


@check("offset_commit.later_commit_replaces_even_lower", api=COMMIT,
       asserts="A later commit replaces the earlier one even when it is lower (a consumer that seeks "
               "back and commits): OffsetFetch returns the last committed value.",
       source=f"{OMM} (commits are stored as given; no monotonicity check)")
def replaces(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 8)
    group = ctx.name("g")
    for value in (offsets[7], offsets[2]):
        expect_error(commit_offset(ops, group, topic, 0, value), ErrorCode.NONE, f"OffsetCommit {value}")
    expect_eq(committed(ops, group, topic, 0).offset, offsets[2], "committed offset after committing lower")


@check("offset_commit.every_version", api=COMMIT,
       asserts="Every OffsetCommit version the broker advertises (by topic name) stores an offset that "
               "OffsetFetch returns.",
       source="OffsetCommitRequest.json (all versions)")
def every_commit_version(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 10)
    versions = ctx.apis.versions(ApiKey.OFFSET_COMMIT, hi=9)
    ctx.note("versions", versions)
    for index, version in enumerate(versions):
        group = ctx.name("g")
        target = offsets[index % len(offsets)]
        errors = commit_offsets(ops, group, {(topic, 0): target}, version=version)
        expect_error(errors[(topic, 0)], ErrorCode.NONE, f"OffsetCommit v{version}")
        expect_eq(committed(ops, group, topic, 0).offset, target, f"offset committed with v{version}")


@check("offset_fetch.unknown_group", api=FETCH,
       asserts="OffsetFetch for a group that never committed answers NONE with offset -1 for each "
               "partition asked.",
       source=f"{OMM}; OffsetFetchResponse.json (-1 = no committed offset)")
def fetch_unknown_group(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, _ = _topic_with_records(ops, 1, partitions=2)
    group_error, got = fetch_offsets(ops, ctx.name("g"), [(topic, 0), (topic, 1)])
    expect_error(group_error, ErrorCode.NONE, "OffsetFetch group error")
    expect_eq(sorted((k[1], v.offset, v.error) for k, v in got.items()),
              [(0, -1, ErrorCode.NONE), (1, -1, ErrorCode.NONE)], "(partition, offset, error)")


@check("offset_fetch.all_partitions_with_null_topics", api=FETCH,
       asserts="OffsetFetch v2+ with topics=null returns every partition the group has committed, and "
               "only those.",
       source="KIP-88 (OffsetFetch for all topics)")
def fetch_all(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 3, partitions=3)
    other, other_offsets = _topic_with_records(ops, 1)
    group = ctx.name("g")
    commit_offsets(ops, group, {(topic, 0): offsets[1], (topic, 2): 0, (other, 0): other_offsets[0]})
    group_error, got = fetch_offsets(ops, group, None, version=ops.v(ApiKey.OFFSET_FETCH, lo=2, hi=9))
    expect_error(group_error, ErrorCode.NONE, "OffsetFetch group error")
    expect_eq(sorted((k, v.offset) for k, v in got.items()),
              sorted([((topic, 0), offsets[1]), ((topic, 2), 0), ((other, 0), other_offsets[0])]),
              "committed partitions")


@check("offset_fetch.batched_groups", api=FETCH,
       asserts="OffsetFetch v8+ with two groups answers each group's own committed offsets.",
       source="KIP-709 (batched OffsetFetch)")
def batched_groups(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.OFFSET_FETCH, lo=8, hi=9)
    topic, offsets = _topic_with_records(ops, 4)
    g1, g2 = ctx.name("g"), ctx.name("g")
    commit_offset(ops, g1, topic, 0, offsets[1])
    commit_offset(ops, g2, topic, 0, offsets[3])
    response = ops.call(ApiKey.OFFSET_FETCH, version, require_stable=False, groups=[
        {"group_id": g, "topics": [{"name": topic, "partition_indexes": [0]}]} for g in (g1, g2)])
    got = {g.group_id: int(g.topics[0].partitions[0].committed_offset) for g in response.groups}
    expect_eq(got, {g1: offsets[1], g2: offsets[3]}, "offsets per group")


@check("offset_fetch.returns_offsets_during_rebalance", api=FETCH, group_protocol=True,
       asserts="OffsetFetch returns the committed offsets whatever the group's state, also while it is "
               "rebalancing.",
       source=f"{OMM} (fetchOffsets answers regardless of group state)")
def during_rebalance(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 3)
    (member,) = form_group(ctx, 1, ops=ops)
    expect_error(member.commit(topic, 0, offsets[2]), ErrorCode.NONE, "OffsetCommit")
    Member(ctx, member.group, ops=ops, client_id="newcomer").join_start()
    expect_error(rebalance_signal(member), ErrorCode.REBALANCE_IN_PROGRESS,
                 "heartbeat (the rebalance has started)")
    expect_eq(committed(ops, member.group, topic, 0).offset, offsets[2], "offset fetched while rebalancing")


@check("offset_fetch.require_stable_pending_transaction", api=FETCH,
       asserts="While a transaction that committed offsets for a group is open, OffsetFetch v7+ with "
               "require_stable=true answers UNSTABLE_OFFSET_COMMIT (88) for that partition; after the "
               "commit it returns the offset.",
       source="KIP-447 (require_stable in OffsetFetch v7)")
def require_stable(ctx: CheckContext) -> None:
    from confluent_kafka import TopicPartition

    from korvet.conformance.harness.drivers import confluent_consumer, confluent_producer

    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 3)
    group = ctx.name("g")
    consumer = confluent_consumer(ctx, group_id=group)
    producer = confluent_producer(ctx, transactional_id=ctx.name("txn"), enable_idempotence=True)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, offsets[2])],
                                         consumer.consumer_group_metadata(), 30)
    version = ops.v(ApiKey.OFFSET_FETCH, lo=7, hi=9)
    group_error, got = fetch_offsets(ops, group, [(topic, 0)], require_stable=True, version=version)
    pending = got[(topic, 0)].error if (topic, 0) in got else group_error
    expect_error(pending, ErrorCode.UNSTABLE_OFFSET_COMMIT,
                 "OffsetFetch require_stable during the transaction")
    producer.commit_transaction(30)
    # The commit markers reach the offsets log just after EndTxn returns.
    wait_until(lambda: committed(ops, group, topic, 0, version=version).offset == offsets[2], 15,
               "OffsetFetch returning the transaction's offset after the commit")


@check("offset_delete.empty_group", api=DELETE,
       asserts="OffsetDelete on a group without members removes the partition's committed offset "
               "(OffsetFetch then answers -1) and keeps the others.",
       source="KIP-496 (OffsetDelete)")
def delete_empty(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 2, partitions=2)
    group = ctx.name("g")
    commit_offsets(ops, group, {(topic, 0): offsets[1], (topic, 1): 0})
    top, per_partition = offset_delete(ops, group, [(topic, 0)])
    expect_error(top, ErrorCode.NONE, "OffsetDelete top-level error")
    expect_error(per_partition[(topic, 0)], ErrorCode.NONE, "OffsetDelete partition error")
    _, got = fetch_offsets(ops, group, [(topic, 0), (topic, 1)])
    expect_eq((got[(topic, 0)].offset, got[(topic, 1)].offset), (-1, 0), "offsets after the delete")


@check("offset_delete.absent_group", api=DELETE,
       asserts="OffsetDelete for a group that does not exist answers GROUP_ID_NOT_FOUND (69).",
       source="KIP-496; anchors §2.7")
def delete_absent(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, _ = _topic_with_records(ops, 1)
    top, _ = offset_delete(ops, ctx.name("g"), [(topic, 0)])
    expect_error(top, ErrorCode.GROUP_ID_NOT_FOUND, "OffsetDelete of an absent group")


@check("offset_delete.subscribed_topic_refused", api=DELETE, group_protocol=True,
       asserts="OffsetDelete on an active consumer group for a topic its members subscribe to answers "
               "GROUP_SUBSCRIBED_TO_TOPIC (86) for those partitions and keeps the offset.",
       source="KIP-496 (subscribed topics cannot be deleted from an active group)")
def delete_subscribed(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 2)
    (member,) = form_group(ctx, 1, ops=ops, protocols=[("range", subscription([topic]))])
    expect_error(member.commit(topic, 0, offsets[1]), ErrorCode.NONE, "OffsetCommit")
    top, per_partition = offset_delete(ops, member.group, [(topic, 0)])
    expect_error(top, ErrorCode.NONE, "OffsetDelete top-level error")
    expect_error(per_partition[(topic, 0)], ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                 "OffsetDelete of a subscribed topic")
    expect_eq(committed(ops, member.group, topic, 0).offset, offsets[1], "offset kept")


@check("offset_delete.active_non_consumer_group_refused", api=DELETE, group_protocol=True,
       asserts="OffsetDelete on an active group whose protocol type is not 'consumer' answers "
               "NON_EMPTY_GROUP (68).",
       source="KIP-496; anchors §2.7")
def delete_non_consumer(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 1)
    (member,) = form_group(ctx, 1, ops=ops, protocol_type="connect", protocols=[("v1", b"x")])
    expect_error(member.commit(topic, 0, offsets[0]), ErrorCode.NONE, "OffsetCommit")
    top, _ = offset_delete(ops, member.group, [(topic, 0)])
    expect_error(top, ErrorCode.NON_EMPTY_GROUP, "OffsetDelete on an active connect group")


@check("offsets.failed_commit_keeps_previous_offset", api=COMMIT, group_protocol=True,
       asserts="A refused commit (stale generation) leaves the previously committed offset in place: "
               "OffsetFetch still returns it.",
       source="Seed 004 (KafkaConsumer: committed offsets are for the next owner); anchors §2.7")
def failed_commit_keeps(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 8)
    (member,) = form_group(ctx, 1, ops=ops)
    expect_error(member.commit(topic, 0, offsets[3]), ErrorCode.NONE, "first OffsetCommit")
    code = member.commit(topic, 0, offsets[7], generation=member.generation + 5)
    expect_error(code, ErrorCode.ILLEGAL_GENERATION, "OffsetCommit with a wrong generation")
    expect_eq(committed(ops, member.group, topic, 0).offset, offsets[3], "committed offset after the failure")


@check("offsets.fetch_position_independent_of_commit", api=COMMIT, group_protocol=True,
       asserts="What a group member can fetch does not depend on what it committed: after committing "
               "offset N it can fetch from before N (re-read) and after N (skip ahead), and a failed "
               "commit does not move what the next fetch returns.",
       source="Seed 004 (the consumer owns its fetch position: SubscriptionState, not the coordinator); "
              "Kafka Fetch has no group id")
def position_independent(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _topic_with_records(ops, 10)
    (member,) = form_group(ctx, 1, ops=ops)
    first = ops.fetch(topic, 0, offsets[0])
    expect_eq(first.offsets[:10], offsets, "first fetch of all records")
    expect_error(member.commit(topic, 0, offsets[5]), ErrorCode.NONE, "OffsetCommit of offset 5")
    expect_error(member.commit(topic, 0, offsets[8], generation=member.generation + 1),
                 ErrorCode.ILLEGAL_GENERATION, "failing OffsetCommit of offset 8")
    again = ops.fetch(topic, 0, offsets[2])
    expect_eq([r.offset for r in again.records if r.offset >= offsets[2]][:3], offsets[2:5],
              "re-fetch from before the committed offset")
    ahead = ops.fetch(topic, 0, offsets[9])
    expect_eq([r.value for r in ahead.records if r.offset >= offsets[9]], [b"r9"], "fetch past the commit")
    expect_eq(committed(ops, member.group, topic, 0).offset, offsets[5], "committed offset")
