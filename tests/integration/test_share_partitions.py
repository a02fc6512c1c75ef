"""Share groups' partitions (KIP-932) over the wire: ShareFetch and ShareAcknowledge against a
broker process and its Redis, with a short lock so that expiry is seconds, not Kafka's 30.

What a share consumer sees: two sessions acquire disjoint records; ACCEPT removes a record,
RELEASE redelivers it with delivery count 2; a closed session's records come back at once,
an abandoned one's after its lock; a record at the delivery limit is archived and never
redelivered; at most ``share.partition-max-record-locks`` records are acquired at once; the
session epochs answer Kafka's errors. Requests are built with kio as a client sends them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.protocol.kbuild import make, nested
from tests.conftest import KorvetProcess
from tests.integration.test_broker_behaviour import batch, produce_request
from tests.integration.test_dense_offsets import create_dense
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients

LOCK_MS = 2000
LIMIT = 3
MAX_LOCKS = 4
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    process = KorvetProcess(Path(tmp_path_factory.mktemp("share")), extra_args=[
        "--share-record-lock-duration-ms", str(LOCK_MS),
        "--share-delivery-count-limit", str(LIMIT),
        "--share-partition-max-record-locks", str(MAX_LOCKS),
        "--share-auto-offset-reset", "earliest"]).start()
    yield process
    process.stop()


def topic_id(client: WireClient, topic: str) -> uuid.UUID:
    cls = load_request_schema(3, 12)
    response = client.request(make(cls, topics=(make(nested(cls, "MetadataRequestTopic"),
                                                      name=topic, topic_id=None),),
                                   allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False))
    found: uuid.UUID = response.topics[0].topic_id
    return found


Acks = list[tuple[int, int, int]]  # (first, last, type)


def share_fetch(client: WireClient, member: str, epoch: int, tid: uuid.UUID, *,
                acks: Acks | None = None, max_records: int = 100, max_wait_ms: int = 0,
                group: str = "g", version: int = 2, batch_size: int = 0) -> Any:
    cls = load_request_schema(78, version)
    batches = tuple(make(nested(cls, "AcknowledgementBatch"), first_offset=f, last_offset=last,
                         acknowledge_types=(kind,)) for f, last, kind in acks or [])
    partition = make(nested(cls, "FetchPartition"), partition_index=0,
                     acknowledgement_batches=batches)
    return client.request(make(
        cls, group_id=group, member_id=member, share_session_epoch=epoch, max_wait=max_wait_ms,
        min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=batch_size or max_records,
        topics=(make(nested(cls, "FetchTopic"), topic_id=tid, partitions=(partition,)),),
        forgotten_topics_data=()))


def share_ack(client: WireClient, member: str, epoch: int, tid: uuid.UUID, acks: Acks, *,
              group: str = "g", renew: bool = False) -> Any:
    cls = load_request_schema(79, 2)
    batches = tuple(make(nested(cls, "AcknowledgementBatch"), first_offset=f, last_offset=last,
                         acknowledge_types=(kind,)) for f, last, kind in acks)
    return client.request(make(
        cls, group_id=group, member_id=member, share_session_epoch=epoch, is_renew_ack=renew,
        topics=(make(nested(cls, "AcknowledgeTopic"), topic_id=tid, partitions=(
            make(nested(cls, "AcknowledgePartition"), partition_index=0,
                 acknowledgement_batches=batches),)),)))


def acquired(response: Any) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of the response's one partition."""
    assert response.error_code == ErrorCode.none, response
    if not response.responses:
        return []
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none, part
    return [(int(r.first_offset), int(r.last_offset), int(r.delivery_count))
            for r in part.acquired_records]


def record_count(response: Any) -> int:
    from aiokafka.record._crecords import DefaultRecordBatch

    data = bytes(response.responses[0].partitions[0].records or b"")
    count, pos = 0, 0
    while pos < len(data):
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        count += len(list(DefaultRecordBatch(data[pos:pos + 12 + length])))
        pos += 12 + length
    return count


def ack_error(response: Any) -> int:
    return int(response.responses[0].partitions[0].acknowledge_error_code)


def produced(broker: KorvetProcess, topic: str, count: int) -> uuid.UUID:
    create_dense(broker.bootstrap, topic)
    with WireClient(broker.bootstrap) as client:
        if count:
            client.request(produce_request(topic, {0: batch(count)}))
        return topic_id(client, topic)


