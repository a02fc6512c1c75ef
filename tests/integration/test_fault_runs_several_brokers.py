"""`korvet faults run`, short, with several brokers: three ``--multi-broker`` brokers on one
Redis (each behind its own proxy: kill -9, SIGSTOP past the lease, Redis restart, one broker
cut off from Redis, slow Redis) and three on a Redis Cluster (kill -9, SIGSTOP, a manual
failover, a master killed and rejoining, ``redis.wait-replicas`` 1). The checker finds no
anomaly in either. The cluster run found a duplicate of an idempotent producer before
appends kept their order across a MOVED (korvet/storage/cluster_pipe.py).
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
    assert_clean(*fault_run(tmp_path, "--topology", "cluster", "--seconds", "40", "--seed", "2"),
                 kinds={"broker-kill", "broker-pause", "failover", "master-kill"})
