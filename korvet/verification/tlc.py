"""Run TLC, the TLA+ model checker, and read what it says.

TLC comes from Maven Central (jar set ``tlc``, see korvet/jvm/locks/tlc.lock)
and runs as ``java -cp <jar> tlc2.TLC -tool ...``. In ``-tool`` mode every
message is framed as ``@!@!@STARTMSG code:severity @!@!@ ... @!@!@ENDMSG code @!@!@``,
which this module parses into statistics, a verdict and, on a violation, the
counterexample as a list of states.

The models to check are listed in ``spec/models.yaml``: each names a module,
a config, a tier (``ci`` models run in the test suite; ``deep`` ones only with
``korvet spec check --deep``) and the expected verdict. A model that encodes a
claim we expect TLC to refute (a seed document's claim, say) says
``expect: violation`` with the invariant it must violate; it then passes only
when TLC finds exactly that violation.

A **mutant** is a model whose spec text is changed before TLC reads it (``mutation``: edits
that must each apply exactly once, so a mutant that no longer matches its spec fails rather
than checking the unchanged spec) and that checks one property only (``check_only``): TLC must
find that property violated. Every invariant and temporal property of every spec has one
(tests/spec/test_spec_models.py): a property no mutant can break is not shown to say
anything. TLC's action coverage (``-coverage``) is read from every run too: an action of a
passing model that never fires is reported (``TlcResult.never_fired``).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from korvet.jvm import class_sharing, maven
from korvet.process import find_java
from korvet.verification.values import TlaValue, parse_state, parse_value

JAR_SET = "tlc"
TLC_MAIN = "tlc2.TLC"


class TlcError(RuntimeError):
    """TLC could not be run (no Java, no jar, a malformed manifest)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """One change of a mutant's spec text: ``replace`` occurs exactly once in ``file``."""

    file: str  # e.g. PartitionLog.tla
    replace: str
    by: str


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    module: str
    config: str
    tier: str = "ci"  # ci | deep
    expect: str = "pass"  # pass | violation
    expect_invariant: str = ""
    description: str = ""
    extra_args: tuple[str, ...] = ()
    mutation: tuple[Edit, ...] = ()  # a mutant: the spec text changed before TLC reads it
    check_only: str = ""  # check this invariant or property alone (the config's others dropped)
    # actions this model does not exercise, by design (a constant turns them off): name -> why
    unexercised: tuple[tuple[str, str], ...] = ()
    # why TLC's action coverage is not taken for this model (empty: it is taken)
    no_coverage: str = ""

    @property
    def is_mutant(self) -> bool:
        return bool(self.mutation)


@dataclass(frozen=True, slots=True)
class TraceStep:
    number: int
    action: str  # "Initial predicate", an action name, or "Stuttering" / "Back to state"
    location: str
    state: dict[str, TlaValue]
    raw: str


@dataclass(slots=True)
class TlcResult:
    model: Model
    outcome: str = "error"  # pass | violation | error
    violated: str = ""  # e.g. "Invariant RoundTrip", "Deadlock", "Temporal property"
    generated: int = 0
    distinct: int = 0
    depth: int = 0
    wall_seconds: float = 0.0
    trace: list[TraceStep] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    coverage: dict[str, int] = field(default_factory=dict)  # action -> states it generated
    version: str = ""
    exit_code: int = 0
    printed: str = ""  # what the spec printed (Print, PrintT): the text outside TLC's messages

    @property
    def never_fired(self) -> list[str]:
        """The actions of the model that generated no state (from TLC's coverage)."""
        return sorted(action for action, count in self.coverage.items() if count == 0)

    @property
    def as_expected(self) -> bool:
        if self.model.expect == "violation":
            wanted = self.model.expect_invariant
            return self.outcome == "violation" and (not wanted or wanted in self.violated)
        return self.outcome == "pass"


def spec_dir(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit)
    checkout = Path(__file__).resolve().parents[2] / "spec"
    if checkout.is_dir():
        return checkout
    return Path.cwd() / "spec"


