"""Class data sharing (CDS) archives for the short-lived JVMs of Kafka's tools.

A Kafka tool spends most of its second or two of life loading and verifying classes from
the jars. A JVM given an archive of the classes an earlier run of the same program loaded
maps them instead: ProducerPerformance against a local broker took 0.85 s instead of
1.8 s, and every console producer, consumer and admin tool the tests and ``korvet bench``
start pays that start. The first run of a program writes its archive when it exits
(``-XX:ArchiveClassesAtExit``, about 1.7 s more, once); later runs of the same program
with the same Java and the same jars map it (``-XX:SharedArchiveFile``).

What a run does is unchanged: the JVM maps the very class files it would have read, and
falls back to reading the jars when an archive does not fit. Such a fallback prints a
warning on stdout, where the tools print what callers parse, so every run here turns the
JVM's CDS logging off; the archive's name is a digest of the Java binary, the class path,
each jar's size and modification time, and the main class, so that an archive never
meets jars or a JVM it was not written for.

Archives live in ``$TMPDIR/korvet-<uid>/cds`` (about 25 MB each, one per program; delete
the folder to reclaim the space). ``KORVET_JVM_CLASS_SHARING=0`` turns all this off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ENABLE_VARIABLE = "KORVET_JVM_CLASS_SHARING"
# CDS warnings ("Skipping ...: Old class has been linked", a top archive that does not fit)
# go to stdout by default; the tools' stdout is what callers parse.
QUIET = "-Xlog:cds*=off"


def enabled() -> bool:
    return os.environ.get(ENABLE_VARIABLE, "1") != "0"


def cache_dir() -> Path:
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"korvet-{os.getuid()}" / "cds"


def _stamp(path: str) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{path}:{info.st_size}:{info.st_mtime_ns}"


def archive_path(java: str, classpath: str, main_class: str) -> Path:
    """Where the archive of ``main_class`` run by ``java`` on ``classpath`` is (or will be)."""
    parts = [_stamp(os.path.realpath(java)), classpath,
             *(_stamp(jar) for jar in classpath.split(os.pathsep) if jar), main_class]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    name = re.sub(r"[^A-Za-z0-9]+", "-", main_class.rsplit(".", 1)[-1].rsplit("/", 1)[-1])
    return cache_dir() / f"{name}-{digest}.jsa"


@dataclass(frozen=True, slots=True)
class Sharing:
    """The JVM options of one run, and the archive it writes when it is the first."""

    options: tuple[str, ...]
    writing: Path | None = None  # the archive this run writes at exit, under a temporary name
    archive: Path | None = None  # the name it takes once checked


def options_for(java: str, classpath: str, main_class: str) -> tuple[str, ...]:
    """Map the program's archive when there is one; nothing else (for a JVM whose exit the
    caller does not wait for, which ``plan`` needs)."""
    if not enabled():
        return ()
    archive = archive_path(java, classpath, main_class)
    return (f"-XX:SharedArchiveFile={archive}", QUIET) if archive.is_file() else ()


def plan(java: str, classpath: str, main_class: str) -> Sharing:
    """The options of a run whose exit the caller waits for: map the archive, or write it."""
    if not enabled():
        return Sharing(())
    archive = archive_path(java, classpath, main_class)
    if archive.is_file():
        return Sharing((f"-XX:SharedArchiveFile={archive}", QUIET))
    with contextlib.suppress(OSError):
        archive.parent.mkdir(parents=True, exist_ok=True)
        # a per-process name: parallel test workers may each write the first archive
        writing = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
        return Sharing((f"-XX:ArchiveClassesAtExit={writing}", QUIET), writing, archive)
    return Sharing(())


def finish(sharing: Sharing, java: str, classpath: str, *, exited: bool) -> None:
    """After the run: keep the archive it wrote if the JVM exited by itself (not killed while
    writing it) and a JVM can map it; a truncated archive crashes the JVM that maps it."""
    if sharing.writing is None or sharing.archive is None:
        return
    try:
        if exited and sharing.writing.is_file():
            # a bad archive crashes this JVM on purpose: no crash report in the caller's
            # folder (hs_err_pid*.log), no core dump
            check = subprocess.run(
                [java, f"-XX:SharedArchiveFile={sharing.writing}", "-XX:+VerifySharedSpaces",
                 QUIET, f"-XX:ErrorFile={os.devnull}", "-XX:-CreateCoredumpOnCrash",
                 "-cp", classpath, "-version"],
                capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
            if check.returncode == 0:
                sharing.writing.replace(sharing.archive)
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        sharing.writing.unlink(missing_ok=True)
