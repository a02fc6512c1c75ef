"""Three brokers (``--multi-broker --redis-cluster``) on a real Redis Cluster of three
masters with a replica each (korvet/faults/redis_cluster.py), with real clients, through
three faults in a row.

Kafka's Java producer (the console producer, acks=all, idempotent) writes a numbered record
every few milliseconds through all three brokers, while three confluent-kafka consumers of
one group, each bootstrapped through a different broker, read and commit. Then:

1. ``kill -9`` of the broker that coordinates the group;
2. ``CLUSTER FAILOVER`` on the replica of the master that holds the group's slot (a manual
   failover: the replica catches up first);
3. ``kill -9`` of that slot's master (now the promoted node): a crash failover, its
   replica promoted after ``cluster-node-timeout``; the dead node is started again at once
   (as a supervisor would) and comes back as the new master's replica.

For each fault the test measures how long until the group reads records produced after it
on every partition again (produce and the group both work), and, for the crash, how long
until the replica was promoted and the node was back. It asserts: every record the Java
producer sent is consumed; it gave up on none, except records answered
NOT_ENOUGH_REPLICAS_AFTER_APPEND (stored on the master, not confirmed by a replica while the
crashed node was away); no partition is given to two members in one generation (the
SyncGroup replies in every broker's coordinator event log, which also hold every assignment
the consumers' callbacks reported); the committed offsets in Redis never go back; no broker
dropped a client's connection on a Redis error; and the group resumes within session
timeout plus lease time after each fault (after the crash, from when the dead master's slots
take acks=all appends again).

The brokers run with ``redis.wait-replicas`` 1: an acks=all append is answered once the
master's replica has it (Redis' WAIT), so the crash loses no acknowledged record. With
``WAIT_REPLICAS = 0`` (Redis' asynchronous replication) the test tolerates and counts
records lost from the last moment before the crash; docs/users/deploying.md has both
sets of figures.

One cluster and three brokers for the module (the crash ends the cluster's usefulness for
anything else, so this is the module's only test).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from kio.index import load_request_schema

from korvet.faults.redis_cluster import RedisCluster
from korvet.jvm.java_clients import CONSOLE_PRODUCER_MAIN, FIELD_SEPARATOR, KafkaJavaTools
from korvet.process import stop_process
from korvet.protocol.kbuild import make
from tests.conftest import KorvetProcess
from tests.integration.test_clients import create_topic
from tests.integration.test_groups import assignments_by_generation
from tests.support.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.clients

PARTITIONS = 6
LEASE_MS = 3000
SESSION_MS = 6000
KEYSPACE = "korvet"
RATE = 400  # records a second from the Java producer
CRASH_WINDOW_S = 1.0  # without WAIT, a crash may lose only records sent this long before it
# redis.wait-replicas: acks=all is answered once the master's replica has the batch (WAIT 1),
# so a crash failover loses no acknowledged record; with 0 the test tolerates (and counts)
# losses from the crash window, which is how the figures in docs/users/deploying.md for
# "without WAIT" were measured
WAIT_REPLICAS = 1


@dataclass
class Deployment:
    cluster: RedisCluster
    brokers: list[KorvetProcess]
    event_logs: list[Path]

    def by_id(self, node_id: int) -> KorvetProcess:
        return self.brokers[node_id - 1]

    def client(self) -> redis.cluster.RedisCluster:
        live = self.cluster.live()
        return redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode("127.0.0.1", p)  # type: ignore[no-untyped-call]
                           for p in live],
            socket_timeout=2)

    def master_of(self, key: str) -> int:
        node = self.client().get_node_from_key(key)  # type: ignore[no-untyped-call]
        assert node is not None
        return int(node.port)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("brokers-on-cluster")
    cluster = RedisCluster(folder / "redis", node_timeout_ms=2000)
    logs = [folder / f"coordinator-{i}.ndjson" for i in (1, 2, 3)]
    brokers: list[KorvetProcess] = []
    try:
        cluster.start()
        brokers = [KorvetProcess(folder / f"b{i}", extra_args=[
            "--redis-url", cluster.url, "--redis-cluster", "--multi-broker",
            "--broker-id", str(i), "--cluster-lease-ms", str(LEASE_MS),
            "--cluster-lease-margin-ms", "500", "--cluster-broker-ttl-ms", "1500",
            "--groups-initial-rebalance-delay-ms", "0", "--groups-event-log", str(logs[i - 1]),
            "--redis-wait-replicas", str(WAIT_REPLICAS)])
            for i in (1, 2, 3)]
        for broker in brokers:
            broker.start()
        yield Deployment(cluster, brokers, logs)
    finally:
        for broker in brokers:
            broker.stop()
        cluster.stop()


def _coordinator(bootstrap: str, group: str) -> int:
    with WireClient(bootstrap) as client:
        response = client.request(make(load_request_schema(10, 3), key=group, key_type=0))
    assert response.error_code == 0, response
    return int(response.node_id)


@dataclass
class JavaProducer:
    """Kafka's console producer kept running; a thread feeds it numbered records."""

    process: subprocess.Popen[str]
    stderr_path: Path
    sent: dict[str, float] = field(default_factory=dict)  # value -> wall time written
    stop: threading.Event = field(default_factory=threading.Event)

    def feed(self) -> None:
        assert self.process.stdin is not None
        i = 0
        while not self.stop.is_set():
            for _ in range(RATE // 50):
                value = f"r{i:07d}"
                self.sent[value] = time.time()
                self.process.stdin.write(f"k{i}{FIELD_SEPARATOR}{value}\n")
                i += 1
            self.process.stdin.flush()
            time.sleep(0.02)
        self.process.stdin.close()

    def failures(self) -> list[str]:
        """Why the producer gave up on each record it gave up on (its callback logs an
        ERROR line, then the exception's line)."""
        lines = self.stderr_path.read_text(errors="replace").splitlines()
        return [lines[i + 1] if i + 1 < len(lines) else line
                for i, line in enumerate(lines) if "Error when sending message" in line]


def _start_producer(bootstrap: str, topic: str, folder: Path) -> JavaProducer:
    tools = KafkaJavaTools(bootstrap)
    args = tools.console_producer_args(topic, keys=True, properties={
        "acks": "all", "enable.idempotence": "true", "linger.ms": "5",
        "delivery.timeout.ms": "120000", "request.timeout.ms": "10000",
        "retry.backoff.ms": "100", "retry.backoff.max.ms": "500"})
    stderr_path = folder / "producer.stderr"
    process = subprocess.Popen(tools.command(CONSOLE_PRODUCER_MAIN, args), stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=stderr_path.open("w"),
                               text=True)
    return JavaProducer(process, stderr_path)


@dataclass
class Group:
    """Three consumers of one group, what they read, and their assignments."""

    topic: str
    group: str
    seen: dict[str, tuple[int, float]] = field(default_factory=dict)  # value -> (partition, read at)
    assigned: list[tuple[str, frozenset[tuple[str, int]]]] = field(default_factory=list)
    current: dict[int, set[int]] = field(default_factory=dict)  # consumer -> partitions now
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def consume(self, index: int, bootstrap: str) -> None:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": self.group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 60000, "partition.assignment.strategy": "range"})

        def on_assign(c: Any, partitions: list[Any]) -> None:
            owned = frozenset((tp.topic, tp.partition) for tp in partitions)
            with self.lock:
                self.assigned.append((c.memberid(), owned))
                self.current[index] = {p for _, p in owned}

        def on_revoke(_: Any, __: list[Any]) -> None:
            with self.lock:
                self.current[index] = set()

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_revoke)
        try:
            while not self.stop.is_set():
                batch = consumer.consume(500, 0.2)
                now = time.time()
                with self.lock:
                    for message in batch:
                        if message.error() is None:
                            self.seen.setdefault(message.value().decode(),
                                                 (message.partition(), now))
                # a rebalance or a coordinator move fails a commit: the next one carries it
                if batch:
                    with contextlib.suppress(confluent_kafka.KafkaException):
                        consumer.commit(asynchronous=False)
        finally:
            consumer.close()

    def resumed(self, sent: dict[str, float], since: float) -> bool:
        """Every partition delivered a record produced after ``since``."""
        with self.lock:
            fresh = {p for value, (p, _) in self.seen.items() if sent.get(value, 0) > since}
        return len(fresh) == PARTITIONS