def load_models(directory: Path) -> list[Model]:
    manifest = directory / "models.yaml"
    if not manifest.is_file():
        raise TlcError(f"{manifest} not found")
    data = yaml.safe_load(manifest.read_text()) or {}
    models: list[Model] = []
    for entry in data.get("models", []):
        try:
            module = str(entry["module"])
            models.append(Model(
                name=str(entry["name"]),
                module=module,
                config=str(entry["config"]),
                tier=str(entry.get("tier", "ci")),
                expect=str(entry.get("expect", "pass")),
                expect_invariant=str(entry.get("expect_invariant", "")),
                description=str(entry.get("description", "")),
                extra_args=tuple(str(a) for a in entry.get("extra_args", ())),
                mutation=tuple(Edit(str(edit.get("file", f"{module}.tla")), str(edit["replace"]),
                                    str(edit["with"]))
                               for edit in entry.get("mutation", ())),
                check_only=str(entry.get("check_only", "")),
                unexercised=tuple((str(action), str(why)) for action, why in
                                  (entry.get("unexercised") or {}).items()),
                no_coverage=str(entry.get("no_coverage", "")),
            ))
        except KeyError as exc:
            raise TlcError(f"{manifest}: a model lacks {exc}") from None
    names = [model.name for model in models]
    for model in models:
        if names.count(model.name) > 1:
            raise TlcError(f"{manifest}: two models are named {model.name}")
        for path in (directory / f"{model.module}.tla", directory / model.config):
            if not path.is_file():
                raise TlcError(f"{manifest}: model {model.name} refers to missing {path.name}")
        if model.is_mutant and (model.expect != "violation" or not model.check_only
                                or model.expect_invariant != model.check_only):
            raise TlcError(f"{manifest}: mutant {model.name} must expect a violation of the one "
                           "property it checks (check_only = expect_invariant)")
    return models


def java_binary() -> str:
    found = find_java()
    if found is None:
        raise TlcError("java not found: TLC needs a Java runtime (Debian: openjdk-17-jre-headless)")
    return found


def tlc_jar() -> Path:
    paths = maven.ensure(JAR_SET, quiet=True)
    return paths[0]


def tlc_command(module: str, config: str, metadir: Path, args: Sequence[str] = (),
                workers: str = "auto", *, short: bool = False,
                sharing: Sequence[str] = ()) -> list[str]:
    """``short``: a run that ends within seconds (a mutant's first violation), on the JIT's
    first tier only: the optimising compiler's work would not pay back (a mutant run took
    1.4 s for 2.2 s, a 40 s model 47 s for 35 s, on the project's 2-core machine)."""
    # java.io.tmpdir is the run's own folder: SANY copies the standard modules it reads
    # (Naturals, Sequences, ...) out of the jar into java.io.tmpdir under their plain names,
    # truncating the file first, so two TLC processes sharing /tmp can parse a half-written
    # module ("Parsing or semantic analysis failed" in a parallel test run).
    return [
        java_binary(), *(("-XX:TieredStopAtLevel=1",) if short else ()),
        "-XX:+UseParallelGC", "-Xss16m", *sharing, f"-Djava.io.tmpdir={metadir}",
        "-cp", str(tlc_jar()), TLC_MAIN,
        "-tool", "-workers", workers, "-metadir", str(metadir), "-config", config,
        *args, f"{module}.tla",
    ]


_MESSAGE = re.compile(r"@!@!@STARTMSG (\d+):(\d+) @!@!@\n(.*?)@!@!@ENDMSG \1 @!@!@", re.S)
_STATS = re.compile(r"([\d,]+) states generated.*?([\d,]+) distinct states found")
_DEPTH = re.compile(r"depth of the complete state graph search is (\d+)")
_STEP = re.compile(r"^(\d+): <(.*?)>\n(.*)$", re.S)

