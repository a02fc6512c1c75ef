"""The lease scripts in Redis decide as korvet/core/lease.py does.

Random sequences of acquires, renewals, releases, fenced writes and fenced clean-ups of a
deleted group by three brokers run against a real redis-server through ``LeaseStore`` and,
side by side, through the pure rules; after each operation the answer and the lease record
must agree. The lease time is long (nothing expires by itself); a release (expiry set to 0)
stands for an expired lease. A fenced write or clean-up that is refused must leave the
group's snapshot and committed offset as they were; an accepted clean-up leaves nothing.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from korvet.core import lease
from korvet.storage.groups import GroupStore, PartitionRef
from korvet.storage.leases import LeaseStore
from tests.support.examples import examples

TTL = 3_600_000
GROUP = "g"
BROKERS = ("1", "2", "3")
FAR = 2**62  # a lease that has not expired

op = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(BROKERS), st.just(0)),
    st.tuples(st.just("renew"), st.sampled_from(BROKERS), st.integers(0, 4)),
    st.tuples(st.just("release"), st.sampled_from(BROKERS), st.integers(0, 4)),
    st.tuples(st.just("write"), st.sampled_from(BROKERS), st.integers(0, 4)),
    st.tuples(st.just("clean-up"), st.sampled_from(BROKERS), st.integers(0, 4)),
)
REF = PartitionRef("t", 0, "lt:{t:0}:stream", 10)


async def _run(url: str, ops: list[tuple[str, str, int]]) -> None:
    client = aioredis.Redis.from_url(url)
    groups = GroupStore(client, "lt")
    store = LeaseStore(groups)
    await client.flushdb()
    model = lease.LeaseRecord()
    snapshot: str | None = None
    offset: int | None = None
    try:
        for number, (kind, broker, token) in enumerate(ops):
            if kind == "acquire":
                grant = await store.acquire(GROUP, broker, TTL)
                allowed = lease.may_acquire(model, broker, 0)
                assert grant.granted == allowed
                if allowed:
                    model = lease.grant(model, broker, 0, FAR)
                    assert grant.token == model.token
                    assert grant.snapshot == snapshot
                else:
                    assert grant.owner == model.owner
            elif kind == "renew":
                renewed = lease.renewal(model, token, 0, FAR)
                assert await store.renew(GROUP, token, TTL) == (renewed is not None)
                model = renewed or model
            elif kind == "release":
                await store.release(GROUP, token)
                model = lease.release(model, token)
            elif kind == "write":
                text = f'{{"write": {number}}}'
                stale = await store.save_state({GROUP: token}, {GROUP: text}, [],
                                               [(GROUP, [(REF, number, None, 0)])], 0, [])
                assert (not stale) == lease.accepts(model, token)
                if not stale:
                    snapshot, offset = text, number
            else:
                committed, _ = await groups.group_data(GROUP)
                applied = await store.delete_group(GROUP, token, committed)
                assert applied == lease.accepts(model, token)
                if applied:
                    snapshot, offset = None, None
            owner, held_token, expires = await store.owner(GROUP)
            assert (owner or None, held_token) == (model.owner, model.token)
            assert (expires == 0) == (model.expires_ms == 0)
            stored: bytes | None = await client.get(groups.snapshot_key(GROUP))  # type: ignore[assignment]
            assert (stored.decode() if stored else None) == snapshot
            kept = await client.hget(groups.commit_key(REF.stream_key, GROUP), "offset")
            assert (int(kept) if kept is not None else None) == offset
            assert await client.sismember(groups.group_ids_key, GROUP) == (snapshot is not None)
    finally:
        await client.aclose()


@pytest.mark.spec("CoordinatorLease", "Acquire", "Renew", "RenewRefused", "Release", "CleanUp",
                  "Apply", "Refuse", note="the Lua scripts against the rules")
@settings(max_examples=examples(0.5), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(op, max_size=25))
def test_the_scripts_follow_the_lease_rules(redis_url: str,
                                            ops: list[tuple[str, str, int]]) -> None:
    asyncio.run(_run(redis_url, ops))
