"""`korvet faults run`, short, on one broker: under every fault it takes the checker finds
no anomaly, and acknowledged records deleted in Redis behind the broker's back are reported
as lost (the run exits 1). The other topologies: test_fault_runs_several_brokers.py, and
Apache Kafka (the baseline): test_fault_runs_kafka.py.

Each run is the real command in a child process, as a user runs it, with its figures
written to a JSON summary that the test reads. A seed fixes the faults' order and lengths;
the scheduler deals every kind of the topology once before any twice, so a run of this
length meets each kind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KORVET, ROOT

pytest.importorskip("confluent_kafka")


def fault_run(tmp_path: Path, *args: str, timeout: float = 400) -> tuple[int, dict[str, Any], str]:
    summary = tmp_path / "summary.json"
    done = subprocess.run([*KORVET, "faults", "run", "--summary", str(summary),
                           "--work-dir", str(tmp_path / "work"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    output = done.stdout + done.stderr
    assert summary.is_file(), output
    return done.returncode, json.loads(summary.read_text()), output


def assert_clean(code: int, figures: dict[str, Any], output: str, kinds: set[str]) -> None:
    """No anomaly, every fault kind met, records acknowledged and the group read them all."""
    assert code == 0, output
    assert figures["anomalies"] == {} and figures["errors"] == [], output
    assert set(figures["faults"]) == kinds, output
    assert figures["acknowledged"] > 2000, output
    assert figures["consumed"] >= figures["acknowledged"], output
    assert set(figures["costs"]) == kinds, output


def test_one_broker_under_every_fault_loses_nothing(tmp_path: Path) -> None:
    assert_clean(*fault_run(tmp_path, "--topology", "single", "--seconds", "35", "--seed", "11"),
                 kinds={"broker-kill", "broker-pause", "redis-restart", "redis-cut", "redis-slow"})


def test_acknowledged_records_deleted_behind_the_broker_are_reported_lost(tmp_path: Path) -> None:
    code, figures, output = fault_run(tmp_path, "--topology", "single", "--seconds", "10",
                                      "--seed", "5", "--faults", "plant-loss")
    assert code == 1, output
    assert figures["faults"]["plant-loss"] >= 1
    assert figures["anomalies"].get("lost", 0) >= 1, output
    assert "lost (acknowledged, not readable at the end)" in output