@dataclass
class CommitWatch:
    """Polls the group's committed offsets in the cluster; records any that went back."""

    deployment: Deployment
    keys: list[str]
    regressions: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        last: dict[str, int] = {}
        client = self.deployment.client()
        while not self.stop.is_set():
            try:
                for key in self.keys:
                    value = client.hget(key, "offset")
                    if value is None:
                        continue
                    offset = int(value)
                    if offset < last.get(key, -1):
                        self.regressions.append(f"{key}: {last[key]} -> {offset}")
                    last[key] = offset
            except (redis.RedisError, OSError):  # a failover under way: read again
                time.sleep(0.2)
                client = self.deployment.client()
            time.sleep(0.05)


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def _no_partition_twice(deployment: Deployment, group: str,
                        assigned: list[tuple[str, frozenset[tuple[str, int]]]]) -> int:
    """From every broker's event log: within a generation the members' partitions are
    disjoint, and a member given something in two brokers' logs was given the same. Every
    assignment a consumer's callback reported is one of them. Returns the generations."""
    merged: dict[int, dict[str, set[Any]]] = defaultdict(dict)
    for log in deployment.event_logs:
        if not log.is_file():
            continue
        for generation, members in assignments_by_generation(log, group).items():
            for member, owned in members.items():
                earlier = merged[generation].setdefault(member, owned)
                assert earlier == owned, f"generation {generation}: {member} given two sets"
    for generation, members in merged.items():
        owners: dict[Any, str] = {}
        for member, owned in members.items():
            for tp in owned:
                assert tp not in owners, (
                    f"generation {generation}: {tp} given to {owners[tp]} and {member}")
                owners[tp] = member
    handed = {(member, frozenset(owned)) for members in merged.values()
              for member, owned in members.items()}
    for member, got in assigned:
        assert (member, got) in handed, f"{member} was assigned {sorted(got)} by no SyncGroup"
    return len(merged)


