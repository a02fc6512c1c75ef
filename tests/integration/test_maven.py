"""`korvet jars` resolves the pinned jars through Maven itself, and still checks their sha256.

Maven reads the user's settings from ``${user.home}/.m2/settings.xml``; these tests give
the JVM another ``user.home`` (``MAVEN_OPTS=-Duser.home=...``) whose settings.xml says
*offline* and names the local repository, so what they show is that Maven's own
configuration decides where jars come from, without touching the network.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from korvet.jvm import maven

LOCAL_REPOSITORY = Path.home() / ".m2" / "repository"


def _settings(home: Path, repository: Path) -> None:
    (home / ".m2").mkdir(parents=True)
    (home / ".m2" / "settings.xml").write_text(
        '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">'
        f"<localRepository>{repository}</localRepository><offline>true</offline></settings>")


@pytest.fixture
def offline_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's Maven repository, read offline; jars go to a fresh jar folder."""
    tlc = maven.read_lock("tlc")[0]
    if not (LOCAL_REPOSITORY / tlc.repository_path()).is_file():
        # Maven's cache lacks it (jars copied by hand into .jars): let Maven fetch it once.
        monkeypatch.setenv("KORVET_JAR_DIR", str(tmp_path / "warm-up"))
        maven.ensure("tlc", quiet=True)
    home = tmp_path / "home"
    _settings(home, LOCAL_REPOSITORY)
    monkeypatch.setenv("MAVEN_OPTS", f"-Duser.home={home}")
    monkeypatch.setenv("KORVET_JAR_DIR", str(tmp_path / "jars"))
    return tmp_path / "jars"


def test_jars_come_through_maven_and_a_verified_set_needs_no_maven(
        offline_maven: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = maven.ensure("tlc", quiet=True)
    (artifact,) = maven.read_lock("tlc")
    assert paths == [offline_maven / artifact.group / artifact.file_name]
    assert maven._sha256(paths[0]) == artifact.sha256
    # Verified once: the class path is served from the stamp, even with no Maven at all.
    real_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(offline_maven / "no-tools-here"))
    assert maven.classpath("tlc") == str(paths[0])
    # A jar changed on disk is noticed (size, mtime), found wrong, and would be fetched
    # again: here Maven is missing, which is said plainly.
    paths[0].write_bytes(b"not the jar")
    with pytest.raises(maven.JarError, match="'mvn' is not on PATH"):
        maven.ensure("tlc", quiet=True)
    monkeypatch.setenv("PATH", real_path)


def test_a_jar_that_does_not_match_the_lock_is_refused(
        offline_maven: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (artifact,) = maven.read_lock("tlc")
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "tampered.lock").write_text(f"{artifact.coordinate} {'0' * 64}\n")
    monkeypatch.setattr(maven, "LOCK_DIR", locks)
    with pytest.raises(maven.JarError, match="does not match the lock"):
        maven.ensure("tampered", quiet=True)
    assert not (offline_maven / artifact.group / artifact.file_name).exists()


def test_the_users_maven_settings_decide_where_jars_come_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "empty-home"
    _settings(home, tmp_path / "empty-repository")  # offline, with nothing in its repository
    monkeypatch.setenv("MAVEN_OPTS", f"-Duser.home={home}")
    monkeypatch.setenv("KORVET_JAR_DIR", str(tmp_path / "jars"))
    with pytest.raises(maven.JarError, match=r"(?i)offline"):
        maven.ensure("tlc", quiet=True)
