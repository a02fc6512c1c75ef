"""The coordinator's state as JSON, to survive a broker restart.

What survives: every group with its state, generation, protocol, leader,
members (ids, instance ids, client ids, timeouts, protocols, assignments),
pending members, pending syncs, the leader's assignment and the committed
offsets. What does not: held-back JoinGroup/SyncGroup requests (their
connections die with the broker) and deadlines (they belong to the old
process's clock). After ``from_snapshot`` the adapter steps ``Restart()``
once, which re-arms every timer from the new clock (see the spec's Restart).

The adapter must store a group's snapshot before it sends the replies of a
step that changed the group (a new generation above all): a restart from an
older snapshot would hand out a generation number twice.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import cast

from korvet.core.coordinator.state import (
    CommittedOffset,
    Config,
    CoordinatorState,
    Group,
    GroupState,
    LeaderSync,
    Member,
    PendingMember,
    Protocol,
    TopicPartition,
)

SNAPSHOT_VERSION = 1

JsonValue = None | bool | int | str | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject = dict[str, JsonValue]


class SnapshotError(ValueError):
    """A snapshot this version cannot read."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _config_json(config: Config) -> JsonObject:
    return {
        "min_session_timeout_ms": config.min_session_timeout_ms,
        "max_session_timeout_ms": config.max_session_timeout_ms,
        "initial_rebalance_delay_ms": config.initial_rebalance_delay_ms,
        "new_member_join_timeout_ms": config.new_member_join_timeout_ms,
        "group_max_size": config.group_max_size,
        "offset_metadata_max_bytes": config.offset_metadata_max_bytes,
    }


def _member_json(member: Member) -> JsonObject:
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "session_timeout_ms": member.session_timeout_ms,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "protocol_type": member.protocol_type,
        "protocols": [{"name": p.name, "metadata": _b64(p.metadata)} for p in member.protocols],
        "assignment": _b64(member.assignment),
        "is_new": member.is_new,
    }


def _group_json(group: Group) -> JsonObject:
    leader_sync: JsonValue = None
    if group.leader_sync is not None:
        leader_sync = {"generation": group.leader_sync.generation,
                       "assignments": {m: _b64(a) for m, a in
                                       sorted(group.leader_sync.assignments.items())}}
    return {
        "group_id": group.group_id,
        "state": group.state.value,
        "generation": group.generation,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader,
        "members": [_member_json(m) for m in group.members.values()],
        "pending": {m: p.session_timeout_ms for m, p in sorted(group.pending.items())},
        "pending_sync": list[JsonValue](sorted(group.pending_sync)),
        "initial_rebalance": group.initial_rebalance,
        "new_member_added": group.new_member_added,
        "initial_delay_ms": group.initial_delay_ms,
        "initial_remaining_ms": group.initial_remaining_ms,
        "leader_sync": leader_sync,
        "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": o.offset,
                     "metadata": o.metadata, "leader_epoch": o.leader_epoch}
                    for tp, o in sorted(group.offsets.items())],
    }


def to_snapshot(state: CoordinatorState) -> JsonObject:
    """A JSON-serialisable dict of everything that survives a restart."""
    return {
        "version": SNAPSHOT_VERSION,
        "config": _config_json(state.config),
        "groups": [_group_json(g) for _, g in sorted(state.groups.items())],
    }


def group_snapshot(group: Group) -> JsonObject:
    """One group's part of the snapshot (for an adapter that stores groups separately)."""
    return _group_json(group)


# --- reading ----------------------------------------------------------------------

