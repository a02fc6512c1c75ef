"""Run Apache Kafka (jar set ``kafka``) as a single-node KRaft cluster on loopback.

The server runs in combined mode (one JVM is both broker and controller) from the
pinned jars of ``korvet/jvm/locks/kafka.lock``, in a work directory that holds
its ``server.properties``, its data and its log. It listens on free loopback ports
(never 9092), so several developers can run one each on a shared machine::

    with KafkaServer(tmp_path) as kafka:
        produce_to(kafka.bootstrap)         # "127.0.0.1:<port>"

Startup formats the storage with a random cluster id (``kafka.tools.StorageTool``),
starts ``kafka.Kafka`` and waits until a Metadata request lists the broker, which
happens once it is unfenced and serves clients. ``format_seconds`` and
``startup_seconds`` say how long each took. ``stop()`` asks for a clean shutdown
(SIGTERM) and kills the JVM if it does not exit in time.

Nothing is downloaded here: the jars must have been fetched by the set-up
(``korvet jars fetch kafka``); without them this raises ``KafkaToolsError``.

With ``security=KafkaSecurity(...)`` the server also listens with SASL_SSL (SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN; PEM key and trust stores) on ``sasl_port`` and runs Kafka's
StandardAuthorizer: ``allow.everyone.if.no.acl.found`` false, the admin user (created with
the storage, ``kafka-storage format --add-scram``) and ``User:ANONYMOUS`` super users. The
PLAINTEXT listener stays for the controller and broker traffic, hence ANONYMOUS; clients
meant to be checked use the SASL_SSL listener.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from korvet.jvm import class_sharing, maven
from korvet.process import die_with_parent, find_java, free_ports, stop_process
from korvet.protocol.frame_io import call_blocking

JAR_SET = "kafka"
KAFKA_VERSION = "4.3.1"
SERVER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"

# The garbage collector flags of Kafka's own kafka-run-class.sh.
KAFKA_GC_OPTIONS: tuple[str, ...] = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# ... with a small heap (kafka-server-start.sh uses 1 GB): the machines this runs on are shared.
DEFAULT_SERVER_JVM_OPTIONS: tuple[str, ...] = ("-Xms128m", "-Xmx512m", *KAFKA_GC_OPTIONS)

_SERVER_LOG4J2 = """\
# Written by korvet.jvm.kafka_server: INFO and up to stdout, which goes to server.log.
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = warn
"""

_TOOLS_LOG4J2 = """\
# Written by korvet.jvm.kafka_server: warnings and errors to stderr, so that stdout
# holds only what a tool prints on purpose.
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""


class KafkaToolsError(RuntimeError):
    """Apache Kafka or one of its tools could not be run (no Java, missing jars, a failed start)."""


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class KafkaSecurity:
    """A SASL_SSL listener and the StandardAuthorizer (see the module docstring)."""

    keystore: Path  # PEM: private key (PKCS#8, unencrypted) then the certificate chain
    truststore: Path  # PEM: CA certificates
    admin_user: str = "admin"
    admin_password: str = field(default="admin-secret", repr=False)
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    max_reauth_ms: int = 0
    # Kafka's PLAIN checks passwords from its JAAS configuration, not the SCRAM credentials:
    # these users (the admin always) may log in with PLAIN.
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)
    super_users: tuple[str, ...] = ()

    def properties(self, sasl_listener: str) -> dict[str, str]:
        prefix = f"listener.name.{sasl_listener.lower()}"
        plain = {self.admin_user: self.admin_password, **self.plain_users}
        users = " ".join(f'user_{name}="{password}"' for name, password in plain.items())
        props = {
            "sasl.enabled.mechanisms": ",".join(self.mechanisms),
            f"{prefix}.scram-sha-256.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
            f"{prefix}.scram-sha-512.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
            f"{prefix}.plain.sasl.jaas.config": f"{PLAIN_LOGIN} required {users};",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
            "ssl.endpoint.identification.algorithm": "",
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join((f"User:{self.admin_user}", "User:ANONYMOUS", *self.super_users)),
        }
        if self.max_reauth_ms:
            props["connections.max.reauth.ms"] = str(self.max_reauth_ms)
        return props

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that create the admin's SCRAM credentials."""
        args: list[str] = []
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram",
                     f"{mechanism}=[name={self.admin_user},password={self.admin_password}]"]
        return args


def java_binary() -> str:
    found = find_java()
    if found is None:
        raise KafkaToolsError(
            "java not found (set JAVA_HOME or put java on PATH): Apache Kafka 4 needs Java 17+ "
            "(Debian: openjdk-17-jre-headless)"
        )
    return found


