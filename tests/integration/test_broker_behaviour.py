"""The broker's behaviour at the wire: bad input, produce/fetch semantics, retention, sharing.

Raw requests go through kio (tests/support/wire.py); records through real clients.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.protocol.framing import encode_request
from korvet.protocol.kbuild import make, nested
from korvet.protocol.records import Record, build_batch
from tests.conftest import KORVET, SECOND_BROKER, KorvetProcess
from tests.integration import clients
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients


def request(api_key: int, version: int, **fields: Any) -> Any:
    return make(load_request_schema(api_key, version), **fields)


def produce_request(topic: str, partitions: dict[int, bytes], acks: int = -1,
                    version: int = 9) -> Any:
    cls = load_request_schema(0, version)
    topic_cls = nested(cls, "TopicProduceData")
    partition_cls = nested(cls, "PartitionProduceData")
    data = make(topic_cls, name=topic, partition_data=tuple(
        make(partition_cls, index=p, records=records) for p, records in partitions.items()))
    return make(cls, transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10),
                topic_data=(data,))


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
                  partition_max_bytes: int = 1024 * 1024, version: int = 12,
                  current_leader_epoch: int = -1, last_fetched_epoch: int = -1) -> Any:
    cls = load_request_schema(1, version)
    part = make(nested(cls, "FetchPartition"), partition=partition,
                current_leader_epoch=current_leader_epoch,
                fetch_offset=offset, last_fetched_epoch=last_fetched_epoch, log_start_offset=-1,
                partition_max_bytes=partition_max_bytes)
    return make(cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0,
                session_epoch=-1, topics=(make(nested(cls, "FetchTopic"), topic=topic,
                                                partitions=(part,)),),
                forgotten_topics_data=(), rack_id="")


def list_offsets(client: WireClient, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    cls = load_request_schema(2, 7)
    part = make(nested(cls, "ListOffsetsPartition"), partition_index=partition,
                current_leader_epoch=-1, timestamp=timestamp)
    response = client.request(make(cls, replica_id=-1, isolation_level=0, topics=(
        make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=(part,)),)))
    result = response.topics[0].partitions[0]
    assert result.error_code == ErrorCode.none
    return int(result.offset), int(result.timestamp)


def batch(count: int, *, start: int = 0, size: int = 10, timestamp: int | None = None,
          compression: int = 0) -> bytes:
    stamp = timestamp if timestamp is not None else int(time.time() * 1000)
    return build_batch([Record(stamp, f"k{start + i}".encode(), bytes([i % 256]) * size, [])
                        for i in range(count)], compression=compression)


def xlen(broker: KorvetProcess, topic: str, partition: int = 0) -> int:
    out = subprocess.run(["redis-cli", "-u", broker.redis_url, "XLEN",
                          f"korvet:{{{topic}:{partition}}}:stream"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def api_versions_ok(broker: KorvetProcess) -> bool:
    with WireClient(broker.bootstrap) as client:
        return bool(client.request(request(18, 3, client_software_name="t",
                                           client_software_version="1")).error_code == 0)


# --- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "release"), [("", "1.0"), ("lib", ""), ("-lib", "1"), ("lib", "1.0 beta")])
def test_api_versions_refuses_client_software_kafka_would_refuse(korvet: KorvetProcess, name: str,
                                                                 release: str) -> None:
    """KIP-511: from v3 a client names its software; Kafka answers INVALID_REQUEST to a name or
    version outside [a-zA-Z0-9](?:[a-zA-Z0-9-.]*[a-zA-Z0-9])? (found by the differential mode)."""
    with WireClient(korvet.bootstrap) as client:
        refused = client.request(request(18, 3, client_software_name=name, client_software_version=release))
        accepted = client.request(request(18, 3, client_software_name="lib-x.y",
                                          client_software_version="2.1"))
    assert (refused.error_code, accepted.error_code) == (ErrorCode.invalid_request, ErrorCode.none)


def test_garbage_frame_closes_only_that_connection(korvet: KorvetProcess) -> None:
    with WireClient(korvet.bootstrap) as bystander, WireClient(korvet.bootstrap) as attacker:
        bystander.request(request(18, 3, client_software_name="a", client_software_version="1"))
        attacker.send_raw(struct.pack(">i", 40) + os.urandom(40))
        assert attacker.is_closed_by_peer()
        assert bystander.request(request(18, 0)).error_code == ErrorCode.none
    assert api_versions_ok(korvet)


def test_a_request_announcing_billions_of_entries_closes_only_that_connection(
        korvet: KorvetProcess) -> None:
    """A 29-byte Metadata v12 whose topics array announces 4,294,967,294 entries: kio's
    reader sized the array from the count and the failed allocation aborted the broker (a
    new user's fuzzing found it). Now only the sender's connection closes."""
    frame = bytes.fromhex("0003000c00000001000178" "00" "ffffffff0f" "0000000000000000")
    with WireClient(korvet.bootstrap) as bystander, WireClient(korvet.bootstrap) as attacker:
        bystander.request(request(18, 3, client_software_name="a", client_software_version="1"))
        attacker.send_raw(struct.pack(">i", len(frame)) + frame)
        assert attacker.is_closed_by_peer()
        assert bystander.request(request(18, 0)).error_code == ErrorCode.none
    assert "announces 4294967294 entries" in korvet.log_tail(200)
    assert api_versions_ok(korvet)


def test_oversized_frame_is_rejected_before_it_is_read(korvet: KorvetProcess) -> None:
    with WireClient(korvet.bootstrap) as client:
        client.send_raw(struct.pack(">i", 200 * 1024 * 1024))  # over the 100 MiB default
        assert client.is_closed_by_peer()
    assert "exceeds broker.max-request-bytes" in korvet.log_tail(200)
    assert api_versions_ok(korvet)


def test_truncated_frame_then_disconnect_leaves_the_broker_serving(korvet: KorvetProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", korvet.port))
    sock.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x03" + b"\x00" * 20)
    sock.close()
    assert api_versions_ok(korvet)


def test_unknown_api_key_closes_the_connection_like_kafka(korvet: KorvetProcess) -> None:
    with WireClient(korvet.bootstrap) as client:
        client.send_raw(struct.pack(">ihhih", 10, 9999, 0, 7, -1))
        assert client.is_closed_by_peer()
    assert api_versions_ok(korvet)


def test_newer_api_versions_request_gets_v0_unsupported_version_with_the_list(
        korvet: KorvetProcess) -> None:
    with WireClient(korvet.bootstrap) as client:
        client.send_raw(struct.pack(">ihhih", 10, 18, 99, 5, -1))
        frame = client.read_frame()
    correlation, error, count = struct.unpack_from(">ihi", frame, 0)
    assert (correlation, error) == (5, ErrorCode.unsupported_version)
    keys = {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(count)}
    assert {0, 1, 2, 3, 18} <= keys


def test_bad_crc_is_corrupt_message_and_nothing_is_written(korvet: KorvetProcess,
                                                           unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=2)
    good = batch(5)
    bad = bytearray(batch(5))
    bad[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(unique_name, {0: bytes(bad), 1: good}))
    results = {p.index: p for p in response.responses[0].partition_responses}
    assert results[0].error_code == ErrorCode.corrupt_message
    assert results[1].error_code == ErrorCode.none
    assert xlen(korvet, unique_name, 0) == 0, "a refused batch left records behind"
    assert xlen(korvet, unique_name, 1) == 5


def test_request_with_a_corrupt_second_batch_writes_neither(korvet: KorvetProcess,
                                                            unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    bad = bytearray(batch(3))
    bad[30] ^= 0x01  # inside the CRC-covered header
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(unique_name, {0: batch(4) + bytes(bad)}))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    assert xlen(korvet, unique_name) == 0


@pytest.mark.parametrize("storage_format", ["records", "batches"])
def test_a_gzip_bomb_is_message_too_large(korvet: KorvetProcess, unique_name: str,
                                         storage_format: str) -> None:
    """One record of 101 MiB of zeros, about 100 KB of gzip on the wire (under the topic's
    max.message.bytes): its records would hold more than socket.request.max.bytes (100 MiB),
    so it is MESSAGE_TOO_LARGE, which clients do not retry, and nothing is stored. Before, it
    was decompressed, stored and answered; a bigger one failed in Redis as a retriable
    KAFKA_STORAGE_ERROR, retried until the broker held gigabytes."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from korvet.protocol.records import build_batch

    topic = f"{unique_name}-{storage_format}"
    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"korvet.storage.format": storage_format})]
                        )[topic].result(30)
    bomb = build_batch([(0, None, bytes(101 * 1024 * 1024), [])], compression=1)
    assert len(bomb) < 1_000_000
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(topic, {0: bomb}))
    assert response.responses[0].partition_responses[0].error_code == (
        ErrorCode.message_too_large)
    assert xlen(korvet, topic) == 0


