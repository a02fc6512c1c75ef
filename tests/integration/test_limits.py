"""Limits and backpressure at the wire (korvet/server/limits.py, korvet/core/limits.py).

Two private brokers, one per concern, each started once for the module:

- ``roomy``: 10,000 idle connections and a client that sends Fetch requests for 8 MiB of
  records but never reads a response. The broker's resident memory (its own process, the
  embedded Redis excluded) is read from /proc: it grows by a bounded amount per idle
  connection, stays flat while they idle, and stays within the pending-bytes limit plus
  a few buffers under the client that does not read, while other clients are served.
- ``strict``: max.connections 6, max.connections.per.ip 4 (the second address is
  127.0.0.2, which Linux routes over loopback too), connections.max.idle.ms 1000, and
  socket.request.max.bytes given by Kafka's name.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from korvet.process import status_kib
from korvet.protocol.framing import encode_request
from tests.conftest import KorvetProcess
from tests.integration.test_broker_behaviour import (
    batch,
    fetch_request,
    list_offsets,
    produce_request,
    request,
)
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytestmark = pytest.mark.clients

IDLE_CONNECTIONS = 10_000
MiB = 1024 * 1024


def rss_kib(pid: int) -> int:
    kib = status_kib(pid, "VmRSS")
    if kib is None:
        raise AssertionError(f"no VmRSS for process {pid}")
    return kib


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def broker_pid(broker: KorvetProcess) -> int:
    assert broker.process is not None
    return broker.process.pid


def served(broker: KorvetProcess, timeout: float = 5.0) -> bool:
    """A new client gets ApiVersions answered within ``timeout`` seconds."""
    with WireClient(broker.bootstrap, timeout=timeout) as client:
        response = client.request(request(18, 3, client_software_name="probe",
                                          client_software_version="1"))
        return bool(response.error_code == 0)


@pytest.fixture(scope="module")
def open_files() -> int:
    """Room for 10,000 client sockets in this process (the broker inherits the limit and
    raises its own soft limit to its hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = IDLE_CONNECTIONS + 512
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise AssertionError(f"the hard open-files limit ({hard}) is below {needed}: "
                             "raise it (ulimit -Hn) to run the 10,000-connection test")
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory, open_files: int) -> Iterator[KorvetProcess]:
    broker = KorvetProcess(tmp_path_factory.mktemp("limits-roomy"), extra_args=[
        "--broker-max-pending-bytes", str(1 * MiB), "--broker-resume-pending-bytes",
        str(MiB // 2), "--redis-appendfsync", "off"])
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    broker = KorvetProcess(tmp_path_factory.mktemp("limits-strict"), extra_args=[
        "--broker-max-connections", "6", "--broker-max-connections-per-ip", "4",
        "--broker-connections-max-idle-ms", "1000", "--socket-request-max-bytes", "4096",
        "--redis-appendfsync", "off"])
    broker.start()
    yield broker
    broker.stop()


def test_ten_thousand_idle_connections_cost_little_memory_and_it_stays_flat(
        roomy: KorvetProcess) -> None:
    pid = broker_pid(roomy)
    assert served(roomy)
    before = rss_kib(pid)
    sockets: list[socket.socket] = []
    try:
        started = time.monotonic()
        for _ in range(IDLE_CONNECTIONS):
            sockets.append(socket.create_connection(("127.0.0.1", roomy.port), timeout=10))
        deadline = time.monotonic() + 30
        while open_fds(pid) < IDLE_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert open_fds(pid) >= IDLE_CONNECTIONS, "the broker did not accept every connection"
        opened = time.monotonic() - started
        time.sleep(1.0)  # the last accepted connections settle
        held = rss_kib(pid)
        samples = []
        for _ in range(6):
            time.sleep(0.5)
            samples.append(rss_kib(pid))
        later = max(samples)
        per_connection = (held - before) * 1024 / IDLE_CONNECTIONS
        print(f"\n{IDLE_CONNECTIONS} idle connections opened in {opened:.1f} s: broker RSS "
              f"{before / 1024:.0f} -> {held / 1024:.0f} MiB ({per_connection:.0f} bytes each), "
              f"at most {later / 1024:.0f} MiB over the next 3 s")
        assert per_connection < 24 * 1024, "an idle connection costs more than 24 KiB"
        assert later - held < 2 * 1024, f"memory grew while the connections sat idle: {samples}"
        assert served(roomy), "a new client was not served beside 10,000 idle ones"
    finally:
        for sock in sockets:
            sock.close()
    deadline = time.monotonic() + 30
    while open_fds(pid) > 1000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert open_fds(pid) < 1000, "closed connections were not released"
    assert served(roomy)


def test_a_client_that_never_reads_cannot_grow_the_broker(roomy: KorvetProcess,
                                                          unique_name: str) -> None:
    create_topic(roomy.bootstrap, unique_name, 1)
    with WireClient(roomy.bootstrap) as producer:
        for _ in range(16):  # 8 MiB of records: each Fetch below answers all of them
            response = producer.request(produce_request(unique_name, {0: batch(8, size=64 * 1024)}))
            assert response.responses[0].partition_responses[0].error_code == 0
        start, _ = list_offsets(producer, unique_name, 0, -2)
        answer = producer.request(fetch_request(unique_name, 0, start, max_bytes=64 * MiB,
                                                partition_max_bytes=64 * MiB))
        assert len(answer.responses[0].partitions[0].records) > 8 * MiB
    pid = broker_pid(roomy)
    before = rss_kib(pid)
    fetch = encode_request(fetch_request(unique_name, 0, start, max_bytes=64 * MiB,
                                         partition_max_bytes=64 * MiB), 1)
    glutton = socket.create_connection(("127.0.0.1", roomy.port))
    glutton.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    glutton.setblocking(False)
    sent = 0
    try:
        stalled_since = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                sent += glutton.send(fetch)
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 2.0:
                    break  # the broker has stopped reading from this client
                time.sleep(0.01)
        grown = rss_kib(pid) - before
        requests = sent // len(fetch)
        print(f"\nthe client sent {requests} Fetch requests of 8 MiB of records each "
              f"({sent / MiB:.1f} MiB) before the broker stopped reading; broker RSS grew "
              f"{grown / 1024:.0f} MiB")
        assert stalled_since is not None, "the broker kept reading from a client that never reads"
        # Without backpressure every request read would hold an 8 MiB response.
        assert requests > 100, "the test did not get far enough to mean anything"
        assert grown < 96 * 1024, f"the broker grew {grown / 1024:.0f} MiB"
        assert served(roomy), "other clients were not served meanwhile"
    finally:
        glutton.close()
    assert served(roomy)


def test_connections_over_the_broker_and_address_limits_are_closed(strict: KorvetProcess) -> None:
    def connect(source: str) -> WireClient:
        return WireClient(strict.bootstrap, timeout=5, source=source)

    def answers(client: WireClient) -> bool:
        with contextlib.suppress(OSError):
            return bool(client.request(request(18, 0)).error_code == 0)
        return False

    baseline = open_fds(broker_pid(strict))
    clients: list[WireClient] = []
    try:
        clients = [connect("127.0.0.1") for _ in range(4)]
        assert all(answers(c) for c in clients)
        fifth = connect("127.0.0.1")
        assert fifth.is_closed_by_peer(), "a fifth connection from one address was kept"
        others = [connect("127.0.0.2") for _ in range(2)]
        clients += others
        assert all(answers(c) for c in others), "another address was refused under the limit"
        seventh = connect("127.0.0.2")
        assert seventh.is_closed_by_peer(), "a seventh connection to the broker was kept"
        clients.pop(0).close()
        time.sleep(0.2)
        again = connect("127.0.0.1")
        clients.append(again)
        assert answers(again), "a freed slot was not given to a new connection"
    finally:
        for c in clients:
            c.close()
    # The broker releases a closed connection's slot when it reads the close: wait for that
    # (before the next test counts connections.
    deadline = time.monotonic() + 5
    while open_fds(broker_pid(strict)) > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    log = strict.log_tail(100)
    assert "connection(s) over max.connections.per.ip" in log
    assert "connection(s) over max.connections " in log


def test_idle_connections_are_closed_and_busy_ones_kept(strict: KorvetProcess) -> None:
    with WireClient(strict.bootstrap) as idle, WireClient(strict.bootstrap) as busy:
        assert idle.request(request(18, 0)).error_code == 0
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert busy.request(request(18, 0)).error_code == 0
            time.sleep(0.25)
        assert idle.is_closed_by_peer(wait=1.0), "an idle connection outlived the idle timeout"
        assert busy.request(request(18, 0)).error_code == 0


def test_a_client_that_stops_reading_is_closed_as_idle(strict: KorvetProcess,
                                                       unique_name: str) -> None:
    create_topic(strict.bootstrap, unique_name, 1)
    with WireClient(strict.bootstrap) as producer:
        for _ in range(256):  # 1 MiB in requests under this broker's 4 KiB frame limit
            response = producer.request(produce_request(unique_name, {0: batch(1, size=3900)}))
            assert response.responses[0].partition_responses[0].error_code == 0
        start, _ = list_offsets(producer, unique_name, 0, -2)
    fetch = encode_request(fetch_request(unique_name, 0, start, max_bytes=4 * MiB,
                                         partition_max_bytes=4 * MiB), 1)
    pid = broker_pid(strict)
    time.sleep(0.5)  # the connections above are gone
    baseline = open_fds(pid)
    quiet = socket.create_connection(("127.0.0.1", strict.port))
    quiet.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        quiet.settimeout(0.5)
        with contextlib.suppress(TimeoutError, BlockingIOError):
            for _ in range(32):  # each answered with 1 MiB it never reads
                quiet.sendall(fetch)
        time.sleep(0.5)
        assert open_fds(pid) == baseline + 1, "the broker does not hold the connection"
        # The broker answers for a second or two, then its writes stall; 1 s later (the idle
        # timeout) it closes the connection and drops the unsent responses (its kernel then
        # delivers what it had buffered, and a FIN, whenever the client reads).
        deadline = time.monotonic() + 8
        while open_fds(pid) > baseline and time.monotonic() < deadline:
            time.sleep(0.1)
        assert open_fds(pid) <= baseline, "a connection that stopped reading was kept open"
    finally:
        quiet.close()
    assert served(strict)


def test_kafkas_socket_request_max_bytes_name_limits_frames(strict: KorvetProcess) -> None:
    with WireClient(strict.bootstrap) as client:
        client.send_raw(struct.pack(">i", 8192) + b"\x00" * 64)
        assert client.is_closed_by_peer()
    assert "socket.request.max.bytes, 4096" in strict.log_tail(100)
    assert served(strict)


def test_a_burst_of_requests_waits_for_redis_connections_instead_of_failing(
        tmp_path: Path) -> None:
    """redis.pool-size (2 here): 60 clients whose requests all need Redis at once (Metadata
    of topics not in the broker's cache) are all answered, the extra ones waiting for a
    connection. redis-py's default pool refused the 101st concurrent command at once, and a
    burst of 200 consumers starting together had connections closed."""
    from kio.index import load_request_schema

    from korvet.protocol.framing import decode_response, response_class
    from korvet.protocol.kbuild import make, nested

    broker = KorvetProcess(tmp_path / "broker", extra_args=[
        "--redis-pool-size", "2", "--redis-appendfsync", "off"]).start()
    try:
        cls = load_request_schema(3, 12)
        clients = [WireClient(broker.bootstrap, timeout=30) for _ in range(60)]
        for number, client in enumerate(clients):
            topic = make(nested(cls, "MetadataRequestTopic"), name=f"burst-{number}",
                         topic_id=uuid.UUID(int=0))
            client.send_raw(encode_request(make(cls, topics=(topic,),
                                                allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False), 7))
        answered = []
        for client in clients:
            _, body = decode_response(client.read_frame(), response_class(3, 12))
            answered.append(int(body.topics[0].error_code))
            client.close()
        assert answered == [3] * 60  # UNKNOWN_TOPIC_OR_PARTITION, each one answered
        assert "Too many connections" not in broker.log_tail(500)
    finally:
        broker.stop()


def test_a_low_open_files_limit_refuses_extra_connections_cleanly(tmp_path: Path) -> None:
    """A broker whose open-files limit is 512 (soft and hard) admits the client connections
    that fit beside its Redis pool (256) and spare files, warns about it at start, and
    refuses the rest by closing them. Before, with max.connections unbounded, accept()
    failed with "Too many open files" and asyncio logged each failure, thousands of lines a
    second, while Redis connections failed too."""
    from tests.conftest import KORVET

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    broker = KorvetProcess(tmp_path / "broker", command=["prlimit", "--nofile=512:512", *KORVET],
                           extra_args=["--redis-appendfsync", "off"]).start()
    clients: list[socket.socket] = []
    try:
        assert "leaves room for 256 client connections" in broker.log_tail(100)
        for _ in range(400):
            clients.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
        time.sleep(1.0)
        refused = 0
        for sock in clients:
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                refused += sock.recv(1) == b""
        assert refused == 400 - 256, refused
        for sock in clients:
            sock.close()
        assert served(broker)
        log = broker.log_tail(400)
        assert "out of system resource" not in log and "Too many open files" not in log
        assert "connection(s) over max.connections" in log
    finally:
        for sock in clients:
            sock.close()
        broker.stop()
