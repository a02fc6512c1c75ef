"""The share scripts on a real redis-server do what the share partition's rules say.

``ScriptsMachine`` (Hypothesis) drives share_fetch.lua, share_ack.lua and share_release.lua
on one partition's stream and meta hash (keys named as ``RedisStore`` names them) and,
beside them, ``RedisGroupModel`` (korvet/core/share_partition.py), whose rules
tests/unit/core/test_share_partition.py checks against Kafka's share partition through
SharePartitionRedis.tla's mapping. After every step Redis' pending entries list (each
entry's owner and delivery counter, from XPENDING) and the group's last-delivered id are
the model's, and every fetch acquires, and every acknowledgement is refused or applied,
alike. Time is the model's: a tick sets each pending entry's idle time to the model's
(XCLAIM to its owner with IDLE and JUSTID, which changes neither owner nor counter), with a
lock long enough that the milliseconds the test itself takes never cross it.

Copies of the scripts with one guard broken must diverge (``test_a_broken_script_diverges``):
the acknowledgement without the ownership check (SharePartitionRedis.tla's mutant
-XAckUnowned), a release that keeps the lock (-ReleaseKeepsLock), a claim without the
delivery-count check (-PelConsistent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from korvet.core.share_partition import PARK, AckType, RedisGroupModel, ShareLimits
from korvet.server.batching import entries_to_batches
from korvet.storage.entries import entry_fields
from korvet.storage.redis_store import _lua

LIMITS = ShareLimits(lock_ms=60_000, delivery_limit=2, max_locks=4)  # Kafka's least limit
TICKS = (15_000, 30_000, 60_000)  # multiples of a quarter lock: far from its edge
STREAM, META, GROUP = "sp:{t:0}:stream", "sp:{t:0}:partition", "share:g"
CONSUMERS = ("m:a", "m:b")
SCRIPTS = ("share_fetch.lua", "share_ack.lua", "share_release.lua")


class ScriptsMachine(RuleBasedStateMachine):
    client: redis.Redis
    scripts: tuple[Any, Any, Any]  # share_fetch, share_ack, share_release, registered

    def __init__(self) -> None:
        super().__init__()
        self.client.delete(STREAM, META)
        self.model = RedisGroupModel()

    @rule(n=st.integers(1, 3))
    def append(self, n: int) -> None:
        for o in range(self.model.end, self.model.end + n):
            self.client.xadd(STREAM, {"v": str(o)}, id=f"{o}-1")
        self.client.hset(META, mapping={"last": f"{self.model.end + n - 1}-1"})
        self.client.hsetnx(META, "start", "0-1")
        self.model = self.model.append(n)

    @rule(c=st.sampled_from(CONSUMERS), n=st.integers(1, 5))
    def fetch(self, c: str, n: int) -> None:
        _, archived, entries = self.scripts[0](keys=[STREAM, META], args=[
            GROUP, c, LIMITS.lock_ms, LIMITS.delivery_limit, LIMITS.max_locks, n, "0", PARK])
        got = [(int(e[0].split(b"-")[0]), int(e[1])) for e in entries]
        self.model, expected, gone = self.model.fetch(c, LIMITS, n)
        assert (got, archived) == (expected, len(gone))
        for (o, _), e in zip(got, entries, strict=True):
            assert e[2] == [b"v", str(o).encode()]  # the record itself comes with it

    @rule(c=st.sampled_from(CONSUMERS), data=st.data())
    def acknowledge(self, c: str, data: st.DataObject) -> None:
        if not self.model.end:
            return
        # mostly pending records (someone's, or the caller's), sometimes any offset
        held = sorted(self.model.pel) or [0]
        offsets = data.draw(st.lists(st.one_of(st.sampled_from(held),
                                               st.integers(0, self.model.end - 1)),
                                     min_size=1, max_size=3, unique=True).map(sorted))
        kinds = data.draw(st.lists(st.sampled_from(list(AckType)), min_size=len(offsets),
                                   max_size=len(offsets)))
        self.acknowledge_these(c, offsets, kinds)

    def acknowledge_these(self, c: str, offsets: list[int], kinds: list[AckType]) -> None:
        args: list[Any] = [GROUP, c, LIMITS.lock_ms, LIMITS.delivery_limit, PARK]
        for o, kind in zip(offsets, kinds, strict=True):
            args += [f"{o}-1", int(kind)]
        reply = self.scripts[1](keys=[STREAM, META], args=args)
        self.model, effects = self.model.acknowledge(
            c, list(zip(offsets, kinds, strict=True)), LIMITS)
        assert (reply[0] == b"OK") == bool(effects), (reply, effects)

    @rule(ms=st.sampled_from(TICKS))
    def tick(self, ms: int) -> None:
        self.model = self.model.tick(ms, LIMITS)
        for o, entry in self.model.pel.items():
            if o < self.model.log_start:
                continue  # XCLAIM would drop a trimmed entry's reference (Redis >= 7)
            self.client.xclaim(STREAM, GROUP, entry.owner, 0, [f"{o}-1"], idle=entry.idle_ms,
                          justid=True)

    @rule(c=st.sampled_from(CONSUMERS))
    def close(self, c: str) -> None:
        released, archived = self.scripts[2](keys=[STREAM, META], args=[
            GROUP, c, LIMITS.lock_ms, LIMITS.delivery_limit, PARK])
        before = self.model
        self.model, gone = self.model.release(c, LIMITS)
        mine = sum(1 for o, e in before.pel.items() if e.owner == c and o >= before.log_start)
        assert (released, archived) == (mine - len(gone), len(gone))

    @rule(data=st.data())
    def trim(self, data: st.DataObject) -> None:
        if self.model.log_start >= self.model.end:
            return
        s = data.draw(st.integers(self.model.log_start + 1, self.model.end))
        self.client.xtrim(STREAM, minid=f"{s}-1", approximate=False)  # as append.lua keeps it
        self.client.hset(META, "start", f"{s}-1")
        self.model = self.model.trim(s)

    @invariant()
    def the_pel_is_the_models(self) -> None:
        if not self.client.exists(STREAM) or not any(
                g["name"] == GROUP.encode() for g in self.client.xinfo_groups(STREAM)):
            assert not self.model.pel and self.model.last_id == -1
            return
        pending: list[dict[str, Any]] = self.client.xpending_range(
            STREAM, GROUP, "-", "+", 1000)
        found = {int(p["message_id"].split(b"-")[0]): (p["consumer"].decode(),
                                                       int(p["times_delivered"]))
                 for p in pending}
        assert found == {o: (e.owner, e.count) for o, e in self.model.pel.items()}
        group = next(g for g in self.client.xinfo_groups(STREAM) if g["name"] == GROUP.encode())
        last = group["last-delivered-id"].split(b"-")[0]
        assert int(last) == self.model.last_id or (self.model.last_id == -1 and last == b"0")


def machine(url: str, texts: dict[str, str]) -> type[RuleBasedStateMachine]:
    """The machine on the Redis at ``url`` with these scripts' texts."""
    client = redis.Redis.from_url(url)
    registered = tuple(client.register_script(texts[name]) for name in SCRIPTS)
    return type("ScriptsMachineOn", (ScriptsMachine,), {"client": client, "scripts": registered})


_SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None,
                     suppress_health_check=list(HealthCheck))


def scripts() -> dict[str, str]:
    return {name: _lua(name) for name in SCRIPTS}


@pytest.mark.spec("SharePartitionRedis", "Claim", "ReadNew", "Accept", "Reject", "Release", "Renew",
                   "AckRefused", "Guard", "CloseSession", "ArchiveAtLimit", "DropTrimmed",
                   "lastId", "pel", note="the Lua scripts on redis-server against the rules")
def test_the_scripts_do_what_the_rules_say(redis_url: str) -> None:
    run_state_machine_as_test(machine(redis_url, scripts()), settings=_SETTINGS)


def _unowned(texts: dict[str, str]) -> None:
    # the guard's XPENDING without its consumer filter: any consumer's entry passes
    texts["share_ack.lua"] = texts["share_ack.lua"].replace("first, last, total, consumer)",
                                                            "first, last, total)")


def _release_keeps_lock(texts: dict[str, str]) -> None:
    texts["share_ack.lua"] = texts["share_ack.lua"].replace(
        "in_chunks(parks, {'XCLAIM', stream, group, park, 0}, {'IDLE', lock, 'JUSTID'})",
        "in_chunks(parks, {'XCLAIM', stream, group, consumer, 0}, {'JUSTID'})")


def _claim_past_limit(texts: dict[str, str]) -> None:
    texts["share_fetch.lua"] = texts["share_fetch.lua"].replace(
        "if count >= limit then", "if false then")


