"""The coordinator at its I/O boundary, as pure functions: spec/GroupCoordinatorDurable.tla.

A machine step (``step``) decides; ``ready`` says what that step needs written to
Redis before its replies may leave (raft's ``Ready``); the adapter
(korvet/server/coordinator.py) writes it, then either releases the replies or, when
the write failed, calls ``restore``: the touched groups go back to their last durable
snapshot and everyone waiting is told to retry (``unavailable``). At a load,
``load_plan`` says whether Redis may have lost writes since the last load, and
``raise_generations`` moves every group to a new band of generations if so.

Spec names: ``ready``/``Persist``, ``restore``/``PersistFails``, ``unavailable``/
``Unavailable``, ``parked_replies``/``Parked``, ``snapshot_of``/``Snapshot``,
``load_plan`` and ``raise_generations``/``BrokerRestart`` and ``Raise``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from korvet.core.codec import without_transients
from korvet.core.coordinator.effects import (
    DeleteGroupData,
    DeleteGroupsReply,
    DeleteOffsets,
    Effect,
    GroupResult,
    HeartbeatReply,
    JoinGroupReply,
    LeaveGroupReply,
    OffsetCommitReply,
    OffsetDeleteReply,
    PartitionResult,
    PersistOffsets,
    Reply,
    SyncGroupReply,
)
from korvet.core.coordinator.errors import ErrorCode
from korvet.core.coordinator.machine import raise_generation, restarted_group
from korvet.core.coordinator.state import CoordinatorState, Group

# Generations one band holds (the spec's Stride): a group may complete this many
# rebalances between two loads that follow a Redis restart.
BAND = 1 << 20
# Bands that fit the protocol's int32 generations (band b holds b * BAND .. (b + 1) * BAND - 1);
# the 2,048th raise starts again at band 1 (docs/spec/group-coordinator.md, "Bands wrap").
MAX_BAND = (2**31 - 1) // BAND
RETRY = ErrorCode.COORDINATOR_NOT_AVAILABLE


def snapshot_of(group: Group) -> Group:
    """What Redis keeps of a group: everything but held-back requests and deadlines."""
    return without_transients(group)


@dataclass(frozen=True, slots=True)
class Ready:
    """One step's work for the adapter, in the order it must be done."""

    state: CoordinatorState  # the machine's state after the step
    snapshots: Mapping[str, Group | None]  # group -> its new durable form (None: gone)
    offsets: tuple[PersistOffsets, ...]
    offset_deletes: tuple[DeleteOffsets, ...]
    replies: tuple[Reply, ...]  # released only once the writes above are durable
    cleanups: tuple[DeleteGroupData, ...]  # ordered by a durable step

    @property
    def writes(self) -> bool:
        return bool(self.snapshots or self.offsets or self.offset_deletes)

    @property
    def touched(self) -> frozenset[str]:
        """The groups whose durable form this step changes."""
        return frozenset(self.snapshots) | {e.group_id for e in self.offsets} | {
            e.group_id for e in self.offset_deletes}


def ready(before: CoordinatorState, after: CoordinatorState, effects: Iterable[Effect],
          durable: Mapping[str, Group]) -> Ready:
    """Sort a step's effects and find the groups whose snapshot changed (``durable`` holds
    the adapter's last written snapshot of each group)."""
    snapshots: dict[str, Group | None] = {}
    for group_id in before.groups.keys() | after.groups.keys():
        group = after.groups.get(group_id)
        if (group is before.groups.get(group_id) and group_id in durable) or (
                group is None and group_id not in durable):
            continue
        if group is None:
            snapshots[group_id] = None
            continue
        snap = snapshot_of(group)
        if durable.get(group_id) != snap:
            snapshots[group_id] = snap
    offsets: list[PersistOffsets] = []
    deletes: list[DeleteOffsets] = []
    replies: list[Reply] = []
    cleanups: list[DeleteGroupData] = []
    for effect in effects:
        if isinstance(effect, PersistOffsets):
            offsets.append(effect)
        elif isinstance(effect, DeleteOffsets):
            deletes.append(effect)
        elif isinstance(effect, DeleteGroupData):
            cleanups.append(effect)
        else:
            replies.append(effect)
    return Ready(after, snapshots, tuple(offsets), tuple(deletes), tuple(replies),
                 tuple(cleanups))


