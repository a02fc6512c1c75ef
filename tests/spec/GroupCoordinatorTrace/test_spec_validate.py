"""`korvet spec validate`: TLC decides whether a coordinator event log is a behaviour of the spec.

The logs here are written without a broker, line for line as the adapter writes them
(tests/support/event_logs.py: the pure machine and its I/O boundary), so each test can
say which writes Redis refuses and what a hand-edited line looks like. The logs of real
clients against a real broker are validated in tests/integration/test_groups.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from korvet.core import coordinator as core
from korvet.core.coordinator import ErrorCode
from korvet.verification.trace_plan import OUTSIDE, RESTART, TIMER_IDLE, plan_log
from korvet.verification.validate import validate
from tests.support.event_logs import GROUP, VALIDATED, SyntheticLog

# Every test here validates a log: the trace, its constants, invariants and properties.
pytestmark = [pytest.mark.tlc, pytest.mark.spec("GroupCoordinatorTrace", *VALIDATED)]

RETRY = ErrorCode.COORDINATOR_NOT_AVAILABLE


def formed_group(log: SyntheticLog, member: str = "client-a") -> None:
    """One member joins (v4: MEMBER_ID_REQUIRED first), the initial delay runs out, it syncs."""
    log.step(log.join(new_id=member))
    log.step(log.join(member))
    log.step(log.due(core.RebalanceTimeout(GROUP)))
    log.step(log.sync(member, 1, {member: b"partitions-of-a"}))


@pytest.mark.spec("GroupCoordinatorTrace", "MatchPersist")
def test_a_log_with_refused_writes_validates() -> None:
    """Redis refuses the write of a new generation, of the leader's assignment and of a
    commit: each time the client is told COORDINATOR_NOT_AVAILABLE and the group stays as
    Redis holds it; TLC finds the matching behaviour (PersistFails each time)."""
    log = SyntheticLog()
    log.step(log.join(new_id="client-a"))
    log.step(log.join("client-a"))
    refused_join = log.step(log.due(core.RebalanceTimeout(GROUP)), write_fails=True)
    log.step(log.join("client-a"))
    log.step(log.due(core.RebalanceTimeout(GROUP)))
    refused_sync = log.step(log.sync("client-a", 1, {"client-a": b"A"}), write_fails=True)
    log.step(log.sync("client-a", 1, {"client-a": b"A"}))
    log.step(log.commit("client-a", 1, {0: 5}))
    refused_commit = log.step(log.commit("client-a", 1, {0: 7}), write_fails=True)
    log.stop()
    log.start()
    log.step(log.heartbeat("client-a", 1))
    assert [getattr(r, "error", None) for r in refused_join + refused_sync] == [RETRY, RETRY]
    assert isinstance(refused_commit[0], core.OffsetCommitReply)
    assert refused_commit[0].partitions[0].error is RETRY
    assert sum(json.loads(line).get("persisted") is False for line in log.lines) == 3

    result = validate(log.lines)

    (check,) = result.groups
    assert check.ok, "\n".join(s.problem for s in check.segments)
    assert check.entries == len(log.lines) - 1  # every line but the first start
    assert check.stutters == {RESTART: 2}


def test_a_refused_commit_of_offsets_the_group_already_holds_validates() -> None:
    """A consumer commits the offsets it committed before (Java's auto-commit does, every
    interval) and Redis refuses the write: the broker answers COORDINATOR_NOT_AVAILABLE
    although the group's snapshot did not change. The spec must allow that failure too."""
    log = SyntheticLog()
    formed_group(log)
    log.step(log.commit("client-a", 1, {0: 5}))
    (reply,) = log.step(log.commit("client-a", 1, {0: 5}), write_fails=True)
    assert isinstance(reply, core.OffsetCommitReply) and reply.partitions[0].error is RETRY

    result = validate(log.lines)

    assert result.ok, "\n".join(s.problem for g in result.groups for s in g.segments)