# One sequence of steps per broken guard: the intact scripts take each as the rules do
# (test_the_scripts_agree_on_the_sequences_that_break_their_guards), and the copy with that
# guard broken must diverge on it. Explicit sequences, not a random search: 300 random runs
# missed a broken copy in about one suite run of five.
Steps = tuple[tuple[str, tuple[Any, ...]], ...]  # (the machine's rule, its arguments), in order
BREAKING: dict[str, tuple[Callable[[dict[str, str]], None], Steps]] = {
    # b accepts the record a holds
    "XAckUnowned": (_unowned, (
        ("append", (1,)), ("fetch", ("m:a", 1)),
        ("acknowledge_these", ("m:b", [0], [AckType.ACCEPT])))),
    # a releases its record: it must go back to the park, available to all
    "ReleaseKeepsLock": (_release_keeps_lock, (
        ("append", (1,)), ("fetch", ("m:a", 1)),
        ("acknowledge_these", ("m:a", [0], [AckType.RELEASE])))),
    # delivered twice (the limit), its lock expires: it is archived, not delivered a third time
    "ClaimPastLimit": (_claim_past_limit, (
        ("append", (1,)), ("fetch", ("m:a", 1)), ("tick", (LIMITS.lock_ms,)),
        ("fetch", ("m:b", 1)), ("tick", (LIMITS.lock_ms,)), ("fetch", ("m:a", 1)))),
}


def _play(url: str, texts: dict[str, str], steps: Steps) -> None:
    """Take ``steps`` on a fresh machine, checking its invariant after each as Hypothesis does."""
    played = machine(url, texts)()
    assert isinstance(played, ScriptsMachine)
    for name, args in steps:
        getattr(played, name)(*args)
        played.the_pel_is_the_models()


@pytest.mark.parametrize("guard", list(BREAKING))
def test_the_scripts_agree_on_the_sequences_that_break_their_guards(redis_url: str,
                                                                   guard: str) -> None:
    _play(redis_url, scripts(), BREAKING[guard][1])


@pytest.mark.parametrize("guard", list(BREAKING))
def test_a_broken_script_diverges(redis_url: str, guard: str) -> None:
    mutate, steps = BREAKING[guard]
    texts = scripts()
    original = dict(texts)
    mutate(texts)
    assert texts != original, "the mutation no longer applies to the script"
    with pytest.raises(AssertionError):
        _play(redis_url, texts, steps)


_HEADERS = st.lists(st.tuples(st.text("abcxyz", min_size=1, max_size=8),
                              st.none() | st.binary(max_size=40)), max_size=3)
_RECORDS = st.lists(st.tuples(st.none() | st.binary(max_size=150),
                              st.none() | st.binary(max_size=2500), _HEADERS),
                    min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=_RECORDS, released=st.integers(0, 8), data=st.data())
def test_a_fetch_acquires_what_fits_in_its_bytes(redis_url: str,
                                                records: list[tuple[Any, Any, Any]],
                                                released: int, data: st.DataObject) -> None:
    """share_fetch.lua with a byte budget (ShareFetch's MaxBytes) acquires the longest run of
    records, lowest first (released ones, then new), whose sizes as record batches of their
    own fit in it, and at least one; the response built from them (the handler's
    entries_to_batches) stays within the budget, so nothing acquired is held back."""
    client = redis.Redis.from_url(redis_url)
    client.delete(STREAM, META)
    fetch, _, release = (client.register_script(_lua(name)) for name in SCRIPTS)
    command: Any = client.execute_command  # redis-py leaves it untyped
    raw: list[Any] = []
    for o, (key, value, headers) in enumerate(records):
        fields = entry_fields((1_700_000_000_000 + o, key, value, headers))
        command(b"XADD", STREAM, f"{o + 1}-1", *fields)  # a header name may come twice
        raw.append([f"{o + 1}-1".encode(), fields])
    client.hset(META, mapping={"last": f"{len(records)}-1", "start": "1-1"})

    def args(wanted: int, *budget: int) -> list[Any]:
        return [GROUP, "m:a", LIMITS.lock_ms, LIMITS.delivery_limit, 100, wanted, "0", PARK, "0",
                *budget]

    if released:  # some records delivered once and released: claimed first, then new ones
        fetch(keys=[STREAM, META], args=args(released))
        release(keys=[STREAM, META], args=[GROUP, "m:a", LIMITS.lock_ms,
                                           LIMITS.delivery_limit, PARK])
    alone = [len(entries_to_batches([e], 0, 1 << 62, force_first=True)[0]) for e in raw]
    fitting = data.draw(st.integers(1, len(raw)))
    budget = max(sum(alone[:fitting]) + data.draw(st.integers(-2, 2)), 0)
    _, _, got = fetch(keys=[STREAM, META], args=args(100, budget))
    taken = [e[0] for e in got]
    expected = max(1, *(n for n in range(len(raw) + 1) if sum(alone[:n]) <= budget))
    assert taken == [e[0] for e in raw[:expected]]
    sent = entries_to_batches([[e[0], e[2]] for e in got], 0, 1 << 62, force_first=True)
    assert sent[1] == len(got)
    assert len(sent[0]) <= budget or len(got) == 1
    pending = client.xpending(STREAM, GROUP)["pending"]
    assert pending == max(len(got), min(released, len(raw)))  # nothing else was locked
