"""Three brokers on one Redis (``--multi-broker``): registry, coordinator leases, failover.

One redis-server (started here, not embedded in a broker, so that killing a broker
leaves it running) and three ``korvet serve`` processes with their own broker ids and
short leases (3 s, renewed every second), each with a PLAINTEXT and a SASL_PLAINTEXT
(SCRAM) listener, broker 3 with a third one (INTERNAL) the others lack. The tests, in
order, share them:

- Metadata and DescribeCluster through each broker list the three, with the same
  partition leaders (rendezvous hashing);
- each listener's clients are told that listener's ports only (PLAINTEXT, SASL through
  confluent-kafka's AdminClient); INTERNAL's clients see broker 3 alone, and a group
  coordinated by another broker is COORDINATOR_NOT_AVAILABLE there (Kafka's rule);
- FindCoordinator through each broker names the one broker holding the group's lease;
  the others answer the group's requests (OffsetCommit, OffsetFetch, DescribeGroups)
  with NOT_COORDINATOR;
- the SIGSTOP split: the owner is paused past its lease, another broker takes the group
  (a new token) and commits; a write carrying the paused owner's token is refused by
  Redis' script (the committed offset stays the new owner's), and the resumed broker
  answers NOT_COORDINATOR. The takeover time is printed;
- confluent-kafka consumers of one group, bootstrapped through the three brokers,
  read every acknowledged record while the coordinator's broker is killed with -9;
  the committed offsets in Redis never go back;
- the same with Kafka's Java clients (the killed broker restarted first): the
  VerifiableProducer (acks=all) writes while three VerifiableConsumers of one group,
  bootstrapped through different brokers, read; the coordinator's broker is killed
  with -9; every acknowledged record is consumed, committed offsets never go back, and
  the group settles (every partition committed again) within session timeout + lease
  time. Then ``kafka-consumer-groups --list`` through one live broker lists the groups
  of every broker and one nobody coordinates, and ``--describe`` works through a broker
  that does not coordinate the group, on its SASL listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import redis
import redis.asyncio as aioredis
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from korvet.jvm.java_clients import CONSUMER_GROUPS_MAIN, KafkaJavaTools, parse_group_description
from korvet.process import free_ports
from korvet.protocol.kbuild import make, nested
from korvet.server.embedded_redis import EmbeddedRedis
from korvet.storage.groups import GroupStore
from korvet.storage.leases import LeaseStore
from tests.conftest import KORVET, ROOT, KorvetProcess
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")

LEASE_MS = 3000
KEYSPACE = "korvet"
USER, PASSWORD = "ops", "ops-secret"
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": USER, "sasl.password": PASSWORD}


@dataclass
class Cluster:
    redis_url: str
    brokers: list[KorvetProcess]
    listeners: list[dict[str, int]]  # per broker (id - 1): listener name -> port
    folder: Path

    def by_id(self, node_id: int) -> KorvetProcess:
        return self.brokers[node_id - 1]

    def address(self, node_id: int, listener: str) -> str:
        return f"127.0.0.1:{self.listeners[node_id - 1][listener]}"

    def revive(self) -> None:
        """Start the brokers a test killed (same ports) and wait until all are listed."""
        for broker in self.brokers:
            if broker.process is None:
                broker.start()
        for i in (1, 2, 3):
            _wait_for(lambda i=i: len(_metadata(self.address(i, "PLAINTEXT"), []).brokers) == 3,
                      10, f"broker {i} to list all three")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("several-brokers")
    server = EmbeddedRedis(folder / "redis", appendfsync="everysec")
    url = server.start()
    names = [("PLAINTEXT", "SASL_PLAINTEXT"), ("PLAINTEXT", "SASL_PLAINTEXT"),
             ("PLAINTEXT", "SASL_PLAINTEXT", "INTERNAL")]  # INTERNAL: broker 3 only
    listeners: list[dict[str, int]] = []
    brokers: list[KorvetProcess] = []

    def broker(i: int) -> KorvetProcess:
        ports = dict(zip(names[i - 1], free_ports(len(names[i - 1])), strict=True))
        listeners[i - 1:i] = [ports]
        return KorvetProcess(folder / f"b{i}", extra_args=[
            "--redis-url", url, "--multi-broker", "--broker-id", str(i),
            "--listeners", ",".join(f"{name}://127.0.0.1:{port}"
                                    for name, port in ports.items()),
            "--broker-listener-security-protocol-map", "INTERNAL:PLAINTEXT",
            "--cluster-lease-ms", str(LEASE_MS), "--cluster-lease-margin-ms", "500",
            "--cluster-broker-ttl-ms", "1500", "--groups-initial-rebalance-delay-ms", "0"])

    try:
        subprocess.run([*KORVET, "users", "--redis-url", url, "add", USER],
                       input=f"{PASSWORD}\n", text=True, cwd=ROOT, check=True,
                       capture_output=True, timeout=60)
        for i in (1, 2, 3):
            for attempt in range(3):
                brokers[i - 1:i] = [broker(i)]
                try:
                    brokers[i - 1].start()
                    break
                except RuntimeError as failed:
                    # A port picked free was taken before the broker bound it (a busy
                    # machine): pick others; anything else fails the fixture.
                    if "address already in use" not in str(failed) or attempt == 2:
                        raise
        yield Cluster(url, brokers, listeners, folder)
    finally:
        for started in brokers:
            if started.process is not None and started.process.poll() is None:
                os.kill(started.process.pid, signal.SIGCONT)
            started.stop()
        server.stop()


def _request(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    cls = load_request_schema(api_key, version)
    with WireClient(bootstrap) as client:
        return client.request(make(cls, **fields))


def _metadata(bootstrap: str, topics: list[str] | None) -> Any:
    cls = load_request_schema(3, 12)
    topic_cls = nested(cls, "MetadataRequestTopic")
    wanted = None if topics is None else tuple(make(topic_cls, name=t, topic_id=None)
                                               for t in topics)
    with WireClient(bootstrap) as client:
        return client.request(make(cls, topics=wanted, allow_auto_topic_creation=True,
                                   include_topic_authorized_operations=False))


def _find_coordinator(bootstrap: str, group: str) -> tuple[int, ErrorCode]:
    response = _request(bootstrap, 10, 3, key=group, key_type=0)
    return response.node_id, response.error_code


def _offset_commit(bootstrap: str, group: str, topic: str, offset: int) -> ErrorCode:
    cls = load_request_schema(8, 8)
    topic_cls = nested(cls, "OffsetCommitRequestTopic")
    partition_cls = nested(cls, "OffsetCommitRequestPartition")
    with WireClient(bootstrap) as client:
        response = client.request(make(
            cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=(make(topic_cls, name=topic, partitions=(
                make(partition_cls, partition_index=0, committed_offset=offset,
                     committed_leader_epoch=-1, committed_metadata=None),)),)))
    return ErrorCode(response.topics[0].partitions[0].error_code)


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_metadata_lists_every_live_broker_with_the_same_leaders(cluster: Cluster) -> None:
    ports = {b.port for b in cluster.brokers}

    def listed(bootstrap: str) -> set[int]:
        return {b.port for b in _metadata(bootstrap, []).brokers}

    for broker in cluster.brokers:
        _wait_for(lambda b=broker: listed(b.bootstrap) == ports, 10,
                  f"broker {broker.bootstrap} to list all three")
    topic = "spread"
    create_topic(cluster.brokers[0].bootstrap, topic, 12)
    leaders = [tuple(p.leader_id for p in _metadata(b.bootstrap, [topic]).topics[0].partitions)
               for b in cluster.brokers]
    assert leaders[0] == leaders[1] == leaders[2]
    assert set(leaders[0]) == {1, 2, 3}, f"12 partitions should spread over 3 brokers: {leaders}"
    cluster_view = _request(cluster.brokers[2].bootstrap, 60, 0,
                            include_cluster_authorized_operations=False)
    assert {b.broker_id for b in cluster_view.brokers} == {1, 2, 3}


def _pairs(brokers: Any, id_field: str = "node_id") -> set[tuple[int, int]]:
    return {(getattr(b, id_field), b.port) for b in brokers}


def test_each_listener_is_told_its_own_ports(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient

    def expected(listener: str) -> set[tuple[int, int]]:
        return {(i, cluster.listeners[i - 1][listener]) for i in (1, 2, 3)}

    for i in (1, 2, 3):
        plain = cluster.address(i, "PLAINTEXT")
        assert _pairs(_metadata(plain, []).brokers) == expected("PLAINTEXT")
        described = _request(plain, 60, 0, include_cluster_authorized_operations=False)
        assert _pairs(described.brokers, "broker_id") == expected("PLAINTEXT")
        admin = AdminClient({"bootstrap.servers": cluster.address(i, "SASL_PLAINTEXT"), **SASL})
        listed = admin.list_topics(timeout=15)
        assert {(b.id, b.port) for b in listed.brokers.values()} == expected("SASL_PLAINTEXT")
        nodes = admin.describe_cluster(request_timeout=15).result(15).nodes
        assert {(n.id, n.port) for n in nodes} == expected("SASL_PLAINTEXT")
    # INTERNAL is broker 3's alone: its clients are told of broker 3 only, which leads
    # every partition for them (any broker serves any partition)
    internal = cluster.address(3, "INTERNAL")
    answer = _metadata(internal, ["spread"])
    assert _pairs(answer.brokers) == {(3, cluster.listeners[2]["INTERNAL"])}
    assert {p.leader_id for p in answer.topics[0].partitions} == {3}
    # a group broker 1 coordinates: INTERNAL's clients cannot reach it (Kafka's answer)
    assert _find_coordinator(cluster.address(1, "PLAINTEXT"), "internal-probe") == \
        (1, ErrorCode.none)
    refused = _request(internal, 10, 3, key="internal-probe", key_type=0)
    assert (refused.error_code, refused.node_id) == (ErrorCode.coordinator_not_available, -1)
    assert "INTERNAL" in (refused.error_message or "")
    named = _request(cluster.address(3, "PLAINTEXT"), 10, 3, key="internal-probe", key_type=0)
    assert (named.node_id, named.port) == (1, cluster.listeners[0]["PLAINTEXT"])


def _join_group(bootstrap: str, group: str, version: int) -> ErrorCode:
    cls = load_request_schema(11, version)
    protocol = make(nested(cls, "JoinGroupRequestProtocol"), name="range", metadata=b"")
    fields: dict[str, Any] = dict(group_id=group, session_timeout=10_000,
                                  rebalance_timeout=30_000, member_id="",
                                  protocol_type="consumer", protocols=(protocol,))
    if version >= 5:
        fields["group_instance_id"] = None
    if version >= 8:
        fields["reason"] = None
    response = _request(bootstrap, 11, version, **fields)
    return ErrorCode(response.error_code)


def _group_queries(bootstrap: str, group: str) -> tuple[ErrorCode, ErrorCode, ErrorCode]:
    """The error codes of DescribeGroups v5, OffsetFetch v7 and OffsetFetch v8 for a group."""
    described = _request(bootstrap, 15, 5, groups=(group,), include_authorized_operations=False)
    single = _request(bootstrap, 9, 7, group_id=group, topics=None, require_stable=False)
    group_cls = nested(load_request_schema(9, 8), "OffsetFetchRequestGroup")
    batch = _request(bootstrap, 9, 8, groups=(make(group_cls, group_id=group, topics=None),),
                     require_stable=False)
    return (ErrorCode(described.groups[0].error_code), ErrorCode(single.error_code),
            ErrorCode(batch.groups[0].error_code))


@pytest.mark.spec("CoordinatorLease", "lease", "Acquire")
def test_find_coordinator_names_one_owner_through_every_broker(cluster: Cluster) -> None:
    answers = {_find_coordinator(b.bootstrap, "one-owner") for b in cluster.brokers}
    assert len(answers) == 1, answers
    ((owner, error),) = answers
    assert error == ErrorCode.none and owner in (1, 2, 3)
    held_by, token, _ = asyncio.run(_lease("one-owner", cluster.redis_url))
    assert held_by == str(owner) and token >= 1
    others = [b for b in cluster.brokers if b is not cluster.by_id(owner)]
    # a broker that does not hold the lease refuses the group's requests
    assert _offset_commit(others[0].bootstrap, "one-owner", "spread", 1) == \
        ErrorCode.not_coordinator
    assert _offset_commit(cluster.by_id(owner).bootstrap, "one-owner", "spread", 1) == \
        ErrorCode.none
    # JoinGroup of every version (kafka-python and aiokafka send v2-v5) is answered too;
    # below v7 the answer's protocol name is not nullable (the answer once failed to encode
    # and the connection was closed instead)
    for version in (2, 5, 7, 9):
        assert _join_group(others[0].bootstrap, "one-owner", version) == \
            ErrorCode.not_coordinator, f"JoinGroup v{version}"
    # queries too: a client that asked the wrong broker is told to look again
    assert _group_queries(others[1].bootstrap, "one-owner") == (ErrorCode.not_coordinator,) * 3
    assert _group_queries(cluster.by_id(owner).bootstrap, "one-owner") == (ErrorCode.none,) * 3


async def _lease(group: str, url: str) -> tuple[str, int, int]:
    client = aioredis.Redis.from_url(url)
    try:
        return await LeaseStore(GroupStore(client, KEYSPACE)).owner(group)
    finally:
        await client.aclose()


async def _stale_write(group: str, url: str, token: int, snapshot: str) -> list[str]:
    client = aioredis.Redis.from_url(url)
    try:
        return await LeaseStore(GroupStore(client, KEYSPACE)).save_state(
            {group: token}, {group: snapshot}, [], [], 0, [])
    finally:
        await client.aclose()


@pytest.mark.spec("CoordinatorLease", "TTL", "Margin", "mem", "saved", "Apply", "Refuse")
def test_a_paused_owner_is_fenced_off_after_a_takeover(cluster: Cluster) -> None:
    group, topic = "split", "spread"
    owner_id, _ = _find_coordinator(cluster.brokers[0].bootstrap, group)
    assert _offset_commit(cluster.by_id(owner_id).bootstrap, group, topic, 5) == ErrorCode.none
    _, old_token, _ = asyncio.run(_lease(group, cluster.redis_url))
    paused = cluster.by_id(owner_id)
    other = next(b for b in cluster.brokers if b is not paused)
    assert paused.process is not None
    os.kill(paused.process.pid, signal.SIGSTOP)
    started = time.monotonic()
    try:
        new_owner = 0

        def taken() -> bool:
            nonlocal new_owner
            node, error = _find_coordinator(other.bootstrap, group)
            new_owner = node if error == ErrorCode.none and node != owner_id else 0
            return new_owner != 0
        _wait_for(taken, 3 * LEASE_MS / 1000, "another broker to take the group")
        takeover = time.monotonic() - started
        print(f"\ntakeover after SIGSTOP: {takeover:.2f} s (lease {LEASE_MS} ms)")
        assert _offset_commit(cluster.by_id(new_owner).bootstrap, group, topic, 9) == \
            ErrorCode.none
        holder, new_token, _ = asyncio.run(_lease(group, cluster.redis_url))
        assert holder == str(new_owner) and new_token > old_token
        # the paused owner's write, carrying its token, is refused inside Redis
        assert asyncio.run(_stale_write(group, cluster.redis_url, old_token, "{}")) == [group]
        r = redis.Redis.from_url(cluster.redis_url)
        commit_keys = [k for k in r.scan_iter(f"{KEYSPACE}:{{group:{group}}}:commit:*")]
        assert commit_keys, "the new owner's commit is in Redis"
        assert {int(r.hget(k, "offset") or -1) for k in commit_keys} == {9}
        assert r.get(f"{KEYSPACE}:{{group:{group}}}:snapshot") != b"{}"
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    # resumed, the old owner no longer coordinates the group
    assert _offset_commit(paused.bootstrap, group, topic, 3) == ErrorCode.not_coordinator
    r = redis.Redis.from_url(cluster.redis_url)
    assert {int(r.hget(k, "offset") or -1)
            for k in r.scan_iter(f"{KEYSPACE}:{{group:{group}}}:commit:*")} == {9}


def _produce_all(bootstrap: str, topic: str, count: int) -> set[str]:
    acked: set[str] = set()
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 5})

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acked.add(message.value().decode())

    for i in range(count):
        producer.produce(topic, value=f"r{i}".encode(), key=str(i).encode(),
                         on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


@dataclass
class GroupRun:
    """Consumers of one group and a watcher of its committed offsets in Redis."""

    redis_url: str
    topic: str
    group: str
    seen: set[str] = field(default_factory=set)
    regressions: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def consume(self, bootstrap: str) -> None:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": self.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 60000})
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                with self.lock:
                    self.seen.add(message.value().decode())
                # a rebalance or a coordinator move fails a commit: the next one carries it
                with contextlib.suppress(confluent_kafka.KafkaException):
                    consumer.commit(message=message, asynchronous=False)
        finally:
            consumer.close()

    def watch_commits(self) -> None:
        r = redis.Redis.from_url(self.redis_url)
        last: dict[bytes, int] = {}
        while not self.stop.is_set():
            for key in r.scan_iter(f"{KEYSPACE}:{{group:{self.group}}}:commit:*"):
                value = r.hget(key, "offset")
                if value is None:
                    continue
                offset = int(value)
                if offset < last.get(key, -1):
                    self.regressions.append(f"{key!r}: {last[key]} -> {offset}")
                last[key] = offset
            time.sleep(0.05)


@pytest.mark.spec("CoordinatorLease", "Crash", "NeverBackwards", "Rebalance", "Commit")
def test_a_group_survives_its_coordinator_killed(cluster: Cluster) -> None:
    topic, group, count = "failover", "failover-group", 3000
    create_topic(cluster.brokers[0].bootstrap, topic, 3)
    live = [b for b in cluster.brokers if b.process is not None]
    acked = _produce_all(",".join(b.bootstrap for b in live), topic, count)
    assert len(acked) == count
    run = GroupRun(cluster.redis_url, topic, group)
    threads = [threading.Thread(target=run.consume, args=(b.bootstrap,)) for b in live]
    threads.append(threading.Thread(target=run.watch_commits))
    for thread in threads:
        thread.start()
    try:
        _wait_for(lambda: len(run.seen) >= count // 3, 60, "a third of the records")
        owner_id, _ = _find_coordinator(live[0].bootstrap, group)
        killed_at = time.monotonic()
        cluster.by_id(owner_id).kill()
        # the members find a new coordinator: the group's lease goes to a live broker
        _wait_for(lambda: asyncio.run(_lease(group, cluster.redis_url))[0] != str(owner_id),
                  30, "a live broker to hold the group's lease")
        moved = time.monotonic() - killed_at
        _wait_for(lambda: len(run.seen) >= count, 90, "every acknowledged record")
        print(f"\nkill -9 of the coordinator (broker {owner_id}): a live broker held the "
              f"group {moved:.2f} s later; all {count} records consumed after "
              f"{time.monotonic() - killed_at:.2f} s")
    finally:
        run.stop.set()
        for thread in threads:
            thread.join(30)
    assert acked <= run.seen, f"{len(acked - run.seen)} acknowledged records never consumed"
    assert not run.regressions, run.regressions


# --- Kafka's Java clients and tools -----------------------------------------------------

VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
JAVA_SESSION_MS = 6000


@dataclass
class JavaRun:
    """A Kafka tool printing one JSON event a line, each kept with when it was read."""

    name: str
    folder: Path
    process: subprocess.Popen[str]
    stderr: IO[str]
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, folder: Path, name: str, main: str, bootstrap: str,
              args: list[str]) -> JavaRun:
        command = KafkaJavaTools(bootstrap).command(
            main, ["--bootstrap-server", bootstrap, *args])
        stderr = (folder / f"{name}.err").open("w")
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   stdin=subprocess.DEVNULL)
        run = cls(name, folder, process, stderr)
        run.reader = threading.Thread(target=run._read, daemon=True)
        run.reader.start()
        return run

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    self.events.append((time.monotonic(), json.loads(line)))

    def named(self, name: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in list(self.events) if e.get("name") == name]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.reader is not None:
            self.reader.join(5)
        self.stderr.close()
        with (self.folder / f"{self.name}.events").open("w") as out:  # for a failure's reader
            for t, event in self.events:
                out.write(f"{t:.3f} {json.dumps(event)}\n")


def _consumed(consumers: list[JavaRun]) -> set[tuple[int, int]]:
    return {(e["partition"], e["offset"]) for c in consumers for _, e in c.named("record_data")}


def _settled_after(consumers: list[JavaRun], killed_at: float, moved_at: float,
                   partitions: int) -> float | None:
    """Seconds from the kill until every partition had a commit accepted again (by the
    new coordinator: read after the lease was seen on a live broker)."""
    first: dict[int, float] = {}
    for consumer in consumers:
        for t, event in consumer.named("offsets_committed"):
            if t < moved_at or not event.get("success"):
                continue
            for item in event.get("offsets", []):
                partition = int(item["partition"])
                first[partition] = min(first.get(partition, t), t)
    if len(first) < partitions:
        return None
    return max(first.values()) - killed_at


def _consumer_groups(bootstrap: str, args: list[str], config: Path | None = None) -> str:
    extra = ["--command-config", str(config)] if config is not None else []
    process = KafkaJavaTools(bootstrap, timeout=60).run(
        CONSUMER_GROUPS_MAIN, ["--bootstrap-server", bootstrap, *extra, *args])
    return process.stdout


def _list_groups_of(bootstrap: str) -> list[str]:
    response = _request(bootstrap, 16, 4, states_filter=())
    assert response.error_code == ErrorCode.none
    return [g.group_id for g in response.groups]


def _admin_tools(cluster: Cluster, through: int, group: str) -> dict[str, str]:
    """``kafka-consumer-groups --list`` on broker ``through``'s PLAINTEXT listener and
    ``--describe --group`` on its SASL one, side by side (one JVM each)."""
    sasl = cluster.folder / "sasl.properties"
    sasl.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="{USER}" password="{PASSWORD}";\n')
    outputs: dict[str, str] = {}

    def run(what: str, bootstrap: str, args: list[str], config: Path | None) -> None:
        outputs[what] = _consumer_groups(bootstrap, args, config)

    tools = [threading.Thread(target=run, args=("list", cluster.address(through, "PLAINTEXT"),
                                                ["--list"], None)),
             threading.Thread(target=run, args=(
                 "describe", cluster.address(through, "SASL_PLAINTEXT"),
                 ["--describe", "--group", group], sasl))]
    for thread in tools:
        thread.start()
    for thread in tools:
        thread.join(90)
    return outputs


def _pin(cluster: Cluster, topic: str, group: str, victim: int) -> dict[str, int]:
    """The group's coordinator is ``victim``, which also coordinates a group no client
    will come back for; each other broker coordinates one more group."""
    assert _find_coordinator(cluster.address(victim, "PLAINTEXT"), group) == \
        (victim, ErrorCode.none)
    pinned = {"java-orphan": victim, **{f"java-held-{i}": i for i in (1, 2, 3) if i != victim}}
    for name, node in pinned.items():
        bootstrap = cluster.address(node, "PLAINTEXT")
        assert _find_coordinator(bootstrap, name) == (node, ErrorCode.none)
        assert _offset_commit(bootstrap, name, topic, 1) == ErrorCode.none
    return pinned


def test_java_clients_and_tools_through_any_broker_while_one_is_killed(
        cluster: Cluster) -> None:
    cluster.revive()  # the broker the previous test killed comes back
    topic, group, partitions, count = "java-failover", "java-group", 3, 4200
    create_topic(cluster.brokers[0].bootstrap, topic, partitions)
    victim, survivors = 2, (1, 3)
    pinned = _pin(cluster, topic, group, victim)
    config = cluster.folder / "consumer.properties"
    config.write_text("heartbeat.interval.ms=500\nauto.offset.reset=earliest\n")
    consumers = [JavaRun.start(cluster.folder, f"consumer-{i}", VERIFIABLE_CONSUMER,
                               cluster.address(i, "PLAINTEXT"),
                               ["--topic", topic, "--group-id", group, "--verbose",
                                "--session-timeout", str(JAVA_SESSION_MS),
                                "--command-config", str(config)])
                 for i in (1, 2, 3)]
    # the tool turns retries off (a failed send is reported); its config file turns them
    # back on, as an application's idempotent producer has them; keys spread the records
    # over every partition whoever leads it
    producer_config = cluster.folder / "producer.properties"
    producer_config.write_text("retries=2147483647\nenable.idempotence=true\n")
    producer = JavaRun.start(cluster.folder, "producer", VERIFIABLE_PRODUCER,
                             cluster.address(1, "PLAINTEXT"),
                             ["--topic", topic, "--max-messages", str(count),
                              "--throughput", "300", "--acks", "-1", "--repeating-keys", "60",
                              "--command-config", str(producer_config)])
    watcher = GroupRun(cluster.redis_url, topic, group)
    watch = threading.Thread(target=watcher.watch_commits)
    watch.start()
    try:
        _wait_for(lambda: len(_consumed(consumers)) >= 600, 60, "the consumers to read")
        assert asyncio.run(_lease(group, cluster.redis_url))[0] == str(victim)
        killed_at = time.monotonic()
        cluster.by_id(victim).kill()
        print(f"\nkilled broker {victim} at {killed_at:.3f}")
        _wait_for(lambda: asyncio.run(_lease(group, cluster.redis_url))[0] != str(victim),
                  30, "a live broker to hold the group's lease")
        moved_at = time.monotonic()
        moved = moved_at - killed_at
        _wait_for(lambda: _settled_after(consumers, killed_at, moved_at, partitions) is not None,
                  60, "every partition to be committed again")
        settled = _settled_after(consumers, killed_at, moved_at, partitions)
        _wait_for(lambda: producer.process.poll() is not None, 60, "the producer to finish")
        acked = {(e["partition"], e["offset"]) for _, e in producer.named("producer_send_success")}
        _wait_for(lambda: acked <= _consumed(consumers), 60, "every acknowledged record")
        print(f"\nJava clients, kill -9 of the coordinator (broker {victim}): a live broker "
              f"held the group {moved:.2f} s later; every partition committed again after "
              f"{settled:.2f} s (session {JAVA_SESSION_MS} ms + lease {LEASE_MS} ms); "
              f"{len(acked)} acknowledged records all consumed")
        assert len(acked) == count, f"{count - len(acked)} records not acknowledged"
        assert settled is not None and settled <= (JAVA_SESSION_MS + LEASE_MS) / 1000

        # Kafka's admin tool through any live broker, the consumers still running
        holder = int(asyncio.run(_lease(group, cluster.redis_url))[0])
        outputs = _admin_tools(cluster, next(i for i in survivors if i != holder), group)
    finally:
        watcher.stop.set()
        for run in (producer, *consumers):
            run.stop()
        watch.join(10)
    assert not watcher.regressions, watcher.regressions
    listed = {line.strip() for line in outputs["list"].splitlines() if line.strip()}
    assert {group, *pinned} <= listed, outputs["list"]
    rows = parse_group_description(subprocess.CompletedProcess([], 0, outputs["describe"], ""))
    assert sorted(r.partition or 0 for r in rows if r.topic == topic) == list(range(partitions))
    assert all(r.consumer_id and (r.current_offset or 0) > 0 for r in rows), outputs["describe"]
    # each live broker lists what it coordinates, the group nobody does by one of them
    per_broker = {i: _list_groups_of(cluster.address(i, "PLAINTEXT")) for i in survivors}
    assert "java-held-1" in per_broker[1] and "java-held-3" in per_broker[3]
    assert group in per_broker[holder]
    merged = per_broker[1] + per_broker[3]
    assert len(merged) == len(set(merged)), per_broker
    assert merged.count("java-orphan") == 1
