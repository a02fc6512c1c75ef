"""`korvet spec validate LOG`: ask TLC whether a broker's coordinator event log is a
behaviour of the spec (spec/GroupCoordinatorDurable.tla).

The broker (``korvet serve --groups-event-log LOG``) records every start, every step of
the group coordinator (the event, the machine's effects, whether its write was taken,
the replies actually sent) and every stop. For each group in the log, this command
writes a TLA+ module that extends spec/GroupCoordinatorTrace.tla and carries the group's
lines as a sequence literal (member ids renamed in order of issue; assignments,
metadata, partitions and offsets renamed to labels; generations as they are), and has
TLC (breadth first, one worker) search for a behaviour of the spec that takes the
logged steps with the logged parameters and produces the logged effects and replies.
Starts are BrokerRestart (the loaded group must be the spec's), clean stops CleanStop.

Lines the spec has no action for are reported, never dropped silently: a timer that
found nothing to do, the Restart step after each start, and requests outside the spec
(OffsetDelete, a topic deleted, an empty group id) are stutter steps when they changed
nothing the spec sees; when they did, the group's trace is cut there and validated
again from the state the machine reached (spec/README.md, docs/spec/group-coordinator.md
§ Trace validation).

It exits 0 when every group's log is a behaviour of the spec, 1 when one is not (printing
the first line no behaviour matches, what the broker did and what the spec allows), 2
when the log cannot be read or TLC cannot run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from korvet.core import coordinator as core
from korvet.core.coordinator.durability import BAND
from korvet.verification import tlc
from korvet.verification.abstraction import (
    NO_ID,
    Names,
    OutsideSpec,
    effect_sequence,
    group_record,
    protocols,
)
from korvet.verification.trace_plan import Entry, GroupPlan, LogError, LogPlan, Segment, plan_log
from korvet.verification.values import Function, Record, TlaValue, format_value, parse_value

MODULE = "GroupCoordinatorTrace"  # spec/GroupCoordinatorTrace.tla, checked by TLC
DATA_MODULE = "GroupCoordinatorTraceData"  # generated: the log and the constants' values
SPEC_MODULES = ("GroupCoordinator.tla", "GroupCoordinatorDurable.tla", "GroupCoordinatorTrace.tla")
INVARIANTS = ("DurableTypeOK", "LeaderIsMember", "InstanceIdUnique", "StableAssignmentFromLeader",
              "ParkedOnlyWhileRebalancing", "MembershipConsistent", "ProtocolAgreed",
              "MemberIdsFresh", "GenerationUnique", "RepliesAfterPersist")
# What `appendfsync always` guarantees on top (with everysec TLC refutes them: the
# GroupCoordinatorDurable-Everysec-* models).
FSYNC_INVARIANTS = ("RevealedSurvives", "NoRollback")
PROPERTIES = ("CommitsAccepted", "SyncRepliesFromLeader", "DurableGenerationIncreases")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


# --- names: concrete values -> the spec's -------------------------------------------------

class _Collector:
    """A first rendering pass: records every value, in order of appearance."""

    def __init__(self) -> None:
        self.members: dict[str, None] = {}
        self.instances: dict[str, None] = {}
        self.protocol_names: set[str] = set()
        self.metadata_seen: dict[bytes, None] = {}
        self.assignments: dict[bytes, None] = {}
        self.partitions: set[core.TopicPartition] = set()
        self.offsets: set[int] = set()

    def member(self, member_id: str) -> str:
        self.members.setdefault(member_id)
        return member_id

    def instance(self, instance: str | None) -> str:
        if instance is None:
            return NO_ID
        self.instances.setdefault(instance)
        return instance

    def protocol_name(self, name: str | None) -> str:
        if name is None:
            return NO_ID
        self.protocol_names.add(name)
        return name

    def metadata(self, data: bytes) -> str:
        self.metadata_seen.setdefault(data)
        return data.hex()

    def assignment(self, data: bytes) -> str:
        if data:
            self.assignments.setdefault(data)
        return data.hex()

    def partition(self, tp: core.TopicPartition) -> str:
        self.partitions.add(tp)
        return f"{tp.topic}/{tp.partition}"

    def offset(self, offset: int) -> int:
        self.offsets.add(offset)
        return offset


class LogNames:
    """The labels of one group's trace: member ids ``m1``... in order of issue (ids the log
    never saw handed out: ``x1``...), instances ``i1``..., metadata ``d1``..., assignments
    ``a1``... (the empty assignment stays ""), partitions ``p1``... in (topic, partition)
    order, offsets 0, 1, ... in numeric order; protocol names stay as they are (or ``n1``...
    when not plain ASCII)."""

    def __init__(self, issued: Iterable[str], seen: _Collector) -> None:
        self.labels: dict[str, str] = {}
        for member_id in issued:
            self.labels.setdefault(member_id, f"m{len(self.labels) + 1}")
        self.issued_count = len(self.labels)
        self.spare = f"m{self.issued_count + 1}"
        foreign = [m for m in seen.members if m not in self.labels]
        for index, member_id in enumerate(foreign, start=1):
            self.labels[member_id] = f"x{index}"
        self.instance_labels = {i: f"i{n}" for n, i in enumerate(seen.instances, start=1)}
        names = sorted(seen.protocol_names)
        self.name_labels = {n: n if _SAFE_NAME.fullmatch(n) else f"n{k}"
                            for k, n in enumerate(names, start=1)}
        self.sorted_names = names
        self.metadata_labels = {d: f"d{n}" for n, d in enumerate(seen.metadata_seen, start=1)}
        self.assignment_labels = {a: f"a{n}" for n, a in enumerate(seen.assignments, start=1)}
        self.partition_labels = {tp: f"p{n}" for n, tp in enumerate(sorted(seen.partitions),
                                                                    start=1)}
        self.offset_labels = {o: n for n, o in enumerate(sorted(seen.offsets))}

    def member(self, member_id: str) -> str:
        return self.labels[member_id]

    def instance(self, instance: str | None) -> str:
        return NO_ID if instance is None else self.instance_labels[instance]

    def protocol_name(self, name: str | None) -> str:
        return NO_ID if name is None else self.name_labels[name]

    def metadata(self, data: bytes) -> str:
        return self.metadata_labels[data]

    def assignment(self, data: bytes) -> str:
        return self.assignment_labels[data] if data else NO_ID

    def partition(self, tp: core.TopicPartition) -> str:
        return self.partition_labels[tp]

    def offset(self, offset: int) -> int:
        return self.offset_labels[offset]

    def rank(self) -> Function:
        """Rank: the order of member ids (Python compares the strings)."""
        ordered = sorted(self.labels, key=lambda m: m)
        ranks: dict[object, object] = {self.labels[m]: k for k, m in enumerate(ordered, start=1)}
        ranks[self.spare] = len(ordered) + 1
        return Function(ranks)

    def legend(self) -> dict[str, str]:
        """label -> concrete value, for messages."""
        found = {label: member for member, label in self.labels.items()}
        found.update({label: i for i, label in self.instance_labels.items()})
        found.update({label: f"{len(a)} bytes" for a, label in self.assignment_labels.items()})
        found.update({label: f"{tp.topic}[{tp.partition}]"
                      for tp, label in self.partition_labels.items()})
        return found


# --- entries -> TLA+ values --------------------------------------------------------------

def _mid(member_id: str, names: Names) -> str:
    return names.member(member_id) if member_id else NO_ID


def _join_params(event: core.JoinGroup, config: core.Config, names: Names) -> dict[str, object]:
    mid = _mid(event.member_id, names)
    inst = names.instance(event.group_instance_id)
    new = mid == NO_ID
    # The spec's JoinVariants: the version matters only for a new member.
    return {"mid": mid, "inst": inst, "protos": protocols(event.protocols, names),
            "sessionOk": config.min_session_timeout_ms <= event.session_timeout_ms
            <= config.max_session_timeout_ms,
            "requireKnown": event.requires_known_member_id if new and inst == NO_ID else True,
            "skipOk": event.supports_skip_assignment if new and inst != NO_ID else False}


def action_params(event: core.Event, config: core.Config, names: Names) -> dict[str, object]:
    """The spec action's parameters for a logged event (docs: § Trace validation)."""
    match event:
        case core.JoinGroup():
            return _join_params(event, config, names)
        case core.SyncGroup():
            assignments: dict[object, object] = {
                _mid(a.member_id, names): names.assignment(a.assignment) for a in event.assignments}
            return {"mid": _mid(event.member_id, names),
                    "inst": names.instance(event.group_instance_id), "gen": event.generation_id,
                    "asg": Function(assignments), "pname": names.protocol_name(event.protocol_name)}
        case core.Heartbeat():
            return {"mid": _mid(event.member_id, names),
                    "inst": names.instance(event.group_instance_id), "gen": event.generation_id}
        case core.LeaveGroup():
            return {"batch": tuple((_mid(m.member_id, names), names.instance(m.group_instance_id))
                                   for m in event.members)}
        case core.OffsetCommit():
            offsets: dict[object, object] = {
                names.partition(core.TopicPartition(o.topic, o.partition)): names.offset(o.offset)
                for o in event.offsets}
            return {"mid": _mid(event.member_id, names),
                    "inst": names.instance(event.group_instance_id), "gen": event.generation_id,
                    "offs": Function(offsets), "v9": event.unknown_group_is_not_found}
        case core.SessionTimeout() | core.PendingMemberTimeout():
            return {"mid": _mid(event.member_id, names)}
    return {}


