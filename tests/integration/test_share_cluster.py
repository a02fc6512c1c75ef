"""Share partitions on Redis Cluster: each partition's share group lives in its partition's slot.

A broker on a real Redis Cluster (three masters, korvet/faults/redis_cluster.py) serves one
ShareFetch over six partitions spread across the masters: every script runs on the master
holding its partition's stream, the Redis consumer group is found there beside the stream,
and acquisitions and acknowledgements work on each partition alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from kio.index import load_request_schema

from korvet.faults.redis_cluster import RedisCluster
from korvet.protocol.kbuild import make, nested
from tests.conftest import KorvetProcess
from tests.integration.test_broker_behaviour import batch, produce_request
from tests.integration.test_dense_offsets import create_dense
from tests.integration.test_share_partitions import topic_id
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients

PARTITIONS = 6


def _fetch(client: WireClient, tid: object, epoch: int,
           acks: dict[int, tuple[int, int, int]] | None = None) -> object:
    cls = load_request_schema(78, 2)
    parts = tuple(make(nested(cls, "FetchPartition"), partition_index=p, acknowledgement_batches=(
        () if acks is None else (make(nested(cls, "AcknowledgementBatch"), first_offset=acks[p][0],
                                      last_offset=acks[p][1], acknowledge_types=(acks[p][2],)),)))
                  for p in range(PARTITIONS))
    return client.request(make(
        cls, group_id="g", member_id="m", share_session_epoch=epoch, max_wait=0, min_bytes=1,
        max_bytes=1 << 20, max_records=100, batch_size=100,
        topics=(make(nested(cls, "FetchTopic"), topic_id=tid, partitions=parts),),
        forgotten_topics_data=()))


def test_each_share_partition_lives_in_its_partitions_slot(tmp_path: Path,
                                                           unique_name: str) -> None:
    cluster = RedisCluster(tmp_path / "redis")
    broker: KorvetProcess | None = None
    try:
        cluster.start()
        broker = KorvetProcess(tmp_path / "korvet", extra_args=[
            "--redis-url", cluster.url, "--redis-cluster", "--share-auto-offset-reset",
            "earliest"]).start()
        create_dense(broker.bootstrap, unique_name, partitions=PARTITIONS)
        with WireClient(broker.bootstrap) as client:
            client.request(produce_request(unique_name, {p: batch(p + 1)
                                                         for p in range(PARTITIONS)}))
            tid = topic_id(client, unique_name)
            first = _fetch(client, tid, 0)
            got = {p.partition_index: [(int(r.first_offset), int(r.last_offset),
                                        int(r.delivery_count)) for r in p.acquired_records]
                   for t in first.responses for p in t.partitions}  # type: ignore[attr-defined]
            assert got == {p: [(0, p, 1)] for p in range(PARTITIONS)}
            second = _fetch(client, tid, 1, {p: (0, p, 1) for p in range(PARTITIONS)})
            errors = {p.acknowledge_error_code for t in second.responses  # type: ignore[attr-defined]
                      for p in t.partitions}
            assert errors == {0}
        masters = set(cluster.masters())
        routed = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
        used = set()
        for p in range(PARTITIONS):
            stream = f"korvet:{{{unique_name}:{p}}}:stream"
            node = routed.get_node_from_key(stream)  # type: ignore[no-untyped-call]
            used.add(int(node.port))
            groups = cluster.client(int(node.port)).xinfo_groups(stream)
            assert [(g["name"], g["pending"], g["entries-read"]) for g in groups] == [
                (b"share:g", 0, p + 1)]  # acquired all, accepted all, on the stream's master
        assert len(used) > 1 and used <= masters  # the partitions spread over the masters
    finally:
        if broker is not None:
            broker.stop()
        cluster.stop()
