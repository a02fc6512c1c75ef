"""The brokers a benchmark run starts and stops: Korvet (two persistence settings) and Kafka.

Each listens on free loopback ports and lives in its own folder under the run's work
directory. ``processes()`` names the server-side processes whose CPU time a run
charges to the broker (for Korvet: the broker and its embedded Redis).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from korvet.jvm.kafka_server import KafkaServer
from korvet.process import status_kib, stop_process
from korvet.protocol.frame_io import call_blocking
from korvet.protocol.framing import FrameError

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BrokerError(RuntimeError):
    """A broker did not start or a topic could not be created."""


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a live process ((0, 0) if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0, 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) / _CLOCK_TICKS, int(fields[12]) / _CLOCK_TICKS


def peak_rss_bytes(pid: int) -> int | None:
    """The process' peak resident set so far (``VmHWM`` in /proc; None if it is gone)."""
    kib = status_kib(pid, "VmHWM")
    return None if kib is None else kib * 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (0 if it is gone)."""
    return sum(cpu_times(pid))


class Broker(Protocol):
    name: str

    @property
    def bootstrap(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def processes(self) -> dict[str, int]: ...


@dataclass
class KorvetBroker:
    """``korvet serve`` as a child process, with its embedded Redis."""

    name: str
    data_dir: Path
    appendfsync: str = "everysec"
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    startup_seconds: float = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    def start(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.data_dir / "broker.port"
        port_file.unlink(missing_ok=True)
        command = [sys.executable, "-m", "korvet.cli", "serve", "--port", "0",
                   "--port-file", str(port_file), "--data-dir", str(self.data_dir),
                   "--redis-appendfsync", self.appendfsync,
                   "--groups-initial-rebalance-delay-ms", "0",
                   # the operations endpoint stays on (as deployed), on a free port
                   "--http-port", "0", *self.extra_args]
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        deadline = started + timeout
        while time.monotonic() < deadline:
            text = port_file.read_text().strip() if port_file.is_file() else ""
            if text:
                self.port = int(text)
                self.startup_seconds = time.monotonic() - started
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        raise BrokerError(f"korvet serve did not start; its log ends with:\n{tail}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None:
            return
        stop_process(self.process, timeout=timeout)
        self.process = None

    def redis_pid(self) -> int | None:
        try:
            return int((self.data_dir / "redis" / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def processes(self) -> dict[str, int]:
        found: dict[str, int] = {}
        if self.process is not None:
            found["broker"] = self.process.pid
        redis_pid = self.redis_pid()
        if redis_pid is not None:
            found["redis"] = redis_pid
        return found


@dataclass
class KafkaBroker:
    """Apache Kafka (korvet.jvm.kafka_server) in KRaft combined mode."""

    name: str
    work_dir: Path
    server: KafkaServer | None = None
    startup_seconds: float = 0.0

    @property
    def bootstrap(self) -> str:
        assert self.server is not None
        return self.server.bootstrap

    def start(self) -> None:
        self.server = KafkaServer(self.work_dir, group_initial_rebalance_delay_ms=0)
        self.server.start()
        self.startup_seconds = (self.server.startup_seconds or 0.0) + (self.server.format_seconds or 0.0)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def processes(self) -> dict[str, int]:
        pid = self.server.pid if self.server is not None else None
        return {"broker": pid} if pid is not None else {}


FIND_COORDINATOR = 10


def supported_api_keys(bootstrap: str, timeout: float = 10.0) -> set[int]:
    """The API keys a broker lists in its ApiVersions (v0) reply."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest
    from kio.schema.errors import ErrorCode

    host, _, port = bootstrap.rpartition(":")
    try:
        reply = call_blocking(host, int(port), ApiVersionsRequest(), timeout=timeout,
                              client_id="korvet-bench")
    except (OSError, FrameError) as exc:
        raise BrokerError(f"ApiVersions to {bootstrap} failed: {exc}") from None
    if reply.error_code != ErrorCode.none:
        raise BrokerError(f"ApiVersions answered error {reply.error_code}")
    return {int(api.api_key) for api in reply.api_keys}


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # log_level 3: errors only (not librdkafka's notices about purged background events)
    return AdminClient({"bootstrap.servers": bootstrap, "client.id": "korvet-bench-admin",
                        "log_level": 3})


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(bootstrap)  # must outlive the futures: its handle answers them
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs or {})],
        operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[name].result(timeout)
    except Exception as exc:
        raise BrokerError(f"cannot create topic {name} on {bootstrap}: {exc}") from exc
    _wait_for_metadata(bootstrap, name, partitions, timeout)


def _wait_for_metadata(bootstrap: str, name: str, partitions: int, timeout: float) -> None:
    """Kafka answers CreateTopics before every partition has a leader; wait for them."""
    admin = _admin(bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metadata = admin.list_topics(name, timeout=5)
        topic = metadata.topics.get(name)
        if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())):
            return
        time.sleep(0.1)
    raise BrokerError(f"topic {name} has no leader for every partition after {timeout:.0f} s")


def delete_topic(bootstrap: str, name: str, timeout: float = 30.0) -> None:
    """Free the broker's memory and disk between runs; a failure is not the run's failure."""
    admin = _admin(bootstrap)
    futures = admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[name].result(timeout)
    except Exception as exc:
        raise BrokerError(f"cannot delete topic {name} on {bootstrap}: {exc}") from exc
