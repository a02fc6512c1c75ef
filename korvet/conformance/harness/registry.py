"""The check registry: every check's name, API, asserted behaviour, source and requirements.

A check is a function ``fn(ctx) -> None`` that raises ``CheckFailed`` when the
broker does not behave as Kafka does (``CheckSkipped`` when it cannot run here,
e.g. a client tool is missing; both in ``outcomes.py``). It is registered with
``@check(...)``, which records what a reader of the catalogue needs:

- ``name``: dotted and stable, ``<api>.<topic>.<behaviour>`` (``produce.acks_all.offsets_consecutive``);
- ``api``: the API (or client, or history) it exercises, which groups the catalogue;
- ``asserts``: the Kafka behaviour, in one sentence a broker user would recognise;
- ``source``: where Kafka says so (protocol guide, KIP, or the Kafka code path);
- ``kafka_exact``: the check assumes Kafka's exact offset arithmetic (offsets start
  at 0 and are dense). No other check may assume that;
- ``requires``: a broker setting the check depends on, stated for implementers;
- ``group_protocol``: the check drives the classic consumer-group protocol;
- ``slow``: the check waits out a broker's timer (a session timeout, a JoinGroup held) or
  starts a JVM: seconds on every broker. ``slow_first`` starts these first, so that a run's
  last seconds are not one long check started late while the other workers idle.

Which checks an implementation is excused from is not here: it is data, in a profile
(``profile.py``; Korvet's and kfake's ship in ``korvet/conformance/profiles/``).

Check modules register themselves when imported. ``load_checks`` imports every module
of the ``korvet.conformance.checks`` package (subpackages included), found on disk: a
new module is a new family, with no list to add it to, and the harness imports no
check module by name.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from korvet.conformance.harness.context import CheckContext

CheckFn = Callable[[CheckContext], None]
CHECKS_PACKAGE = "korvet.conformance.checks"

_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    api: str
    asserts: str
    source: str
    fn: CheckFn = field(repr=False, compare=False)
    kafka_exact: bool = False
    requires: str = ""
    group_protocol: bool = False
    serial: bool = False  # runs while no other check runs (timing or Hypothesis)
    timeout: float = 90.0
    slow: bool = False  # seconds on every broker: started first (``slow_first``)

    @property
    def family(self) -> str:
        """The first part of the name: the group a check is listed under."""
        return self.name.split(".", 1)[0]


REGISTRY: dict[str, Check] = {}


def check(
    name: str,
    *,
    api: str,
    asserts: str,
    source: str,
    kafka_exact: bool = False,
    requires: str = "",
    group_protocol: bool = False,
    serial: bool = False,
    timeout: float = 90.0,
    slow: bool = False,
) -> Callable[[CheckFn], CheckFn]:
    """Register a check function under ``name`` (see the module docstring)."""

    def register(fn: CheckFn) -> CheckFn:
        if not _NAME.fullmatch(name):
            raise ValueError(f"check name {name!r} is not dotted lower_case")
        if name in REGISTRY:
            raise ValueError(f"check {name!r} is registered twice")
        if not asserts.strip() or not source.strip():
            raise ValueError(f"check {name!r} needs what it asserts and its source")
        REGISTRY[name] = Check(
            name=name, api=api, asserts=" ".join(asserts.split()), source=" ".join(source.split()),
            fn=fn, kafka_exact=kafka_exact, requires=requires,
            group_protocol=group_protocol, serial=serial, timeout=timeout, slow=slow,
        )
        return fn

    return register


def load_checks() -> dict[str, Check]:
    """Import every check module (they register themselves) and return the registry."""
    package = importlib.import_module(CHECKS_PACKAGE)
    for module in pkgutil.walk_packages(package.__path__, f"{CHECKS_PACKAGE}."):
        importlib.import_module(module.name)
    return REGISTRY


def select(checks: Iterable[Check], patterns: Iterable[str] | None) -> list[Check]:
    """Checks whose name matches any glob in ``patterns`` (all when there is none), by name."""
    wanted = [p for p in (patterns or []) if p]
    chosen = [c for c in checks if not wanted or any(fnmatch.fnmatchcase(c.name, p) for p in wanted)]
    return sorted(chosen, key=lambda c: c.name)


def slow_first(checks: Iterable[Check]) -> list[Check]:
    """``checks`` by name, the slow ones first: the runner starts checks in the order given."""
    return sorted(checks, key=lambda c: (not c.slow, c.name))
