"""`korvet faults run --topology kafka`, short: the same clients and checker against Apache
Kafka (one broker from the pinned jars, kill -9 and restart, SIGSTOP), the baseline every
Korvet run is compared with: it finds no anomaly either.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_fault_runs import assert_clean, fault_run

pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka


def test_kafka_under_kill_and_pause_loses_nothing(tmp_path: Path) -> None:
    assert_clean(*fault_run(tmp_path, "--topology", "kafka", "--seconds", "30", "--seed", "2"),
                 kinds={"broker-kill", "broker-pause"})