_PERSISTED = {True: "ok", False: "failed", None: "none"}


def render_entry(entry: Entry, group_id: str, names: Names, partitions: tuple[str, ...]) -> Record:
    fields: dict[object, object] = {"kind": entry.kind, "line": entry.line, "env": entry.env}
    if entry.kind == "step":
        step = entry.step
        assert step is not None
        fields.update({"act": entry.what, **action_params(step.event, step.config, names),
                       "out": effect_sequence(step.effects, names, group_id, step.requests),
                       "persisted": _PERSISTED[step.persisted],
                       "sent": effect_sequence(step.sent, names, group_id, step.requests)})
    elif entry.kind == "load":
        load = entry.load
        assert load is not None
        fields.update({"grp": group_record(load.group, names, partitions), "floor": load.floor,
                       "lossy": load.lossy, "redis": load.redis})
    return Record(fields)


# --- one TLC run per segment -------------------------------------------------------------

@dataclass
class SegmentCheck:
    """A segment of one group's trace: what it holds and what TLC said."""

    first_line: int
    last_line: int
    entries: int
    kinds: dict[str, int]
    accepted: bool = False
    problem: str = ""
    failed_line: int | None = None  # the first log line no behaviour of the spec matches
    distinct: int = 0
    depth: int = 0
    seconds: float = 0.0