def test_produce_to_unknown_topic_and_partition(korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        missing = client.request(produce_request(unique_name + "-nope", {0: batch(1)}))
        beyond = client.request(produce_request(unique_name, {3: batch(1)}))
    assert missing.responses[0].partition_responses[0].error_code == (
        ErrorCode.unknown_topic_or_partition)
    assert beyond.responses[0].partition_responses[0].error_code == (
        ErrorCode.unknown_topic_or_partition)


def test_invalid_acks_and_acks_zero(korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        bad = client.request(produce_request(unique_name, {0: batch(1)}, acks=2))
        assert bad.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks
        client.send_raw(encode_request(produce_request(unique_name, {0: batch(7)}, acks=0), 99))
        # acks=0 has no response: the next response on the connection answers the next request.
        assert client.request(request(18, 0)).error_code == ErrorCode.none
    assert xlen(korvet, unique_name) == 7


def test_record_far_in_the_future_is_invalid_timestamp(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    future = int(time.time() * 1000) + 2 * 3_600_000
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(unique_name, {0: batch(2, timestamp=future)}))
    result = response.responses[0].partition_responses[0]
    assert result.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in result.record_errors] == [0, 1]
    assert xlen(korvet, unique_name) == 0


# --- compression ---------------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_from_librdkafka(codec: str, korvet: KorvetProcess,
                                            unique_name: str) -> None:
    from confluent_kafka import Producer

    create_topic(korvet.bootstrap, unique_name, partitions=1)
    producer = Producer({"bootstrap.servers": korvet.bootstrap, "compression.type": codec,
                         "linger.ms": 20})
    values = [(f"{codec}-{i}-" * 20).encode() for i in range(500)]
    for i, value in enumerate(values):
        producer.produce(unique_name, key=str(i).encode(), value=value, partition=0)
    assert producer.flush(30) == 0
    got = clients.confluent_consume(korvet.bootstrap, unique_name, 1, len(values))
    assert [g.value for g in got] == values


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_from_kafka_python(codec: str, korvet: KorvetProcess,
                                              unique_name: str) -> None:
    from kafka import KafkaProducer

    create_topic(korvet.bootstrap, unique_name, partitions=1)
    producer = KafkaProducer(bootstrap_servers=korvet.bootstrap, compression_type=codec)
    values = [(f"{codec}-{i}-" * 10).encode() for i in range(300)]
    for value in values:
        producer.send(unique_name, value=value, partition=0)
    producer.flush(30)
    producer.close()
    got = clients.kafka_python_consume(korvet.bootstrap, unique_name, 1, len(values))
    assert [g.value for g in got] == values