def jar_classpath(jar_set: str = JAR_SET) -> str:
    """The verified class path of a jar set; fails (does not download) when a jar is missing."""
    try:
        if not maven.present(jar_set):
            raise KafkaToolsError(
                f"the '{jar_set}' jars are not all in {maven.jar_root()}: "
                f"run `korvet jars fetch {jar_set}` (part of `make setup-test`)"
            )
        return maven.classpath(jar_set)
    except maven.JarError as exc:
        raise KafkaToolsError(str(exc)) from exc


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding (22 characters)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # would read as an option on a command line
            return text


def tools_log4j2_config() -> Path:
    """A log4j2 configuration that sends a tool's logging to stderr at WARN."""
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"korvet-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "log4j2-tools.properties"
    if not path.is_file() or path.read_text() != _TOOLS_LOG4J2:
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(_TOOLS_LOG4J2)
        temporary.replace(path)
    return path


def metadata_broker_count(host: str, port: int, *, timeout: float = 5.0) -> int:
    """Send one Metadata request (no topics) and return how many brokers the reply lists.

    A KRaft broker answers with an empty broker list until it is unfenced, so a
    count of at least one means it serves clients.
    """
    from kio.schema.metadata.v4.request import MetadataRequest

    reply = call_blocking(host, port, MetadataRequest(topics=None, allow_auto_topic_creation=False),
                          timeout=timeout, client_id="korvet-probe")
    return len(reply.brokers)


