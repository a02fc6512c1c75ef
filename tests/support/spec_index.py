"""Generate the test column of spec/README.md from the tests' ``spec`` markers.

    .venv/bin/python -m tests.support.spec_index      # rewrite the test column in spec/README.md
    (tests/test_docs.py fails when the committed README differs from what this generates,
    when a marker names what its spec lacks or what no row lists, when a row names what its
    spec lacks, and when a code name or a test the README cites no longer exists)

A test says what of a spec it checks with ``@pytest.mark.spec("GroupCoordinator",
"SessionTimeout", ..., note="...")`` (a replay's case per action gets one from
tests/support/spec_actions.py, a TLC verdict from tests/spec/test_spec_models.py). A table
of the README whose test column is generated follows a line ``<!-- spec-index: Spec -->``
(``; only <test file> ...`` keeps to those files' tests). Each row's keys are the names in
backticks of its first cell outside parentheses (a ``Module.tla`` there names the row's
spec instead); its test cell lists every test marked with the row's spec and one of its
keys, grouped by file, with the marker's note. The rest of the README is written by hand:
its code names are checked against what korvet/ and tests/ define (``code_problems``).

The markers are read by collecting the marking test files in a pytest process of their own
(this module is its plugin there), so the index is the suite's own view, parametrized
cases included.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "spec" / "README.md"
SPEC = ROOT / "spec"
# The order in which a row lists its tests' files: a spec's own, the units', the integration
# tests'.
ROOTS = ("tests/spec", "tests/unit", "tests/integration")
# A test file whose text marks tests (or makes a replay's cases, tests/support/spec_actions.py):
# only those are collected, the rest of the suite would only cost the collecting time.
_MARKS = re.compile(r"\bmark\.spec\(|\baction_cases\(")
COMMAND = "`.venv/bin/python -m tests.support.spec_index`"

_OUT = "KORVET_SPEC_INDEX_OUT"
_DIRECTIVE = re.compile(r"^<!-- spec-index: (\w+)(?:; only ([^>]*?))? -->$")
_TICKED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True, slots=True)
class Marked:
    """One spec marker of one collected test."""

    file: str  # relative to the repository
    test: str  # what the README shows: the test's name, with its case
    function: str  # the test function (its cases share it)
    spec: str
    names: tuple[str, ...]
    note: str


@dataclass(frozen=True, slots=True)
class Collected:
    marked: tuple[Marked, ...]
    cases: dict[tuple[str, str], int]  # (file, function) -> how many cases were collected


# --- collecting the markers (this module is the plugin of the collecting pytest) --------

def _shown(item: pytest.Item) -> tuple[str, str]:
    """The name the README shows for a test, and its function's: a Hypothesis state
    machine (unittest's ``runTest``) is shown as its class."""
    parent = item.parent
    function = getattr(item, "originalname", item.name)
    if isinstance(parent, pytest.Class):
        if item.name == "runTest":
            return parent.name, parent.name
        return f"{parent.name}::{item.name}", f"{parent.name}::{function}"
    return item.name, function


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ.get(_OUT)
    if not out:
        return
    marked: list[list[object]] = []
    cases: list[list[str]] = []
    for item in session.items:
        test, function = _shown(item)
        file = item.path.relative_to(ROOT).as_posix()
        cases.append([file, function])
        for marker in item.iter_markers("spec"):
            spec, *names = (str(arg) for arg in marker.args)
            marked.append([file, test, function, spec, names, str(marker.kwargs.get("note", ""))])
    Path(out).write_text(json.dumps({"marked": marked, "cases": cases}))


def marking_files() -> list[str]:
    """The test files that mark tests: only they are collected."""
    return sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
                  if _MARKS.search(path.read_text()))


