"""Pending work of a group goes on only under the token it was decided with
(korvet/core/lease.py ``holds``: spec/CoordinatorLease.tla's ``CleanUp`` requires ``Owns``).

The clean-up of a deleted group runs in the background after the step that deleted it; by
the time it sends its write the broker may have lost the group, been granted it again (a new
token), or reached its own deadline. Each of those must stop the work: a write of the old
token would be refused anyway, but one of a new token would remove what the new incarnation
of the group holds.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core import lease


@pytest.mark.spec("CoordinatorLease", "CleanUp", note="the token the clean-up was decided with")
@given(st.integers(0, 4), st.integers(0, 4), st.integers(0, 30), st.integers(0, 30))
def test_work_goes_on_only_under_its_own_token_while_believed(
        held_token: int, token: int, until: int, now: int) -> None:
    held = lease.Held(held_token, until) if held_token else lease.NOT_HELD
    expected = token != 0 and held_token == token and now < until
    assert lease.holds(held, token, now) is expected


def test_a_new_grant_or_a_lost_lease_cancels_pending_work() -> None:
    granted = lease.after_grant(1, 0, 10, 2)
    assert lease.holds(granted, 1, 0)
    # granted again (a restarted process of the same broker, or after a lost write): token 2
    again = lease.after_grant(2, 5, 10, 2)
    assert lease.holds(again, 2, 5) and not lease.holds(again, 1, 5)
    # a refused write, and a write without an answer, drop the group
    for outcome in (lease.WriteOutcome.REFUSED, lease.WriteOutcome.UNKNOWN):
        assert not lease.holds(lease.after_write(granted, 1, outcome), 1, 0)
    # the broker's own deadline (grant time plus TTL minus the margin)
    assert not lease.holds(granted, 1, granted.until_ms)
