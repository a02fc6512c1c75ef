"""The machine and software a benchmark ran on, for the results file and the doc."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def _first_line(command: list[str]) -> str:
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    text = (process.stdout or process.stderr).strip()
    return text.splitlines()[0] if text else "unavailable"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def _git_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or shutil.which("git") is None:
        return "unknown"
    commit = _first_line(["git", "-C", str(root), "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"{commit}{' (with uncommitted changes)' if dirty else ''}"


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def describe() -> dict[str, Any]:
    from korvet import __version__
    from korvet.jvm.kafka_server import KAFKA_VERSION

    redis_version = _first_line([shutil.which("redis-server") or "redis-server", "--version"])
    matched = re.search(r"v=(\S+)", redis_version)
    java = shutil.which("java")
    try:
        import confluent_kafka

        python_side, native = confluent_kafka.version(), confluent_kafka.libversion()
        rdkafka = (f"confluent-kafka {python_side if isinstance(python_side, str) else python_side[0]}, "
                   f"librdkafka {native if isinstance(native, str) else native[0]}")
    except ImportError:
        rdkafka = "not installed"
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "redis": matched.group(1) if matched else redis_version,
        "java": _first_line([java, "-version"]) if java else "not found",
        "kafka": KAFKA_VERSION,
        "librdkafka": rdkafka,
        "korvet": __version__,
        "commit": _git_commit(),
    }
