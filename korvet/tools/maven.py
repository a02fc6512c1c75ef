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


def lock(name: str, coordinates: Sequence[str], *, comment: str = "") -> Path:
    """Resolve coordinates (and their runtime dependencies) with Maven; write the lock file."""
    if shutil.which("mvn") is None:
        raise JarError("writing a lock file needs Maven ('mvn') on PATH")
    deps = []
    for coordinate in coordinates:
        parts = coordinate.split(":")
        if len(parts) not in (3, 4):
            raise JarError(f"coordinate {coordinate!r} is not group:artifact:version[:classifier]")
        classifier = f"<classifier>{parts[3]}</classifier>" if len(parts) == 4 else ""
        deps.append(
            f"    <dependency><groupId>{parts[0]}</groupId><artifactId>{parts[1]}</artifactId>"
            f"<version>{parts[2]}</version>{classifier}</dependency>"
        )
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(deps="\n".join(deps)))
        listing = Path(work) / "deps.txt"
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:list",
             "-DincludeScope=runtime", "-DoutputAbsoluteArtifactFilename=true",
             f"-DoutputFile={listing}"],
            check=True,
        )
        entries = _parse_dependency_list(listing.read_text().splitlines())
    lines = [f"# jar set '{name}'" + (f": {comment}" if comment else ""),
             f"# written by `korvet jars lock {name} {' '.join(coordinates)}`"]
    for coordinate, path in sorted(entries):
        lines.append(f"{coordinate} {_sha256(path)}")
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    out = LOCK_DIR / f"{name}.lock"
    out.write_text("\n".join(lines) + "\n")
    return out


def _parse_dependency_list(lines: Iterable[str]) -> list[tuple[str, Path]]:
    """Parse `mvn dependency:list` lines: group:artifact:jar[:classifier]:version:scope:/path."""
    found: list[tuple[str, Path]] = []
    for raw in lines:
        line = raw.strip()
        if ":jar:" not in line or "/" not in line:
            continue
        spec, _, path = line.partition(":/")
        fields = spec.split(":")
        # group:artifact:type:version:scope or group:artifact:type:classifier:version:scope
        if len(fields) == 5:
            group, artifact, _type, version, _scope = fields
            coordinate = f"{group}:{artifact}:{version}"
        elif len(fields) == 6:
            group, artifact, _type, classifier, version, _scope = fields
            coordinate = f"{group}:{artifact}:{version}:{classifier}"
        else:
            continue
        found.append((coordinate, Path("/" + path.split(" ")[0])))
    return found
