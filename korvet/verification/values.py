"""Parse TLA+ values as TLC prints them, into hashable Python values.

    42, -1                  int
    TRUE, FALSE             bool
    "text"                  str
    <<a, b>>                tuple               (sequences and tuples)
    {a, b}                  frozenset
    [f |-> 1, g |-> 2]      Record              (a function whose domain is strings)
    (1 :> a @@ 2 :> b)      Function            (any other function)
    m1                      ModelValue          (a model value or bare identifier)

Used to read TLC's counterexample traces and its state-graph dump (``-dump dot``),
so the Python state machines can be compared with the spec state by state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Union

TlaValue = Union[int, bool, str, tuple["TlaValue", ...], frozenset["TlaValue"], "Record",
                 "Function", "ModelValue"]


class TlaParseError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ModelValue:
    name: str

    def __str__(self) -> str:
        return self.name


def _sort_key(value: object) -> tuple[str, str]:
    return (type(value).__name__, repr(value))


class _FrozenMap(Mapping[object, object]):
    """An immutable, hashable mapping with a stable order (by key)."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[object, object] | None = None) -> None:
        pairs = sorted((items or {}).items(), key=lambda kv: _sort_key(kv[0]))
        self._items: dict[object, object] = dict(pairs)
        self._hash = hash(tuple(self._items.items()))

    def __getitem__(self, key: object) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[object]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _FrozenMap) or type(other) is not type(self):
            return NotImplemented
        return self._items == other._items

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"


class Record(_FrozenMap):
    """A TLA+ record: a function from field names (strings) to values."""


class Function(_FrozenMap):
    """A TLA+ function printed with :> and @@."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str) -> TlaParseError:
        excerpt = self.text[max(0, self.pos - 20): self.pos + 20]
        return TlaParseError(f"{message} at offset {self.pos}: ...{excerpt}...")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise self.error(f"expected {token!r}")
        self.pos += len(token)

    def value(self) -> TlaValue:
        self.skip()
        if self.pos >= len(self.text):
            raise self.error("unexpected end")
        if self.peek("<<"):
            return self.sequence()
        char = self.text[self.pos]
        if char == "{":
            return self.set_()
        if char == "[":
            return self.record()
        if char == "(":
            return self.function()
        if char == '"':
            return self.string()
        if char == "-" or char.isdigit():
            return self.integer()
        return self.word()

    def _items(self, close: str) -> list[TlaValue]:
        items: list[TlaValue] = []
        if self.peek(close):
            self.pos += len(close)
            return items
        while True:
            items.append(self.value())
            if self.peek(","):
                self.pos += 1
                continue
            self.expect(close)
            return items

    def sequence(self) -> tuple[TlaValue, ...]:
        self.expect("<<")
        return tuple(self._items(">>"))

    def set_(self) -> frozenset[TlaValue]:
        self.expect("{")
        return frozenset(self._items("}"))

    def record(self) -> Record:
        self.expect("[")
        fields: dict[object, object] = {}
        if self.peek("]"):
            self.pos += 1
            return Record(fields)
        while True:
            self.skip()
            start = self.pos
            while self.pos < len(self.text) and (self.text[self.pos].isalnum() or
                                                 self.text[self.pos] == "_"):
                self.pos += 1
            name = self.text[start:self.pos]
            if not name:
                raise self.error("expected a field name")
            self.expect("|->")
            fields[name] = self.value()
            if self.peek(","):
                self.pos += 1
                continue
            self.expect("]")
            return Record(fields)

    def function(self) -> TlaValue:
        self.expect("(")
        pairs: dict[object, object] = {}
        while True:
            key = self.value()
            if not self.peek(":>"):
                # A parenthesised value, not a function.
                self.expect(")")
                return key
            self.expect(":>")
            pairs[key] = self.value()
            if self.peek("@@"):
                self.pos += 2
                continue
            self.expect(")")
            return Function(pairs)

    def string(self) -> str:
        self.expect('"')
        out: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\" and self.pos + 1 < len(self.text):
                nxt = self.text[self.pos + 1]
                out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
                self.pos += 2
                continue
            if char == '"':
                self.pos += 1
                return "".join(out)
            out.append(char)
            self.pos += 1
        raise self.error("unterminated string")

    def integer(self) -> int:
        self.skip()
        start = self.pos
        if self.text[self.pos] == "-":
            self.pos += 1
        while self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
        digits = self.text[start:self.pos]
        if digits in ("", "-"):
            raise self.error("expected an integer")
        return int(digits)

    def word(self) -> TlaValue:
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or
                                             self.text[self.pos] in "_"):
            self.pos += 1
        word = self.text[start:self.pos]
        if not word:
            raise self.error("unexpected character")
        if word == "TRUE":
            return True
        if word == "FALSE":
            return False
        return ModelValue(word)


def parse_value(text: str) -> TlaValue:
    parser = _Parser(text)
    value = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("trailing text")
    return value


def parse_state(text: str, known: dict[str, TlaValue] | None = None) -> dict[str, TlaValue]:
    """Parse a TLC state: lines of the form ``/\\ name = value`` (values may span lines).

    ``known`` maps value texts already parsed to their values (values are immutable, so
    states may share them): a state graph repeats most variables' values in many states."""
    state: dict[str, TlaValue] = {}
    chunks = [c for c in ("\n" + text.strip()).split("\n/\\ ") if c.strip()]
    for chunk in chunks:
        body = chunk.strip()
        body = body.removeprefix("/\\ ")
        name, sep, rest = body.partition(" = ")
        if not sep:
            raise TlaParseError(f"not a state line: {chunk!r}")
        if known is None:
            state[name.strip()] = parse_value(rest)
        elif rest in known:
            state[name.strip()] = known[rest]
        else:
            state[name.strip()] = known[rest] = parse_value(rest)
    return state


def format_value(value: object) -> str:
    """TLA+ text for a parsed value (for messages and docs)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        return "<<" + ", ".join(format_value(v) for v in value) + ">>"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(format_value(v) for v in value)) + "}"
    if isinstance(value, Record):
        return "[" + ", ".join(f"{k} |-> {format_value(v)}" for k, v in value.items()) + "]"
    if isinstance(value, Function):
        if not value:
            return "<<>>"
        return "(" + " @@ ".join(f"{format_value(k)} :> {format_value(v)}"
                                 for k, v in value.items()) + ")"
    if isinstance(value, ModelValue):
        return value.name
    return repr(value)