@dataclass
class GroupCheck:
    group_id: str
    segments: list[SegmentCheck] = field(default_factory=list)
    stutters: dict[str, int] = field(default_factory=dict)
    uncovered: list[tuple[int, str]] = field(default_factory=list)
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and all(s.accepted for s in self.segments)

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.segments)

    @property
    def failed_lines(self) -> list[int]:
        return [s.failed_line for s in self.segments if s.failed_line is not None]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.segments)


@dataclass
class Validation:
    lines: int
    runs: int
    groups: list[GroupCheck]

    @property
    def ok(self) -> bool:
        return all(g.ok for g in self.groups)


@dataclass(frozen=True)
class TraceModel:
    """The generated module and config for one segment."""

    module: str
    config: str
    entries: int
    names: LogNames


def _render_texts(plan: GroupPlan, segment: Segment, names: Names, partitions: tuple[str, ...],
                  upto: int | None = None) -> dict[str, str]:
    """TLA+ text of the log and the segment's start."""
    log = [render_entry(e, plan.group_id, names, partitions) for e in segment.entries[:upto]]
    init = group_record(segment.start.group, names, partitions)
    saved = group_record(segment.start.durable, names, partitions)
    return {"TraceLog": "<<\n    " + ",\n    ".join(format_value(e) for e in log) + "\n>>",
            "InitGrp": format_value(init), "InitSaved": format_value(saved)}


