"""`korvet spec replay LOG`: check a broker's coordinator event log against the spec's rules.

The broker (``korvet serve --groups-event-log LOG``) writes, at each start, the
coordinator's snapshot, then one line per step: the time, the event, the machine's
effects, whether the write was taken, and the replies sent. Replay starts from each
snapshot, steps every logged event through the pure machine and its I/O boundary
(korvet/core/coordinator, durability.py), and checks after every step that

- the effects and the replies sent are exactly the ones the broker logged (the running
  broker did what the machine prescribes; it finds nondeterminism and a broker that
  bypassed the machine), and
- every invariant of the spec holds, and the generation never went back.

``korvet spec validate LOG`` goes further: TLC checks the log against the spec itself.

It exits non-zero at the first divergence or violation, printing the step.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from korvet.core import coordinator as core
from korvet.core.coordinator import durability
from korvet.core.coordinator.eventlog import effect_to_json, event_from_json
from korvet.core.coordinator.invariants import violations


@dataclass
class ReplayReport:
    segments: int = 0
    steps: int = 0
    events: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def replay(lines: list[str], *, stop_at_first: bool = True) -> ReplayReport:
    report = ReplayReport()
    state: core.CoordinatorState | None = None
    durable: dict[str, core.Group] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry: dict[str, Any] = json.loads(line)
        except ValueError:
            report.problems.append(f"line {number}: not JSON (a write cut short?)")
            break
        if "snapshot" in entry:
            state = core.from_snapshot(entry["snapshot"])
            durable = {g: durability.snapshot_of(group) for g, group in state.groups.items()}
            report.segments += 1
            continue
        if "stop" in entry:
            continue
        if state is None:
            report.problems.append(f"line {number}: a step before any snapshot")
            break
        event = event_from_json(entry["event"])
        before = state
        now = int(entry["t"])
        state, effects = core.step(state, event, now)
        state, sent = boundary(before, state, effects, durable, entry.get("persisted"), now)
        report.steps += 1
        kind = type(event).__name__
        report.events[kind] = report.events.get(kind, 0) + 1
        replayed = [effect_to_json(e) for e in effects]
        if replayed != entry["effects"]:
            report.problems.append(
                f"line {number}: {kind} produced different effects\n"
                f"  logged:   {json.dumps(entry['effects'])[:2000]}\n"
                f"  replayed: {json.dumps(replayed)[:2000]}")
        replies = [effect_to_json(r) for r in sent]
        if "sent" in entry and replies != entry["sent"]:
            report.problems.append(
                f"line {number}: {kind}: the broker sent other replies than the machine's\n"
                f"  sent:     {json.dumps(entry['sent'])[:2000]}\n"
                f"  replayed: {json.dumps(replies)[:2000]}")
        for violation in violations(before, state, effects):
            report.problems.append(f"line {number}: after {kind}: {violation}")
        if report.problems and stop_at_first:
            break
    return report


def boundary(before: core.CoordinatorState, after: core.CoordinatorState,
              effects: tuple[core.Effect, ...], durable: dict[str, core.Group],
              persisted: bool | None, now: int) -> tuple[core.CoordinatorState, list[core.Reply]]:
    """What the adapter does after a step, given whether its write was taken: the state it
    keeps and the replies it sends (``durable`` is updated in place)."""
    ready = durability.ready(before, after, effects, durable)
    if persisted is False:
        state, parked = durability.restore(after, ready.touched, durable, now)
        return state, [durability.unavailable(r) for r in ready.replies] + list(parked)
    for group_id, snapshot in ready.snapshots.items():
        if snapshot is None:
            durable.pop(group_id, None)
        else:
            durable[group_id] = snapshot
    return after, list(ready.replies)


def run(args: argparse.Namespace) -> int:
    path = Path(args.log)
    if not path.is_file():
        print(f"korvet spec replay: {path} does not exist", file=sys.stderr)
        return 2
    report = replay(path.read_text().splitlines(), stop_at_first=not args.all)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(report.events.items()))
    print(f"{path}: {report.steps} steps in {report.segments} broker run(s): {counts}")
    for problem in report.problems:
        print(problem)
    if report.ok:
        print("every step followed the machine, and every invariant held")
        return 0
    return 1


def add_parser(spec_commands: Any) -> None:
    replay_parser = spec_commands.add_parser(
        "replay", help="check a coordinator event log (groups.event-log) against the spec",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    replay_parser.add_argument("log", help="the NDJSON file written by --groups-event-log")
    replay_parser.add_argument("--all", action="store_true",
                               help="report every problem instead of stopping at the first")
    replay_parser.set_defaults(func=run)
