"""JVM jars resolved by Maven itself, pinned by version and sha256.

Each *jar set* (``tlc``, ``kafka``, ``spark`` ...) is a lock file in
``korvet/jvm/locks/<set>.lock``: one artifact per line,
``group:artifact:version[:classifier] <sha256>``. ``ensure()`` makes every jar of a
set present in a git-ignored folder and returns the class path. Jars that are missing
there are resolved by **Maven** (``mvn``): Maven downloads them as it downloads anything,
so the user's ``~/.m2/settings.xml`` (mirrors, proxies, credentials) and Maven's local
repository (``~/.m2/repository``, the download cache) apply, and the repository is the
one that Maven is configured with: Maven's own default unless settings.xml says
otherwise. No repository address is written in this project. Every jar is checked
against the sha256 of its lock line before it is used; a set once verified is
remembered (size and modification time of each file, in ``.verified-<set>.json``), so
later calls only look at the files. Nothing is downloaded at run time of a test: the
set-up commands call ``korvet jars fetch`` first.

``lock()`` is the maintainer's tool that writes a lock file: it asks Maven to
resolve the transitive dependencies of some coordinates and records the
sha256 of every jar it resolved.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

LOCK_DIR = Path(__file__).with_name("locks")


class JarError(RuntimeError):
    """A jar could not be had, or did not match its checksum."""


@dataclass(frozen=True, slots=True)
class Artifact:
    group: str
    artifact: str
    version: str
    classifier: str
    sha256: str

    @property
    def coordinate(self) -> str:
        base = f"{self.group}:{self.artifact}:{self.version}"
        return f"{base}:{self.classifier}" if self.classifier else base

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"

    def repository_path(self) -> Path:
        """Where Maven's repository layout keeps the jar (relative to the repository root)."""
        return Path(*self.group.split("."), self.artifact, self.version, self.file_name)

    def local_path(self, root: Path) -> Path:
        return root / self.group / self.file_name


def jar_root() -> Path:
    """Where jars live: $KORVET_JAR_DIR, else ``.jars`` in a source checkout, else a user cache."""
    configured = os.environ.get("KORVET_JAR_DIR")
    if configured:
        return Path(configured)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "korvet").is_dir():
        return checkout / ".jars"
    return Path.home() / ".cache" / "korvet" / "jars"


def available_sets() -> list[str]:
    return sorted(p.stem for p in LOCK_DIR.glob("*.lock"))


def parse_lock(text: str) -> list[Artifact]:
    artifacts: list[Artifact] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            coordinate, digest = line.split()
        except ValueError:
            raise JarError(f"lock line {number}: expected 'coordinate sha256', got {raw!r}") from None
        parts = coordinate.split(":")
        if len(parts) not in (3, 4) or len(digest) != 64:
            raise JarError(f"lock line {number}: malformed entry {raw!r}")
        classifier = parts[3] if len(parts) == 4 else ""
        artifacts.append(Artifact(parts[0], parts[1], parts[2], classifier, digest.lower()))
    return artifacts


def _lock_path(name: str) -> Path:
    path = LOCK_DIR / f"{name}.lock"
    if not path.is_file():
        raise JarError(f"unknown jar set {name!r}; known: {', '.join(available_sets())}")
    return path


def read_lock(name: str) -> list[Artifact]:
    return parse_lock(_lock_path(name).read_text())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarError("the pinned jars are fetched with Maven, and 'mvn' is not on PATH: install "
                       "Maven (Debian: apt-get install maven; scripts/setup.sh test does it)")
    return mvn


def _run_maven(arguments: Sequence[str], what: str, timeout: float = 1800) -> None:
    # -B: no interactive progress; -C: fail on a repository checksum mismatch.
    command = [_maven(), "-B", "-q", "-C", "-Dstyle.color=never", *arguments]
    try:
        result = subprocess.run(command, check=False, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise JarError(f"Maven did not finish {what} in {timeout:.0f} s") from exc
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-40:])
        raise JarError(f"Maven could not finish {what}:\n{output}")


