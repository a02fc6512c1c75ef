"""A Korvet broker with one rule deliberately broken: of its coordinator machine, of its
storage path, of its transaction coordinator or of its share partitions.

``python -m tests.support.mutant_broker MUTATION serve [korvet serve flags]`` patches the
rule (korvet/core/coordinator/machine.py, korvet/core/admin.py,
korvet/core/transactions.py, korvet/storage/shares.py) in this process only, then
runs ``korvet serve``: the live run (``korvet spec test-live``), whose oracle is the intact
machine or models in the test's process, must find the difference.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from korvet.core import admin, transactions
from korvet.core import coordinator as core
from korvet.core.coordinator import machine


def _heartbeat_ignores_rebalance() -> None:
    """Heartbeat answers NONE while the group is PreparingRebalance (the rule: 27)."""
    original = machine._heartbeat

    def broken(state: core.CoordinatorState, event: core.Heartbeat, now: int) -> machine.Step:
        after, effects = original(state, event, now)
        return after, tuple(
            replace(e, error=core.ErrorCode.NONE) if isinstance(e, core.HeartbeatReply)
            and e.error is core.ErrorCode.REBALANCE_IN_PROGRESS else e for e in effects)

    machine._heartbeat = broken


def _stale_commit_accepted() -> None:
    """OffsetCommit of a member skips the generation check (the rule: ILLEGAL_GENERATION)."""
    original = machine._offset_commit

    def broken(state: core.CoordinatorState, event: core.OffsetCommit, now: int) -> machine.Step:
        group = state.groups.get(event.group_id)
        if group is not None and event.generation_id >= 0 and event.member_id in group.members:
            event = replace(event, generation_id=group.generation)
        return original(state, event, now)

    machine._offset_commit = broken


def _delete_records_past_the_end() -> None:
    """DeleteRecords to an offset past the high watermark moves the log start to the high
    watermark (Kafka: OFFSET_OUT_OF_RANGE, and the log start stays)."""
    original = admin.delete_records

    def broken(requested: int, log_start: int, high_watermark: int) -> admin.Deletion:
        return original(min(requested, high_watermark), log_start, high_watermark)

    admin.delete_records = broken


def _end_txn_retry_ignores_result() -> None:
    """An EndTxn retried after its decision is answered NONE whatever result it asks for
    (the rule: INVALID_TXN_STATE when it asks for the other one)."""
    original = transactions._retry

    def broken(record: transactions.TxnRecord, commit: bool) -> transactions.Step:
        return original(record, record.state.commits)

    transactions._retry = broken


def _release_past_the_limit() -> None:
    """A RELEASE acknowledgement of a record at its delivery limit makes it AVAILABLE again
    (the rule: ARCHIVED): the store is told a limit one higher than the group's."""
    from korvet.storage.shares import ShareStore

    original = ShareStore.acknowledge

    async def broken(self: ShareStore, topic: Any, partition: int, group: str, member: str,
                     limits: Any, acks: Any) -> Any:
        return await original(self, topic, partition, group, member,
                              replace(limits, delivery_limit=limits.delivery_limit + 1), acks)

    ShareStore.acknowledge = broken  # type: ignore[method-assign]


MUTATIONS: dict[str, Callable[[], None]] = {
    "release-past-the-limit": _release_past_the_limit,
    "end-txn-retry-ignores-result": _end_txn_retry_ignores_result,
    "delete-records-past-the-end": _delete_records_past_the_end,
    "heartbeat-ignores-rebalance": _heartbeat_ignores_rebalance,
    "stale-commit-accepted": _stale_commit_accepted,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in MUTATIONS:
        print(f"usage: mutant_broker {{{','.join(MUTATIONS)}}} serve [flags]", file=sys.stderr)
        return 2
    MUTATIONS[argv[0]]()
    from korvet.cli import main as korvet_main

    return korvet_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