# --- fetch ---------------------------------------------------------------------------------

def test_long_poll_waits_for_max_wait_without_data(korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        earliest = list_offsets(client, unique_name, 0, -2)[0]
        started = time.monotonic()
        response = client.request(fetch_request(unique_name, 0, earliest, max_wait_ms=1500))
        waited = time.monotonic() - started
    assert 1.4 <= waited < 4.0, f"an empty fetch returned after {waited:.2f}s"
    assert not response.responses[0].partitions[0].records


def test_long_poll_returns_as_soon_as_a_record_arrives(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        end = list_offsets(client, unique_name, 0, -1)[0]

        def produce_later() -> None:
            time.sleep(0.5)
            with WireClient(korvet.bootstrap) as producer:
                producer.request(produce_request(unique_name, {0: batch(3)}))

        thread = threading.Thread(target=produce_later)
        thread.start()
        started = time.monotonic()
        response = client.request(fetch_request(unique_name, 0, end, max_wait_ms=10_000))
        waited = time.monotonic() - started
        thread.join()
    assert response.responses[0].partitions[0].records, "the fetch returned without the records"
    assert 0.4 <= waited < 3.0, f"the fetch took {waited:.2f}s for records sent after 0.5s"


def test_partition_max_bytes_bounds_the_response_but_one_record_always_comes(
        korvet: KorvetProcess, unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(50, size=1000)}))
        earliest = list_offsets(client, unique_name, 0, -2)[0]
        small = client.request(fetch_request(unique_name, 0, earliest, partition_max_bytes=5000))
        tiny = client.request(fetch_request(unique_name, 0, earliest, partition_max_bytes=10))
    small_records = small.responses[0].partitions[0].records
    assert 1000 < len(small_records) <= 5000
    tiny_records = tiny.responses[0].partitions[0].records
    assert 1000 < len(tiny_records) < 2000, "KIP-74: the first record must come even if too big"


