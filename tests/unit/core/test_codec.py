"""The one codec (korvet/core/codec.py): snapshots and event-log lines read back as the values
that were written, transient fields excepted; damaged input is a clear error."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core import coordinator as core
from korvet.core.codec import CodecError, decode
from korvet.core.coordinator.eventlog import (
    effect_from_json,
    effect_to_json,
    event_from_json,
    event_to_json,
)
from korvet.core.coordinator.snapshot import SnapshotError, from_snapshot, read_group, to_snapshot

ids = st.text(alphabet="abc-12", min_size=1, max_size=6)
maybe_int = st.none() | st.integers(min_value=0, max_value=10**12)
protocols = st.tuples(*[st.builds(core.Protocol, ids, st.binary(max_size=8))] * 1) | st.tuples(
    st.builds(core.Protocol, ids, st.binary(max_size=8)),
    st.builds(core.Protocol, ids, st.binary(max_size=8)))
members = st.builds(
    core.Member, member_id=ids, group_instance_id=st.none() | ids, client_id=ids,
    client_host=ids, session_timeout_ms=st.integers(0, 10**6),
    rebalance_timeout_ms=st.integers(0, 10**6), protocol_type=ids, protocols=protocols,
    assignment=st.binary(max_size=10), is_new=st.booleans(), join_request=maybe_int,
    sync_request=maybe_int, session_deadline=maybe_int)
groups = st.builds(
    core.Group, group_id=ids, state=st.sampled_from(core.GroupState),
    generation=st.integers(0, 2**31 - 1), protocol_type=st.none() | ids,
    protocol_name=st.none() | ids, leader=st.none() | ids,
    members=st.dictionaries(ids, members, max_size=3),
    pending=st.dictionaries(ids, st.builds(core.PendingMember, st.integers(0, 10**6), maybe_int),
                            max_size=2),
    pending_sync=st.frozensets(ids, max_size=3), initial_rebalance=st.booleans(),
    new_member_added=st.booleans(), initial_delay_ms=st.integers(0, 10**6),
    initial_remaining_ms=st.integers(0, 10**6), join_deadline=maybe_int, sync_deadline=maybe_int,
    leader_sync=st.none() | st.builds(core.LeaderSync, st.integers(0, 100),
                                      st.dictionaries(ids, st.binary(max_size=6), max_size=3)),
    offsets=st.dictionaries(st.builds(core.TopicPartition, ids, st.integers(0, 100)),
                            st.builds(core.CommittedOffset, st.integers(-1, 2**63 - 1),
                                      st.text(max_size=5), st.integers(-1, 10)), max_size=3))


def _without_transients(value: Any) -> Any:
    """The value with every transient field back at its default, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if f.metadata.get("transient"):
                changes[f.name] = f.default
            else:
                changes[f.name] = _without_transients(getattr(value, f.name))
        return type(value)(**changes)
    if isinstance(value, dict):
        return {_without_transients(k): _without_transients(v) for k, v in value.items()}
    return value


@pytest.mark.spec("GroupCoordinatorDurable", "Snapshot")
@given(st.dictionaries(ids, groups, max_size=3))
def test_a_snapshot_reads_back_as_the_state_without_its_transient_fields(
        by_id: dict[str, core.Group]) -> None:
    state = core.CoordinatorState(groups={g: dataclasses.replace(v, group_id=g)
                                          for g, v in by_id.items()})
    text = json.dumps(to_snapshot(state))
    back = from_snapshot(json.loads(text))
    assert back.config == state.config
    assert back.groups == {g: _without_transients(v) for g, v in state.groups.items()}


@pytest.mark.spec("GroupCoordinatorDurable", "Snapshot")
@given(groups)
def test_transient_fields_never_reach_the_snapshot(group: core.Group) -> None:
    text = json.dumps(to_snapshot(core.CoordinatorState(groups={group.group_id: group})))
    for name in ("join_request", "sync_request", "session_deadline", "deadline", "join_deadline",
                 "sync_deadline"):
        assert f'"{name}"' not in text


@given(st.builds(core.JoinGroup, request_id=st.integers(0, 10**6), group_id=ids, member_id=ids,
                 group_instance_id=st.none() | ids, protocol_type=ids, protocols=protocols,
                 session_timeout_ms=st.integers(0, 10**6), rebalance_timeout_ms=st.integers(0, 10**6),
                 client_id=ids, client_host=ids, requires_known_member_id=st.booleans(),
                 supports_skip_assignment=st.booleans(), new_member_id=ids)
       | st.builds(core.OffsetCommit, request_id=st.integers(0, 10**6), group_id=ids, member_id=ids,
                   group_instance_id=st.none() | ids, generation_id=st.integers(-1, 10),
                   offsets=st.tuples(st.builds(core.OffsetToCommit, ids, st.integers(0, 9),
                                               st.integers(0, 2**63 - 1))),
                   unknown_group_is_not_found=st.booleans())
       | st.builds(core.SessionTimeout, ids, ids) | st.just(core.Restart()))
def test_events_read_back_as_themselves(event: core.Event) -> None:
    assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event


@given(st.builds(core.SyncGroupReply, st.integers(0, 99), ids, st.sampled_from(core.ErrorCode),
                 st.none() | ids, st.none() | ids, st.binary(max_size=6))
       | st.builds(core.PersistOffsets, ids, ids, st.integers(-1, 9),
                   st.tuples(st.tuples(st.builds(core.TopicPartition, ids, st.integers(0, 9)),
                                       st.builds(core.CommittedOffset, st.integers(0, 99))))))
def test_effects_read_back_as_themselves(effect: core.Effect) -> None:
    assert effect_from_json(json.loads(json.dumps(effect_to_json(effect)))) == effect


@pytest.mark.parametrize(("damage", "where"), [
    (lambda g: g.update(generation="7"), "group.generation"),
    (lambda g: g.update(state="Sleeping"), "group.state"),
    (lambda g: g["members"][0][1].update(assignment="%%%"), "group.members[0].value.assignment"),
    (lambda g: g.pop("leader"), "needs 'leader'"),
    (lambda g: g.update(colour="red"), "no field 'colour'"),
])
def test_a_damaged_snapshot_names_what_is_wrong(damage: Any, where: str) -> None:
    group = core.Group("g", generation=3, leader="m", members={"m": core.Member(
        "m", None, "c", "h", 10, 10, "consumer", (core.Protocol("range", b""),))})
    data = json.loads(json.dumps(to_snapshot(core.CoordinatorState(groups={"g": group}))))
    damage(data["groups"][0])
    with pytest.raises(SnapshotError, match=where.replace("[", r"\[").replace("]", r"\]")):
        read_group(data["groups"][0])


def test_a_snapshot_of_another_version_is_refused() -> None:
    with pytest.raises(SnapshotError, match="version 1"):
        from_snapshot({"version": 1, "config": {}, "groups": []})
    with pytest.raises(CodecError):
        decode(core.Config, {"min_session_timeout_ms": True})
