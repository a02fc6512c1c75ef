"""The decoders (korvet/protocol/decoders/) give one version-free value for every version a
handler serves: what a version lacks takes Kafka's meaning, and nothing a version has is lost.

Each request is built, for every served version, from one set of plain values (kbuild.make
keeps the fields the version has), then decoded; the value must be what that version says."""

from __future__ import annotations

import uuid

import pytest

from korvet.core import fetch_session as sessions
from korvet.core.api_keys import ApiKey
from korvet.core.fetch import FetchLimits
from korvet.core.list_offsets import EpochPartition, ListOffsetsPartition
from korvet.core.produce import ProducePartition
from korvet.protocol.decoders.fetch import decode_fetch, topic_id_of, topic_name_of
from korvet.protocol.decoders.offsets import decode_list_offsets, decode_offset_for_leader_epoch
from korvet.protocol.decoders.produce import decode_produce
from korvet.protocol.framing import request_class
from korvet.protocol.kbuild import has_field, make, nested
from korvet.server.api import declared

TOPIC_ID = uuid.UUID("8f2b5e56-9d1c-4b44-9a53-2c1f3f6c8a11")


def _versions(key: ApiKey) -> list[int]:
    return list(declared(key).versions)


@pytest.mark.parametrize("version", _versions(ApiKey.PRODUCE))
def test_produce_names_its_topics_or_their_ids(version: int) -> None:
    cls = request_class(ApiKey.PRODUCE, version)
    partition = make(nested(cls, "PartitionProduceData"), index=2, records=b"batch")
    topic = make(nested(cls, "TopicProduceData"), name="orders", topic_id=TOPIC_ID,
                 partition_data=(partition,))
    call = decode_produce(make(cls, transactional_id=None, acks=-1, timeout=1000,
                               topic_data=(topic,)))
    (decoded,) = call.topics
    assert (call.acks, call.transactional_id) == (-1, None)
    assert decoded.partitions == (ProducePartition(2, b"batch"),)
    if version >= 13:
        assert (decoded.name, decoded.topic_id, decoded.by_id) == (None, str(TOPIC_ID), True)
    else:
        assert (decoded.name, decoded.topic_id, decoded.by_id) == ("orders", None, False)


@pytest.mark.parametrize("version", _versions(ApiKey.FETCH))
def test_fetch_says_its_limits_sessions_and_partitions(version: int) -> None:
    cls = request_class(ApiKey.FETCH, version)
    partition = make(nested(cls, "FetchPartition"), partition=1, current_leader_epoch=3,
                     fetch_offset=40, last_fetched_epoch=-1, log_start_offset=-1,
                     partition_max_bytes=1024)
    topic = make(nested(cls, "FetchTopic"), topic="orders", topic_id=TOPIC_ID,
                 partitions=(partition,))
    forgotten = make(nested(cls, "ForgottenTopic"), topic="old", topic_id=TOPIC_ID,
                     partitions=(5,)) if version >= 7 else None
    request = make(cls, replica_id=-1, max_wait=500, min_bytes=1, max_bytes=4096,
                   isolation_level=0, session_id=77, session_epoch=2, topics=(topic,),
                   forgotten_topics_data=(forgotten,) if forgotten else (), rack_id="",
                   cluster_id=None, replica_state=None)
    call = decode_fetch(request)
    by_id = version >= 13
    key = str(TOPIC_ID) if by_id else "orders"
    assert call.limits == FetchLimits(500, 1, 4096)
    assert call.requested == sessions.FetchRequested(
        77 if version >= 7 else sessions.INVALID_SESSION_ID,
        2 if version >= 7 else sessions.FINAL_EPOCH, by_id,
        (sessions.PartitionRequest(key, 1, 40, 1024, 3 if version >= 9 else -1),),
        ((str(TOPIC_ID) if by_id else "old", 5),) if version >= 7 else ())
    assert topic_name_of(topic) == (None if by_id else "orders")
    assert topic_id_of(topic) == (TOPIC_ID if by_id else None)


@pytest.mark.parametrize("version", _versions(ApiKey.LIST_OFFSETS))
def test_list_offsets_reads_leader_epochs_and_isolation_where_a_version_has_them(
        version: int) -> None:
    cls = request_class(ApiKey.LIST_OFFSETS, version)
    partition = make(nested(cls, "ListOffsetsPartition"), partition_index=0,
                     current_leader_epoch=4, timestamp=-2, max_num_offsets=1)
    request = make(cls, replica_id=-1, isolation_level=1, timeout=1000, topics=(
        make(nested(cls, "ListOffsetsTopic"), name="orders", partitions=(partition,)),))
    call = decode_list_offsets(request)
    assert call.isolation_level == (1 if has_field(cls, "isolation_level") else 0)
    (topic,) = call.topics
    assert topic.name == "orders"
    assert topic.partitions == (ListOffsetsPartition(0, -2, 4 if version >= 4 else -1),)


@pytest.mark.parametrize("version", _versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch_reads_both_epochs(version: int) -> None:
    cls = request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    partition = make(nested(cls, "OffsetForLeaderPartition"), partition=2,
                     current_leader_epoch=1, leader_epoch=0)
    (topic,) = decode_offset_for_leader_epoch(make(cls, replica_id=-2, topics=(
        make(nested(cls, "OffsetForLeaderTopic"), topic="orders", partitions=(partition,)),)))
    assert (topic.name, topic.partitions) == ("orders", (EpochPartition(2, 1, 0),))
