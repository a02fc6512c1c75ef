"""What a fault run runs against, and the faults each can take.

- ``single``: one broker on its own redis-server (AOF everysec), through a ``FaultProxy``;
- ``shared``: three ``--multi-broker`` brokers on one redis-server, each through its own proxy;
- ``cluster``: three ``--multi-broker --redis-cluster`` brokers on a Redis Cluster of three
  masters with a replica each, ``redis.wait-replicas`` 1 (a crash failover then loses no
  acknowledged record: docs/users/deploying.md#failover);
- ``kafka``: one Apache Kafka broker (KRaft, broker and controller in one JVM) from the
  pinned jars, the baseline.

Every fault is injected and healed by one blocking call (``inject``) from the run's main
thread: the children die with the thread that started them (``die_with_parent``), so they
are all started from there. Brokers restart on the port they had, so a client's bootstrap
list stays valid.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import redis

from korvet.faults.proxy import FaultProxy
from korvet.faults.redis_cluster import RedisCluster
from korvet.jvm.kafka_server import KafkaServer
from korvet.process import die_with_parent, free_port, stop_process
from korvet.server.embedded_redis import EmbeddedRedis

BROKER_KILL = "broker-kill"  # kill -9, down for a moment, started again
BROKER_PAUSE = "broker-pause"  # SIGSTOP past its lease (or claim), then SIGCONT
REDIS_RESTART = "redis-restart"  # SIGTERM (AOF flushed), started again on its port
REDIS_CUT = "redis-cut"  # one broker cut off from Redis, not from its clients
REDIS_SLOW = "redis-slow"  # every command of one broker delayed
FAILOVER = "failover"  # CLUSTER FAILOVER of a master's replica
MASTER_KILL = "master-kill"  # kill -9 of a master: its replica is promoted; it rejoins
PLANT_LOSS = "plant-loss"  # XDEL of stored records behind the broker's back (checks the checker)
ALL_KINDS = (BROKER_KILL, BROKER_PAUSE, REDIS_RESTART, REDIS_CUT, REDIS_SLOW, FAILOVER,
             MASTER_KILL, PLANT_LOSS)

LEASE_MS = 3000  # lease (several brokers) and claim (one broker) time of the run's brokers
KEYSPACE = "korvet"


class FaultError(RuntimeError):
    """A topology could not be started or a fault could not be healed."""


class Target(Protocol):
    name: str
    kinds: tuple[str, ...]  # what the scheduler may inject by default
    extra_kinds: tuple[str, ...]  # what it can inject when asked (--faults)

    @property
    def bootstrap(self) -> str: ...

    def start(self) -> None: ...

    def inject(self, kind: str, rng: random.Random) -> str: ...

    def heal(self) -> list[str]: ...

    def stop(self) -> None: ...


@dataclass
class BrokerProcess:
    """``korvet serve`` as a child process on a port it keeps across restarts."""

    folder: Path
    args: list[str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        port_file = self.folder / "broker.port"
        port_file.unlink(missing_ok=True)
        command = [sys.executable, "-m", "korvet.cli", "serve", "--port", str(self.port),
                   "--port-file", str(port_file), "--data-dir", str(self.folder),
                   "--groups-initial-rebalance-delay-ms", "0", "--no-http-enabled", *self.args]
        with (self.folder / "broker.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL,
                                            preexec_fn=die_with_parent)  # noqa: PLW1509 (prctl only)
        deadline = time.monotonic() + timeout  # a restart may wait out its old claim
        while time.monotonic() < deadline:
            if port_file.is_file() and port_file.read_text().strip():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise FaultError(f"korvet serve did not start in {self.folder}; its log ends with:\n"
                         f"{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        log = self.folder / "broker.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.is_file() else ""

    @property
    def exited(self) -> int | None:
        """Its exit code if it ended without being told to; None while it runs."""
        return None if self.process is None else self.process.poll()

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.paused = sig == signal.SIGSTOP

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            self.paused = False

    def stop(self) -> None:
        if self.process is not None:
            if self.paused:
                self.signal(signal.SIGCONT)
            stop_process(self.process, timeout=20)
            self.process = None


def down_and_up(stop: Callable[[], object], start: Callable[[], object], rng: random.Random,
                low: float, high: float) -> float:
    """Stop something, leave it down ``low`` to ``high`` seconds, start it; the time down."""
    stop()
    down = rng.uniform(low, high)
    time.sleep(down)
    start()
    return down


def stop_and_continue(send: Callable[[int], None], rng: random.Random, past_ms: int) -> float:
    """SIGSTOP for ``past_ms`` plus 0.5 to 2 s, then SIGCONT; the time paused."""
    paused = past_ms / 1000 + rng.uniform(0.5, 2.0)
    send(signal.SIGSTOP)
    time.sleep(paused)
    send(signal.SIGCONT)
    return paused


def kill_and_restart(broker: BrokerProcess, rng: random.Random) -> str:
    down = down_and_up(broker.kill, broker.start, rng, 0.5, 3.0)
    return f"{broker.address} killed, down {down:.1f} s"


def pause_and_resume(broker: BrokerProcess, rng: random.Random, past_ms: int) -> str:
    return f"{broker.address} paused {stop_and_continue(broker.signal, rng, past_ms):.1f} s"


@dataclass
class _Brokers:
    """What the Korvet topologies share: brokers, restarted when they ended by themselves."""

    brokers: list[BrokerProcess] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def revive(self) -> list[str]:
        notes = []
        for broker in self.brokers:
            if broker.paused:
                broker.signal(signal.SIGCONT)
            code = broker.exited
            if code is not None:
                notes.append(f"broker {broker.address} had exited by itself (code {code}); "
                             f"its log ends with:\n{broker.log_tail(8)}")
                broker.start()
        return notes

    def stop_brokers(self) -> None:
        for broker in self.brokers:
            broker.stop()


@dataclass
class OneRedis(_Brokers):
    """``single`` (one broker) and ``shared`` (three with --multi-broker) on one redis-server."""

    folder: Path = Path()
    count: int = 1
    name: str = "single"
    kinds: tuple[str, ...] = (BROKER_KILL, BROKER_PAUSE, REDIS_RESTART, REDIS_CUT, REDIS_SLOW)
    extra_kinds: tuple[str, ...] = (PLANT_LOSS,)
    redis: EmbeddedRedis | None = None
    proxies: list[FaultProxy] = field(default_factory=list)
    planted: list[str] = field(default_factory=list)

    def start(self) -> None:
        redis_server = EmbeddedRedis(self.folder / "redis", appendfsync="everysec")
        redis_server.start()
        self.redis = redis_server
        for number in range(1, self.count + 1):
            proxy = FaultProxy("127.0.0.1", redis_server.port).start()
            self.proxies.append(proxy)
            args = ["--redis-url", proxy.url, "--cluster-broker-ttl-ms", str(LEASE_MS),
                    "--cluster-lease-margin-ms", "500"]
            if self.count > 1:
                args += ["--multi-broker", "--broker-id", str(number),
                         "--cluster-lease-ms", str(LEASE_MS),
                         "--cluster-broker-ttl-ms", str(LEASE_MS // 2)]
            self.brokers.append(BrokerProcess(self.folder / f"broker{number}", args))
        for broker in self.brokers:
            broker.start()

    def inject(self, kind: str, rng: random.Random) -> str:
        assert self.redis is not None
        which = rng.randrange(len(self.brokers))
        broker = self.brokers[which]
        proxy = self.proxies[which]
        if kind == BROKER_KILL:
            return kill_and_restart(broker, rng)
        if kind == BROKER_PAUSE:
            return pause_and_resume(broker, rng, LEASE_MS)
        if kind == REDIS_RESTART:
            down = down_and_up(self.redis.stop, self.redis.start, rng, 0.5, 2.0)
            return f"redis restarted, down {down:.1f} s"
        if kind == REDIS_CUT:
            cut = rng.uniform(1.0, LEASE_MS / 1000 + 2.0)
            proxy.cut()
            time.sleep(cut)
            proxy.heal()
            return f"{broker.address} cut off from redis for {cut:.1f} s"
        if kind == REDIS_SLOW:
            delay, lasting = rng.uniform(0.05, 0.3), rng.uniform(2.0, 6.0)
            proxy.slow(delay)
            time.sleep(lasting)
            proxy.heal()
            return f"{broker.address}'s redis commands {delay * 1000:.0f} ms slower for {lasting:.1f} s"
        if kind == PLANT_LOSS:
            return self._plant_loss(rng)
        raise FaultError(f"{self.name} cannot take {kind}")

    def _plant_loss(self, rng: random.Random) -> str:
        """Delete stored entries of one partition in Redis, as a Redis that loses writes
        would: the run must then report acknowledged records as lost."""

        assert self.redis is not None
        client = redis.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=5)
        streams = sorted(key.decode() for key in client.scan_iter(f"{KEYSPACE}:{{*}}:stream"))
        if not streams:
            return "nothing stored yet to delete"
        stream = rng.choice(streams)
        entries = client.xrange(stream, count=rng.randint(1, 5)) or []
        ids = [entry_id for entry_id, _ in entries if entry_id is not None]
        if ids:
            client.xdel(stream, *ids)
        self.planted.append(f"{stream}: {len(ids)}")
        return f"deleted {len(ids)} entries of {stream} behind the brokers' back"

    def heal(self) -> list[str]:
        for proxy in self.proxies:
                proxy.heal()
        return self.revive()

    def stop(self) -> None:
        self.stop_brokers()
        for proxy in self.proxies:
                proxy.stop()
        if self.redis is not None:
            self.redis.stop()


@dataclass
class OnRedisCluster(_Brokers):
    """``cluster``: three brokers with --multi-broker on a Redis Cluster."""

    folder: Path = Path()
    name: str = "cluster"
    kinds: tuple[str, ...] = (BROKER_KILL, BROKER_PAUSE, FAILOVER, MASTER_KILL)
    extra_kinds: tuple[str, ...] = ()
    cluster: RedisCluster | None = None

    def start(self) -> None:
        cluster = RedisCluster(self.folder / "redis-cluster").start()
        self.cluster = cluster
        for number in (1, 2, 3):
            self.brokers.append(BrokerProcess(self.folder / f"broker{number}", [
                "--redis-url", cluster.url, "--redis-cluster", "--multi-broker",
                "--broker-id", str(number), "--cluster-lease-ms", str(LEASE_MS),
                "--cluster-lease-margin-ms", "500", "--cluster-broker-ttl-ms", str(LEASE_MS // 2),
                "--redis-wait-replicas", "1"]))
        for broker in self.brokers:
            broker.start()

    def inject(self, kind: str, rng: random.Random) -> str:
        assert self.cluster is not None
        broker = rng.choice(self.brokers)
        if kind == BROKER_KILL:
            return kill_and_restart(broker, rng)
        if kind == BROKER_PAUSE:
            return pause_and_resume(broker, rng, LEASE_MS)
        master = rng.choice(sorted(self.cluster.masters()))
        if kind == FAILOVER:
            replica = self.cluster.failover(master)
            return f"redis {replica} took over from {master} (CLUSTER FAILOVER)"
        if kind == MASTER_KILL:
            replica, promoted = self.cluster.crash(master)
            self.cluster.rejoin(master)
            return f"redis master {master} killed, {replica} promoted after {promoted:.1f} s"
        raise FaultError(f"{self.name} cannot take {kind}")

    def heal(self) -> list[str]:
        return self.revive()

    def stop(self) -> None:
        self.stop_brokers()
        if self.cluster is not None:
            self.cluster.stop()


@dataclass
class KafkaTarget:
    """``kafka``: Apache Kafka from the pinned jars, the baseline."""

    folder: Path
    name: str = "kafka"
    kinds: tuple[str, ...] = (BROKER_KILL, BROKER_PAUSE)
    extra_kinds: tuple[str, ...] = ()
    server: KafkaServer | None = None
    paused: bool = False

    @property
    def bootstrap(self) -> str:
        assert self.server is not None
        return self.server.bootstrap

    @property
    def log_path(self) -> Path:
        """The broker's log, appended to by every start (``korvet.faults.kafka_log``)."""
        assert self.server is not None
        return self.server.log_path

    def start(self) -> None:
        server = KafkaServer(self.folder / "kafka", group_initial_rebalance_delay_ms=0)
        server.start()
        self.server = server

    def _signal(self, sig: int) -> None:
        assert self.server is not None and self.server.pid is not None
        os.kill(self.server.pid, sig)
        self.paused = sig == signal.SIGSTOP

    def _kill(self) -> None:
        assert self.server is not None
        self._signal(signal.SIGKILL)
        self.server.stop()  # reaps it

    def inject(self, kind: str, rng: random.Random) -> str:
        assert self.server is not None
        if kind == BROKER_KILL:
            down = down_and_up(self._kill, self.server.start, rng, 0.5, 3.0)
            return f"kafka killed, down {down:.1f} s"
        if kind == BROKER_PAUSE:
            return f"kafka paused {stop_and_continue(self._signal, rng, LEASE_MS):.1f} s"
        raise FaultError(f"kafka cannot take {kind}")

    def heal(self) -> list[str]:
        assert self.server is not None
        if self.paused:
            self._signal(signal.SIGCONT)
        if not self.server.running:
            self.server.stop()
            self.server.start()
            return ["kafka had exited by itself; started again"]
        return []

    def stop(self) -> None:
        if self.server is not None:
            if self.paused:
                self._signal(signal.SIGCONT)
            self.server.stop()


TOPOLOGIES: dict[str, Callable[[Path], Target]] = {
    "single": lambda folder: OneRedis(folder=folder, count=1, name="single"),
    "shared": lambda folder: OneRedis(folder=folder, count=3, name="shared"),
    "cluster": lambda folder: OnRedisCluster(folder=folder),
    "kafka": KafkaTarget,
}
