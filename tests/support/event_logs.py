"""Coordinator event logs written without a broker, line for line as the adapter writes them.

``SyntheticLog`` steps the pure machine and the I/O boundary (korvet/core/coordinator,
``durability``; korvet/verification/replay.py's ``boundary`` is the adapter's rule for a taken or
refused write) and writes the NDJSON lines of korvet/server/coordinator.py: a load line
with the snapshot at each start, then the Restart step, one line per step (event,
effects, ``persisted``, replies sent), a stop line. A test decides which writes Redis
refuses. Helpers build the events a client would send.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from korvet.core import coordinator as core
from korvet.core.coordinator import durability
from korvet.core.coordinator.eventlog import effect_to_json, event_to_json
from korvet.verification import validate
from korvet.verification.replay import boundary

# What `korvet spec validate` checks of every log (spec/GroupCoordinatorTrace.tla): the trace,
# the constants it binds from the log, the invariants and the properties; the tests that
# validate logs carry it as their spec marker.
VALIDATED = ("TraceLog", "l", "MemberIds", "Rank", "InstanceIds", "ProtocolChoices", "ProtocolNames",
             "Partitions", "Offsets", "Assignments", "GroupMaxSize", "FsyncEveryWrite",
             "WriteMayFail", "RaiseAfterLoss", "Stride", *validate.INVARIANTS, *validate.PROPERTIES)

GROUP = "synthetic-group"
TOPIC = "t"
PROTOCOLS = (core.Protocol("range", b"\x00\x01meta"), core.Protocol("roundrobin", b"\x00\x01meta"))


@dataclass
class SyntheticLog:
    config: core.Config = field(default_factory=lambda: core.Config(initial_rebalance_delay_ms=100))
    lines: list[str] = field(default_factory=list)
    now: int = 1_000_000
    state: core.CoordinatorState = field(init=False)
    durable: dict[str, core.Group] = field(default_factory=dict)
    requests: int = 0
    runs: int = 0

    def __post_init__(self) -> None:
        self.state = core.initial_state(self.config)
        self.start()

    def _write(self, entry: dict[str, Any]) -> None:
        self.lines.append(json.dumps(entry))

    def start(self, run_id: str | None = None) -> None:
        """A broker start: load what is durable (no Redis loss), then the Restart step."""
        self.runs += 1
        self.state = core.CoordinatorState(self.config, dict(self.durable),
                                           self.state.generation_floor)
        self._write({"t": self.now, "load": {
            "lossy": False, "floor": self.state.generation_floor, "durable": True,
            "fsync_always": False, "redis_run_id": run_id or f"run-{self.runs}"},
            "snapshot": core.to_snapshot(self.state)})
        self.step(core.Restart())

    def stop(self, clean: bool = True) -> None:
        self._write({"t": self.now, "stop": "clean" if clean else "unmarked"})

    def step(self, event: core.Event, *, write_fails: bool = False, advance: int = 10
             ) -> list[core.Reply]:
        """One step of the adapter: the machine, then the write (refused if told), then the
        replies. Returns the replies sent."""
        self.now += advance
        before = self.state
        after, effects = core.step(before, event, self.now)
        ready = durability.ready(before, after, effects, self.durable)
        persisted: bool | None = None if not ready.writes else not write_fails
        self.state, sent = boundary(before, after, effects, self.durable, persisted, self.now)
        self._write({"t": self.now, "event": event_to_json(event),
                     "effects": [effect_to_json(e) for e in effects], "persisted": persisted,
                     "sent": [effect_to_json(r) for r in sent]})
        return sent

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    # --- events a client sends ------------------------------------------------------------

    def _request(self) -> int:
        self.requests += 1
        return self.requests

    def join(self, member_id: str = "", new_id: str = "", **kwargs: Any) -> core.JoinGroup:
        fields: dict[str, Any] = {
            "group_instance_id": None, "protocol_type": "consumer", "protocols": PROTOCOLS,
            "session_timeout_ms": 10_000, "rebalance_timeout_ms": 20_000,
            "client_id": "client", "client_host": "127.0.0.1",
            "requires_known_member_id": True, "supports_skip_assignment": False}
        fields.update(kwargs)
        return core.JoinGroup(self._request(), GROUP, member_id, new_member_id=new_id or
                              f"client-{self.requests:04d}-fresh", **fields)

    def sync(self, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None) -> core.SyncGroup:
        return core.SyncGroup(self._request(), GROUP, member_id, None, generation, "consumer",
                              "range", tuple(core.MemberAssignment(m, a)
                                             for m, a in (assignments or {}).items()))

    def heartbeat(self, member_id: str, generation: int) -> core.Heartbeat:
        return core.Heartbeat(self._request(), GROUP, member_id, None, generation)

    def commit(self, member_id: str, generation: int, offsets: dict[int, int]
               ) -> core.OffsetCommit:
        return core.OffsetCommit(self._request(), GROUP, member_id, None, generation, tuple(
            core.OffsetToCommit(TOPIC, p, o) for p, o in offsets.items()))

    def leave(self, member_id: str) -> core.LeaveGroup:
        return core.LeaveGroup(self._request(), GROUP, (core.MemberIdentity(member_id, None),))

    def due(self, event: core.Event) -> core.Event:
        """A timer event, stepped once its deadline has passed."""
        self.now += 400_000
        return event


# --- hand edits a trace validation must refuse ----------------------------------------------

def _replace(lines: list[str], index: int, entry: dict[str, Any]) -> list[str]:
    edited = list(lines)
    edited[index] = json.dumps(entry)
    return edited


def tamper_sync_assignment(lines: list[str]) -> tuple[list[str], int]:
    """A successful SyncGroup reply now carries another assignment than the leader gave that
    member (another one the log shows). Returns the edited lines and the edited line's number."""
    entries = [json.loads(line) for line in lines]
    given = {r["assignment"] for e in entries for r in e.get("sent", [])
             if r.get("type") == "SyncGroupReply" and r["error"] == 0 and r["assignment"]}
    for index, entry in enumerate(entries):
        for reply in entry.get("sent", []):
            others = sorted(given - {reply.get("assignment")})
            if reply.get("type") == "SyncGroupReply" and reply["error"] == 0 and others:
                reply["assignment"] = others[0]
                return _replace(lines, index, entry), index + 1
    raise AssertionError("no successful SyncGroup reply to edit")


def tamper_persisted(lines: list[str], event_type: str) -> tuple[list[str], int]:
    """The last step of this event type whose write was taken and that sent a reply now says
    the write failed, although the same reply was sent."""
    for index in range(len(lines) - 1, -1, -1):
        entry = json.loads(lines[index])
        if entry.get("event", {}).get("type") == event_type and entry.get("persisted") is True \
                and entry.get("sent"):
            entry["persisted"] = False
            return _replace(lines, index, entry), index + 1
    raise AssertionError(f"no {event_type} step with a taken write and a reply to edit")