def unavailable(reply: Reply) -> Reply:
    """The answer a reply becomes when the state it reveals could not be written: the
    same request, COORDINATOR_NOT_AVAILABLE, which Kafka's clients retry."""
    match reply:
        case JoinGroupReply():
            return JoinGroupReply(reply.request_id, RETRY, reply.member_id)
        case SyncGroupReply():
            return SyncGroupReply(reply.request_id, reply.member_id, RETRY)
        case HeartbeatReply():
            return HeartbeatReply(reply.request_id, reply.member_id, RETRY)
        case LeaveGroupReply():
            return LeaveGroupReply(reply.request_id, RETRY, ())
        case OffsetCommitReply():
            return OffsetCommitReply(reply.request_id, reply.member_id, tuple(
                PartitionResult(p.topic, p.partition, RETRY) for p in reply.partitions))
        case OffsetDeleteReply():
            return OffsetDeleteReply(reply.request_id, RETRY, ())
        case DeleteGroupsReply():
            return DeleteGroupsReply(reply.request_id, tuple(
                GroupResult(r.group_id, RETRY) for r in reply.results))
    raise TypeError(f"not a reply: {reply!r}")


def parked_replies(group: Group) -> tuple[Reply, ...]:
    """Retriable answers for every request the group holds back (the spec's Parked)."""
    found: list[Reply] = []
    for member_id, member in group.members.items():
        if member.join_request is not None:
            found.append(JoinGroupReply(member.join_request, RETRY, member_id))
        if member.sync_request is not None:
            found.append(SyncGroupReply(member.sync_request, member_id, RETRY))
    return tuple(found)


def restore(state: CoordinatorState, group_ids: Iterable[str], durable: Mapping[str, Group],
            now: int) -> tuple[CoordinatorState, tuple[Reply, ...]]:
    """The write of a step failed: each touched group goes back to its last durable
    snapshot (timers armed again, as after a restart) and every request it held back is
    answered with a retriable error."""
    groups = dict(state.groups)
    answers: list[Reply] = []
    for group_id in sorted(group_ids):
        current = groups.get(group_id)
        if current is not None:
            answers.extend(parked_replies(current))
        saved = durable.get(group_id)
        if saved is None:
            groups.pop(group_id, None)
        else:
            groups[group_id] = restarted_group(saved, state.config, now)
    return replace(state, groups=groups), tuple(answers)


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """What the coordinator keeps durably about its loads ({ks}:coordinator in Redis)."""

    bands: int = 0  # loads that raised generations
    floor: int = 0  # the generation new groups start from
    redis_run_id: str = ""  # the Redis process the coordinator last loaded from
    clean: bool = False  # the last coordinator stopped cleanly after its last write


@dataclass(frozen=True, slots=True)
class LoadPlan:
    lossy: bool  # Redis may have lost writes that replies revealed
    record: CoordinatorRecord  # to write (durably) before serving


def load_plan(record: CoordinatorRecord | None, redis_run_id: str, fsync_always: bool,
              has_groups: bool) -> LoadPlan:
    """Whether this load must raise generations: Redis restarted since the last load
    (a different run id), its append-only file was not fsynced on every write, and the
    previous coordinator did not leave its clean-stop mark after its last write (the
    file is a log: a surviving mark proves every earlier write survived). With no record
    at all, only a Redis without groups is a safe start."""
    if record is None:
        record = CoordinatorRecord()
        lossy = has_groups and not fsync_always
    else:
        lossy = record.redis_run_id != redis_run_id and not fsync_always and not record.clean
    # A record past the last band (left by a version without the wrap) holds generations no
    # answer can encode: raise them into band 1 as after a loss.
    lossy = lossy or record.bands > MAX_BAND
    if lossy:
        bands = record.bands + 1 if record.bands < MAX_BAND else 1
        return LoadPlan(True, CoordinatorRecord(bands, bands * BAND, redis_run_id, False))
    return LoadPlan(False, replace(record, redis_run_id=redis_run_id, clean=False))


def raise_generations(state: CoordinatorState, floor: int, now: int) -> CoordinatorState:
    """Every group moves to generation ``floor`` (the band's first); new groups start there."""
    groups = {g: raise_generation(group, floor, state.config, now)
              for g, group in state.groups.items()}
    return replace(state, groups=groups, generation_floor=floor)