def test_three_brokers_on_a_cluster_through_a_broker_kill_and_two_failovers(  # noqa: PLR0915 -- one end-to-end scenario
        deployment: Deployment, tmp_path: Path) -> None:
    topic, group = "through-faults", "faults-group"
    bootstraps = [b.bootstrap for b in deployment.brokers]
    create_topic(bootstraps[0], topic, PARTITIONS)
    group_slot = f"{KEYSPACE}:{{group:{group}}}:snapshot"
    producer = _start_producer(",".join(bootstraps), topic, tmp_path)
    run = Group(topic, group)
    watch = CommitWatch(deployment, [f"{KEYSPACE}:{{group:{group}}}:commit:{topic}:{p}"
                                     for p in range(PARTITIONS)])
    threads = [threading.Thread(target=producer.feed), threading.Thread(target=watch.run)]
    threads += [threading.Thread(target=run.consume, args=(i, b)) for i, b in enumerate(bootstraps)]
    for thread in threads:
        thread.start()
    figures: dict[str, float] = {}
    lost_in_crash: list[str] = []
    try:
        _wait(lambda: run.resumed(producer.sent, 0) and len(run.seen) > RATE, 60,
              "the group to read every partition")

        # 1. kill -9 the group's coordinator
        owner = _coordinator(bootstraps[0], group)
        killed_at = time.time()
        deployment.by_id(owner).kill()
        figures["broker kill: group reads every partition again"] = _wait(
            lambda: run.resumed(producer.sent, killed_at), 30,
            "the group to resume after the coordinator's kill")
        live = [b for b in deployment.brokers if b.process is not None]
        figures["broker kill: coordinator moved to broker"] = _coordinator(live[0].bootstrap, group)

        # 2. manual failover of the group's master
        victim = deployment.master_of(group_slot)
        started, started_wall = time.monotonic(), time.time()
        promoted = deployment.cluster.failover(victim)
        figures["CLUSTER FAILOVER: settled"] = time.monotonic() - started
        figures["CLUSTER FAILOVER: group reads every partition again"] = _wait(
            lambda: run.resumed(producer.sent, started_wall), 30,
            "the group to resume after CLUSTER FAILOVER") + figures["CLUSTER FAILOVER: settled"]
        assert deployment.master_of(group_slot) == promoted

        # 3. crash of that master: its replica is promoted after cluster-node-timeout; the
        # crashed node is started again at once (as a supervisor would) and comes back as
        # the new master's replica (until then, acks=all with WAIT 1 is refused there)
        crashed_wall = time.time()
        started = time.monotonic()
        promoted_again, promotion = deployment.cluster.crash(promoted)
        figures["master crash: replica promoted"] = promotion
        deployment.cluster.rejoin(promoted)
        figures["master crash: node back as an in-sync replica"] = time.monotonic() - started
        figures["master crash: group reads every partition again"] = _wait(
            lambda: run.resumed(producer.sent, crashed_wall), 30,
            "the group to resume after the master's crash") + time.monotonic() - started
        assert deployment.master_of(group_slot) == promoted_again
        time.sleep(1.0)
    finally:
        producer.stop.set()
        threads[0].join(10)
        try:
            producer.process.wait(150)
        finally:
            stop_process(producer.process)
    try:
        _wait(lambda: set(producer.sent) <= set(run.seen), 60, "every record sent")
    except AssertionError:
        pass  # measured below
    finally:
        run.stop.set()
        watch.stop.set()
        for thread in threads[1:]:
            thread.join(30)

    failures = producer.failures()
    missing = sorted(set(producer.sent) - set(run.seen))
    lost_in_crash = [v for v in missing
                     if crashed_wall - CRASH_WINDOW_S <= producer.sent[v] <= crashed_wall + 0.5]
    generations = _no_partition_twice(deployment, group, run.assigned)
    waits = sorted(read - producer.sent[v] for v, (_, read) in run.seen.items()
                   if v in producer.sent)
    print(f"\n{len(producer.sent)} records sent by the Java producer, {len(failures)} failed "
          f"sends, {len(missing)} never consumed ({len(lost_in_crash)} of them sent within "
          f"{CRASH_WINDOW_S} s before the master's crash); {generations} generations; "
          f"produce-to-consume max {waits[-1]:.2f} s, median {waits[len(waits) // 2] * 1000:.0f} ms")
    for name, value in figures.items():
        print(f"  {name}: {value:.2f}")
    # The group works again within session timeout plus lease time. After a crash, from
    # when the dead master's slots can take acks=all appends again: with WAIT, once its
    # node is back as a replica (without WAIT: once the replica is promoted).
    settle = SESSION_MS / 1000 + LEASE_MS / 1000
    assert figures["broker kill: group reads every partition again"] < settle, figures
    assert figures["CLUSTER FAILOVER: group reads every partition again"] < settle, figures
    writable = figures["master crash: node back as an in-sync replica" if WAIT_REPLICAS
                       else "master crash: replica promoted"]
    assert figures["master crash: group reads every partition again"] < writable + settle, figures
    assert producer.process.returncode == 0, producer.stderr_path.read_text()[-3000:]
    if WAIT_REPLICAS:
        # The only sends given up on are ones the master stored but its replica did not
        # confirm within the wait (while the crashed node was away): they are in the log.
        assert all("NotEnoughReplicasAfterAppend" in f for f in failures), failures[:5]
    if WAIT_REPLICAS:
        assert not missing, f"{len(missing)} acknowledged records never consumed: {missing[:5]}"
    assert set(missing) == set(lost_in_crash), (
        f"{len(missing)} acknowledged records never consumed, not only around the crash: "
        f"{missing[:5]}")
    assert not watch.regressions, watch.regressions
    dropped = [line for broker in deployment.brokers if broker.log_path is not None
               for line in broker.log_path.read_text(errors="replace").splitlines()
               if "after an unexpected error" in line or "Redis failed while answering" in line]
    assert not dropped, f"brokers dropped client connections on Redis errors: {dropped[:3]}"
