"""OffsetDelete, topic deletion and commits naming no partition in the coordinator (outside the
TLA+ spec)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core import coordinator as core
from korvet.core.coordinator.consumer_protocol import subscribed_topics
from tests.support.examples import examples


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 1, len(topics))
    for topic in topics:
        encoded = topic.encode()
        body += struct.pack(">h", len(encoded)) + encoded
    return body + struct.pack(">i", -1)  # no user data


@given(st.lists(st.text(min_size=1, max_size=20), max_size=5))
def test_subscribed_topics_reads_what_a_consumer_sends(topics: list[str]) -> None:
    assert subscribed_topics(subscription(*topics)) == frozenset(topics)


@given(st.binary(max_size=40))
def test_subscribed_topics_never_raises_on_garbage(data: bytes) -> None:
    result = subscribed_topics(data)
    assert result is None or isinstance(result, frozenset)


def commit(state: core.CoordinatorState, *pairs: tuple[str, int]) -> core.CoordinatorState:
    event = core.OffsetCommit(request_id=1, group_id="g", member_id="", group_instance_id=None,
                              generation_id=-1, offsets=tuple(
                                  core.OffsetToCommit(t, p, 100 + p) for t, p in pairs))
    state, effects = core.step(state, event, 0)
    assert isinstance(effects[-1], core.OffsetCommitReply)
    return state


def join_stable(state: core.CoordinatorState, metadata: bytes) -> core.CoordinatorState:
    """One dynamic member, joined and synced: a Stable consumer group."""
    join = core.JoinGroup(request_id=2, group_id="g", member_id="", group_instance_id=None,
                          protocol_type="consumer", protocols=(core.Protocol("range", metadata),),
                          session_timeout_ms=10_000, rebalance_timeout_ms=10_000, client_id="c",
                          client_host="h", requires_known_member_id=False,
                          supports_skip_assignment=False, new_member_id="c-1")
    state, _ = core.step(state, join, 0)
    for timeout in core.due_timeouts(state, 100_000):
        state, _ = core.step(state, timeout, 100_000)
    state, _ = core.step(state, core.SyncGroup(
        request_id=3, group_id="g", member_id="c-1", group_instance_id=None,
        generation_id=state.groups["g"].generation, protocol_type=None, protocol_name=None,
        assignments=(core.MemberAssignment("c-1", b"a"),)), 100_000)
    assert state.groups["g"].state is core.GroupState.STABLE
    return state


def delete(state: core.CoordinatorState, *pairs: tuple[str, int]
           ) -> tuple[core.CoordinatorState, tuple[core.Effect, ...]]:
    return core.step(state, core.OffsetDelete(
        request_id=9, group_id="g",
        partitions=tuple(core.TopicPartition(t, p) for t, p in pairs)), 100_001)


def test_unknown_group_is_not_found() -> None:
    _, effects = delete(core.initial_state(), ("t", 0))
    assert effects == (core.OffsetDeleteReply(9, core.ErrorCode.GROUP_ID_NOT_FOUND, ()),)


def test_an_empty_groups_offsets_are_deleted_and_persisted() -> None:
    state = commit(core.initial_state(), ("t", 0), ("t", 1))
    state, effects = delete(state, ("t", 0), ("other", 0))
    assert effects[0] == core.DeleteOffsets("g", (core.TopicPartition("t", 0),))
    assert isinstance(effects[1], core.OffsetDeleteReply)
    assert [r.error for r in effects[1].partitions] == [core.ErrorCode.NONE] * 2
    assert list(state.groups["g"].offsets) == [core.TopicPartition("t", 1)]


def test_a_subscribed_topic_of_an_active_consumer_group_is_kept() -> None:
    state = commit(core.initial_state(), ("t", 0), ("u", 0))
    state = join_stable(state, subscription("t"))
    state, effects = delete(state, ("t", 0), ("u", 0))
    reply = effects[-1]
    assert isinstance(reply, core.OffsetDeleteReply)
    assert [(r.topic, r.error) for r in reply.partitions] == [
        ("t", core.ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), ("u", core.ErrorCode.NONE)]
    assert list(state.groups["g"].offsets) == [core.TopicPartition("t", 0)]


def test_topic_deletion_drops_every_groups_offsets_for_it() -> None:
    state = commit(core.initial_state(), ("t", 0), ("u", 0))
    state, effects = core.step(state, core.TopicDeleted("t"), 5)
    assert effects == ()
    assert list(state.groups["g"].offsets) == [core.TopicPartition("u", 0)]


@settings(max_examples=examples(1))
@given(existing=st.booleans(), member=st.sampled_from(["", "c-1", "stranger"]),
       generation=st.integers(-1, 3), v9=st.booleans())
def test_a_commit_naming_no_partition_changes_nothing(existing: bool, member: str, generation: int,
                                                      v9: bool) -> None:
    """Kafka's broker answers an OffsetCommit with no partition before its coordinator sees it: no
    "simple" group is created (a DeleteGroups of it then answers GROUP_ID_NOT_FOUND, as on Kafka),
    no member's session is kept alive, nothing is persisted. Found by the differential mode."""
    state = join_stable(commit(core.initial_state(), ("t", 0)), subscription("t")) if existing \
        else core.initial_state()
    after, effects = core.step(state, core.OffsetCommit(
        request_id=5, group_id="g", member_id=member, group_instance_id=None,
        generation_id=generation, offsets=(), unknown_group_is_not_found=v9), 100_000)
    assert after == state
    assert effects == (core.OffsetCommitReply(5, member, ()),)
    _, deleted = core.step(after, core.DeleteGroups(request_id=6, group_ids=("g",)), 100_001)
    reply = deleted[-1]
    assert isinstance(reply, core.DeleteGroupsReply)
    assert reply.results[0].error is (core.ErrorCode.NON_EMPTY_GROUP if existing
                                      else core.ErrorCode.GROUP_ID_NOT_FOUND)
