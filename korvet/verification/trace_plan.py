"""A broker's coordinator event log, cut into one trace per group for `korvet spec validate`.

The log (``korvet serve --groups-event-log LOG``) has three kinds of lines: a start
(``load``: what the coordinator loaded, and its snapshot), a step (the event, the
machine's effects, ``persisted``: true, false, or null when there was nothing to write,
and the replies ``sent``) and a stop (``clean`` when the clean-stop mark was left). The
spec (spec/GroupCoordinatorDurable.tla) models one group, so each group gets its own
list of entries: every start and stop, and the steps that concern it.

A pass of the Python machine over the log (korvet/verification/replay.py's ``boundary``, the
adapter's own rules) decides what TLC cannot read from the log alone:

- which fresh member id each JoinGroup used (the spec's ``FreshId``, in order of issue);
- whether a step outside the spec changed anything the spec sees. A step the spec has
  no action for (OffsetDelete, TopicDeleted, an INVALID_GROUP_ID answer to an empty
  group id, an empty OffsetCommit, a protocol type other than "consumer"), a timer that
  found nothing to do, and the Restart step that follows every load, become
  ``stutter`` entries when the group's abstract state did not change; when it did, the
  entry is ``uncovered``: the trace is cut there, and the next segment starts from the
  state the machine reached (reported, never silent);
- whether a load lost writes the adapter believed durable (Redis crashed), which lets
  TLC place Redis' restart and fsyncs anywhere in the run before it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from korvet.core import coordinator as core
from korvet.core.coordinator import durability
from korvet.core.coordinator.eventlog import effect_from_json, event_from_json
from korvet.core.coordinator.machine import raise_generation
from korvet.verification.abstraction import (
    OutsideSpec,
    PlainNames,
    Requests,
    effect_records,
    group_record,
    requests_of,
)
from korvet.verification.replay import boundary

# Python-only steps, by why the spec does not see them (reported per group).
RESTART = "the Restart step after a load (part of BrokerRestart)"
TIMER_IDLE = "a timer that found nothing to do"
UNMARKED_STOP = "a stop without the clean-stop mark (the next load is a crash restart)"
OUTSIDE = "a request the spec does not model"

_TIMERS = (core.SessionTimeout, core.PendingMemberTimeout, core.RebalanceTimeout,
           core.PendingSyncTimeout, core.GroupDataDeleted)
_INVALID_GROUP_ID = (core.JoinGroup, core.SyncGroup, core.Heartbeat, core.LeaveGroup)


class LogError(ValueError):
    """The log cannot be read as a coordinator event log."""


@dataclass(frozen=True)
class Start:
    """Where a segment starts: the group, its durable copy, and what was issued before."""

    group: core.Group | None
    durable: core.Group | None
    floor: int
    config: core.Config

    @property
    def known_ids(self) -> list[str]:
        found: set[str] = set()
        for g in (self.group, self.durable):
            if g is not None:
                found |= set(g.members) | set(g.pending)
        return sorted(found)


@dataclass(frozen=True)
class LoadInfo:
    group: core.Group | None  # the group as loaded (after a raise)
    floor: int
    lossy: bool
    fsync_always: bool
    redis: str  # "same", "restarted" or "unknown": did Redis restart since the last load
    loss: bool  # the load lacks writes the adapter believed durable


@dataclass(frozen=True)
class StepInfo:
    event: core.Event
    effects: tuple[core.Effect, ...]  # as logged
    sent: tuple[core.Effect, ...]  # the replies, as logged
    persisted: bool | None
    fresh: str | None  # the fresh member id this step handed out
    config: core.Config
    requests: Requests  # what each request id of its replies is (abstraction.requests_of)


@dataclass
class Entry:
    line: int
    kind: str  # step | load | stop | stutter | uncovered
    what: str  # the event's name, "load", "stop", or the reason of a stutter
    step: StepInfo | None = None
    load: LoadInfo | None = None
    after: Start | None = None  # uncovered: where the next segment starts
    env: str = "none"  # unlogged Redis steps allowed before it: none | redis | run


@dataclass
class Segment:
    start: Start
    start_line: int
    entries: list[Entry]


@dataclass
class GroupPlan:
    group_id: str
    start: Start
    start_line: int
    entries: list[Entry] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)  # fresh ids, in order of issue

    def segments(self) -> list[Segment]:
        found = [Segment(self.start, self.start_line, [])]
        for entry in self.entries:
            if entry.kind == "uncovered":
                assert entry.after is not None
                found.append(Segment(entry.after, entry.line, []))
            else:
                found[-1].entries.append(entry)
        return found

    @property
    def uncovered(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "uncovered"]

    @property
    def stutters(self) -> Counter[str]:
        return Counter(e.what for e in self.entries if e.kind == "stutter")


@dataclass
class LogPlan:
    lines: int
    runs: int
    groups: dict[str, GroupPlan]
    fsync_always: set[bool]


class _RawNames(PlainNames):
    """Injective names for comparing abstract states (bytes as hex)."""

    def metadata(self, data: bytes) -> str:
        return data.hex()

    def assignment(self, data: bytes) -> str:
        return data.hex()

    def partition(self, tp: core.TopicPartition) -> str:
        return f"{tp.topic}\x00{tp.partition}"


_RAW = _RawNames()
_PARTITIONS: tuple[str, ...] = ()


def _same(a: core.Group | None, b: core.Group | None) -> bool:
    """The two groups are one state of the spec."""
    try:
        return group_record(a, _RAW, _PARTITIONS) == group_record(b, _RAW, _PARTITIONS)
    except OutsideSpec:
        return False


def _event_groups(event: core.Event, state: core.CoordinatorState, known: dict[str, Any]
                  ) -> list[str]:
    match event:
        case core.DeleteGroups():
            return list(dict.fromkeys(event.group_ids))
        case core.TopicDeleted():
            return sorted(state.groups)
        case core.Restart():
            return sorted(known)
        case _:
            return [getattr(event, "group_id")]  # noqa: B009 -- every other event names one group


def _outside_spec(event: core.Event) -> str | None:
    """Why an event is outside the spec, or None."""
    match event:
        case core.OffsetDelete() | core.TopicDeleted():
            return f"{OUTSIDE}: {type(event).__name__}"
        case core.OffsetCommit() if event.transactional:
            return f"{OUTSIDE}: a committed transaction's offsets (spec/Transactions.tla)"
        case core.JoinGroup() | core.SyncGroup() | core.Heartbeat() | core.LeaveGroup() \
                if not event.group_id:
            return f"{OUTSIDE}: INVALID_GROUP_ID for an empty group id"
        case core.JoinGroup() if event.protocol_type != "consumer":
            return f"{OUTSIDE}: protocol type {event.protocol_type!r}"
        case core.SyncGroup() if event.protocol_type not in (None, "consumer"):
            return f"{OUTSIDE}: protocol type {event.protocol_type!r}"
        case core.OffsetCommit() if not event.offsets:
            return f"{OUTSIDE}: an OffsetCommit of no partition"
    return None


class _Pass:
    """One walk over the log with the Python machine (state, durable copy) beside it."""

    def __init__(self) -> None:
        self.state: core.CoordinatorState | None = None
        self.durable: dict[str, core.Group] = {}
        self.groups: dict[str, GroupPlan] = {}
        self.common: list[Entry] = []  # starts, stops and Restart steps so far (for new groups)
        self.first: Start | None = None
        self.first_line = 0
        self.run_id: str | None = None
        self.runs = 0
        self.fsync: set[bool] = set()

    # --- starts and stops ---------------------------------------------------------------

    def load(self, number: int, entry: dict[str, Any]) -> None:
        info = entry.get("load") or {}
        try:
            loaded = core.from_snapshot(entry["snapshot"])
        except (core.SnapshotError, TypeError) as exc:
            raise LogError(f"line {number}: unreadable snapshot: {exc}") from None
        run_id = info.get("redis_run_id")
        redis = "unknown" if run_id is None or self.run_id is None else (
            "same" if run_id == self.run_id else "restarted")
        self.run_id = run_id
        self.runs += 1
        floor = int(info.get("floor", loaded.generation_floor))
        lossy = bool(info.get("lossy", False))
        fsync = bool(info.get("fsync_always", False))
        self.fsync.add(fsync)
        if self.state is None:
            self.first = Start(None, None, floor, loaded.config)
            self.first_line = number
            for group_id, group in loaded.groups.items():
                self.groups[group_id] = GroupPlan(
                    group_id, Start(group, group, floor, loaded.config), number)
        else:
            for group_id in self.groups.keys() | loaded.groups.keys():
                plan = self._plan(group_id, number, loaded)
                if plan.start_line == number:
                    continue  # a group Redis held that the log never showed: it starts here
                was = self._expected_load(self.durable.get(group_id), lossy, floor, loaded)
                got = loaded.groups.get(group_id)
                plan.entries.append(Entry(number, "load", "load", load=LoadInfo(
                    got, floor, lossy, fsync, redis, loss=not _same(was, got))))
            self.common.append(Entry(number, "load", "load", load=LoadInfo(
                None, floor, lossy, fsync, redis, loss=False)))
        self.state = loaded
        self.durable = {g: durability.snapshot_of(group) for g, group in loaded.groups.items()}

    @staticmethod
    def _expected_load(durable: core.Group | None, lossy: bool, floor: int,
                       loaded: core.CoordinatorState) -> core.Group | None:
        if durable is None or not lossy:
            return durable
        return durability.snapshot_of(raise_generation(durable, floor, loaded.config, 0))

    def stop(self, number: int, entry: dict[str, Any]) -> None:
        if entry.get("stop") == "clean":
            made = Entry(number, "stop", "stop")
        else:
            made = Entry(number, "stutter", UNMARKED_STOP)
        self.common.append(made)
        for plan in self.groups.values():
            plan.entries.append(replace(made))

    def _plan(self, group_id: str, number: int, loaded: core.CoordinatorState | None = None
              ) -> GroupPlan:
        plan = self.groups.get(group_id)
        if plan is not None:
            return plan
        if loaded is not None and group_id in loaded.groups:
            group = loaded.groups[group_id]
            plan = GroupPlan(group_id, Start(group, group, loaded.generation_floor,
                                             loaded.config), number)
        else:
            assert self.first is not None
            plan = GroupPlan(group_id, self.first, self.first_line,
                             [replace(e) for e in self.common])
        self.groups[group_id] = plan
        return plan

    # --- steps ----------------------------------------------------------------------------

    def step(self, number: int, entry: dict[str, Any]) -> None:
        if self.state is None:
            raise LogError(f"line {number}: a step before any start of the broker")
        try:
            event = event_from_json(entry["event"])
            effects = tuple(effect_from_json(e) for e in entry.get("effects", []))
            sent = tuple(effect_from_json(e) for e in entry.get("sent", []))
        except (KeyError, ValueError) as exc:
            raise LogError(f"line {number}: {exc}") from None
        persisted = entry.get("persisted")
        before = self.state
        now = int(entry.get("t", 0))
        machine, machine_effects = core.step(before, event, now)
        after, _ = boundary(before, machine, machine_effects, self.durable, persisted, now)
        self.state = after
        if isinstance(event, core.Restart):
            self.common.append(Entry(number, "stutter", RESTART))
        for group_id in _event_groups(event, before, self.groups):
            plan = self._plan(group_id, number)
            fresh = self._fresh(event, machine, group_id)
            info = StepInfo(event, effects, sent, persisted, fresh, before.config,
                            requests_of(before.groups.get(group_id), event, fresh))
            if info.fresh is not None:
                plan.issued.append(info.fresh)
            plan.entries.append(self._classify(number, info, group_id, before, after))

    @staticmethod
    def _fresh(event: core.Event, machine: core.CoordinatorState, group_id: str) -> str | None:
        if not isinstance(event, core.JoinGroup) or event.member_id or not event.new_member_id:
            return None
        group = machine.groups.get(group_id)
        if group is not None and (event.new_member_id in group.members or
                                  event.new_member_id in group.pending):
            return event.new_member_id
        return None

    def _classify(self, number: int, info: StepInfo, group_id: str,
                  before: core.CoordinatorState, after: core.CoordinatorState) -> Entry:
        was, now = before.groups.get(group_id), after.groups.get(group_id)
        unchanged = _same(was, now)
        event = info.event
        reason = RESTART if isinstance(event, core.Restart) else _outside_spec(event)
        if reason is None:
            try:
                effect_records(info.effects, _RAW, group_id)
                effect_records(info.sent, _RAW, group_id)
            except OutsideSpec as exc:
                reason = f"{OUTSIDE}: {exc}"
        if reason is None and isinstance(event, core.DeleteGroups) and len(
                set(event.group_ids)) > 1 and info.persisted is False and unchanged:
            reason = "a DeleteGroups of several groups whose write failed for another group"
        if reason is None:
            if isinstance(event, _TIMERS) and unchanged and not info.effects:
                return Entry(number, "stutter", TIMER_IDLE, step=info)
            return Entry(number, "step", type(event).__name__, step=info)
        if unchanged:  # (its own replies are outside the spec too)
            return Entry(number, "stutter", reason, step=info)
        return Entry(number, "uncovered", reason, step=info, after=Start(
            now, self.durable.get(group_id), after.generation_floor, after.config))


def _mark_environment(plan: GroupPlan) -> None:
    """Where TLC may insert Redis' unlogged restart and fsyncs (Entry.env)."""
    previous_load = -1
    last_step = -1
    for index, entry in enumerate(plan.entries):
        if entry.kind == "step":
            last_step = index
        if entry.kind == "uncovered":
            previous_load = last_step = index
        if entry.kind != "load":
            continue
        assert entry.load is not None
        if entry.load.redis != "same":
            first = previous_load + 1 if entry.load.loss else last_step + 1
            for other in plan.entries[first:index + 1]:
                other.env = "run" if entry.load.loss else "redis"
        previous_load = last_step = index


def plan_log(lines: list[str]) -> LogPlan:
    """Read a log and cut it into one plan per group."""
    walk = _Pass()
    count = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        count += 1
        try:
            entry: dict[str, Any] = json.loads(line)
        except ValueError:
            raise LogError(f"line {number}: not JSON (a write cut short?)") from None
        if "snapshot" in entry:
            walk.load(number, entry)
        elif "stop" in entry:
            walk.stop(number, entry)
        elif "event" in entry:
            walk.step(number, entry)
        else:
            raise LogError(f"line {number}: neither a start, a step nor a stop")
    if walk.state is None:
        raise LogError("the log records no start of the broker")
    for plan in walk.groups.values():
        _mark_environment(plan)
    return LogPlan(count, walk.runs, walk.groups, walk.fsync)