class KafkaServer:
    """One Apache Kafka KRaft node (broker and controller in one JVM) on 127.0.0.1."""

    def __init__(
        self,
        work_dir: Path | str,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        group_initial_rebalance_delay_ms: int = 3000,
        num_partitions: int = 1,
        properties: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] = DEFAULT_SERVER_JVM_OPTIONS,
        startup_timeout: float = 120.0,
        shutdown_timeout: float = 30.0,
        node_id: int = 1,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.work_dir = Path(work_dir).resolve()
        self.host = "127.0.0.1"
        self._ports_chosen_here = port is None and controller_port is None
        picked = free_ports(3, self.host)
        self.port = port if port is not None else picked[0]
        self.controller_port = controller_port if controller_port is not None else picked[1]
        self.security = security
        self.sasl_port = picked[2]
        if self.port == self.controller_port:
            raise KafkaToolsError("the broker and controller ports must differ")
        self.group_initial_rebalance_delay_ms = group_initial_rebalance_delay_ms
        self.num_partitions = num_partitions
        self.extra_properties = dict(properties or {})
        self.jvm_options = tuple(jvm_options)
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self.node_id = node_id
        self.cluster_id = random_cluster_id()
        self.format_seconds: float | None = None
        self.startup_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._log_offset = 0
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes]], KafkaServer] | None = None
        self._sharing = class_sharing.Sharing(())

    # -- where things are -------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` for ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server's stdout and stderr (its log4j output)."""
        return self.work_dir / "server.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def sasl_bootstrap(self) -> str:
        """``127.0.0.1:<port>`` of the SASL_SSL listener (with ``security`` only)."""
        return f"{self.host}:{self.sasl_port}"

    def server_properties(self) -> dict[str, str]:
        listeners = f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}"
        advertised = f"PLAINTEXT://{self.host}:{self.port}"
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        if self.security is not None:
            listeners += f",SASL_SSL://{self.host}:{self.sasl_port}"
            advertised += f",SASL_SSL://{self.host}:{self.sasl_port}"
            protocols += ",SASL_SSL:SASL_SSL"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.num_partitions),
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": str(self.group_initial_rebalance_delay_ms),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.retention.check.interval.ms": "300000",
        }
        if self.security is not None:
            props.update(self.security.properties("SASL_SSL"))
        props.update(self.extra_properties)
        return props

    # -- life cycle -------------------------------------------------------

    def _java_command(self, main: str, *args: str, log4j: Path, sharing: Sequence[str]) -> list[str]:
        return [
            java_binary(), *self.jvm_options, *sharing,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp", jar_classpath(JAR_SET), main, *args,
        ]

    @property
    def log4j_path(self) -> Path:
        return self.work_dir / "log4j2.properties"

    def _write_config(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.server_properties().items()]
        self.config_path.write_text("# written by korvet.jvm.kafka_server\n" + "\n".join(lines) + "\n")
        self.log4j_path.write_text(_SERVER_LOG4J2)

    def format_storage(self) -> None:
        """``kafka-storage format`` with this server's cluster id (a fresh data dir only)."""
        self._write_config()
        started = time.monotonic()
        java, classpath = java_binary(), jar_classpath(JAR_SET)
        sharing = class_sharing.plan(java, classpath, STORAGE_TOOL_MAIN)
        command = [
            java, "-Xmx256m", *sharing.options, f"-Dlog4j2.configurationFile={tools_log4j2_config()}",
            "-cp", classpath, STORAGE_TOOL_MAIN,
            "format", "--config", str(self.config_path), "--cluster-id", self.cluster_id,
            "--ignore-formatted",
            *(self.security.format_arguments() if self.security is not None else ()),
        ]
        exited = False
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
            exited = result.returncode >= 0
        except subprocess.TimeoutExpired as exc:
            raise KafkaToolsError("kafka-storage format did not finish in 120 s") from exc
        finally:
            class_sharing.finish(sharing, java, classpath, exited=exited)
        if result.returncode != 0:
            raise KafkaToolsError(
                f"kafka-storage format failed ({result.returncode}):\n{result.stdout}{result.stderr}"
            )
        self.format_seconds = time.monotonic() - started
        # A work dir formatted before (a restart) keeps the cluster id it was formatted with.
        meta = self.data_dir / "meta.properties"
        for line in meta.read_text().splitlines() if meta.is_file() else []:
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                self.cluster_id = value.strip()

    def start(self) -> None:
        """Format the storage, start the JVM and wait until the broker serves clients.

        Starting again after ``stop()`` keeps the data: the storage is formatted only once.
        When the ports were picked here and someone took one before Kafka bound it, new
        ports are picked and Kafka is started again (up to three times).
        """
        if self.running:
            raise KafkaToolsError(f"Kafka is already running (pid {self.pid})")
        for attempt in range(3):
            try:
                self._start_once()
                return
            except KafkaToolsError:
                port_taken = "Address already in use" in self.run_log()
                if attempt == 2 or not self._ports_chosen_here or not port_taken:
                    raise
                self.port, self.controller_port, self.sasl_port = free_ports(3, self.host)

    def _start_once(self) -> None:
        self.format_storage()
        # The server's archive is written when it exits after a clean shutdown (stop()).
        self._sharing = class_sharing.plan(java_binary(), jar_classpath(JAR_SET), SERVER_MAIN)
        command = self._java_command(SERVER_MAIN, str(self.config_path), log4j=self.log4j_path,
                                     sharing=self._sharing.options)
        self._log_handle = self.log_path.open("ab")
        self._log_offset = self._log_handle.tell()
        started = time.monotonic()
        self._process = subprocess.Popen(
            command,
            cwd=self.work_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (it only calls prctl, looked up before the fork)
        )
        self._finalizer = weakref.finalize(self, _kill_process, self._process)
        try:
            self._wait_until_serving(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def _wait_until_serving(self, started: float) -> None:
        deadline = started + self.startup_timeout
        last_error = "no attempt yet"
        while time.monotonic() < deadline:
            process = self._process
            assert process is not None
            if process.poll() is not None:
                raise KafkaToolsError(
                    f"Kafka exited with code {process.returncode} while starting; "
                    f"see {self.log_path}\n{self.startup_failure_summary()}"
                )
            try:
                if metadata_broker_count(self.host, self.port, timeout=2.0) >= 1:
                    return
                last_error = "the broker is not unfenced yet"
            except (OSError, ValueError) as exc:  # not listening yet, or a garbled reply
                last_error = str(exc)
            time.sleep(0.2)
        raise KafkaToolsError(
            f"Kafka did not serve on {self.bootstrap} within {self.startup_timeout:.0f} s "
            f"({last_error}); see {self.log_path}\n{self.startup_failure_summary()}"
        )

    def stop(self) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL after ``shutdown_timeout``; returns the exit code."""
        process = self._process
        code: int | None = None
        if process is not None:
            code = stop_process(process, timeout=self.shutdown_timeout)
            # killed (a negative code): it may have died while writing its class archive
            class_sharing.finish(self._sharing, java_binary(), jar_classpath(JAR_SET),
                                 exited=code is not None and code >= 0)
            self._sharing = class_sharing.Sharing(())
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        return code

    def run_log(self) -> str:
        """What the server logged since it was last started."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self._log_offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def startup_failure_summary(self, lines: int = 15) -> str:
        """The errors of the last run, then its last lines: what a failed start needs to show."""
        text = self.run_log().splitlines()
        errors = [line for line in text if " ERROR " in line or " FATAL " in line or "Exception:" in line]
        parts = []
        if errors:
            parts += ["errors:", *errors[:10]]
        parts += ["last lines:", *text[-lines:]]
        return "\n".join(parts)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _kill_process(process: subprocess.Popen[bytes]) -> None:
    """Last resort when a KafkaServer is dropped or the interpreter exits while it runs."""
    if process.poll() is None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
