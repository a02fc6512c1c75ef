"""`korvet spec replay` accepts a faithful coordinator log and catches a tampered one."""

from __future__ import annotations

import json

from korvet.core import coordinator as core
from korvet.core.coordinator.eventlog import effect_to_json, event_to_json
from korvet.verification.replay import replay


def _log() -> list[str]:
    state = core.initial_state(core.Config(initial_rebalance_delay_ms=0))
    lines = [json.dumps({"snapshot": core.to_snapshot(state)})]
    join = core.JoinGroup(request_id=1, group_id="g", member_id="", group_instance_id=None,
                          protocol_type="consumer", protocols=(core.Protocol("range", b"m"),),
                          session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                          client_id="c", client_host="h", requires_known_member_id=False,
                          supports_skip_assignment=False, new_member_id="c-1")
    now = 1_000
    events: list[core.Event] = [core.Restart(), join]
    for event in events:
        state, effects = core.step(state, event, now)
        lines.append(json.dumps({"t": now, "event": event_to_json(event),
                                 "effects": [effect_to_json(e) for e in effects]}))
        now += 10
    for timeout in core.due_timeouts(state, now + 100_000):
        state, effects = core.step(state, timeout, now + 100_000)
        lines.append(json.dumps({"t": now + 100_000, "event": event_to_json(timeout),
                                 "effects": [effect_to_json(e) for e in effects]}))
    return lines


def test_a_faithful_log_replays() -> None:
    report = replay(_log())
    assert report.ok, report.problems
    assert report.steps >= 3 and report.events["JoinGroup"] == 1


def test_a_tampered_effect_is_reported() -> None:
    lines = _log()
    for index, line in enumerate(lines):
        entry = json.loads(line)
        replies = [e for e in entry.get("effects", []) if e.get("type") == "JoinGroupReply"]
        if replies:
            replies[0]["generation_id"] += 1  # the broker "answered" another generation
            lines[index] = json.dumps(entry)
            break
    else:
        raise AssertionError("the log has no JoinGroup reply to tamper with")
    report = replay(lines)
    assert not report.ok
    assert "produced different effects" in report.problems[0]
