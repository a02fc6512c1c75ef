"""JVM jars from Maven Central, pinned by version and sha256.

Each *jar set* (``tlc``, ``kafka``, ``spark`` ...) is a lock file in
``korvet/tools/locks/<set>.lock``: one artifact per line,
``group:artifact:version[:classifier] <sha256>``. ``ensure()`` downloads
what is missing from Maven Central into a git-ignored folder, checks every
file against its sha256 and returns the class path. Nothing is downloaded at
run time of a test: the set-up commands call ``korvet jars fetch`` first.

``lock()`` is the maintainer's tool that writes a lock file: it asks Maven to
resolve the transitive dependencies of some coordinates and records the
sha256 of every jar it resolved.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2"
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

    def url(self, repository: str) -> str:
        group_path = self.group.replace(".", "/")
        return f"{repository}/{group_path}/{self.artifact}/{self.version}/{self.file_name}"

    def local_path(self, root: Path) -> Path:
        return root / self.group / self.file_name


def repository() -> str:
    return os.environ.get("KORVET_MAVEN_REPOSITORY", DEFAULT_REPOSITORY).rstrip("/")


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


def read_lock(name: str) -> list[Artifact]:
    path = LOCK_DIR / f"{name}.lock"
    if not path.is_file():
        raise JarError(f"unknown jar set {name!r}; known: {', '.join(available_sets())}")
    return parse_lock(path.read_text())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(artifact: Artifact, root: Path, repo: str) -> Path:
    target = artifact.local_path(root)
    if target.is_file() and _sha256(target) == artifact.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    url = artifact.url(repo)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as tmp:
        tmp_path = Path(tmp.name)
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                shutil.copyfileobj(response, tmp)
        except OSError as exc:
            tmp_path.unlink(missing_ok=True)
            raise JarError(f"download of {artifact.coordinate} from {url} failed: {exc}") from exc
    actual = _sha256(tmp_path)
    if actual != artifact.sha256:
        tmp_path.unlink(missing_ok=True)
        raise JarError(
            f"{artifact.coordinate}: sha256 {actual} does not match the lock's {artifact.sha256}"
        )
    tmp_path.replace(target)
    return target


def ensure(name: str, *, quiet: bool = False) -> list[Path]:
    """Make every jar of a set present and verified; return their paths in lock order."""
    artifacts = read_lock(name)
    root = jar_root()
    missing = [a for a in artifacts if not a.local_path(root).is_file()]
    repo = repository()
    if missing and not quiet:
        print(f"korvet jars: fetching {len(missing)} of {len(artifacts)} jars for '{name}' "
              f"from {repo}", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=8) as pool:
        paths = list(pool.map(lambda a: _download(a, root, repo), artifacts))
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

# Maven resolves from the same repository ensure() downloads from, so the sha256 written
# is the sha256 of the file a fresh checkout will get.
_SETTINGS = """<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror><id>korvet-lock</id><mirrorOf>*</mirrorOf><url>{url}</url></mirror>
  </mirrors>
</settings>
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
    if shutil.which("mvn") is None:
        raise JarError("writing a lock file needs Maven ('mvn') on PATH")
    if not coordinates:
        raise JarError("lock needs at least one coordinate")
    exclusions = [_parse_exclusion(p) for p in exclude]
    deps = [_dependency_xml(c, exclusions) for c in coordinates]
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(deps="\n".join(deps)))
        settings = Path(work) / "settings.xml"
        settings.write_text(_SETTINGS.format(url=_xml(repository())))
        listing = Path(work) / "deps.txt"
        command = [
            "mvn", "-q", "-B", "-C", "-Dstyle.color=never", "-s", str(settings), "-f", str(pom),
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
