"""`korvet faults run`, short, with several brokers: three ``--multi-broker`` brokers on one
Redis (each behind its own proxy: kill -9, SIGSTOP past the lease, Redis restart, one broker
cut off from Redis, slow Redis) and three on a Redis Cluster (kill -9, SIGSTOP, a manual
failover, a master killed and rejoining, ``redis.wait-replicas`` 1). The checker finds no
anomaly in either. The cluster run found a duplicate of an idempotent producer before
appends kept their order across a MOVED (korvet/storage/cluster_pipe.py), and idempotent
producers stopped by librdkafka's fatal "sequence desynchronization" before they kept it
across a CLUSTERDOWN from the same master.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_fault_runs import assert_clean, fault_run

pytest.importorskip("confluent_kafka")


def test_three_brokers_on_one_redis_under_every_fault_lose_nothing(tmp_path: Path) -> None:
    assert_clean(*fault_run(tmp_path, "--topology", "shared", "--seconds", "45", "--seed", "2"),
                 kinds={"broker-kill", "broker-pause", "redis-restart", "redis-cut", "redis-slow"})


def test_three_brokers_on_a_redis_cluster_under_every_fault_lose_nothing(tmp_path: Path) -> None:
    code, figures, output = fault_run(tmp_path, "--topology", "cluster", "--seconds", "40",
                                      "--seed", "2")
    assert_clean(code, figures, output,
                 kinds={"broker-kill", "broker-pause", "failover", "master-kill"})
    # Not asserted here: no fatal producer error. The every-fault run still meets librdkafka's
    # fatal "sequence desynchronization" now and then around a CLUSTER FAILOVER (once in the
    # suite's run of 2026-11-29: seed 2, after the failover at 24.8 s), a case the ordering fix
    # for CLUSTERDOWN does not cover; open (docs/users/fault-runs.md). Master kills alone are
    # held to it below.


def test_idempotent_producers_live_through_redis_cluster_master_kills(tmp_path: Path) -> None:
    """Master kills only: until the killed master's replica is promoted every master answers
    CLUSTERDOWN, and a batch refused so was overtaken by the next one of its partition; the
    run then reported no anomaly, but librdkafka stopped idempotent producers with a fatal
    "sequence desynchronization" (three in this run's three kills before the fix)."""
    code, figures, output = fault_run(tmp_path, "--topology", "cluster", "--faults",
                                      "master-kill", "--seconds", "30", "--seed", "3")
    assert_clean(code, figures, output, kinds={"master-kill"})
    assert "fatal producer error" not in output, output
