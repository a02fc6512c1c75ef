"""Replay the SharePartitionRedis CI model's transitions through the real share scripts.

Every state of TLC's graph of spec/SharePartitionRedis.tla (the CI model: two consumers, two
records, delivery limit 2, locks of 2 ticks) is built in a real redis-server: the stream's
entries, the meta hash's log start, the consumer group at its last-delivered id, each PEL
entry with its owner, delivery counter and idle time (XCLAIM ... IDLE RETRYCOUNT FORCE
JUSTID; a tick is TICK_MS of Redis' idle clock), then XTRIM. From it the scripts take every
step the spec's broker takes in one call:

- share_ack.lua for each record a consumer was handed (``hold[c][o] >= 0``) and each type:
  ``Accept``, ``Reject``, ``Release``, ``Renew`` when the script applies it, ``AckRefused``
  when its guard refuses;
- share_release.lua for ``CloseSession`` while the model allows one;
- share_fetch.lua for one record (``Claim`` when it claimed a PEL entry, ``ReadNew`` when
  it read a new one) in the states where it has nothing to archive first: there one call is
  one step of the spec, elsewhere it is ``ArchiveAtLimit``/``DropTrimmed`` steps and then a
  claim (tests/integration/test_share_scripts.py covers those against the rules).

The Redis state after each call (entries, log start, last-delivered id, every PEL entry's
owner, counter and idle ticks) must be TLC's successor's under the same label, and each of
TLC's transitions with these labels must be one a script took: the two sets, per state, are
equal. ``XAdd``, ``XTrim`` and ``Tick`` are the environment (the produce path, retention,
the clock), not the share scripts. A copy of share_ack.lua without its ownership check
diverges (``test_a_broken_script_diverges``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from korvet.core.share_partition import PARK
from korvet.verification import tlc
from korvet.verification.values import ModelValue, TlaValue
from tests.support import tlc_runs
from tests.support.script_replay import script_text

pytestmark = pytest.mark.tlc

MODEL = "SharePartitionRedis"
LIMIT, LOCK_TICKS, MAX_IN_FLIGHT, MAX_CLOSES = 2, 2, 2, 1  # SharePartitionRedis.cfg
TICK_MS = 10_000  # far above the milliseconds a state's replay takes
STREAM, META, GROUP = "sr:{t:0}:stream", "sr:{t:0}:partition", "share:g"
ACK_LABELS = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}
SCRIPT_LABELS = frozenset({*ACK_LABELS.values(), "AckRefused", "CloseSession", "Claim",
                           "ReadNew"})
RedisView = tuple[int, int, int, tuple[tuple[int, str, int, int], ...]]


def _owner(value: object) -> str:
    """A consumer as the scripts name it in Redis."""
    if isinstance(value, ModelValue):
        return f"m:{value.name}"
    assert value in ("none", "park"), value
    return PARK if value == "park" else "none"


def _field(record: Any, name: str) -> Any:
    return record[name]


def _view_of_state(state: dict[str, TlaValue]) -> RedisView:
    """What Redis holds of a TLC state: end, log start, last-delivered id, the PEL."""
    pel: Any = state["pel"]
    entries = tuple(sorted((int(o), _owner(_field(e, "owner")), int(_field(e, "idle")),
                            int(_field(e, "count")))
                           for o, e in pel.items() if _field(e, "owner") != "none"))
    return (int(state["end"]), int(state["logStart"]), int(state["lastId"]),  # type: ignore[arg-type]
            entries)


class Replayer:
    def __init__(self, url: str, ack_text: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.fetch = self.client.register_script(script_text("share_fetch.lua"))
        self.ack = self.client.register_script(ack_text)
        self.release = self.client.register_script(script_text("share_release.lua"))
        self.calls = 0

    def build(self, state: dict[str, TlaValue]) -> None:
        end, start, last, entries = _view_of_state(state)
        pipe = self.client.pipeline(transaction=False)
        pipe.flushdb()
        for o in range(end):
            pipe.xadd(STREAM, {"v": str(o)}, id=f"{o}-1")
        pipe.hset(META, "start", f"{start}-1")
        if end:
            pipe.xgroup_create(STREAM, GROUP, id=f"{last}-1" if last >= 0 else "0")
        for o, owner, idle, count in entries:
            pipe.xclaim(STREAM, GROUP, owner, 0, [f"{o}-1"], idle=idle * TICK_MS,
                        retrycount=count, force=True, justid=True)
        if end:
            pipe.xtrim(STREAM, minid=f"{start}-1", approximate=False)
        pipe.execute()

    def view(self, state: dict[str, TlaValue]) -> RedisView:
        end, start, _, _ = _view_of_state(state)  # the scripts never change these
        if not end:
            return end, start, -1, ()
        pending: Any = self.client.xpending_range(STREAM, GROUP, "-", "+", 100)
        entries = tuple(sorted(
            (int(p["message_id"].split(b"-")[0]), p["consumer"].decode(),
             min(int(p["time_since_delivered"]) // TICK_MS, LOCK_TICKS), int(p["times_delivered"]))
            for p in pending))
        group: Any = next(g for g in self.client.xinfo_groups(STREAM) if g["name"] == GROUP.encode())
        last = group["last-delivered-id"].split(b"-")
        return end, start, (int(last[0]) if last != [b"0", b"0"] else -1), entries

    def steps(self, state: dict[str, TlaValue]) -> Iterator[tuple[str, RedisView]]:
        """Every (label, Redis after it) the scripts take from ``state``."""
        hold: Any = state["hold"]
        consumers = sorted(hold, key=str)
        for c in consumers:
            for o, left in hold[c].items():
                if int(left) < 0:
                    continue
                for kind, label in ACK_LABELS.items():
                    self.build(state)
                    reply: Any = self.ack(keys=[STREAM, META], args=[
                        GROUP, _owner(c), LOCK_TICKS * TICK_MS, LIMIT, PARK, f"{o}-1", kind])
                    self.calls += 1
                    yield ("AckRefused" if reply[0] == b"INVALID" else label), self.view(state)
            if int(state["closes"]) < MAX_CLOSES:  # type: ignore[arg-type]
                self.build(state)
                self.release(keys=[STREAM, META], args=[
                    GROUP, _owner(c), LOCK_TICKS * TICK_MS, LIMIT, PARK])
                self.calls += 1
                yield "CloseSession", self.view(state)
            if not _archives_first(state):
                self.build(state)
                _, _, entries = self.fetch(keys=[STREAM, META], args=[
                    GROUP, _owner(c), LOCK_TICKS * TICK_MS, LIMIT, MAX_IN_FLIGHT, 1, "0", PARK])
                self.calls += 1
                if entries:
                    yield ("Claim" if int(entries[0][1]) > 1 else "ReadNew"), self.view(state)


def _archives_first(state: dict[str, TlaValue]) -> bool:
    """The fetch script would XACK something before claiming (ArchiveAtLimit, DropTrimmed)."""
    _, start, _, entries = _view_of_state(state)
    return any(o < start or (idle >= LOCK_TICKS and count >= LIMIT)
               for o, _, idle, count in entries)


def _expected(graph: tlc.StateGraph, node: str) -> set[tuple[str, RedisView]]:
    state = graph.states[node]
    found = set()
    for label, target in graph.successors(node):
        if label not in SCRIPT_LABELS:
            continue
        if label in ("Claim", "ReadNew") and _archives_first(state):
            continue
        found.add((label, _view_of_state(graph.states[target])))
    return found


def replay(url: str, ack_text: str, max_divergences: int = 5) -> tuple[int, int, list[str]]:
    graph = tlc_runs.passing_graph(MODEL)
    replayer = Replayer(url, ack_text)
    divergences: list[str] = []
    transitions = 0
    for node, state in graph.states.items():
        expected = _expected(graph, node)
        got = set(replayer.steps(state))
        transitions += len(expected)
        if got != expected:
            divergences.append(f"from {_view_of_state(state)}: only TLC {sorted(expected - got)}, "
                               f"only the scripts {sorted(got - expected)}")
            if len(divergences) >= max_divergences:
                break
    return transitions, replayer.calls, divergences


@pytest.mark.spec("SharePartitionRedis", "Accept", "Reject", "Release", "Renew", "AckRefused",
                  "CloseSession", "Claim", "ReadNew", "Guard",
                  note="every state of the CI model rebuilt in redis-server, each step a script")
def test_every_script_step_is_tlcs(redis_url: str) -> None:
    transitions, calls, divergences = replay(redis_url, script_text("share_ack.lua"))
    print(f"\n{MODEL}: {transitions:,} transitions of the scripts' actions matched by "
          f"{calls:,} script calls")
    assert not divergences, "\n".join(divergences)
    assert transitions > 0


def test_a_broken_script_diverges(redis_url: str) -> None:
    broken = script_text("share_ack.lua", mutate=("e[2] ~= consumer or ", ""))
    _, _, divergences = replay(redis_url, broken, max_divergences=1)
    assert divergences
