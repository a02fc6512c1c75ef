"""Share sessions (korvet/core/share_session.py): Kafka's epoch rules, one by one."""

from __future__ import annotations

from korvet.core import share_session as ss
from korvet.core.errors import ErrorCode

KEY = ("g", "m")
P1, P2 = ("t1", 0), ("t2", 3)


def opened(partitions: tuple[ss.SharePartitionKey, ...] = (P1,)) -> dict[ss.SessionKey,
                                                                         ss.ShareSession]:
    return {KEY: ss.ShareSession(KEY, 1, partitions, "c1")}


def test_epoch_zero_opens_and_replaces_a_session() -> None:
    verdict = ss.on_fetch({}, KEY, 0, [P1, P1], [], acknowledging=False, connection_id="c1")
    assert verdict.ok and verdict.fetch == (P1,)
    assert verdict.store == ss.ShareSession(KEY, 1, (P1,), "c1")
    again = ss.on_fetch(opened(), KEY, 0, [P2], [], acknowledging=False, connection_id="c2")
    assert again.store == ss.ShareSession(KEY, 1, (P2,), "c2") and again.drop is not None


def test_epoch_zero_with_acknowledgements_is_an_invalid_request() -> None:
    verdict = ss.on_fetch({}, KEY, 0, [P1], [], acknowledging=True, connection_id="c1")
    assert verdict.error is ErrorCode.INVALID_REQUEST and verdict.store is None


def test_the_next_epoch_adds_and_forgets_partitions() -> None:
    verdict = ss.on_fetch(opened(), KEY, 1, [P2], [P1], acknowledging=False, connection_id="c1")
    assert verdict.fetch == (P2,)
    assert verdict.store == ss.ShareSession(KEY, 2, (P2,), "c1")
    assert ss.forgotten_partitions(opened()[KEY], verdict.store) == (P1,)


def test_a_wrong_or_missing_session_is_kafkas_error() -> None:
    assert ss.on_fetch(opened(), KEY, 7, [], [], acknowledging=False,
                       connection_id="c1").error is ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert ss.on_fetch({}, KEY, 1, [], [], acknowledging=False,
                       connection_id="c1").error is ErrorCode.SHARE_SESSION_NOT_FOUND
    assert ss.on_fetch({}, KEY, -1, [], [], acknowledging=False,
                       connection_id="c1").error is ErrorCode.SHARE_SESSION_NOT_FOUND
    assert ss.on_acknowledge(opened(), KEY, 0).error is ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert ss.on_acknowledge({}, KEY, 1).error is ErrorCode.SHARE_SESSION_NOT_FOUND
    assert ss.on_acknowledge(opened(), KEY, 2).error is ErrorCode.INVALID_SHARE_SESSION_EPOCH


def test_epoch_minus_one_closes_after_acknowledging_and_fetches_nothing() -> None:
    closing = ss.on_fetch(opened(), KEY, -1, [P1], [], acknowledging=True, connection_id="c1")
    assert closing.closing and closing.fetch == () and closing.drop == opened()[KEY]
    bare = ss.on_fetch(opened(), KEY, -1, [P1], [], acknowledging=False, connection_id="c1")
    assert bare.error is ErrorCode.INVALID_REQUEST
    assert ss.on_acknowledge(opened(), KEY, -1).closing


def test_acknowledge_advances_the_epoch_and_it_wraps_to_one() -> None:
    assert ss.on_acknowledge(opened(), KEY, 1).store == ss.ShareSession(KEY, 2, (P1,), "c1")
    assert ss.next_epoch(ss.MAX_EPOCH) == 1


def test_the_table_is_bounded() -> None:
    full = {(f"g{i}", "m"): ss.ShareSession((f"g{i}", "m"), 1, (), "c") for i in range(2)}
    verdict = ss.on_fetch(full, KEY, 0, [P1], [], acknowledging=False, connection_id="c",
                          slots=2)
    assert verdict.error is ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert [s.key for s in ss.of_connection(full, "c")] == list(full)
