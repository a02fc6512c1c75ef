"""Korvet secured: TLS listeners, SASL, ACLs, tenants and a Redis behind TLS and an ACL user,
driven by the real clients users run.

One secured broker serves the module: listeners INTERNAL (PLAINTEXT), EXTERNAL (SASL_SSL with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512) and MTLS (SSL, client certificates required), the
authorizer on with ``admin`` as super user, and two tenants. Its certificates are made
here (a CA, the broker's certificate, a client certificate, and a certificate from a CA the
broker does not trust); its users are made with ``korvet users add`` and Kafka's
``kafka-configs``; its ACLs with Kafka's ``kafka-acls``. confluent-kafka (SCRAM-SHA-512),
kafka-python (PLAIN), aiokafka (SCRAM-SHA-256), kcat (mTLS and SCRAM) and Kafka's console
tools produce and consume through it. A second broker uses a Redis reached over TLS with an
ACL user, and sessions of 1.5 s that librdkafka re-authenticates (KIP-368).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from korvet.conformance.kafka.wire import TlsWireClient
from korvet.core.security import scram
from korvet.devtools.certs import CertificateAuthority, Issued
from korvet.jvm.java_clients import KafkaJavaTools
from korvet.process import free_port, stop_process
from tests.conftest import KORVET, ROOT, KorvetProcess

pytestmark = [pytest.mark.clients]

ADMIN, ALICE = ("admin", "admin-secret"), ("alice", "alice-secret")
TENANT_A, TENANT_B = ("tenant-a", "a-secret"), ("tenant-b", "b-secret")
ACL_MAIN = "org.apache.kafka.tools.AclCommand"
CONFIGS_MAIN = "kafka.admin.ConfigCommand"


@dataclass
class Pki:
    ca: CertificateAuthority
    broker: Issued
    client: Issued  # CN=app: the mTLS principal User:CN=app,O=Korvet Tests
    stranger: Issued  # signed by a CA the broker does not trust


@dataclass
class Secured:
    broker: KorvetProcess
    ports: dict[str, int]
    pki: Pki
    folder: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def users(self, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KORVET, "users", "--data-dir", str(self.broker.data_dir), *args],
                              input=None if password is None else password + "\n", text=True,
                              cwd=ROOT, capture_output=True, timeout=60, check=True)

    def sasl(self, user: tuple[str, str], mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
        """librdkafka settings for a SASL_SSL client."""
        return {"bootstrap.servers": self.bootstrap("EXTERNAL"), "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki.ca.cert), "sasl.mechanism": mechanism,
                "sasl.username": user[0], "sasl.password": user[1]}

    def java_config(self, user: tuple[str, str]) -> Path:
        path = self.folder / f"{user[0]}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user[0]}" password="{user[1]}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={self.pki.ca.cert}\n")
        return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(folder / "ca")
    stranger = CertificateAuthority(folder / "stranger", name="Someone Else's CA")
    return Pki(ca, ca.issue("broker", "localhost"), ca.issue("app", "app", client=True),
               stranger.issue("intruder", "app", client=True))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Secured]:
    folder = tmp_path_factory.mktemp("secured")
    settings = {
        "listeners": [{"name": "INTERNAL", "port": 0, "protocol": "PLAINTEXT"},
                      {"name": "EXTERNAL", "port": 0, "protocol": "SASL_SSL"},
                      {"name": "MTLS", "port": 0, "protocol": "SSL", "client-auth": "required"}],
        "broker": {"cert-file": str(pki.broker.cert), "key-file": str(pki.broker.key),
                   "trust-cert-file": str(pki.ca.cert),
                   "sasl": {"mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]},
                   "listeners-file": str(folder / "listeners.json")},
        "authorizer": {"enabled": True},
        "super.users": "User:admin",
        "security": {"tenants": {"User:tenant-a": "tenanta", "User:tenant-b": "tenantb",
                                 f"User:{pki.client.subject}": "tenantm"}},
    }
    (folder / "korvet.yaml").write_text(yaml.safe_dump(settings))
    # No initial rebalance delay (nothing here tests it): each group's first join would
    # otherwise wait 3 s.
    broker = KorvetProcess(folder / "broker", extra_args=[
        "--config", str(folder / "korvet.yaml"), "--groups-initial-rebalance-delay-ms", "0"])
    broker.start()
    try:
        ports = json.loads((folder / "listeners.json").read_text())
        state = Secured(broker, ports, pki, folder)
        for name, password in (ADMIN, ALICE, TENANT_A, TENANT_B):
            state.users("add", name, password=password)
        yield state
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def tools(secured: Secured) -> KafkaJavaTools:
    return KafkaJavaTools(secured.bootstrap("EXTERNAL"), timeout=120)


@pytest.fixture(scope="module")
def acls(secured: Secured, tools: KafkaJavaTools) -> str:
    """Kafka's kafka-acls gives alice the orders.* topics and app-* groups, the mTLS client
    the mtls-* topics and groups; returns what --list printed."""
    config = str(secured.java_config(ADMIN))
    base = ["--bootstrap-server", secured.bootstrap("EXTERNAL"), "--command-config", config]
    grants = [
        ["--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
         "--operation", "Create", "--topic", "orders.", "--resource-pattern-type", "prefixed"],
        ["--allow-principal", "User:alice", "--operation", "Read",
         "--group", "app-", "--resource-pattern-type", "prefixed"],
        ["--allow-principal", "User:alice", "--operation", "Read", "--topic", "read-only"],
        ["--allow-principal", f"User:{secured.pki.client.subject}", "--operation", "All",
         "--topic", "mtls-", "--group", "mtls-", "--resource-pattern-type", "prefixed"],
        ["--allow-principal", "User:tenant-a", "--allow-principal", "User:tenant-b",
         "--operation", "All", "--topic", "*", "--group", "*"],
    ]
    # Independent grants: one kafka-acls each, all at once (each is a JVM that mostly
    # starts up and waits on the broker).
    with ThreadPoolExecutor(len(grants)) as pool:
        for done in pool.map(lambda grant: tools.run(ACL_MAIN, [*base, "--add", *grant,
                                                                "--force"]), grants):
            assert done.returncode == 0
    return tools.run(ACL_MAIN, [*base, "--list"]).stdout


# --- users ---------------------------------------------------------------------------------------

def test_users_are_kept_as_salted_keys_only(secured: Secured) -> None:
    listed = secured.users("list").stdout
    assert "alice\tSCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512 (8192 iterations)" in listed
    store = redis.Redis.from_url(secured.broker.redis_url)
    raw = store.hget("korvet:scram:SCRAM-SHA-512", "alice")
    assert isinstance(raw, bytes) and ALICE[1].encode() not in raw
    credential = scram.ScramCredential.decode(raw.decode())
    assert scram.password_matches(scram.SHA512, credential, ALICE[1])
    assert not scram.password_matches(scram.SHA512, credential, "alice-secret2")
    secured.users("add", "carol", "--mechanism", "SCRAM-SHA-256", password="c")
    assert "carol\tSCRAM-SHA-256 (8192 iterations)" in secured.users("list").stdout
    assert "deleted carol" in secured.users("delete", "carol").stdout
    assert "carol" not in secured.users("list").stdout


def test_kafka_configs_adds_describes_and_deletes_a_scram_user(secured: Secured,
                                                              tools: KafkaJavaTools) -> None:
    base = ["--bootstrap-server", secured.bootstrap("EXTERNAL"), "--command-config",
            str(secured.java_config(ADMIN)), "--entity-type", "users", "--entity-name", "bob"]
    altered = tools.run(CONFIGS_MAIN, [*base, "--alter", "--add-config",
                                       "SCRAM-SHA-512=[iterations=4096,password=bob-secret]"])
    assert "Completed updating config for user bob" in altered.stdout
    described = tools.run(CONFIGS_MAIN, [*base, "--describe"]).stdout
    assert "SCRAM-SHA-512=iterations=4096" in described
    metadata = Consumer({**secured.sasl(("bob", "bob-secret")), "group.id": "unused"})
    try:
        assert metadata.list_topics(timeout=20).brokers  # bob logs in
    finally:
        metadata.close()
    tools.run(CONFIGS_MAIN, [*base, "--alter", "--delete-config", "SCRAM-SHA-512"])
    assert "bob" not in secured.users("list").stdout


def test_kafka_acls_lists_what_it_added(acls: str, secured: Secured) -> None:
    assert "ResourcePattern(resourceType=TOPIC, name=orders., patternType=PREFIXED)" in acls
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in acls
    assert f"principal=User:{secured.pki.client.subject}" in acls


# --- clients ---------------------------------------------------------------------------------------

def confluent_round_trip(config: dict[str, Any], topic: str, group: str, count: int = 20) -> list[bytes]:
    producer = Producer({**config, "enable.idempotence": True, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"{topic}-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=100, timeout=1.0):
                assert message.error() is None, message.error()
                got.append(message.value() or b"")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_confluent_kafka_over_sasl_ssl_scram_sha_512(secured: Secured, acls: str) -> None:
    got = confluent_round_trip(secured.sasl(ALICE), "orders.confluent", "app-confluent")
    assert got == [f"orders.confluent-{i}".encode() for i in range(20)]


def test_kafka_python_over_sasl_ssl_plain(secured: Secured, acls: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    common = {"bootstrap_servers": secured.bootstrap("EXTERNAL"), "security_protocol": "SASL_SSL",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": ALICE[0],
              "sasl_plain_password": ALICE[1], "ssl_cafile": str(secured.pki.ca.cert)}
    producer = KafkaProducer(acks="all", **common)
    for i in range(10):
        producer.send("orders.kafka-python", value=f"kp-{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer("orders.kafka-python", group_id="app-kafka-python",
                             auto_offset_reset="earliest", **common)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        for messages in consumer.poll(timeout_ms=500).values():
            got += [m.value for m in messages]
    consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(10)]


def test_aiokafka_over_sasl_ssl_scram_sha_256(secured: Secured, acls: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run() -> list[bytes]:
        common = {"bootstrap_servers": secured.bootstrap("EXTERNAL"), "security_protocol": "SASL_SSL",
                  "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": ALICE[0],
                  "sasl_plain_password": ALICE[1],
                  "ssl_context": create_ssl_context(cafile=str(secured.pki.ca.cert))}
        producer = AIOKafkaProducer(acks="all", **common)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("orders.aiokafka", f"ak-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("orders.aiokafka", group_id="app-aiokafka",
                                    auto_offset_reset="earliest", **common)
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 10 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                got += [m.value or b"" for messages in batch.values() for m in messages]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [f"ak-{i}".encode() for i in range(10)]


def kcat(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    assert shutil.which("kcat"), "kcat is installed by `make setup-test`"
    return subprocess.run(["kcat", *args], input=stdin, text=True, capture_output=True,
                          timeout=timeout, check=False)


def test_kcat_with_a_client_certificate_and_with_scram(secured: Secured, acls: str) -> None:
    mtls = ["-b", secured.bootstrap("MTLS"), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={secured.pki.ca.cert}",
            "-X", f"ssl.certificate.location={secured.pki.client.cert}",
            "-X", f"ssl.key.location={secured.pki.client.key}"]
    produced = kcat(*mtls, "-t", "mtls-kcat", "-P", stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    read = kcat(*mtls, "-t", "mtls-kcat", "-C", "-e", "-q", "-o", "beginning")
    assert read.returncode == 0 and read.stdout.split() == ["one", "two"], read.stderr
    # the certificate's principal is a tenant: its records are in its keyspace, from the first request
    store = redis.Redis.from_url(secured.broker.redis_url)
    assert store.xlen("tenantm:{mtls-kcat:0}:stream") == 2
    assert not store.exists("korvet:{topics}:topic:mtls-kcat")
    scram_args = ["-b", secured.bootstrap("EXTERNAL"), "-X", "security.protocol=SASL_SSL",
                  "-X", f"ssl.ca.location={secured.pki.ca.cert}", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                  "-X", f"sasl.username={ALICE[0]}", "-X", f"sasl.password={ALICE[1]}"]
    assert kcat(*scram_args, "-t", "orders.kcat", "-P", stdin="k1\n").returncode == 0
    read = kcat(*scram_args, "-t", "orders.kcat", "-C", "-e", "-q", "-o", "beginning")
    assert read.stdout.split() == ["k1"], read.stderr


def test_java_console_tools_over_sasl_ssl(secured: Secured, tools: KafkaJavaTools, acls: str) -> None:
    config = str(secured.java_config(ALICE))
    tools.run("org.apache.kafka.tools.ConsoleProducer",
              ["--bootstrap-server", secured.bootstrap("EXTERNAL"), "--topic", "orders.console",
               "--command-config", config], input_text="first\nsecond\nthird\n")
    consumed = tools.run("org.apache.kafka.tools.consumer.ConsoleConsumer",
                         ["--bootstrap-server", secured.bootstrap("EXTERNAL"), "--topic", "orders.console",
                          "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000",
                          "--group", "app-console", "--command-config", config])
    assert consumed.stdout.split() == ["first", "second", "third"], consumed.stderr[-2000:]


# --- refusals ---------------------------------------------------------------------------------

class Heartbeat:
    """An authenticated connection asking Metadata over and over: its slowest answer."""

    def __init__(self, secured: Secured) -> None:
        host, port = secured.bootstrap("EXTERNAL").split(":")
        self.conn = TlsWireClient(host, int(port), ca_file=str(secured.pki.ca.cert), timeout=10)
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        self.conn.call(SaslHandshakeRequest(mechanism="PLAIN"))
        answer = self.conn.call(SaslAuthenticateRequest(auth_bytes=f"\0{ADMIN[0]}\0{ADMIN[1]}".encode()))
        assert int(answer.error_code) == 0
        self.slowest = 0.0
        self.answers = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        from kio.schema.metadata.v12.request import MetadataRequest

        while not self.stop.is_set():
            started = time.monotonic()
            self.conn.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.answers += 1
            time.sleep(0.02)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(15)
        self.conn.close()


def confluent_error(config: dict[str, Any]) -> str:
    """What librdkafka reports (through its error callback) when it cannot log in."""
    errors: list[str] = []
    producer = Producer({**config, "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    return " | ".join(errors)


def test_refused_clients_get_errors_and_the_broker_keeps_serving(secured: Secured, acls: str) -> None:
    store = redis.Redis.from_url(secured.broker.redis_url)
    with Heartbeat(secured) as heartbeat:
        assert "Authentication failed" in confluent_error(secured.sasl((ALICE[0], "wrong")))
        assert "Authentication failed" in confluent_error(secured.sasl(("nobody", "x")))
        assert "Authentication failed" in confluent_error(secured.sasl((ALICE[0], "x"), "PLAIN"))
        plaintext_on_tls = kcat("-b", secured.bootstrap("EXTERNAL"), "-L", "-m", "2")
        assert plaintext_on_tls.returncode != 0
        on_mtls = ["-b", secured.bootstrap("MTLS"), "-X", "security.protocol=SSL",
                   "-X", f"ssl.ca.location={secured.pki.ca.cert}", "-L", "-m", "2"]
        assert kcat(*on_mtls).returncode != 0  # no client certificate
        assert kcat(*on_mtls, "-X", f"ssl.certificate.location={secured.pki.stranger.cert}",
                    "-X", f"ssl.key.location={secured.pki.stranger.key}").returncode != 0
        tls_on_plaintext = socket.create_connection(("127.0.0.1", secured.ports["INTERNAL"]), timeout=5)
        with pytest.raises((ssl.SSLError, OSError)):
            ssl.create_default_context(cafile=str(secured.pki.ca.cert)).wrap_socket(
                tls_on_plaintext, server_hostname="localhost")
        # alice may only read "read-only": her writes are refused and nothing is stored
        admin = AdminClient(secured.sasl(ADMIN))
        admin.create_topics([NewTopic("read-only", 1)])["read-only"].result(30)
        denied = ("korvet_broker_produce_errors_total", (("error", "TOPIC_AUTHORIZATION_FAILED"),))
        denied_before = _metrics(secured).get(denied, 0.0)
        producer = Producer({**secured.sasl(ALICE), "message.timeout.ms": 10_000})
        failures: list[KafkaError | None] = []
        producer.produce("read-only", value=b"not allowed",
                         on_delivery=lambda err, msg: failures.append(err))
        producer.flush(15)
        assert failures and failures[0] is not None
        assert failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert store.xlen("korvet:{read-only:0}:stream") == 0
        assert _metrics(secured).get(denied, 0.0) >= denied_before + 1, "refusal not counted"
        # a request before authentication: the connection closes, nothing is created
        host, port = secured.bootstrap("EXTERNAL").split(":")
        early = TlsWireClient(host, int(port), ca_file=str(secured.pki.ca.cert), timeout=5)
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        with pytest.raises(Exception, match="closed"):
            early.call(MetadataRequest(topics=(MetadataRequestTopic(name=TopicName("orders.early"),
                                                                    topic_id=None),),
                                       allow_auto_topic_creation=True,
                                       include_topic_authorized_operations=False))
        assert not store.exists("korvet:{topics}:topic:orders.early")
    assert heartbeat.answers > 10
    assert heartbeat.slowest < 1.0, f"an authenticated client waited {heartbeat.slowest:.2f} s"
    assert secured.broker.process is not None and secured.broker.process.poll() is None


# --- tenants ----------------------------------------------------------------------------------

def test_tenants_cannot_see_read_write_or_guess_each_others_topics(secured: Secured, acls: str) -> None:
    got = confluent_round_trip(secured.sasl(TENANT_A), "shared-name", "shared-group", count=5)
    assert got == [f"shared-name-{i}".encode() for i in range(5)]
    config_b = secured.sasl(TENANT_B)
    consumer = Consumer({**config_b, "group.id": "shared-group", "auto.offset.reset": "earliest"})
    try:
        listed = consumer.list_topics(timeout=20)
        assert "shared-name" not in listed.topics  # B's listing: only B's topics
        consumer.assign([TopicPartition("shared-name", 0)])  # asked for by name: B's own, empty
        committed = consumer.committed([TopicPartition("shared-name", 0)], timeout=20)
        assert committed[0].offset < 0  # A's group offsets are not B's
        messages = [m for m in consumer.consume(num_messages=10, timeout=3) if m.error() is None]
        assert messages == []
    finally:
        consumer.close()
    store = redis.Redis.from_url(secured.broker.redis_url)
    assert store.xlen("tenanta:{shared-name:0}:stream") == 5
    assert not store.exists("korvet:{topics}:topic:shared-name")  # nothing in the default keyspace
    assert store.xlen("tenantb:{shared-name:0}:stream") == 0


# --- operations: the HTTP endpoint of a secured broker --------------------------------------

def _metrics(secured: Secured) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    port = secured.broker.http_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_count_the_requests_and_refusals_of_every_listener(secured: Secured,
                                                                   acls: str) -> None:
    def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
              **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    before = _metrics(secured)
    mtls = ["-b", secured.bootstrap("MTLS"), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={secured.pki.ca.cert}",
            "-X", f"ssl.certificate.location={secured.pki.client.cert}",
            "-X", f"ssl.key.location={secured.pki.client.key}"]
    scram_args = ["-b", secured.bootstrap("EXTERNAL"), "-X", "security.protocol=SASL_SSL",
                  "-X", f"ssl.ca.location={secured.pki.ca.cert}", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                  "-X", f"sasl.username={ALICE[0]}", "-X", f"sasl.password={ALICE[1]}"]
    for args in (["-b", secured.bootstrap("INTERNAL")], mtls, scram_args):  # one per listener
        listed = kcat(*args, "-L", "-m", "10")
        assert listed.returncode == 0, listed.stderr
    # a request before authentication on the SASL_SSL listener: the broker closes the connection
    host, port = secured.bootstrap("EXTERNAL").split(":")
    early = TlsWireClient(host, int(port), ca_file=str(secured.pki.ca.cert), timeout=5)
    from kio.schema.metadata.v12.request import MetadataRequest

    with pytest.raises(Exception, match="closed"):
        early.call(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False))
    refused = ("korvet_broker_failures_total", {"operation": "connection"})
    closed_early = _metrics(secured)
    assert value(closed_early, refused[0], **refused[1]) >= value(before, refused[0], **refused[1]) + 1
    # a wrong password: answered with the error, then the connection is closed
    assert "Authentication failed" in confluent_error(secured.sasl((ALICE[0], "wrong")))
    after = _metrics(secured)
    assert value(after, refused[0], **refused[1]) >= value(closed_early, refused[0], **refused[1]) + 1
    accepted = "korvet_broker_connections_accepted_total"
    assert value(after, accepted) >= value(before, accepted) + 4
    metadata = ("korvet_broker_requests_total", {"api_key": "METADATA"})
    assert value(after, metadata[0], **metadata[1]) >= value(before, metadata[0], **metadata[1]) + 3
    sasl = ("korvet_broker_requests_total", {"api_key": "SASL_AUTHENTICATE"})
    assert value(after, sasl[0], **sasl[1]) > value(before, sasl[0], **sasl[1])
    with urllib.request.urlopen(f"http://127.0.0.1:{secured.broker.http_port}/health/readiness",
                                timeout=10) as response:
        assert response.status == 200


# --- Redis over TLS with an ACL user; re-authentication ---------------------------------------

@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[int, str]]:
    folder = tmp_path_factory.mktemp("tls-redis")
    port, password = free_port(), "r3dis-Secret-x9"
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(pki.broker.cert), "--tls-key-file", str(pki.broker.key),
         "--tls-ca-cert-file", str(pki.ca.cert), "--tls-auth-clients", "no", "--save", "",
         "--appendonly", "no", "--dir", str(folder), "--user", "default", "off",
         "--user", "korvet", "on", f">{password}", "~*", "&*", "+@all"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(pki.ca.cert),
                             username="korvet", password=password)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield port, password
    finally:
        stop_process(process, timeout=10)


def test_a_redis_behind_tls_and_an_acl_user_and_sessions_that_are_reauthenticated(
        tmp_path: Path, pki: Pki, tls_redis: tuple[int, str]) -> None:
    port, password = tls_redis
    env = {"KORVET_REDIS_USERNAME": "korvet", "KORVET_REDIS_PASSWORD": password,
           "KORVET_REDIS_TLS_CA_FILE": str(pki.ca.cert)}
    url = f"rediss://127.0.0.1:{port}/0"
    listeners = tmp_path / "listeners.json"
    broker = KorvetProcess(tmp_path / "broker", env=env, extra_args=[
        "--redis-url", url, "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "--broker-connections-max-reauth-ms", "1500", "--broker-listeners-file", str(listeners),
        "--log-level", "DEBUG"])
    broker.start()
    try:
        subprocess.run([*KORVET, "users", "--redis-url", url, "add", "dave"], input="d-secret\n",
                       env={**os.environ, **env}, text=True, cwd=ROOT, check=True,
                       capture_output=True, timeout=60)
        sasl_port = json.loads(listeners.read_text())["SASL_PLAINTEXT"]
        config = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "dave", "sasl.password": "d-secret"}
        producer = Producer({**config, "acks": "all"})
        for i in range(40):  # 4 s: the session (1.5 s) is renewed on the same connection
            producer.produce("over-tls-redis", value=str(i).encode())
            producer.poll(0)
            time.sleep(0.1)
        assert producer.flush(30) == 0
        client = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(pki.ca.cert),
                             username="korvet", password=password)
        assert client.xlen("korvet:{over-tls-redis:0}:stream") == 40
        # Fetches read over the broker's own connection to Redis, TLS and ACL user included.
        consumer = Consumer({**config, "group.id": "over-tls-redis",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["over-tls-redis"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
        consumer.close()
        assert got == [str(i).encode() for i in range(40)]
        log = broker.log_tail(100_000)
        assert "re-authenticated as User:dave" in log, "librdkafka did not re-authenticate"
        assert "session expired" not in log
        assert password not in log, "the Redis password was logged"
        assert "rediss://127.0.0.1" in log
    finally:
        broker.stop()


def test_while_redis_is_down_a_login_is_retried_not_refused(tmp_path: Path) -> None:
    """The credentials live in Redis: while it is unreachable the broker cannot check them.
    It closes the connection (the client retries, as with a broker that is down) instead of
    answering "invalid credentials", which Kafka's clients take as final."""
    port = free_port()
    redis_command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path)]

    def start_redis() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(redis_command, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return process
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    server = start_redis()
    url = f"redis://127.0.0.1:{port}/0"
    listeners = tmp_path / "listeners.json"
    broker = KorvetProcess(tmp_path / "broker", extra_args=[
        "--redis-url", url, "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "--broker-listeners-file", str(listeners)])
    broker.start()
    try:
        subprocess.run([*KORVET, "users", "--redis-url", url, "add", "erin"], input="e-secret\n",
                       text=True, cwd=ROOT, check=True, capture_output=True, timeout=60)
        sasl_port = json.loads(listeners.read_text())["SASL_PLAINTEXT"]
        stop_process(server, timeout=10)  # Redis goes away (its AOF keeps erin)
        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{sasl_port}",
                             "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "erin",
                             "sasl.password": "e-secret", "message.timeout.ms": 60000,
                             "error_cb": errors.append})
        producer.produce("while-redis-was-down", value=b"kept")
        producer.poll(3)  # logins fail meanwhile
        server = start_redis()
        assert producer.flush(60) == 0, "the record was not delivered once Redis was back"
        assert all(e.code() != KafkaError._AUTHENTICATION for e in errors), errors
        assert "closing the connection, the client retries" in broker.log_tail(100_000)
    finally:
        broker.stop()
        stop_process(server, timeout=10)


def test_a_transactional_id_needs_write_on_it(secured: Secured, tools: KafkaJavaTools,
                                              acls: str) -> None:
    """Kafka's ACLs on TransactionalId: alice may write orders.* topics but no transactional
    id, so her transactional producer is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a
    fatal error); once kafka-acls grants her WRITE on the id, the same producer commits."""
    from confluent_kafka import KafkaException

    topic, transactional_id = "orders.txn", "alice-txn"
    admin = AdminClient(secured.sasl(ADMIN))  # kept: its futures need it alive
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    refused = Producer({**secured.sasl(ALICE), "transactional.id": transactional_id})
    with pytest.raises(KafkaException) as failed:
        refused.init_transactions(20)
    assert failed.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    config = str(secured.java_config(ADMIN))
    tools.run(ACL_MAIN, ["--bootstrap-server", secured.bootstrap("EXTERNAL"), "--command-config",
                         config, "--add", "--allow-principal", "User:alice", "--operation",
                         "Write", "--operation", "Describe", "--transactional-id",
                         transactional_id, "--force"])
    allowed = Producer({**secured.sasl(ALICE), "transactional.id": transactional_id})
    allowed.init_transactions(20)
    allowed.begin_transaction()
    allowed.produce(topic, value=b"in a transaction")
    allowed.commit_transaction(20)
