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

import functools
from collections.abc import Callable, Iterator
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

# A TLC state in Redis, in one call: the stream's entries 0..end-1 (ids o-1), the log start
# in the meta hash, the group at its last-delivered id, each PEL entry with its owner, idle
# time and delivery counter (XCLAIM ... IDLE RETRYCOUNT FORCE JUSTID), then the XTRIM.
# ARGV: end, log start, last delivered (-1: none), group, n, then n x (offset, owner, idle
# ms, counter).
REBUILD = """
redis.call('DEL', KEYS[1], KEYS[2])
local e, start = tonumber(ARGV[1]), ARGV[2]
for o = 0, e - 1 do redis.call('XADD', KEYS[1], o .. '-1', 'v', tostring(o)) end
redis.call('HSET', KEYS[2], 'start', start .. '-1')
if e > 0 then
  local last = tonumber(ARGV[3])
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[4], last >= 0 and (last .. '-1') or '0')
  for i = 0, tonumber(ARGV[5]) - 1 do
    local b = 6 + i * 4
    redis.call('XCLAIM', KEYS[1], ARGV[4], ARGV[b + 1], 0, ARGV[b] .. '-1', 'IDLE', ARGV[b + 2],
               'RETRYCOUNT', ARGV[b + 3], 'FORCE', 'JUSTID')
  end
  redis.call('XTRIM', KEYS[1], 'MINID', start .. '-1')
end
return 1
"""
# What the scripts may have changed: the group's last-delivered id and its PEL entries
# (id, owner, idle ms, counter); {'0-0', {}} when there is no stream; an error when a stream
# has lost its group (no script may remove it).
READ_BACK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0-0', {}} end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  if f['name'] == ARGV[1] then
    return {f['last-delivered-id'], redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 100)}
  end
end
return redis.error_reply('the stream has no group ' .. ARGV[1])
"""


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
        self.rebuild = self.client.register_script(REBUILD)
        self.read_back = self.client.register_script(READ_BACK)
        self.calls = 0

    def steps(self, state: dict[str, TlaValue]) -> Iterator[tuple[str, RedisView]]:
        """Every (label, Redis after it) the scripts take from ``state``: for each call,
        ``state`` rebuilt, the call, and Redis read back, all of one state's calls in one
        round trip."""
        end, start, last, entries = _view_of_state(state)  # the scripts never change end, start
        calls: list[tuple[Any, list[Any], Callable[[Any], str | None]]] = []
        hold: Any = state["hold"]
        for c in sorted(hold, key=str):
            for o, left in hold[c].items():
                if int(left) < 0:
                    continue
                for kind, label in ACK_LABELS.items():
                    calls.append((self.ack, [GROUP, _owner(c), LOCK_TICKS * TICK_MS, LIMIT, PARK,
                                             f"{o}-1", kind],
                                  functools.partial(_acked, label)))
            if int(state["closes"]) < MAX_CLOSES:  # type: ignore[arg-type]
                calls.append((self.release, [GROUP, _owner(c), LOCK_TICKS * TICK_MS, LIMIT, PARK],
                              _closed))
            if not _archives_first(state):
                calls.append((self.fetch, [GROUP, _owner(c), LOCK_TICKS * TICK_MS, LIMIT,
                                           MAX_IN_FLIGHT, 1, "0", PARK], _fetched))
        rebuilt = [end, start, last, GROUP, len(entries),
                   *(x for o, owner, idle, count in entries for x in (o, owner, idle * TICK_MS, count))]
        pipe = self.client.pipeline(transaction=False)
        for script, args, _ in calls:
            self.rebuild(keys=[STREAM, META], args=rebuilt, client=pipe)
            script(keys=[STREAM, META], args=args, client=pipe)
            self.read_back(keys=[STREAM], args=[GROUP], client=pipe)
        results = pipe.execute()
        self.calls += len(calls)
        for i, (_, _, labelled) in enumerate(calls):
            reply, (delivered, pending) = results[3 * i + 1], results[3 * i + 2]
            found = labelled(reply)
            if found is None:
                continue
            if not end:
                yield found, (end, start, -1, ())
                continue
            seen = tuple(sorted((int(i.split(b"-")[0]), owner.decode(),
                                 min(int(idle) // TICK_MS, LOCK_TICKS), int(count))
                                for i, owner, idle, count in pending))
            last_id = delivered.split(b"-")
            yield found, (end, start, int(last_id[0]) if last_id != [b"0", b"0"] else -1, seen)


def _acked(label: str, reply: Any) -> str | None:
    return "AckRefused" if reply[0] == b"INVALID" else label


def _closed(reply: Any) -> str | None:
    return "CloseSession"


def _fetched(reply: Any) -> str | None:
    """A one-record fetch: Claim when it claimed a PEL entry, ReadNew when it read a new one,
    no step when it acquired nothing."""
    _, _, entries = reply
    if not entries:
        return None
    return "Claim" if int(entries[0][1]) > 1 else "ReadNew"


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
    broken = script_text("share_ack.lua", mutate=("first, last, total, consumer)",
                                                  "first, last, total)"))
    _, _, divergences = replay(redis_url, broken, max_divergences=1)
    assert divergences