def _resolve(artifacts: Sequence[Artifact], root: Path) -> None:
    """Have Maven fetch exactly these artifacts (no transitive ones: a lock lists them all),
    then check each against its sha256 and put it under ``root``."""
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        every = [("*", "*")]
        pom.write_text(_POM.format(deps="\n".join(_dependency_xml(a.coordinate, every)
                                                  for a in artifacts)))
        copied = Path(work) / "jars"
        _run_maven(["-f", str(pom), f"{_DEPENDENCY_PLUGIN}:copy-dependencies",
                    f"-DoutputDirectory={copied}", "-Dmdep.useRepositoryLayout=true",
                    "-Dmdep.copyPom=false"], f"resolving {len(artifacts)} jars")
        for artifact in artifacts:
            source = copied / artifact.repository_path()
            if not source.is_file():
                raise JarError(f"Maven resolved no file for {artifact.coordinate}")
            actual = _sha256(source)
            if actual != artifact.sha256:
                raise JarError(f"{artifact.coordinate}: sha256 {actual} does not match the "
                               f"lock's {artifact.sha256} (a mirror serving another file?)")
            target = artifact.local_path(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target.with_suffix(".part"))
            target.with_suffix(".part").replace(target)


def _stamp_path(root: Path, name: str) -> Path:
    return root / f".verified-{name}.json"


def _file_marks(paths: Iterable[Path]) -> dict[str, list[int]]:
    marks = {}
    for path in paths:
        stat = path.stat()
        marks[str(path)] = [stat.st_size, stat.st_mtime_ns]
    return marks


def _verified(root: Path, name: str, lock_digest: str, paths: Sequence[Path]) -> bool:
    """True when this lock's jars were all checked and none changed since (size, mtime)."""
    try:
        stamp = json.loads(_stamp_path(root, name).read_text())
        return bool(stamp["lock"] == lock_digest and stamp["files"] == _file_marks(paths))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def ensure(name: str, *, quiet: bool = False) -> list[Path]:
    """Make every jar of a set present and verified; return their paths in lock order."""
    lock_text = _lock_path(name).read_text()
    lock_digest = hashlib.sha256(lock_text.encode()).hexdigest()
    artifacts = parse_lock(lock_text)
    root = jar_root()
    paths = [a.local_path(root) for a in artifacts]
    if _verified(root, name, lock_digest, paths):
        return paths
    wanted = [a for a in artifacts
              if not a.local_path(root).is_file() or _sha256(a.local_path(root)) != a.sha256]
    if wanted:
        if not quiet:
            print(f"korvet jars: resolving {len(wanted)} of {len(artifacts)} jars for '{name}' "
                  "with Maven (your settings.xml and ~/.m2 apply)", file=sys.stderr)
        started = time.monotonic()
        _resolve(wanted, root)
        if not quiet:
            print(f"korvet jars: '{name}' resolved in {time.monotonic() - started:.0f} s",
                  file=sys.stderr)
    root.mkdir(parents=True, exist_ok=True)
    _stamp_path(root, name).write_text(json.dumps({"lock": lock_digest,
                                                   "files": _file_marks(paths)}))
    return paths


def classpath(name: str) -> str:
    return os.pathsep.join(str(p) for p in ensure(name, quiet=True))


def present(name: str) -> bool:
    """True when every jar of the set is already on disk (checksums are checked by ensure)."""
    root = jar_root()
    return all(a.local_path(root).is_file() for a in read_lock(name))


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>korvet.lock</groupId><artifactId>lock</artifactId><version>0</version>
  <dependencies>
{deps}
  </dependencies>
