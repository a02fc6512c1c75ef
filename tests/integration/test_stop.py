"""`korvet serve` stops promptly on SIGTERM while Kafka clients stay connected, as a Kafka
broker does: clients never close their connections themselves, so a broker that waited for
them (Python 3.12's Server.wait_closed does) or that kept serving a connection whose task
missed its cancel (a fetch awaiting its read-ahead) would only end with SIGKILL.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from korvet.process import stop_process
from tests.conftest import ROOT, KorvetProcess
from tests.integration.test_broker_behaviour import request
from tests.integration.test_clients import create_topic
from tests.support.wire import WireClient

pytestmark = [pytest.mark.clients, pytest.mark.slow]

PROMPT_SECONDS = 4.0  # under the listener's 5 s bound: no connection needed it


def _stop_seconds(broker: KorvetProcess) -> float:
    assert broker.process is not None
    started = time.monotonic()
    stop_process(broker.process, signal.SIGTERM, timeout=60)
    broker.process = None
    return time.monotonic() - started


@pytest.mark.parametrize("round_", range(3))
def test_sigterm_stops_the_broker_while_clients_keep_their_connections(
        tmp_path: Path, round_: int) -> None:
    broker = KorvetProcess(tmp_path / "broker").start()
    topics = (f"flowing-{round_}", f"empty-{round_}", f"trickled-{round_}")
    for topic, partitions in zip(topics, (2, 1, 1), strict=True):
        create_topic(broker.bootstrap, topic, partitions)
    idle = WireClient(broker.bootstrap)  # connected, asks nothing more
    clients = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.stop_clients", broker.bootstrap, *topics,
         f"stop-{round_}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    try:
        assert clients.stdout is not None
        assert clients.stdout.readline().strip() == "flowing", broker.log_tail()
        time.sleep(2 + round_)  # records flow: fetches read ahead, some wait for data
        took = _stop_seconds(broker)
        log = broker.log_path.read_text(errors="replace") if broker.log_path else ""
        assert took < PROMPT_SECONDS, f"SIGTERM took {took:.1f} s\n{broker.log_tail()}"
        assert "had not ended" not in log
        assert "embedded Redis stopped" in log
    finally:
        clients.kill()
        clients.wait()
        idle.close()
        broker.stop()


def test_the_broker_stops_when_its_embedded_redis_dies(tmp_path: Path) -> None:
    """kill -9 of the embedded redis-server (the process an out-of-memory killer picks):
    the broker used to stay up with nothing to serve from, liveness UP, readiness down for
    good. It now exits with code 1 and says why, so a supervisor restarts both; the data
    folder is usable again at once."""
    broker = KorvetProcess(tmp_path / "broker").start()
    assert broker.process is not None
    children = subprocess.run(["pgrep", "-P", str(broker.process.pid), "redis-server"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert len(children) == 1, children
    subprocess.run(["kill", "-9", children[0]], check=True)
    try:
        code = broker.process.wait(timeout=15)
    finally:
        if broker.process.poll() is None:
            broker.process.kill()
    broker.process = None
    assert code == 1
    assert "the embedded Redis exited (exit code -9) while the broker served" in broker.log_tail()
    again = KorvetProcess(tmp_path / "broker").start()
    try:
        with WireClient(again.bootstrap) as client:
            assert client.request(request(18, 0)).error_code == 0
    finally:
        again.stop()


def test_the_embedded_redis_port_can_be_pinned(tmp_path: Path) -> None:
    """redis.embedded-port: the embedded Redis listens where it is told (a firewall rule or
    a port range can name it); a port in use is a clear start-up error, not another port."""
    from korvet.process import free_port

    port = free_port()
    broker = KorvetProcess(tmp_path / "one", extra_args=["--redis-embedded-port", str(port)])
    broker.start()
    try:
        assert broker.redis_url == f"redis://127.0.0.1:{port}/0"
        second = KorvetProcess(tmp_path / "two", extra_args=["--redis-embedded-port", str(port)])
        with pytest.raises(RuntimeError, match="did not start"):
            second.start(timeout=30)
        assert second.process is not None and second.process.wait(10) == 2
        assert f"did not start on port {port} (redis.embedded-port: is it in use?)" in (
            second.log_tail())
    finally:
        broker.stop()