def line_of(log: SyntheticLog, event_type: str) -> int:
    """The number of the first line stepping an event of this type."""
    return next(n for n, line in enumerate(log.lines, start=1)
                if json.loads(line).get("event", {}).get("type") == event_type)


def _edit(lines: list[str], number: int, change: dict[str, object]) -> list[str]:
    edited = list(lines)
    entry = json.loads(edited[number - 1])
    entry.update(change)
    edited[number - 1] = json.dumps(entry)
    return edited


def two_members(log: SyntheticLog) -> None:
    """client-a forms the group, client-b joins: generation 2, both wait in SyncGroup until
    the leader (client-a) sends the assignment."""
    formed_group(log, "client-a")
    log.step(log.join(new_id="client-b"))
    log.step(log.join("client-b"))
    log.step(log.join("client-a"))  # the rebalance completes: generation 2
    log.step(log.sync("client-b", 2))  # held back until the leader's assignment
    log.step(log.sync("client-a", 2, {"client-a": b"partitions-of-a",
                                      "client-b": b"partitions-of-b"}))


@pytest.mark.spec("GroupCoordinatorTrace", "MatchPersist", "Relaxed", "Diagnose")
def test_a_sync_reply_with_another_assignment_than_the_leaders_fails() -> None:
    """Hand-edited: the follower is told the leader's partitions instead of its own."""
    log = SyntheticLog()
    two_members(log)
    assert validate(log.lines).ok
    number = len(log.lines)
    entry = json.loads(log.lines[-1])
    mine = next(r for r in entry["sent"] if r["member_id"] == "client-a")["assignment"]
    for reply in entry["sent"]:
        reply["assignment"] = mine  # both get client-a's partitions
    edited = _edit(log.lines, number, {"sent": entry["sent"]})

    result = validate(edited)

    (check,) = result.groups
    assert not check.ok
    assert check.failed_lines == [number]
    problem = check.segments[0].problem
    assert f"line {number}: SyncGroup" in problem and "only the broker's" in problem, problem


@pytest.mark.spec("GroupCoordinatorTrace", "MatchPersist")
def test_a_reply_sent_on_another_members_connection_fails() -> None:
    """Hand-edited: the leader's assignment releases both SyncGroups, but each reply goes
    out with the other member's request id (the adapter would write it on the other
    member's connection) although each still names its own member and assignment. The
    spec's `to` is the request answered, so the misrouted replies match none of its."""
    log = SyntheticLog()
    two_members(log)
    number = len(log.lines)
    entry = json.loads(log.lines[-1])
    first, second = entry["sent"]
    assert first["member_id"] != second["member_id"]
    first["request_id"], second["request_id"] = second["request_id"], first["request_id"]

    result = validate(_edit(log.lines, number, {"sent": entry["sent"]}), explain=False)

    (check,) = result.groups
    assert check.failed_lines == [number]


@pytest.mark.spec("GroupCoordinatorTrace", "MatchStep")
def test_a_join_reply_with_another_members_metadata_fails() -> None:
    """Hand-edited: the leader's JoinGroup reply of generation 2 lists client-b with
    metadata client-b never sent (in the machine's effects and on the wire); the leader
    would compute the assignment from it. The spec lists each member's own metadata of
    the chosen protocol."""
    log = SyntheticLog()
    two_members(log)
    number = next(n for n, line in enumerate(log.lines, start=1)
                  if any(r.get("members") and r["generation_id"] == 2
                         for r in json.loads(line).get("sent", [])))
    entry = json.loads(log.lines[number - 1])
    for reply in entry["effects"] + entry["sent"]:
        for member in reply.get("members", []):
            if member["member_id"] == "client-b":
                member["metadata"] = "c3RhbGU="  # b"stale"

    result = validate(_edit(log.lines, number, {"effects": entry["effects"],
                                                "sent": entry["sent"]}), explain=False)

    (check,) = result.groups
    assert check.failed_lines == [number]