# TLC message codes (tlc2.output.EC / MP)
MSG_VERSION = 2262
MSG_PROGRESS = 2200
MSG_STATS = 2199
MSG_DEPTH = 2194
MSG_SUCCESS = 2193
MSG_INVARIANT_VIOLATED = 2110
MSG_INVARIANT_VIOLATED_INITIAL = 2107
MSG_PROPERTY_VIOLATED_INITIAL = 2108
MSG_DEADLOCK = 2114
MSG_TEMPORAL_VIOLATED = 2116
MSG_ACTION_PROPERTY_VIOLATED = 2112  # "Action property P is violated." (a [][A]_v property)
MSG_STATE = 2217
MSG_STUTTER = 2218
MSG_BACK_TO_STATE = 2122
MSG_TRACE_HEADER = 2121
MSG_GC_WARNING = 2401
MSG_PARSE_FAILED = 3002  # "Parsing or semantic analysis failed."
MSG_COVERAGE_ACTION = 2772  # "<Action line ... of module M>: distinct:generated"
MSG_COVERAGE_INIT = 2773
MSG_COVERAGE_LINE = 2221
MSG_COVERAGE_HEADER = 2201
SEVERITY_ERROR = 1

# How often TLC prints its coverage (minutes); it also prints it once at the end.
COVERAGE_MINUTES = "60"
_COVERAGE = re.compile(r"^<(\w+) line .*>: (\d+):(\d+)$")


@dataclass(frozen=True, slots=True)
class Message:
    code: int
    severity: int
    text: str


def parse_messages(output: str) -> Iterator[Message]:
    for match in _MESSAGE.finditer(output):
        yield Message(int(match.group(1)), int(match.group(2)), match.group(3).strip("\n"))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_step(text: str) -> TraceStep:
    match = _STEP.match(text.strip("\n"))
    if not match:
        raise TlcError(f"unexpected TLC state message: {text[:200]!r}")
    number, header, body = match.groups()
    action, _, location = header.partition(" ")
    if header.startswith("Initial predicate"):
        action, location = "Initial predicate", ""
    state = parse_state(body) if body.strip() else {}
    return TraceStep(int(number), action, location, state, body.strip())


def interpret(model: Model, output: str, exit_code: int, wall: float) -> TlcResult:  # noqa: C901, PLR0912 -- one branch per kind of TLC outcome
    result = TlcResult(model=model, wall_seconds=wall, exit_code=exit_code,
                       printed=_MESSAGE.sub("", output).strip())
    success = False
    for message in parse_messages(output):
        code, text = message.code, message.text
        if code == MSG_VERSION:
            result.version = text.strip()
        elif code in (MSG_STATS, MSG_PROGRESS):
            stats = _STATS.search(text)
            if stats:
                result.generated, result.distinct = _int(stats.group(1)), _int(stats.group(2))
        elif code == MSG_DEPTH:
            depth = _DEPTH.search(text)
            if depth:
                result.depth = int(depth.group(1))
        elif code == MSG_SUCCESS:
            success = True
        elif code in (MSG_INVARIANT_VIOLATED, MSG_INVARIANT_VIOLATED_INITIAL):
            result.outcome = "violation"
            name = re.search(r"Invariant (\S+) is violated", text)
            result.violated = f"Invariant {name.group(1)}" if name else text.strip()
        elif code == MSG_PROPERTY_VIOLATED_INITIAL:
            # "Property line L, col C to ... of module M is violated by the initial state":
            # TLC names no property; name_temporal_violation names the one a model checks
            result.outcome = "violation"
            first, _, state = text.strip().partition("\n")
            result.violated = "Temporal property " + first.strip()
            # the message carries the initial state (TLC prints no trace of its own)
            result.trace.append(TraceStep(1, "Initial predicate", "",
                                          parse_state(state) if state.strip() else {},
                                          state.strip()))
        elif code == MSG_DEADLOCK:
            result.outcome = "violation"
            result.violated = "Deadlock"
        elif code == MSG_TEMPORAL_VIOLATED:
            result.outcome = "violation"
            result.violated = "Temporal property " + text.strip()
        elif code == MSG_ACTION_PROPERTY_VIOLATED:
            result.outcome = "violation"
            name = re.search(r"Action property (\S+) is violated", text)
            result.violated = f"Temporal property {name.group(1)}" if name else text.strip()
        elif code == MSG_STATE:
            result.trace.append(parse_step(text))
        elif code == MSG_STUTTER:
            number = re.match(r"(\d+)", text.strip())
            result.trace.append(TraceStep(int(number.group(1)) if number else 0, "Stuttering",
                                          "", {}, text.strip()))
        elif code == MSG_BACK_TO_STATE:
            result.trace.append(TraceStep(0, "Back to state", "", {}, text.strip()))
        elif code == MSG_COVERAGE_ACTION:
            covered = _COVERAGE.match(text.strip())
            if covered:  # the last report wins: TLC prints the totals at the end
                result.coverage[covered.group(1)] = int(covered.group(3))
        elif (message.severity == SEVERITY_ERROR and code not in (MSG_TRACE_HEADER,)
              and code != MSG_GC_WARNING):
            result.errors.append(f"[{code}] {text.strip()}")
    _conclude(result, success, output)
    return result


