"""Share groups (KIP-932): ShareGroupHeartbeat (76), ShareFetch (78), ShareAcknowledge (79).

Each check joins a share group as a share consumer does (ShareGroupHeartbeat with a client
member id and epoch 0, on the group's coordinator), sets the group to start at the earliest
record (IncrementalAlterConfigs on the GROUP resource, share.auto.offset.reset=earliest),
then fetches and acknowledges with raw requests, session epochs counted as a client counts
them (0 opens the session, then 1, 2, ...).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from korvet.conformance.harness.context import CheckContext, expect, expect_eq, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import Ops, Topic
from korvet.conformance.kafka.records import Rec, decode_records
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "ShareFetch (78) / ShareAcknowledge (79)"
SOURCE = "KIP-932 (queues for Kafka); ShareFetchRequest.json / ShareAcknowledgeRequest.json"
ACCEPT, RELEASE, REJECT = 1, 2, 3
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP


@dataclass
class ShareMember:
    """One share consumer: its group, client-chosen member id and share session epoch."""

    ops: Ops
    group: str
    member: str
    session_epoch: int = 0
    last: Any = None  # the last ShareFetch response acquire() got

    def topic_id(self, topic: Topic) -> uuid.UUID:
        return topic.topic_id or self.ops.topic_id_of(topic.name)

    def fetch(self, topic: Topic, *, acks: list[tuple[int, int, int]] | None = None,
              max_records: int = 100, max_wait_ms: int = 500, max_bytes: int = 1 << 20) -> Any:
        response = self.ops.call(
            ApiKey.SHARE_FETCH, self.ops.v(ApiKey.SHARE_FETCH, lo=1, hi=1),
            group_id=self.group, member_id=self.member, share_session_epoch=self.session_epoch,
            max_wait=max_wait_ms, min_bytes=1, max_bytes=max_bytes, max_records=max_records,
            batch_size=max_records, topics=[{"topic_id": self.topic_id(topic), "partitions": [
                {"partition_index": 0, "acknowledgement_batches": _batches(acks or [])}]}],
            forgotten_topics_data=[])
        if int(response.error_code) == ErrorCode.NONE:
            self.session_epoch += 1
        return response

    def acknowledge(self, topic: Topic, acks: list[tuple[int, int, int]]) -> Any:
        response = self.ops.call(
            ApiKey.SHARE_ACKNOWLEDGE, self.ops.v(ApiKey.SHARE_ACKNOWLEDGE, lo=1, hi=1),
            group_id=self.group, member_id=self.member, share_session_epoch=self.session_epoch,
            topics=[{"topic_id": self.topic_id(topic), "partitions": [
                {"partition_index": 0, "acknowledgement_batches": _batches(acks)}]}])
        if int(response.error_code) == ErrorCode.NONE:
            self.session_epoch += 1
        return response

    def acquire(self, topic: Topic, wanted: int, *, seconds: float = 20.0,
                acks: list[tuple[int, int, int]] | None = None,
                max_bytes: int = 1 << 20) -> list[tuple[int, int]]:
        """ShareFetch until ``wanted`` records were acquired: (offset, delivery count) each,
        in offset order. A share group's first fetches may come back empty, or with an error
        on the partition, while the broker initializes the share partition (Apache Kafka
        4.3.1 answers UNKNOWN_SERVER_ERROR while its share-group state topic is being made):
        a share consumer fetches again, and so does this, until ``seconds`` have passed."""
        found: list[tuple[int, int]] = []
        errors: list[str] = []
        deadline = time.monotonic() + seconds
        pending = acks
        while len(found) < wanted:
            response = self.fetch(topic, acks=pending, max_bytes=max_bytes)
            expect_error(response.error_code, ErrorCode.NONE, "ShareFetch")
            self.last = response
            for part in _partitions(response):
                if int(part.error_code) != ErrorCode.NONE:
                    errors.append(f"error {int(part.error_code)}")
                    continue
                pending = None  # the acknowledgements went with a fetch that was served
                found += [(offset, int(run.delivery_count)) for run in part.acquired_records
                          for offset in range(int(run.first_offset), int(run.last_offset) + 1)]
            expect(time.monotonic() < deadline,
                   f"ShareFetch acquired {found} within {seconds:.0f}s, {wanted} records wanted "
                   f"(partition errors on the way: {errors[-3:]})")
        return sorted(found)


def _batches(acks: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    return [{"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}
            for first, last, kind in acks]


def _partitions(response: Any) -> list[Any]:
    return [p for t in response.responses for p in t.partitions]


def _ack_error(response: Any) -> int:
    """The partition's acknowledgement error: ShareAcknowledge's error code, ShareFetch's
    acknowledge error code."""
    found = [int(getattr(p, "acknowledge_error_code", p.error_code)) for p in _partitions(response)]
    expect(len(found) == 1, f"one partition in the answer, got {len(found)}")
    return found[0]


def join(ops: Ops, topic: Topic) -> ShareMember:
    """A new share group, starting at the earliest record, and one member of it."""
    group = f"share-{uuid.uuid4().hex[:12]}"
    response = ops.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, None, validate_only=False, resources=[
        {"resource_type": GROUP_RESOURCE, "resource_name": group,
         "configs": [{"name": "share.auto.offset.reset", "config_operation": 0,
                      "value": "earliest"}]}])
    expect_error(response.responses[0].error_code, ErrorCode.NONE,
                 "IncrementalAlterConfigs share.auto.offset.reset=earliest on the group")
    host, port = ops.coordinator_address(group)
    coordinator = Ops(ops.session, ops.session.client(host, port))
    member = str(uuid.uuid4())
    beat = coordinator.call(ApiKey.SHARE_GROUP_HEARTBEAT,
                            coordinator.v(ApiKey.SHARE_GROUP_HEARTBEAT, lo=1, hi=1),
                            group_id=group, member_id=member, member_epoch=0, rack_id=None,
                            subscribed_topic_names=[topic.name])
    expect_error(beat.error_code, ErrorCode.NONE, "ShareGroupHeartbeat joining the group")
    expect(int(beat.member_epoch) > 0, f"member epoch {beat.member_epoch} after joining")
    return ShareMember(ops, group, member)


def _filled(ops: Ops, count: int) -> tuple[Topic, list[int]]:
    topic = ops.create_topic()
    base = ops.produce_ok(topic, 0, [Rec(f"r{i}".encode(), key=f"k{i}".encode())
                                     for i in range(count)])
    return topic, list(range(base, base + count))


@check("share.fetch.acquires_then_accepts", api=API,
       asserts="A share consumer's ShareFetch acquires the partition's records with delivery "
               "count 1; after ShareAcknowledge ACCEPT of all of them, a second member of the "
               "group acquires nothing of them.",
       source=SOURCE)
def acquires_then_accepts(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _filled(ops, 3)
    first = join(ops, topic)
    expect_eq(first.acquire(topic, 3), [(o, 1) for o in offsets], "acquired (offset, count)")
    reply = first.acknowledge(topic, [(offsets[0], offsets[-1], ACCEPT)])
    expect_error(reply.error_code, ErrorCode.NONE, "ShareAcknowledge")
    expect_error(_ack_error(reply), ErrorCode.NONE, "ShareAcknowledge ACCEPT of the records")
    second = ShareMember(ops, first.group, str(uuid.uuid4()))
    response = second.fetch(topic, max_wait_ms=300)
    taken = [r for p in _partitions(response) for r in p.acquired_records]
    expect_eq(taken, [], "records a second member acquires after all were accepted")


@check("share.fetch.release_redelivers", api=API,
       asserts="A record released by ShareAcknowledge RELEASE is acquired again at once, with "
               "delivery count 2.",
       source=SOURCE)
def release_redelivers(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _filled(ops, 2)
    member = join(ops, topic)
    expect_eq(member.acquire(topic, 2), [(o, 1) for o in offsets], "first acquisition")
    again = member.acquire(topic, 1, acks=[(offsets[0], offsets[0], RELEASE),
                                           (offsets[1], offsets[1], ACCEPT)])
    expect_eq(again, [(offsets[0], 2)], "acquired after releasing the first, accepting the second")


@check("share.acknowledge.other_members_record_refused", api=API,
       asserts="ShareAcknowledge ACCEPT of a record another member of the group acquired answers "
               "INVALID_RECORD_STATE (121) for the partition, and the record stays the owner's: "
               "the owner's ACCEPT of it succeeds.",
       source=f"{SOURCE}; SharePartition.acknowledge (only the acquiring member acknowledges)")
def other_members_record(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _filled(ops, 1)
    owner = join(ops, topic)
    expect_eq(owner.acquire(topic, 1), [(offsets[0], 1)], "the owner's acquisition")
    other = ShareMember(ops, owner.group, str(uuid.uuid4()))
    other.fetch(topic, max_wait_ms=300)  # opens its session (epoch 0)
    refused = other.acknowledge(topic, [(offsets[0], offsets[0], ACCEPT)])
    expect_error(refused.error_code, ErrorCode.NONE, "ShareAcknowledge (top level)")
    expect_error(_ack_error(refused), ErrorCode.INVALID_RECORD_STATE,
                 "another member's ACCEPT of the owner's record")
    accepted = owner.acknowledge(topic, [(offsets[0], offsets[0], ACCEPT)])
    expect_error(_ack_error(accepted), ErrorCode.NONE, "the owner's ACCEPT")


@check("share.fetch.wrong_session_epoch", api=API,
       asserts="ShareFetch with a share session epoch the broker did not expect (5 on a session "
               "at 1) answers INVALID_SHARE_SESSION_EPOCH (123); a member without a session that "
               "sends epoch 1 gets SHARE_SESSION_NOT_FOUND (122).",
       source=f"{SOURCE}; ShareSessionCache / SharePartitionManager.newContext")
def wrong_session_epoch(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, _ = _filled(ops, 1)
    member = join(ops, topic)
    member.fetch(topic, max_wait_ms=0)
    member.session_epoch = 5
    expect_error(member.fetch(topic).error_code, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                 "ShareFetch at epoch 5 on a session at 1")
    stranger = ShareMember(ops, member.group, str(uuid.uuid4()), session_epoch=1)
    expect_error(stranger.fetch(topic).error_code, ErrorCode.SHARE_SESSION_NOT_FOUND,
                 "ShareFetch at epoch 1 without a session")


@check("share.fetch.new_session_keeps_the_members_records", api=API,
       asserts="ShareFetch with share session epoch 0 from a member that has a session opens a "
               "new one in its place (no error), and the records the member acquired in the old "
               "one stay its own, locked: neither its new session nor another member acquires "
               "them, and its ShareAcknowledge ACCEPT of them in the new session succeeds.",
       source=f"{SOURCE}; SharePartitionManager.newContext (a full request replaces the "
              "session; acquired records are released only when the session is closed, "
              "epoch -1, or its connection ends)")
def new_session_keeps_the_members_records(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic, offsets = _filled(ops, 2)
    member = join(ops, topic)
    expect_eq(member.acquire(topic, 2), [(o, 1) for o in offsets], "first acquisition")
    member.session_epoch = 0
    reopened = member.fetch(topic, max_wait_ms=500)
    expect_error(reopened.error_code, ErrorCode.NONE, "ShareFetch at epoch 0 over an open session")
    taken = [(int(r.first_offset), int(r.last_offset)) for p in _partitions(reopened)
             for r in p.acquired_records]
    expect_eq(taken, [], "records the new session acquires")
    other = ShareMember(ops, member.group, str(uuid.uuid4()))
    response = other.fetch(topic, max_wait_ms=500)
    taken = [(int(r.first_offset), int(r.last_offset)) for p in _partitions(response)
             for r in p.acquired_records]
    expect_eq(taken, [], "records another member acquires")
    accepted = member.acknowledge(topic, [(offsets[0], offsets[-1], ACCEPT)])
    expect_error(accepted.error_code, ErrorCode.NONE, "ShareAcknowledge in the new session")
    expect_error(_ack_error(accepted), ErrorCode.NONE, "ACCEPT of the records of the old session")


@check("share.fetch.max_bytes_limits_acquisition", api=API,
       asserts="ShareFetch MaxBytes limits what is acquired, not only what is sent: over five "
               "records of 1 KB, each produced in a batch of its own, MaxBytes 1 still acquires "
               "and returns the first record (and only it); MaxBytes 2500 then acquires the next "
               "two, exactly the records of the complete batches returned, within 2500 bytes; "
               "the last two were never acquired, so another member of the group acquires them "
               "at once, delivery count 1.",
       source=f"{SOURCE}; KIP-74 (the first batch is returned even if larger than the limit); "
              "observed on Apache Kafka 4.3.1 (SharePartition.acquire takes the batches the "
              "log read returned within MaxBytes)")
def max_bytes_limits_acquisition(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic()
    offsets = [ops.produce_ok(topic, 0, [Rec(b"%d" % i + b"." * 1000)]) for i in range(5)]
    member = join(ops, topic)
    for max_bytes, wanted in ((1, offsets[:1]), (2500, offsets[1:3])):
        acquired = member.acquire(topic, 1, max_bytes=max_bytes)
        expect_eq(acquired, [(o, 1) for o in wanted], f"acquired with MaxBytes {max_bytes}")
        batches, records, _ = decode_records(_partitions(member.last)[0].records)
        expect_eq([r.offset for r in records], wanted,
                  f"records returned with MaxBytes {max_bytes}")
        size = sum(b.size for b in batches)
        expect(len(batches) == 1 or size <= max_bytes,
               f"{len(batches)} batches of {size} bytes in all returned with MaxBytes {max_bytes}")
    other = ShareMember(ops, member.group, str(uuid.uuid4()))
    expect_eq(other.acquire(topic, 2), [(o, 1) for o in offsets[3:]],
              "what another member acquires: the records the size-limited fetches left")


RENEW = 4  # AcknowledgeType.RENEW (ShareFetch and ShareAcknowledge v2, KIP-1222)


@check("share.fetch.renew_only_asks_for_nothing", api=API,
       asserts="A ShareFetch v2 with IsRenewAck fetches nothing, so it must ask for nothing: "
               "with MaxBytes (or MaxWait, MinBytes, MaxRecords) above 0 it answers "
               "INVALID_REQUEST (42), before the session is looked at; with all of them 0 it "
               "renews the locks it names (RENEW, error NONE) and acquires nothing, and a renew "
               "request that names no partition answers none. A RENEW acknowledgement in a "
               "request without IsRenewAck is refused for its partition (INVALID_REQUEST).",
       source=f"{SOURCE}; KIP-1222 (renew acknowledgements); observed on Apache Kafka 4.3.1")
def renew_only_asks_for_nothing(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    version = ops.v(ApiKey.SHARE_FETCH, lo=2)
    topic, offsets = _filled(ops, 2)
    member = join(ops, topic)
    expect_eq(member.acquire(topic, 2), [(o, 1) for o in offsets], "first acquisition")
    tid = member.topic_id(topic)
    renew = [{"first_offset": offsets[0], "last_offset": offsets[0], "acknowledge_types": [RENEW]}]

    def fetch(epoch: int, *, is_renew: bool, acks: list[dict[str, Any]] | None,
              max_bytes: int = 0, member_id: str | None = None) -> Any:
        return ops.call(ApiKey.SHARE_FETCH, version, group_id=member.group,
                        member_id=member_id or member.member, share_session_epoch=epoch,
                        max_wait=0, min_bytes=0, max_bytes=max_bytes, max_records=0, batch_size=0,
                        is_renew_ack=is_renew, forgotten_topics_data=[], topics=[] if acks is None
                        else [{"topic_id": tid, "partitions": [
                            {"partition_index": 0, "acknowledgement_batches": acks}]}])

    stranger = fetch(1, is_renew=True, acks=None, max_bytes=1 << 20, member_id=str(uuid.uuid4()))
    expect_error(stranger.error_code, ErrorCode.INVALID_REQUEST,
                 "IsRenewAck with MaxBytes 1 MiB, from a member without a session at epoch 1")
    asking = fetch(member.session_epoch, is_renew=True, acks=renew, max_bytes=1 << 20)
    expect_error(asking.error_code, ErrorCode.INVALID_REQUEST, "IsRenewAck with MaxBytes 1 MiB")
    renewed = fetch(member.session_epoch, is_renew=True, acks=renew)
    expect_error(renewed.error_code, ErrorCode.NONE, "IsRenewAck, all 0, renewing one record")
    member.session_epoch += 1
    expect_eq([(int(p.acknowledge_error_code), [r.first_offset for r in p.acquired_records])
               for p in _partitions(renewed)], [(ErrorCode.NONE, [])],
              "the partition's acknowledge error and acquired records after RENEW")
    bare = fetch(member.session_epoch, is_renew=True, acks=None)
    expect_error(bare.error_code, ErrorCode.NONE, "IsRenewAck, all 0, naming no partition")
    member.session_epoch += 1
    expect_eq(len(_partitions(bare)), 0, "partitions answered to a renew request naming none")
    plain = member.fetch(topic, acks=[(offsets[1], offsets[1], RENEW)], max_wait_ms=0)
    expect_error(plain.error_code, ErrorCode.NONE, "ShareFetch (top level) with a RENEW acknowledgement")
    expect_error(_ack_error(plain), ErrorCode.INVALID_REQUEST,
                 "a RENEW acknowledgement in a request without IsRenewAck")


@check("share.group_config.kept_within_the_brokers_bounds", api="IncrementalAlterConfigs (44)",
       asserts="A share group's own configs are held within the broker's bounds at Kafka's "
               "defaults: share.record.lock.duration.ms 15000..60000, share.delivery.count.limit "
               "2..10, share.partition.max.record.locks 100..4000, share.session.timeout.ms "
               "45000..60000, share.heartbeat.interval.ms 5000..15000; a value just outside is "
               "INVALID_CONFIG (40) and stores nothing, a value at each end is accepted.",
       source="KIP-932 (group.share.min/max.* broker configs); Kafka GroupConfig.validate; "
              "measured on Apache Kafka 4.3.1 with its default broker configs")
def group_config_bounds(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    cases = [("share.record.lock.duration.ms", "15000", "14999", "60000", "60001"),
             ("share.delivery.count.limit", "2", "1", "10", "11"),
             ("share.partition.max.record.locks", "100", "99", "4000", "4001"),
             ("share.session.timeout.ms", "45000", "44999", "60000", "60001"),
             ("share.heartbeat.interval.ms", "5000", "4999", "15000", "15001")]
    group = f"share-{uuid.uuid4().hex[:12]}"
    for name, least, below, most, above in cases:
        for value, expected in ((below, ErrorCode.INVALID_CONFIG), (above, ErrorCode.INVALID_CONFIG),
                                (least, ErrorCode.NONE), (most, ErrorCode.NONE)):
            response = ops.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, None, validate_only=False,
                                resources=[{"resource_type": GROUP_RESOURCE, "resource_name": group,
                                            "configs": [{"name": name, "config_operation": 0,
                                                         "value": value}]}])
            expect_error(response.responses[0].error_code, expected, f"{name}={value}")
