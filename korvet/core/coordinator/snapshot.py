"""The coordinator's state as JSON, to survive a broker restart.

What survives: every field of every ``Group`` and ``Member`` except the transient
ones (``korvet.core.codec.transient``): held-back JoinGroup/SyncGroup requests (their
connections die with the broker) and deadlines (they belong to the old process's
clock). After ``from_snapshot`` the adapter steps ``Restart()`` once, which re-arms
every timer from the new clock (see the spec's Restart).

The fields are the dataclasses' own (korvet/core/coordinator/state.py), written and
read by the one codec (korvet/core/codec.py); this module only adds the envelope.

The adapter must store a group's snapshot before it sends the replies of a step that
changed the group (a new generation above all): a restart from an older snapshot
would hand out a generation number twice (docs/spec/group-coordinator.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from korvet.core.codec import CodecError, decode, encode
from korvet.core.coordinator.state import Config, CoordinatorState, Group

# 2: the generic codec's layout (1 was a hand-written one; its snapshots are not read).
SNAPSHOT_VERSION = 2

JsonObject = dict[str, Any]


class SnapshotError(ValueError):
    """A snapshot this version cannot read."""


def group_snapshot(group: Group) -> JsonObject:
    """One group's durable part."""
    encoded: JsonObject = encode(group, transient=False)
    return encoded


def read_group(data: object) -> Group:
    try:
        return decode(Group, data, "group")
    except CodecError as exc:
        raise SnapshotError(str(exc)) from None


def to_snapshot(state: CoordinatorState) -> JsonObject:
    """A JSON-serialisable dict of everything that survives a restart."""
    return {
        "version": SNAPSHOT_VERSION,
        "config": encode(state.config),
        "groups": [group_snapshot(g) for _, g in sorted(state.groups.items())],
        "generation_floor": state.generation_floor,
    }


def from_snapshot(data: Mapping[str, object]) -> CoordinatorState:
    """The state a snapshot describes, with no held-back request and no timer armed."""
    if data.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(f"snapshot version {data.get('version')!r}, "
                            f"this broker reads {SNAPSHOT_VERSION}")
    try:
        config = decode(Config, data.get("config"), "config")
    except CodecError as exc:
        raise SnapshotError(str(exc)) from None
    groups_data = data.get("groups")
    if not isinstance(groups_data, list):
        raise SnapshotError("groups: expected a list")
    groups = [read_group(g) for g in groups_data]
    floor = data.get("generation_floor", 0)
    if isinstance(floor, bool) or not isinstance(floor, int):
        raise SnapshotError("generation_floor: expected an integer")
    return CoordinatorState(config=config, groups={g.group_id: g for g in groups},
                            generation_floor=floor)
