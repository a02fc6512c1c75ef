"""Kafka's tools start from a class archive once one run wrote it, and say the same.

korvet/jvm/class_sharing.py: the first run of a tool writes its archive as it exits, later
runs map it (about half the start of a tool), a run's output is what it was without one,
and an archive that cannot be mapped is never kept (a truncated one crashes the JVM).
Each test has its own archive folder (TMPDIR), so it starts from none.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from korvet.jvm import class_sharing
from korvet.jvm.java_clients import KafkaJavaTools
from korvet.jvm.kafka_server import KAFKA_VERSION, jar_classpath, java_binary

pytestmark = [pytest.mark.kafka]

TOPICS_MAIN = "org.apache.kafka.tools.TopicCommand"


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(class_sharing.ENABLE_VARIABLE, raising=False)
    return class_sharing.cache_dir()


def _archive(main_class: str) -> Path:
    return class_sharing.archive_path(java_binary(), jar_classpath(), main_class)


def test_the_first_run_writes_the_archive_and_later_runs_map_it_and_print_the_same(
        archives: Path) -> None:
    tools = KafkaJavaTools("127.0.0.1:9")
    assert not any("SharedArchiveFile" in part for part in tools.command(TOPICS_MAIN, ["--version"]))
    first = tools.run(TOPICS_MAIN, ["--version"])
    archive = _archive(TOPICS_MAIN)
    assert archive.is_file() and archive.parent == archives
    assert [p.name for p in archives.iterdir()] == [archive.name]  # no temporary file left
    command = tools.command(TOPICS_MAIN, ["--version"])
    assert f"-XX:SharedArchiveFile={archive}" in command
    second = tools.run(TOPICS_MAIN, ["--version"])
    # the JVM's CDS warnings go to stdout by default: none may reach what callers parse
    assert first.stdout == second.stdout == f"{KAFKA_VERSION}\n"
    assert second.stderr == first.stderr
    # the archive is really mapped: the JVM says so when asked
    at = command.index("-cp")  # after the run's own -Xlog:cds*=off
    logged = subprocess.run([*command[:at], "-Xlog:cds", *command[at:]],
                            capture_output=True, text=True, check=False)
    assert "Opened archive" in logged.stdout and str(archive) in logged.stdout, logged.stdout[-2000:]


def test_an_archive_that_cannot_be_mapped_is_not_kept(
        archives: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where a crashed check would leave its hs_err_pid*.log
    java, classpath = java_binary(), jar_classpath()
    sharing = class_sharing.plan(java, classpath, TOPICS_MAIN)
    assert sharing.writing is not None and sharing.archive is not None
    good = subprocess.run([java, *sharing.options, "-cp", classpath, TOPICS_MAIN, "--version"],
                          capture_output=True, check=False)
    assert good.returncode == 0 and sharing.writing.is_file()
    sharing.writing.write_bytes(sharing.writing.read_bytes()[:5000])  # as if killed mid-write
    class_sharing.finish(sharing, java, classpath, exited=True)
    assert not sharing.archive.exists() and not sharing.writing.exists()
    assert not list(tmp_path.glob("hs_err_pid*")), "the crashed check left a crash report"
    # and a run killed while writing is not kept either, whatever it left
    sharing = class_sharing.plan(java, classpath, TOPICS_MAIN)
    assert sharing.writing is not None and sharing.archive is not None
    subprocess.run([java, *sharing.options, "-cp", classpath, TOPICS_MAIN, "--version"],
                   capture_output=True, check=False)
    class_sharing.finish(sharing, java, classpath, exited=False)
    assert not sharing.archive.exists() and list(archives.iterdir()) == []


def test_class_sharing_can_be_turned_off(archives: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_sharing.ENABLE_VARIABLE, "0")
    tools = KafkaJavaTools("127.0.0.1:9")
    assert tools.run(TOPICS_MAIN, ["--version"]).stdout == f"{KAFKA_VERSION}\n"
    assert not archives.exists() or list(archives.iterdir()) == []
    assert not any("Xshare" in p or "SharedArchive" in p for p in tools.command(TOPICS_MAIN, []))
