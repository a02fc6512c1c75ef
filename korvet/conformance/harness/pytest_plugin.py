"""The conformance suite as pytest tests: ``pytest --pyargs korvet.conformance --bootstrap HOST:PORT``.

Installed with ``korvet[conformance]`` (a ``pytest11`` entry point), this plugin adds the
options below and turns every selected check into one test of
``korvet/conformance/test_checks.py``, named after the check. All selected checks run once,
in parallel, when the first test needs them (as ``korvet conformance`` runs them); each test
then reports its check: a pass passes, a failure fails with what the check observed and its
last requests and responses, a check the profile excuses is an expected failure (xfail), and
a check that cannot run here is skipped with its reason. pytest's own ``--junitxml FILE``
gives CI a JUnit file with one test case per check.

    pytest --pyargs korvet.conformance --bootstrap 127.0.0.1:9092 \\
        --conformance-profile mybroker.yaml --conformance-only 'produce.*' --junitxml conformance.xml

``--conformance-security FILE`` (as ``korvet conformance --security FILE``) runs the
``security.*`` checks against the broker's secured listener; without it they are skipped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("korvet-conformance", "Kafka conformance suite (korvet.conformance)")
    group.addoption("--bootstrap", metavar="HOST:PORT", help="the broker the conformance checks run against")
    group.addoption("--conformance-profile", default="kafka", metavar="NAME|FILE",
                    help="expected differences: kafka (none), korvet, kfake or a YAML file")
    group.addoption("--conformance-only", action="append", default=[], metavar="GLOB",
                    help="run only the checks whose name matches (repeatable)")
    group.addoption("--conformance-jobs", type=int, default=8, help="checks running at the same time")
    group.addoption("--conformance-security", metavar="FILE",
                    help="YAML naming the broker's SASL_SSL listener, its CA file and an admin user: "
                         "runs the security.* checks (skipped without it; docs/users/security.md)")


def _selected(config: pytest.Config) -> list[Any]:
    from korvet.conformance.harness.registry import load_checks, select

    patterns = [p.strip() for value in config.getoption("--conformance-only") for p in value.split(",")]
    return select(load_checks().values(), [p for p in patterns if p])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_check" in metafunc.fixturenames:
        names = [c.name for c in _selected(metafunc.config)]
        metafunc.parametrize("conformance_check", names, ids=names)


@pytest.fixture(scope="session")
def conformance_results(request: pytest.FixtureRequest) -> dict[str, Any]:
    from korvet.conformance.harness import runner
    from korvet.conformance.harness.profile import load

    bootstrap = request.config.getoption("--bootstrap")
    if not bootstrap:
        pytest.skip("no broker to check: give --bootstrap HOST:PORT")
    checks = _selected(request.config)
    security = None
    target = request.config.getoption("--conformance-security")
    if target:
        from korvet.conformance.harness.security import SecurityTarget

        try:
            security = SecurityTarget.load(target)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    report = runner.run(bootstrap, checks, profile=load(request.config.getoption("--conformance-profile")),
                        jobs=request.config.getoption("--conformance-jobs"), security=security)
    return {r.name: r for r in report.results}


def outcome(result: Any) -> None:
    """Report one check's result as the outcome of the running test."""
    from korvet.conformance.harness.runner import EXCUSED, FAIL, SKIP

    if result.status == SKIP:
        pytest.skip(result.message)
    if result.status == EXCUSED:
        pytest.xfail(f"excused ({result.excuse_key}): {result.excuse} -- observed: {result.message}")
    if result.status == FAIL:
        lines = [result.message, f"asserts: {result.asserts}", f"source: {result.source}"]
        if result.details:
            lines.append(json.dumps(result.details, indent=1, default=str)[:4000])
        for exchange in result.exchanges:
            lines += [f"{exchange['api']} (correlation {exchange['correlation_id']})",
                      "  request:  " + json.dumps(exchange["request"], default=str)[:1500],
                      "  response: " + json.dumps(exchange["response"], default=str)[:1500]]
        pytest.fail("\n".join(lines), pytrace=False)