def _obj(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise SnapshotError(f"{what}: expected an object")
    return cast(Mapping[str, object], value)


def _list(value: object, what: str) -> list[object]:
    if not isinstance(value, list):
        raise SnapshotError(f"{what}: expected a list")
    return value


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{what}: expected an integer")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise SnapshotError(f"{what}: expected a string")
    return value


def _opt_str(value: object, what: str) -> str | None:
    return None if value is None else _str(value, what)


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{what}: expected a boolean")
    return value


def _bytes(value: object, what: str) -> bytes:
    try:
        return base64.b64decode(_str(value, what), validate=True)
    except ValueError as exc:
        raise SnapshotError(f"{what}: not base64") from exc


def _member(data: object) -> Member:
    d = _obj(data, "member")
    return Member(
        member_id=_str(d.get("member_id"), "member_id"),
        group_instance_id=_opt_str(d.get("group_instance_id"), "group_instance_id"),
        client_id=_str(d.get("client_id"), "client_id"),
        client_host=_str(d.get("client_host"), "client_host"),
        session_timeout_ms=_int(d.get("session_timeout_ms"), "session_timeout_ms"),
        rebalance_timeout_ms=_int(d.get("rebalance_timeout_ms"), "rebalance_timeout_ms"),
        protocol_type=_str(d.get("protocol_type"), "protocol_type"),
        protocols=tuple(
            Protocol(_str(_obj(p, "protocol").get("name"), "protocol name"),
                     _bytes(_obj(p, "protocol").get("metadata"), "protocol metadata"))
            for p in _list(d.get("protocols"), "protocols")),
        assignment=_bytes(d.get("assignment"), "assignment"),
        is_new=_bool(d.get("is_new"), "is_new"),
    )


def _group(data: object) -> Group:
    d = _obj(data, "group")
    members = [_member(m) for m in _list(d.get("members"), "members")]
    leader_sync = None
    if d.get("leader_sync") is not None:
        ls = _obj(d.get("leader_sync"), "leader_sync")
        leader_sync = LeaderSync(
            _int(ls.get("generation"), "leader_sync generation"),
            {m: _bytes(a, "leader_sync assignment")
             for m, a in _obj(ls.get("assignments"), "leader_sync assignments").items()})
    offsets: dict[TopicPartition, CommittedOffset] = {}
    for item in _list(d.get("offsets"), "offsets"):
        o = _obj(item, "offset")
        offsets[TopicPartition(_str(o.get("topic"), "topic"), _int(o.get("partition"), "partition"))] = \
            CommittedOffset(_int(o.get("offset"), "offset"), _str(o.get("metadata"), "metadata"),
                            _int(o.get("leader_epoch"), "leader_epoch"))
    try:
        state = GroupState(_str(d.get("state"), "state"))
    except ValueError as exc:
        raise SnapshotError(f"unknown group state {d.get('state')!r}") from exc
    return Group(
        group_id=_str(d.get("group_id"), "group_id"),
        state=state,
        generation=_int(d.get("generation"), "generation"),
        protocol_type=_opt_str(d.get("protocol_type"), "protocol_type"),
        protocol_name=_opt_str(d.get("protocol_name"), "protocol_name"),
        leader=_opt_str(d.get("leader"), "leader"),
        members={m.member_id: m for m in members},
        pending={m: PendingMember(_int(t, "pending session timeout"))
                 for m, t in _obj(d.get("pending"), "pending").items()},
        pending_sync=frozenset(_str(m, "pending_sync") for m in
                               _list(d.get("pending_sync"), "pending_sync")),
        initial_rebalance=_bool(d.get("initial_rebalance"), "initial_rebalance"),
        new_member_added=_bool(d.get("new_member_added"), "new_member_added"),
        initial_delay_ms=_int(d.get("initial_delay_ms"), "initial_delay_ms"),
        initial_remaining_ms=_int(d.get("initial_remaining_ms"), "initial_remaining_ms"),
        leader_sync=leader_sync,
        offsets=offsets,
    )


def from_snapshot(data: Mapping[str, object]) -> CoordinatorState:
    """The state a snapshot describes, with no held-back request and no timer armed."""
    if data.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(f"snapshot version {data.get('version')!r}, "
                            f"this broker reads {SNAPSHOT_VERSION}")
    c = _obj(data.get("config"), "config")
    config = Config(
        min_session_timeout_ms=_int(c.get("min_session_timeout_ms"), "min_session_timeout_ms"),
        max_session_timeout_ms=_int(c.get("max_session_timeout_ms"), "max_session_timeout_ms"),
        initial_rebalance_delay_ms=_int(c.get("initial_rebalance_delay_ms"),
                                        "initial_rebalance_delay_ms"),
        new_member_join_timeout_ms=_int(c.get("new_member_join_timeout_ms"),
                                        "new_member_join_timeout_ms"),
        group_max_size=_int(c.get("group_max_size"), "group_max_size"),
        offset_metadata_max_bytes=_int(c.get("offset_metadata_max_bytes"),
                                       "offset_metadata_max_bytes"),
    )
    groups = [_group(g) for g in _list(data.get("groups"), "groups")]
    return CoordinatorState(config=config, groups={g.group_id: g for g in groups})