def _conclude(result: TlcResult, success: bool, output: str) -> None:
    """The outcome when no violation was read, and the words that explain an error."""
    if any(e.startswith(f"[{MSG_PARSE_FAILED}]") for e in result.errors) and result.printed:
        # SANY's own words (which module, which line) are printed outside TLC's message
        # markers: without them a parse failure cannot be diagnosed.
        result.errors.append("SANY printed:\n" + "\n".join(result.printed.splitlines()[-40:]))
    if result.outcome != "violation":
        result.outcome = "pass" if success and not result.errors else "error"
        if result.outcome == "error" and not result.errors:
            tail = "\n".join(output.strip().splitlines()[-15:])
            result.errors.append(f"TLC exited with {result.exit_code} without a verdict:\n{tail}")


ProgressCallback = Callable[[int, int], None]


def run_model(model: Model, directory: Path, *, workers: str = "auto",
              on_progress: ProgressCallback | None = None,
              extra_args: Sequence[str] = (), coverage: bool = False) -> TlcResult:
    """Run TLC on one model; stream its progress; return the parsed result."""
    output, exit_code, wall = run_tlc(model, directory, workers=workers,
                                      on_progress=on_progress, extra_args=extra_args,
                                      coverage=coverage)
    return interpret_run(model, directory, output, exit_code, wall)


def run_tlc(model: Model, directory: Path, *, workers: str = "auto",
            on_progress: ProgressCallback | None = None,
            extra_args: Sequence[str] = (), coverage: bool = False) -> tuple[str, int, float]:
    """Run TLC on one model: what it wrote, its exit code and the seconds it took.
    ``coverage`` asks for TLC's action coverage: for the verdict of a model of
    models.yaml (`korvet spec check`, tests/spec/test_spec_models.py), not for runs that are
    no model check (trace validation, a replay's steps check); a model expected to fail goes
    without it too (a mutant stops at its
    first violation: which actions fired says nothing). With coverage TLC first walks the
    spec's operator graph, which for the coordinator specs takes minutes of CPU before the
    first state."""
    with tempfile.TemporaryDirectory(prefix="korvet-tlc-") as metadir, \
            prepared(model, directory) as folder:
        wanted = (coverage and model.expect == "pass" and not model.no_coverage
                  and "-coverage" not in extra_args)
        covering = ("-coverage", COVERAGE_MINUTES) if wanted else ()
        # a safety mutant stops at its first violation, in seconds; a liveness one (-lncheck)
        # searches its whole graph for the cycle and gains from the optimising compiler
        short = model.expect == "violation" and "-lncheck" not in model.extra_args
        # TLC's classes (SANY, the checker) from the archive an earlier run wrote: a few
        # tenths of a second less for each of the suite's hundreds of TLC runs
        java, classpath = java_binary(), str(tlc_jar())
        sharing = class_sharing.plan(java, classpath, TLC_MAIN)
        command = tlc_command(model.module, model.config, Path(metadir),
                              [*model.extra_args, *covering, *extra_args], workers=workers,
                              short=short, sharing=sharing.options)
        started = time.monotonic()
        exit_code = -1
        try:
            process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
            assert process.stdout is not None
            chunks: list[str] = []
            for line in process.stdout:
                chunks.append(line)
                if on_progress is not None and "states generated" in line:
                    stats = _STATS.search(line)
                    if stats:
                        on_progress(_int(stats.group(1)), _int(stats.group(2)))
            exit_code = process.wait()
            wall = time.monotonic() - started
        finally:
            class_sharing.finish(sharing, java, classpath, exited=exit_code >= 0)
    return "".join(chunks), exit_code, wall


