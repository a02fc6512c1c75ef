"""The broker under test, as the harness sees it: is it alive, why did it die, can it be restarted.

The runner asks ``alive()`` between checks and while they run. A broker the suite
only has an address for (``RemoteBroker``) is alive while it answers ApiVersions; if it
stops, the run stops with a message naming the checks that were running. A broker the
suite started itself (``ProcessBroker``: any command, kfake, Apache Kafka) is alive
while its process runs; if it dies, the runner restarts it, finds the check that killed
it and goes on (``runner.py``).

``start_broker(spec, work_dir)`` starts one from a ``--start`` argument:

- ``kfake``: franz-go's kfake through our small ``kfake-server`` program (built by
  ``scripts/setup.sh test``, or ``$KORVET_KFAKE``);
- ``kafka``: Apache Kafka from the pinned jars (``korvet jars fetch kafka``);
- anything else: a command line, where ``{port}`` is replaced by a free loopback port
  (the broker must listen there on 127.0.0.1).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Protocol

from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.wire import WireClient, WireError, parse_bootstrap
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode


class BrokerError(RuntimeError):
    """A broker could not be started (or restarted)."""


def answers_api_versions(bootstrap: str, timeout: float = 5.0) -> bool:
    """A new connection gets an ApiVersions v0 answer without error within ``timeout``."""
    host, port = parse_bootstrap(bootstrap)
    try:
        with WireClient(host, port, timeout=timeout) as conn:
            return int(conn.call(build_request(ApiKey.API_VERSIONS, 0)).error_code) == ErrorCode.NONE
    except (OSError, WireError):
        return False


class Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...

    @property
    def restartable(self) -> bool: ...

    def alive(self) -> bool:
        """Cheap enough to ask every half second."""
        ...

    def death(self) -> str:
        """What is known about why it stopped (exit code, last log lines)."""
        ...

    def restart(self) -> None: ...

    def stop(self) -> None: ...


class RemoteBroker:
    """A broker the suite did not start: alive while it answers ApiVersions (three tries)."""

    restartable = False

    def __init__(self, bootstrap: str, *, interval: float = 2.0) -> None:
        self._bootstrap = bootstrap
        self.interval = interval
        self._last_probe = 0.0
        self._last_answer = True

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    def alive(self) -> bool:
        now = time.monotonic()
        if now - self._last_probe < self.interval:
            return self._last_answer
        self._last_probe = now
        # A busy broker may miss one probe; a dead one misses three in a row.
        for attempt in range(3):
            if answers_api_versions(self._bootstrap, timeout=5.0):
                self._last_answer = True
                return True
            if attempt < 2:
                time.sleep(1.0)
        self._last_answer = False
        return False

    def death(self) -> str:
        return f"{self._bootstrap} no longer answers ApiVersions (three tries, 5 s each)"

    def restart(self) -> None:
        raise BrokerError("the suite did not start this broker, so it cannot restart it")

    def stop(self) -> None:
        return None


class ProcessBroker:
    """A broker process started from ``command`` (``{port}`` is a free loopback port)."""

    restartable = True

    def __init__(self, command: Sequence[str], work_dir: Path, *, name: str = "broker",
                 env: Mapping[str, str] | None = None, ready_timeout: float = 60.0) -> None:
        from korvet.process import free_port

        self.name = name
        self.template = list(command)
        self.work_dir = Path(work_dir)
        self.env = dict(env or {})
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self.log_path = self.work_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        return [part.replace("{port}", str(self.port)) for part in self.template]

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"--- start {self.starts + 1}: {shlex.join(self.command)}\n".encode())
        self._log.flush()
        try:
            self.process = subprocess.Popen(self.command, cwd=self.work_dir, stdin=subprocess.DEVNULL,
                                            stdout=self._log, stderr=subprocess.STDOUT,
                                            env={**os.environ, **self.env})
        except OSError as exc:  # no such program, not executable
            raise BrokerError(f"cannot run {self.command[0]}: {exc.strerror or exc}") from exc
        self.starts += 1
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"{self.name} exited with code {self.process.returncode} while starting:\n"
                                  f"{self.log_tail()}")
            if answers_api_versions(self.bootstrap, timeout=2.0):
                return
            time.sleep(0.1)
        self.stop()
        raise BrokerError(f"{self.name} did not answer ApiVersions on {self.bootstrap} within "
                          f"{self.ready_timeout:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def death(self) -> str:
        if self.process is None:
            return f"{self.name} is not running"
        code = self.process.poll()
        if code is None:
            return f"{self.name} (pid {self.process.pid}) still runs"
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = self.log_tail(12)
        cause = next((line for line in tail.splitlines()
                      if line.startswith(("panic:", "Exception", "fatal", "FATAL", "Error"))), "")
        return f"{self.name} {how}{': ' + cause if cause else ''}; its last output:\n{tail}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        from korvet.process import stop_process

        if self.process is not None:
            stop_process(self.process, timeout=20.0)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ProcessBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class KafkaBroker:
    """Apache Kafka from the pinned jars (``korvet.jvm.kafka_server``), restarted on its data."""

    restartable = True

    def __init__(self, work_dir: Path, properties: Mapping[str, str] | None = None) -> None:
        from korvet.jvm.kafka_server import KafkaServer

        self.server = KafkaServer(work_dir, properties=dict(properties or {}))

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    def start(self) -> None:
        self.server.start()

    def alive(self) -> bool:
        return self.server.running

    def death(self) -> str:
        return f"Apache Kafka stopped; its log:\n{self.server.startup_failure_summary(12)}"

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def stop(self) -> None:
        self.server.stop()


KFAKE_ENV = "KORVET_KFAKE"


def kfake_binary() -> Path:
    """The ``kfake-server`` program: ``$KORVET_KFAKE``, else ``.kfake/kfake-server`` in the current
    directory or in the source tree this package runs from (``scripts/setup.sh test`` builds it)."""
    override = os.environ.get(KFAKE_ENV)
    candidates = [Path(override)] if override else []
    candidates += [Path.cwd() / ".kfake" / "kfake-server",
                   Path(__file__).resolve().parents[2] / ".kfake" / "kfake-server"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise BrokerError("kfake-server not found: build it with `scripts/setup.sh test` (it needs Go) or "
                      f"set {KFAKE_ENV} to its path")


# Kafka's defaults for the settings the checks depend on (see each check's "requires"), and
# group.max.size=8 as the Apache Kafka run has it, so GROUP_MAX_SIZE_REACHED is checked too.
KFAKE_ARGS = ("--auto-create=true", "--partitions", "1", "-c", "group.max.size=8")


def kfake_command(binary: Path | None = None) -> list[str]:
    return [str(binary or kfake_binary()), "--port", "{port}", *KFAKE_ARGS]


def start_broker(spec: str, work_dir: Path) -> Broker:
    """Start the broker a ``--start`` argument names (see the module docstring); it serves on return."""
    if spec == "kafka":
        kafka = KafkaBroker(work_dir / "kafka", {"group.max.size": "8"})
        try:
            kafka.start()
        except Exception as exc:  # KafkaToolsError, OSError: the message says what is missing
            raise BrokerError(str(exc)) from exc
        return kafka
    command = kfake_command() if spec == "kfake" else shlex.split(spec)
    if not command:
        raise BrokerError("--start needs kfake, kafka or a command line")
    if spec != "kfake" and not any("{port}" in part for part in command):
        raise BrokerError("the --start command must contain {port} where the broker's port goes")
    if "/" in command[0] and not Path(command[0]).is_absolute():
        # the broker runs in its own work directory: a path relative to the caller's must not change meaning
        command[0] = str(Path(command[0]).resolve())
    broker = ProcessBroker(command, work_dir, name="kfake" if spec == "kfake" else Path(command[0]).name)
    broker.start()
    return broker
