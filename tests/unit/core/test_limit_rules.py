"""The listener's limit rules (korvet/core/limits.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from korvet.core import limits as rules

counts = st.integers(min_value=0, max_value=50)


@given(counts, counts, st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=40))
def test_admission_refuses_at_either_limit_and_names_it(total: int, from_address: int,
                                                       max_total: int, max_per_ip: int) -> None:
    limits = rules.Limits(max_connections=max_total, max_connections_per_ip=max_per_ip)
    refusal = rules.admission(total, from_address, limits)
    if total >= max_total:
        assert refusal == "max.connections"
    elif from_address >= max_per_ip:
        assert refusal == "max.connections.per.ip"
    else:
        assert refusal is None


@given(st.lists(st.integers(min_value=-300, max_value=300), max_size=60),
       st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400))
def test_reading_pauses_above_the_high_mark_and_resumes_at_the_low_one(
        changes: list[int], a: int, b: int) -> None:
    low, high = sorted((a, b))
    limits = rules.Limits(max_pending_bytes=high, resume_pending_bytes=low)
    pending, paused = 0, False
    for change in changes:
        pending = max(0, pending + change)
        now = rules.reading_paused(paused, pending, limits)
        if pending > high:
            assert now, "reading goes on above the high mark"
        elif pending <= low:
            assert not now, "reading stays paused at or below the low mark"
        else:
            assert now == paused, "between the marks nothing changes"
        paused = now


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6),
       st.integers(min_value=0, max_value=3), st.integers(min_value=-5, max_value=10**5))
def test_a_connection_is_idle_only_with_nothing_in_hand_for_longer_than_the_timeout(
        now: int, last: int, in_hand: int, idle_ms: int) -> None:
    limits = rules.Limits(idle_ms=idle_ms)
    idle = rules.idle(now, last, in_hand, limits)
    assert idle == (idle_ms > 0 and in_hand == 0 and now - last > idle_ms)
