"""What the broker and its tools need from the host: a Java runtime, free loopback ports, and a way to
stop the child processes they start."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


def status_kib(pid: int, field: str) -> int | None:
    """A kB figure of a process from /proc/PID/status (``VmRSS``, ``VmHWM``, ...); None when
    the process is gone or has no such line."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def find_java() -> str | None:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` from PATH; None if neither."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("java")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Distinct ports the kernel just handed out on ``host``; free unless someone takes one
    right away (callers retry on a failed bind)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def stop_process(process: subprocess.Popen[Any], sig: int = signal.SIGTERM,
                 timeout: float = 30.0) -> int:
    """Send ``sig`` to a child that still runs, wait up to ``timeout`` seconds for it to
    exit, SIGKILL it if it does not; returns its exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def _load_prctl() -> Callable[..., int] | None:
    # Looked up in the parent: after a fork in a threaded parent, the child must not
    # call into the dynamic loader.
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return prctl


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the thread that started us ends.

    So a Kafka or a broker started by a test run or a fault run that is killed (even with
    SIGKILL) shuts down instead of lingering on the shared machine.
    """
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