@pytest.mark.spec("SharePartition", "Acquire", "OneOwner")
def test_two_sessions_acquire_disjoint_records(broker: KorvetProcess, unique_name: str) -> None:
    tid = produced(broker, unique_name, 4)
    with WireClient(broker.bootstrap) as a, WireClient(broker.bootstrap) as b:
        first = share_fetch(a, "a", 0, tid, max_records=2, batch_size=1)
        assert acquired(first) == [(0, 0, 1), (1, 1, 1)]  # BatchSize 1: one record a range
        assert record_count(first) == 2
        assert first.acquisition_lock_timeout.total_seconds() * 1000 == LOCK_MS
        assert acquired(share_fetch(b, "b", 0, tid, max_records=10)) == [(2, 3, 1)]
        assert acquired(share_fetch(a, "a", 1, tid)) == []  # nothing left to acquire
        assert owners(broker, unique_name) == [
            (b"0-1", b"m:a"), (b"1-1", b"m:a"), (b"2-1", b"m:b"), (b"3-1", b"m:b")]


def owners(broker: KorvetProcess, topic: str) -> list[tuple[bytes, bytes]]:
    """The partition's share group's pending entries: (entry id, Redis consumer)."""
    pending = redis.Redis.from_url(broker.redis_url).xpending_range(
        f"korvet:{{{topic}:0}}:stream", "share:g", "-", "+", 100)
    return [(bytes(p["message_id"]), bytes(p["consumer"])) for p in pending]  # type: ignore[arg-type]


@pytest.mark.spec("SharePartition", "Accept", "Release", "AckRefused")
def test_accept_removes_and_release_redelivers_with_count_two(broker: KorvetProcess,
                                                              unique_name: str) -> None:
    tid = produced(broker, unique_name, 4)
    with WireClient(broker.bootstrap) as a, WireClient(broker.bootstrap) as b:
        assert acquired(share_fetch(a, "a", 0, tid)) == [(0, 3, 1)]
        # the acknowledgements ride on the next fetch, which gets the released ones again
        again = share_fetch(a, "a", 1, tid, acks=[(0, 1, ACCEPT), (2, 3, RELEASE)])
        assert ack_error(again) == 0
        assert acquired(again) == [(2, 3, 2)]
        assert record_count(again) == 2
        done = share_ack(a, "a", 2, tid, [(2, 2, ACCEPT), (3, 3, RELEASE)])
        assert done.responses[0].partitions[0].error_code == ErrorCode.none
        assert acquired(share_fetch(b, "b", 0, tid)) == [(3, 3, 3)]
        twice = share_ack(a, "a", 3, tid, [(0, 0, ACCEPT)])  # already accepted
        assert twice.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state


@pytest.mark.spec("SharePartition", "CloseSession", "Tick", "AckRefused")
def test_a_closed_session_releases_at_once_and_an_abandoned_lock_runs_out(
        broker: KorvetProcess, unique_name: str) -> None:
    tid = produced(broker, unique_name, 3)
    with WireClient(broker.bootstrap) as b:
        with WireClient(broker.bootstrap) as a:
            assert acquired(share_fetch(a, "a", 0, tid, max_records=2)) == [(0, 1, 1)]
        # a's connection closed: its records are parked, available again at once (well
        # before the lock would run out)
        deadline = time.monotonic() + LOCK_MS / 4000
        while owners(broker, unique_name) != [(b"0-1", b"park"), (b"1-1", b"park")]:
            assert time.monotonic() < deadline, owners(broker, unique_name)
            time.sleep(0.02)
        epoch = 1
        assert acquired(share_fetch(b, "b", 0, tid, max_records=2)) == [(0, 1, 2)]
        with WireClient(broker.bootstrap) as c:
            assert acquired(share_fetch(c, "c", 0, tid)) == [(2, 2, 1)]
            assert acquired(share_fetch(c, "c", 1, tid)) == []  # b and c hold everything
            started = time.monotonic()
            # b abandons its records without closing: they come back when the lock runs out
            back = share_fetch(c, "c", 2, tid, acks=[(2, 2, ACCEPT)], max_wait_ms=3 * LOCK_MS)
            waited = time.monotonic() - started
            assert acquired(back) == [(0, 1, 3)]
            assert LOCK_MS / 1000 * 0.5 < waited < LOCK_MS / 1000 * 2.5
        late = share_ack(b, "b", epoch, tid, [(0, 1, ACCEPT)])
        assert late.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state


