"""The eviction and fullness rules of korvet/core/redis_memory.py."""

from __future__ import annotations

import pytest

from korvet.core.redis_memory import Eviction, MemoryReading, eviction_of, full, unsafe_message


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random",
                                    "allkeys-some-future-one"])
def test_policies_that_pick_among_every_key_are_unsafe(policy: str) -> None:
    assert eviction_of(policy) is Eviction.UNSAFE


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-lfu",
                                    "volatile-random", "volatile-ttl"])
def test_noeviction_and_volatile_policies_are_safe(policy: str) -> None:
    # the broker's data keys carry no time to live: volatile-* never picks them
    assert eviction_of(policy) is Eviction.SAFE


@pytest.mark.parametrize("policy", [None, "", "something-else"])
def test_an_unreadable_or_unknown_policy_is_unknown(policy: str | None) -> None:
    assert eviction_of(policy) is Eviction.UNKNOWN


def test_full_means_at_maxmemory_with_nothing_to_evict() -> None:
    assert full(MemoryReading("noeviction", used=100, maxmemory=100))
    assert full(MemoryReading("volatile-lru", used=101, maxmemory=100))
    assert not full(MemoryReading("noeviction", used=99, maxmemory=100))
    assert not full(MemoryReading("noeviction", used=10**9, maxmemory=0))  # no limit
    assert not full(MemoryReading("allkeys-lru", used=100, maxmemory=100))  # it evicts instead


def test_the_refusal_names_the_policy_the_command_and_the_override() -> None:
    text = unsafe_message(MemoryReading("allkeys-lru", node="10.0.0.1:7000"), "orders")
    assert "maxmemory-policy allkeys-lru" in text and "10.0.0.1:7000" in text
    assert "CONFIG SET maxmemory-policy noeviction" in text
    assert "redis.accept-eviction" in text and "'orders'" in text