</project>
"""

# Pinned, so the listing format parsed below does not change under us.
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _dependency_xml(coordinate: str, exclusions: Sequence[tuple[str, str]]) -> str:
    parts = coordinate.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise JarError(f"coordinate {coordinate!r} is not group:artifact:version[:classifier]")
    classifier = f"<classifier>{_xml(parts[3])}</classifier>" if len(parts) == 4 else ""
    excluded = "".join(
        f"<exclusion><groupId>{_xml(g)}</groupId><artifactId>{_xml(a)}</artifactId></exclusion>"
        for g, a in exclusions
    )
    return (
        f"    <dependency><groupId>{_xml(parts[0])}</groupId><artifactId>{_xml(parts[1])}</artifactId>"
        f"<version>{_xml(parts[2])}</version>{classifier}"
        + (f"<exclusions>{excluded}</exclusions>" if excluded else "")
        + "</dependency>"
    )


def _parse_exclusion(pattern: str) -> tuple[str, str]:
    parts = pattern.split(":")
    if len(parts) != 2 or not all(parts):
        raise JarError(f"exclusion {pattern!r} is not group:artifact (either may be '*')")
    return parts[0], parts[1]


def lock(
    name: str,
    coordinates: Sequence[str],
    *,
    comment: str = "",
    exclude: Sequence[str] = (),
) -> Path:
    """Resolve coordinates (and their runtime dependencies) with Maven; write the lock file.

    ``exclude`` holds ``group:artifact`` patterns (``*`` allowed, as in a POM's
    ``<exclusion>``) cut from the dependency tree of every coordinate, together with
    everything below them; a coordinate named directly is never cut.
    """
    if not coordinates:
        raise JarError("lock needs at least one coordinate")
    exclusions = [_parse_exclusion(p) for p in exclude]
    deps = [_dependency_xml(c, exclusions) for c in coordinates]
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(deps="\n".join(deps)))
        listing = Path(work) / "deps.txt"
        command = [
            _maven(), "-q", "-B", "-C", "-Dstyle.color=never", "-f", str(pom),
            f"{_DEPENDENCY_PLUGIN}:list", "-DincludeScope=runtime",
            "-DoutputAbsoluteArtifactFilename=true", f"-DoutputFile={listing}",
        ]
        try:
            result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired as exc:
            raise JarError(f"Maven did not finish resolving {' '.join(coordinates)}") from exc
        if result.returncode != 0 or not listing.is_file():
            output = (result.stdout + result.stderr).strip()
            raise JarError(f"Maven could not resolve {' '.join(coordinates)}:\n{output}")
        entries = _parse_dependency_list(listing.read_text().splitlines())
    if not entries:
        raise JarError(f"Maven resolved no jars for {' '.join(coordinates)}")
    for coordinate, path in entries:
        if not path.is_file():
            raise JarError(f"Maven listed {coordinate} at {path}, but there is no such file")
    command_line = " ".join([f"korvet jars lock {name}", *coordinates,
                             *(f"--exclude {p}" for p in exclude)])
    # A long comment is wrapped; blank lines in it separate paragraphs.
    lines = [f"# jar set '{name}'" + (":" if comment else "")]
    for paragraph in comment.split("\n\n") if comment else []:
        if len(lines) > 1:
            lines.append("#")
        lines += [f"# {row}" for row in textwrap.wrap(" ".join(paragraph.split()), width=98)]
    lines += [f"# written by `{command_line}`"]
    for coordinate, path in sorted(entries):
        lines.append(f"{coordinate} {_sha256(path)}")
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    out = LOCK_DIR / f"{name}.lock"
    out.write_text("\n".join(lines) + "\n")
    return out


def _parse_dependency_list(lines: Iterable[str]) -> list[tuple[str, Path]]:
    """Parse `mvn dependency:list` lines.

    Each is ``group:artifact:type[:classifier]:version:scope:/absolute/path``, which
    plugin 3.x follows with `` -- module name [auto]``.
    """
    found: list[tuple[str, Path]] = []
    for raw in lines:
        line = raw.strip().split(" -- module ", 1)[0].strip()
        spec, sep, path = line.partition(":/")
        if not sep:
            continue
        fields = spec.split(":")
        # group:artifact:type:version:scope or group:artifact:type:classifier:version:scope
        if len(fields) == 5:
            group, artifact, kind, version, _scope = fields
            coordinate = f"{group}:{artifact}:{version}"
        elif len(fields) == 6:
            group, artifact, kind, classifier, version, _scope = fields
            coordinate = f"{group}:{artifact}:{version}:{classifier}"
        else:
            continue
        if kind != "jar":
            continue
        found.append((coordinate, Path("/" + path)))
    return found