def interpret_run(model: Model, directory: Path, output: str, exit_code: int,
                  wall: float) -> TlcResult:
    """The verdict of a run of TLC on ``model`` (its config read from ``directory``)."""
    result = interpret(model, output, exit_code, wall)
    if model.check_only and result.violated.startswith("Temporal property"):
        result.violated = f"Temporal property {model.check_only}"
    name_temporal_violation(result, directory / model.config)
    return result


@contextlib.contextmanager
def prepared(model: Model, directory: Path) -> Iterator[Path]:
    """The folder TLC runs the model in: ``directory`` itself, or, for a mutant or a model
    that checks one property only, a copy of its specs with the mutation applied and the
    config narrowed to that property."""
    if not model.mutation and not model.check_only:
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="korvet-mutant-") as work:
        folder = Path(work)
        for source in directory.glob("*.tla"):
            shutil.copyfile(source, folder / source.name)
        for edit in model.mutation:
            target = folder / edit.file
            text = target.read_text() if target.is_file() else ""
            found = text.count(edit.replace)
            if found != 1:
                raise TlcError(f"mutant {model.name}: the text to replace occurs {found} times in "
                               f"{edit.file} (it must occur once): {edit.replace[:80]!r}")
            target.write_text(text.replace(edit.replace, edit.by))
        config = (directory / model.config).read_text()
        if model.check_only:
            config = only_property(config, model.check_only, directory / model.config)
        (folder / model.config).write_text(config)
        yield folder


def only_property(config: str, name: str, cfg: Path) -> str:
    """A model config that checks ``name`` alone: its other invariants and properties dropped."""
    invariants, properties = read_invariants(cfg), read_properties(cfg)
    if name not in invariants and name not in properties:
        raise TlcError(f"{cfg.name} checks no invariant or property named {name}")
    kept: list[str] = []
    dropping = False
    for raw in config.splitlines():
        keyword = _CFG_KEYWORDS.match(raw.split("\\*", 1)[0].strip())
        if keyword:
            dropping = keyword.group(1).startswith(("INVARIANT", "PROPERT"))
        if not dropping:
            kept.append(raw)
    kept.append(("INVARIANT " if name in invariants else "PROPERTY ") + name)
    return "\n".join(kept) + "\n"


def name_temporal_violation(result: TlcResult, cfg: Path) -> None:
    """TLC says only "Temporal properties were violated", never which one. A model
    that expects a temporal property to fail checks that property alone, so the
    property its config lists is the one violated: name it, as invariants are named."""
    if result.outcome != "violation" or not result.violated.startswith("Temporal property"):
        return
    properties = read_properties(cfg) if cfg.is_file() else []
    if len(properties) == 1:
        result.violated = f"Temporal property {properties[0]}"


# --- a model's constants, read from its .cfg (for the replays) ---------------------------

