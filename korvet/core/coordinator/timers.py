"""When the adapter must wake the machine up, and with which timeout events.

The state holds absolute deadlines (milliseconds on the adapter's clock):
each member's session (or new-member join) deadline, each pending member's,
each group's join-phase deadline (rebalance timeout or initial rebalance
delay) and pending-sync deadline. The adapter sleeps until
``next_deadline(state)``, then steps every event of ``due_timeouts`` in turn
(a timeout that an earlier one made moot changes nothing).
"""

from __future__ import annotations

from korvet.core.coordinator.events import (
    PendingMemberTimeout,
    PendingSyncTimeout,
    RebalanceTimeout,
    SessionTimeout,
    TimeoutEvent,
)
from korvet.core.coordinator.state import CoordinatorState


def _deadlines(state: CoordinatorState) -> list[tuple[int, int, TimeoutEvent]]:
    found: list[tuple[int, int, TimeoutEvent]] = []
    for group_id, group in sorted(state.groups.items()):
        if group.join_deadline is not None:
            found.append((group.join_deadline, 0, RebalanceTimeout(group_id)))
        if group.sync_deadline is not None:
            found.append((group.sync_deadline, 1, PendingSyncTimeout(group_id)))
        for member_id, member in sorted(group.members.items()):
            if member.session_deadline is not None:
                found.append((member.session_deadline, 2, SessionTimeout(group_id, member_id)))
        for member_id, pending in sorted(group.pending.items()):
            if pending.deadline is not None:
                found.append((pending.deadline, 3, PendingMemberTimeout(group_id, member_id)))
    return found


def next_deadline(state: CoordinatorState) -> int | None:
    """The earliest armed deadline, or None when no timer is armed."""
    return min((d for d, _, _ in _deadlines(state)), default=None)


def due_timeouts(state: CoordinatorState, now_ms: int) -> tuple[TimeoutEvent, ...]:
    """The timeout events whose deadline is at or before ``now_ms``, earliest first."""
    due = [entry for entry in _deadlines(state) if entry[0] <= now_ms]
    due.sort(key=lambda entry: (entry[0], entry[1]))
    return tuple(event for _, _, event in due)
