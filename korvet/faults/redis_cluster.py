"""A real Redis Cluster for tests and fault runs: three masters with one replica each, on free ports.

Started from Debian's ``redis-server`` (cluster mode, no persistence, short node timeout)
and joined with ``redis-cli --cluster create ... --cluster-replicas 1``. ``failover``
promotes a master's replica with ``CLUSTER FAILOVER`` (a manual failover: the replica
catches up with its master first, so no acknowledged write is lost) and waits until every
node agrees on the new topology.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from korvet.process import free_ports, stop_process

# Longer than Redis' manual-failover limit (5 s) and a lost election's back-off.
_MANUAL_FAILOVER_RETRY_S = 8.0


@dataclass
class RedisCluster:
    folder: Path
    ports: list[int] = field(default_factory=list)
    buses: list[int] = field(default_factory=list)  # each node's cluster-bus port
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    node_timeout_ms: int = 2000  # cluster-node-timeout: how long until a dead master's replica is promoted
    killed: set[int] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self, timeout: float = 30.0) -> RedisCluster:
        binary = shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if binary is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed (apt-get install redis-server)")
        ports = free_ports(12)  # a client port and a cluster-bus port per node
        self.ports = ports[:6]
        self.buses = ports[6:]
        for port in self.ports:
            self.processes.append(self._spawn(binary, port))
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while not _answers(port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start")
                time.sleep(0.05)
        subprocess.run([cli, "--cluster", "create",
                        *[f"127.0.0.1:{p}" for p in self.ports],
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=timeout)
        self.wait_settled(timeout)
        return self

    def _spawn(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        node = self.folder / str(port)
        node.mkdir(parents=True, exist_ok=True)
        bus = self.buses[self.ports.index(port)]
        return subprocess.Popen(
            [binary, "--port", str(port), "--cluster-port", str(bus), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes",
             "--cluster-config-file", str(node / "nodes.conf"), "--cluster-node-timeout",
             str(self.node_timeout_ms), "--appendonly", "no", "--save", "", "--dir", str(node),
             "--protected-mode", "no", "--logfile", str(node / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def rejoin(self, port: int, timeout: float = 30.0) -> None:
        """Start a crashed node again (no persistence: it comes back empty, with its
        nodes.conf): it finds its slots taken and becomes a replica of their new master;
        returns once that master has it as an in-sync replica."""
        binary = shutil.which("redis-server")
        assert binary is not None
        self.processes[self.ports.index(port)] = self._spawn(binary, port)
        self.killed.discard(port)
        deadline = time.monotonic() + timeout
        while not (_answers(port) and self._synced_replica(port)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{port} did not come back as a replica")
            time.sleep(0.05)
        self.wait_settled(timeout)

    def _synced_replica(self, port: int) -> bool:
        info = self.client(port).info("replication")
        return info["role"] == "slave" and info.get("master_link_status") == "up"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def live(self) -> list[int]:
        return [p for p in self.ports if p not in self.killed]

    def masters(self) -> list[int]:
        return [p for p in self.live() if self.role(p) == "master"]

    def role(self, port: int) -> str:
        return str(self.client(port).info("replication")["role"])

    def replica_of(self, master: int) -> int:
        for port in self.live():
            info = self.client(port).info("replication")
            if info["role"] == "slave" and int(info["master_port"]) == master:
                return port
        raise RuntimeError(f"no replica of {master}")

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Until every node reports the cluster ok with three masters that all have a
        replica in sync, and all nodes agree on who the masters are."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._settled():
                return
            time.sleep(0.1)
        raise RuntimeError("the Redis cluster did not settle")

    def _settled(self) -> bool:
        views = set()
        for port in self.live():
            client = self.client(port)
            if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):  # type: ignore[no-untyped-call]
                return False
            nodes = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
            text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
            views.add(frozenset(line.split()[1].split("@")[0] for line in text.splitlines()
                                if _serving_master(line.split()[2].split(","))))
        if len(views) != 1 or len(next(iter(views))) != 3:
            return False
        if self.killed:  # a crashed master's replica stays without one
            return True
        for master in self.masters():
            info = self.client(master).info("replication")
            if int(info.get("connected_slaves", 0)) < 1:
                return False
        return True

    def failover(self, master: int, timeout: float = 60.0) -> int:
        """CLUSTER FAILOVER on ``master``'s replica; returns the replica's port, now master.

        Redis gives a manual failover 5 s (the replica catching up with its paused master,
        then an election) and drops it silently when that runs out, as it can on a loaded
        machine: so the command is sent again while the replica is still a replica, as an
        operator would."""
        replica = self.replica_of(master)
        deadline = time.monotonic() + timeout
        asked = -_MANUAL_FAILOVER_RETRY_S  # asked first at once
        while self.role(replica) != "master" or self.role(master) != "slave":
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"failover of {master} to {replica} did not complete")
            if now - asked > _MANUAL_FAILOVER_RETRY_S and self.role(replica) != "master":
                asked = now
                # it may have become master since the check, or see its master down: both
                # refuse the command, and the next round looks again
                with contextlib.suppress(redis.ResponseError):
                    self.client(replica).execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
            time.sleep(0.02)
        self.wait_settled(timeout)
        return replica

    def crash(self, master: int, timeout: float = 30.0) -> tuple[int, float]:
        """``kill -9`` of ``master``: its replica is promoted once the other masters have
        not heard from it for ``node_timeout_ms`` and it won the election. Returns the
        replica's port and the seconds from the kill until it served as master (its own
        view); then waits until every live node agrees."""
        replica = self.replica_of(master)
        process = self.processes[self.ports.index(master)]
        process.kill()
        process.wait()
        killed_at = time.monotonic()
        self.killed.add(master)
        deadline = killed_at + timeout
        while self.role(replica) != "master":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{replica} was not promoted after {master} died")
            time.sleep(0.02)
        promoted = time.monotonic() - killed_at
        self.wait_settled(timeout)
        return replica, promoted

    def stop(self) -> None:
        for process in self.processes:
            stop_process(process)
        self.processes.clear()


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping())
    except (redis.ConnectionError, OSError):
        return False


def _serving_master(flags: list[str]) -> bool:
    """A CLUSTER NODES line's flags: a master not known to have failed (a crashed master
    stays listed as ``master,fail`` until it comes back)."""
    return "master" in flags and "fail" not in flags
