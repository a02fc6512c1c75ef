"""Share-group membership's pure machine (korvet/core/share_group.py): Kafka's error codes,
the simple assignor, and properties over any sequence of heartbeats, leaves, expiries and
topic changes."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core import share_group as sg
from korvet.core.errors import ErrorCode
from tests.support.examples import examples

CONFIG = sg.ShareConfig(session_timeout_ms=100, heartbeat_interval_ms=10, max_size=4)


def _join(group: sg.ShareGroup | None, member: str, topics: tuple[str, ...],
          counts: dict[str, int], now: int = 0) -> tuple[sg.ShareGroup, sg.HeartbeatReply]:
    after, reply = sg.heartbeat(group, sg.Heartbeat("g", member, 0, subscribed_topic_names=topics),
                                counts, now, CONFIG)
    assert after is not None
    return after, reply


def test_a_join_creates_the_group_and_assigns_everything() -> None:
    group, reply = _join(None, "m1", ("t",), {"t": 3})
    assert (reply.error, reply.member_epoch, reply.heartbeat_interval_ms) == (ErrorCode.NONE, 1, 10)
    assert reply.assignment == (("t", (0, 1, 2)),)
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, sg.STABLE)


def test_kafka_error_codes() -> None:
    group, first = _join(None, "m1", ("t",), {"t": 1})

    def code(request: sg.Heartbeat, g: sg.ShareGroup | None = group, **kw: bool) -> ErrorCode:
        return sg.heartbeat(g, request, {"t": 1}, 0, CONFIG, **kw)[1].error

    assert code(sg.Heartbeat("g", "m1", 5)) == ErrorCode.FENCED_MEMBER_EPOCH
    assert code(sg.Heartbeat("g", "m9", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code(sg.Heartbeat("g", "m9", -1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code(sg.Heartbeat("g", "", 0, subscribed_topic_names=("t",))) == ErrorCode.INVALID_REQUEST
    assert code(sg.Heartbeat("", "m1", 0, subscribed_topic_names=("t",))) == ErrorCode.INVALID_REQUEST
    assert code(sg.Heartbeat("g", "m2", 0)) == ErrorCode.INVALID_REQUEST  # no subscription
    assert code(sg.Heartbeat("g", "m2", -2)) == ErrorCode.INVALID_REQUEST
    assert code(sg.Heartbeat("g", "m2", 0, rack_id="",
                             subscribed_topic_names=("t",))) == ErrorCode.INVALID_REQUEST
    assert code(sg.Heartbeat("g", "m1", 1), None) == ErrorCode.GROUP_ID_NOT_FOUND
    assert code(sg.Heartbeat("g", "m2", 0, subscribed_topic_names=("t",)), None,
                other_type=True) == ErrorCode.GROUP_ID_NOT_FOUND
    full = group
    for i in range(2, 5):
        full, _ = _join(full, f"m{i}", ("t",), {"t": 1})
    assert code(sg.Heartbeat("g", "m5", 0, subscribed_topic_names=("t",)), full) == \
        ErrorCode.GROUP_MAX_SIZE_REACHED
    assert first.member_epoch == 1


def test_partitions_are_not_exclusive_with_more_members_than_partitions() -> None:
    members = [sg.Member(f"m{i}", 0, ("t",), (), 0) for i in range(5)]
    assigned = sg.assign(members, {"t": 2})
    assert [assigned[f"m{i}"] for i in range(5)] == [
        (("t", (0,)),), (("t", (1,)),), (("t", (0,)),), (("t", (1,)),), (("t", (0,)),)]


def test_a_member_learns_its_new_epoch_on_its_own_heartbeat() -> None:
    group, first = _join(None, "m1", ("t",), {"t": 2})
    group, _ = _join(group, "m2", ("t",), {"t": 2})
    assert group.members["m1"].member_epoch == first.member_epoch == 1  # not told yet
    group2, reply = sg.heartbeat(group, sg.Heartbeat("g", "m1", 1), {"t": 2}, 1, CONFIG)
    assert (reply.member_epoch, reply.assignment) == (2, (("t", (0,)),))
    quiet = sg.heartbeat(group2, sg.Heartbeat("g", "m1", 2), {"t": 2}, 2, CONFIG)[1]
    assert quiet.assignment is None  # nothing changed: nothing sent


def test_expiry_and_a_restart_keep_epochs_rising() -> None:
    group, _ = _join(None, "m1", ("t",), {"t": 1})
    group, _ = _join(group, "m2", ("t",), {"t": 1}, now=50)
    assert sg.next_deadline(group) == 100
    group, gone = sg.expire(group, 120, group.topics)
    assert gone == ("m1",) and list(group.members) == ["m2"] and group.group_epoch == 3
    restored = sg.restored("g", group.group_epoch)
    assert restored.state == sg.EMPTY
    _, reply = sg.heartbeat(restored, sg.Heartbeat("g", "m2", 2), {"t": 1}, 130, CONFIG)
    assert reply.error == ErrorCode.UNKNOWN_MEMBER_ID
    assert _join(restored, "m2", ("t",), {"t": 1})[1].member_epoch == 4


# --- properties over sequences --------------------------------------------------------------

MEMBERS = ("a", "b", "c", "d", "e")
TOPICS = ("t", "u")


@dataclass(frozen=True)
class Step:
    kind: str  # join, beat, stale, leave, expire, grow
    member: str
    topics: tuple[str, ...]
    dt: int


steps = st.builds(
    Step, st.sampled_from(["join", "beat", "beat", "stale", "leave", "expire", "grow"]),
    st.sampled_from(MEMBERS),
    st.lists(st.sampled_from((*TOPICS, "missing")), min_size=1, max_size=3, unique=True).map(tuple),
    st.integers(0, 60))


@settings(max_examples=examples(2))
@given(st.lists(steps, max_size=40), st.integers(1, 4), st.integers(0, 3))
def test_sequences_keep_the_membership_invariants(sequence: list[Step], t_parts: int,
                                                  u_parts: int) -> None:
    counts = {"t": t_parts, "u": u_parts}
    group: sg.ShareGroup | None = None
    now = 0
    told: dict[str, int] = {}  # the last epoch each member was told (its client's view)
    last_group_epoch = 0
    for step in sequence:
        now += step.dt
        if step.kind == "grow":
            counts["t"] += 1
            if group is not None:
                group = sg.refreshed(group, counts)
        elif step.kind == "expire" and group is not None:
            group, gone = sg.expire(group, now, group.topics)
            for member in gone:
                told.pop(member, None)
        elif step.kind in ("join", "beat", "stale", "leave"):
            epoch = {"join": 0, "leave": -1, "beat": told.get(step.member, 0),
                     "stale": told.get(step.member, 0) - 1}[step.kind]
            request = sg.Heartbeat("g", step.member, epoch,
                                   subscribed_topic_names=step.topics if epoch == 0 else None)
            before = group
            group, reply = sg.heartbeat(group, request, counts, now, CONFIG)
            if step.kind == "stale" and epoch > 0 and step.member in told:
                assert reply.error is ErrorCode.FENCED_MEMBER_EPOCH  # an old epoch is fenced
            _check_reply(before, group, request, reply, told)
        if group is not None:
            assert group.group_epoch >= last_group_epoch
            last_group_epoch = group.group_epoch
            _check_group(group, counts)


def _check_reply(before: sg.ShareGroup | None, after: sg.ShareGroup | None,
                 request: sg.Heartbeat, reply: sg.HeartbeatReply, told: dict[str, int]) -> None:
    member = request.member_id
    if reply.error is not ErrorCode.NONE:
        assert after == before  # a refused heartbeat changes nothing
        if request.member_epoch > 0 and member in told:
            assert reply.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)
        return
    assert after is not None
    if request.member_epoch == -1:
        assert member not in after.members and reply.member_epoch == -1
        told.pop(member, None)
        return
    # a member's epoch never goes backwards, and is the group's assignment epoch
    assert reply.member_epoch >= told.get(member, 0)
    assert reply.member_epoch == after.assignment_epoch == after.members[member].member_epoch
    if reply.assignment is not None:
        assert reply.assignment == after.members[member].assignment
    told[member] = reply.member_epoch


def _check_group(group: sg.ShareGroup, counts: dict[str, int]) -> None:
    assert len(group.members) <= CONFIG.max_size
    assert group.assignment_epoch == group.group_epoch
    for member in group.members.values():
        assert member.member_epoch <= group.group_epoch
        for topic, parts in member.assignment:
            assert topic in member.subscribed
            assert all(0 <= p < counts[topic] for p in parts)
    for topic in group.subscribed_topics():
        if topic not in counts or group.topics.get(topic) != counts[topic]:
            continue
        covered = {p for m in group.members.values() for t, ps in m.assignment if t == topic
                   for p in ps}
        assert covered == set(range(counts[topic])), (topic, group)  # every partition goes out
        subscribers = [m for m in group.members.values() if topic in m.subscribed]
        if len(subscribers) <= counts[topic]:  # and each subscriber gets some
            assert all(any(t == topic for t, _ in m.assignment) for m in subscribers)