@pytest.mark.spec("GroupCoordinatorTrace", "MatchStep")
def test_effects_out_of_order_fail() -> None:
    """Hand-edited: a commit's reply comes before the offset write it answers for (the
    effects swapped: the adapter carries them out in order, so it would acknowledge
    offsets it had not yet written). The same effects as a set, in the wrong order."""
    log = SyntheticLog()
    formed_group(log)
    log.step(log.commit("client-a", 1, {0: 5}))
    number = len(log.lines)
    entry = json.loads(log.lines[-1])
    assert [e["type"] for e in entry["effects"]] == ["PersistOffsets", "OffsetCommitReply"]

    result = validate(_edit(log.lines, number, {"effects": entry["effects"][::-1]}),
                      explain=False)

    (check,) = result.groups
    assert check.failed_lines == [number]


@pytest.mark.spec("GroupCoordinatorTrace", "MatchPersist")
def test_a_reply_sent_although_its_write_failed_fails() -> None:
    """Hand-edited: the log says the write of a new generation failed (or that there was
    nothing to write), yet the JoinGroup reply revealing it was sent."""
    log = SyntheticLog()
    formed_group(log)
    number = line_of(log, "RebalanceTimeout")
    entry = json.loads(log.lines[number - 1])
    assert entry["persisted"] is True
    assert entry["sent"][0]["generation_id"] == 1

    result = validate(_edit(log.lines, number, {"persisted": False}))
    unwritten = validate(_edit(log.lines, number, {"persisted": None}), explain=False)

    (check,) = result.groups
    assert check.failed_lines == [number]
    assert "with the write failed" in check.segments[0].problem
    # ... or the log says there was nothing to write: the spec's step changed the snapshot
    assert unwritten.groups[0].failed_lines == [number]


@pytest.mark.spec("GroupCoordinatorTrace", "MatchStep")
def test_a_changed_generation_fails() -> None:
    """Hand-edited: the JoinGroup reply that formed the group announces generation 2 (in
    the machine's effects and on the wire) where the spec's rebalance makes generation 1."""
    log = SyntheticLog()
    formed_group(log)
    number = line_of(log, "RebalanceTimeout")
    entry = json.loads(log.lines[number - 1])
    for reply in entry["effects"] + entry["sent"]:
        assert reply["generation_id"] == 1
        reply["generation_id"] = 2

    result = validate(_edit(log.lines, number, {"effects": entry["effects"],
                                                "sent": entry["sent"]}))

    (check,) = result.groups
    assert check.failed_lines == [number]
    problem = check.segments[0].problem
    assert problem.startswith(f"line {number}: RebalanceTimeout"), problem
    assert "only the broker's" in problem and "gen |-> 2" in problem, problem


@pytest.mark.spec("GroupCoordinatorTrace", "MatchStep")
def test_reordered_lines_fail_at_the_first_line_out_of_place() -> None:
    """Hand-edited: the follower's SyncGroup is moved before the JoinGroup that completed
    the rebalance. At that point the group is still rebalancing, where the spec answers a
    SyncGroup at once (REBALANCE_IN_PROGRESS) instead of holding it back: the moved line
    is the first that does not fit."""
    log = SyntheticLog()
    two_members(log)
    sync = next(n for n, line in enumerate(log.lines, start=1)
                if json.loads(line).get("event", {}).get("type") == "SyncGroup"
                and json.loads(line)["event"]["generation_id"] == 2)
    edited = list(log.lines)
    edited[sync - 2], edited[sync - 1] = edited[sync - 1], edited[sync - 2]

    result = validate(edited, explain=False)

    (check,) = result.groups
    assert check.failed_lines == [sync - 1]
    assert check.segments[0].problem.startswith(f"line {sync - 1}: SyncGroup"), check.segments