@pytest.mark.spec("SharePartition", "CountWithinLimit", "Released")
def test_a_record_at_the_delivery_limit_is_archived(broker: KorvetProcess,
                                                    unique_name: str) -> None:
    tid = produced(broker, unique_name, 1)
    with WireClient(broker.bootstrap) as a:
        counts = []
        acks: Acks = []
        for epoch in range(LIMIT + 1):
            got = acquired(share_fetch(a, "a", epoch, tid, acks=acks))
            counts += [c for _, _, c in got]
            acks = [(0, 0, RELEASE)] if got else []
        assert counts == list(range(1, LIMIT + 1))  # delivered LIMIT times, then never again
        assert acquired(share_fetch(a, "a", LIMIT + 1, tid)) == []
    group = redis.Redis.from_url(broker.redis_url).xinfo_groups(
        f"korvet:{{{unique_name}:0}}:stream")[0]
    assert group["pending"] == 0  # archived: acknowledged in Redis


@pytest.mark.spec("SharePartition", "Tick", "CountWithinLimit")
def test_a_record_whose_last_lock_runs_out_is_archived(broker: KorvetProcess,
                                                        unique_name: str) -> None:
    tid = produced(broker, unique_name, 1)
    with WireClient(broker.bootstrap) as a:
        acks: Acks = []
        for epoch in range(LIMIT):
            assert acquired(share_fetch(a, "a", epoch, tid, acks=acks)) == [(0, 0, epoch + 1)]
            acks = [(0, 0, RELEASE)]
        # the last delivery is never acknowledged: when its lock runs out it is archived
        started = time.monotonic()
        assert acquired(share_fetch(a, "a", LIMIT, tid, max_wait_ms=2 * LOCK_MS)) == []
        assert time.monotonic() - started >= 1.5 * LOCK_MS / 1000  # waited it out
    assert owners(broker, unique_name) == []


@pytest.mark.spec("SharePartition", "InFlightBounded", "MaxInFlight")
def test_the_in_flight_limit_counts_records(broker: KorvetProcess, unique_name: str) -> None:
    tid = produced(broker, unique_name, MAX_LOCKS + 3)
    with WireClient(broker.bootstrap) as a, WireClient(broker.bootstrap) as b:
        assert acquired(share_fetch(a, "a", 0, tid)) == [(0, MAX_LOCKS - 1, 1)]
        assert acquired(share_fetch(b, "b", 0, tid)) == []
        share_ack(a, "a", 1, tid, [(0, 1, ACCEPT)])
        assert acquired(share_fetch(b, "b", 1, tid)) == [(MAX_LOCKS, MAX_LOCKS + 1, 1)]


def test_a_long_poll_wakes_on_an_append(broker: KorvetProcess, unique_name: str) -> None:
    tid = produced(broker, unique_name, 0)

    def later() -> None:
        time.sleep(0.5)
        with WireClient(broker.bootstrap) as producer:
            producer.request(produce_request(unique_name, {0: batch(2)}))

    with WireClient(broker.bootstrap) as a:
        assert acquired(share_fetch(a, "a", 0, tid)) == []
        thread = threading.Thread(target=later)
        thread.start()
        started = time.monotonic()
        got = acquired(share_fetch(a, "a", 1, tid, max_wait_ms=10_000))
        thread.join()
        assert got == [(0, 1, 1)]
        assert time.monotonic() - started < 5


def test_session_epochs_and_errors(broker: KorvetProcess, unique_name: str) -> None:
    tid = produced(broker, unique_name, 2)
    with WireClient(broker.bootstrap) as a:
        none = share_fetch(a, "x", 3, tid)
        assert none.error_code == ErrorCode.share_session_not_found
        assert share_ack(a, "x", 0, tid, []).error_code == ErrorCode.invalid_share_session_epoch
        assert acquired(share_fetch(a, "x", 0, tid, max_records=1)) == [(0, 0, 1)]
        stale = share_fetch(a, "x", 5, tid)
        assert stale.error_code == ErrorCode.invalid_share_session_epoch
        unknown = share_fetch(a, "x", 1, uuid.uuid4())
        assert {p.error_code for t in unknown.responses for p in t.partitions} == {
            ErrorCode.none, ErrorCode.unknown_topic_id}
        # closing (epoch -1) applies its acknowledgements and releases the rest
        closed = share_ack(a, "x", -1, tid, [(0, 0, RELEASE)])
        assert closed.responses[0].partitions[0].error_code == ErrorCode.none
        assert share_fetch(a, "x", 2, tid).error_code == ErrorCode.share_session_not_found
        # the session's second fetch (epoch 1) acquired offset 1 too; both come back
        assert acquired(share_fetch(a, "y", 0, tid)) == [(0, 1, 2)]