def collect(paths: Sequence[str] | None = None) -> Collected:
    """The spec markers of the tests in ``paths`` (the files that mark tests), from a
    collecting pytest."""
    paths = marking_files() if paths is None else paths
    with tempfile.TemporaryDirectory(prefix="korvet-spec-index-") as folder:
        out = Path(folder) / "marked.json"
        env = {k: v for k, v in os.environ.items() if k != "KORVET_REPLAY_MODELS"}
        env[_OUT] = str(out)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "-p", "tests.support.spec_index", *paths],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError(f"collecting the tests failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        data = json.loads(out.read_text())
    cases: dict[tuple[str, str], int] = {}
    for file, function in data["cases"]:
        cases[file, function] = cases.get((file, function), 0) + 1
    return Collected(tuple(Marked(f, t, fn, s, tuple(n), note)
                           for f, t, fn, s, n, note in data["marked"]), cases)


# --- the README's generated tables -------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Row:
    line: int  # index in the README's lines
    cells: tuple[str, ...]
    spec: str
    keys: tuple[str, ...]
    only: tuple[str, ...]  # the test files the table keeps to (empty: all)


def split_row(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _outside_parentheses(text: str) -> str:
    kept, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth:
            kept.append(char)
    return "".join(kept)


def row_keys(first: str, spec: str) -> tuple[str, tuple[str, ...]]:
    """A row's spec and keys: the first cell's names in backticks outside parentheses (the
    spec a ``Module.tla`` names anywhere in the cell)."""
    for ticked in _TICKED.findall(first):
        if ticked.endswith(".tla"):
            spec = ticked.removesuffix(".tla")
    keys = []
    for ticked in _TICKED.findall(_outside_parentheses(first)):
        name = re.match(r"[\w.]+", ticked)
        if name and not ticked.endswith(".tla"):
            keys.append(name.group(0))
    return spec, tuple(keys)


def generated_rows(lines: Sequence[str]) -> Iterator[Row]:
    """The rows of the tables that follow a spec-index line (their header and rule left out)."""
    index = 0
    while index < len(lines):
        directive = _DIRECTIVE.match(lines[index])
        index += 1
        if not directive:
            continue
        spec, only = directive.group(1), tuple((directive.group(2) or "").split())
        assert lines[index].startswith("|") and lines[index + 1].startswith("|-"), (
            f"spec/README.md line {index}: a table must follow the spec-index line")
        width = len(split_row(lines[index]))
        index += 2
        while index < len(lines) and lines[index].startswith("|"):
            cells = split_row(lines[index])
            assert len(cells) == width, f"spec/README.md line {index + 1}: {len(cells)} cells"
            row_spec, keys = row_keys(cells[0], spec)
            yield Row(index, tuple(cells), row_spec, keys, only)
            index += 1


def _root_rank(file: str) -> int:
    """A spec's own tests first, then the units', then the integration tests."""
    return next((i for i, root in enumerate(ROOTS) if file.startswith(root + "/")), len(ROOTS))


def _tests_of(row: Row, collected: Collected) -> str:
    """The test cell of a row: the tests marked with its spec and one of its keys, by file."""
    by_file: dict[str, dict[str, list[Marked]]] = {}
    for m in collected.marked:
        if m.spec == row.spec and set(m.names) & set(row.keys) and (
                not row.only or m.file in row.only):
            by_file.setdefault(m.file, {}).setdefault(m.function, []).append(m)
    return "; ".join(f"`{Path(file).name}`: " + _shown_tests(file, by_file[file], collected)
                     for file in sorted(by_file, key=lambda f: (_root_rank(f), f))) or "—"


def _with_note(test: str, note: str) -> str:
    return f"`{test}`" + (f" ({note})" if note else "")


def _shown_tests(file: str, functions: dict[str, list[Marked]], collected: Collected) -> str:
    """One file's tests in a row: "every test" when the row has all of a file's several
    functions, a function by its name when the row has all its cases (one note each)."""
    cases = {(m.test, m.note) for marks in functions.values() for m in marks}
    notes = {note for _, note in cases}
    in_file = sum(n for (f, _), n in collected.cases.items() if f == file)
    if len(cases) == in_file and len(functions) > 1 and len(notes) == 1:
        return "every test" + (f" ({notes.pop()})" if notes - {""} else "")
    shown: list[str] = []
    for function, marks in functions.items():
        tests = list(dict.fromkeys((m.test, m.note) for m in marks))
        notes = {note for _, note in tests}
        if len(tests) == collected.cases[file, function] > 1 and len(notes) == 1:
            tests = [(function, notes.pop())]
        shown.extend(_with_note(test, note) for test, note in tests)
    return ", ".join(shown)


def render(text: str, collected: Collected) -> str:
    """The README with the test column of every generated table as the markers have it."""
    lines = text.split("\n")
    for row in generated_rows(lines):
        lines[row.line] = "| " + " | ".join((*row.cells[:-1], _tests_of(row, collected))) + " |"
    return "\n".join(lines)


# --- what must hold for the index to be whole ---------------------------------------------

@functools.cache
def spec_words(spec: str) -> frozenset[str]:
    """The words of spec/<spec>.tla and of the modules it extends."""
    words: set[str] = set()
    pending, seen = [spec], set()
    while pending:
        module = pending.pop()
        path = SPEC / f"{module}.tla"
        if module in seen or not path.is_file():
            continue
        seen.add(module)
        text = path.read_text()
        words |= set(re.findall(r"\w+", text))
        for extends in re.findall(r"^EXTENDS (.*)$", text, flags=re.M):
            pending.extend(name.strip() for name in extends.split(","))
    return frozenset(words)


def marker_problems(text: str, collected: Collected) -> list[str]:
    """Markers the index would lose or mislead by: a spec that is no module of spec/, a
    name the module lacks, a marker none of whose names a row of the README has (the
    index would not list its test)."""
    keys: dict[str, set[str]] = {}
    for row in generated_rows(text.split("\n")):
        keys.setdefault(row.spec, set()).update(row.keys)
    problems = []
    for m in collected.marked:
        where = f"{m.file}::{m.test}: spec({m.spec!r}, ...)"
        if not (SPEC / f"{m.spec}.tla").is_file():
            problems.append(f"{where}: spec/{m.spec}.tla does not exist")
            continue
        if not m.names:
            problems.append(f"{where} names nothing of the spec")
        words = spec_words(m.spec)
        problems.extend(f"{where}: {name!r} is not a name of spec/{m.spec}.tla"
                        for name in m.names if name.split(".")[0] not in words)
        if not set(m.names) & keys.get(m.spec, set()):
            problems.append(f"{where}: no row of spec/README.md for {m.spec} has any of its "
                            "names, so the index does not list the test")
    return sorted(set(problems))


def row_problems(text: str) -> list[str]:
    """Rows whose keys are no names of their spec (a spec name renamed or removed)."""
    return [f"spec/README.md line {row.line + 1}: {key!r} is not a name of spec/{row.spec}.tla"
            for row in generated_rows(text.split("\n"))
            for key in row.keys if key.split(".")[0] not in spec_words(row.spec)]


# --- the code names the README cites -------------------------------------------------------

_SOURCES = ("korvet", "tests")
# Names the README cites from other projects' code: nothing here defines them.
_FOREIGN = {
    "streamNextID": "Redis' t_stream.c",
    "ensurePrincipalUnchanged": "Kafka's SaslServerAuthenticator",
}
_IDENTIFIER = re.compile(r"^\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_FILE = re.compile(r"^[\w./*-]+\.(?:py|lua|tla|cfg|yaml|md)$")


@dataclass
class CodeIndex:
    """What the code defines, for checking the names the README cites."""

    names: set[str]  # every name defined (functions, classes, assignments, fields, Lua locals)
    members: dict[str, set[str]]  # module stem, import alias or class -> the names defined in it
    words: set[str]  # korvet/'s words: a constant, a command word, a configuration key
    literals: set[str]  # the strings of korvet/ and tests/ (Redis fields, statuses)
    models: set[str]  # the model names of spec/models.yaml

    @classmethod
    def build(cls) -> CodeIndex:
        indexer = _Indexer()
        texts: list[str] = []
        for root in _SOURCES:
            for path in sorted((ROOT / root).rglob("*.py")):
                source = path.read_text()
                indexer.module(path, ast.parse(source))
                if root == "korvet":
                    texts.append(source)
        names, members, literals = indexer.names, indexer.members, indexer.literals
        for short, targets in indexer.aliases.items():  # ``core.step``: ...coordinator as core
            for target in targets:
                members.setdefault(short, set()).update(members.get(target, set()))
        for path in sorted((ROOT / "korvet").rglob("*.lua")):
            source = path.read_text()
            texts.append(source)
            literals.update(a or b for a, b in re.findall(r"'([^'\n]*)'|\"([^\"\n]*)\"", source))
            found = set(re.findall(r"\blocal\s+(?:function\s+)?(\w+)|^function\s+(\w+)", source,
                                   flags=re.M))
            names.update(name for pair in found for name in pair if name)
        models = set(re.findall(r"^- name: (\S+)$", (SPEC / "models.yaml").read_text(), flags=re.M))
        words = {word.strip(".") for word in re.findall(r"[\w.]+", "\n".join(texts))}
        return cls(names, members, words, literals, models)

    def defines(self, dotted: str) -> bool:
        """``a.b.c``: some module or class named ``b`` defines ``c`` (a leading dot: some
        class defines it); a bare name: something defines it."""
        parts = dotted.lstrip(".").split(".")
        if len(parts) == 1 or dotted.startswith("."):
            return parts[0] in self.names
        return parts[-1] in self.members.get(parts[-2], set())

    def problem(self, token: str, spec_names: AbstractSet[str] = frozenset()) -> str | None:
        """Why a name in backticks cites nothing that exists, or None (``spec_names``: the
        names of the row's spec, which a code column may cite too)."""
        if re.search(r"[\s<]", token):
            return None  # a command line, a pattern with a placeholder
        if _FILE.match(token) or "/" in token:
            return None if _file_exists(token) else f"no file {token!r}"
        name = token.removesuffix("()")
        if (not _IDENTIFIER.match(name) or re.match(r"^[a-z]\d+$", name) or name in _FOREIGN
                or name in self.models or name in spec_names):
            return None  # not a code name (an expression, a label value), or not Korvet's
        head = name.split(".")[0]
        if name.isupper() or (head and "." in name and head not in self.members):
            # a constant or command word, a configuration key: it must occur in the code
            return None if name in self.words else f"{token!r} occurs nowhere in korvet/"
        if self.defines(name) or name in self.literals:
            return None
        return f"{token!r} is defined nowhere in korvet/ or tests/"


class _Indexer(ast.NodeVisitor):
    """One pass over a module: what it defines (``module.name`` also reaches a method of a
    class of the module, ``fetch._read``, and what the module imports: a package's
    ``__init__`` re-exports), each class a namespace of its own with the attributes its
    methods set on ``self``; a function's variables are not names; the strings; the
    import aliases."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.members: dict[str, set[str]] = {}
        self.aliases: dict[str, set[str]] = {}
        self.literals: set[str] = set()
        self._scopes: list[tuple[str, bool]] = []  # (namespace, names its assignments)

    def module(self, path: Path, tree: ast.Module) -> None:
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        self.members.setdefault(path.parent.name, set()).add(path.stem)
        self._scopes = [(stem, True)]
        self.visit(tree)

    def _define(self, name: str, *, here: bool = True) -> None:
        self.names.add(name)
        self.members.setdefault(self._scopes[0][0], set()).add(name)
        if here:
            self.members.setdefault(self._scopes[-1][0], set()).add(name)

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self._define(node.name)
        self._scopes.append((node.name, isinstance(node, ast.ClassDef)))
        self.generic_visit(node)
        self._scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def _assigned(self, targets: Iterable[ast.expr]) -> None:
        for target in targets:
            if isinstance(target, ast.Name) and self._scopes[-1][1]:
                self._define(target.id)
            elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                  and target.value.id == "self"):
                owner = next((n for n, c in reversed(self._scopes[1:]) if c), None)
                if owner is not None:
                    self.names.add(target.attr)
                    self.members.setdefault(owner, set()).add(target.attr)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target])
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if len(self._scopes) == 1:
                self.members.setdefault(self._scopes[0][0], set()).add(alias.asname or alias.name)
            if alias.asname:
                self.aliases.setdefault(alias.asname, set()).add(alias.name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases.setdefault(alias.asname, set()).add(alias.name.rsplit(".", 1)[-1])

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.literals.add(node.value)


@functools.cache
def _code_index() -> CodeIndex:
    return CodeIndex.build()


def _file_exists(token: str) -> bool:
    places = (ROOT, SPEC, ROOT / "korvet", ROOT / "korvet" / "storage" / "lua")
    if any(list(place.glob(token)) for place in places if not token.startswith("/")):
        return True
    return "/" not in token and any(any((ROOT / root).rglob(token)) for root in _SOURCES)


def _cited(cells: Sequence[str]) -> Iterator[str]:
    for cell in cells:
        yield from _TICKED.findall(cell)


def code_problems(text: str) -> list[str]:
    """Code names the README cites that no longer exist: in the tables, every name in
    backticks but the spec names and the generated test cells; in the prose, the files;
    anywhere, the tests written by hand (``test_…``, ``Test…``)."""
    index = _code_index()
    lines = text.split("\n")
    generated = {row.line: row for row in generated_rows(lines)}
    problems = []
    for number, line in enumerate(lines):
        spec_names: AbstractSet[str] = frozenset()
        if number in generated:
            cited = list(_cited(generated[number].cells[1:-1]))
            spec_names = spec_words(generated[number].spec)
        elif line.startswith("|"):
            cited = list(_cited(split_row(line)))
        else:
            cited = [t for t in _TICKED.findall(line) if _FILE.match(t) or "/" in t
                     or re.match(r"(test_|Test)\w+$", t)]
        for token in cited:
            name = token.split("::")[-1]
            if re.match(r"(test_|Test)\w+$", name):
                problem = None if name in index.names else f"no test {name!r} in tests/"
            else:
                problem = index.problem(token, spec_names)
            if problem:
                problems.append(f"spec/README.md line {number + 1}: {problem}")
    return problems


def main(argv: Iterable[str] = ()) -> int:
    del argv
    collected = collect()
    text = README.read_text()
    problems = marker_problems(text, collected) + row_problems(text) + code_problems(text)
    README.write_text(render(text, collected))
    print(f"wrote the test column of {README.relative_to(ROOT)} from "
          f"{len(collected.marked)} spec markers")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