def _segment_issued(plan: GroupPlan, segment: Segment) -> tuple[list[str], list[str]]:
    """(ids issued before the segment, ids issued in it, in order)."""
    before = segment.start.known_ids
    during = [e.step.fresh for e in segment.entries
              if e.step is not None and e.step.fresh is not None and e.kind == "step"]
    return before, during


def _collect(plan: GroupPlan, segment: Segment) -> _Collector:
    seen = _Collector()
    _render_texts(plan, segment, seen, ())
    for member_id in segment.start.known_ids:
        seen.member(member_id)
    return seen


def build_model(plan: GroupPlan, segment: Segment, *, fsync_always: bool, max_crashes: int,
                upto: int | None = None, relaxed: int = 0) -> TraceModel:
    """The module and config of one segment (the first ``upto`` entries; ``relaxed``: the
    entry whose outputs are left free, for a diagnosis)."""
    seen = _collect(plan, segment)
    before, during = _segment_issued(plan, segment)
    order = sorted(before, key=lambda m: (plan.issued.index(m) if m in plan.issued else -1, m))
    names = LogNames([*order, *during], seen)
    partitions = tuple(sorted(names.partition_labels.values(), key=lambda p: int(p[1:])))
    texts = _render_texts(plan, segment, names, partitions, upto)
    config = segment.start.config
    member_ids = (*(names.labels[m] for m in [*order, *during]), names.spare)
    choices = frozenset(protocols(m.protocols, names) for m in _members(plan, segment)) | frozenset(
        protocols(e.step.event.protocols, names) for e in segment.entries
        if e.step is not None and isinstance(e.step.event, core.JoinGroup) and e.step.event.protocols)
    batches = [len(e.step.event.members) for e in segment.entries
               if e.step is not None and isinstance(e.step.event, core.LeaveGroup)]
    definitions = {
        "TMemberIds": format_value(member_ids),
        "TRankOf": format_value(names.rank()),
        "TInstanceIds": format_value(frozenset(names.instance_labels.values())),
        "TProtocolChoices": format_value(choices),
        "TProtocolNames": format_value(tuple(names.name_labels[n] for n in names.sorted_names)),
        "TPartitions": format_value(frozenset(partitions)),
        "TOffsets": format_value(frozenset(names.offset_labels.values())),
        "TAssignments": format_value(frozenset(names.assignment_labels.values())),
        **texts,
        "InitIssued": str(len(order)), "InitFloor": str(segment.start.floor),
        "InitBands": str(segment.start.floor // BAND), "Relaxed": str(relaxed),
    }
    module = _module_text(plan, segment, definitions)
    invariants = INVARIANTS + (FSYNC_INVARIANTS if fsync_always else ())
    cfg = _config_text(
        ints={"GroupMaxSize": config.group_max_size, "LeaveBatchMax": max([1, *batches]),
              "MaxGeneration": 0, "Stride": BAND, "MaxCrashes": max_crashes},
        bools={"FsyncEveryWrite": fsync_always, "WriteMayFail": True, "RaiseAfterLoss": True},
        invariants=invariants)
    count = len(segment.entries[:upto])
    return TraceModel(module, cfg, count, names)


def _members(plan: GroupPlan, segment: Segment) -> list[core.Member]:
    found: list[core.Member] = []
    for group in (segment.start.group, segment.start.durable):
        if group is not None:
            found.extend(group.members.values())
    for entry in segment.entries:
        if entry.load is not None and entry.load.group is not None:
            found.extend(entry.load.group.members.values())
    return found


def _module_text(plan: GroupPlan, segment: Segment, definitions: Mapping[str, str]) -> str:
    last = segment.entries[-1].line if segment.entries else segment.start_line
    lines = [f"{'-' * 20} MODULE {DATA_MODULE} {'-' * 20}",
             f"\\* Generated by `korvet spec validate` for group {plan.group_id!r}, log lines "
             f"{segment.start_line}..{last}: the log and the values of the constants of",
             "\\* GroupCoordinatorTrace (spec/GroupCoordinatorTrace.tla).",
             "EXTENDS Integers, TLC", ""]
    for name, text in definitions.items():
        lines.append(f"{name} == {text}")
    lines.append("TRank(id) == TRankOf[id]")
    lines.append("=" * 60)
    return "\n".join(lines) + "\n"


def _config_text(*, ints: Mapping[str, int], bools: Mapping[str, bool],
                 invariants: Iterable[str]) -> str:
    bound = {"MemberIds": "TMemberIds", "Rank": "TRank", "InstanceIds": "TInstanceIds",
             "ProtocolChoices": "TProtocolChoices", "ProtocolNames": "TProtocolNames",
             "Partitions": "TPartitions", "Offsets": "TOffsets", "Assignments": "TAssignments"}
    lines = ["INIT TraceInit", "NEXT TraceNext", "CONSTANTS"]
    lines += [f"    {name} <- {value}" for name, value in bound.items()]
    lines += [f"    {name} = {value}" for name, value in ints.items()]
    lines += [f"    {name} = {'TRUE' if value else 'FALSE'}" for name, value in bools.items()]
    lines += ["CONSTRAINT TraceProgress", "INVARIANTS", *(f"    {i}" for i in invariants),
              "PROPERTIES", *(f"    {p}" for p in PROPERTIES)]
    return "\n".join(lines) + "\n"


_PROGRESS = re.compile(r'<<\s*"korvet-trace",\s*(\d+)\s*>>')


def run_tlc(model: TraceModel, keep: Path | None = None) -> tlc.TlcResult:
    directory = tlc.spec_dir()
    with tempfile.TemporaryDirectory(prefix="korvet-validate-") as work_dir:
        work = Path(work_dir)
        for name in SPEC_MODULES:
            shutil.copy(directory / name, work / name)
        (work / f"{DATA_MODULE}.tla").write_text(model.module)
        (work / f"{MODULE}.cfg").write_text(model.config)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for path in work.iterdir():
                shutil.copy(path, keep / path.name)
        spec = tlc.Model(name=MODULE, module=MODULE, config=f"{MODULE}.cfg",
                         extra_args=("-deadlock",))
        # A trace check, not a model check: which actions fired says nothing here.
        return tlc.run_model(spec, work, workers="1")


def reached(result: tlc.TlcResult) -> int:
    """The furthest point TLC matched: 2 * entry (+1 when the entry's step is half done)."""
    return max((int(m.group(1)) for m in _PROGRESS.finditer(result.printed)), default=0)


def check_segment(plan: GroupPlan, segment: Segment, *, fsync_always: bool, max_crashes: int,
                  keep: Path | None = None, explain: bool = True) -> SegmentCheck:
    """Validate one segment; on a mismatch (with ``explain``) run TLC again to say what the
    spec does at the first line no behaviour matches."""
    entries = segment.entries
    kinds: dict[str, int] = {}
    for entry in entries:
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
    check = SegmentCheck(segment.start_line, entries[-1].line if entries else segment.start_line,
                         len(entries), kinds)
    model = build_model(plan, segment, fsync_always=fsync_always, max_crashes=max_crashes)
    started = time.monotonic()
    result = run_tlc(model, keep)
    check.seconds = time.monotonic() - started
    check.distinct, check.depth = result.distinct, result.depth
    if result.outcome == "error":
        check.problem = "TLC failed: " + "; ".join(result.errors)
        return check
    if result.outcome == "violation":
        check.problem = _violation_text(result, model)
        return check
    furthest = reached(result)
    if furthest >= 2 * (len(entries) + 1):
        check.accepted = True
        return check
    index, half = divmod(furthest, 2)
    if index < 1:
        check.problem = "TLC matched nothing: the trace's start is not a state of the spec"
        return check
    entry = entries[index - 1]
    check.failed_line = entry.line
    check.problem = f"line {entry.line}: {entry.what}: no behaviour of the spec matches"
    if explain:
        check.problem = diagnose(plan, segment, index, bool(half), fsync_always=fsync_always,
                                 max_crashes=max_crashes)
    return check


def _violation_text(result: tlc.TlcResult, model: TraceModel) -> str:
    lines = [f"the logged behaviour violates {result.violated}"]
    if result.trace:
        last = result.trace[-1]
        lines.append(f"  in the state after {last.action}: "
                     + _labelled(format_value(last.state.get("grp")), model.names))
    return "\n".join(lines)


# --- when no behaviour matches: what the spec would have done ---------------------------

_DIAG = re.compile(r'<<\s*"korvet-diag",\s*"(\w+)",')


def _diag_values(printed: str) -> dict[str, list[tuple[TlaValue, ...]]]:
    found: dict[str, list[tuple[TlaValue, ...]]] = {}
    chunks = re.split(r'(?=<<\s*"korvet-)', printed)
    for chunk in chunks:
        match = _DIAG.match(chunk)
        if not match:
            continue
        text = chunk.strip()
        text = text[:text.rfind(">>") + 2]
        try:
            value = parse_value(text)
        except ValueError:
            continue
        assert isinstance(value, tuple)
        values = tuple(_canon(v) for v in value[2:])
        if values not in found.setdefault(match.group(1), []):
            found[match.group(1)].append(values)
    return found


def _canon(value: TlaValue) -> TlaValue:
    """One form for TLC's printing and ours: a function of strings is a record (TLC prints
    it so), the empty function the empty sequence."""
    if isinstance(value, Record | Function):
        if not value:
            return ()
        items = {k: _canon(v) for k, v in value.items()}  # type: ignore[arg-type]
        return Record(items) if all(isinstance(k, str) for k in items) else Function(items)
    if isinstance(value, tuple):
        return tuple(_canon(v) for v in value)
    if isinstance(value, frozenset):
        return frozenset(_canon(v) for v in value)
    return value


def _labelled(text: str, names: LogNames) -> str:
    legend = names.legend()
    used = sorted({label for label in re.findall(r'"([mxia]\d+|p\d+)"', text) if label in legend},
                  key=lambda s: (s[0], int(s[1:])))
    if not used:
        return text
    return text + "\n      where " + ", ".join(f"{u} = {legend[u]}" for u in used)


_ORDERS = ("PersistOffsets", "DeleteGroupData")


def _phase(effect: TlaValue) -> int:
    """GroupCoordinator.tla's Phase, for the diagnosis only (TLC decides)."""
    assert isinstance(effect, Record)
    api, err = effect["api"], effect.get("err")
    if api in _ORDERS:
        return 0
    if api in ("JoinGroup", "SyncGroup") and err in (int(core.ErrorCode.UNKNOWN_MEMBER_ID),
                                                     int(core.ErrorCode.FENCED_INSTANCE_ID)):
        return 1
    if api == "SyncGroup" and err == int(core.ErrorCode.REBALANCE_IN_PROGRESS):
        return 2
    return 3 if api in ("JoinGroup", "SyncGroup") and err == 0 else 4


def _set_difference(logged: object, spec: TlaValue, order: str = "") -> str:
    """What the broker's effects (a sequence, in its order) have that the spec's (a set)
    lack and the other way round; for the same set, what is wrong with their order
    (``order``: the order they must be in, when not the phases of a step)."""
    if isinstance(logged, tuple):
        if isinstance(spec, frozenset) and frozenset(logged) == spec:
            if len(logged) != len(spec):
                return "the broker's hold one of them twice: " + format_value(logged)
            phases = [_phase(e) for e in logged]
            if order or phases != sorted(phases):
                return (f"the same ones, out of {order or 'the order of the step phases'}: "
                        + format_value(logged))
            return "the same ones, in order"
        logged = frozenset(logged)
    if isinstance(logged, frozenset) and isinstance(spec, frozenset):
        only_logged = sorted(format_value(v) for v in logged - spec)
        only_spec = sorted(format_value(v) for v in spec - logged)
        return (f"only the broker's: {{{', '.join(only_logged)}}}; "
                f"only the spec's: {{{', '.join(only_spec)}}}")
    return f"the broker's: {format_value(logged)}; the spec's: {format_value(spec)}"


def diagnose(plan: GroupPlan, segment: Segment, index: int, half: bool, *, fsync_always: bool,
             max_crashes: int) -> str:
    """Run TLC again on the entries up to the failing one, with its outputs left free, and
    say what the spec does there."""
    entry = segment.entries[index - 1]
    model = build_model(plan, segment, fsync_always=fsync_always, max_crashes=max_crashes,
                        upto=index, relaxed=index)
    partitions = tuple(sorted(model.names.partition_labels.values(), key=lambda p: int(p[1:])))
    logged = _canon(render_entry(entry, plan.group_id, model.names, partitions))
    assert isinstance(logged, Record)
    values = _diag_values(run_tlc(model).printed)
    head = f"line {entry.line}: {_describe(entry, logged)}: no behaviour of the spec matches"
    lines = [head]
    if entry.kind == "step" and not values.get("step"):
        states = values.get("before", [])
        lines.append("  the spec has no such step in the state the log led to:")
        lines += [f"    grp = {_labelled(format_value(s[0]), model.names)}" for s in states[:2]]
        return "\n".join(lines)
    if entry.kind == "step" and not half:
        for out, _grp in values.get("step", [])[:3]:
            lines.append(f"  effects: {_labelled(_set_difference(logged['out'], out), model.names)}")
        return "\n".join(lines)
    if entry.kind == "step" and not values.get("after"):
        lines.append({
            "none": "  the broker wrote nothing, but the spec's step changed the group's snapshot",
            "failed": "  the broker's write failed, but the spec's step had nothing to write",
            "ok": "  the spec cannot persist here"}[str(logged["persisted"])])
        return "\n".join(lines)
    shown: set[str] = set()
    for found in values.get("after", []):
        wire, grp = found[0], found[1]
        if entry.kind == "step":
            text = (f"  with the write {logged['persisted']}: replies sent: "
                    + _labelled(_set_difference(logged["sent"], wire,
                                                "the order of the step's replies"), model.names))
        elif entry.kind == "load":
            text = (f"  the broker loaded grp = {format_value(logged['grp'])} (floor "
                    f"{logged['floor']}, raised: {format_value(logged['lossy'])})\n"
                    f"  the spec loads grp = {format_value(grp)} (floor {format_value(found[3])})")
            text = _labelled(text, model.names)
        else:
            text = f"  then grp = {_labelled(format_value(grp), model.names)}"
        if text not in shown and len(shown) < 3:
            shown.add(text)
            lines.append(text)
    if len(lines) == 1:
        lines.append("  (the spec reaches no state after it)")
    return "\n".join(lines)


def _describe(entry: Entry, logged: Record) -> str:
    if entry.kind != "step":
        return entry.kind
    params = ", ".join(f"{k} = {format_value(v)}" for k, v in logged.items()
                       if k not in ("kind", "line", "env", "act", "out", "sent", "persisted"))
    return f"{entry.what}({params})"


# --- the whole log ----------------------------------------------------------------------

def validate_plan(plan: LogPlan, group: str | None = None, keep: Path | None = None, *,
                  explain: bool = True) -> Validation:
    checks: list[GroupCheck] = []
    fsync = plan.fsync_always
    for group_id, group_plan in sorted(plan.groups.items()):
        if group is not None and group_id != group:
            continue
        check = GroupCheck(group_id, stutters=dict(group_plan.stutters),
                           uncovered=[(e.line, e.what) for e in group_plan.uncovered])
        checks.append(check)
        if len(fsync) != 1:
            check.problem = ("Redis' appendfsync changed between broker runs of this log: "
                             "the spec fixes it for a whole behaviour")
            continue
        loads = sum(1 for e in group_plan.entries if e.kind == "load")
        for number, segment in enumerate(group_plan.segments(), start=1):
            where = None if keep is None else keep / _safe(group_id) / f"segment-{number}"
            try:
                check.segments.append(check_segment(
                    group_plan, segment, fsync_always=next(iter(fsync)),
                    max_crashes=2 * loads + 2, keep=where, explain=explain))
            except OutsideSpec as exc:
                check.problem = f"from line {segment.start_line} the group is outside the spec: {exc}"
                break
    return Validation(plan.lines, plan.runs, checks)


def validate(lines: list[str], group: str | None = None, keep: Path | None = None, *,
             explain: bool = True) -> Validation:
    """Validate a log (its lines) under TLC; raises LogError when it cannot be read.
    ``explain``: on a mismatch, run TLC once more to say what the spec does there."""
    return validate_plan(plan_log(lines), group, keep, explain=explain)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:80] or "_"