_CFG_KEYWORDS = re.compile(r"^(SPECIFICATION|CONSTANTS?|CONSTRAINTS?|INVARIANTS?|PROPERTY|"
                           r"PROPERTIES|INIT|NEXT|SYMMETRY|VIEW|ALIAS|CHECK_DEADLOCK)\b")


def _cfg_section(cfg: Path, keyword_prefix: str) -> Iterator[str]:
    """The non-empty lines (comments cut) of a model config's sections whose keyword starts
    with ``keyword_prefix``, each with its keyword taken off."""
    inside = False
    for raw in cfg.read_text().splitlines():
        line = raw.split("\\*", 1)[0].strip()
        if not line:
            continue
        keyword = _CFG_KEYWORDS.match(line)
        if keyword:
            inside = keyword.group(1).startswith(keyword_prefix)
            line = line[keyword.end():].strip()
            if not line:
                continue
        if inside:
            yield line


def read_properties(cfg: Path) -> list[str]:
    """The temporal properties a model config asks TLC to check (PROPERTY/PROPERTIES)."""
    return [name for line in _cfg_section(cfg, "PROPERT") for name in line.split()]


def read_invariants(cfg: Path) -> list[str]:
    """The invariants a model config asks TLC to check (INVARIANT/INVARIANTS)."""
    return [name for line in _cfg_section(cfg, "INVARIANT") for name in line.split()]


def read_constants(cfg: Path) -> dict[str, TlaValue]:
    constants: dict[str, TlaValue] = {}
    for line in _cfg_section(cfg, "CONSTANT"):
        name, sep, value = line.partition("=")
        if sep:
            constants[name.strip()] = parse_value(value.strip())
    return constants


# --- the state graph (for replaying every transition through the Python machines) ---

@dataclass(frozen=True, slots=True)
class StateGraph:
    states: dict[str, dict[str, TlaValue]]  # node id -> state
    initial: frozenset[str]
    edges: dict[str, list[tuple[str, str]]]  # node id -> [(action, successor id)]
    result: TlcResult

    def successors(self, node: str) -> list[tuple[str, str]]:
        return self.edges.get(node, [])

    @property
    def transition_count(self) -> int:
        return sum(len(v) for v in self.edges.values())


# Initial states end in `,style = filled]`, the others in `];`.
_DOT_NODE = re.compile(r'^(-?\d+) \[label="(.*)"(,style = filled)?\];?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="([^"]*)"')


_DOT_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescape_dot(label: str) -> str:
    """A dot label's text: ``\\n`` is a line break, a backslash before any other character
    stands for that character."""
    return _DOT_ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), label)


def parse_dot(text: str) -> tuple[dict[str, dict[str, TlaValue]], set[str],
                                  dict[str, list[tuple[str, str]]]]:
    states: dict[str, dict[str, TlaValue]] = {}
    initial: set[str] = set()
    edges: dict[str, list[tuple[str, str]]] = {}
    known: dict[str, TlaValue] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        edge = _DOT_EDGE.match(line)
        if edge:
            source, target, action = edge.groups()
            edges.setdefault(source, []).append((action, target))
            continue
        node = _DOT_NODE.match(line)
        if node:
            node_id, label, filled = node.groups()
            states[node_id] = parse_state(_unescape_dot(label), known)
            if filled:
                initial.add(node_id)
    return states, initial, edges


def state_graph(model: Model, directory: Path, *, workers: str = "1") -> StateGraph:
    """Run TLC with ``-dump dot,actionlabels`` and parse the whole reachable graph."""
    with tempfile.TemporaryDirectory(prefix="korvet-dot-") as work:
        dot = Path(work) / "graph.dot"
        result = run_model(model, directory, workers=workers,
                           extra_args=("-dump", "dot,actionlabels", str(dot)))
        if result.outcome == "error":
            raise TlcError("TLC failed while dumping the state graph: " + "; ".join(result.errors))
        states, initial, edges = parse_dot(dot.read_text())
    return StateGraph(states, frozenset(initial), edges, result)
