"""A built wheel, installed into a fresh virtualenv, gives a working `korvet serve`.

The wheel is built once per run without build isolation (the project venv's setuptools,
the version [build-system] pins) and installed offline: ``pip install --no-index
--find-links .wheelhouse`` (``make setup-test`` fills the wheelhouse with the
broker's dependencies). The broker then runs from a folder outside the checkout, so it
can only use what the wheel carries (the Lua scripts, the lock files).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from korvet.process import stop_process
from tests.conftest import ROOT
from tests.integration.clients import confluent_consume, confluent_produce, make_records

WHEELHOUSE = ROOT / ".wheelhouse"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the checkout with ``venv/`` (korvet installed from its wheel)."""
    assert WHEELHOUSE.is_dir(), "no .wheelhouse: run `make setup-test` (it fills it)"
    work = tmp_path_factory.mktemp("packaging")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(work / "dist"), str(ROOT)],
                   check=True, cwd=work, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    (wheel,) = (work / "dist").glob("korvet-*.whl")
    subprocess.run([str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--no-index", "--find-links", str(WHEELHOUSE), f"{wheel}[server]"],
                   check=True, cwd=work, capture_output=True)
    return work


def test_the_wheel_carries_the_broker_and_its_data_files(installed: Path) -> None:
    (wheel,) = (installed / "dist").glob("korvet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for lua in ("append.lua", "bounds.lua", "create_topic.lua", "delete_topic.lua"):
        assert f"korvet/storage/lua/{lua}" in names
    assert "korvet/jvm/locks/kafka.lock" in names
    assert "korvet/py.typed" in names
    assert not any(n.startswith(("tests/", "spec/", "docs/")) for n in names)
    where = subprocess.run([str(installed / "venv" / "bin" / "python"), "-c",
                            "import korvet; print(korvet.__file__)"],
                           capture_output=True, text=True, check=True, cwd=installed).stdout
    assert where.startswith(str(installed / "venv")), where
    # `python -m korvet` is the `korvet` command too
    version = subprocess.run([str(installed / "venv" / "bin" / "python"), "-m", "korvet",
                              "--version"], capture_output=True, text=True, check=True,
                             cwd=installed).stdout
    assert version.startswith("korvet "), version


@pytest.fixture
def served(installed: Path) -> Iterator[tuple[int, int]]:
    data = installed / "data"
    redis_server = shutil.which("redis-server")
    assert redis_server is not None
    env = {"PATH": f"{installed / 'venv' / 'bin'}:{Path(redis_server).parent}",
           "HOME": os.environ.get("HOME", "/root")}
    process = subprocess.Popen(
        [str(installed / "venv" / "bin" / "korvet"), "serve", "--port", "0", "--port-file",
         "kafka.port", "--http-port", "0", "--http-port-file", "http.port", "--data-dir",
         str(data)], cwd=installed, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (installed / "kafka.port").is_file() and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0].decode()
            time.sleep(0.05)
        yield int((installed / "kafka.port").read_text()), int(
            (installed / "http.port").read_text())
    finally:
        stop_process(process)


def test_the_installed_korvet_serves_outside_the_checkout(served: tuple[int, int]) -> None:
    kafka_port, http_port = served
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health/readiness",
                                timeout=10) as response:
        assert response.status == 200
    bootstrap = f"127.0.0.1:{kafka_port}"
    records = make_records(20, 1)
    confluent_produce(bootstrap, "packaged", records)
    got = confluent_consume(bootstrap, "packaged", 1, 20)
    assert [g.value for g in got] == [r.value for r in records]


def test_without_redis_server_serve_says_how_to_get_one(installed: Path) -> None:
    result = subprocess.run(
        [str(installed / "venv" / "bin" / "korvet"), "serve", "--port", "0", "--http-port", "0",
         "--data-dir", str(installed / "no-redis")],
        cwd=installed, env={"PATH": str(installed / "venv" / "bin")}, capture_output=True,
        text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "'redis-server' not found on PATH" in result.stderr
    assert "apt-get install redis-server" in result.stderr
    assert "KORVET_REDIS_URI" in result.stderr
