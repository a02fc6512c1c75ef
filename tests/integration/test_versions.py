"""Every advertised version of the data-path APIs answers correctly, and pipelined
requests on one connection are answered in order."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.core.api_keys import ApiKey
from korvet.protocol.framing import decode_response, encode_request, response_class
from korvet.protocol.kbuild import has_field, make, nested
from korvet.protocol.records import Record, build_batch
from korvet.server.api import declared
from tests.conftest import KorvetProcess
from tests.integration.test_broker_behaviour import list_offsets, request
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients


def _topic_id(client: WireClient, topic: str) -> uuid.UUID:
    cls = load_request_schema(3, 12)
    response = client.request(make(cls, topics=(make(nested(cls, "MetadataRequestTopic"),
                                                     topic_id=uuid.UUID(int=0), name=topic),),
                                   allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False))
    return uuid.UUID(str(response.topics[0].topic_id))


def _produce(version: int, topic: str, topic_id: uuid.UUID, payload: bytes) -> Any:
    cls = load_request_schema(0, version)
    partition = make(nested(cls, "PartitionProduceData"), index=0, records=payload)
    data = make(nested(cls, "TopicProduceData"), name=topic, topic_id=topic_id,
                partition_data=(partition,))
    return make(cls, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                topic_data=(data,))


def _fetch(version: int, topic: str, topic_id: uuid.UUID, offset: int) -> Any:
    cls = load_request_schema(1, version)
    part = make(nested(cls, "FetchPartition"), partition=0, current_leader_epoch=-1,
                fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20, replica_directory_id=None)
    topic_entry = make(nested(cls, "FetchTopic"), topic=topic, topic_id=topic_id,
                       partitions=(part,))
    replica_state = (make(nested(cls, "ReplicaState"), replica_id=-1, replica_epoch=-1)
                     if has_field(cls, "replica_state") else None)
    return make(cls, cluster_id=None, replica_id=-1, replica_state=replica_state,
                max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 24,
                isolation_level=0, session_id=0, session_epoch=-1, topics=(topic_entry,),
                forgotten_topics_data=(), rack_id="")


def test_every_produce_and_fetch_version(korvet: KorvetProcess, unique_name: str) -> None:
    from aiokafka.record._crecords import DefaultRecordBatch

    create_topic(korvet.bootstrap, unique_name, partitions=1)
    stamp = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        topic_id = _topic_id(client, unique_name)
        bases = {}
        for version in declared(ApiKey.PRODUCE).versions:
            payload = build_batch([Record(stamp, f"p{version}".encode(), b"v", [])])
            response = client.request(_produce(version, unique_name, topic_id, payload))
            result = response.responses[0].partition_responses[0]
            assert result.error_code == ErrorCode.none, f"Produce v{version}: {result.error_code}"
            bases[version] = int(result.base_offset)
        assert sorted(bases.values()) == list(bases.values()), "offsets not increasing"
        first = min(bases.values())
        for version in declared(ApiKey.FETCH).versions:
            response = client.request(_fetch(version, unique_name, topic_id, first))
            part = response.responses[0].partitions[0]
            assert part.error_code == ErrorCode.none, f"Fetch v{version}: {part.error_code}"
            keys = [r.key for r in DefaultRecordBatch(bytes(part.records))]
            assert keys == [f"p{v}".encode() for v in declared(ApiKey.PRODUCE).versions], f"Fetch v{version}"
            assert part.high_watermark == max(bases.values()) + 1


def test_every_list_offsets_and_metadata_version(korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=2)
    with WireClient(korvet.bootstrap) as client:
        latest = list_offsets(client, unique_name, 1, -1)[0]
        for version in declared(ApiKey.LIST_OFFSETS).versions:
            cls = load_request_schema(2, version)
            part = make(nested(cls, "ListOffsetsPartition"), partition_index=1,
                        current_leader_epoch=-1, timestamp=-1, max_num_offsets=1)
            response = client.request(make(cls, replica_id=-1, isolation_level=0,
                                           timeout=datetime.timedelta(seconds=1), topics=(
                make(nested(cls, "ListOffsetsTopic"), name=unique_name, partitions=(part,)),)))
            result = response.topics[0].partitions[0]
            assert (result.error_code, result.offset) == (ErrorCode.none, latest), f"v{version}"
        for version in declared(ApiKey.METADATA).versions:
            cls = load_request_schema(3, version)
            wanted = make(nested(cls, "MetadataRequestTopic"), name=unique_name,
                          topic_id=uuid.UUID(int=0))
            response = client.request(make(cls, topics=(wanted,), allow_auto_topic_creation=False,
                                           include_cluster_authorized_operations=False,
                                           include_topic_authorized_operations=False))
            (topic,) = response.topics
            assert topic.error_code == ErrorCode.none, f"Metadata v{version}"
            assert [p.partition_index for p in topic.partitions] == [0, 1]
            assert response.brokers[0].port == korvet.port


def test_pipelined_requests_are_answered_in_order(korvet: KorvetProcess) -> None:
    with WireClient(korvet.bootstrap) as client:
        frames = b"".join(encode_request(
            request(18, version % 4, client_software_name="t", client_software_version="1")
            if version % 2 else request(3, 1, topics=()), 1000 + version) for version in range(20))
        client.send_raw(frames)
        for version in range(20):
            api, ver = (18, version % 4) if version % 2 else (3, 1)
            correlation, _ = decode_response(client.read_frame(), response_class(api, ver))
            assert correlation == 1000 + version


def test_a_burst_of_pipelined_produces_is_stored_and_answered_in_order(
        korvet: KorvetProcess, unique_name: str) -> None:
    """Produce requests that arrive together (a backlog: each one's append is sent to Redis
    before the next is decoded) and other requests between them: answers in request order,
    offsets in request order, and a fetch returns the records in that order."""
    from aiokafka.record._crecords import DefaultRecordBatch

    create_topic(korvet.bootstrap, unique_name, partitions=1)
    stamp = int(time.time() * 1000)
    count = 30
    with WireClient(korvet.bootstrap) as client:
        topic_id = _topic_id(client, unique_name)
        frames = b"".join(
            encode_request(_produce(9, unique_name, topic_id, build_batch(
                [Record(stamp, f"k{i}".encode(), b"v" * 100, []) for _ in range(3)]))
                if i % 3 else request(18, 3, client_software_name="t",
                                      client_software_version="1"), 5000 + i)
            for i in range(count))
        client.send_raw(frames)
        bases = []
        for i in range(count):
            api, version = (0, 9) if i % 3 else (18, 3)
            correlation, response = decode_response(client.read_frame(), response_class(api, version))
            assert correlation == 5000 + i
            if api == 0:
                result = response.responses[0].partition_responses[0]
                assert result.error_code == ErrorCode.none
                bases.append(int(result.base_offset))
        assert bases == sorted(bases) and len(set(bases)) == len(bases)
        response = client.request(_fetch(12, unique_name, topic_id, bases[0]))
        keys = [r.key for batch in _batches(bytes(response.responses[0].partitions[0].records))
                for r in DefaultRecordBatch(batch)]
    assert keys == [f"k{i}".encode() for i in range(count) if i % 3 for _ in range(3)]


def _batches(data: bytes) -> list[bytes]:
    """Split a fetch's records into its record batches (base offset 8 B, length 4 B, ...)."""
    out = []
    while len(data) >= 12:
        end = 12 + int.from_bytes(data[8:12], "big")
        out.append(data[:end])
        data = data[end:]
    return out