def test_api_versions_lists_share_fetch_and_acknowledge(broker: KorvetProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        cls = load_request_schema(18, 3)
        keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in client.request(
            make(cls, client_software_name="t", client_software_version="1")).api_keys}
    assert keys[78] == (1, 2) and keys[79] == (1, 2)


def test_version_one_and_renew(broker: KorvetProcess, unique_name: str) -> None:
    tid = produced(broker, unique_name, 2)
    with WireClient(broker.bootstrap) as a:
        assert acquired(share_fetch(a, "a", 0, tid, version=1)) == [(0, 1, 1)]
        refused = share_ack(a, "a", 1, tid, [(0, 0, RENEW)])  # RENEW without IsRenewAck
        assert refused.responses[0].partitions[0].error_code == ErrorCode.invalid_request
        time.sleep(LOCK_MS / 2000)
        renewed = share_ack(a, "a", 2, tid, [(0, 0, RENEW)], renew=True)
        assert renewed.responses[0].partitions[0].error_code == ErrorCode.none
        time.sleep(LOCK_MS / 1000 * 0.75)  # offset 1's lock ran out, the renewed one's not
        late = share_ack(a, "a", 3, tid, [(1, 1, ACCEPT)])
        assert late.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
        assert share_ack(a, "a", 4, tid, [(0, 0, ACCEPT)]).responses[0].partitions[
            0].error_code == ErrorCode.none


def test_a_batches_topic_is_refused_with_a_message(broker: KorvetProcess,
                                                   unique_name: str) -> None:
    create_dense(broker.bootstrap, unique_name, "batches")
    with WireClient(broker.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(2)}))
        tid = topic_id(client, unique_name)
        part = share_fetch(client, "a", 0, tid).responses[0].partitions[0]
    assert part.error_code == ErrorCode.invalid_request
    assert "records storage format" in part.error_message
    assert not part.acquired_records


def test_acls_topic_read_and_group_read(tmp_path: Path, unique_name: str) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    secured = KorvetProcess(tmp_path / "acl", extra_args=[
        "--authorizer-enabled", "--authorizer-allow-everyone-if-no-acl-found",
        "--share-auto-offset-reset", "earliest"]).start()
    try:
        tid = produced(secured, unique_name, 1)
        admin = AdminClient({"bootstrap.servers": secured.bootstrap})
        denials = [AclBinding(kind, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                              AclOperation.READ, AclPermissionType.DENY)
                   for kind, name in ((ResourceType.TOPIC, unique_name),
                                      (ResourceType.GROUP, "denied"))]
        for future in admin.create_acls(denials).values():
            future.result(30)
        with WireClient(secured.bootstrap) as client:
            deadline = time.monotonic() + 20  # the broker's ACL snapshot follows Redis
            while True:
                part = share_fetch(client, "a", 0, tid).responses[0].partitions[0]
                if part.error_code == ErrorCode.topic_authorization_failed or (
                        time.monotonic() > deadline):
                    break
                time.sleep(0.2)
            assert part.error_code == ErrorCode.topic_authorization_failed
            assert not part.acquired_records
            group = share_fetch(client, "a", 0, tid, group="denied")
            assert group.error_code == ErrorCode.group_authorization_failed
    finally:
        secured.stop()


def test_the_state_survives_a_killed_broker(tmp_path: Path, unique_name: str) -> None:
    """The share partition lives in Redis: after the broker is killed (no session closes, no
    release), accepted records stay accepted, the held ones come back once their locks run
    out, with their delivery counts, and the new broker's sessions start afresh."""
    process = KorvetProcess(tmp_path / "restart", extra_args=[
        "--share-record-lock-duration-ms", str(LOCK_MS), "--share-auto-offset-reset",
        "earliest"]).start()
    try:
        tid = produced(process, unique_name, 4)
        a = WireClient(process.bootstrap)
        assert acquired(share_fetch(a, "a", 0, tid)) == [(0, 3, 1)]
        assert ack_error(share_fetch(a, "a", 1, tid, acks=[(0, 1, ACCEPT)])) == 0
        process.kill()  # with a's connection open: nothing is released
        a.close()
        process.start()
        with WireClient(process.bootstrap) as b:
            assert share_fetch(b, "a", 2, tid).error_code == ErrorCode.share_session_not_found
            back = share_fetch(b, "b", 0, tid, max_wait_ms=4 * LOCK_MS)
            assert acquired(back) == [(2, 3, 2)]
    finally:
        process.stop()