def summary(check: GroupCheck) -> list[str]:
    kinds: dict[str, int] = {}
    for segment in check.segments:
        for kind, count in segment.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + count
    states = sum(s.distinct for s in check.segments)
    lines = [f"group {check.group_id!r}: {check.entries} log lines in {len(check.segments)} "
             f"segment(s): {kinds.get('step', 0)} steps, {kinds.get('load', 0)} loads, "
             f"{kinds.get('stop', 0)} clean stops, {kinds.get('stutter', 0)} stutters; "
             f"TLC: {states:,} distinct states in {check.seconds:.1f}s"]
    for reason, count in sorted(check.stutters.items()):
        lines.append(f"  stutter ({count}x): {reason}")
    for line, reason in check.uncovered:
        lines.append(f"  NOT COVERED line {line}: {reason}; validated again from the state after it")
    if check.problem:
        lines.append(f"  {check.problem}")
    for segment in check.segments:
        if segment.problem:
            lines.append("  " + segment.problem.replace("\n", "\n  "))
    lines.append("  a behaviour of GroupCoordinatorDurable" if check.ok
                 else "  NOT a behaviour of GroupCoordinatorDurable")
    return lines


def run(args: argparse.Namespace) -> int:
    path = Path(args.log)
    if not path.is_file():
        print(f"korvet spec validate: {path} does not exist", file=sys.stderr)
        return 2
    try:
        tlc.tlc_jar()
        tlc.java_binary()
        result = validate(path.read_text().splitlines(), args.group,
                          Path(args.keep) if args.keep else None)
    except (LogError, tlc.TlcError, OSError) as exc:
        print(f"korvet spec validate: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: {result.lines} lines, {result.runs} broker run(s), "
          f"{len(result.groups)} group(s)")
    if args.group and not result.groups:
        print(f"korvet spec validate: no group {args.group!r} in the log", file=sys.stderr)
        return 2
    for check in result.groups:
        for line in summary(check):
            print(line)
    return 0 if result.ok else 1


def add_parser(spec_commands: object) -> None:
    parser = spec_commands.add_parser(  # type: ignore[attr-defined]
        "validate", help="check a coordinator event log against the spec with TLC",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="the NDJSON file written by --groups-event-log")
    parser.add_argument("--group", help="only this group")
    parser.add_argument("--keep", metavar="DIR",
                        help="write the generated TLA+ modules and configs into DIR")
    parser.set_defaults(func=run)
