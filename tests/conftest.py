"""Shared fixtures: a real Korvet broker process on an embedded Redis, on free ports.

``korvet`` (session scope) is one broker shared by the whole run: tests must use
their own topic and group names (``unique_name``). ``fresh_korvet`` starts a
private broker for tests that stop, kill or restart it. ``redis_url`` is a bare
redis-server of a test module's own, for the tests that run Korvet's Lua scripts
without a broker (the state-graph replays, the script laws).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings

from korvet.process import stop_process
from korvet.server.embedded_redis import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[1]

# Hypothesis profiles (tests/support/examples.py scales per-test counts by them).
settings.register_profile("dev", max_examples=20, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("deep", max_examples=2000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("KORVET_HYPOTHESIS_PROFILE", "ci"))

# Tests that need more than the Python process itself: a broker, Redis, the JVM, TLC.
# Everything else is the fast tier (`make check`: pytest -m "not integration").
_HEAVY_MARKERS = {"tlc", "clients", "kafka", "spark"}
_HEAVY_FIXTURES = {"korvet", "fresh_korvet", "redis_url", "fresh_redis_url", "kafka", "spark"}


# How `make test` spreads the suite over its workers (scripts/pytest.sh runs pytest-xdist with
# `--dist loadfile --no-loadscope-reorder`): a test file goes to one worker as a whole (its
# module-scoped brokers start once), and files are handed out in this order, the longest
# first (seconds from a full run's --durations), then the rest as collected. With xdist's
# default order (most tests first) the longest files, which have few tests, started last and
# ran alone. The TLC models stay in one file on one worker: spread over two workers, two TLC
# runs fought for the two cores while the other work waited (a full run took 23 min instead of 16).
_LONGEST_FIRST = (  # seconds per file (call, set-up and tear-down) in the fresh-clone run at
    # 11fafda: 31 min 27 s of pytest on 3 workers, every file of 20 s or more
    "tests/spec/test_spec_models.py",  # 1412 s
    "tests/integration/test_groups.py",  # 240 s
    "tests/integration/test_spark_pipeline.py",  # 216 s
    "tests/spec/GroupCoordinator/test_coordinator_replay.py",  # about 120 s since b743d4a (212 s in that run)
    "tests/conformance/test_kafka_conformance.py",  # 183 s
    "tests/integration/test_fault_runs_several_brokers.py",  # 171 s
    "tests/test_bench_smoke.py",  # 166 s
    "tests/spec/DenseLog/test_dense_log_replay.py",  # 151 s
    "tests/integration/test_security.py",  # 144 s
    "tests/spec/Transactions/test_transactions_replay.py",  # 113 s
    "tests/spec/CoordinatorLease/test_lease_replay.py",  # 99 s
    "tests/spec/PartitionLog/test_partition_log_replay.py",  # 91 s
    "tests/integration/test_transactions.py",  # 88 s
    "tests/integration/test_several_brokers.py",  # 84 s
    "tests/integration/test_coordinator_durability.py",  # 83 s
    "tests/spec/GroupCoordinatorTrace/test_spec_validate.py",  # 82 s
    "tests/integration/test_kafka_connect.py",  # 81 s
    "tests/integration/test_share_consumers.py",  # 80 s
    "tests/integration/test_admin.py",  # 72 s
    "tests/conformance/test_korvet_conformance.py",  # 69 s
    "tests/integration/test_fault_runs.py",  # 68 s
    "tests/integration/test_redis_cluster.py",  # 62 s
    "tests/integration/test_safe_topology.py",  # 56 s
    "tests/spec/Compaction/test_compaction_replay.py",  # 55 s
    "tests/integration/test_fault_runs_kafka.py",  # 52 s
    "tests/conformance/test_kfake_conformance.py",  # 50 s
    "tests/integration/test_clients.py",  # 49 s
    "tests/conformance/test_security_conformance.py",  # 46 s
    "tests/integration/test_compaction.py",  # 45 s
    "tests/integration/test_broker_behaviour.py",  # 44 s
    "tests/integration/test_fault_runs_transactions.py",  # 40 s
    "tests/integration/test_admin_tools.py",  # 40 s
    "tests/integration/test_limits.py",  # 39 s
    "tests/integration/test_jvm_tools.py",  # 38 s
    "tests/integration/test_stop.py",  # 37 s
    "tests/spec/SharePartitionRedis/test_share_replay.py",  # 36 s
    "tests/integration/test_several_brokers_on_redis_cluster.py",  # 35 s
    "tests/integration/test_live.py",  # 35 s
    "tests/integration/test_several_brokers_stale_owner.py",  # 33 s
    "tests/integration/test_share_groups.py",  # 31 s
    "tests/integration/test_kafka_streams.py",  # 30 s
    "tests/spec/GroupCoordinator/test_coordinator_stateful.py",  # 29 s
    "tests/integration/test_dense_differential.py",  # 29 s
    "tests/test_docs.py",  # 28 s
    "tests/integration/test_clean_script.py",  # 27 s
    "tests/integration/test_fetch_sessions.py",  # 25 s
    "tests/integration/test_dense_offsets.py",  # 24 s
    "tests/spec/ProducerState/test_producer_state_replay.py",  # 23 s
    "tests/integration/test_share_partitions.py",  # 21 s
    "tests/integration/test_redis_memory.py",  # 21 s
    "tests/spec/OffsetCodec/test_offset_replay.py",  # 20 s
    "tests/integration/test_redis_pipe.py",  # 20 s
)


# One TLC run per model per session, shared by the verdict test and the replays
# (tests/support/tlc_runs.py): the folder is made here, on the controller, before xdist
# starts its workers (they inherit the variable), and removed when the session ends.
_TLC_RUNS = "KORVET_TLC_RUNS"
_made_tlc_runs: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.environ.get(_TLC_RUNS):
        return
    folder = tempfile.mkdtemp(prefix="korvet-tlc-runs-")
    _made_tlc_runs.append(folder)
    os.environ[_TLC_RUNS] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _made_tlc_runs:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_TLC_RUNS, None)
    _made_tlc_runs.clear()


def _file_of(item: pytest.Item) -> str:
    return item.path.relative_to(ROOT).as_posix()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # `pytest -k SessionTimeout` finds every test of that spec action: the replay's case
        # and the example tests marked spec("GroupCoordinator", "SessionTimeout", ...).
        for marker in item.iter_markers("spec"):
            item.extra_keyword_matches.update(str(name) for name in marker.args)
        fixtures = set(getattr(item, "fixturenames", ()))
        heavy = (item.path.parent.name == "integration"
                 or any(item.get_closest_marker(m) for m in _HEAVY_MARKERS)
                 or bool(fixtures & _HEAVY_FIXTURES))
        if heavy:
            item.add_marker(pytest.mark.integration)
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_file_of(item), len(rank)))  # stable: files stay whole
KORVET = [sys.executable, "-m", "korvet.cli"]


@dataclass
class KorvetProcess:
    """A `korvet serve` child process with its own data folder (embedded Redis)."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=lambda: list(KORVET))  # what runs `serve`
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    http_port: int = 0  # the operations endpoint (probes, /metrics), on a free port
    log_path: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def redis_url(self) -> str:
        return (self.data_dir / "redis" / "redis.url").read_text().strip()

    def start(self, timeout: float = 30.0) -> KorvetProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.data_dir / "broker.port"
        port_file.unlink(missing_ok=True)
        self.log_path = self.data_dir / "broker.log"
        # Reuse the previous port on a restart so clients can reconnect to the same address.
        port_args = ["--port", str(self.port)] if self.port else ["--port", "0"]
        http_port_file = self.data_dir / "http.port"
        http_port_file.unlink(missing_ok=True)
        command = [*self.command, "serve", *port_args, "--port-file", str(port_file),
                   "--data-dir", str(self.data_dir), "--redis-appendfsync", "everysec",
                   "--http-port", "0", "--http-port-file", str(http_port_file),
                   *self.extra_args]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                        env={**{k: v for k, v in os.environ.items() if k != _TLC_RUNS},
                                             **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if port_file.is_file() and port_file.read_text().strip():
                self.port = int(port_file.read_text())
                if http_port_file.is_file():
                    self.http_port = int(http_port_file.read_text())
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"korvet serve did not start; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.process is None:
            return
        stop_process(self.process, sig, timeout)
        self.process = None
        if sig == signal.SIGKILL:
            # The embedded Redis gets SIGTERM from the kernel when its parent dies; give it
            # the moment it needs to flush and release the data folder's lock.
            time.sleep(0.5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> KorvetProcess:
        self.stop()
        return self.start()


@pytest.fixture(scope="session")
def korvet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    # Share groups may hold records for as little as 1 s and members go unheard for as
    # little as 1 s (Kafka's least: 15 s and 45 s): tests see locks and sessions run out
    # without waiting, as Kafka's own tests lower its broker's bounds.
    broker = KorvetProcess(tmp_path_factory.mktemp("korvet-shared"), extra_args=[
        "--share-min-record-lock-duration-ms", "1000",
        "--groups-share-min-session-timeout-ms", "1000",
        "--groups-share-min-heartbeat-interval-ms", "100"])
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def fresh_korvet(tmp_path: Path) -> Iterator[KorvetProcess]:
    broker = KorvetProcess(tmp_path / "korvet")
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def multi_korvet(tmp_path: Path) -> Iterator[KorvetProcess]:
    """A private broker with ``--multi-broker`` (broker id 1), for tests that start a second
    broker on its Redis (``--multi-broker --broker-id 2``): a broker without it claims its
    Redis alone and refuses others (server/claim.py)."""
    broker = KorvetProcess(tmp_path / "korvet", extra_args=["--multi-broker", "--broker-id", "1"])
    broker.start()
    yield broker
    broker.stop()


SECOND_BROKER = ["--multi-broker", "--broker-id", "2"]


def _private_redis() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        server = EmbeddedRedis(Path(folder), appendfsync="off")
        url = server.start()
        try:
            yield url
        finally:
            server.stop()


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A private redis-server (no persistence) for one test module."""
    yield from _private_redis()


@pytest.fixture
def fresh_redis_url() -> Iterator[str]:
    """A private redis-server (no persistence) for one test, which may change its settings
    (CONFIG SET) or run brokers on it that must not meet another test's."""
    yield from _private_redis()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:8]}"