@pytest.mark.spec("GroupCoordinatorTrace", "MatchStep")
def test_a_reply_the_machine_never_gave_fails_without_explanation_run() -> None:
    """Hand-edited: a heartbeat of a stale generation answered NONE. With explain=False
    TLC runs once and the first unmatched line is still named."""
    log = SyntheticLog()
    formed_group(log)
    log.step(log.heartbeat("client-a", 0))  # stale: ILLEGAL_GENERATION
    entry = json.loads(log.lines[-1])
    assert entry["sent"][0]["error"] == ErrorCode.ILLEGAL_GENERATION
    entry["effects"][0]["error"] = entry["sent"][0]["error"] = 0
    edited = _edit(log.lines, len(log.lines), {"effects": entry["effects"], "sent": entry["sent"]})

    result = validate(edited, explain=False)

    assert result.groups[0].failed_lines == [len(log.lines)]


@pytest.mark.spec("GroupCoordinatorTrace", "TraceInit", "MatchStutter")
def test_steps_outside_the_spec_are_stutters_or_cut_the_trace_and_are_reported() -> None:
    """OffsetDelete of a partition the group never committed changes nothing the spec sees
    (a stutter); deleting a topic the group committed on changes its committed offsets,
    which the spec has no action for: the trace is cut there and validated again from the
    state after it. Both are in the report; the whole log is still checked."""
    log = SyntheticLog()
    formed_group(log)
    log.step(log.commit("client-a", 1, {0: 5}))
    log.step(core.OffsetDelete(99, GROUP, (core.TopicPartition("other", 0),)))
    log.step(core.TopicDeleted("t"))
    log.step(log.heartbeat("client-a", 1))
    log.step(log.due(core.SessionTimeout(GROUP, "client-a")))
    log.step(core.LeaveGroup(100, "", (core.MemberIdentity("client-a", None),)))

    plan = plan_log(log.lines)
    assert set(plan.groups) == {GROUP, ""}
    group = plan.groups[GROUP]
    (cut,) = group.uncovered
    assert cut.what == f"{OUTSIDE}: TopicDeleted"
    assert group.stutters[f"{OUTSIDE}: OffsetDelete"] == 1
    assert plan.groups[""].stutters == {RESTART: 1,
                                        f"{OUTSIDE}: INVALID_GROUP_ID for an empty group id": 1}

    result = validate(log.lines)

    check = next(g for g in result.groups if g.group_id == GROUP)
    assert check.ok and len(check.segments) == 2
    assert check.uncovered == [(cut.line, cut.what)]
    # every line but the first start, the cut and the empty group id's
    assert sum(s.entries for s in check.segments) == len(log.lines) - 3


@pytest.mark.spec("GroupCoordinatorTrace", "MatchStutter")
def test_a_timer_with_nothing_to_do_is_a_stutter() -> None:
    """The session timeout of a member waiting in the rebalance changes nothing the spec
    sees (it needs no heartbeat while it waits): a stutter, reported as such."""
    log = SyntheticLog()
    two_members(log)
    log.step(log.join("client-a", protocols=(core.Protocol("range", b"other"),)))
    log.step(log.due(core.SessionTimeout(GROUP, "client-a")))

    plan = plan_log(log.lines)

    assert plan.groups[GROUP].stutters == {RESTART: 1, TIMER_IDLE: 1}
    assert validate(log.lines).ok


def test_the_command_validates_a_log_and_exits_non_zero_on_a_tampered_one(tmp_path: Path) -> None:
    log = SyntheticLog()
    formed_group(log)
    good = tmp_path / "good.ndjson"
    good.write_text(log.text())
    bad = tmp_path / "bad.ndjson"
    number = line_of(log, "RebalanceTimeout")
    bad.write_text("\n".join(_edit(log.lines, number, {"persisted": False})) + "\n")

    ok = subprocess.run([sys.executable, "-m", "korvet.cli", "spec", "validate", str(good)],
                        capture_output=True, text=True, check=False)
    refused = subprocess.run([sys.executable, "-m", "korvet.cli", "spec", "validate", str(bad)],
                             capture_output=True, text=True, check=False)

    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "a behaviour of GroupCoordinatorDurable" in ok.stdout
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "NOT a behaviour of GroupCoordinatorDurable" in refused.stdout
    assert f"line {number}: RebalanceTimeout" in refused.stdout