def test_fetch_outside_the_log_is_offset_out_of_range(korvet: KorvetProcess,
                                                      unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(3)}))
        end = list_offsets(client, unique_name, 0, -1)[0]
        beyond = client.request(fetch_request(unique_name, 0, end + 1))
        at_end = client.request(fetch_request(unique_name, 0, end))
    part = beyond.responses[0].partitions[0]
    assert part.error_code == ErrorCode.offset_out_of_range
    assert part.high_watermark == end
    assert at_end.responses[0].partitions[0].error_code == ErrorCode.none


def test_list_offsets_earliest_latest_and_by_timestamp(korvet: KorvetProcess,
                                                       unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    base = int(time.time() * 1000) - 10_000
    with WireClient(korvet.bootstrap) as client:
        empty_latest = list_offsets(client, unique_name, 0, -1)
        assert empty_latest == list_offsets(client, unique_name, 0, -2), "empty: earliest == latest"
        assert empty_latest == (0, -1), "a new (dense) partition starts at offset 0"
        response = client.request(produce_request(unique_name, {0: build_batch(
            [Record(base + i * 1000, None, b"v", []) for i in range(5)])}))
        first = int(response.responses[0].partition_responses[0].base_offset)
        assert first >= empty_latest[0], "a record landed below a position handed out earlier"
        assert list_offsets(client, unique_name, 0, -2)[0] == empty_latest[0]
        assert list_offsets(client, unique_name, 0, -1)[0] == first + 5
        assert list_offsets(client, unique_name, 0, base + 2500) == (first + 3, base + 3000)
        assert list_offsets(client, unique_name, 0, base + 4000) == (first + 4, base + 4000)
        assert list_offsets(client, unique_name, 0, base + 60_000) == (-1, -1)
        assert list_offsets(client, unique_name, 0, -3) == (first + 4, base + 4000)


def test_log_start_is_the_first_record_when_nothing_asked_before(korvet: KorvetProcess,
                                                                 unique_name: str) -> None:
    """Kafka's log start is the first record's offset, not 0: offset-counting tools (lag,
    Spark's maxOffsetsPerTrigger) then count from the data, not from the epoch."""
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(unique_name, {0: batch(4)}))
        first = int(response.responses[0].partition_responses[0].base_offset)
        assert list_offsets(client, unique_name, 0, -2)[0] == first
        fetched = client.request(fetch_request(unique_name, 0, first))
        assert fetched.responses[0].partitions[0].log_start_offset == first


def test_latest_of_an_empty_partition_stays_a_valid_position(korvet: KorvetProcess,
                                                             unique_name: str) -> None:
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client:
        position = list_offsets(client, unique_name, 0, -1)[0]
        time.sleep(0.05)
        client.request(produce_request(unique_name, {0: batch(3)}))
        response = client.request(fetch_request(unique_name, 0, position))
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none, "the position handed out became out of range"
    assert part.log_start_offset == position
    assert part.records


# --- retention -----------------------------------------------------------------------------

