"""A local SparkSession that can read and write Kafka topics (and so Korvet topics).

Spark's Kafka connector is not part of pyspark: its jars are the pinned ``spark``
set (``korvet/jvm/locks/spark.lock``), fetched by the set-up with
``korvet jars fetch spark`` and handed to Spark with ``spark.jars``. Nothing is
resolved or downloaded when a session starts (``spark.jars.packages`` would make
Ivy do exactly that).

The settings below are the ones a shared 2-core machine needs: the driver binds
to loopback (the host name resolves to a non-loopback address on these
machines), the web UI is off (it would take port 4040 or the next free one),
Ivy and the SQL warehouse live in a private work folder instead of ``$HOME`` and
the current directory, and the Python workers run the interpreter that runs
this code.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from korvet.jvm import maven

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAR_SET = "spark"


class SparkSetupError(RuntimeError):
    """Spark cannot be started as configured; the message says what to do."""


@dataclass(frozen=True, slots=True)
class SparkSettings:
    master: str = "local[2]"
    app_name: str = "korvet-pipeline"
    # Few shuffle partitions: the aggregates are small, and every partition is a state
    # store and a task per micro-batch.
    shuffle_partitions: int = 2
    driver_memory: str = "512m"
    # Ivy cache and SQL warehouse; a new temporary folder when None.
    work_dir: Path | None = None
    log_level: str = "WARN"


def kafka_connector_jars() -> list[str]:
    """The verified jar files of Spark's Kafka connector; never downloads."""
    try:
        if not maven.present(JAR_SET):
            raise SparkSetupError(
                f"the '{JAR_SET}' jars (Spark's Kafka connector) are not all in {maven.jar_root()}: "
                f"run `korvet jars fetch {JAR_SET}` (part of `make setup-test`)"
            )
        return maven.classpath(JAR_SET).split(os.pathsep)
    except maven.JarError as exc:
        raise SparkSetupError(str(exc)) from exc


def start_session(settings: SparkSettings | None = None) -> SparkSession:
    """Start (or return the already running) SparkSession with the Kafka connector."""
    settings = settings or SparkSettings()
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkSetupError(
            "pyspark is not installed: install the spark extra (pip install 'korvet[spark]')"
        ) from exc
    jars = kafka_connector_jars()
    work_dir = settings.work_dir or Path(tempfile.mkdtemp(prefix="korvet-spark-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    # Read by the JVM launcher and by the Python workers it forks: they must be set
    # before the first session starts the JVM.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master(settings.master)
        .appName(settings.app_name)
        .config("spark.jars", ",".join(jars))
        .config("spark.jars.ivy", str(work_dir / "ivy"))
        .config("spark.sql.warehouse.dir", str(work_dir / "warehouse"))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.ui.enabled", "false")
        # No stage progress bars on the console: they overwrite the pipeline's own lines.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        # Window bounds are written as UTC instants whatever the machine's zone.
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel(settings.log_level)
    return session
