"""Profiles: an implementation's expected differences from Apache Kafka, as data.

A profile is a YAML file::

    profile: mybroker                 # a short name for reports
    about: what the broker is, one paragraph
    excuses:
      no_transactions:                # a key that names the difference
        checks: [find_coordinator.transaction_key, "fetch.read_committed.*"]   # names or globs
        reason: why the broker behaves differently (one paragraph)
        reference: where that is documented (your docs, or Kafka's source or protocol guide)
    differential:                     # only for --oracle runs (korvet.conformance.modes.differential)
      sparse_offsets:
        fields: ["ListOffsets.*.offset", "Produce.*.base_offset"]   # API name, then a field path glob
        reason: ...
        reference: ...
      kafka_crashes_on_x:
        fields: ["Fetch.responses.*.partitions.*.error_code"]
        values: [[0, -1]]             # optional: only these (this broker's, Kafka's) value pairs
        reason: ...
        reference: ...

A check that an excuse names and that fails is reported *excused* (with the reason and
its observed behaviour); one that passes is a pass, flagged ``excuse_unneeded`` so that an
excuse nobody needs any more is noticed. A check no excuse names fails as usual. The
``kafka`` profile is empty: every check must pass.

``load("korvet")`` and ``load("kfake")`` read the files shipped in
``korvet/conformance/profiles/``; any other argument is a path.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


class ProfileError(ValueError):
    """A profile file that cannot be read or does not follow the format."""


@dataclass(frozen=True, slots=True)
class Excuse:
    key: str
    patterns: tuple[str, ...]
    reason: str
    reference: str
    # differential only: the (subject's, Kafka's) value pairs it covers; empty: any values
    values: tuple[tuple[Any, Any], ...] = ()

    def covers(self, subject: Any, oracle: Any) -> bool:
        return not self.values or (subject, oracle) in self.values

    def matches(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.patterns)


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    about: str
    excuses: tuple[Excuse, ...] = ()
    differential: tuple[Excuse, ...] = ()
    origin: str = "built in"

    def excuse_for(self, check_name: str) -> Excuse | None:
        """The first excuse naming ``check_name`` (None: the check must pass)."""
        return next((e for e in self.excuses if e.matches(check_name)), None)

    def field_excuse(self, path: str, subject: Any = None, oracle: Any = None) -> Excuse | None:
        """The first differential excuse with a field pattern matching ``path`` (``Api.field.*.sub``):
        segment by segment, so ``Metadata.topics.*`` (the topic entries) does not match
        ``Metadata.topics.*.error_code``; ``*`` in a pattern matches one segment. An excuse with
        ``values`` covers only those (``subject``, ``oracle``) value pairs at its fields."""
        return next((e for e in self.differential
                     if any(_segments_match(p, path) for p in e.patterns)
                     and e.covers(subject, oracle)), None)

    def unmatched(self, check_names: Iterable[str]) -> list[str]:
        """Patterns of this profile that name no check in ``check_names`` (a typo, or a removed check)."""
        names = list(check_names)
        return [f"{e.key}: {p}" for e in self.excuses for p in e.patterns
                if not any(fnmatch.fnmatchcase(n, p) for n in names)]

    def excused_checks(self, check_names: Iterable[str]) -> dict[str, Excuse]:
        out: dict[str, Excuse] = {}
        for name in check_names:
            excuse = self.excuse_for(name)
            if excuse is not None:
                out[name] = excuse
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "about": self.about, "origin": self.origin,
            "excuses": {e.key: {"checks": list(e.patterns), "reason": e.reason, "reference": e.reference}
                        for e in self.excuses},
            "differential": {e.key: {"fields": list(e.patterns), "reason": e.reason,
                                     "reference": e.reference,
                                     **({"values": [list(v) for v in e.values]} if e.values else {})}
                             for e in self.differential},
        }


def _segments_match(pattern: str, path: str) -> bool:
    wanted, got = pattern.split("."), path.split(".")
    return len(wanted) == len(got) and all(fnmatch.fnmatchcase(g, w)
                                           for w, g in zip(wanted, got, strict=True))


KAFKA = Profile("kafka", "every check must pass: Apache Kafka's behaviour")


def shipped() -> dict[str, str]:
    """Names of the profiles shipped with the suite -> their ``about`` line (``kafka`` included)."""
    out = {"kafka": KAFKA.about}
    folder = resources.files("korvet.conformance.profiles")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            out[entry.name.removesuffix(".yaml")] = parse(entry.read_text(), entry.name).about
    return out


def load(spec: str | Path) -> Profile:
    """A shipped profile by name (``kafka``, ``korvet``, ``kfake``) or a YAML file by path."""
    text_spec = str(spec)
    if text_spec == "kafka":
        return KAFKA
    if "/" not in text_spec and not text_spec.endswith((".yaml", ".yml")):
        entry = resources.files("korvet.conformance.profiles").joinpath(f"{text_spec}.yaml")
        if not entry.is_file():
            raise ProfileError(f"no profile named {text_spec!r} (shipped: {', '.join(shipped())}; "
                               "or give a YAML file's path)")
        return parse(entry.read_text(), f"shipped profile {text_spec}")
    path = Path(text_spec)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from exc
    return parse(text, str(path))


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(f"{where}: '{key}' must be a non-empty text")
    return " ".join(value.split())


def _excuses(section: Any, list_key: str, where: str) -> tuple[Excuse, ...]:
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise ProfileError(f"{where}: expected a mapping of keys to excuses")
    out = []
    for key, entry in section.items():
        here = f"{where}.{key}"
        if not isinstance(entry, Mapping):
            raise ProfileError(f"{here}: expected a mapping with {list_key}, reason and reference")
        allowed = {list_key, "reason", "reference"} | ({"values"} if list_key == "fields" else set())
        unknown = set(entry) - allowed
        if unknown:
            raise ProfileError(f"{here}: unknown keys {sorted(unknown)} "
                               f"(expected {', '.join(sorted(allowed))})")
        raw = entry.get(list_key)
        if isinstance(raw, str):
            raw = [raw]
        patterns = [p for p in raw if isinstance(p, str) and p] if isinstance(raw, list) else []
        if not patterns or len(patterns) != len(raw or []):
            raise ProfileError(f"{here}: '{list_key}' must be a non-empty list of names or globs")
        out.append(Excuse(str(key), tuple(patterns), _text(entry, "reason", here),
                          _text(entry, "reference", here), _value_pairs(entry.get("values"), here)))
    return tuple(out)


def _value_pairs(raw: Any, where: str) -> tuple[tuple[Any, Any], ...]:
    """A differential excuse's optional ``values``: a list of [this broker's, Kafka's] pairs."""
    if raw is None:
        return ()
    if (not isinstance(raw, list) or not raw
            or not all(isinstance(p, list) and len(p) == 2 for p in raw)):
        raise ProfileError(f"{where}: 'values' must be a non-empty list of [this broker's value, "
                           "Kafka's value] pairs")
    return tuple((a, b) for a, b in raw)


def parse(text: str, origin: str) -> Profile:
    """A profile from YAML text (``origin`` names it in error messages)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{origin}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ProfileError(f"{origin}: expected a mapping with profile, about and excuses")
    unknown = set(data) - {"profile", "about", "excuses", "differential"}
    if unknown:
        raise ProfileError(f"{origin}: unknown keys {sorted(unknown)}")
    return Profile(
        name=_text(data, "profile", origin),
        about=_text(data, "about", origin),
        excuses=_excuses(data.get("excuses"), "checks", f"{origin}: excuses"),
        differential=_excuses(data.get("differential"), "fields", f"{origin}: differential"),
        origin=origin,
    )