def test_count_retention_trims_exactly_and_moves_the_log_start(korvet: KorvetProcess,
                                                               unique_name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    admin.create_topics([NewTopic(unique_name, num_partitions=1,
                                  config={"korvet.retention.records": "5"})])[unique_name].result(30)
    with WireClient(korvet.bootstrap) as client:
        response = client.request(produce_request(unique_name, {0: batch(12)}))
        first = int(response.responses[0].partition_responses[0].base_offset)
        assert xlen(korvet, unique_name) == 5
        assert list_offsets(client, unique_name, 0, -2)[0] == first + 7
        gone = client.request(fetch_request(unique_name, 0, first))
        assert gone.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


@pytest.mark.parametrize("scheme", ["dense", "time"])
def test_time_retention_keeps_a_caught_up_consumer_in_range(korvet: KorvetProcess,
                                                           unique_name: str, scheme: str) -> None:
    """After everything older than retention.ms is trimmed, a consumer positioned at the old
    high watermark is not out of range: no record at or after its offset was removed. (A
    dense topic trims by record timestamps, whole stretches of its time index: a checkpoint
    after every batch here; a time topic by append time. The records are stamped a minute
    in the past and the future, so both trim the same, however slow the machine.)"""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": korvet.bootstrap})
    admin.create_topics([NewTopic(unique_name, num_partitions=1, config={
        "retention.ms": "1000", "korvet.offset.scheme": scheme,
        "index.interval.bytes": "1"})])[unique_name].result(30)
    now = int(time.time() * 1000)
    with WireClient(korvet.bootstrap) as client:
        client.request(produce_request(unique_name, {0: batch(5, timestamp=now - 60_000)}))
        caught_up = list_offsets(client, unique_name, 0, -1)[0]
        time.sleep(1.5)
        client.request(produce_request(unique_name, {0: batch(2, start=100,
                                                              timestamp=now + 60_000)}))
        assert xlen(korvet, unique_name) == 2, "the expired entries were not trimmed"
        response = client.request(fetch_request(unique_name, 0, caught_up))
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    assert part.log_start_offset <= caught_up
    assert part.records


# --- sharing one Redis between brokers ----------------------------------------------------

def produce_through_both(first: KorvetProcess, second: KorvetProcess, topic: str,
                         count: int = 2000) -> dict[str, list[tuple[int, int]]]:
    """``count`` records to partition 0 through each broker at once (producers "a" and "b"):
    each producer's delivery reports."""
    results: dict[str, list[tuple[int, int]]] = {}

    def produce(name: str, bootstrap: str) -> None:
        records = [clients.Rec(0, f"{name}-{i}".encode(), b"x", (), int(time.time() * 1000))
                   for i in range(count)]
        results[name] = clients.confluent_produce(bootstrap, topic, records)

    threads = [threading.Thread(target=produce, args=(n, b)) for n, b in
               (("a", first.bootstrap), ("b", second.bootstrap))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_brokers_append_to_one_partition_without_collisions(
        multi_korvet: KorvetProcess, tmp_path: Path, unique_name: str) -> None:
    korvet = multi_korvet  # both brokers with --multi-broker
    second = KorvetProcess(tmp_path / "second",
                           extra_args=["--redis-url", korvet.redis_url, *SECOND_BROKER])
    second.start()
    try:
        create_topic(korvet.bootstrap, unique_name, partitions=1)
        results = produce_through_both(korvet, second, unique_name)
        offsets = [o for told in results.values() for _, o in told]
        assert len(set(offsets)) == 4000, "two brokers handed out the same offset"
        got = clients.confluent_consume(second.bootstrap, unique_name, 1, 4000)
        assert sorted(g.offset for g in got) == sorted(offsets)
        for told in results.values():
            assert [o for _, o in told] == sorted(o for _, o in told)
    finally:
        second.stop()


# --- start-up errors ------------------------------------------------------------------------

def _run_serve(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KORVET, "serve", "--port", "0", *args], capture_output=True, text=True,
                          check=False,
                          timeout=timeout)


def test_unreachable_redis_is_a_clear_error_and_exit(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _run_serve("--redis-url", f"redis://127.0.0.1:{port}/0")
    assert result.returncode == 2
    assert f"cannot reach Redis at redis://127.0.0.1:{port}/0" in result.stderr


def _resp_commands(buffer: bytes) -> tuple[list[list[bytes]], bytes]:
    """Split complete RESP commands (arrays of bulk strings) off the front of `buffer`."""
    commands: list[list[bytes]] = []
    while buffer.startswith(b"*"):
        end = buffer.find(b"\r\n")
        if end < 0:
            break
        count, position, parts = int(buffer[1:end]), end + 2, []
        for _ in range(count):
            end = buffer.find(b"\r\n", position)
            if end < 0:
                return commands, buffer
            length = int(buffer[position + 1:end])
            if len(buffer) < end + 2 + length + 2:
                return commands, buffer
            parts.append(buffer[end + 2:end + 2 + length])
            position = end + 2 + length + 2
        commands.append(parts)
        buffer = buffer[position:]
    return commands, buffer


def _fake_redis(version: str) -> tuple[int, threading.Thread]:
    """A socket that answers INFO with the given redis_version and +OK to any other command,
    on every connection, one reply per complete command however the bytes arrive."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer(conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while data := conn.recv(65536):
                commands, buffer = _resp_commands(buffer + data)
                for command in commands:
                    if command and command[0].upper() == b"INFO":
                        body = f"# Server\r\nredis_version:{version}\r\n".encode()
                        conn.sendall(b"$%d\r\n%s\r\n" % (len(body), body))
                    else:
                        conn.sendall(b"+OK\r\n")

    def serve() -> None:
        with server:
            while True:
                conn, _ = server.accept()
                threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def test_redis_older_than_7_is_refused(tmp_path: Path) -> None:
    port, _ = _fake_redis("6.2.14")
    result = _run_serve("--redis-url", f"redis://127.0.0.1:{port}/0")
    assert result.returncode == 2
    assert "is version 6.2.14; Korvet needs Redis >= 7" in result.stderr


def test_many_concurrent_connections_are_all_served(korvet: KorvetProcess) -> None:
    socks = [WireClient(korvet.bootstrap) for _ in range(200)]
    try:
        random.shuffle(socks)
        for client in socks:
            assert client.request(request(18, 0)).error_code == ErrorCode.none
    finally:
        for client in socks:
            client.close()


def test_read_ahead_answers_exactly_what_a_fresh_read_would(korvet: KorvetProcess,
                                                           unique_name: str) -> None:
    """After a full fetch the broker prepares the predicted next one: taking it, seeking
    elsewhere instead, and records appended meanwhile must all give a fresh read's answer."""
    create_topic(korvet.bootstrap, unique_name, partitions=1)
    with WireClient(korvet.bootstrap) as client, WireClient(korvet.bootstrap) as fresh:
        for round_ in range(4):
            client.request(produce_request(unique_name, {0: batch(200, start=round_ * 200,
                                                                  size=500)}))
        start = list_offsets(client, unique_name, 0, -2)[0]

        def records(wire: WireClient, offset: int) -> tuple[bytes, int]:
            part = wire.request(fetch_request(unique_name, 0, offset,
                                              partition_max_bytes=40_000)).responses[0].partitions[0]
            return bytes(part.records or b""), int(part.high_watermark)

        first, _ = records(client, start)  # full: a prediction is now prepared
        from aiokafka.record._crecords import DefaultRecordBatch
        last_offsets = []
        position = 0
        while position < len(first):
            length = int.from_bytes(first[position + 8:position + 12], "big")
            parsed = DefaultRecordBatch(first[position:position + 12 + length])
            last_offsets.append(parsed.base_offset + parsed.last_offset_delta)
            position += 12 + length
        following = max(last_offsets) + 1
        assert records(client, following)[0] == records(fresh, following)[0]  # the predicted one
        assert records(client, start)[0] == first  # a seek back: the prediction is not used
        client.request(produce_request(unique_name, {0: batch(5, start=9000)}))
        predicted, high_watermark = records(client, following)
        assert predicted == records(fresh, following)[0]
        assert high_watermark <= list_offsets(fresh, unique_name, 0, -1)[0]


def test_a_fetch_waiting_on_one_broker_wakes_for_an_append_through_another(
        multi_korvet: KorvetProcess, tmp_path: Path, unique_name: str) -> None:
    korvet = multi_korvet  # both brokers with --multi-broker
    second = KorvetProcess(tmp_path / "second",
                           extra_args=["--redis-url", korvet.redis_url, *SECOND_BROKER])
    second.start()
    try:
        create_topic(korvet.bootstrap, unique_name, partitions=1)
        with WireClient(second.bootstrap) as waiting:
            end = list_offsets(waiting, unique_name, 0, -1)[0]

            def produce_through_the_first() -> None:
                time.sleep(0.7)
                with WireClient(korvet.bootstrap) as producer:
                    producer.request(produce_request(unique_name, {0: batch(2)}))

            thread = threading.Thread(target=produce_through_the_first)
            thread.start()
            started = time.monotonic()
            response = waiting.request(fetch_request(unique_name, 0, end, max_wait_ms=10_000))
            waited = time.monotonic() - started
            thread.join()
        assert response.responses[0].partitions[0].records
        assert waited < 4.0, f"woken {waited:.1f}s later: the other broker's append was not seen"
    finally:
        second.stop()


def _fetch_all(topic: str, offsets: dict[int, int], max_wait_ms: int) -> Any:
    """A sessionless Fetch v12 of every partition in ``offsets``, as librdkafka sends them."""
    cls = load_request_schema(1, 12)
    parts = tuple(make(nested(cls, "FetchPartition"), partition=p, current_leader_epoch=-1,
                       fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                       partition_max_bytes=1024 * 1024) for p, offset in offsets.items())
    return make(cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=1, max_bytes=50 * 1024 * 1024, isolation_level=0, session_id=0,
                session_epoch=-1, topics=(make(nested(cls, "FetchTopic"), topic=topic,
                                                partitions=parts),), forgotten_topics_data=(),
                rack_id="")


def _by_partition(response: Any) -> dict[int, Any]:
    assert response.error_code == ErrorCode.none
    return {p.partition_index: p for p in response.responses[0].partitions}


def _redis_reads(broker: KorvetProcess) -> int:
    """XRANGE commands Redis has run: one per partition a fetch reads."""
    stats = subprocess.run(["redis-cli", "-u", broker.redis_url, "INFO", "commandstats"],
                           capture_output=True, text=True, check=True).stdout
    for line in stats.splitlines():
        if line.startswith("cmdstat_xrange:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_an_idle_consumer_of_many_partitions_costs_redis_no_reads(
        multi_korvet: KorvetProcess, tmp_path: Path, unique_name: str) -> None:
    """A consumer caught up on 200 partitions fetches twice a second: once the broker has
    read each partition while its fetches wait for appends, it answers from what it read,
    not by reading all 200 again, until an append to one of them is sent, answered or
    announced. An acknowledged record is in the very next fetch, even one that does not
    wait, on the broker that took it and, within the announcement's delay, on another."""
    korvet = multi_korvet  # both brokers with --multi-broker
    partitions = 200
    create_topic(korvet.bootstrap, unique_name, partitions=partitions)
    second = KorvetProcess(tmp_path / "second",
                           extra_args=["--redis-url", korvet.redis_url, *SECOND_BROKER])
    second.start()
    try:
        with WireClient(korvet.bootstrap) as client, WireClient(second.bootstrap) as other:
            ends = {p: list_offsets(client, unique_name, p, -1)[0] for p in range(partitions)}
            for consumer in (client, other):  # reads everything, waits, and learns it is caught up
                consumer.request(_fetch_all(unique_name, ends, max_wait_ms=300))
            before = _redis_reads(korvet)
            for _ in range(4):
                for consumer in (client, other):
                    answered = _by_partition(consumer.request(
                        _fetch_all(unique_name, ends, max_wait_ms=200)))
                    assert len(answered) == partitions
                    assert all(p.error_code == ErrorCode.none and not p.records
                               and p.high_watermark == ends[p.partition_index]
                               for p in answered.values())
            assert _redis_reads(korvet) - before == 0, "idle fetches read caught-up partitions"

            produced = client.request(produce_request(unique_name, {77: batch(3)}))
            appended = produced.responses[0].partition_responses[0]
            assert appended.error_code == ErrorCode.none
            end = appended.base_offset + 3
            before = _redis_reads(korvet)
            answered = _by_partition(client.request(_fetch_all(unique_name, ends, max_wait_ms=0)))
            assert answered[77].records, "an acknowledged record missing from the next fetch"
            assert answered[77].high_watermark == end
            assert not any(p.records for index, p in answered.items() if index != 77)
            # partition 77 only: by the fetch, and by the read-ahead of the next one
            assert _redis_reads(korvet) - before <= 2, "only the appended partition is read"

            deadline = time.monotonic() + 2.0
            while True:  # through the other broker: once its announcement arrives
                seen = _by_partition(other.request(_fetch_all(unique_name, ends, max_wait_ms=0)))
                if seen[77].records or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            assert seen[77].records, "the other broker kept answering from an outdated read"
            assert seen[77].high_watermark == end
    finally:
        second.stop()


def test_appends_publish_nothing_while_no_fetch_waits(tmp_path: Path, unique_name: str) -> None:
    broker = KorvetProcess(tmp_path / "korvet").start()
    try:
        create_topic(broker.bootstrap, unique_name, partitions=1)
        subprocess.run(["redis-cli", "-u", broker.redis_url, "CONFIG", "RESETSTAT"], check=True,
                       capture_output=True)
        with WireClient(broker.bootstrap) as client:
            for round_ in range(20):
                client.request(produce_request(unique_name, {0: batch(5, start=round_ * 5)}))
        stats = subprocess.run(["redis-cli", "-u", broker.redis_url, "INFO", "commandstats"],
                               capture_output=True, text=True, check=True).stdout
        assert "cmdstat_publish" not in stats, "appends announced to nobody"
        assert xlen(broker, unique_name) == 100
    finally:
        broker.stop()


def _redis_config(broker: KorvetProcess, name: str) -> str:
    reply = subprocess.run(["redis-cli", "-u", broker.redis_url, "CONFIG", "GET", name],
                           capture_output=True, text=True, check=True).stdout.split()
    return reply[1] if len(reply) == 2 else ""


def test_embedded_redis_persists_with_the_configured_rewrite_threshold(tmp_path: Path) -> None:
    """AOF on, fsync every second, and rewrites no earlier than redis.aof-rewrite-min-mb;
    stream nodes of redis.stream-node-max-bytes."""
    broker = KorvetProcess(tmp_path / "korvet",
                           extra_args=["--redis-aof-rewrite-min-mb", "256",
                                       "--redis-stream-node-max-bytes", "65536"]).start()
    try:
        assert _redis_config(broker, "appendonly") == "yes"
        assert _redis_config(broker, "appendfsync") == "everysec"
        assert _redis_config(broker, "auto-aof-rewrite-min-size") == str(256 * 1024 * 1024)
        assert _redis_config(broker, "stream-node-max-bytes") == "65536"
    finally:
        broker.stop()


def test_embedded_redis_keeps_several_stored_batches_in_one_stream_node(tmp_path: Path) -> None:
    """A batches topic's entries are whole record batches, bigger than Redis' default stream
    node of 4 KiB: with the broker's default node size they share nodes (XINFO STREAM's
    radix-tree-keys counts the nodes), and they read back whole."""
    broker = KorvetProcess(tmp_path / "korvet",
                           extra_args=["--topics-storage-format", "batches"]).start()
    try:
        assert _redis_config(broker, "stream-node-max-bytes") == str(1024 * 1024)
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        value = b"v" * 8000
        for _ in range(20):  # 20 batches of one 8 KB record each
            producer.produce("nodes", value=value)
            assert producer.flush(10) == 0
        with redis.Redis.from_url(broker.redis_url) as client:
            info = client.xinfo_stream("korvet:{nodes:0}:stream")
        assert info["length"] == 20
        assert info["radix-tree-keys"] == 1  # in Redis' default 4 KiB nodes: 20
        got = clients.confluent_consume(broker.bootstrap, "nodes", 1, 20)
        assert [record.value for record in got] == [value] * 20
    finally:
        broker.stop()
