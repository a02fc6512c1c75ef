"""`korvet faults run|check`: a fault-injection run with a history checker (docs/users/fault-runs.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TOPOLOGY_NAMES = ("single", "shared", "cluster", "kafka")


def add_parser(commands: Any) -> None:
    faults = commands.add_parser(
        "faults", help="fault-injection runs with a history checker, on Korvet and on Kafka",
        description="Run producers (acks=all, idempotent and not) and a consumer group against "
                    "a topology started here while faults are injected at random, then check "
                    "the whole history: lost acknowledged records, duplicates beyond the "
                    "idempotence promise, records out of order, consumer offsets going back, "
                    "partitions owned twice in a generation, committed offsets going back; "
                    "with --workload transactions, transactional producers and read_committed "
                    "readers: aborted reads, torn transactions, lost committed transactions, "
                    "reads beyond the last stable offset. See docs/users/fault-runs.md.")
    sub = faults.add_subparsers(dest="faults_command", required=True)
    run = sub.add_parser("run", help="one run; exit 1 when the checker finds an anomaly",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("--topology", choices=TOPOLOGY_NAMES, default="single",
                     help="single: one broker on its own Redis; shared: three --multi-broker "
                          "brokers on one Redis; cluster: three on a Redis Cluster; kafka: "
                          "Apache Kafka (one broker), the baseline")
    run.add_argument("--workload", choices=("records", "transactions"), default="records",
                     help="records: producers (acks=all, idempotent and not) and a consumer "
                          "group; transactions: three transactional producers (some "
                          "transactions aborted) and two read_committed readers")
    run.add_argument("--seconds", type=float, default=60.0, help="how long faults are injected")
    run.add_argument("--seed", type=int, default=1, help="the faults' order, gaps and durations")
    run.add_argument("--faults", default=None, metavar="KIND,KIND",
                     help="the fault kinds (default: every kind the topology takes); 'none' for "
                          "a run without faults; plant-loss (single, shared) deletes stored "
                          "records in Redis behind the brokers' back, for checking the checker")
    run.add_argument("--partitions", type=int, default=4)
    run.add_argument("--rate", type=float, default=100.0, help="records per second per producer "
                     "(records: three producers, two idempotent, one not; transactions: three "
                     "transactional producers, at most)")
    run.add_argument("--history", type=Path, default=None,
                     help="write the history (one JSON event a line) here")
    run.add_argument("--summary", type=Path, default=None,
                     help="write the figures (JSON) here")
    run.add_argument("--work-dir", type=Path, default=None,
                     help="brokers' data and logs (default: a temporary folder, removed after a "
                          "clean run)")
    run.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    run.add_argument("--client-log", action="store_true",
                     help="write the producers' librdkafka log (debug eos,msg; with "
                          "--workload transactions: eos) to producers.log in the work directory")
    run.set_defaults(func=_run)
    check = sub.add_parser("check", help="check a history written by `run --history`")
    check.add_argument("history", type=Path)
    check.set_defaults(func=_check)


def _run(args: argparse.Namespace) -> int:
    try:
        from korvet.faults.runner import RunParams, render, run
        from korvet.faults.targets import FaultError
        from korvet.jvm.kafka_server import KafkaToolsError
    except ModuleNotFoundError as exc:
        print(f"korvet faults: {exc.name} is not installed; fault runs need the broker and a "
              "Kafka client: pip install 'korvet[faults]'", file=sys.stderr)
        return 2
    kinds = None if args.faults is None else tuple(
        k.strip() for k in args.faults.split(",") if k.strip() and k.strip() != "none")
    params = RunParams(topology=args.topology, seconds=args.seconds, seed=args.seed,
                       faults=kinds, partitions=args.partitions, rate=args.rate,
                       history=args.history, work_dir=args.work_dir, keep=args.keep,
                       client_log=args.client_log, workload=args.workload)
    try:
        result = run(params, say=lambda line: print(line, flush=True))
    except (FaultError, KafkaToolsError) as exc:
        print(f"korvet faults: {exc}", file=sys.stderr)
        return 2
    print(render(result), flush=True)
    if args.summary is not None:
        args.summary.write_text(json.dumps(result.summary(), indent=2) + "\n")
    return 0 if result.passed else 1


def _check(args: argparse.Namespace) -> int:
    from korvet.faults.history import check, read_history

    with args.history.open() as lines:
        report = check(read_history(lines))
    print(f"{report.sent:,} sent, {report.acknowledged:,} acknowledged, {report.stored:,} "
          f"stored, {report.consumed:,} read, {report.commits:,} commits; "
          f"allowed: {report.allowed_duplicates:,} duplicates, {report.allowed_reorders:,} reorders "
          "of non-idempotent producers")
    if report.transactions:
        print(f"transactions: {sum(report.transactions.values()):,} "
              f"({report.in_transactions:,} records); the client was told: "
              + ", ".join(f"{fate} {n:,}" for fate, n in sorted(report.transactions.items())))
    if report.unmarked:
        print(f"Kafka completed {report.unmarked} transaction(s) without their markers on some "
              "partitions; allowed, as Kafka's: "
              + ("; ".join(f"{a.kind}: {a.detail}" for a in report.allowed_unmarked) or "none"))
    for anomaly in report.anomalies:
        print(f"{anomaly.kind}: {anomaly.detail}")
    print("anomalies: " + (", ".join(f"{k} {n}" for k, n in report.by_kind.items()) or "none"))
    return 0 if report.clean else 1
