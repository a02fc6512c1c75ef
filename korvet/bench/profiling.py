"""Where the broker's time goes during a run: py-spy samples and Redis' command statistics.

``PySpy`` attaches ``py-spy record --format raw --function --nonblocking`` to the broker
process for the length of one run (not counted in the medians) and ``summarize_raw``
turns the collapsed stacks into the functions and files with the most samples: *self*
(the function was on top of the stack) and *inclusive* (anywhere on the stack), as a
share of all samples. Two recorders run side by side: ``wall`` samples every stack that
is not idle (the event loop waiting in epoll is idle), so a thread inside a system call
counts, even while the kernel has it waiting for a CPU; ``gil`` (``--gil``) samples only
while the thread holds the GIL, i.e. while Python code runs: the CPU profile. ``busy`` =
samples / (rate × seconds) is the share of the wall time in each state.

``RedisCommandStats`` resets and reads ``INFO commandstats`` of the embedded Redis, so
the same run also says what Redis spent its time on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from korvet.process import stop_process

DEFAULT_RATE = 400


def py_spy_binary() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


class PySpy:
    def __init__(self, pid: int, output: Path, rate: int = DEFAULT_RATE, *, gil: bool = False) -> None:
        self.pid = pid
        self.output = output
        self.rate = rate
        self.gil = gil
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        binary = py_spy_binary()
        if binary is None:
            raise RuntimeError("py-spy not found (pip install py-spy)")
        self.output.parent.mkdir(parents=True, exist_ok=True)
        log = self.output.with_suffix(".log").open("wb")
        self.process = subprocess.Popen(
            [binary, "record", "--pid", str(self.pid), "--format", "raw", "--function",
             "--nonblocking", "--rate", str(self.rate), "--output", str(self.output),
             *(["--gil"] if self.gil else [])],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.started = time.monotonic()

    def stop(self) -> dict[str, Any]:
        self.seconds = time.monotonic() - self.started
        if self.process is None:
            return {}
        stop_process(self.process, signal.SIGINT)  # py-spy writes its output on SIGINT
        self.process = None
        if not self.output.is_file():
            return {"error": self.output.with_suffix(".log").read_text(errors="replace")[-500:]}
        summary = summarize_raw(self.output.read_text(errors="replace"))
        summary["busy"] = summary["samples"] / (self.rate * self.seconds) if self.seconds else 0.0
        summary["seconds"] = self.seconds
        summary["raw_file"] = self.output.name
        return summary


def _frame_file(frame: str) -> str:
    """``func (path/file.py:12)`` -> ``path/file.py``."""
    inner = frame.rsplit(" (", 1)[-1].rstrip(")")
    return inner.rsplit(":", 1)[0]


def summarize_raw(text: str, top: int = 25) -> dict[str, Any]:
    """Self and inclusive sample shares per function and self share per file."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    files: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        files[_frame_file(frames[-1])] += count
        for frame in set(frames):
            inclusive[frame] += count

    def shares(counter: Counter[str]) -> list[list[Any]]:
        return [[name, round(100.0 * n / total, 2)] for name, n in counter.most_common(top)]

    return {"samples": total, "self": shares(self_counts) if total else [],
            "inclusive": shares(inclusive) if total else [],
            "files": shares(files) if total else []}


class RedisCommandStats:
    """``INFO commandstats`` of one Redis, from a reset to a read."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)

    def reset(self) -> None:
        with contextlib.suppress(redis.RedisError):
            self.client.config_resetstat()

    def read(self, records: int, top: int = 12) -> list[dict[str, Any]]:
        try:
            stats: dict[str, Any] = self.client.info("commandstats")
        except redis.RedisError:
            return []
        finally:
            self.client.close()
        rows: list[dict[str, Any]] = []
        for name, values in stats.items():
            rows.append({"command": name.removeprefix("cmdstat_"), "calls": int(values["calls"]),
                         "usec": int(values["usec"]),
                         "usec_per_call": float(values["usec_per_call"]),
                         "usec_per_record": int(values["usec"]) / records if records else 0.0})
        rows.sort(key=lambda row: -int(row["usec"]))
        return rows[:top]


class RedisMemory:
    """``used_memory`` of one Redis (``INFO memory``): what a produce run added to it."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)

    def used(self, settle_seconds: float = 5.0) -> int | None:
        """Bytes in use, once no object freed in the background (a deleted topic's stream,
        removed lazily) is pending; None when Redis cannot say."""
        deadline = time.monotonic() + settle_seconds
        try:
            while True:
                info: dict[str, Any] = self.client.info("memory")
                if int(info.get("lazyfree_pending_objects", 0)) == 0 or time.monotonic() > deadline:
                    return int(info["used_memory"])
                time.sleep(0.05)
        except (redis.RedisError, KeyError, ValueError):
            return None

    def close(self) -> None:
        self.client.close()
