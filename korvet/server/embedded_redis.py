"""The embedded default Redis: a private ``redis-server`` the broker starts and stops.

It listens on a free loopback port, keeps its data (AOF) under
``<data.dir>/redis`` and dies with the broker: the child gets SIGTERM from the
kernel if the broker process dies, even by ``kill -9`` (Linux PR_SET_PDEATHSIG),
so an AOF flush still happens and no orphan keeps the port. A lock file keeps a
second broker from starting a second Redis on the same data.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from korvet.process import free_port
from korvet.settings.values import STREAM_NODE_MAX_BYTES

MIN_REDIS_MAJOR = 7


class RedisStartError(RuntimeError):
    """The embedded Redis could not be started."""


def redis_server_version(binary: str) -> tuple[int, int, int]:
    path = shutil.which(binary)
    if path is None:
        raise RedisStartError(
            f"'{binary}' not found on PATH, and the broker starts its embedded Redis with it: "
            "install Redis >= 7 (Debian/Ubuntu: apt-get install redis-server; macOS: brew "
            "install redis), or give its path with --redis-server-binary "
            "(KORVET_REDIS_SERVER_BINARY), or use a running Redis with --redis-url "
            "(KORVET_REDIS_URI)"
        )
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    if not match:
        raise RedisStartError(f"cannot tell the version of {path}: {out.strip()!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def _die_with_parent() -> None:
    # Runs in the child between fork and exec.
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    os.setpgrp()  # a Ctrl-C in the terminal goes to the broker, which stops Redis in order


@dataclass
class EmbeddedRedis:
    data_dir: Path
    binary: str = "redis-server"
    appendfsync: str = "everysec"  # always | everysec | no | off (no persistence at all)
    # Redis rewrites the AOF (a fork and a full copy of the dataset) once it has doubled
    # since the last rewrite and is at least this big. A produce load writes about 220
    # bytes of AOF per 100 B record, so Redis' default of 64 MiB meant a rewrite every
    # 300,000 records, each one a latency spike of tens of ms on a small machine.
    aof_rewrite_min_mb: int = 1024
    stream_node_max_bytes: int = STREAM_NODE_MAX_BYTES
    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _lock: IO[str] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def redis_dir(self) -> Path:
        return self.data_dir.resolve() / "redis"

    def start(self, timeout: float = 15.0) -> str:
        major, minor, patch = redis_server_version(self.binary)
        if major < MIN_REDIS_MAJOR:
            raise RedisStartError(
                f"{self.binary} is {major}.{minor}.{patch}; Korvet needs Redis >= {MIN_REDIS_MAJOR}"
            )
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        pinned = self.port
        for _attempt in range(1 if pinned else 5):
            self.port = self.port or free_port(self.host)
            self.process = subprocess.Popen(
                self._command(),
                cwd=self.redis_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - the child only calls prctl/setpgrp
            )
            if self._wait_ready(timeout):
                (self.redis_dir / "redis.url").write_text(self.url + "\n")
                return self.url
            # Most likely another process took the port between our probe and the bind.
            self._kill()
            self.port = pinned
        log_tail = self.log_tail()
        self._release_lock()
        where = (f" on port {pinned} (redis.embedded-port: is it in use?)" if pinned else "")
        raise RedisStartError(
            f"embedded redis-server did not start{where}; its log ends with:\n{log_tail}")

    def _command(self) -> list[str]:
        persistence = (
            ["--appendonly", "no", "--save", ""]
            if self.appendfsync == "off"
            else ["--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "",
                  "--auto-aof-rewrite-min-size", f"{self.aof_rewrite_min_mb}mb"]
        )
        return [
            shutil.which(self.binary) or self.binary,
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.redis_dir),
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", str(self.redis_dir / "redis.log"),
            "--pidfile", str(self.redis_dir / "redis.pid"),
            *persistence,
            "--stream-node-max-bytes", str(self.stream_node_max_bytes),
        ]

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        # AOF loading answers -LOADING to PING; +PONG means ready. The
                        # answer must come from our child, not from whatever already
                        # held the port (a pinned redis.embedded-port in use).
                        return self._is_ours(sock)
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _is_ours(self, sock: socket.socket) -> bool:
        """Whether the Redis on this connection is the one we started: its working folder
        is ours (CONFIG GET dir; true of a redis-server behind a wrapper script too)."""
        sock.sendall(b"CONFIG GET dir\r\n")
        want = str(self.redis_dir).encode()
        data = b""
        while len(data) < 4096:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
            if data.endswith(b"\r\n") and data.count(b"\r\n") >= 5:
                break  # *2, $3, dir, $N, the folder
        return b"\r\n" + want + b"\r\n" in data

    def _take_lock(self) -> None:
        lock_path = self.redis_dir / "korvet.lock"
        handle = lock_path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            url_file = self.redis_dir / "redis.url"
            running = url_file.read_text().strip() if url_file.is_file() else "unknown"
            handle.close()
            raise RedisStartError(
                f"the data folder {self.data_dir} is in use by another broker (its Redis: "
                f"{running}); pick another --data-dir, or share that Redis with --redis-url "
                f"{running}, every broker sharing it started with --multi-broker and its own "
                "--broker-id"
            ) from None
        self._lock = handle

    def _release_lock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _kill(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        self.process = None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM makes redis-server flush the AOF and exit; SIGKILL if it hangs."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
            self.process = None
        with contextlib.suppress(OSError):
            (self.redis_dir / "redis.url").unlink()
        self._release_lock()

    def log_tail(self, lines: int = 15) -> str:
        log = self.redis_dir / "redis.log"
        if not log.is_file():
            return "(no log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
